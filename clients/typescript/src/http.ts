// The JSON-over-HTTP transport shared by Client and Worker: node:http with
// a keep-alive agent (or a fetch given instead), the bearer token, the
// API's error body.

import http from "node:http";
import https from "node:https";
import { AnswerTooLargeError, RedriveError } from "./errors.js";

/** The default bound on an answer's body, in bytes (ConnectionOptions.maxAnswerBytes). */
export const DEFAULT_MAX_ANSWER_BYTES = 64 << 20;

/** One call the transport made, as ConnectionOptions.observe sees it. */
export interface CallRecord {
  /** The request's method, e.g. "POST". */
  method: string;
  /** The request's path, e.g. "/v1/worker/lease". */
  path: string;
  /** The request's body before encoding (undefined without one). */
  request: unknown;
  /** The answer's HTTP status. */
  status: number;
  /** The answer's decoded JSON (undefined when empty or not JSON). */
  answer: unknown;
  /** Milliseconds from sending the request to the whole answer read. */
  ms: number;
}

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
  /**
   * A fetch to send the requests with instead of node:http (a proxy, a
   * test). node:http is the default: on Node.js 20 the global fetch takes
   * several times the CPU a call.
   */
  fetch?: typeof fetch;
  /**
   * The node:http(s) agent to send the requests with (default: one of the
   * transport's own, keeping connections alive, closing one left idle
   * for 5 s), of the URL's protocol. Not with fetch: give one or the
   * other.
   */
  agent?: http.Agent;
  /**
   * Milliseconds a call may take, beyond the wait of a long-poll (a lease
   * or cancels call), before it is given up with an error of code
   * ETIMEDOUT (default 30000): a server or proxy that never answers (a
   * half-open connection) does not hold a call, or the worker, forever.
   */
  timeoutMs?: number;
  /**
   * The most bytes of body an answer may have (default 64 MiB): a longer
   * one, said by its content-length or read past the bound, is not read
   * further, and the call throws an AnswerTooLargeError (a broken or
   * hostile server, or something between, cannot make the client read
   * without bound).
   */
  maxAnswerBytes?: number;
  /**
   * Called after each call that got an answer, an error status included
   * (for metrics or logging). An error it throws is told once, as a
   * process warning, and the call stands. Calls that got no
   * answer (a refused connection, an abort) are not observed.
   */
  observe?: (call: CallRecord) => void;
}

/** How Transport.request sends one request. */
export interface SendOptions {
  /**
   * Whether a second copy of the request, should serve have read the
   * first, changes nothing the first did not (a read, a heartbeat, an
   * outcome fenced by its lease token, an enqueue with an idempotency
   * key). Only such a request is sent again when its kept connection is
   * cut before any answer: the cut does not say whether serve read it.
   * Default: true for GET, false otherwise.
   */
  idempotent?: boolean;
  /** Milliseconds the server may wait before answering (a long-poll's wait), added to the time bound. */
  waitMs?: number;
}

/** Sends JSON requests to one server and decodes its answers. */
export class Transport {
  readonly base: string;
  readonly #token: string | undefined;
  readonly #fetch: typeof fetch | undefined;
  readonly #agent: http.Agent;
  readonly #module: typeof http | typeof https;
  readonly #observe: ((call: CallRecord) => void) | undefined;
  readonly #timeoutMs: number;
  readonly #maxAnswer: number;
  #observeFailed = false;

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
    if (/[?#]/.test(options.url)) {
      // The API's paths are appended to the base URL: after a query they
      // would be part of it.
      throw new TypeError(`url: ${JSON.stringify(options.url)}: a base URL has no query or fragment`);
    }
    this.base = options.url.replace(/\/+$/, "");
    if (options.token !== undefined && (typeof options.token !== "string" || /[\r\n]/.test(options.token))) {
      throw new TypeError("token: expected a string on one line");
    }
    this.#token = options.token === "" ? undefined : options.token;
    if (options.fetch !== undefined && typeof options.fetch !== "function") {
      throw new TypeError("fetch: expected a function");
    }
    this.#fetch = options.fetch;
    if (options.observe !== undefined && typeof options.observe !== "function") {
      throw new TypeError("observe: expected a function");
    }
    this.#observe = options.observe;
    const timeoutMs = options.timeoutMs ?? 30_000;
    if (typeof timeoutMs !== "number" || !(timeoutMs > 0) || !Number.isFinite(timeoutMs)) {
      throw new TypeError(`timeoutMs: expected a positive number of milliseconds, got ${String(timeoutMs)}`);
    }
    this.#timeoutMs = timeoutMs;
    const maxAnswer = options.maxAnswerBytes ?? DEFAULT_MAX_ANSWER_BYTES;
    if (typeof maxAnswer !== "number" || !Number.isSafeInteger(maxAnswer) || maxAnswer < 1) {
      throw new TypeError(`maxAnswerBytes: expected a whole number of bytes, at least 1, got ${String(maxAnswer)}`);
    }
    this.#maxAnswer = maxAnswer;
    this.#module = parsed.protocol === "https:" ? https : http;
    if (options.agent !== undefined && !(options.agent instanceof http.Agent)) {
      throw new TypeError("agent: expected an http.Agent or https.Agent");
    }
    if (options.agent !== undefined && options.fetch !== undefined) {
      throw new TypeError("agent: not used with fetch; give one or the other");
    }
    // node:http refuses, at each request, an agent of another protocol.
    const agentProtocol = (options.agent as (http.Agent & { protocol?: unknown }) | undefined)?.protocol;
    if (typeof agentProtocol === "string" && agentProtocol !== parsed.protocol) {
      throw new TypeError(`agent: an agent of ${agentProtocol} for a URL of ${parsed.protocol} (give an ${parsed.protocol === "https:" ? "https" : "http"}.Agent)`);
    }
    // Node's own global agent's settings: idle connections closed after
    // 5 s, well before serve's (2 minutes), so a request is rarely sent
    // on a connection the server is closing; the most recently used
    // connection first.
    this.#agent = options.agent ?? new this.#module.Agent({ keepAlive: true, scheduling: "lifo", timeout: 5000 });
  }

