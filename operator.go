package redrive

import (
	"context"
	"time"
)

// operator runs the durable operations (see Client.StartOperation) while
// this worker leads maintenance: it claims a runnable operation every
// PollInterval, and at once when one is started or resumed through a
// Client of this process, and runs it to its end (one at a time), holding
// it with a lease of LeaseDuration.
type operator struct {
	loop
	w *Worker
}

// start runs operations until ctx ends or stop.
func (o *operator) start(ctx context.Context) { o.startWith(ctx, o.run) }

// run is the loop. Its test signal is sent after each round (every
// runnable operation claimed and run) and after each batch of the
// operation it runs.
func (o *operator) run(ctx context.Context) {
	w := o.w
	t := time.NewTicker(w.opts.PollInterval)
	defer t.Stop()
	var progress func(*Operation)
	if o.signal != nil {
		progress = func(*Operation) { o.signal.send() }
	}
	for {
		if w.leading() {
			for ctx.Err() == nil {
				op, err := w.store.ClaimOperation(ctx, "", w.id, w.client.now(), w.client.now().Add(w.opts.LeaseDuration))
				if err != nil {
					if ctx.Err() == nil {
						w.log.Error("operations: claiming failed", "error", err)
					}
					break
				}
				if op == nil {
					break
				}
				if _, err := w.client.runClaimed(ctx, op, w.id, w.opts.LeaseDuration, progress); err != nil && ctx.Err() == nil {
					w.log.Error("operation failed", "operation", op.ID, "error", err)
				}
			}
		}
		o.signal.send()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-w.client.opsWake: // started or resumed in this process
		}
	}
}
