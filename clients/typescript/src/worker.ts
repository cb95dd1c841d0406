// The worker: leases jobs of its queues over serve's HTTP worker protocol
// (/v1/worker/...), runs their handlers, heartbeats them, watches for
// cancellations and reports their outcomes in batches.

import { randomBytes } from "node:crypto";
import { hostname } from "node:os";
import { formatDuration, parseDuration } from "./duration.js";
import {
  AnswerTooLargeError,
  CanceledError,
  DeadlineError,
  JobError,
  LeaseLostError,
  RateLimitedError,
  RedriveError,
  ShutdownError,
  SnoozeError,
} from "./errors.js";
import { Transport, type ConnectionOptions } from "./http.js";

/** How a Worker runs. */
export interface WorkerOptions extends ConnectionOptions {
  /** The queues to lease jobs of (at least one). */
  queues: string[];
  /** Handlers that may run at once in this process (1 to 1000, default 10). */
  concurrency?: number;
  /**
   * The worker's unique name, 1 to 100 characters of [A-Za-z0-9._:@-]:
   * shown in the job's history and the workers view. Default
   * node-<pid>@<hostname>.
   */
  name?: string;
  /** The host the server records (default this machine's host name). */
  host?: string;
  /** The process id the server records (default process.pid). */
  pid?: number;
  /**
   * How long one lease call waits on the server for a job when none is due
   * (0 to 60000 ms, default 30000). The server answers at once when a job
   * becomes due, so this only sets how often an idle worker calls.
   */
  pollWaitMs?: number;
  /**
   * On shutdown, how long running handlers may go on before their signals
   * abort and their jobs are released (default 30000 ms).
   */
  gracePeriodMs?: number;
  /**
   * Stop gracefully on SIGTERM and SIGINT while running (default true); a
   * second signal aborts the running handlers at once.
   */
  handleSignals?: boolean;
  /**
   * Called with what went wrong in the background (a failed call to the
   * server, an outcome refused); the worker goes on. Default: console.error.
   */
  onError?: (error: unknown, where: string) => void;
}

/** How a handler runs. */
export interface HandlerOptions {
  /**
   * The circuit breaker the kind's jobs call (as UsesDependency does for a
   * Go handler): failures are recorded on it and the engine defers the
   * kind's jobs while it is open. A job's own dependency wins.
   */
  dependency?: string;
  /**
   * Milliseconds each attempt of the kind may run (as Timeout does for a Go
   * handler): serve hands the job out with its deadline, at which the
   * handler's signal aborts with a DeadlineError.
   */
  timeout?: number;
}

/** What a handler gets beside its job. */
export interface HandlerContext {
  /**
   * Aborts when the job is canceled (reason CanceledError), its lease is
   * lost (LeaseLostError), its deadline passes (DeadlineError) or the
   * worker's shutdown grace period ends (ShutdownError).
   */
  signal: AbortSignal;
}

/**
 * A job's handler. Its resolved value (JSON, at most 64 KiB encoded;
 * undefined for none) is the job's result. A thrown error is the job's
 * failure: PermanentError, NeedsAuthError, RateLimitedError or
 * TransientError classify it, SnoozeError snoozes the job, and anything
 * else is reported as transient (retried on the queue's policy).
 */
export type Handler<P = unknown> = (job: LeasedJob<P>, context: HandlerContext) => unknown;

/** The job of the API's lease answer. */
interface WireJob {
  id: number;
  lease: number;
  queue: string;
  kind: string;
  payload?: unknown;
  attempt: number;
  max_retries: number;
  priority?: number;
  lease_until?: string;
  deadline?: string;
  trace?: string;
  enqueued_at?: string;
}

interface LeaseAnswer {
  jobs?: WireJob[];
  lease?: string | number;
  heartbeat_every?: string | number;
}

interface HeartbeatAnswer {
  jobs?: { id: number; lease: number; held: boolean; canceled?: boolean; lease_until?: string }[];
}

interface OutcomeEntry {
  id: number;
  lease: number;
  status: number;
  state?: string;
  run_at?: string;
  error?: { code?: string; message?: string; field?: string };
}

/** A leased job, as its handler sees it. */
export class LeasedJob<P = unknown> {
  /** The job's id. */
  readonly id: number;
  /** The lease token: this attempt's fencing token. */
  readonly lease: number;
  /** The job's queue. */
  readonly queue: string;
  /** The job's kind. */
  readonly kind: string;
  /** The job's payload (decrypted). */
  readonly payload: P;
  /** This attempt's number, 1 for the first. */
  readonly attempt: number;
  /** Retries after the first attempt the job may use. */
  readonly maxRetries: number;
  /** The job's priority. */
  readonly priority: number;
  /**
   * When the attempt must end (a timeout configured on the server), if
   * any, on serve's clock: the signal aborts when it comes, timed from the
   * lease's start, whatever the skew between serve's clock and this one.
   */
  readonly deadline: Date | undefined;
  /** The W3C trace context the job was enqueued in, if any. */
  readonly trace: string | undefined;
  /** When the job was enqueued, if the server said. */
  readonly enqueuedAt: Date | undefined;
  readonly #report: (done: number, total: number) => void;

