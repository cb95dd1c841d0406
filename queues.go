package redrive

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/redrivehq/redrive/store"
)

// QueueState says whether a queue is paused, as the store records it.
type QueueState = store.QueueState

// Queue is a queue as an operator sees it: whether it is paused, how
// many of its jobs are in each state, how long its oldest due job has
// waited, and whether any live worker consumes it.
type Queue struct {
	Name   string `json:"name"`
	Paused bool   `json:"paused"`
	// PausedAt is when the queue was paused; nil when it is not paused.
	PausedAt *time.Time `json:"paused_at"`
	// Jobs counts the queue's jobs in each state; every state is present,
	// with 0 when the queue has no job in it.
	Jobs map[State]int64 `json:"jobs"`
	// OldestDueAt is the run_at of the queue's oldest due job (pending, or
	// scheduled with run_at at or before now); nil when none is due.
	OldestDueAt *time.Time `json:"oldest_due_at"`
	// LatencyMS is the queue's latency in milliseconds: how long its
	// oldest due job has waited since it was due (0 when none is due). A
	// latency that keeps growing means the queue's workers do not keep
	// up, are paused, or are missing (see Unconsumed). Latency returns it
	// as a time.Duration.
	LatencyMS int64 `json:"latency_ms"`
	// Unconsumed is true when the queue has due jobs and no live worker
	// (see Client.Workers: registered, not stopped, heartbeat recent)
	// serves it: nothing will run them until a worker for the queue
	// starts.
	Unconsumed bool `json:"unconsumed"`
	// Fair is the queue's fair share when the process answering makes it
	// fair (Client.SetFairShares, serve's fair-queues): its jobs start by
	// round robin over Fair.Key. nil otherwise.
	Fair *FairShare `json:"fair,omitempty"`
}

// Latency is the queue's latency (LatencyMS) as a duration.
func (q Queue) Latency() time.Duration { return time.Duration(q.LatencyMS) * time.Millisecond }

// checkQueueName validates the name of a queue to pause or resume. A
// pause records the queue: its name follows the name rule (CheckName).
// A resume takes too a name the rule refuses if the store knows a queue
// of that name (paused before the rule), so that such a queue is not
// paused for good; it records no new queue under such a name.
func (c *Client) checkQueueName(ctx context.Context, name string, paused bool) error {
	err := CheckName("queue", name)
	if err == nil || paused {
		return err
	}
	qs, qerr := c.store.Queues(ctx)
	if qerr != nil {
		return fmt.Errorf("looking for queue %q: %w", name, qerr)
	}
	for _, q := range qs {
		if q.Name == name {
			return nil
		}
	}
	return err
}

// newQueue combines a queue's pause state with its job counts.
func newQueue(st QueueState, jobs map[State]int64) Queue {
	q := Queue{Name: st.Name, Paused: st.Paused, Jobs: make(map[State]int64, len(store.States))}
	if st.Paused && !st.PausedAt.IsZero() {
		at := st.PausedAt
		q.PausedAt = &at
	}
	for _, s := range store.States {
		q.Jobs[s] = jobs[s]
	}
	return q
}

