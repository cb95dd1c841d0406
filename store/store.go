// Package store defines what a redrive engine backend must do: the Store
// interface and the job data it keeps. The engine (package redrive) holds
// all decisions (retry policy, classification, breakers); a Store only
// persists jobs and applies the outcomes the engine decided, atomically and
// with fencing, so that a stale worker can never overwrite a newer attempt.
//
// Every Store implementation must pass the conformance suite in
// store/storetest.
package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/internal/seal"
)

// State is the lifecycle state of a job.
type State string

// The job states (see docs/design.md).
const (
	// Pending jobs are due now and wait for a worker.
	Pending State = "pending"
	// Scheduled jobs are due later: delayed, or waiting for a retry.
	Scheduled State = "scheduled"
	// Running jobs are leased by a worker.
	Running State = "running"
	// Completed jobs succeeded; they are kept for a retention period.
	Completed State = "completed"
	// Dead jobs are in the dead-letter queue.
	Dead State = "dead"
	// Canceled jobs were canceled by a user before they completed.
	Canceled State = "canceled"
)

// States lists every state in lifecycle order, but Blocked, which only
// the jobs of a workflow can be in (see Blocked).
var States = []State{Pending, Scheduled, Running, Completed, Dead, Canceled}

// Valid reports whether s is one of the known states.
func (s State) Valid() bool {
	switch s {
	case Pending, Scheduled, Running, Completed, Dead, Canceled, Blocked:
		return true
	}
	return false
}

// ParseState parses a state name, returning a clear error for an unknown one.
func ParseState(s string) (State, error) {
	st := State(s)
	if !st.Valid() {
		return "", fmt.Errorf("store: unknown state %q (want pending, scheduled, running, completed, dead, canceled or blocked)", s)
	}
	return st, nil
}

// Errors returned by stores. Implementations wrap them with %w.
var (
	// ErrNotFound means no job has the requested id.
	ErrNotFound = errors.New("job not found")
	// ErrConflict means the job is in a state that does not allow the
	// operation (cancel a completed job, redrive a job that is not dead).
	ErrConflict = errors.New("job state does not allow this operation")
	// ErrNotReprocessable means a dead job is marked not reprocessable and
	// cannot be redriven.
	ErrNotReprocessable = errors.New("job is marked not reprocessable")
	// ErrClosed means the store was closed.
	ErrClosed = errors.New("store closed")
	// ErrInvalid means the request itself is malformed (empty queue or
	// kind, payload that is not JSON).
	ErrInvalid = errors.New("invalid request")
	// ErrUnavailable means the database cannot be reached or is not
	// accepting work now (down, restarting, out of connections): the same
	// call may succeed later.
	ErrUnavailable = errors.New("store unavailable")
	// ErrFull means the database has no room to write (disk full).
	ErrFull = errors.New("store out of space")
	// ErrReadOnly means the database cannot be written (a read-only file
	// or server).
	ErrReadOnly = errors.New("store is read-only")
)

// WriteHealth is implemented by stores that know whether their last write
// succeeded: it returns nil when it did (or none was tried), else that
// write's error (wrapping ErrFull, ErrReadOnly or ErrUnavailable when it
// was one of those). A readiness check uses it: a store that cannot write
// is not ready even when it can be read.
type WriteHealth interface {
	WriteHealth() error
}

