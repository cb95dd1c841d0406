package apiclient

import (
	"encoding/json"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/breaker"
	"github.com/redrivehq/redrive/store"
)

// The wire types below are the REST API's bodies. The server package
// answers with the same types (it names them as aliases), so that a
// field added on one side is on the other.

// EnqueueRequest is the body of POST /v1/jobs and one element of a batch.
type EnqueueRequest struct {
	Kind string `json:"kind"`
	// Payload is any JSON value (null when absent).
	Payload json.RawMessage `json:"payload"`
	Queue   string          `json:"queue"`
	// RunAt (RFC 3339) schedules the job; Delay ("10s") schedules it
	// after a delay. At most one of them may be set.
	RunAt string `json:"run_at"`
	Delay string `json:"delay"`
	// MaxRetries overrides the policy's retry count when set.
	MaxRetries       *int   `json:"max_retries"`
	IdempotencyKey   string `json:"idempotency_key"`
	Dependency       string `json:"dependency"`
	NotReprocessable bool   `json:"not_reprocessable"`
	// ReturnExisting answers a key held by a different job (another
	// kind, queue or payload) with that job instead of 409.
	ReturnExisting bool `json:"return_existing"`
	// Priority orders the job among the waiting jobs of its queue,
	// higher first: an integer from -100 to 100, 0 (the default) when
	// absent.
	Priority int `json:"priority,omitempty"`
}

// PriorityRequest is the body of POST /v1/jobs/{id}/priority.
type PriorityRequest struct {
	// Priority is the job's new priority, from -100 to 100 (required).
	Priority *int `json:"priority"`
}

// BatchRequest is the body of POST /v1/jobs/batch.
type BatchRequest struct {
	Jobs []EnqueueRequest `json:"jobs"`
}

// JobList is the answer of POST /v1/jobs/batch: the jobs, in the order
// of the request.
type JobList struct {
	Jobs []*redrive.Job `json:"jobs"`
}

// FilterBody is a DLQ filter, as the filter of a redrive body or as
// query parameters. Times are RFC 3339.
type FilterBody struct {
	Queue       string `json:"queue"`
	Kind        string `json:"kind"`
	Class       string `json:"class"`
	Reason      string `json:"reason"`
	Fingerprint string `json:"fingerprint"`
	Since       string `json:"since"`
	Until       string `json:"until"`
	// Q matches the last error's text, case-insensitively.
	Q string `json:"q"`
	// ErrorPrefix selects the jobs whose last error starts with this
	// text, case-sensitively; an index serves it on dead jobs. Listings,
	// counts and groups take it; operations (redrive, purge, export) do
	// not.
	ErrorPrefix string `json:"error_prefix,omitempty"`
}

// RedriveBody is the body of POST /v1/dlq/redrive. Exactly one of IDs
// and Filter selects the dead jobs; an empty filter needs All.
type RedriveBody struct {
	IDs    []int64     `json:"ids"`
	Filter *FilterBody `json:"filter"`
	// All confirms a redrive of every dead job (an empty filter).
	All bool `json:"all"`
	// Rate bounds the redrive in jobs per second (0: no bound).
	Rate float64 `json:"rate"`
	// Payload, when present and not null, replaces each job's payload.
	Payload json.RawMessage `json:"payload"`
	// Note is recorded in each job's history.
	Note string `json:"note"`
	// Batch is how many jobs one batch redrives, in one transaction
	// (default 100).
	Batch int `json:"batch"`
}

// ReplayFilterBody selects the jobs of a replay: the DLQ filter's fields,
// states (any, completed included; none: every state) and a payload
// field's value.
type ReplayFilterBody struct {
	FilterBody
	States []string `json:"states"`
	// PayloadField is a dotted path of object keys in the payload
	// ("customer_id", "order.customer.id"); PayloadValue the JSON scalar
	// it must equal (numbers compare by value).
	PayloadField string          `json:"payload_field"`
	PayloadValue json.RawMessage `json:"payload_value"`
}

