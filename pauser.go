package redrive

import "context"

// applyLocalPause applies a pause or resume made through the worker's own
// Client, which the store has already recorded.
func (w *Worker) applyLocalPause(q *queueRunner, paused bool) {
	w.pauseMu.Lock()
	defer w.pauseMu.Unlock()
	w.pauseGen.Add(1)
	if q.setPaused(paused) {
		w.logPause(q, paused)
	}
}

// refreshPaused reads the paused queues from the store and applies them.
// On an error the last known states stay.
func (w *Worker) refreshPaused(ctx context.Context) {
	gen := w.pauseGen.Load()
	states, err := w.store.Queues(ctx)
	if err != nil {
		if ctx.Err() == nil {
			w.log.Warn("reading the paused queues failed; keeping the last known", "worker", w.id, "error", err)
		}
		return
	}
	paused := map[string]bool{}
	for _, st := range states {
		if st.Paused {
			paused[st.Name] = true
		}
	}
	w.pauseMu.Lock()
	defer w.pauseMu.Unlock()
	if w.pauseGen.Load() != gen {
		return // a local pause or resume came after this read: it is newer
	}
	for _, q := range w.queues {
		if q.setPaused(paused[q.name]) {
			w.logPause(q, paused[q.name])
		}
	}
}

func (w *Worker) logPause(q *queueRunner, paused bool) {
	if paused {
		w.log.Info("queue paused: fetching none of its jobs until it is resumed", "worker", w.id, "queue", q.name,
			"running", q.active.Load())
		return
	}
	w.log.Info("queue resumed", "worker", w.id, "queue", q.name)
}

// pauser applies the pauses and resumes of queues made by other
// processes: it reads the paused queues every PollInterval (those of
// this process's Clients apply at once, see applyLocalPause).
type pauser struct {
	loop
	w *Worker
}

// start refreshes the paused queues every PollInterval until ctx ends.
func (p *pauser) start(ctx context.Context) {
	p.startWith(ctx, func(ctx context.Context) {
		every(ctx, p.w.opts.PollInterval, func() {
			p.w.refreshPaused(ctx)
			p.signal.send()
		})
	})
}
