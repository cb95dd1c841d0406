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

/** One job of a workflow: a job to enqueue, named, with the jobs it waits for. */
export interface WorkflowJobOptions extends EnqueueOptions {
  /** Its name, unique in the workflow. */
  name: string;
  /** The names of the jobs of the workflow that must complete before it runs. */
  after?: string[];
}

/** A workflow to enqueue: jobs that wait for each other, and callbacks (docs/workflows.md). */
export interface WorkflowOptions {
  /** Describes the workflow to people. */
  name?: string;
  /**
   * A key that makes the enqueue idempotent: a second enqueue with it
   * answers the workflow holding it (`existing: true`) and creates nothing.
   */
  idempotencyKey?: string;
  /** What a dead job does to its dependents: "wait" (the default), "cancel" or "run". */
  onDead?: "wait" | "cancel" | "run";
  /** The workflow's jobs (at least one). */
  jobs: WorkflowJobOptions[];
  /** Enqueued once every job completed. */
  onSuccess?: EnqueueOptions;
  /** Enqueued once every job finished (completed, dead or canceled). */
  onComplete?: EnqueueOptions;
  /** Enqueued when a job died for the first time. */
  onDeath?: EnqueueOptions;
}

/** One job of a Workflow as the API answers it. */
export interface WorkflowJob {
  name: string;
  job_id: number;
  kind: string;
  state: Job["state"];
  /** The ids of the jobs it waits for. */
  after: number[];
  [field: string]: unknown;
}

/** A workflow as the API answers it (the Workflow object of server/openapi.json). */
export interface Workflow {
  id: number;
  name?: string;
  on_dead: "wait" | "cancel" | "run";
  state: string;
  idempotency_key?: string;
  created_at: string;
  canceled_at?: string;
  closed_at?: string;
  /** Its jobs by state (callbacks aside). */
  counts: Record<string, number>;
  total: number;
  completed: number;
  dead: number;
  canceled: number;
  /** The callbacks' job ids. */
  on_success?: number;
  on_complete?: number;
  on_death?: number;
  jobs?: WorkflowJob[];
  /** Set when the workflow holding the idempotency key was answered. */
  existing?: boolean;
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

  /**
   * Enqueues 1 to 1000 workflows in one request, one transaction, all or
   * none (POST /v1/workflows/batch; their jobs together at most 10,000): a
   * refusal is a RedriveError naming the workflow's field
   * (`workflows[2].jobs[0].kind`) and nothing is stored. Answers the
   * workflows in order, each with its jobs; one whose idempotency key was
   * held (or taken by an earlier one of the call) is the workflow holding
   * it, with `existing: true`.
   */
  async enqueueWorkflows(workflows: WorkflowOptions[]): Promise<Workflow[]> {
    if (!Array.isArray(workflows) || workflows.length < 1 || workflows.length > 1000) {
      throw new TypeError(
        `enqueueWorkflows: expected an array of 1 to 1000 workflows, got ${Array.isArray(workflows) ? workflows.length : typeof workflows}`,
      );
    }
    const body = workflows.map((w, i) => workflowBody(w, `workflows[${i}]`));
    // Sent again when cut only when every workflow has a key: a second
    // copy of one without would be a second workflow.
    const keyed = body.every((b) => b["idempotency_key"] !== undefined);
    const answer = await this.#http.request<{ workflows: Workflow[] }>("POST", "/v1/workflows/batch", { workflows: body }, undefined, {
      idempotent: keyed,
    });
    return answer.workflows;
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

/** The body of one workflow of POST /v1/workflows/batch; where names it in errors. */
export function workflowBody(w: WorkflowOptions, where: string): Record<string, unknown> {
  if (w === null || typeof w !== "object") throw new TypeError(`${where}: expected an object with jobs`);
  if (!Array.isArray(w.jobs) || w.jobs.length === 0) throw new TypeError(`${where}.jobs: a non-empty array is required`);
  const body: Record<string, unknown> = {};
  if (w.name !== undefined) body["name"] = w.name;
  if (w.idempotencyKey !== undefined) body["idempotency_key"] = w.idempotencyKey;
  if (w.onDead !== undefined) body["on_dead"] = w.onDead;
  body["jobs"] = w.jobs.map((j, i) => {
    const at = `${where}.jobs[${i}]`;
    let job: Record<string, unknown>;
    try {
      job = enqueueBody(j);
    } catch (err) {
      throw new TypeError(`${at}: ${(err as Error).message}`);
    }
    if (typeof j.name !== "string" || j.name === "") throw new TypeError(`${at}.name: a non-empty string is required`);
    job["name"] = j.name;
    if (j.after !== undefined) {
      if (!Array.isArray(j.after) || !j.after.every((a) => typeof a === "string")) {
        throw new TypeError(`${at}.after: expected an array of job names`);
      }
      job["after"] = [...j.after];
    }
    return job;
  });
  for (const [option, field] of [
    ["onSuccess", "on_success"],
    ["onComplete", "on_complete"],
    ["onDeath", "on_death"],
  ] as const) {
    const cb = w[option];
    if (cb === undefined) continue;
    try {
      body[field] = enqueueBody(cb);
    } catch (err) {
      throw new TypeError(`${where}.${field}: ${(err as Error).message}`);
    }
  }
  return body;
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
