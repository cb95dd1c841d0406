// Package amqp is redrive's RabbitMQ transport: jobs travel as messages on
// RabbitMQ queues, and the handlers, retry policies, error classification,
// circuit breakers, Snooze, Record, timeouts, logs and observer of a
// redrive.Worker apply to them unchanged. Only where a job waits differs:
// a retry waits in a delay queue of the broker, and a dead job waits in
// the work queue's dead-letter queue, <queue>-dlq.
//
// # Topology
//
// For a work queue named q, a Topology declares (idempotently, at start
// and again after every reconnect):
//
//   - q, durable, whose dead letters go to q-dlq: anything rejected
//     without requeue, by redrive or by any other consumer, ends there;
//   - q-dlq, durable;
//   - one delay queue q-retry-<d> per distinct delay d of the retry
//     policy (q-retry-1s, q-retry-2s, q-retry-4s for the default policy),
//     each with a queue-wide message TTL of d and a dead-letter route back
//     to q. One TTL per queue: messages never wait behind a longer-lived
//     head.
//
// With Quorum set, the queues are quorum queues, dead-lettering is
// at-least-once (x-dead-letter-strategy) with x-overflow=reject-publish,
// and x-delivery-limit dead-letters a message that crashed its consumers
// that many times before any of them could decide.
//
// # How precise broker retries are
//
// A retry due after delay D is published to the largest delay queue not
// longer than D, with its due time in a header. When it comes back, a
// remainder at least as long as the smallest delay queue takes another
// hop; a shorter remainder is waited out by the consumer itself (the
// message is held, unacknowledged, and counts against the prefetch). So a
// retry never runs before its due time, and runs late by the broker's
// expiry latency (milliseconds) plus whatever wait the work queue's
// backlog adds. Delays outside the policy (Retry-After, breaker
// deferrals, Snooze) take the same path, hopping through the largest
// delay queue as many times as needed.
//
// # Messages
//
// A job is a message whose type property names its kind (a message
// without one takes the queue's DefaultKind) and whose body is the
// payload (JSON for redrive.Handle; any bytes for a plain handler). Its
// message-id is its idempotency key. redrive's headers carry the state of
// a retried message: HeaderAttempt (attempts used, authoritative; the
// broker's x-death is read as a fallback), HeaderDue, HeaderLastDelay and
// HeaderHistory (the attempt history, bounded), and on a dead letter
// HeaderReason, HeaderClass, HeaderError, HeaderCause, HeaderDeadAt and
// HeaderOrigin.
//
// # Managed queues
//
// A Router gives a queue whose consumers are not redrive's (any language,
// any client) the same retries and DLQ, through the broker's own
// protocol. Its topology has Topology.FailureExchange set: the work queue
// dead-letters to that exchange, a failure queue <queue>-failed receives
// the rejections, and the delay queues dead-letter to it too. A consumer
// acks what succeeded; it rejects (requeue false) what failed, which the
// router retries by the queue's policy; or it publishes the message, with
// the headers it was delivered with, to the failure exchange (routing
// key: the queue) adding HeaderClass, HeaderError, HeaderCause and
// HeaderRetryAfter, then acks it, to say why. The router decides with a
// redrive.Executor (Executor.Report) and hands a retry back to the work
// queue only once it is due. A Keeper moves dead letters into a store as
// dead jobs of kind Kind, whose payload is a Message kept byte-exact;
// RegisterKind makes a worker publish such a job back to its queue when
// it is redriven.
//
// # Limits
//
// ConsumerOptions.Limits puts messages under redrive's concurrency and
// rate limits (the list redrive.Client.SetLimits takes). Without
// ConsumerOptions.LimitStore they hold per consumer process: N consumers
// run up to N·max of a group at once. With it they hold fleet-wide, for
// every consumer (of either transport) on that store: a message of a
// limit with a max runs holding a slot leased from the store (renewed
// while it runs; a killed consumer's slots come back when their leases
// end, LimitLease), never more than max at once, and each start of a
// rate-limited message is taken from the store's rate state. A message
// of a full or rate-held group waits unacked, without a handler slot,
// for up to LimitHold and while fewer than Prefetch - Concurrency wait,
// then goes round the shortest delay queue; it uses no attempt either
// way. While the store cannot be reached, limited messages wait: none
// starts. See docs/rabbitmq.md, "Limits".
//
// # Delivery guarantees
//
// A retry or a dead letter is published with publisher confirms before
// the original is acknowledged, so a crash between the two duplicates a
// message and never loses one. Handlers must be idempotent, as with any
// at-least-once queue. A lost connection is reestablished by Conn with
// its Reconnect policy, and publishers and consumers resume by themselves.
package amqp
