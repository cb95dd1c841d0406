// The errors a handler throws to say how its job failed, and the errors the
// client itself throws.

/** The failure classes of redrive (docs/design.md). */
export type FailureClass = "unknown" | "transient" | "rate_limited" | "permanent" | "needs_auth";

/** Options common to the failure errors a handler throws. */
export interface JobErrorOptions {
  /** The error that caused this one (recorded as the failure's cause). */
  cause?: unknown;
  /** A machine-readable reason shown in the job's history ("http_429"). */
  reason?: string;
  /**
   * The circuit breaker the attempt called: its failure is recorded on it.
   * Wins over the dependency the handler was registered with.
   */
  dependency?: string;
}

/**
 * The base of the errors that classify a failure. A handler throws one of
 * its subclasses; any other error is reported as transient (retried on the
 * queue's policy).
 */
export abstract class JobError extends Error {
  /** The class reported to the server. */
  abstract readonly failureClass: FailureClass;
  /** A machine-readable reason shown in the job's history. */
  readonly reason: string | undefined;
  /** The breaker the attempt called, if the handler named one. */
  readonly dependency: string | undefined;

  constructor(message: string, options: JobErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.reason = options.reason;
    this.dependency = options.dependency;
  }
}

/** A failure that retrying cannot fix: the job goes to the DLQ at once. */
export class PermanentError extends JobError {
  override readonly failureClass = "permanent" as const;
}

/**
 * A failure for want of valid credentials: the job goes to the DLQ at once
 * (class needs_auth), to be redriven once the credentials are fixed.
 */
export class NeedsAuthError extends JobError {
  override readonly failureClass = "needs_auth" as const;
}

/** A failure worth retrying on the queue's retry policy. */
export class TransientError extends JobError {
  override readonly failureClass = "transient" as const;
}

/**
 * The dependency said "too many requests": the job is retried no sooner
 * than retryAfterMs from now (the engine's Retry-After handling: capped by
 * the policy's max_retry_after, lengthened by its jitter).
 */
export class RateLimitedError extends JobError {
  override readonly failureClass = "rate_limited" as const;
  /** Milliseconds to wait before the retry; undefined: the policy's delay. */
  readonly retryAfterMs: number | undefined;

  constructor(message: string, retryAfterMs?: number, options: JobErrorOptions = {}) {
    super(message, options);
    if (retryAfterMs !== undefined && (!Number.isFinite(retryAfterMs) || retryAfterMs < 0)) {
      throw new RangeError(`RateLimitedError: retryAfterMs must be a non-negative number of milliseconds, got ${String(retryAfterMs)}`);
    }
    this.retryAfterMs = retryAfterMs;
  }
}

/**
 * Not a failure: run the job again in delayMs, using no attempt (a snooze,
 * as redrive.Snooze does for a Go handler).
 */
export class SnoozeError extends Error {
  /** Milliseconds until the job runs again. */
  readonly delayMs: number;

  constructor(delayMs: number, message = `snoozed for ${delayMs} ms`) {
    super(message);
    if (!Number.isFinite(delayMs) || delayMs <= 0) {
      throw new RangeError(`SnoozeError: delayMs must be a positive number of milliseconds, got ${String(delayMs)}`);
    }
    this.name = "SnoozeError";
    this.delayMs = delayMs;
  }
}

/**
 * An error answer of the API: its HTTP status and the error body's code,
 * message and field (`{"error": {"code", "message", "field"}}`).
 */
export class RedriveError extends Error {
  /** The HTTP status of the answer. */
  readonly status: number;
  /** The error's code ("invalid", "lease_lost", "not_found", ...). */
  readonly code: string;
  /** The input at fault, when the server named one ("payload.url"). */
  readonly field: string | undefined;

  constructor(status: number, code: string, message: string, field?: string) {
    super(field ? `${status} ${code}: ${message} (field ${field})` : `${status} ${code}: ${message}`);
    this.name = "RedriveError";
    this.status = status;
    this.code = code;
    this.field = field;
  }
}

/**
 * An answer whose body is longer than the client's bound
 * (ConnectionOptions.maxAnswerBytes): not read further, nothing of it
 * used. Its status is the answer's; code "answer_too_large".
 */
export class AnswerTooLargeError extends RedriveError {
  /** The bound, in bytes. */
  readonly limit: number;

  constructor(status: number, method: string, path: string, limit: number) {
    super(status, "answer_too_large", `${method} ${path}: the answer's body is more than the bound of ${limit} bytes (maxAnswerBytes)`);
    this.name = "AnswerTooLargeError";
    this.limit = limit;
  }
}

/**
 * The reason of a handler's AbortSignal when the job is no longer this
 * worker's (its lease was lost, e.g. rescued after missed heartbeats): its
 * outcome would be refused, so none is sent.
 */
export class LeaseLostError extends Error {
  constructor(message = "the job's lease was lost: another attempt may run it") {
    super(message);
    this.name = "LeaseLostError";
  }
}

/**
 * The reason of a handler's AbortSignal when a user canceled the job. The
 * handler's outcome is still reported; the job ends canceled.
 */
export class CanceledError extends Error {
  constructor(message = "the job was canceled") {
    super(message);
    this.name = "CanceledError";
  }
}

/**
 * The reason of a handler's AbortSignal when the worker shuts down and the
 * grace period ended: the job is handed back untried (released).
 */
export class ShutdownError extends Error {
  constructor(message = "the worker is shutting down: the job is released") {
    super(message);
    this.name = "ShutdownError";
  }
}

/**
 * The reason of a handler's AbortSignal when the attempt's deadline (a
 * timeout configured on the server) has passed.
 */
export class DeadlineError extends Error {
  constructor(message = "the attempt's deadline has passed") {
    super(message);
    this.name = "DeadlineError";
  }
}
