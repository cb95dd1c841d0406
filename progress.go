package redrive

import (
	"context"
	"sync"
	"time"

	"github.com/redrivehq/redrive/store"
)

// Progress reports how far the handler running under ctx is: done units of
// total (bytes, rows, files: any unit), total 0 or negative when unknown.
// The job shows it while it runs (Job.Progress, the API and the
// dashboard): the worker sends the latest value with its heartbeats and,
// when it changed, about once a second, never once per call, so calling
// Progress often (per 64 KiB copied, per row) costs little: it only
// stores the two numbers. A later call replaces an earlier one.
//
// When the attempt succeeds, the job keeps the last progress reported as
// its final progress; any other end of the attempt (a retry, a snooze, a
// shutdown release, a cancellation, the DLQ) clears it, and the next
// attempt starts without one.
//
// Progress does nothing when ctx is not a handler's context (or one
// derived from it), or when the attempt is not run by a Worker (an
// Executor used alone, unless ExecutorOptions.KeepProgress is set). It is safe to call from any goroutine of the
// handler.
func Progress(ctx context.Context, done, total int64) {
	if r, ok := ctx.Value(attemptKey{}).(*runningJob); ok && r.progress != nil {
		r.progress.set(done, total)
	}
}

// progressInterval is how often, at most, a worker sends progress that
// changed, besides its heartbeats.
const progressInterval = time.Second

// progressCell holds the latest progress of one running attempt: the
// handler sets it, the worker reads and sends it.
type progressCell struct {
	mu          sync.Mutex
	reported    bool
	done, total int64
	seq, sent   uint64 // changes made and the change last sent
}

func (c *progressCell) set(done, total int64) {
	done, total = max(done, 0), max(total, 0)
	c.mu.Lock()
	if !c.reported || c.done != done || c.total != total {
		c.reported, c.done, c.total = true, done, total
		c.seq++
	}
	c.mu.Unlock()
}

// final returns the last progress reported, nil if none.
func (c *progressCell) final(at time.Time) *store.JobProgress {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.reported {
		return nil
	}
	return &store.JobProgress{Done: c.done, Total: c.total, At: at}
}

// unsent returns the progress if it changed since it was last sent, with
// the change's number for markSent.
func (c *progressCell) unsent() (done, total int64, seq uint64, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.done, c.total, c.seq, c.reported && c.seq != c.sent
}

// markSent records that change seq reached the store.
func (c *progressCell) markSent(seq uint64) {
	c.mu.Lock()
	c.sent = max(c.sent, seq)
	c.mu.Unlock()
}

// flushProgress sends the progress of the running attempts that changed
// since it was last sent. The heartbeat loop calls it, so that two sends
// never overlap.
func (w *Worker) flushProgress(ctx context.Context) {
	type sent struct {
		cell *progressCell
		seq  uint64
	}
	var (
		updates []store.ProgressUpdate
		cells   []sent
	)
	now := w.client.now()
	w.runMu.Lock()
	for l, r := range w.running {
		if r.progress == nil {
			continue
		}
		done, total, seq, ok := r.progress.unsent()
		if !ok {
			continue
		}
		updates = append(updates, store.ProgressUpdate{JobID: l.JobID, Lease: l.Token,
			JobProgress: store.JobProgress{Done: done, Total: total, At: now}})
		cells = append(cells, sent{r.progress, seq})
	}
	w.runMu.Unlock()
	if len(updates) == 0 {
		return
	}
	if err := w.store.Progress(ctx, w.id, updates); err != nil {
		if ctx.Err() == nil {
			w.log.Warn("sending job progress failed", "worker", w.id, "jobs", len(updates), "error", err)
		}
		return
	}
	for _, c := range cells {
		c.cell.markSent(c.seq)
	}
}
