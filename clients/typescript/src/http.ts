// The JSON-over-HTTP transport shared by Client and Worker: the global
// fetch, the bearer token, the API's error body.

import { RedriveError } from "./errors.js";

/** Where the server is and how to authenticate to it. */
export interface ConnectionOptions {
  /** The server's base URL, e.g. "http://127.0.0.1:8080". */
  url: string;
  /**
   * The API's bearer token (serve's --token, or a named token of --tokens);
   * none for a server on loopback without a token. Workers need the
   * worker (or admin) role.
   */
  token?: string;
  /** A fetch to use instead of the global one (a proxy, a test). */
  fetch?: typeof fetch;
}

/** Sends JSON requests to one server and decodes its answers. */
export class Transport {
  readonly base: string;
  readonly #token: string | undefined;
  readonly #fetch: typeof fetch;

  constructor(options: ConnectionOptions) {
    if (options === null || typeof options !== "object") {
      throw new TypeError("options: expected an object with url (and token)");
    }
    if (typeof options.url !== "string" || options.url === "") {
      throw new TypeError("url: the server's base URL is required, e.g. http://127.0.0.1:8080");
    }
    let parsed: URL;
    try {
      parsed = new URL(options.url);
    } catch {
      throw new TypeError(`url: ${JSON.stringify(options.url)} is not a URL`);
    }
    if (parsed.protocol !== "http:" && parsed.protocol !== "https:") {
      throw new TypeError(`url: ${JSON.stringify(options.url)} is not http(s)`);
    }
    this.base = options.url.replace(/\/+$/, "");
    if (options.token !== undefined && (typeof options.token !== "string" || /[\r\n]/.test(options.token))) {
      throw new TypeError("token: expected a string on one line");
    }
    this.#token = options.token === "" ? undefined : options.token;
    this.#fetch = options.fetch ?? globalThis.fetch;
    if (typeof this.#fetch !== "function") {
      throw new TypeError("no global fetch: Node.js 20 or later is required");
    }
  }

  /**
   * Sends method path with body as JSON (none when undefined) and answers
   * the decoded JSON of a 2xx answer. Any other answer throws a
   * RedriveError with the server's code, message and field.
   */
  async request<T>(method: string, path: string, body?: unknown, signal?: AbortSignal): Promise<T> {
    const headers: Record<string, string> = { accept: "application/json" };
    if (this.#token !== undefined) headers["authorization"] = `Bearer ${this.#token}`;
    let text: string | undefined;
    if (body !== undefined) {
      headers["content-type"] = "application/json";
      text = JSON.stringify(body);
    }
    const init: RequestInit = { method, headers };
    if (text !== undefined) init.body = text;
    if (signal !== undefined) init.signal = signal;
    const res = await this.#fetch(this.base + path, init);
    const raw = await res.text();
    let decoded: unknown = undefined;
    if (raw !== "") {
      try {
        decoded = JSON.parse(raw);
      } catch {
        if (res.ok) throw new RedriveError(res.status, "malformed_answer", `the answer is not JSON: ${raw.slice(0, 200)}`);
      }
    }
    if (!res.ok) throw errorOf(res.status, decoded, raw);
    return decoded as T;
  }
}

/** Makes the RedriveError of a non-2xx answer. */
export function errorOf(status: number, decoded: unknown, raw: string): RedriveError {
  const e = (decoded as { error?: { code?: unknown; message?: unknown; field?: unknown } } | undefined)?.error;
  if (e && typeof e === "object" && typeof e.code === "string") {
    return new RedriveError(
      status,
      e.code,
      typeof e.message === "string" ? e.message : "",
      typeof e.field === "string" && e.field !== "" ? e.field : undefined,
    );
  }
  return new RedriveError(status, "http_" + status, raw.slice(0, 200).trim() || "no body");
}