// Queues returns every queue the store knows, sorted by name: the queues
// with jobs or statistics, and those ever paused or resumed (a queue can
// be paused before its first job exists), each with its job counts.
func (c *Client) Queues(ctx context.Context) ([]Queue, error) {
	states, err := c.store.Queues(ctx)
	if err != nil {
		return nil, fmt.Errorf("redrive: queues: %w", err)
	}
	stats, err := c.store.Stats(ctx)
	if err != nil {
		return nil, fmt.Errorf("redrive: queues: %w", err)
	}
	byName := make(map[string]QueueState, len(states))
	for _, st := range states {
		byName[st.Name] = st
	}
	// The counts are read after the states: a queue whose first job came
	// in between is listed too, not paused.
	for name := range stats.Jobs {
		if _, ok := byName[name]; !ok {
			byName[name] = QueueState{Name: name}
		}
	}
	out := make([]Queue, 0, len(byName))
	for _, st := range byName {
		out = append(out, c.withFair(newQueue(st, stats.Jobs[st.Name])))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	if err := c.addLatency(ctx, out); err != nil {
		return nil, fmt.Errorf("redrive: queues: %w", err)
	}
	return out, nil
}

// addLatency sets the latency of the queues and flags those with due jobs
// that no live worker serves.
func (c *Client) addLatency(ctx context.Context, qs []Queue) error {
	if len(qs) == 0 {
		return nil
	}
	names := make([]string, len(qs))
	for i, q := range qs {
		names[i] = q.Name
	}
	now := c.now()
	oldest, err := c.store.OldestDue(ctx, names, now)
	if err != nil {
		return err
	}
	if len(oldest) == 0 {
		return nil
	}
	ws, err := c.Workers(ctx)
	if err != nil {
		return err
	}
	served := map[string]bool{}
	for _, w := range ws {
		if w.State != WorkerLive {
			continue
		}
		for q := range w.Queues {
			served[q] = true
		}
	}
	for i := range qs {
		at, ok := oldest[qs[i].Name]
		if !ok {
			continue
		}
		at = at.UTC()
		qs[i].OldestDueAt = &at
		qs[i].LatencyMS = max(now.Sub(at), 0).Milliseconds()
		qs[i].Unconsumed = !served[qs[i].Name]
	}
	return nil
}

// PauseQueue pauses a queue: workers stop fetching its jobs, in this
// process as soon as PauseQueue returns, in other processes sharing the
// store within their PollInterval. Nothing is lost or failed: running
// jobs finish normally, waiting jobs stay pending or scheduled, enqueues
// are accepted, and rescue and retention go on. A queue needs no jobs to
// be paused, so one can pause before a deploy. Pausing a paused queue
// changes nothing (PausedAt stays the time of the first pause).
//
// It returns the queue with its job counts. A name is required; it is
// bounded like Enqueue's. PauseQueue is idempotent, so it may simply be
// retried after an error.
func (c *Client) PauseQueue(ctx context.Context, name string) (Queue, error) {
	return c.setPaused(ctx, name, true)
}

// ResumeQueue resumes a paused queue: workers of this process fetch its
// due jobs at once, those of other processes within their PollInterval.
// Resuming a queue that is not paused changes nothing. It returns the
// queue with its job counts, and may be retried after an error.
func (c *Client) ResumeQueue(ctx context.Context, name string) (Queue, error) {
	return c.setPaused(ctx, name, false)
}

func (c *Client) setPaused(ctx context.Context, name string, paused bool) (Queue, error) {
	op := "resume queue"
	if paused {
		op = "pause queue"
	}
	if err := c.checkQueueName(ctx, name, paused); err != nil {
		return Queue{}, fmt.Errorf("redrive: %s: %w", op, err)
	}
	st, err := c.store.SetPaused(ctx, name, paused, c.now())
	if err != nil {
		return Queue{}, fmt.Errorf("redrive: %s %q: %w", op, name, err)
	}
	if paused {
		c.log.Info("queue paused", "queue", name, "paused_at", st.PausedAt)
	} else {
		c.log.Info("queue resumed", "queue", name)
	}
	c.notifyPaused(name, st.Paused)
	stats, err := c.store.Stats(ctx)
	if err != nil {
		return Queue{}, fmt.Errorf("redrive: %s %q: done, but reading its job counts failed: %w", op, name, err)
	}
	q := []Queue{c.withFair(newQueue(st, stats.Jobs[name]))}
	if err := c.addLatency(ctx, q); err != nil {
		return Queue{}, fmt.Errorf("redrive: %s %q: done, but reading its latency failed: %w", op, name, err)
	}
	return q[0], nil
}
