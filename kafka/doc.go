// Package kafka is redrive's Kafka (and Redpanda) transport: jobs travel
// as records on a topic, and the handlers, retry policies, error
// classification, circuit breakers, Snooze, Record, timeouts, logs and
// observer of a redrive.Worker apply to them unchanged, through the same
// redrive.Executor. Only where a job waits differs: a retry waits in a
// retry tier topic, and a dead job in the dead-letter topic.
//
// # Topics
//
// For a main topic t, a Topology names (and Consumer.Run creates, unless
// told only to check):
//
//   - t, the main topic, consumed by the consumer group;
//   - t-retry-<d>, one retry tier per distinct delay d of the retry
//     policy (t-retry-1s, t-retry-2s, t-retry-4s for the default policy),
//     then tiers ten times longer up to the policy's MaxRetryAfter for
//     the longer waits (a Retry-After, an open breaker);
//   - t-dlt, the dead-letter topic.
//
// # How a record is settled
//
// A record's handler runs; a completed record's offset is committed. A
// retryable failure is produced to the tier of its delay with headers
// (HeaderAttempt, HeaderDue, HeaderFirstFailure, HeaderHistory bounded in
// size, the record's origin topic/partition/offset), then its offset is
// committed; the main partition keeps flowing. A tier's record waits for
// its due time with its partition paused (the consumer keeps polling, and
// keeps its group session), then its handler runs again: a retry is never
// early. A record due much later than its tier's delay moves on to a
// longer tier, or goes round its tier again when none fits, so that it
// never holds the records behind it for long. Give-up, Permanent and NeedsAuth failures, and records whose
// redrive headers cannot be read, are produced to t-dlt with the reason,
// class, error and history. An open breaker and Snooze take a tier
// without using an attempt.
//
// # Limits
//
// ConsumerOptions.Limits puts records under redrive's concurrency and
// rate limits (the list redrive.Client.SetLimits takes). Without
// ConsumerOptions.LimitStore they hold per consumer process: N consumers
// run up to N·max of a group at once. With it they hold fleet-wide, for
// every consumer (of either transport) on that store: a record of a
// limit with a max runs holding a slot leased from the store (renewed
// while it runs; a killed consumer's slots come back when their leases
// end, LimitLease), never more than max at once, and each start of a
// rate-limited record is taken from the store's rate state. A record of
// a full or rate-held group waits with its partition paused and its
// offset uncommitted for up to LimitHold, then goes to the shortest
// retry tier; it uses no attempt either way. While the store cannot be
// reached, limited records wait: none starts. See docs/kafka.md,
// "Limits".
//
// # Delivery modes
//
// AtLeastOnce (the default) produces a retry or a dead letter, acknowledged
// by every in-sync replica, before it commits the record's offset: a crash
// between the two duplicates a retry or a dead letter, never loses one.
// ExactlyOnce produces a polled batch's retries and dead letters and
// commits its offsets in one Kafka transaction, so neither is lost or
// duplicated for read_committed readers; handlers still run at least once
// (an aborted batch runs again), as with any broker.
//
// # Dead letters
//
// A DLT counts, peeks (with each record's history) and redrives dead
// letters back to the main topic with their attempt count reset, at a
// bounded rate, by offset range or by reason and class; its cursor, a
// consumer group's offsets, remembers how far redrives went. Keys, values
// and headers are republished byte-exact.
package kafka