// Job is a job as stored, with its whole history.
type Job struct {
	ID      int64           `json:"id"`
	Queue   string          `json:"queue"`
	Kind    string          `json:"kind"`
	Payload json.RawMessage `json:"payload"`
	State   State           `json:"state"`

	// Attempt is the number of attempts started since the job was created
	// or last redriven. Snoozes, breaker deferrals and shutdown releases do
	// not use an attempt.
	Attempt int `json:"attempt"`
	// MaxRetries is how many retries the job gets after its first attempt.
	// A negative value means the engine's policy for the queue or kind
	// decides.
	MaxRetries int `json:"max_retries"`
	// Policy is an optional per-job retry policy override (JSON of
	// retry.Policy as the engine encodes it); nil means none.
	Policy json.RawMessage `json:"policy,omitempty"`

	IdempotencyKey string `json:"idempotency_key,omitempty"`
	// Dependency names the circuit breaker guarding the job's dependency.
	Dependency string `json:"dependency,omitempty"`
	// Priority orders the waiting jobs of a queue: Fetch leases the due
	// jobs of the highest priority first, by due time within a priority.
	// It is between MinPriority and MaxPriority, DefaultPriority (0)
	// unless the enqueue or SetPriority chose another.
	Priority int `json:"priority"`
	// Limit is the concurrency limit the job is under and its group's use
	// now, for a job under one that has not ended. Stores leave it nil:
	// the redrive Client's Get fills it (a read of the group's running
	// jobs).
	Limit *JobLimit `json:"limit,omitempty"`
	// FairKey is the job's key in its fair queue (see NewJob.Fair), for
	// a job of a fair queue. Stores leave it nil: the redrive Client's
	// Get fills it.
	FairKey *string `json:"fair_key,omitempty"`
	// Reprocessable is false for a job that must never be redriven.
	Reprocessable bool `json:"reprocessable"`

	CreatedAt time.Time `json:"created_at"`
	// RunAt is when the job is (or was) due.
	RunAt time.Time `json:"run_at"`
	// AttemptedAt is when the current or last attempt started.
	AttemptedAt *time.Time `json:"attempted_at,omitempty"`
	// FinishedAt is when the job completed, died or was canceled.
	FinishedAt *time.Time `json:"finished_at,omitempty"`

	// LeaseUntil and Worker describe the lease of a running job.
	LeaseUntil *time.Time `json:"lease_until,omitempty"`
	Worker     string     `json:"worker,omitempty"`
	// Lease is the job's lease token: every Fetch that leases the job
	// increments it, and nothing else changes it (not a snooze, a
	// release or a redrive, which give an attempt back or reset the
	// count), so a token names one lease of the job and is never used
	// again. Outcomes, heartbeats and progress are fenced on it (see
	// Outcome). 0 for a job never leased.
	Lease int64 `json:"lease,omitempty"`
	// CancelRequested is set when a user cancels a running job; the worker
	// holding it learns it at once (a local wake-up, a Notifier's
	// CancelNotice or a CancelChecker's poll), at the latest on its next
	// heartbeat, and stops the handler. It stays set until the job ends:
	// an attempt that ends in a retry (a rescue included), a snooze or a
	// release ends the job canceled instead (see Outcome).
	CancelRequested bool `json:"cancel_requested,omitempty"`

	// RetryCount is the number of retries scheduled since the job was
	// created or last redriven.
	RetryCount int `json:"retry_count"`
	// LastError is the error of the job's last failed attempt. A
	// completed job keeps it: it is then the failure before the success
	// (FailedBeforeSuccess), not a current one.
	LastError string `json:"last_error,omitempty"`
	// LastErrorClass is the class of LastError: failure.None (left out
	// of the JSON) for a job that never failed.
	LastErrorClass failure.Class `json:"last_error_class,omitzero"`
	LastFailedAt   *time.Time    `json:"last_failed_at,omitempty"`
	// FailedBeforeSuccess is set on a completed job that failed before it
	// succeeded: LastError, LastErrorClass and LastFailedAt then describe
	// the failure that preceded the success. It is not stored: stores set
	// it when they read a job (DecodeStored).
	FailedBeforeSuccess bool `json:"failed_before_success,omitempty"`

	DeadAt      *time.Time `json:"dead_at,omitempty"`
	DeadReason  string     `json:"dead_reason,omitempty"`
	Fingerprint string     `json:"fingerprint,omitempty"`
	// Redriven counts how many times the job was redriven from the DLQ.
	Redriven int `json:"redriven"`
	// ReplayOf is the id of the job this job replays (a replay
	// operation created it), 0 for a job enqueued otherwise.
	ReplayOf int64 `json:"replay_of,omitempty"`
	// BlockedDependents is, for a dead job of a workflow, the number of
	// blocked jobs that wait directly for it (their dependency on it not
	// done): under WaitOnDead, the jobs its redrive and completion
	// release, if nothing else holds them. Get and List set it on dead
	// jobs only; it is 0 for every other job (and for a dead job whose
	// dependents were released, under RunOnDead, or canceled).
	BlockedDependents int64 `json:"blocked_dependents,omitempty"`
	// Trace is the W3C trace context of the span that enqueued the job
	// (see NewJob.Trace), "" for none. Stores keep it as it was given,
	// through retries, the DLQ and redrives, and never change it.
	Trace string `json:"trace,omitempty"`
	// LastDuration is how long the handler ran in the job's last attempt
	// that completed it, failed or buried it (0 before any). With
	// AttemptedAt and Attempt it records the attempt that completed a
	// job, which History holds only when the handler recorded a result
	// (redrive.Record).
	LastDuration Duration `json:"last_duration,omitempty"`
	// LastDelay is the delay the retry policy chose after the job's last
	// failed attempt (before a retry budget pushed it out, if it did): the
	// "previous delay" from which decorrelated jitter draws the next one.
	// Zero before the first retry and after a redrive.
	LastDelay Duration `json:"last_delay,omitempty"`

	// Progress is how far the handler of the job's current attempt said it
	// was (redrive.Progress), as its worker last sent it: nil when the
	// handler reported none. A running job shows its latest progress,
	// sent with the worker's heartbeats and at most about once a second;
	// a completed job keeps the final progress of the attempt that
	// completed it; every other end of an attempt (retry, snooze, release,
	// cancel, dead) clears it, and so does the start of an attempt.
	Progress *JobProgress `json:"progress,omitempty"`

	// Result is, for a completed job, the result its handler recorded
	// (redrive.SetResult, or a remote worker's complete with a result):
	// JSON of at most MaxResult bytes, nil for none. Get sets it; List,
	// Fetch and the other reads leave it nil.
	Result json.RawMessage `json:"result,omitempty"`
	// ResultError says why Result is nil though the job recorded one:
	// "undecryptable: ..." for a result sealed (payload encryption at
	// rest) under a key the store does not have. Get sets it.
	ResultError string `json:"result_error,omitempty"`

	// History is every attempt and event of the job, oldest first. It is
	// kept across redrives. The API's listings leave it out (GET
	// /v1/jobs/{id} has it).
	History []Event `json:"history"`

	// Summary describes the job in one line (an HTTP request's method
	// and URL, or a payload excerpt without what looks secret), as the
	// API's listings and job pages give it. It is not stored.
	Summary string `json:"summary,omitempty"`

	// PayloadError is set, and Payload is null, when the stored payload
	// is sealed (encrypted at rest, see PayloadCodec) and cannot be
	// opened: "undecryptable: " and why (an unknown key id, or a tag
	// that does not match). A worker makes such a job dead, class
	// permanent, reason undecryptable.
	PayloadError string `json:"payload_error,omitempty"`
	// PayloadKey is the id of the key the stored payload is sealed
	// under, "" for a payload stored in clear: the stores' reads set it
	// (OpenJob), and a DLQ export seals again what was stored sealed
	// (ExportPayload). The API does not show it.
	PayloadKey string `json:"-"`
	// SealedPayload is, with PayloadError, the stored envelope that could
	// not be opened: an export writes it as it is, so that nothing is
	// lost and an import into a store with its key reads it. The API
	// does not show it.
	SealedPayload json.RawMessage `json:"-"`

	// Existing is set by Enqueue when the idempotency key was already
	// taken and this is the job that holds it. It is not stored.
	Existing bool `json:"existing,omitempty"`
	// Gone is set with Existing when the job that took the key was
	// deleted since (by retention or a purge) and its key is still kept
	// (see Store.DeleteKeys): only its ID, Queue, Kind, State,
	// IdempotencyKey, CreatedAt and FinishedAt remain.
	Gone bool `json:"gone,omitempty"`
	// Conflict is set with Existing when the job holding the key is not
	// the one the enqueue asked for: another kind, queue or payload. It
	// is not stored.
	Conflict bool `json:"conflict,omitempty"`
	// Warning is set by the API's and the CLI's enqueues on a job they
	// accepted without checking that a worker runs its kind, because no
	// live worker serves its queue (redrive.Client.CheckKinds). It is not
	// stored.
	Warning string `json:"warning,omitempty"`
}

// JobProgress is how far a running attempt is: Done units of Total
// (bytes, rows, items: the handler decides). Total is 0 when unknown.
type JobProgress struct {
	Done  int64 `json:"done"`
	Total int64 `json:"total"`
	// At is when the worker sent this value (within about a second of
	// the handler's report).
	At time.Time `json:"at"`
}

// ProgressUpdate is the latest progress of one running attempt, as a
// worker sends it to Store.Progress.
type ProgressUpdate struct {
	JobID int64
	// Lease fences the update: it applies only while the job runs this
	// lease (Job.Lease).
	Lease int64
	JobProgress
}

// Lease names one lease of a job: the job and the token Fetch gave it
// (Job.Lease).
type Lease struct {
	JobID int64 `json:"job_id"`
	Token int64 `json:"token"`
}

// LeaseOf returns the lease j holds.
func LeaseOf(j *Job) Lease { return Lease{JobID: j.ID, Token: j.Lease} }

// HeartbeatResult is what Store.Heartbeat says of the leases it was given.
type HeartbeatResult struct {
	// Canceled are the leases renewed whose job's cancellation was
	// requested: their handlers must stop (ErrJobCanceled).
	Canceled []Lease
	// Lost are the leases not renewed: their job ended (an outcome, a
	// rescue) or runs another lease. The job may run elsewhere: their
	// handlers must stop, and their outcomes will be stale.
	Lost []Lease
}

// EventKind says what an Event records.
type EventKind string