  /** @internal */
  constructor(wire: WireJob, report: (done: number, total: number) => void) {
    this.id = wire.id;
    this.lease = wire.lease;
    this.queue = wire.queue;
    this.kind = wire.kind;
    this.payload = wire.payload as P;
    this.attempt = wire.attempt;
    this.maxRetries = wire.max_retries;
    this.priority = wire.priority ?? 0;
    this.deadline = wire.deadline ? new Date(wire.deadline) : undefined;
    this.trace = wire.trace;
    this.enqueuedAt = wire.enqueued_at ? new Date(wire.enqueued_at) : undefined;
    this.#report = report;
  }

  /**
   * Records how far the handler is: done units of total (0: unknown). The
   * API shows it; it is sent with the next heartbeat, at most about once a
   * second. Throws a RangeError for negative or non-integer numbers.
   */
  progress(done: number, total = 0): void {
    if (!Number.isSafeInteger(done) || done < 0 || !Number.isSafeInteger(total) || total < 0) {
      throw new RangeError(`progress: done and total must be non-negative integers, got ${done}, ${total}`);
    }
    this.#report(done, total);
  }
}

/** One job in this worker's hands, from its lease to its outcome's answer. */
interface Held {
  wire: WireJob;
  controller: AbortController;
  /** running: the handler runs; reported: its outcome is sent; lost, released: no outcome is (or will be) sent. */
  state: "running" | "reported" | "lost" | "released";
  /**
   * When the lease ends unrenewed, on performance.now()'s clock (serve's
   * lease_until is on serve's clock, which may be skewed from ours): the
   * lease answer's arrival, or a heartbeat's sending, plus the lease.
   */
  leaseUntil: number;
  progress: { done: number; total: number } | undefined;
  progressDirty: boolean;
  deadlineTimer: NodeJS.Timeout | undefined;
}

/** One outcome of the outcomes call. */
type Outcome = Record<string, unknown> & { id: number; lease: number; outcome: string };

const namePattern = /^[A-Za-z0-9._:@-]{1,100}$/;

/** The largest result a completed job keeps, in bytes of JSON (store.MaxResult). */
export const MAX_RESULT = 64 << 10;

/**
 * A worker process of redrive in Node.js: register a handler per kind with
 * handle, then run. It leases up to its free slots of jobs at a time
 * (long-polling when none is due), heartbeats the jobs it holds, aborts a
 * handler's signal on cancellation, lost lease or shutdown, and sends the
 * outcomes in batches.
 */
export class Worker {
  /** The worker's name, as the server shows it. */
  readonly name: string;
  readonly #http: Transport;
  readonly #queues: string[];
  readonly #concurrency: number;
  readonly #host: string;
  readonly #pid: number;
  readonly #pollWait: string;
  readonly #pollWaitMs: number;
  readonly #graceMs: number;
  readonly #handleSignals: boolean;
  readonly #onError: (error: unknown, where: string) => void;
  readonly #handlers = new Map<string, { fn: Handler<never>; dependency: string | undefined; timeout: number | undefined }>();

  readonly #held = new Map<number, Held>();
  /**
   * Jobs dropped without an outcome sent (lease lost), by "id:lease", with
   * when: listed as held by a lease sent again for two leases' time, so
   * that serve does not answer them again.
   */
  readonly #dropped = new Map<string, number>();
  /** Whether lease calls carry their request id (an older serve refuses the field: then they do not). */
  #leaseIds = true;
  #runningCount = 0;
  #started = false;
  #stopping = false;
  #graceCut = false;
  #fatal: unknown = undefined;
  #heartbeatEveryMs = 10_000;
  #leaseMs = 30_000;

  /** Aborts the lease long-poll and the backoff waits at shutdown. */
  readonly #stopController = new AbortController();
  /** Aborts the cancels long-poll once every job is settled. */
  readonly #finalController = new AbortController();
  /** Waiters for a change: a job started or finished, the worker stopping. */
  #listeners: (() => void)[] = [];
  #stopRequested: ((graceCut: boolean) => void) | undefined;

  #heartbeatTimer: NodeJS.Timeout | undefined;
  #heartbeatSoon: NodeJS.Timeout | undefined;
  #heartbeatInFlight: Promise<void> | undefined;
  #lastHeartbeat = -Infinity;

  #outcomeQueue: { item: Outcome; done: () => void }[] = [];
  #outcomeFlush: Promise<void> | undefined;

  #runPromise: Promise<void> | undefined;

