package redrive

import (
	"context"
	"fmt"

	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/store"
)

// rescuer turns expired leases into failed attempts (Transient,
// lease_expired): a killed process loses no job. It rescues at start,
// then every RescueInterval, while this worker leads maintenance (see
// rescue); each round also rescues the jobs of this host's workers whose
// process is gone (see rescueGone).
type rescuer struct {
	loop
	w *Worker
}

// start rescues at once, then every RescueInterval until ctx ends.
func (r *rescuer) start(ctx context.Context) {
	r.startWith(ctx, func(ctx context.Context) {
		r.rescue(ctx)
		r.signal.send()
		every(ctx, r.w.opts.RescueInterval, func() {
			r.w.rescueGone(ctx)
			r.rescue(ctx)
			r.signal.send()
		})
	})
}

// rescue fails the attempts whose leases expired, 500 at a time, unless
// another worker leads maintenance or this worker still holds them.
func (r *rescuer) rescue(ctx context.Context) {
	w := r.w
	if !w.leading() {
		return
	}
	for ctx.Err() == nil {
		now := w.client.now()
		jobs, err := w.store.Expired(ctx, now, 500)
		if err != nil {
			if ctx.Err() == nil {
				w.log.Error("rescue: listing expired leases failed", "error", err)
			}
			return
		}
		if len(jobs) == 0 {
			return
		}
		// Jobs this worker still holds (running, or finished with an
		// outcome not written yet, as during a full disk) are not lost:
		// their leases lapsed only because the store refused writes.
		mine := w.holding()
		outs := make([]store.Outcome, 0, len(jobs))
		kept := jobs[:0]
		for _, j := range jobs {
			if j.Worker == w.id && mine[store.LeaseOf(j)] {
				continue
			}
			kept = append(kept, j)
		}
		jobs = kept
		if len(jobs) == 0 {
			return
		}
		for _, j := range jobs {
			// The rescue is decided as a failed attempt, by the job's
			// policy and without the retry budget, fenced on the lease
			// read and on its being still expired: a heartbeat that
			// renewed it since wins.
			msg := fmt.Sprintf("lease expired: worker %s stopped heartbeating", j.Worker)
			v := failure.Verdict{Class: failure.Transient, Reason: "lease_expired"}
			o := w.exec.Fail(j, v, msg, attemptStart(j, now), now)
			o.Worker = j.Worker
			o.ExpiredBy = now
			o.Counters = append(o.Counters, store.Counter{Queue: j.Queue, Name: store.StatRescued, N: 1})
			outs = append(outs, o)
		}
		applied, err := w.store.Finish(ctx, outs)
		if err != nil {
			if ctx.Err() == nil {
				w.log.Error("rescue: recording expired leases failed", "error", err)
			}
			return
		}
		for i, o := range outs {
			if applied[i] {
				w.log.Warn("expired lease rescued", jobAttr(jobs[i]), "attempt", o.Attempt, "lease_worker", o.Worker)
				if o.Kind == store.Retry {
					w.client.wake(jobs[i].Queue, o.RunAt)
				}
			}
		}
		if len(jobs) < 500 {
			return
		}
	}
}

// holding returns the leases this worker holds: running, or finished
// with an outcome not yet written.
func (w *Worker) holding() map[store.Lease]bool {
	held := map[store.Lease]bool{}
	w.runMu.Lock()
	for l := range w.running {
		held[l] = true
	}
	w.runMu.Unlock()
	for _, l := range w.completer.unsettled() {
		held[l] = true
	}
	return held
}
