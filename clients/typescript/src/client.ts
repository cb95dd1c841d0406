// The enqueue client: POST /v1/jobs, GET /v1/jobs/{id},
// POST /v1/jobs/{id}/cancel of the REST API (docs/api.md).

import { formatDuration } from "./duration.js";
import type { FailureClass } from "./errors.js";
import { Transport, type ConnectionOptions } from "./http.js";

/** What to enqueue: a job of a kind with its payload. */
export interface EnqueueOptions {
  /** The job's kind: the handler that runs it ("scan.pdf"). */
  kind: string;
  /** Any JSON value (at most 1 MiB encoded). */
  payload?: unknown;
  /** The queue (default "default"). */
  queue?: string;
  /** -100 to 100, higher first among a queue's due jobs (default 0). */
  priority?: number;
  /**
   * A key that makes the enqueue idempotent: a second enqueue with the same
   * key answers the existing job (`existing: true`) instead of a new one.
   */
  idempotencyKey?: string;
  /** When the job is due (default now). Exclusive with delayMs. */
  runAt?: Date | string;
  /** Milliseconds from now until the job is due. Exclusive with runAt. */
  delayMs?: number;
  /** Retries after the first attempt (0 to 1000); default the queue's policy. */
  maxRetries?: number;
  /** The circuit breaker the job calls (wins over its kind's). */
  dependency?: string;
  /** A dead job that must not be redriven (its work cannot be done twice). */
  notReprocessable?: boolean;
}

/** One entry of a job's history (the API's Event). */
export interface JobEvent {
  kind: "retry" | "dead" | "completed" | "snoozed" | "deferred" | "released" | "canceled" | "redriven" | "replayed";
  attempt?: number;
  at?: string;
  /** Milliseconds the attempt ran. */
  duration?: number;
  class?: FailureClass;
  error?: string;
  reason?: string;
  /** Milliseconds until the next attempt. */
  delay?: number;
  worker?: string;
  note?: string;
  [field: string]: unknown;
}

/**
 * A job as the API answers it (the Job object of server/openapi.json):
 * field names as the API spells them.
 */
export interface Job {
  id: number;
  queue: string;
  kind: string;
  payload: unknown;
  state: "pending" | "scheduled" | "running" | "completed" | "dead" | "canceled" | "blocked";
  attempt: number;
  max_retries: number;
  priority?: number;
  idempotency_key?: string;
  dependency?: string;
  created_at: string;
  run_at?: string;
  attempted_at?: string;
  finished_at?: string;
  lease_until?: string;
  worker?: string;
  lease?: number;
  cancel_requested?: boolean;
  retry_count?: number;
  last_error?: string;
  last_error_class?: FailureClass;
  dead_reason?: string;
  progress?: { done: number; total: number; at: string };
  /**
   * What the handler that completed the job returned (a completed job,
   * read with `get` only; listings leave it out), masked like the payload
   * unless read with reveal=true.
   */
  result?: unknown;
  /** Why `result` is absent though the job recorded one ("undecryptable: ..."). */
  result_error?: string;
  history?: JobEvent[];
  /** Set when an existing job holding the idempotency key was answered. */
  existing?: boolean;
  /** Set when no live worker serves the job's queue: its kind was not checked. */
  warning?: string;
  [field: string]: unknown;
}

/** Enqueues, reads and cancels jobs through a redrive server's REST API. */
export class Client {
  readonly #http: Transport;

  /** A client of the server at options.url, with options.token if it needs one. */
  constructor(options: ConnectionOptions) {
    this.#http = new Transport(options);
  }

  /**
   * Enqueues one job and answers it as stored. The server checks it (names,
   * payload, priority range, a kind no live worker of its queue runs) and
   * answers a 400 naming the field, thrown as a RedriveError; nothing is
   * stored then.
   */
  async enqueue(options: EnqueueOptions): Promise<Job> {
    // Sent again when cut only with a key: serve may have stored the
    // first copy, and a second without a key would be a second job.
    const body = enqueueBody(options);
    return this.#http.request<Job>("POST", "/v1/jobs", body, undefined, { idempotent: body["idempotency_key"] !== undefined });
  }

  /**
   * Enqueues 1 to 1000 jobs in one request, all or none: a job refused is a
   * RedriveError naming it (`jobs[3].kind`) and nothing is stored. Answers
   * the jobs in order.
   */
  async enqueueMany(jobs: EnqueueOptions[]): Promise<Job[]> {
    if (!Array.isArray(jobs) || jobs.length < 1 || jobs.length > 1000) {
      throw new TypeError(`enqueueMany: expected an array of 1 to 1000 jobs, got ${Array.isArray(jobs) ? jobs.length : typeof jobs}`);
    }
    const body = jobs.map((job, i) => {
      try {
        return enqueueBody(job);
      } catch (err) {
        throw new TypeError(`jobs[${i}]: ${(err as Error).message}`);
      }
    });
    const keyed = body.every((b) => b["idempotency_key"] !== undefined);
    const answer = await this.#http.request<{ jobs: Job[] }>("POST", "/v1/jobs/batch", { jobs: body }, undefined, { idempotent: keyed });
    return answer.jobs;
  }

  /** The job with its whole history; a RedriveError 404 when unknown. */
  async get(id: number): Promise<Job> {
    return this.#http.request<Job>("GET", `/v1/jobs/${jobId(id)}`);
  }

  /**
   * Cancels a job: a pending or scheduled one at once; a running one is
   * asked to stop (`cancel_requested`), its handler's signal aborts, and it
   * ends canceled. A finished job is a RedriveError 409.
   */
  async cancel(id: number): Promise<Job> {
    return this.#http.request<Job>("POST", `/v1/jobs/${jobId(id)}/cancel`, {});
  }
}

function jobId(id: number): string {
  if (!Number.isSafeInteger(id) || id < 1) throw new TypeError(`id: expected a positive integer, got ${String(id)}`);
  return String(id);
}

/** The POST /v1/jobs body of options, checked for what only the client knows. */
export function enqueueBody(options: EnqueueOptions): Record<string, unknown> {
  if (options === null || typeof options !== "object") throw new TypeError("enqueue: expected an object with kind");
  if (typeof options.kind !== "string" || options.kind === "") throw new TypeError("kind: a non-empty string is required");
  const body: Record<string, unknown> = { kind: options.kind };
  if (options.payload !== undefined) body["payload"] = options.payload;
  if (options.queue !== undefined) body["queue"] = options.queue;
  if (options.priority !== undefined) body["priority"] = options.priority;
  if (options.idempotencyKey !== undefined) body["idempotency_key"] = options.idempotencyKey;
  if (options.runAt !== undefined && options.delayMs !== undefined) {
    throw new TypeError("runAt and delayMs: give one or the other");
  }
  if (options.runAt !== undefined) {
    if (options.runAt instanceof Date) {
      if (Number.isNaN(options.runAt.getTime())) throw new TypeError("runAt: an invalid Date");
      body["run_at"] = options.runAt.toISOString();
    } else {
      body["run_at"] = options.runAt;
    }
  }
  if (options.delayMs !== undefined) {
    try {
      body["delay"] = formatDuration(options.delayMs);
    } catch (err) {
      throw new TypeError(`delayMs: ${(err as Error).message}`);
    }
  }
  if (options.maxRetries !== undefined) body["max_retries"] = options.maxRetries;
  if (options.dependency !== undefined) body["dependency"] = options.dependency;
  if (options.notReprocessable !== undefined) body["not_reprocessable"] = options.notReprocessable;
  return body;
}
