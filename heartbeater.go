package redrive

import (
	"context"
	"time"

	"github.com/redrivehq/redrive/store"
)

// heartbeater extends the leases of the running jobs (and of those whose
// outcomes are not written yet) every third of the lease, and at once
// when asked (beatNow): a cancellation was requested. Each heartbeat
// cancels the handlers of canceled jobs and stops those whose leases were
// lost. It also writes the handlers' progress, about once a second, and
// the worker's entry in the registry.
type heartbeater struct {
	loop
	w *Worker
	// asked holds a request for a heartbeat now.
	asked chan struct{}
}

// start heartbeats until ctx ends or stop.
func (h *heartbeater) start(ctx context.Context) { h.startWith(ctx, h.beatLoop) }

func (h *heartbeater) beatLoop(ctx context.Context) {
	w := h.w
	t := time.NewTicker(w.opts.LeaseDuration / 3)
	defer t.Stop()
	// Progress that changed goes with each heartbeat, and in between
	// about once a second.
	p := time.NewTicker(progressInterval)
	defer p.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			w.heartbeat(ctx)
			w.flushProgress(ctx)
			w.heartbeatRegistry(ctx)
			h.signal.send()
		case <-p.C:
			w.flushProgress(ctx)
			h.signal.send()
		case <-h.asked:
			w.heartbeat(ctx)
			h.signal.send()
		}
	}
}

// heartbeatNow asks the heartbeater for a heartbeat at once (a
// cancellation was requested); it does not block.
func (w *Worker) heartbeatNow() {
	select {
	case w.heartbeater.asked <- struct{}{}:
	default:
	}
}

// runningLeases returns the leases of the jobs whose handlers run.
func (w *Worker) runningLeases() []store.Lease {
	w.runMu.Lock()
	defer w.runMu.Unlock()
	leases := make([]store.Lease, 0, len(w.running))
	for l := range w.running {
		leases = append(leases, l)
	}
	return leases
}

// cancelRunning cancels with cause the handlers of the given leases,
// those that still run.
func (w *Worker) cancelRunning(leases []store.Lease, cause error) {
	if len(leases) == 0 {
		return
	}
	w.runMu.Lock()
	defer w.runMu.Unlock()
	for _, l := range leases {
		if r, ok := w.running[l]; ok {
			if cause == ErrLeaseLost && r.ctx.Err() == nil {
				w.log.Warn("lease lost: stopping the handler (the job may run elsewhere; its outcome will be discarded)",
					"worker", w.id, jobAttr(r.job), "lease", l.Token, "attempt", r.job.Attempt)
			}
			r.cancel(cause)
		}
	}
}

// heartbeat extends the leases of the running jobs, cancels those whose
// cancellation was requested, and stops the handlers whose leases are
// lost (their jobs may run elsewhere).
func (w *Worker) heartbeat(ctx context.Context) {
	leases := append(w.runningLeases(), w.completer.unsettled()...)
	if len(leases) == 0 {
		return
	}
	until := w.client.now().Add(w.opts.LeaseDuration)
	res, err := w.store.Heartbeat(ctx, w.id, leases, until)
	if err != nil {
		if ctx.Err() == nil {
			w.log.Error("heartbeat failed", "worker", w.id, "jobs", len(leases), "error", err)
			w.stopEnding(w.client.now().Add(w.opts.LeaseDuration / 3))
		}
		return
	}
	w.extended(leases, until)
	w.cancelRunning(res.Canceled, ErrJobCanceled)
	w.cancelRunning(res.Lost, ErrLeaseLost)
}

// extended records that the leases now end at until.
func (w *Worker) extended(leases []store.Lease, until time.Time) {
	w.runMu.Lock()
	defer w.runMu.Unlock()
	for _, l := range leases {
		if r, ok := w.running[l]; ok {
			r.leaseEnd = until
			w.running[l] = r
		}
	}
}

// stopEnding stops, as lost, the handlers whose leases end before by (the
// next heartbeat) after a heartbeat failed: other processes rescue such
// a job once its lease ends and may run it, or another job of its
// concurrency-limit group, elsewhere; a handler left running while the
// store is unreachable would overlap that run for as long as it lasts.
func (w *Worker) stopEnding(by time.Time) {
	var lost []store.Lease
	w.runMu.Lock()
	for l, r := range w.running {
		if !r.leaseEnd.IsZero() && r.leaseEnd.Before(by) {
			lost = append(lost, l)
		}
	}
	w.runMu.Unlock()
	w.cancelRunning(lost, ErrLeaseLost)
}
