package redrive

import (
	"context"
	"time"
)

// scheduler runs the worker's periodic jobs (see Periodic): it declares
// the schedules in the store, then, while this worker leads maintenance
// (the store's election; every worker on a store without one), enqueues
// their due occurrences. Every occurrence is enqueued under its own
// idempotency key before the schedule's cursor moves past it with a
// compare-and-set: two leaders, or a leader that restarts between the
// two writes, enqueue it once.
type scheduler struct {
	loop
	w *Worker
	// periodic are the worker's compiled schedules.
	periodic []*periodic
}

// PeriodicRedeclareEvery is how often a running worker declares its
// schedules again, besides at its start: the store's DeclaredAt and
// DeclaredBy of a schedule then name a worker that still declares it.
const PeriodicRedeclareEvery = 10 * time.Second

// start runs the schedules until ctx ends or stop; with none, the loop
// ends at once.
func (s *scheduler) start(ctx context.Context, ps []*periodic) {
	s.periodic = ps
	s.startWith(ctx, s.run)
}

// run is the loop. A round declares the schedules not yet recorded and,
// when leading, enqueues what is due; the test signal is sent after each
// round. It waits for the next occurrence, at most a second.
func (s *scheduler) run(ctx context.Context) {
	w, ps := s.w, s.periodic
	if len(ps) == 0 {
		return
	}
	declared := false
	var declaredAt time.Time
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		wait := time.Second
		if !declared || time.Since(declaredAt) >= PeriodicRedeclareEvery {
			// Declared again now and then: DeclaredAt and DeclaredBy say
			// that a running worker declares them (DeleteSchedule).
			if declared = w.declarePeriodic(ctx, ps); declared {
				declaredAt = time.Now()
			}
		}
		if declared && w.leading() {
			var redeclare bool
			wait, redeclare = w.enqueuePeriodic(ctx, ps)
			if redeclare {
				declared = false
			}
		}
		s.signal.send()
		timer.Reset(wait)
	}
}