  /** A worker of options.queues on the server at options.url. */
  constructor(options: WorkerOptions) {
    this.#http = new Transport(options);
    if (!Array.isArray(options.queues) || options.queues.length === 0 || options.queues.some((q) => typeof q !== "string" || q === "")) {
      throw new TypeError("queues: a non-empty array of queue names is required");
    }
    this.#queues = [...options.queues];
    const concurrency = options.concurrency ?? 10;
    if (!Number.isInteger(concurrency) || concurrency < 1 || concurrency > 1000) {
      throw new RangeError(`concurrency: expected an integer from 1 to 1000, got ${String(concurrency)}`);
    }
    this.#concurrency = concurrency;
    this.#host = options.host ?? hostname();
    this.#pid = options.pid ?? process.pid;
    this.name = options.name ?? defaultName(this.#pid, this.#host);
    if (!namePattern.test(this.name)) {
      throw new TypeError(`name: ${JSON.stringify(this.name)}: expected 1 to 100 characters of A-Z a-z 0-9 . _ : @ -`);
    }
    const pollWaitMs = options.pollWaitMs ?? 30_000;
    if (!Number.isFinite(pollWaitMs) || pollWaitMs < 0 || pollWaitMs > 60_000) {
      throw new RangeError(`pollWaitMs: expected 0 to 60000, got ${String(pollWaitMs)}`);
    }
    this.#pollWait = formatDuration(Math.round(pollWaitMs));
    this.#pollWaitMs = Math.round(pollWaitMs);
    const graceMs = options.gracePeriodMs ?? 30_000;
    if (!Number.isFinite(graceMs) || graceMs < 0) {
      throw new RangeError(`gracePeriodMs: expected a non-negative number, got ${String(graceMs)}`);
    }
    this.#graceMs = graceMs;
    this.#handleSignals = options.handleSignals ?? true;
    this.#onError = options.onError ?? ((error, where) => console.error(`redrive worker ${this.name}: ${where}:`, error));
  }

  /**
   * Registers the handler of a kind. Call before run; a kind has one
   * handler. Returns the worker, to chain calls.
   */
  handle<P = unknown>(kind: string, handler: Handler<P>, options: HandlerOptions = {}): this {
    if (this.#started) throw new Error("handle: the worker already runs; register handlers before run()");
    if (typeof kind !== "string" || kind === "") throw new TypeError("handle: kind must be a non-empty string");
    if (typeof handler !== "function") throw new TypeError(`handle(${JSON.stringify(kind)}): handler must be a function`);
    if (this.#handlers.has(kind)) throw new Error(`handle: kind ${JSON.stringify(kind)} already has a handler`);
    if (options.dependency !== undefined && (typeof options.dependency !== "string" || options.dependency === "")) {
      throw new TypeError(`handle(${JSON.stringify(kind)}): dependency must be a non-empty string`);
    }
    if (options.timeout !== undefined && (typeof options.timeout !== "number" || !(options.timeout > 0) || !Number.isFinite(options.timeout))) {
      throw new TypeError(`handle(${JSON.stringify(kind)}): timeout must be a positive number of milliseconds`);
    }
    this.#handlers.set(kind, { fn: handler as Handler<never>, dependency: options.dependency, timeout: options.timeout });
    return this;
  }

  /**
   * Runs until stop() is called (or SIGTERM/SIGINT arrives): resolves once
   * the worker stopped cleanly, rejects when the server refuses it for
   * good (a 400, 401, 403 or 404 to its lease call, e.g. a token of
   * neither the worker nor the admin role), after the same clean stop.
   */
  run(): Promise<void> {
    if (this.#runPromise) return this.#runPromise;
    if (this.#handlers.size === 0) return Promise.reject(new Error("run: no handler registered; call handle(kind, fn) first"));
    this.#started = true;
    this.#runPromise = this.#run();
    return this.#runPromise;
  }

  /**
   * Stops gracefully: no more leases; running handlers may finish within
   * the grace period (gracePeriodMs, or options.gracePeriodMs here), then
   * their signals abort and their jobs are released; then the worker tells
   * the server it stopped. Resolves when run() has ended.
   */
  async stop(): Promise<void> {
    this.#requestStop(false);
    if (this.#runPromise) await this.#runPromise.catch(() => undefined);
  }

  /** The number of handlers running now. */
  get running(): number {
    return this.#runningCount;
  }

  #requestStop(cutGrace: boolean): void {
    if (cutGrace) this.#graceCut = true;
    if (!this.#stopping) {
      this.#stopping = true;
      this.#stopController.abort(new ShutdownError("the worker is stopping"));
    }
    this.#stopRequested?.(this.#graceCut);
    this.#notify();
  }

  async #run(): Promise<void> {
    let signals = 0;
    const onSignal = (): void => {
      signals++;
      this.#requestStop(signals > 1);
    };
    if (this.#handleSignals) {
      process.on("SIGTERM", onSignal);
      process.on("SIGINT", onSignal);
    }
    const cancels = this.#cancelsLoop();
    try {
      await this.#leaseLoop();
      await this.#drain();
    } finally {
      this.#stopHeartbeats();
      this.#finalController.abort(new ShutdownError("the worker stopped"));
      await cancels;
      try {
        await this.#http.request("POST", "/v1/worker/stop", { worker: this.name }, undefined, { idempotent: true });
      } catch (err) {
        this.#onError(err, "stop");
      }
      if (this.#handleSignals) {
        process.off("SIGTERM", onSignal);
        process.off("SIGINT", onSignal);
      }
    }
    if (this.#fatal !== undefined) throw this.#fatal;
  }

  /** Leases jobs while the worker runs, up to its free slots at a time. */
  async #leaseLoop(): Promise<void> {
    const kinds = [...this.#handlers.keys()];
    const dependencies: Record<string, string> = {};
    for (const [kind, h] of this.#handlers) if (h.dependency !== undefined) dependencies[kind] = h.dependency;
    const timeouts: Record<string, string> = {};
    for (const [kind, h] of this.#handlers) if (h.timeout !== undefined) timeouts[kind] = formatDuration(h.timeout);
    let failures = 0;
    // The id of the call whose answer was lost, to send again: serve then
    // answers the jobs it leased for it (see #leaseBody). A call is not
    // sent again as it was (not idempotent): a copy would lease others.
    let request: string | undefined;
    let cap = this.#concurrency; // lowered while lease answers are too large to read
    while (!this.#stopping) {
      const free = this.#concurrency - this.#runningCount;
      if (free <= 0) {
        await this.#changed();
        continue;
      }
      const resend = request !== undefined;
      request ??= randomBytes(12).toString("hex");
      let answer: LeaseAnswer;
      try {
        answer = await this.#object<LeaseAnswer>(
          "POST",
          "/v1/worker/lease",
          {
            worker: this.name,
            host: this.#host,
            pid: this.#pid,
            queues: this.#queues,
            kinds,
            dependencies,
            timeouts,
            max: Math.max(1, Math.min(free, cap)),
            wait: this.#pollWait,
            ...(this.#leaseIds ? { request, ...(resend ? { resend: true, held: this.#heldList() } : {}) } : {}),
          },
          this.#stopController.signal,
          this.#pollWaitMs,
          false,
        );
        failures = 0;
        request = undefined;
        cap = Math.min(this.#concurrency, cap * 2);
      } catch (err) {
        if (this.#stopping) break;
        if (
          err instanceof RedriveError &&
          err.status === 400 &&
          err.code === "unknown_field" &&
          ["request", "resend", "held"].includes(err.field ?? "") &&
          this.#leaseIds
        ) {
          // A serve older than lease request ids: lease without them (a
          // cut lease's jobs then wait for their leases' expiry, as they did).
          this.#onError(err, "lease (this server does not take lease request ids: leasing without)");
          this.#leaseIds = false;
          request = undefined;
          continue;
        }
        if (err instanceof AnswerTooLargeError) {
          cap = Math.max(1, Math.floor(Math.min(cap, free) / 2));
        } else if (err instanceof RedriveError && [400, 401, 403, 404].includes(err.status)) {
          this.#fatal = err;
          this.#requestStop(false);
          break;
        }
        this.#onError(err, "lease");
        failures++;
        await this.#pause(backoff(failures));
        continue;
      }
      this.#applyTimings(answer);
      for (const wire of answer.jobs ?? []) this.#start(wire);
    }
  }

  /**
   * The leases this worker holds, for a lease sent again: jobs running,
   * outcomes not yet answered, jobs dropped unanswered (for two leases).
   */
  #heldList(): { id: number; lease: number }[] {
    const now = performance.now();
    for (const [key, at] of this.#dropped) if (now - at > 2 * this.#leaseMs + this.#pollWaitMs) this.#dropped.delete(key);
    const out: { id: number; lease: number }[] = [];
    const seen = new Set<string>();
    for (const h of this.#held.values()) {
      out.push({ id: h.wire.id, lease: h.wire.lease });
      seen.add(`${h.wire.id}:${h.wire.lease}`);
    }
    for (const key of this.#dropped.keys()) {
      if (seen.has(key)) continue;
      const [id, lease] = key.split(":").map(Number);
      out.push({ id: id!, lease: lease! });
    }
    return out;
  }

  #applyTimings(answer: LeaseAnswer): void {
    try {
      if (answer.lease) this.#leaseMs = durationMs(answer.lease);
      if (answer.heartbeat_every) {
        const every = Math.max(50, durationMs(answer.heartbeat_every));
        if (every !== this.#heartbeatEveryMs && this.#heartbeatTimer) {
          clearInterval(this.#heartbeatTimer);
          this.#heartbeatTimer = undefined;
        }
        this.#heartbeatEveryMs = every;
      }
    } catch (err) {
      this.#onError(err, "lease answer");
    }
  }

  /** Starts the handler of a leased job. */
  #start(wire: WireJob): void {
    const held: Held = {
      wire,
      controller: new AbortController(),
      state: "running",
      leaseUntil: performance.now() + this.#leaseMs,
      progress: undefined,
      progressDirty: false,
      deadlineTimer: undefined,
    };
    // The job leased again: its earlier lease here was lost unnoticed (no
    // heartbeat between its end and the job's rescue). That handler's
    // attempt is over; tell it before the new one starts.
    const earlier = this.#held.get(wire.id);
    if (earlier !== undefined && earlier.wire.lease !== wire.lease) this.#lose(earlier);
    this.#held.set(wire.id, held);
    this.#runningCount++;
    this.#ensureHeartbeats();
    this.#notify(); // the cancels loop waits for a running job
    const registered = this.#handlers.get(wire.kind);
    if (wire.deadline) {
      // The deadline's distance from the lease's start, both on serve's
      // clock (which may be skewed from ours); without lease_until, from
      // our clock.
      const deadline = Date.parse(wire.deadline);
      const until = wire.lease_until ? Date.parse(wire.lease_until) : NaN;
      const ms = Number.isNaN(until) ? deadline - Date.now() : deadline - (until - this.#leaseMs);
      if (!Number.isNaN(ms)) {
        held.deadlineTimer = setTimeout(() => held.controller.abort(new DeadlineError()), Math.max(0, ms));
      }
    }
    const job = new LeasedJob<unknown>(wire, (done, total) => this.#progress(held, done, total));
    const run = async (): Promise<unknown> => {
      if (!registered) throw new Error(`no handler registered for kind ${JSON.stringify(wire.kind)} in worker ${this.name}`);
      return (registered.fn as Handler<unknown>)(job, { signal: held.controller.signal });
    };
    run().then(
      (value) => this.#finish(held, completeOutcome(wire, value)),
      (err: unknown) => this.#finish(held, failOutcome(wire, err, registered?.dependency)),
    );
  }

  #finish(held: Held, outcome: Outcome): void {
    if (held.deadlineTimer) clearTimeout(held.deadlineTimer);
    this.#runningCount--;
    this.#notify();
    if (held.state !== "running") return; // lost or released: no outcome
    held.state = "reported";
    this.#sendOutcome(outcome).then(() => {
      if (this.#held.get(held.wire.id) === held) this.#held.delete(held.wire.id);
    });
  }

  /** Wakes whoever waits in #changed. */
  #notify(): void {
    const listeners = this.#listeners;
    this.#listeners = [];
    for (const l of listeners) l();
  }

  /** Resolves at the next #notify (or when signal aborts). */
  #changed(signal?: AbortSignal): Promise<void> {
    return new Promise<void>((resolve) => {
      if (signal?.aborted) return resolve();
      this.#listeners.push(resolve);
      signal?.addEventListener("abort", () => resolve(), { once: true });
    });
  }

  #progress(held: Held, done: number, total: number): void {
    if (held.state !== "running") return;
    if (held.progress && held.progress.done === done && held.progress.total === total) return;
    held.progress = { done, total };
    held.progressDirty = true;
    if (this.#heartbeatSoon === undefined) {
      const wait = Math.max(0, 1000 - (performance.now() - this.#lastHeartbeat));
      this.#heartbeatSoon = setTimeout(() => {
        this.#heartbeatSoon = undefined;
        void this.#heartbeat();
      }, wait);
    }
  }

  #ensureHeartbeats(): void {
    if (this.#heartbeatTimer !== undefined) return;
    this.#heartbeatTimer = setInterval(() => void this.#heartbeat(), this.#heartbeatEveryMs);
  }

  #stopHeartbeats(): void {
    if (this.#heartbeatTimer) clearInterval(this.#heartbeatTimer);
    if (this.#heartbeatSoon) clearTimeout(this.#heartbeatSoon);
    this.#heartbeatTimer = undefined;
    this.#heartbeatSoon = undefined;
  }

  /** Extends the leases of the jobs held, sends their progress, learns of cancellations and lost leases. */
  async #heartbeat(): Promise<void> {
    if (this.#heartbeatInFlight) return this.#heartbeatInFlight;
    const now = performance.now();
    const jobs: Record<string, unknown>[] = [];
    const sent: Held[] = [];
    for (const held of this.#held.values()) {
      if (held.state === "lost" || held.state === "released") continue;
      if (held.state === "running" && held.leaseUntil < now) {
        // Not renewed in time: another worker may run it by now.
        this.#lose(held);
        continue;
      }
      // A job whose outcome is on its way needs its lease extended only
      // when the lease could end before the outcome arrives.
      if (held.state === "reported" && held.leaseUntil - now > 2 * this.#heartbeatEveryMs) continue;
      const item: Record<string, unknown> = { id: held.wire.id, lease: held.wire.lease };
      if (held.progress && held.progressDirty) {
        item["progress"] = held.progress;
        held.progressDirty = false;
      }
      jobs.push(item);
      sent.push(held);
    }
    if (jobs.length === 0) {
      if (this.#held.size === 0 && this.#heartbeatTimer) {
        clearInterval(this.#heartbeatTimer);
        this.#heartbeatTimer = undefined;
      }
      return;
    }
    this.#lastHeartbeat = now;
    const call = (async () => {
      try {
        const entries: NonNullable<HeartbeatAnswer["jobs"]> = [];
        for (let i = 0; i < jobs.length; i += MAX_ITEMS) {
          const answer = await this.#object<HeartbeatAnswer>("POST", "/v1/worker/heartbeat", {
            worker: this.name,
            jobs: jobs.slice(i, i + MAX_ITEMS),
          });
          entries.push(...(answer.jobs ?? []));
        }
        const byId = new Map(sent.map((h) => [h.wire.id, h]));
        for (const entry of entries) {
          const held = byId.get(entry.id);
          if (!held || held.wire.lease !== entry.lease) continue;
          if (!entry.held) {
            this.#lose(held);
            continue;
          }
          // Extended from serve's now, which is after now: a bound on the
          // lease's end that is never late.
          held.leaseUntil = now + this.#leaseMs;
          if (entry.canceled) this.#cancel(held);
        }
      } catch (err) {
        for (const held of sent) if (held.progress) held.progressDirty = true;
        this.#onError(err, "heartbeat");
      }
    })();
    this.#heartbeatInFlight = call;
    try {
      await call;
    } finally {
      this.#heartbeatInFlight = undefined;
    }
  }

  /** The job is no longer this worker's: abort its handler, send no outcome. */
  #lose(held: Held): void {
    if (held.state === "running") held.state = "lost";
    if (this.#held.get(held.wire.id) === held) {
      this.#held.delete(held.wire.id);
      const now = performance.now();
      for (const [key, at] of this.#dropped) if (now - at > 2 * this.#leaseMs + this.#pollWaitMs) this.#dropped.delete(key);
      this.#dropped.set(`${held.wire.id}:${held.wire.lease}`, now);
    }
    if (!held.controller.signal.aborted) held.controller.abort(new LeaseLostError());
  }

  #cancel(held: Held): void {
    if (held.state === "running" && !held.controller.signal.aborted) held.controller.abort(new CanceledError());
  }

  /** Keeps one cancels long-poll in flight while jobs are held. */
  async #cancelsLoop(): Promise<void> {
    let failures = 0;
    const final = this.#finalController.signal;
    while (!final.aborted) {
      if (this.#runningCount === 0) {
        await this.#changed(final);
        continue;
      }
      try {
        const answer = await this.#object<{ canceled?: { id: number; lease: number }[] }>(
          "POST",
          "/v1/worker/cancels",
          { worker: this.name, wait: "20s" },
          final,
          20_000,
        );
        failures = 0;
        let fresh = false;
        for (const c of answer.canceled ?? []) {
          const held = this.#held.get(c.id);
          if (held && held.wire.lease === c.lease && held.state === "running" && !held.controller.signal.aborted) {
            this.#cancel(held);
            fresh = true;
          }
        }
        // The server answers at once while a canceled job is still held (its
        // handler not yet ended, its outcome not yet recorded): do not spin.
        if (!fresh && (answer.canceled?.length ?? 0) > 0) {
          await sleep(200, final);
        }
      } catch (err) {
        if (final.aborted) break;
        this.#onError(err, "cancels");
        failures++;
        await sleep(backoff(failures), final);
      }
    }
  }

  /** At shutdown: lets running handlers finish within the grace period, then releases the rest and flushes the outcomes. */
  async #drain(): Promise<void> {
    if (this.#runningCount > 0 && !this.#graceCut) {
      let cut = false;
      const timer = setTimeout(() => {
        cut = true;
        this.#notify();
      }, this.#graceMs);
      this.#stopRequested = (graceCut) => {
        if (graceCut) cut = true;
      };
      while (this.#runningCount > 0 && !cut) await this.#changed();
      clearTimeout(timer);
    }
    for (const held of this.#held.values()) {
      if (held.state !== "running") continue;
      held.state = "released";
      if (held.deadlineTimer) clearTimeout(held.deadlineTimer);
      held.controller.abort(new ShutdownError());
      void this.#sendOutcome({ id: held.wire.id, lease: held.wire.lease, outcome: "release" });
    }
    while (this.#outcomeFlush) await this.#outcomeFlush;
  }

  /** Queues an outcome for the next batch; resolves once the server answered it (or it was given up). */
  #sendOutcome(item: Outcome): Promise<void> {
    return new Promise<void>((done) => {
      this.#outcomeQueue.push({ item, done });
      if (!this.#outcomeFlush) {
        this.#outcomeFlush = this.#flushOutcomes().finally(() => (this.#outcomeFlush = undefined));
      }
    });
  }

  /** Sends the queued outcomes; whatever goes wrong, every waiter is answered. */
  async #flushOutcomes(): Promise<void> {
    try {
      await this.#sendOutcomes();
    } catch (err) {
      this.#onError(err, "outcomes");
      for (const b of this.#outcomeQueue.splice(0)) b.done();
    }
  }

  /** Sends the queued outcomes, up to 1000 a call, one call at a time. */
  async #sendOutcomes(): Promise<void> {
    let failures = 0;
    // The items of one call: halved while the server answers 413 (its
    // body bound, 1 MiB by default, holds fewer outcomes with large
    // results than MAX_ITEMS).
    let limit = MAX_ITEMS;
    while (this.#outcomeQueue.length > 0) {
      const batch = this.#outcomeQueue.splice(0, limit);
      await this.#flushProgress(batch.map((b) => b.item));
      let answer: { outcomes?: OutcomeEntry[] };
      try {
        answer = await this.#object("POST", "/v1/worker/outcomes", { worker: this.name, outcomes: batch.map((b) => b.item) });
        if (!Array.isArray(answer.outcomes) || answer.outcomes.length !== batch.length) {
          // Not serve's answer: the outcomes may not have reached it. Sent
          // again: one that had is refused as lease lost, changing nothing.
          throw new RedriveError(200, "malformed_answer", `the answer does not give the ${batch.length} outcomes' status: ${JSON.stringify(answer).slice(0, 200)}`);
        }
        failures = 0;
      } catch (err) {
        if (err instanceof RedriveError && err.status === 413 && batch.length > 1) {
          // Too large a body, not a bad outcome: send it again in halves.
          this.#onError(err, `outcomes (a batch of ${batch.length}, sent again in halves)`);
          limit = Math.ceil(batch.length / 2);
          this.#outcomeQueue.unshift(...batch);
          continue;
        }
        if (err instanceof RedriveError && (err.status === 400 || err.status === 413)) {
          // The server applied nothing: drop the item it names (a 413 of
          // one outcome: larger than the server's body bound), send the
          // others again.
          const m = /^outcomes\[(\d+)\]/.exec(err.field ?? "");
          const bad = m ? Number(m[1]) : err.status === 413 ? 0 : -1;
          if (bad >= 0 && bad < batch.length) {
            const refused = batch[bad]!;
            this.#onError(err, `outcome of job ${refused.item.id} refused`);
            if (refused.item["refused"] === undefined) {
              // Send it again as a plain failure that says why, rather than
              // leave the job to its lease's expiry.
              refused.item = {
                id: refused.item.id,
                lease: refused.item.lease,
                outcome: "fail",
                class: "transient",
                error: clip(`the server refused the worker's ${refused.item.outcome} outcome: ${err.message}`, MAX_ERROR),
              };
              Object.defineProperty(refused.item, "refused", { value: true, enumerable: false });
            } else {
              batch.splice(bad, 1);
              refused.done();
            }
            this.#outcomeQueue.unshift(...batch);
            continue;
          }
          this.#onError(err, "outcomes refused");
          for (const b of batch) b.done();
          continue;
        }
        this.#onError(err, "outcomes");
        failures++;
        // A job whose lease ended meanwhile will be refused anyway: give its outcome up.
        const now = performance.now();
        const keep = batch.filter((b) => {
          const held = this.#held.get(b.item.id);
          if (held && held.wire.lease === b.item.lease && held.leaseUntil < now) {
            b.done();
            return false;
          }
          return true;
        });
        this.#outcomeQueue.unshift(...keep);
        await sleep(backoff(failures), this.#finalController.signal);
        if (this.#finalController.signal.aborted) break;
        continue;
      }
      const entries = answer.outcomes ?? [];
      batch.forEach((b, i) => {
        const entry = entries[i];
        if (entry && entry.status !== 200) {
          const e = entry.error ?? {};
          const err =
            e.code === "lease_lost"
              ? new LeaseLostError(`outcome of job ${b.item.id} (lease ${b.item.lease}) refused: ${e.message ?? "lease lost"}`)
              : new RedriveError(entry.status, e.code ?? `http_${entry.status}`, e.message ?? "", e.field);
          this.#onError(err, `outcome of job ${b.item.id}`);
        }
        b.done();
      });
    }
  }

  /**
   * Sends the progress not yet sent of the jobs of outcomes, so that a
   * completed job keeps its handler's last progress: a heartbeat of those
   * jobs only, before their outcomes.
   */
  async #flushProgress(outcomes: Outcome[]): Promise<void> {
    const jobs: Record<string, unknown>[] = [];
    for (const o of outcomes) {
      const held = this.#held.get(o.id);
      if (o.outcome !== "complete" || !held || held.wire.lease !== o.lease || !held.progress || !held.progressDirty) continue;
      held.progressDirty = false;
      jobs.push({ id: o.id, lease: o.lease, progress: held.progress });
    }
    if (jobs.length === 0) return;
    try {
      for (let i = 0; i < jobs.length; i += MAX_ITEMS) {
        await this.#http.request("POST", "/v1/worker/heartbeat", { worker: this.name, jobs: jobs.slice(i, i + MAX_ITEMS) }, undefined, {
          idempotent: true,
        });
      }
    } catch (err) {
      this.#onError(err, "heartbeat (last progress)");
    }
  }

  /**
   * A request whose 2xx answer must be a JSON object: anything else (a
   * proxy's answer) throws a RedriveError malformed_answer, retried as a
   * network failure.
   */
  async #object<T extends object>(method: string, path: string, body?: unknown, signal?: AbortSignal, waitMs?: number, idempotent = true): Promise<T> {
    // The worker protocol's other calls may be sent twice: a heartbeat,
    // a cancels poll and a stop change nothing the first copy did not,
    // and a second outcome is refused by its lease token. A lease is
    // sent again by the lease loop, marked as such.
    const answer = await this.#http.request<unknown>(method, path, body, signal, { idempotent, waitMs });
    if (answer === null || typeof answer !== "object" || Array.isArray(answer)) {
      throw new RedriveError(200, "malformed_answer", `${path}: the answer is not a JSON object: ${String(JSON.stringify(answer)).slice(0, 200)}`);
    }
    return answer as T;
  }