// The events of a job's history.
const (
	// EventRetry: an attempt failed and a retry was scheduled.
	EventRetry EventKind = "retry"
	// EventDead: an attempt failed and the job went to the DLQ.
	EventDead EventKind = "dead"
	// EventCompleted: an attempt succeeded and its handler recorded a
	// result (redrive.Record): Reason and Note say what it produced.
	EventCompleted EventKind = "completed"
	// EventSnoozed: the handler asked to run again later; no attempt used.
	EventSnoozed EventKind = "snoozed"
	// EventDeferred: the job's circuit breaker was open; no attempt used.
	EventDeferred EventKind = "deferred"
	// EventReleased: shutdown interrupted the attempt; no attempt used.
	EventReleased EventKind = "released"
	// EventCanceled: a user canceled the job.
	EventCanceled EventKind = "canceled"
	// EventRedriven: an operator redrove the job from the DLQ.
	EventRedriven EventKind = "redriven"
	// EventReplayed: the job was created by a replay of the job ReplayOf
	// names (the first event of a replay job's history).
	EventReplayed EventKind = "replayed"
)

// Event is one entry of a job's history: an attempt and its outcome, or an
// operator action.
type Event struct {
	Kind EventKind `json:"kind"`
	// Attempt is the attempt number the event concerns (0 for operator
	// actions).
	Attempt  int       `json:"attempt"`
	At       time.Time `json:"at"`                 // when the attempt started, or when the action happened
	Duration Duration  `json:"duration,omitempty"` // how long the attempt ran
	Class    string    `json:"class,omitempty"`    // failure class of the error
	Error    string    `json:"error,omitempty"`    // error message (bounded)
	Reason   string    `json:"reason,omitempty"`   // machine-readable reason (e.g. http_503, lease_expired, retries_exhausted)
	Delay    Duration  `json:"delay,omitempty"`    // delay chosen before the next run
	Worker   string    `json:"worker,omitempty"`
	Note     string    `json:"note,omitempty"` // free text: who redrove, what was patched
	// PreviousPayload is, on a redriven event whose redrive replaced the
	// payload (edit and redrive), the payload the job had before, as
	// stored: its JSON text, cut to its first MaxPreviousPayload
	// characters (a payload cut short is no longer valid JSON), or a
	// sealed payload's envelope whole.
	PreviousPayload string `json:"previous_payload,omitempty"`
	// ReplayOf is, on a replayed event, the id of the job replayed.
	ReplayOf int64 `json:"replay_of,omitempty"`
}

// MaxPreviousPayload bounds, in characters, the previous payload a
// redriven event keeps (Event.PreviousPayload), a sealed one aside.
const MaxPreviousPayload = 4096

// PreviousPayload returns the text a redriven event keeps of payload, as
// stored: its first MaxPreviousPayload characters, or the whole of a
// sealed payload (an envelope cut short would no longer open).
func PreviousPayload(payload []byte) string {
	if seal.IsSealed(payload) {
		return string(payload)
	}
	s := strings.ToValidUTF8(string(payload), "\uFFFD")
	n := 0
	for i := range s {
		if n == MaxPreviousPayload {
			return s[:i]
		}
		n++
	}
	return s
}

// DecodeStored fills the fields of j that stores keep encoded: the name of
// the last error's class ("" when the job never failed) and, when
// withHistory, the JSON array of its history (nil or empty: no events);
// and the fields derived from the others (FailedBeforeSuccess). Stores
// call it after scanning a row.
func DecodeStored(j *Job, class string, history []byte, withHistory bool) error {
	j.FailedBeforeSuccess = j.State == Completed && (j.LastError != "" || class != "")
	if class != "" {
		c, err := failure.ParseClass(class)
		if err != nil {
			return fmt.Errorf("job %d: %w", j.ID, err)
		}
		j.LastErrorClass = c
	}
	if withHistory {
		j.History = []Event{}
		if len(history) > 0 {
			if err := json.Unmarshal(history, &j.History); err != nil {
				return fmt.Errorf("job %d: history: %w", j.ID, err)
			}
		}
	}
	return nil
}

// Duration is a time.Duration that encodes to JSON as milliseconds
// (a number), which every language reads without a parser.
type Duration time.Duration

// MarshalJSON encodes the duration as a number of milliseconds.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(float64(d) / float64(time.Millisecond))
}

// UnmarshalJSON decodes a number of milliseconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var ms float64
	if err := json.Unmarshal(b, &ms); err != nil {
		return fmt.Errorf("duration: want milliseconds as a number: %w", err)
	}
	*d = Duration(ms * float64(time.Millisecond))
	return nil
}

// NewJob is a job to enqueue.
type NewJob struct {
	Queue          string
	Kind           string
	Payload        json.RawMessage
	RunAt          time.Time // when it is due; the store sets pending or scheduled from it
	MaxRetries     int       // -1: the engine's policy decides
	Policy         json.RawMessage
	IdempotencyKey string
	Dependency     string
	// NotReprocessable marks the job as never redrivable from the DLQ.
	NotReprocessable bool
	// Priority is the job's priority (Job.Priority), between MinPriority
	// and MaxPriority; 0 is DefaultPriority.
	Priority int
	// Limit, when set, puts the job under the concurrency limit of that
	// name (see Limits), in the group LimitKey ("" for a limit of the
	// whole queue or kind): the job runs only while fewer than the
	// limit's max jobs of its group run. LimitMax is the max the store
	// gives the limit if it has none yet (a limit set before, by
	// SetLimit or an earlier job, keeps its max). A job whose
	// idempotency key is taken changes nothing.
	// LimitMax 0 with a LimitRate gives a new limit no cap on running
	// jobs. LimitRate is the rate the store gives the limit when it
	// creates it (see LimitRate), as LimitMax is its max.
	// LimitHold is whether the store gives a new limit the hold on
	// Retry-After (LimitState.HoldOnRetryAfter), as LimitMax its max.
	Limit     string
	LimitKey  string
	LimitMax  int
	LimitRate LimitRate
	LimitHold bool
	// Fair, when set, makes the job one of its queue's fair shares, with
	// the fair key FairKey (a tenant: "" is a key too): a fetch takes
	// the due jobs of a queue's keys in turn (see FetchParams.FairWeights
	// and docs/design.md, "Fair shares"), so one key's backlog does not
	// hold another key's jobs behind it. A job whose idempotency key is
	// taken changes nothing.
	Fair    bool
	FairKey string
	// Trace is the W3C trace context of the span that enqueued the job:
	// the traceparent header's value, then, when there is a tracestate,
	// a space and its value. "" is none. At most MaxTrace bytes.
	Trace string
}

// MaxTrace bounds, in bytes, a job's trace context (NewJob.Trace): a
// traceparent is 55 bytes and a tracestate at most 512 by the W3C
// recommendation, so a longer one is not a trace context.
const MaxTrace = 1024

// CheckTrace returns an ErrInvalid error when trace cannot be a job's
// trace context (NewJob.Trace): longer than MaxTrace bytes, or not
// printable ASCII.
func CheckTrace(trace string) error {
	if len(trace) > MaxTrace {
		return fmt.Errorf("%w: trace context longer than %d bytes", ErrInvalid, MaxTrace)
	}
	for i := 0; i < len(trace); i++ {
		if c := trace[i]; c < 0x20 || c > 0x7e {
			return fmt.Errorf("%w: trace context has a byte 0x%02x that is not printable ASCII", ErrInvalid, c)
		}
	}
	return nil
}