// ReplayBody is the body of POST /v1/replay.
type ReplayBody struct {
	Filter *ReplayFilterBody `json:"filter"`
	// All confirms a replay of every job (an empty filter).
	All bool `json:"all"`
	// Batch is how many jobs one batch handles (default 100).
	Batch int `json:"batch"`
	// Rate bounds the replay in jobs per second (0: no bound).
	Rate float64 `json:"rate"`
	// Note is recorded in each new job's replayed event.
	Note string `json:"note"`
}

// CancelBody is the body of POST /v1/jobs/cancel: a bulk cancel of
// pending and scheduled jobs, run as an operation. Exactly one of IDs
// and Filter selects the jobs; an empty filter needs All. Running jobs
// are never canceled by it: Filter.States may name pending and
// scheduled only (none: both), and the ids that are not pending or
// scheduled are counted as skipped.
type CancelBody struct {
	IDs    []int64           `json:"ids"`
	Filter *ReplayFilterBody `json:"filter"`
	// All confirms a cancel of every pending and scheduled job (an empty
	// filter).
	All bool `json:"all"`
	// Batch is how many jobs one batch cancels, in one transaction
	// (default 100).
	Batch int `json:"batch"`
	// Rate bounds the cancel in jobs per second (0: no bound).
	Rate float64 `json:"rate"`
	// Note is recorded in each canceled job's history.
	Note string `json:"note"`
}

// ExportBody is the body of POST /v1/dlq/export: a folder export of dead
// jobs run as an operation by a worker, into a folder under the server's
// export folder (serve --export-dir).
type ExportBody struct {
	Filter *FilterBody `json:"filter"`
	// All confirms an export of every dead job (an empty filter).
	All bool `json:"all"`
	// Dir is the folder to write, relative to the server's export
	// folder: a local path (no "..", not absolute).
	Dir   string `json:"dir"`
	Batch int    `json:"batch"`
	// Decrypt writes the payloads in plaintext; without it, on a server
	// with payload keys, those of sealed queues (or stored sealed) are
	// written sealed. Admin role only; recorded in the audit log.
	Decrypt bool `json:"decrypt,omitempty"`
}

// ExportLine is one line of GET /v1/dlq/export: a dead job with its
// history, and what the folder export writes to its error.json and
// metadata.json.
type ExportLine struct {
	Job      *redrive.Job             `json:"job"`
	Error    redrive.ExportedError    `json:"error"`
	Metadata redrive.ExportedMetadata `json:"metadata"`
}

// Operation is a durable bulk operation (a redrive, a purge, a replay or
// an export), as GET /v1/operations/{id} answers it. Every field is
// always present, so a dashboard can poll it and draw a progress bar:
// Processed of Matched.
type Operation struct {
	// ID is "op_" and 24 hexadecimal digits.
	ID    string                 `json:"id"`
	Kind  redrive.OperationKind  `json:"kind"`
	State redrive.OperationState `json:"state"`
	// Matched is how many jobs the selection held when the runner first
	// counted it (0 until then).
	Matched int64 `json:"matched"`
	// Processed is how many jobs the operation has handled so far: the
	// sum of the outcomes below.
	Processed int64 `json:"processed"`
	// Replayed counts the new jobs a replay enqueued.
	Replayed int64 `json:"replayed"`
	Redriven int64 `json:"redriven"`
	// Refused counts jobs marked not reprocessable (a redrive).
	Refused int64 `json:"refused"`
	// Skipped counts jobs that were gone or no longer dead (a redrive
	// by ids), or not pending or scheduled (a cancel by ids).
	Skipped int64 `json:"skipped"`
	// Unblocks counts, for a redrive, the blocked jobs of workflows
	// waiting directly for the jobs it redrove, summed over its steps.
	Unblocks int64 `json:"unblocks,omitempty"`
	Purged   int64 `json:"purged"`
	Exported int64 `json:"exported"`
	// Canceled counts the jobs a cancel canceled.
	Canceled int64 `json:"canceled"`
	// Rekeyed counts the payloads a rekey re-sealed under the current
	// payload key.
	Rekeyed int64 `json:"rekeyed"`
	Failed  int64 `json:"failed"`
	// RefusedIDs are the ids of the refused jobs (the first 1000).
	RefusedIDs []int64 `json:"refused_ids"`
	// Error says why the operation failed ("" otherwise).
	Error string `json:"error"`
	// Rate is its bound in jobs per second (0: none); Batch how many
	// jobs one batch handles.
	Rate  float64 `json:"rate"`
	Batch int     `json:"batch"`
	Note  string  `json:"note"`
	// Filter is the selection, with its empty fields left out.
	Filter json.RawMessage `json:"filter"`
	// Dir is, for an export, the folder written on the worker's machine.
	Dir string `json:"dir"`
	// Cursor is the id of the last job handled: a runner that takes the
	// operation over continues after it.
	Cursor int64 `json:"cursor"`
	// Worker is the runner holding a running operation.
	Worker string `json:"worker"`
	// StartedAt is when the request started it; RunAt when a runner
	// first claimed it (null while pending).
	StartedAt  time.Time  `json:"started_at"`
	RunAt      *time.Time `json:"run_at"`
	UpdatedAt  time.Time  `json:"updated_at"`
	FinishedAt *time.Time `json:"finished_at"`
}

