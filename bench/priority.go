package bench

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redrivehq/redrive"
)

// Defaults of the priority workload.
const (
	DefaultPriorityBacklog  = 100000
	DefaultPriorityProbes   = 200
	DefaultPriorityInterval = 10 * time.Millisecond
	// priorityProbeKind is the kind of the high-priority probes.
	priorityProbeKind = "bench.probe"
	// probePriority is the probes' priority; the backlog has the default.
	probePriority = 10
)

// PriorityParams are the priority workload's parameters.
type PriorityParams struct {
	Settings
	// Backlog no-op jobs of the default priority are due when the worker
	// starts; Probes jobs of a higher priority are enqueued one at a time,
	// every Interval, while it burns the backlog down.
	Backlog     int      `json:"backlog"`
	Probes      int      `json:"probes"`
	Interval    Duration `json:"interval_ms"`
	InsertBatch int      `json:"insert_batch"`
}

// PriorityResult is what the priority workload measured: how long each
// probe waited from its enqueue to its handler's start, with the backlog
// still waiting ahead of it in due-time order.
type PriorityResult struct {
	Meta
	Params PriorityParams `json:"params"`
	// Insert is the pre-insert of the backlog.
	Insert     Duration `json:"insert_ms"`
	InsertRate float64  `json:"insert_jobs_per_s"`
	// The probes' start latencies.
	P50 Duration `json:"p50_ms"`
	P90 Duration `json:"p90_ms"`
	P99 Duration `json:"p99_ms"`
	Max Duration `json:"max_ms"`
	// BacklogLeft is how many backlog jobs had not started when the last
	// probe started: more than zero, or the probes did not wait behind
	// the backlog.
	BacklogLeft int64 `json:"backlog_left"`
	// Work is the time from the worker's start to the end of the backlog
	// and the probes; Rate is their number over it.
	Work Duration `json:"work_ms"`
	Rate float64  `json:"jobs_per_s"`
}

// Info implements Result.
func (r *PriorityResult) Info() *Meta { return &r.Meta }

// Parameters implements Result.
func (r *PriorityResult) Parameters() []Figure {
	p := r.Params
	return append([]Figure{
		{"backlog", fmt.Sprintf("%d no-op jobs of priority %d, due when the worker starts", p.Backlog, redrive.DefaultPriority)},
		{"probes", fmt.Sprintf("%d jobs of priority %d, one every %s during the burn-down", p.Probes, probePriority, p.Interval)},
		{"insert batch", strconv.Itoa(p.InsertBatch)},
	}, p.figures()...)
}

// Figures implements Result.
func (r *PriorityResult) Figures() []Figure {
	return []Figure{
		{"insert backlog", fmt.Sprintf("%d jobs in %s = %s", r.Params.Backlog, r.Insert, fmtRate(r.InsertRate, "jobs"))},
		{"probe start latency", fmt.Sprintf("p50 %s, p90 %s, p99 %s, max %s", r.P50, r.P90, r.P99, r.Max)},
		{"backlog left at the last probe", strconv.FormatInt(r.BacklogLeft, 10)},
		{"burn-down", fmt.Sprintf("%d jobs in %s = %s", int64(r.Params.Backlog+r.Params.Probes), r.Work, fmtRate(r.Rate, "jobs"))},
	}
}

// probeArgs is a probe's payload: when it was enqueued.
type probeArgs struct {
	Enqueued int64 `json:"enqueued_ns"`
}

// Priority measures how soon a job of a higher priority starts when
// enqueued behind a backlog of due jobs of the default priority: it
// pre-inserts p.Backlog no-op jobs, starts the worker, and enqueues
// p.Probes jobs of priority 10, one every p.Interval, while the backlog
// burns down; each probe's latency is from the start of its Enqueue call
// to the start of its handler. The result is a failed check when the
// backlog ran out before the last probe started.
func Priority(ctx context.Context, cfg Config, p PriorityParams) (*PriorityResult, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	switch {
	case p.Backlog < 1 || p.Probes < 1:
		return nil, fmt.Errorf("bench: priority: backlog and probes must be at least 1, got %d and %d", p.Backlog, p.Probes)
	case p.Interval < 0:
		return nil, fmt.Errorf("bench: priority: interval must not be negative, got %s", p.Interval)
	}
	p.Settings, p.InsertBatch = cfg.settings(), depthInsertBatch
	r, err := newRig(ctx, cfg, "priority")
	if err != nil {
		return nil, err
	}
	res := &PriorityResult{Params: p}
	err = runPriority(ctx, r, res)
	return finish(r, res, &res.Meta, err)
}

func runPriority(ctx context.Context, r *rig, res *PriorityResult) error {
	p := res.Params
	ins, err := r.insert(ctx, noopKind, p.Backlog, p.InsertBatch, 0, time.Time{})
	if err != nil {
		return err
	}
	res.Insert, res.InsertRate = Duration(ins), rate(int64(p.Backlog), ins)

	done := newCounter(p.Backlog + p.Probes)
	var backlogDone atomic.Int64
	var mu sync.Mutex
	lat := make([]time.Duration, 0, p.Probes)
	var leftAtLast int64
	w := r.newWorker(nil)
	redrive.Handle(w, noopKind, func(ctx context.Context, job *redrive.Job, args noopArgs) error {
		backlogDone.Add(1)
		done.inc()
		return nil
	})
	redrive.Handle(w, priorityProbeKind, func(ctx context.Context, job *redrive.Job, args probeArgs) error {
		d := time.Since(time.Unix(0, args.Enqueued))
		mu.Lock()
		lat = append(lat, d)
		leftAtLast = int64(p.Backlog) - backlogDone.Load()
		mu.Unlock()
		done.inc()
		return nil
	})
	t0 := time.Now()
	r.start()
	tick := time.NewTicker(time.Duration(p.Interval))
	defer tick.Stop()
	for range p.Probes {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		if _, err := r.client.Enqueue(ctx, priorityProbeKind, probeArgs{Enqueued: time.Now().UnixNano()}, redrive.Priority(probePriority)); err != nil {
			return fmt.Errorf("bench: priority: enqueue a probe: %w", err)
		}
	}
	if err := done.wait(ctx, r.cfg.StallTimeout, "priority"); err != nil {
		return err
	}
	work := time.Since(t0)
	res.Work, res.Rate = Duration(work), rate(int64(p.Backlog+p.Probes), work)
	if err := r.stop(); err != nil {
		return fmt.Errorf("bench: priority: worker: %w", err)
	}
	slices.Sort(lat)
	q := func(f float64) Duration { return Duration(lat[min(len(lat)-1, int(f*float64(len(lat))))]) }
	res.P50, res.P90, res.P99, res.Max = q(0.50), q(0.90), q(0.99), Duration(lat[len(lat)-1])
	res.BacklogLeft = leftAtLast
	var c checks
	c.expect("probes started", int64(len(lat)), int64(p.Probes))
	if leftAtLast <= 0 {
		c.expect("backlog left at the last probe (more than 0)", leftAtLast, 1)
	}
	return c.err("priority")
}