// The range of job priorities (Job.Priority). Higher runs first.
const (
	// MinPriority is the lowest priority: such jobs wait for every other.
	MinPriority = -100
	// MaxPriority is the highest priority.
	MaxPriority = 100
	// DefaultPriority is the priority of a job enqueued without one.
	DefaultPriority = 0
)

// CheckPriority returns an ErrInvalid error naming the field "priority"
// when p is outside MinPriority..MaxPriority.
func CheckPriority(p int) error {
	if p < MinPriority || p > MaxPriority {
		return fmt.Errorf("%w: priority %d is out of range (want an integer from %d to %d)", ErrInvalid, p, MinPriority, MaxPriority)
	}
	return nil
}

// FetchParams selects and leases due jobs.
//
// A rate-limited job is leased only at or after its due time, by Now
// (or Clock): DueBy's lookahead does not apply to it.
type FetchParams struct {
	Queue string
	Limit int
	// Now is the time of the fetch, recorded as the attempt's start.
	Now time.Time
	// DueBy selects the jobs with run_at <= DueBy (zero: Now). A worker
	// may lease jobs a few milliseconds before they are due and start
	// them at their due time itself.
	DueBy      time.Time
	LeaseUntil time.Time
	Worker     string
	// Clock, when set, is read by the store once it holds the lock of
	// the limited fetch (the writer's turn, the advisory lock), for the
	// start time of the limited jobs it leases: their AttemptedAt and
	// their rates' clock, so that a fetch that waited for its turn counts
	// its starts at the time they happen, not when it asked. It is never
	// earlier than Now. nil: Now.
	Clock func() time.Time
	// NextStart, when not nil, is set by the fetch to the earliest time
	// after Now at which a due job of the queue that a rate limit holds
	// can start (zero: none held), so that a worker sleeps until then
	// rather than poll. It is a hint: another process may take that start.
	NextStart *time.Time
	// SlotWait, when not nil, is set by the fetch to whether a due job
	// of the queue under a limit waits on a full group's slot (among the
	// first due limited jobs a fetch looks at), which a job ending in
	// any process frees at any time: a worker polls for those, while the
	// jobs only a rate or a Retry-After holds start at NextStart.
	SlotWait *bool
	// FairWeights gives, for the queue's fair jobs (NewJob.Fair), how
	// many due jobs of a key a fetch takes in each round of its round
	// robin over the keys: a key absent from it has weight 1. The store
	// keeps where its round robin stopped, per queue, in the process.
	FairWeights map[string]int
}

// OutcomeKind is what happened to a leased attempt.
type OutcomeKind uint8

// The outcomes the engine applies to a leased job.
const (
	// Complete: the attempt succeeded.
	Complete OutcomeKind = iota + 1
	// Retry: the attempt failed; run again at RunAt.
	Retry
	// Bury: the attempt failed; move the job to the DLQ.
	Bury
	// Snooze: run again at RunAt without using an attempt (snooze or
	// breaker deferral).
	Snooze
	// Release: shutdown interrupted the attempt; back to pending without
	// using an attempt.
	Release
	// Cancel: the attempt stopped because a user canceled the job.
	Cancel
)

// Outcome is the engine's decision about one leased attempt. A store
// applies it only if the job is still running the same lease (Lease, the
// token Fetch gave) for the same worker, and, for a rescue (ExpiredBy
// set), only if that lease is still expired (fencing); otherwise the
// outcome is stale and skipped. Since a token is never used twice, an
// outcome applies at most once, and never to a later lease of its job.
//
// An outcome that would make the job due again (Retry, Snooze, Release)
// of a job whose cancellation was requested ends the job canceled
// instead (a Retry still records its failure): a user's cancel is never
// lost. Its counters are then those of CanceledCounters.
type Outcome struct {
	JobID int64
	// Queue is the job's queue; stores keep their per-queue job counts
	// with it.
	Queue   string
	Attempt int    // the attempt number the worker leased (not a fence: see Lease)
	Lease   int64  // fence: the lease token the worker leased (Job.Lease)
	Worker  string // fence: the worker that leased it
	Kind    OutcomeKind
	At      time.Time // when the outcome was decided
	// ExpiredBy, when not zero, fences the outcome on the lease being
	// still expired: it applies only if the lease ends before ExpiredBy
	// (lease_until < ExpiredBy, as Expired selects). A rescue sets it to
	// the time of its Expired read, so that a heartbeat that renewed the
	// lease meanwhile wins over it.
	ExpiredBy time.Time
	// Duration is how long the handler ran (Complete, Retry, Bury); the
	// store keeps it as the job's LastDuration.
	Duration Duration
	RunAt    time.Time // Retry and Snooze: when the job is due again
	// RetryDelay is, for Retry, the delay the retry policy chose; stores
	// keep it as the job's LastDelay (the budget may have pushed RunAt
	// further out).
	RetryDelay Duration
	// Event is appended to the job's history (Complete may leave it empty:
	// the success is recorded by AttemptedAt and FinishedAt).
	Event *Event
	// Progress is, for Complete, the attempt's last progress
	// (redrive.Progress), which the completed job keeps; nil keeps what
	// the store holds. Every other outcome clears the job's progress.
	Progress *JobProgress
	// Result is, for Complete, the result the handler recorded (JSON, at
	// most MaxResult bytes; see CheckResult), which the completed job
	// keeps for its dependents (Workflows.DependencyResults); nil: none.
	Result json.RawMessage
	// Failure fields, for Retry and Bury.
	Error string
	// Class is the failure's class; stores keep None as Unknown (see
	// ClassName).
	Class       failure.Class
	DeadReason  string // Bury
	Fingerprint string // Bury: groups dead jobs by cause
	// HoldUntil, when set on a Retry or Bury (a rate_limited failure
	// whose server asked to wait: Retry-After), holds the group of the
	// job's limit, fleet-wide, until then, if the job is under a limit
	// that holds on Retry-After (LimitState.HoldOnRetryAfter): no job of
	// the group starts before it (see LimitHold). The store writes the
	// hold in the transaction that applies the outcome, and only if the
	// outcome applies; a job under no such limit ignores it.
	HoldUntil time.Time
	// Counters are the statistics the outcome adds (see Stats). They are
	// applied only when the outcome is. Stores themselves count what they
	// alone know: enqueued, deduplicated, attempts (on Fetch), redriven,
	// canceled and purged.
	Counters []Counter
}

// EndsIfCanceled reports whether the outcome ends the job canceled when
// its cancellation was requested: Retry, Snooze and Release.
func (o *Outcome) EndsIfCanceled() bool {
	return o.Kind == Retry || o.Kind == Snooze || o.Kind == Release
}

// CanceledCounters are the counters an outcome for which EndsIfCanceled
// adds when it ends its job canceled: its own, except those of a run
// scheduled again (retried, budget_deferred, snoozed, deferred), and one
// canceled.
func (o *Outcome) CanceledCounters() []Counter {
	out := make([]Counter, 0, len(o.Counters)+1)
	for _, c := range o.Counters {
		switch c.Name {
		case StatRetried, StatBudgetDeferred, StatSnoozed, StatDeferred:
			continue
		}
		out = append(out, c)
	}
	return append(out, Counter{Queue: o.Queue, Name: StatCanceled, N: 1})
}