// OperationBody is the body of every answer about one operation.
type OperationBody struct {
	Operation Operation `json:"operation"`
}

// OperationList is the answer of GET /v1/operations: the newest first;
// Next, when set, is the before parameter of the next (older) page.
type OperationList struct {
	Operations []Operation `json:"operations"`
	Next       string      `json:"next,omitempty"`
}

// GroupList is the answer of GET /v1/dlq/groups.
type GroupList struct {
	Groups []redrive.Group `json:"groups"`
}

// CountResponse is the answer of GET /v1/jobs/count and GET
// /v1/dlq/count: how many jobs the filter selects, across every page of
// the matching listing.
type CountResponse struct {
	Count int64 `json:"count"`
}

// SeriesResponse is the answer of GET /v1/stats/series.
type SeriesResponse struct {
	// Step is the width of a point: always "1m".
	Step string `json:"step"`
	// Since is the first minute covered, in UTC.
	Since time.Time `json:"since"`
	// Points are the minutes with data, oldest first; minutes without a
	// snapshot are absent. The last point may be partial.
	Points []redrive.SeriesPoint `json:"points"`
}

// QueueList is the body of GET /v1/queues: every queue, sorted by name.
type QueueList struct {
	Queues []redrive.Queue `json:"queues"`
}

// QueueBody is the body answering a pause or a resume.
type QueueBody struct {
	Queue redrive.Queue `json:"queue"`
}

// WorkerList is the body of GET /v1/workers: the worker processes
// registered in the store, the most recently started first.
type WorkerList struct {
	Workers []redrive.WorkerStatus `json:"workers"`
}

// ScheduleList is the body of GET /v1/schedules: every periodic schedule
// declared in the store, sorted by name.
type ScheduleList struct {
	Schedules []redrive.ScheduleInfo `json:"schedules"`
}

// ScheduleBody is the body answering GET /v1/schedules/{name}, a pause
// and a resume.
type ScheduleBody struct {
	Schedule redrive.ScheduleInfo `json:"schedule"`
}

// BreakerView is one circuit breaker in GET /v1/breakers: the fleet's
// breaker as the store shares it between the processes, merged with this
// process's own breaker of the same name when it has one.
type BreakerView struct {
	// Name is the dependency's name.
	Name string `json:"name"`
	// State is the fleet's state (this process's, for a breaker the store
	// does not know yet). An open breaker whose break has elapsed shows
	// half_open: the next call is the probe.
	State breaker.State `json:"state"`
	// Failures and Requests are the fleet's counts within the window
	// (requests are counted unless the breaker is count-only, and only
	// from processes that reported a failure).
	Failures int `json:"failures"`
	Requests int `json:"requests"`
	// Since is when the fleet's breaker entered its state.
	Since time.Time `json:"since,omitzero"`
	// OpenedAt and OpenedBy tell when the breaker last opened and who
	// opened it: the process (worker id) whose failures tripped it, or
	// the operator who forced it.
	OpenedAt time.Time `json:"opened_at,omitzero"`
	OpenedBy string    `json:"opened_by,omitempty"`
	// ReadyAt is, while open, when a probe may go through; absent for a
	// breaker forced open until it is closed.
	ReadyAt time.Time `json:"ready_at,omitzero"`
	// Forced is true while an operator holds the breaker open.
	Forced bool `json:"forced,omitempty"`
	// ProbeBy and ProbeUntil name, while half-open, the process holding
	// the fleet's single probe and when its lease ends.
	ProbeBy    string    `json:"probe_by,omitempty"`
	ProbeUntil time.Time `json:"probe_until,omitzero"`
	// Trips counts the fleet's trips (this process's for a breaker the
	// store does not know).
	Trips uint64 `json:"trips"`
	// Shared is true when the store holds the breaker, false for a
	// breaker only this process has used (no failure reported yet).
	Shared bool `json:"shared"`
	// Fallback is true when this process lost the store and its breakers
	// decide alone: Local then shows what this process does.
	Fallback bool `json:"fallback,omitempty"`
	// Local is this process's own breaker of that name, when it has one.
	Local *breaker.Status `json:"local,omitempty"`
}

