package redrive

import (
	"context"
	"time"

	"github.com/redrivehq/redrive/store"
)

// listener hears the notices of a store shared by several processes (a
// store.Notifier): jobs another process made due wake the fetchers of
// their queue, and a cancellation another process requested asks for a
// heartbeat, which tells whether the job is one of this worker's. A
// notice with no queue (notices missed by a reconnect) does both, for
// every queue.
type listener struct {
	loop
	w *Worker
}

// start listens until ctx ends; if listening fails, the worker polls.
func (l *listener) start(ctx context.Context, n store.Notifier) {
	w := l.w
	l.startWith(ctx, func(ctx context.Context) {
		err := n.Listen(ctx, func(queue string) {
			defer l.signal.send()
			if queue == store.CancelNotice || queue == "" {
				// A cancellation requested by another process (or
				// notices missed by a reconnect).
				w.heartbeatNow()
				if queue != "" {
					return
				}
			}
			now := time.Now()
			for _, q := range w.queues {
				if queue == "" || queue == q.name {
					q.wake(now)
				}
			}
		})
		if err != nil && ctx.Err() == nil {
			w.log.Error("listening for new jobs stopped; falling back to polling", "error", err, "poll_interval", w.opts.PollInterval)
		}
	})
}
