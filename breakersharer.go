package redrive

import "context"

// breakerSharer shares the worker's breakers with the other processes on
// its store (see fleetBreakers): it connects the breakers of the
// worker's registry to the store, keeps them in step with the store's
// shared breakers, and disconnects them at the end. A worker with
// LocalBreakers shares none.
type breakerSharer struct {
	loop
	w *Worker
}

// start shares the breakers until ctx ends or stop. The test signal is
// sent after each sync with the store: at the start, on each change
// another process notified, and at each poll.
func (b *breakerSharer) start(ctx context.Context) {
	b.startWith(ctx, func(ctx context.Context) {
		w := b.w
		if w.opts.LocalBreakers {
			return
		}
		f := newFleetBreakers(ctx, w.store, w.exec.Breakers(), w.id, w.log)
		f.signal = b.signal
		f.run(ctx)
	})
}