  /**
   * Sends method path with body as JSON (none when undefined) and answers
   * the decoded JSON of a 2xx answer. Any other answer throws a
   * RedriveError with the server's code, message and field.
   */
  async request<T>(method: string, path: string, body?: unknown, signal?: AbortSignal, options: SendOptions = {}): Promise<T> {
    const idempotent = options.idempotent ?? method === "GET";
    const headers: Record<string, string> = { accept: "application/json" };
    if (this.#token !== undefined) headers["authorization"] = `Bearer ${this.#token}`;
    let text: string | undefined;
    if (body !== undefined) {
      headers["content-type"] = "application/json";
      text = JSON.stringify(body);
    }
    const t0 = performance.now();
    const bound = this.#timeoutMs + Math.max(0, options.waitMs ?? 0);
    const { status, raw } =
      this.#fetch !== undefined
        ? await this.#viaFetch(this.#fetch, method, path, headers, text, signal, bound)
        : await this.#viaHTTP(method, path, headers, text, signal, idempotent, bound);
    let decoded: unknown = undefined;
    let malformed = false;
    if (raw !== "") {
      try {
        decoded = JSON.parse(raw);
      } catch {
        malformed = true;
      }
    }
    if (this.#observe !== undefined) {
      try {
        this.#observe({ method, path, request: body, status, answer: decoded, ms: performance.now() - t0 });
      } catch (err) {
        // Serve answered: the call stands whatever the hook does. Its
        // error is told once, as a process warning.
        if (!this.#observeFailed) {
          this.#observeFailed = true;
          process.emitWarning(`redrive: the observe hook threw (told once): ${err instanceof Error ? err.message : String(err)}`, {
            code: "REDRIVE_OBSERVE",
          });
        }
      }
    }
    const ok = status >= 200 && status < 300;
    if (ok && malformed) throw new RedriveError(status, "malformed_answer", `the answer is not JSON: ${raw.slice(0, 200)}`);
    if (!ok) throw errorOf(status, decoded, raw);
    return decoded as T;
  }

  async #viaFetch(
    f: typeof fetch,
    method: string,
    path: string,
    headers: Record<string, string>,
    text: string | undefined,
    signal: AbortSignal | undefined,
    bound: number,
  ): Promise<{ status: number; raw: string }> {
    const init: RequestInit = { method, headers };
    if (text !== undefined) init.body = text;
    const ac = new AbortController();
    const onAbort = (): void => ac.abort(signal?.reason);
    if (signal?.aborted) onAbort();
    signal?.addEventListener("abort", onAbort, { once: true });
    const timer = setTimeout(() => ac.abort(timedOut(method, path, bound)), bound);
    init.signal = ac.signal;
    try {
      const res = await f(this.base + path, init);
      return { status: res.status, raw: await this.#boundedText(res, method, path, ac) };
    } catch (err) {
      // fetch rejects with the signal's reason: the timeout's error, or the caller's.
      throw ac.signal.aborted ? ac.signal.reason : err;
    } finally {
      clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
    }
  }

  /** The body of a fetch's answer, at most the bound's bytes (see maxAnswerBytes). */
  async #boundedText(res: Response, method: string, path: string, ac: AbortController): Promise<string> {
    const tooLarge = (): AnswerTooLargeError => {
      const err = new AnswerTooLargeError(res.status, method, path, this.#maxAnswer);
      ac.abort(err);
      return err;
    };
    const length = Number(res.headers.get("content-length") ?? NaN);
    if (length > this.#maxAnswer) throw tooLarge();
    if (res.body === null) return "";
    const reader = res.body.getReader();
    const chunks: Uint8Array[] = [];
    let n = 0;
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      n += value.byteLength;
      if (n > this.#maxAnswer) {
        void reader.cancel().catch(() => undefined);
        throw tooLarge();
      }
      chunks.push(value);
    }
    return Buffer.concat(chunks).toString("utf8");
  }

  /**
   * Sends one request with node:http(s). An idempotent request that fails
   * on a kept connection before any answer (most often: the server closed
   * the connection as it was reused) is sent once more on a new one, as
   * Node's documentation advises. Any other is not: the same failure
   * comes of a connection cut after the server read the request (a proxy
   * cutting it, the server dying after its commit), and a second enqueue
   * without a key would store a second job.
   */
  async #viaHTTP(
    method: string,
    path: string,
    headers: Record<string, string>,
    text: string | undefined,
    signal: AbortSignal | undefined,
    idempotent: boolean,
    bound: number,
  ): Promise<{ status: number; raw: string }> {
    const payload = text === undefined ? undefined : Buffer.from(text, "utf8");
    const h: Record<string, string | number> = { ...headers };
    if (payload !== undefined) h["content-length"] = payload.length;
    const deadline = performance.now() + bound;
    for (let attempt = 0; ; attempt++) {
      try {
        return await this.#send(method, path, h, payload, signal, deadline, bound);
      } catch (err) {
        const e = err as NodeJS.ErrnoException & { reusedSocket?: boolean };
        if (attempt === 0 && idempotent && e.reusedSocket === true && e.code === "ECONNRESET" && !signal?.aborted) continue;
        throw err;
      }
    }
  }

