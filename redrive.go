// Package redrive is a durable job engine in which failure is first-class:
// every job gets retries with exponential backoff and jitter, every error
// is classified (transient, rate-limited, permanent, needs-auth), servers'
// Retry-After is obeyed, failing dependencies are fenced by circuit
// breakers, and what cannot succeed lands in a dead-letter queue where an
// operator can read its whole history, fix the cause and redrive it.
//
// A Client enqueues jobs and reads them; a Worker runs handlers for them.
// Both sit on a store.Store: store/sqlite (embedded, zero set-up) or a
// shared database.
//
//	st, _ := sqlite.Open(ctx, "redrive.db", sqlite.Options{})
//	client := redrive.NewClient(st, redrive.ClientOptions{})
//	w := redrive.NewWorker(client, redrive.WorkerOptions{})
//	redrive.Handle(w, "email", func(ctx context.Context, job *redrive.Job, m Email) error {
//		return send(ctx, m) // classified: redrive.Permanent(err) to stop retrying
//	})
//	go w.Run(ctx)
//	client.Enqueue(ctx, "email", Email{To: "a@example.com"})
package redrive

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/store"
)

// Job is a job with its whole attempt history.
type Job = store.Job

// State is a job's lifecycle state.
type State = store.State

// Event is one entry of a job's history.
type Event = store.Event

// Filter selects jobs for listing, grouping, redrive, purge and export.
type Filter = store.Filter

// Page asks for one page of a keyset-paginated listing.
type Page = store.Page

// ListResult is one page of jobs.
type ListResult = store.ListResult

// Group is dead jobs sharing one cause.
type Group = store.Group

// Stats are counts per queue and state and the running totals of attempts,
// successes, retries, dead jobs and redrives.
type Stats = store.Stats

// The job states.
const (
	Pending   = store.Pending
	Scheduled = store.Scheduled
	Running   = store.Running
	Completed = store.Completed
	Dead      = store.Dead
	Canceled  = store.Canceled
)

// DefaultQueue is the queue of jobs enqueued without one.
const DefaultQueue = "default"

// Errors of the engine. Store errors (store.ErrNotFound, ...) are
// re-exported so callers need not import the store package.
var (
	ErrNotFound         = store.ErrNotFound
	ErrConflict         = store.ErrConflict
	ErrNotReprocessable = store.ErrNotReprocessable
	ErrInvalid          = store.ErrInvalid
	// ErrShutdown is the cause of a handler's context when the worker
	// shuts down; the job goes back to pending without using an attempt.
	ErrShutdown = errors.New("redrive: worker shutting down")
	// ErrJobCanceled is the cause of a handler's context when a user
	// cancels the running job.
	ErrJobCanceled = errors.New("redrive: job canceled")
	// ErrLeaseLost is the cause of a handler's context canceled because
	// its worker lost the job's lease (a heartbeat found the job ended or
	// leased again, as after a rescue of a lease that expired while the
	// worker could not renew it): the job may run elsewhere, and the
	// attempt's outcome will be discarded.
	ErrLeaseLost = errors.New("redrive: lease lost")
)

// Permanent marks err as permanent: the job goes to the DLQ at once.
// errors.Is and errors.As still reach err.
func Permanent(err error) error { return failure.Wrap(failure.Permanent, err) }

// Transient marks err as transient: the job is retried by its policy.
func Transient(err error) error { return failure.Wrap(failure.Transient, err) }

// NeedsAuth marks err as an authentication or authorisation failure: the
// job goes to the DLQ at once with reason needs_auth.
func NeedsAuth(err error) error { return failure.Wrap(failure.NeedsAuth, err) }

// RateLimited marks err as rate limiting: the job is retried no sooner
// than after (clamped by the policy's MaxRetryAfter).
func RateLimited(err error, after time.Duration) error { return failure.WrapRateLimited(err, after) }

// SnoozeError asks for the job to run again after Delay without using an
// attempt. Return it with Snooze.
type SnoozeError struct{ Delay time.Duration }

func (e *SnoozeError) Error() string { return fmt.Sprintf("snooze for %s", e.Delay) }

// Snooze returns an error that, returned from a handler, defers the job by
// d without using an attempt (for work that is not ready yet).
func Snooze(d time.Duration) error {
	if d < 0 {
		d = 0
	}
	return &SnoozeError{Delay: d}
}

// attemptKey is the context key under which a handler's context holds its
// running attempt.
type attemptKey struct{}

// attemptResult is what Record noted for an attempt.
type attemptResult struct{ reason, note string }

// Record notes what the attempt running under ctx produced, for the job's
// history. If the handler then returns nil, the success is recorded as a
// "completed" event with the attempt's number, start and duration, the
// reason (short and machine-readable, such as "http_200") and the note
// (free text, such as an excerpt of a response); both are cut to
// WorkerOptions.MaxErrorLength. A later call replaces an earlier one. If the
// attempt fails, what was recorded is dropped: the error is recorded.
//
// Without Record a success is still visible on the job (attempt,
// attempted_at, finished_at, last_duration), and costs less: recording the
// event grows the job's history by one entry per success. The built-in
// http kind records the response status and an excerpt of the body.
//
// Record does nothing when ctx is not a handler's context (or one derived
// from it). It is safe to call from any goroutine of the handler.
func Record(ctx context.Context, reason, note string) {
	if r, ok := ctx.Value(attemptKey{}).(*runningJob); ok {
		r.result.Store(&attemptResult{reason: reason, note: note})
	}
}

// KeyOf returns a content-derived idempotency key: the hex SHA-256 of the
// parts, each length-prefixed so that ("ab", "c") and ("a", "bc") differ.
// A blob-ingestion pipeline derives its job ids as SHA256(container +
// blobPath + ETag); with
// KeyOf(container, blobPath, etag) N concurrent enqueues of one blob create
// one job.
func KeyOf(parts ...string) string {
	h := sha256.New()
	var n [8]byte
	for _, p := range parts {
		binary.BigEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write([]byte(p))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// LogWith adds attributes (slog key-value pairs or slog.Attr values) to
// the log lines the engine writes about the attempt running under ctx:
// "job failed; retry scheduled" and "job moved to the DLQ". The http kind
// adds the target URL this way. A later call replaces an earlier one;
// outside a handler's context it does nothing.
func LogWith(ctx context.Context, attrs ...any) {
	if r, ok := ctx.Value(attemptKey{}).(*runningJob); ok {
		r.attrs.Store(&attrs)
	}
}