// CanceledEvent is the event a store appends, after the outcome's own, to
// the history of a job that an outcome for which EndsIfCanceled ends
// canceled.
func (o *Outcome) CanceledEvent() Event {
	return Event{Kind: EventCanceled, Attempt: o.Attempt, At: o.At, Worker: o.Worker, Reason: ReasonCancelRequested}
}

// ReasonCancelRequested is the reason of the canceled event of a job
// whose attempt ended in a retry, a snooze or a release after its
// cancellation was requested.
const ReasonCancelRequested = "cancel_requested"

// CheckOutcomes reports, as an ErrInvalid error, an outcome no store can
// apply (an unknown kind). Stores call it before applying any, so that a
// call with one invalid outcome applies none.
func CheckOutcomes(outcomes []Outcome) error {
	for i := range outcomes {
		if o := &outcomes[i]; o.Kind < Complete || o.Kind > Cancel {
			return fmt.Errorf("%w: outcome %d (job %d) has unknown kind %d", ErrInvalid, i, o.JobID, o.Kind)
		}
		if err := CheckResult(outcomes[i].Result); err != nil {
			return fmt.Errorf("outcome %d (job %d): %w", i, outcomes[i].JobID, err)
		}
	}
	return nil
}

// ClassName is the name a store keeps as the job's last error class for a
// Retry or Bury outcome: the class's name, Unknown's for None (a failure
// always has a class).
func (o *Outcome) ClassName() string {
	if o.Class == failure.None {
		return failure.Unknown.String()
	}
	return o.Class.String()
}

// Counter names a statistic and the amount to add.
type Counter struct {
	Queue string
	Name  string // see the Stat* constants
	Class string // failure class for per-class statistics; "" otherwise
	N     int64
}

// Statistic names kept by stores in Counter rows.
const (
	StatAttempts            = "attempts"              // attempts started
	StatSucceeded           = "succeeded"             // attempts that completed the job
	StatSucceededAfterRetry = "succeeded_after_retry" // completions on attempt > 1
	StatFailed              = "failed"                // failed attempts (per class)
	StatRetried             = "retried"               // retries scheduled
	StatDead                = "dead"                  // jobs moved to the DLQ (per class)
	StatRedriven            = "redriven"              // jobs redriven from the DLQ
	StatSnoozed             = "snoozed"               // snoozes
	StatDeferred            = "deferred"              // breaker deferrals
	StatRescued             = "rescued"               // expired leases rescued
	StatBudgetDeferred      = "budget_deferred"       // retries the retry budget pushed out
	StatEnqueued            = "enqueued"              // jobs created
	StatDeduplicated        = "deduplicated"          // enqueues answered by an existing job
	StatCanceled            = "canceled"              // jobs canceled
	StatPurged              = "purged"                // dead jobs purged or expired
)

// Filter selects jobs for listing, grouping, redrive and purge. Zero fields
// match everything.
type Filter struct {
	States      []State
	Queue       string
	Kind        string
	Class       string // last_error_class
	Reason      string // dead_reason
	Fingerprint string
	// Since and Until bound the job's reference time: dead_at for dead
	// jobs, finished_at for completed and canceled ones, created_at
	// otherwise. Since is inclusive, Until exclusive.
	Since, Until time.Time
	// ErrorContains matches last_error case-insensitively.
	ErrorContains string
	// ErrorPrefix selects the jobs whose last_error starts with this
	// text, case-sensitively (byte for byte). Unlike ErrorContains, an
	// index serves it on dead jobs (see CheckErrorPrefix). Operations do
	// not take it: an older binary would run one without it.
	ErrorPrefix string
	// IDs restricts the selection to these jobs.
	IDs []int64
	// PayloadField, when not "", selects the jobs whose payload holds,
	// at this dotted path of object keys ("customer_id",
	// "order.customer.id"), a scalar equal to PayloadValue (JSON: a
	// string, number, boolean or null; numbers compare by value). It
	// reads every payload the other fields leave: narrow those first on
	// large tables.
	PayloadField string
	PayloadValue json.RawMessage
}

// Page is a keyset page request: jobs after Cursor in the listing's order.
type Page struct {
	Cursor string // opaque, from a previous ListResult; "" for the first page
	Limit  int    // 1..MaxPageSize; 0 means DefaultPageSize
}

// Page size bounds.
const (
	DefaultPageSize = 50
	MaxPageSize     = 1000
)

// ListResult is one page of jobs.
type ListResult struct {
	Jobs []*Job `json:"jobs"`
	// Next is the cursor of the following page, "" when this is the last.
	Next string `json:"next,omitempty"`
}

// Group is dead jobs sharing a fingerprint: one cause.
type Group struct {
	Fingerprint string    `json:"fingerprint"`
	Class       string    `json:"class"`
	Reason      string    `json:"reason"`
	Queue       string    `json:"queue"`
	Kind        string    `json:"kind"`
	Sample      string    `json:"sample_error"` // the error of the most recent job
	SampleID    int64     `json:"sample_id"`
	Count       int64     `json:"count"`
	First       time.Time `json:"first_dead_at"`
	Last        time.Time `json:"last_dead_at"`
}

// RedriveParams says how to redrive dead jobs.
type RedriveParams struct {
	IDs []int64
	Now time.Time
	// Payload, if not nil, replaces the payload of every job redriven.
	Payload json.RawMessage
	// Note is recorded in the redrive event (who, why).
	Note string
	// Keys, with Payload, are the groups and fair keys the new payload
	// names: a redriven job keeps the limit group and fair key it was
	// enqueued with, but those read from its payload. Ignored without
	// Payload.
	Keys RedriveKeys
}

// RedriveKeys are the keys a redrive's replacement payload names, as the
// Client that asked for it reads them (its limits and fair shares): a
// job under a limit named in Limits is moved to that group, and a fair
// job of a queue named in Fair gets that fair key. A job of a limit or
// queue not named keeps its own (a key read from the job's dependency,
// a limit without a key, a limit or fair share the asking Client is not
// configured with).
type RedriveKeys struct {
	// Limits maps a limit's name to the group the payload puts its jobs
	// in.
	Limits map[string]string `json:"limits,omitempty"`
	// Fair maps a fair queue to the fair key the payload gives its jobs.
	Fair map[string]string `json:"fair,omitempty"`
}

// LimitKey returns the group a redriven job of limit (empty: none) and
// group key moves to: key itself unless Limits names the limit.
func (k RedriveKeys) LimitKey(limit, key string) string {
	if g, ok := k.Limits[limit]; ok && limit != "" {
		return g
	}
	return key
}

// FairKey returns the fair key a redriven job of queue with fair key
// fkey (nil: not a fair job) gets: fkey itself unless the job is fair
// and Fair names its queue.
func (k RedriveKeys) FairKey(queue string, fkey *string) *string {
	if fkey == nil {
		return nil
	}
	if f, ok := k.Fair[queue]; ok {
		return &f
	}
	return fkey
}