  #send(
    method: string,
    path: string,
    headers: Record<string, string | number>,
    payload: Buffer | undefined,
    signal: AbortSignal | undefined,
    deadline: number,
    bound: number,
  ): Promise<{ status: number; raw: string }> {
    return new Promise((outerResolve, outerReject) => {
      // The whole call, answer read included, ends by the deadline: a
      // socket timeout would not bound an answer that trickles.
      const timer = setTimeout(() => {
        const err = timedOut(method, path, bound);
        reject(err);
        req.destroy(err);
      }, Math.max(0, deadline - performance.now()));
      const resolve = (v: { status: number; raw: string }): void => {
        clearTimeout(timer);
        outerResolve(v);
      };
      const reject = (err: unknown): void => {
        clearTimeout(timer);
        outerReject(err);
      };
      const options: http.RequestOptions = { method, headers, agent: this.#agent };
      if (signal !== undefined) options.signal = signal;
      const req = this.#module.request(this.base + path, options, (res) => {
        const tooLarge = (): void => {
          reject(new AnswerTooLargeError(res.statusCode ?? 0, method, path, this.#maxAnswer));
          // Destroyed without an error: the socket may be back in the
          // agent's pool (the body read whole), where no one hears one.
          req.destroy();
        };
        res.on("error", reject); // before any destroy: an error unheard would be thrown
        if (Number(res.headers["content-length"] ?? NaN) > this.#maxAnswer) return tooLarge();
        const chunks: Buffer[] = [];
        let n = 0;
        res.on("data", (c: Buffer) => {
          n += c.length;
          if (n > this.#maxAnswer) return tooLarge();
          chunks.push(c);
        });
        res.on("end", () => resolve({ status: res.statusCode ?? 0, raw: Buffer.concat(chunks).toString("utf8") }));
        res.on("aborted", () => reject(new Error(`the answer to ${method} ${path} was cut off`)));
      });
      req.on("error", (err: NodeJS.ErrnoException & { reusedSocket?: boolean }) => {
        // Tells #viaHTTP whether the connection was a kept one.
        err.reusedSocket = req.reusedSocket;
        reject(err);
      });
      req.end(payload);
    });
  }
}

/** The error of a call given up at its time bound. */
function timedOut(method: string, path: string, bound: number): NodeJS.ErrnoException {
  const err: NodeJS.ErrnoException = new Error(`${method} ${path}: no whole answer within ${Math.round(bound)} ms`);
  err.code = "ETIMEDOUT";
  return err;
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
