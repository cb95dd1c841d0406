package redrive

import (
	"context"
	"time"

	"github.com/redrivehq/redrive/store"
)

// cancelPollInterval is how often a worker on a store that cannot notify
// (a store.CancelChecker) asks whether one of its running jobs was
// canceled by another process.
const cancelPollInterval = 250 * time.Millisecond

// cancelPoller asks a store that cannot notify (a store.CancelChecker
// but no store.Notifier) every cancelPollInterval whether one of the
// running jobs was canceled by another process, while some run, and
// cancels their handlers.
type cancelPoller struct {
	loop
	w  *Worker
	cc store.CancelChecker
}

// start polls until ctx ends or stop.
func (p *cancelPoller) start(ctx context.Context, cc store.CancelChecker) {
	p.cc = cc
	p.startWith(ctx, p.poll)
}

func (p *cancelPoller) poll(ctx context.Context) {
	w, cc := p.w, p.cc
	every(ctx, cancelPollInterval, func() {
		defer p.signal.send()
		leases := w.runningLeases()
		if len(leases) == 0 {
			return
		}
		cancel, err := cc.CancelRequested(ctx, w.id, leases)
		if err != nil {
			if ctx.Err() == nil {
				w.log.Debug("polling for canceled jobs failed", "worker", w.id, "error", err)
			}
			return
		}
		w.cancelRunning(cancel, ErrJobCanceled)
	})
}