  /** Waits ms, or less when the worker stops. */
  #pause(ms: number): Promise<void> {
    return sleep(ms, this.#stopController.signal);
  }
}

/** The outcome of a handler that resolved value. */
export function completeOutcome(wire: { id: number; lease: number }, value: unknown): Outcome {
  const outcome: Outcome = { id: wire.id, lease: wire.lease, outcome: "complete" };
  if (value === undefined) return outcome;
  let text: string | undefined;
  try {
    text = JSON.stringify(value);
  } catch (err) {
    return { id: wire.id, lease: wire.lease, outcome: "fail", class: "permanent", error: `the handler's result is not JSON: ${(err as Error).message}` };
  }
  if (text === undefined) {
    return { id: wire.id, lease: wire.lease, outcome: "fail", class: "permanent", error: `the handler's result is not JSON (a ${typeof value})` };
  }
  const bytes = Buffer.byteLength(text, "utf8");
  if (bytes > MAX_RESULT) {
    return {
      id: wire.id,
      lease: wire.lease,
      outcome: "fail",
      class: "permanent",
      error: `the handler's result is ${bytes} bytes of JSON, more than ${MAX_RESULT}`,
    };
  }
  outcome["result"] = JSON.parse(text);
  return outcome;
}

/** The outcome of a handler that threw err. */
export function failOutcome(wire: { id: number; lease: number }, err: unknown, dependency?: string): Outcome {
  if (err instanceof SnoozeError) {
    return { id: wire.id, lease: wire.lease, outcome: "snooze", delay: formatDuration(Math.min(err.delayMs, MAX_DELAY)) };
  }
  const outcome: Outcome = { id: wire.id, lease: wire.lease, outcome: "fail", class: "transient", error: clip(messageOf(err), MAX_ERROR) };
  if (err instanceof JobError) {
    outcome["class"] = err.failureClass;
    if (err.reason) outcome["reason"] = clip(err.reason.replace(/\p{Cc}/gu, " "), MAX_REASON);
    if (err.dependency) dependency = err.dependency;
    if (err instanceof RateLimitedError && err.retryAfterMs !== undefined) {
      outcome["retry_after"] = formatDuration(Math.min(err.retryAfterMs, MAX_DELAY));
    }
  }
  if (err instanceof Error && err.cause !== undefined) outcome["cause"] = clip(messageOf(err.cause), MAX_ERROR);
  if (dependency) outcome["dependency"] = dependency;
  return outcome;
}