// CheckRedriveKeys reports, as an ErrInvalid error, keys no store keeps:
// a name or key longer than MaxLimitName bytes, or not UTF-8.
func CheckRedriveKeys(k RedriveKeys) error {
	for _, m := range []map[string]string{k.Limits, k.Fair} {
		for n, v := range m {
			if len(n) > MaxLimitName || len(v) > MaxLimitName || !utf8.ValidString(n) || !utf8.ValidString(v) ||
				strings.ContainsRune(v, 0) {
				return fmt.Errorf("%w: redrive keys: %q: longer than %d bytes, not UTF-8 or holding a NUL", ErrInvalid, n, MaxLimitName)
			}
		}
	}
	return nil
}

// RedriveResult says what a redrive did, job by job.
type RedriveResult struct {
	Redriven []int64 `json:"redriven"`
	// Refused are dead jobs marked not reprocessable.
	Refused []int64 `json:"refused"`
	// Skipped are jobs that do not exist or are not dead.
	Skipped []int64 `json:"skipped"`
	// Unblocks counts the blocked jobs of workflows that wait directly
	// for the jobs redriven (Job.BlockedDependents, each counted once):
	// released when those complete, if nothing else holds them.
	Unblocks int64 `json:"unblocks"`
}

// Stats are real counts: jobs per queue and state from the jobs
// themselves, and the counters outcomes added.
type Stats struct {
	// Jobs[queue][state] counts the jobs currently in each state.
	Jobs map[string]map[State]int64 `json:"jobs"`
	// Counters[queue][name] is the running total of a statistic; per-class
	// statistics are named "name.class" (e.g. "failed.transient").
	Counters map[string]map[string]int64 `json:"counters"`
}

// WholeMinute reports, as an ErrInvalid error, a snapshot time that is
// zero or not a whole minute; stores check the minute given to Snapshot
// with it.
func WholeMinute(at time.Time) error {
	if at.IsZero() || !at.Equal(at.Truncate(time.Minute)) {
		return fmt.Errorf("%w: %s is not a whole minute", ErrInvalid, at.Format(time.RFC3339Nano))
	}
	return nil
}

// Snapshot is the counters of every queue as they stood at the start of one
// minute: the statistics history is made of one snapshot a minute, and
// what happened during a minute is the difference between its snapshot and
// the next one.
type Snapshot struct {
	// At is the minute (a whole minute; stores may return it in any
	// location).
	At time.Time `json:"at"`
	// Counters[queue][name] is as in Stats.Counters. Counters that were
	// zero may be absent.
	Counters map[string]map[string]int64 `json:"counters"`
	// Limits is the use of each concurrency limit that had a running job
	// at the minute, by name (nil when none had).
	Limits map[string]LimitSample `json:"limits,omitempty"`
}

// QueueState says whether a queue is paused. Workers do not fetch the jobs
// of a paused queue; its jobs keep their state and wait, and everything
// else (running jobs, retries coming due, rescue, retention) goes on.
type QueueState struct {
	Name   string `json:"name"`
	Paused bool   `json:"paused"`
	// PausedAt is when the queue was paused; zero when it is not paused.
	PausedAt time.Time `json:"paused_at,omitzero"`
}

// DeadJob is a job that died outside the store, typically a message
// dead-lettered on a broker, to be kept as a dead job (Store.AddDead) so
// that every DLQ tool works on it: list, filters, groups, export, purge,
// edit and redrive.
type DeadJob struct {
	Queue   string
	Kind    string
	Payload json.RawMessage
	// IdempotencyKey, when set, makes the insert happen once: a key
	// already taken (by a job or a kept key, see Store.DeleteKeys) is not
	// inserted again. A transport derives it from the message's identity,
	// so that a dead letter delivered twice is kept once.
	IdempotencyKey string
	Dependency     string
	MaxRetries     int // -1: the engine's policy decides
	// NotReprocessable marks the job as never redrivable.
	NotReprocessable bool
	// CreatedAt is when the job was first created; zero means DeadAt.
	CreatedAt time.Time
	// DeadAt is when it died; it is also the job's run_at, finished_at
	// and last_failed_at. It is required.
	DeadAt time.Time
	// Attempt is how many attempts it used in its last life.
	Attempt int
	// Redriven counts its earlier redrives.
	Redriven       int
	DeadReason     string
	LastError      string
	LastErrorClass failure.Class
	Fingerprint    string
	// History is its whole history, oldest first, its dead event last.
	History []Event
	// Sealed says that Payload is a sealed envelope for a job of Queue
	// (an "rdenc:" JSON string, as a DLQ export writes it), kept as it
	// is: not sealed again, not opened, so that a payload whose key the
	// store lacks is kept, reads as undecryptable, and opens once the
	// key is configured. A Payload that is not an envelope is refused.
	Sealed bool
	// Trace is the W3C trace context of the span that first published it,
	// as NewJob.Trace, so that a redrive from the store joins its trace.
	// "" is none.
	Trace string
}

// ClassName is the name a store keeps as the dead job's last error class,
// and counts its death under: as for a Bury outcome (Outcome.ClassName),
// Unknown's for None.
func (d *DeadJob) ClassName() string {
	o := Outcome{Class: d.LastErrorClass}
	return o.ClassName()
}

// CheckDead reports, as an ErrInvalid error, the fields of a dead job
// that no store can keep, beyond those a store checks as it checks a new
// job (queue, kind, payload): a zero DeadAt, a negative Attempt or
// Redriven, an unknown LastErrorClass. Stores call it from AddDead.
func CheckDead(d *DeadJob) error {
	switch {
	case d.DeadAt.IsZero():
		return fmt.Errorf("%w: dead_at is zero", ErrInvalid)
	case d.Attempt < 0:
		return fmt.Errorf("%w: attempt %d is negative", ErrInvalid, d.Attempt)
	case d.Redriven < 0:
		return fmt.Errorf("%w: redriven %d is negative", ErrInvalid, d.Redriven)
	case d.LastErrorClass != failure.None && !slices.Contains(failure.Classes, d.LastErrorClass):
		return fmt.Errorf("%w: unknown failure class %s", ErrInvalid, d.LastErrorClass)
	}
	return CheckTrace(d.Trace)
}

