package redrive

import (
	"context"
	"time"

	"github.com/redrivehq/redrive/store"
)

// cleaner applies retention (see Worker.Cleanup) while this worker
// leads maintenance: a minute after the start, then every
// CleanupInterval.
type cleaner struct {
	loop
	w *Worker
	// first is the wait before the first cleanup (cleanerFirst; tests
	// shorten it).
	first time.Duration
}

// cleanerFirst is how long a worker waits before its first cleanup, so
// that a process restarted again and again does not clean at each start.
const cleanerFirst = time.Minute

// start cleans up after c.first, then every CleanupInterval, until ctx
// ends.
func (c *cleaner) start(ctx context.Context) {
	c.startWith(ctx, func(ctx context.Context) {
		first := time.NewTimer(c.first)
		defer first.Stop()
		select {
		case <-ctx.Done():
			return
		case <-first.C:
		}
		cleanup := func() {
			if c.w.leading() {
				c.w.Cleanup(ctx)
			}
			c.signal.send()
		}
		cleanup()
		every(ctx, c.w.opts.CleanupInterval, cleanup)
	})
}

// Cleanup applies retention once: completed and canceled jobs older than
// CompletedRetention and dead jobs older than DLQMaxAge are deleted (their
// idempotency keys stay taken), the kept keys of jobs enqueued more than
// KeyRetention ago are released, workers stopped or silent for a day
// leave the registry, operations finished more than
// OperationRetention ago are deleted, and so are audit log entries older
// than AuditRetention. The worker runs it every CleanupInterval; it is
// exported for tools and tests.
func (w *Worker) Cleanup(ctx context.Context) (deleted int64, err error) {
	now := w.client.now()
	for _, r := range []struct {
		state store.State
		age   time.Duration
	}{{store.Completed, w.opts.CompletedRetention}, {store.Canceled, w.opts.CompletedRetention}, {store.Dead, w.opts.DLQMaxAge}} {
		for {
			n, err := w.store.DeleteFinished(ctx, r.state, now.Add(-r.age), 1000)
			deleted += n
			if err != nil {
				w.log.Error("retention cleanup failed", "state", r.state, "error", err)
				return deleted, err
			}
			if n < 1000 {
				break
			}
		}
	}
	keys, err := w.store.DeleteKeys(ctx, now.Add(-w.opts.KeyRetention))
	if err != nil {
		w.log.Error("retention cleanup of idempotency keys failed", "error", err)
		return deleted, err
	}
	workers, err := w.store.DeleteWorkers(ctx, now.Add(-workerRetention))
	if err != nil {
		w.log.Error("retention cleanup of the worker registry failed", "error", err)
		return deleted, err
	}
	if _, err := w.store.DeleteOperations(ctx, now.Add(-OperationRetention)); err != nil {
		w.log.Error("retention cleanup of finished operations failed", "error", err)
		return deleted, err
	}
	audit, err := w.store.DeleteAudit(ctx, now.Add(-w.opts.AuditRetention))
	if err != nil {
		w.log.Error("retention cleanup of the audit log failed", "error", err)
		return deleted, err
	}
	if deleted > 0 || keys > 0 || workers > 0 || audit > 0 {
		w.log.Info("retention cleanup", "deleted", deleted, "keys_released", keys, "workers_pruned", workers, "audit_entries_deleted", audit)
	}
	return deleted, nil
}

// DefaultKeyRetention is how long an idempotency key stays taken by
// default (see WorkerOptions.KeyRetention).
const DefaultKeyRetention = 7 * 24 * time.Hour

// workerRetention is how long stopped and silent workers stay in the
// registry.
const workerRetention = 24 * time.Hour