/** The most jobs one heartbeat, or outcomes one call, may name. */
const MAX_ITEMS = 1000;
/** The longest delay the server takes (ten years), in milliseconds. */
const MAX_DELAY = 10 * 365 * 24 * 3_600_000;
/** Characters of an error or cause sent (the server takes 64 KiB, the engine keeps less). */
const MAX_ERROR = 8192;
/** Characters of a reason sent. */
const MAX_REASON = 200;

function clip(text: string, max: number): string {
  return text.length <= max ? text : text.slice(0, max - 1) + "…";
}

function messageOf(err: unknown): string {
  let text: string;
  if (err instanceof Error) text = err.message || err.name;
  else if (typeof err === "string") text = err;
  else {
    try {
      text = JSON.stringify(err) ?? String(err);
    } catch {
      text = String(err);
    }
  }
  return text === "" ? "error without a message" : text;
}

/** node-<pid>@<host>, with the host's characters the protocol does not allow replaced by "-". */
export function defaultName(pid: number, host: string): string {
  const clean = host.replace(/[^A-Za-z0-9._:@-]/g, "-").replace(/@/g, "-");
  return `node-${pid}@${clean}`.slice(0, 100);
}

/** A duration of an answer: a Go duration string, or a number of milliseconds. */
function durationMs(value: string | number): number {
  if (typeof value === "number" && Number.isFinite(value) && value >= 0) return value;
  if (typeof value === "string") return parseDuration(value);
  throw new RangeError(`not a duration: ${JSON.stringify(value)}`);
}

function backoff(failures: number): number {
  return Math.min(5000, 100 * 2 ** Math.min(failures - 1, 6));
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const timer = setTimeout(done, ms);
    function done(): void {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    }
    signal.addEventListener("abort", done, { once: true });
  });
}