// Store is what an engine backend implements. All methods are safe for
// concurrent use. Times are passed in by the engine, which owns the clock.
type Store interface {
	// Enqueue inserts jobs. Each job is created atomically: a job whose
	// idempotency key is already taken is not inserted, and the job
	// holding the key is returned in its place with Existing set. The
	// store's unique constraint decides, so concurrent enqueues of one key
	// create exactly one job.
	Enqueue(ctx context.Context, jobs []NewJob, now time.Time) ([]*Job, error)

	// AddDead inserts jobs that died elsewhere as dead jobs, atomically
	// each, with the fields given (retry_count is Attempt-1 when
	// positive; last_delay zero). A job whose idempotency key is taken is
	// not inserted: the job holding the key is returned in its place with
	// Existing set, as Enqueue does. Each inserted job adds one to its
	// queue's StatDead counter of its class, as a death in the store does.
	AddDead(ctx context.Context, jobs []DeadJob, now time.Time) ([]*Job, error)

	// Fetch leases up to p.Limit due jobs of p.Queue, highest priority
	// first and, within a priority, oldest due first (ties by id), and
	// returns them in that order:
	// each becomes running with Attempt and Lease (its lease token)
	// incremented, AttemptedAt = p.Now, the lease and the worker set. A
	// job is never leased twice at once. A job under a concurrency limit
	// (NewJob.Limit) is leased only while its group has a free slot (see
	// Limits), so a fetch may return fewer jobs than are due; the jobs of
	// a limited group it leases are its first waiting, by priority then
	// due time. The jobs under a limit are picked before the others.
	Fetch(ctx context.Context, p FetchParams) ([]*Job, error)

	// NextDue returns the earliest run_at among pending and scheduled jobs
	// of the queue; ok is false when there is none.
	NextDue(ctx context.Context, queue string) (t time.Time, ok bool, err error)

	// NextDueAfter returns the earliest run_at later than after among
	// the pending and scheduled jobs of the queue; ok is false when there
	// is none. A worker whose due jobs a limit holds reads it for when
	// the queue's next job becomes due, which NextDue (a due job) hides.
	NextDueAfter(ctx context.Context, queue string, after time.Time) (t time.Time, ok bool, err error)

	// OldestDue returns, for each of the given queues that has due jobs
	// (pending or scheduled with run_at at or before now), the run_at of
	// its oldest due job; queues without a due job, and unknown queues,
	// are absent from the map. now minus that run_at is the queue's
	// latency. Each queue costs one probe of the due-jobs index (queue,
	// run_at), whatever the number of jobs.
	OldestDue(ctx context.Context, queues []string, now time.Time) (map[string]time.Time, error)

	// Finish applies outcomes, atomically each, in as few transactions as
	// the store can. applied[i] reports whether outcome i took effect;
	// false means it was stale (the job is no longer running that lease
	// for that worker, or, for a rescue, the lease was renewed) and
	// nothing changed. Several outcomes of one lease in a call apply as
	// if sent one by one in their order: the first that holds is applied
	// (a rescue holds only while the lease is expired), the others are
	// stale. A call with an invalid
	// outcome (CheckOutcomes) fails whole: none is applied.
	Finish(ctx context.Context, outcomes []Outcome) (applied []bool, err error)

	// Heartbeat extends to until the given leases that worker still
	// holds (their job running that lease for worker), whether or not
	// they had expired. It reports the leases renewed whose job's
	// cancellation was requested, and the leases it did not renew (see
	// HeartbeatResult), each sorted by job id.
	Heartbeat(ctx context.Context, worker string, leases []Lease, until time.Time) (HeartbeatResult, error)

	// Progress records the latest progress of running jobs: each update
	// applies only if its job is still running that lease for worker
	// (others are skipped, without an error). The job's Progress shows
	// it until the attempt ends (see Job.Progress).
	Progress(ctx context.Context, worker string, updates []ProgressUpdate) error

	// Expired returns up to limit running jobs whose lease ended before
	// now, each with its lease (Worker, Lease, LeaseUntil) for the rescue
	// to fence on.
	Expired(ctx context.Context, now time.Time, limit int) ([]*Job, error)

	// Get returns one job with its history, or ErrNotFound.
	Get(ctx context.Context, id int64) (*Job, error)

	// List pages through jobs matching f, newest first (by id descending),
	// with keyset pagination. Dead jobs are listed by dead_at descending
	// when f selects only the dead state.
	List(ctx context.Context, f Filter, p Page) (ListResult, error)

	// Count returns how many jobs match f.
	Count(ctx context.Context, f Filter) (int64, error)

	// Groups counts dead jobs matching f by fingerprint, largest first.
	Groups(ctx context.Context, f Filter, limit int) ([]Group, error)

	// Cancel cancels a pending, scheduled, blocked or dead job at once, and requests
	// cancellation of a running one (the worker sees it on its next
	// heartbeat; a Notifier also announces it with CancelNotice).
	// Completed and canceled jobs give ErrConflict.
	Cancel(ctx context.Context, id int64, now time.Time) (*Job, error)

	// SetPriority changes the priority of a waiting (pending or
	// scheduled) job and returns it. A running or finished job gives
	// ErrConflict, an unknown id ErrNotFound, a priority out of range
	// ErrInvalid (CheckPriority); nothing is changed then.
	SetPriority(ctx context.Context, id int64, priority int) (*Job, error)

	// RunNow makes a scheduled job (delayed, or waiting for a retry)
	// pending and due at now (an overdue one keeps its earlier run_at,
	// and so its place), without using an attempt, and returns it; its
	// attempt, retry count and history are kept. A pending job is
	// returned unchanged. A running or finished job gives ErrConflict, an
	// unknown id ErrNotFound; nothing is changed then.
	RunNow(ctx context.Context, id int64, now time.Time) (*Job, error)

	// Redrive moves dead jobs back to pending: attempt and retry count
	// reset, history kept with a redriven event, payload optionally
	// replaced. Jobs marked not reprocessable are refused.
	Redrive(ctx context.Context, p RedriveParams) (RedriveResult, error)

	// Purge deletes up to limit dead jobs matching f and returns how many.
	Purge(ctx context.Context, f Filter, limit int) (int64, error)

	// DeleteFinished deletes up to limit jobs in state (completed, dead or
	// canceled) whose finished_at is before the cutoff (retention).
	DeleteFinished(ctx context.Context, state State, before time.Time, limit int) (int64, error)

	// Stats returns real counts.
	Stats(ctx context.Context) (Stats, error)

	// Snapshot records the current counters (Stats.Counters, all queues)
	// as the snapshot of the minute at, which must be a whole minute
	// (ErrInvalid otherwise: the caller truncates). The first snapshot of
	// a minute wins: a later one, from this process or another, changes
	// nothing and is not an error. A snapshot is recorded even when every
	// counter is zero.
	Snapshot(ctx context.Context, at time.Time) error

	// Snapshots returns the snapshots of the minutes at or after since,
	// oldest first.
	Snapshots(ctx context.Context, since time.Time) ([]Snapshot, error)

	// DeleteSnapshots deletes the snapshots of the minutes before the
	// cutoff (retention) and returns how many minutes it deleted.
	DeleteSnapshots(ctx context.Context, before time.Time) (int64, error)

	// Queues returns every queue the store knows, sorted by name: the
	// queues ever paused or resumed, and those with jobs or counters. A
	// queue never paused is listed as not paused.
	Queues(ctx context.Context) ([]QueueState, error)

	// SetPaused pauses (paused true) or resumes a queue and returns its
	// new state. It is idempotent: pausing a paused queue keeps its
	// PausedAt (now is recorded by the first pause only), resuming a queue
	// that is not paused changes nothing but remembers the queue. A queue
	// needs no jobs to be paused. An empty name is ErrInvalid.
	SetPaused(ctx context.Context, queue string, paused bool, now time.Time) (QueueState, error)

	// DeleteKeys deletes the kept idempotency keys of deleted jobs that
	// were enqueued before the cutoff (key retention) and returns how
	// many. Until then, Enqueue answers such a key with the deleted job
	// (Existing and Gone set). Retention and Purge keep the key of every
	// job they delete.
	DeleteKeys(ctx context.Context, before time.Time) (int64, error)

	// RegisterWorker records a worker process starting; a worker
	// registering again under the same id replaces its entry.
	RegisterWorker(ctx context.Context, w WorkerInfo) error

	// HeartbeatWorker records that the worker is alive at at. An unknown
	// or stopped worker is ErrNotFound.
	HeartbeatWorker(ctx context.Context, id string, at time.Time) error

	// StopWorker marks a worker stopped at at, for reason; stopping a
	// stopped worker changes nothing.
	StopWorker(ctx context.Context, id string, at time.Time, reason string) error

	// Workers returns the registered workers, the most recently started
	// first, each with the number of running jobs it holds leases on.
	Workers(ctx context.Context) ([]WorkerInfo, error)

	// DeleteWorkers deletes the workers stopped before the cutoff, and
	// those whose last heartbeat is before it, and returns how many.
	DeleteWorkers(ctx context.Context, before time.Time) (int64, error)

	// Leased returns up to limit running jobs whose lease worker holds.
	Leased(ctx context.Context, worker string, limit int) ([]*Job, error)

	// Schedules keeps periodic jobs' schedules (schedules.go).
	Schedules

	// FairUse reads jobs' fair keys (fairshare.go).
	FairUse

	// Operations keeps durable bulk operations (operations.go).
	Operations

	// Breakers shares circuit breakers' state between processes
	// (breakers.go).
	Breakers

	// Secrets keeps random secrets shared by the processes using the
	// store, such as the dashboard's session key (secrets.go).
	Secrets

	// Limits keeps fleet-wide concurrency limits (limits.go).
	Limits

	// Audit keeps the audit log of changes (audit.go).
	Audit

	// LimitUse reads the use of the limits group by group (limituse.go).
	LimitUse

	// Workflows keeps workflows and batches (workflows.go).
	Workflows

	// Close releases the store's resources. Calls after Close return
	// ErrClosed.
	Close() error
}

