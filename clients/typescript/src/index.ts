// @redrive/client: enqueue jobs to redrive and run redrive workers in
// Node.js, over redrive serve's REST API and HTTP worker protocol.

export {
  Client,
  type EnqueueOptions,
  type Job,
  type JobEvent,
  type WorkflowOptions,
  type WorkflowJobOptions,
  type Workflow,
  type WorkflowJob,
} from "./client.js";
export {
  Worker,
  LeasedJob,
  MAX_RESULT,
  type WorkerOptions,
  type HandlerOptions,
  type HandlerContext,
  type Handler,
} from "./worker.js";
export {
  JobError,
  PermanentError,
  NeedsAuthError,
  TransientError,
  RateLimitedError,
  SnoozeError,
  RedriveError,
  AnswerTooLargeError,
  LeaseLostError,
  CanceledError,
  ShutdownError,
  DeadlineError,
  type FailureClass,
  type JobErrorOptions,
} from "./errors.js";
export { parseDuration, formatDuration } from "./duration.js";
export { DEFAULT_MAX_ANSWER_BYTES, type ConnectionOptions } from "./http.js";