// BreakerBody is the body answering a force-open or a reset.
type BreakerBody struct {
	Breaker BreakerView `json:"breaker"`
}

// BreakerOpenRequest is the optional body of POST
// /v1/breakers/{name}/open.
type BreakerOpenRequest struct {
	// Duration is how long the breaker stays forced open, as a Go
	// duration ("10m"); empty: until it is closed.
	Duration string `json:"duration"`
}

// Readiness is the answer of GET /readyz when the API is ready.
type Readiness struct {
	// Status is "ready", or "degraded" when a broker connection of
	// serve is down (the store, the API and the dashboard still work).
	Status string `json:"status"`
	// Brokers are serve's broker connections, when it has any.
	Brokers []BrokerConnection `json:"brokers,omitempty"`
}

// BrokerConnection is one broker connection in Readiness.
type BrokerConnection struct {
	Kind       string `json:"kind"`
	Connected  bool   `json:"connected"`
	Reconnects int64  `json:"reconnects"`
}

// AMQPQueueList is the answer of GET /v1/amqp/queues.
type AMQPQueueList struct {
	Queues []AMQPQueue `json:"queues"`
}

// AMQPQueue is a RabbitMQ work queue `redrive serve --amqp-url` manages
// (the JSON of amqp.ManagedQueue, without importing the amqp package).
type AMQPQueue struct {
	// Queue is the work queue's name; Broker, the broker's URL without
	// credentials.
	Queue  string `json:"queue"`
	Broker string `json:"broker"`
	// FailureExchange is where consumers report failures.
	FailureExchange string `json:"failure_exchange"`
	// DeadLetters says where dead letters are kept: "store" or "broker".
	DeadLetters string `json:"dead_letters"`
	// Queues are the broker's depth and consumers of each queue of the
	// topology.
	Queues []AMQPQueueDepth `json:"queues"`
	// Router and Keeper are the running totals since serve started
	// (Keeper is absent when dead letters stay in the broker).
	Router AMQPRouterStats `json:"router"`
	Keeper *KeeperStats    `json:"keeper,omitempty"`
	// Error is set when the broker could not be asked for the depths.
	Error string `json:"error,omitempty"`
}

// AMQPQueueDepth is one queue of a managed topology (amqp.QueueDepth).
type AMQPQueueDepth struct {
	// Name is the queue's name; Role is what it is to the topology:
	// work, failed, tier or dlq.
	Name string `json:"name"`
	Role string `json:"role"`
	// Delay is a delay queue's delay (in JSON, milliseconds).
	Delay store.Duration `json:"delay,omitempty"`
	// Messages are the messages ready in the queue; Consumers, the
	// consumers subscribed.
	Messages  int `json:"messages"`
	Consumers int `json:"consumers"`
	// Missing is set when the queue does not exist.
	Missing bool `json:"missing,omitempty"`
}

// AMQPRouterStats are the failure router's running totals
// (amqp.RouterStats).
type AMQPRouterStats struct {
	Failures       int64 `json:"failures"`
	Reported       int64 `json:"reported"`
	Retried        int64 `json:"retried"`
	Dead           int64 `json:"dead"`
	Returned       int64 `json:"returned"`
	Hops           int64 `json:"hops"`
	Waits          int64 `json:"waits"`
	Undecodable    int64 `json:"undecodable"`
	SettleFailures int64 `json:"settle_failures"`
}

