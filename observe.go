package redrive

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/store"
)

// Observer receives a report of every attempt a Worker runs, for metrics
// such as latency and lateness histograms. Set it in
// WorkerOptions.Observer.
//
// ObserveAttempt is called once per attempt, from the goroutine that ran
// the attempt, outside any lock of the worker, after the outcome is
// decided and before it is written to the store: once the store shows a
// job's new state, its attempt was reported. Calls come from many
// goroutines at once, so ObserveAttempt must be safe for concurrent use,
// and it delays the recording of the outcome (and the freeing of the
// handler's slot) by its own running time, so it must be fast: update an
// in-memory metric, never wait on I/O. A panic in it is not recovered.
//
// Reported are the attempts of this worker's handlers, including the
// pick-ups that a breaker deferred before the handler ran. Not reported:
// leases that expired elsewhere and were rescued by this worker (the
// attempt ran in another process), and the attempts of handlers that
// ignore cancellation at shutdown and are released without returning,
// even when such a handler returns later: once Worker.Run has returned,
// the Observer is not called again. A call under way when Run gives up on
// those handlers is not waited for (it may be the one that does not end)
// and may still be running after Run returns.
type Observer interface {
	ObserveAttempt(AttemptInfo)
}

// AttemptOutcome is what became of an attempt, as reported to an Observer.
type AttemptOutcome string

// The outcomes of an attempt.
const (
	// OutcomeCompleted: the handler succeeded; the job is completed.
	OutcomeCompleted AttemptOutcome = "completed"
	// OutcomeRetry: the handler failed; a retry is scheduled.
	OutcomeRetry AttemptOutcome = "retry"
	// OutcomeDead: the handler failed and the job moved to the DLQ.
	OutcomeDead AttemptOutcome = "dead"
	// OutcomeSnoozed: the handler returned Snooze; no attempt was used.
	OutcomeSnoozed AttemptOutcome = "snoozed"
	// OutcomeDeferred: an open circuit breaker put the job back, either
	// before the handler ran or because the handler met one; no attempt
	// was used.
	OutcomeDeferred AttemptOutcome = "deferred"
	// OutcomeReleased: shutdown interrupted the handler; the job is back
	// to pending and no attempt was used.
	OutcomeReleased AttemptOutcome = "released"
	// OutcomeCanceled: a user canceled the job while it ran.
	OutcomeCanceled AttemptOutcome = "canceled"
)

// AttemptInfo describes one attempt for an Observer.
type AttemptInfo struct {
	JobID int64
	Queue string
	Kind  string
	// Attempt is the attempt's number: 1 for the first since the job was
	// created or last redriven. Snoozed, deferred and released attempts
	// keep their number, which the next attempt uses again.
	Attempt int
	// Retry is true when the attempt is a retry (Attempt > 1): its
	// Lateness is then the retry's lateness, rather than queue wait.
	Retry   bool
	Outcome AttemptOutcome
	// Class is the failure class of a failed attempt (OutcomeRetry or
	// OutcomeDead); failure.None for the other outcomes.
	Class failure.Class
	// Err is the handler's error: nil when it succeeded; for a deferral
	// before the handler ran, the breaker's refusal (a
	// *breaker.OpenError).
	Err error
	// Started is when the attempt started.
	Started time.Time
	// Duration is how long the handler ran (Started to its return); zero
	// when a breaker deferred the job before the handler ran.
	Duration time.Duration
	// Lateness is how long after the job was due (its run_at) the attempt
	// started, never negative. For a first attempt it is the job's wait in
	// the queue; for a retry it is how much the start overshot the retry
	// delay; after a snooze or a deferral, how late the job started again.
	Lateness time.Duration
	// Span is the span context of the attempt's span (see
	// ExecutorOptions.TracerProvider), or, when the executor does not
	// trace, of the span of the context the attempt ran in; not valid when
	// there is none. A metrics Observer puts its trace id on the attempt's
	// observation as an exemplar.
	Span trace.SpanContext
}

// outcomeOf names what became of the attempt whose outcome is o.
func outcomeOf(o *store.Outcome) AttemptOutcome {
	switch o.Kind {
	case store.Complete:
		return OutcomeCompleted
	case store.Retry:
		return OutcomeRetry
	case store.Bury:
		return OutcomeDead
	case store.Snooze:
		if o.Event != nil && o.Event.Kind == store.EventDeferred {
			return OutcomeDeferred
		}
		return OutcomeSnoozed
	case store.Release:
		return OutcomeReleased
	case store.Cancel:
		return OutcomeCanceled
	}
	return ""
}

// observe reports an attempt whose outcome o was decided to the executor's
// Observer, which the caller checked is set.
func (e *Executor) observe(ctx context.Context, j *Job, o *store.Outcome, err error, start, end time.Time) {
	info := AttemptInfo{JobID: j.ID, Queue: j.Queue, Kind: j.Kind, Attempt: j.Attempt, Retry: j.Attempt > 1,
		Err: err, Started: start, Duration: end.Sub(start), Span: trace.SpanContextFromContext(ctx)}
	info.Outcome = outcomeOf(o)
	if o.Kind == store.Retry || o.Kind == store.Bury {
		info.Class = o.Class
	}
	if late := start.Sub(j.RunAt); late > 0 {
		info.Lateness = late
	}
	e.opts.Observer.ObserveAttempt(info)
}