// WorkerInfo describes a worker process in the store's registry.
type WorkerInfo struct {
	// ID is the worker's id, as its leases name it.
	ID string `json:"id"`
	// Host and PID locate the process.
	Host string `json:"host"`
	PID  int    `json:"pid"`
	// Instance identifies the machine's boot and the process's PID
	// namespace: a worker can tell whether another worker's PID still
	// runs only when both have the same Instance.
	Instance string `json:"instance"`
	// Version is the redrive module's version the worker runs.
	Version string `json:"version"`
	// Queues maps each queue the worker serves to its concurrency.
	Queues map[string]int `json:"queues"`
	// Kinds are the job kinds the worker has handlers for, sorted; its
	// handlers serve every queue in Queues. Nil when unknown: a worker of
	// a version that did not record them, which may run any kind. An
	// empty (non-nil) list is a worker without handlers.
	Kinds []string `json:"kinds"`
	// StartedAt is when it registered; HeartbeatAt when it last said it
	// was alive.
	StartedAt   time.Time `json:"started_at"`
	HeartbeatAt time.Time `json:"heartbeat_at"`
	// StoppedAt is set once it stopped cleanly or was found gone;
	// StopReason says which ("stopped", or why it was found gone).
	StoppedAt  *time.Time `json:"stopped_at,omitempty"`
	StopReason string     `json:"stop_reason,omitempty"`
	// Running is how many running jobs it holds leases on (set by
	// Workers).
	Running int `json:"running"`
}

// Notifier is implemented by stores that announce, across processes, that
// jobs of a queue became due (PostgreSQL's LISTEN/NOTIFY). A worker on such
// a store listens and wakes at once instead of waiting for its poll.
type Notifier interface {
	// Listen calls notify with a queue's name whenever jobs of that queue
	// may have become due, until ctx ends. notify("") means notifications
	// may have been missed (a reconnect): re-check every queue.
	// notify(CancelNotice) means the cancellation of a running job was
	// requested. Listen reconnects by itself when its connection drops.
	Listen(ctx context.Context, notify func(queue string)) error
}

// Releaser is implemented by stores that tell the engine in the same
// process that a write made blocked jobs due (a workflow's dependents
// released by their last dependency's completion, its callbacks fired),
// as an enqueue does, so that its workers fetch them at once rather than
// at their next poll (SQLite, which has no notifications) or at the
// notification (PostgreSQL, which announces a Finish's releases after
// its commit).
type Releaser interface {
	// OnRelease has released called, after the commit of each write
	// that released jobs from Blocked, once for each queue of those
	// jobs, until remove is called; by the time the write's call
	// returns, it was called. A store that is also a Notifier may call
	// it for some writes only (PostgreSQL: the Finish calls that settle
	// their workflows' completions), the other releases reaching the
	// workers by its notifications. It is called on the writing
	// goroutine: it must return quickly and must not call the store.
	OnRelease(released func(queue string)) (remove func())
}

// CancelNotice is what a Notifier passes, in place of a queue's name, when
// the cancellation of a running job was requested (Cancel): a worker then
// asks at once (with a heartbeat) whether one of its running jobs is
// canceled, instead of waiting for its next heartbeat. No queue has this
// name: a queue's name holds no '/'.
const CancelNotice = "/cancel"

// CancelChecker is implemented by stores without a Notifier that can tell
// cheaply, without writing, which running jobs had their cancellation
// requested (SQLite). A worker polls it a few times a second while it runs
// jobs, so that a cancellation from another process reaches the handler
// within a fraction of a second rather than at the next heartbeat.
type CancelChecker interface {
	// CancelRequested returns, sorted by job id, the leases among leases
	// that worker holds (their job running that lease for worker) whose
	// job's cancellation was requested.
	CancelRequested(ctx context.Context, worker string, leases []Lease) ([]Lease, error)
}

// Elector is implemented by stores shared by many processes, so that
// maintenance (rescue of expired leases, retention) runs in one of them at
// a time. Stores without it let every worker run maintenance, which is
// safe (outcomes are fenced), only wasteful.
type Elector interface {
	// Elect campaigns for role until ctx ends. leading reports whether this
	// process holds the role now; a process that loses its connection loses
	// the role, and another takes it over.
	Elect(ctx context.Context, role string) (leading func() bool, err error)
}

// EncodeKinds is how stores keep WorkerInfo.Kinds: a JSON array of the
// kinds, sorted and without duplicates, or nil (SQL NULL) for unknown
// kinds. Kinds holding a NUL character (no job can have one: names are
// checked at enqueue) are left out.
func EncodeKinds(kinds []string) (*string, error) {
	if kinds == nil {
		return nil, nil
	}
	out := make([]string, 0, len(kinds))
	for _, k := range kinds {
		if !strings.ContainsRune(k, 0) {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	out = slices.Compact(out)
	b, err := json.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("kinds: %w", err)
	}
	s := string(b)
	return &s, nil
}

// DecodeKinds reads what EncodeKinds wrote: never nil.
func DecodeKinds(b []byte) ([]string, error) {
	kinds := []string{}
	if err := json.Unmarshal(b, &kinds); err != nil {
		return nil, err
	}
	if kinds == nil {
		kinds = []string{}
	}
	return kinds, nil
}