// KeeperStats are the running totals of a keeper of dead letters, for
// RabbitMQ and Kafka alike (amqp.KeeperStats, kafka.KeeperStats).
type KeeperStats struct {
	// Kept counts the dead letters stored as new dead jobs; Duplicates,
	// those already stored.
	Kept       int64 `json:"kept"`
	Duplicates int64 `json:"duplicates"`
	// StoreFailures counts the failed attempts to store a dead letter.
	StoreFailures int64 `json:"store_failures"`
}

// KafkaTopicList is the answer of GET /v1/kafka/topics.
type KafkaTopicList struct {
	Topics []KafkaTopic `json:"topics"`
}

// KafkaTopic is a Kafka main topic whose dead letters `redrive serve
// --kafka-topics` keeps (the JSON of kafka.ManagedTopic, without
// importing the kafka package).
type KafkaTopic struct {
	// Topic is the main topic; Group, the consumers' group whose lag was
	// asked ("" for none).
	Topic string `json:"topic"`
	Group string `json:"group,omitempty"`
	// Main, Tiers and DLT are the main topic, its retry tiers by
	// ascending delay, and its dead-letter topic.
	Main  KafkaTopicCount  `json:"main"`
	Tiers []KafkaTierCount `json:"tiers"`
	DLT   KafkaTopicCount  `json:"dlt"`
	// Brokers are the seed brokers.
	Brokers []string `json:"brokers"`
	// Keeper are the keeper's running totals since serve started.
	Keeper *KeeperStats `json:"keeper,omitempty"`
	// Error is set when the cluster could not be asked for the
	// statistics.
	Error string `json:"error,omitempty"`
}

// KafkaTopicCount is one topic's partitions, offsets, records and lag
// (kafka.TopicCount).
type KafkaTopicCount struct {
	Topic      string `json:"topic"`
	Partitions int    `json:"partitions"`
	// Offsets is the topic's end offsets minus its start offsets: an
	// upper bound on the records it retains (transaction markers and
	// aborted records take offsets too).
	Offsets int64 `json:"offsets"`
	// Records counts the records a read_committed reader sees: set on a
	// keeper's dead-letter topic only (its dead letters).
	Records *int64 `json:"records,omitempty"`
	// Lag is how far LagGroup is behind: offsets, or records where
	// Records is set; nil when no group was asked, or the group does not
	// consume the topic.
	Lag      *int64 `json:"lag,omitempty"`
	LagGroup string `json:"lag_group,omitempty"`
	// Missing is set when the topic does not exist.
	Missing bool `json:"missing,omitempty"`
}

// KafkaTierCount is a retry tier's KafkaTopicCount, with its delay
// (kafka.TierCount).
type KafkaTierCount struct {
	KafkaTopicCount
	// Delay is the tier's delay (milliseconds in JSON).
	Delay store.Duration `json:"delay"`
}

// LimitList is the body of GET /v1/limits: every concurrency limit, by
// name, with its use now.
type LimitList struct {
	Limits []store.LimitState `json:"limits"`
}

// LimitBody is the body answering PUT /v1/limits/{name}.
type LimitBody struct {
	Limit store.LimitState `json:"limit"`
}

// LimitSet is the body of PUT /v1/limits/{name}: the limit's new max,
// its new rate, its hold on Retry-After, or several. Max 0 removes the
// cap of a limit that keeps a rate. Rate is "N/interval" ("50/s",
// "3/1m"; see redrive.ParseRate) or "none" to remove the rate; Burst
// goes with a Rate (without one, the limit keeps its burst: 1 for a
// limit that had no rate). HoldOnRetryAfter turns the hold on or off
// (see redrive.ConcurrencyLimit.HoldOnRetryAfter).
type LimitSet struct {
	Max              *int    `json:"max,omitempty"`
	Rate             *string `json:"rate,omitempty"`
	Burst            *int    `json:"burst,omitempty"`
	HoldOnRetryAfter *bool   `json:"hold_on_retry_after,omitempty"`
}
