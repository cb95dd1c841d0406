package bench

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/store"
)

// ThroughputParams are the parameters of the throughput workload.
type ThroughputParams struct {
	Settings
	// N is the number of no-op jobs burnt down.
	N int `json:"n"`
	// InsertBatch is the EnqueueMany batch of the pre-insert.
	InsertBatch int `json:"insert_batch"`
	// Record: every handler call recorded a result (Config.Record).
	Record bool `json:"record,omitempty"`
	// Limited and LimitKeys are Config's: jobs waiting on a concurrency
	// limit beside the no-op jobs.
	Limited   int `json:"limited,omitempty"`
	LimitKeys int `json:"limit_keys,omitempty"`
	// Tracing is Config.Tracing: how the client and worker traced.
	Tracing string `json:"tracing,omitempty"`
}

// ThroughputResult is what the throughput (burn-down) workload measured.
type ThroughputResult struct {
	Meta
	Params ThroughputParams `json:"params"`

	// Insert is the time the pre-insert of N jobs took.
	Insert     Duration `json:"insert_ms"`
	InsertRate float64  `json:"insert_jobs_per_s"`
	// Work is the time from the worker's start to the N-th handler call;
	// Rate is N over it.
	Work Duration `json:"work_ms"`
	Rate float64  `json:"jobs_per_s"`
	// Durable is the time from the worker's start until its shutdown
	// returned, every outcome written; DurableRate is N over it.
	Durable     Duration `json:"durable_ms"`
	DurableRate float64  `json:"durable_jobs_per_s"`
	// Handled counts handler calls (more than N only if a job ran twice).
	Handled int64 `json:"handled"`
	// StoreCompleted and StoreSucceeded are the store's count of completed
	// jobs and its succeeded counter at the end: both must equal N.
	StoreCompleted int64 `json:"store_completed"`
	StoreSucceeded int64 `json:"store_succeeded"`
}

// Info implements Result.
func (r *ThroughputResult) Info() *Meta { return &r.Meta }

// Parameters implements Result.
func (r *ThroughputResult) Parameters() []Figure {
	f := []Figure{{"jobs", strconv.Itoa(r.Params.N)}, {"insert batch", strconv.Itoa(r.Params.InsertBatch)}}
	if r.Params.Tracing != "" {
		f = append(f, Figure{"tracing", r.Params.Tracing})
	}
	if r.Params.Limited > 0 {
		f = append(f, Figure{"limited jobs", fmt.Sprintf("%d, %d keys, 5 per key (inserted first; their handlers hold their slots)", r.Params.Limited, r.Params.LimitKeys)})
	}
	return append(f, r.Params.figures()...)
}

// Figures implements Result.
func (r *ThroughputResult) Figures() []Figure {
	n := r.Params.N
	return []Figure{
		{"insert", fmt.Sprintf("%d jobs in %s = %s", n, r.Insert, fmtRate(r.InsertRate, "jobs"))},
		{"work (handlers)", fmt.Sprintf("%d jobs in %s = %s", n, r.Work, fmtRate(r.Rate, "jobs"))},
		{"work (durable)", fmt.Sprintf("%d jobs in %s = %s", n, r.Durable, fmtRate(r.DurableRate, "jobs"))},
		{"handler calls", strconv.FormatInt(r.Handled, 10)},
		{"store: completed", fmt.Sprintf("%d (succeeded counter %d)", r.StoreCompleted, r.StoreSucceeded)},
	}
}

// Throughput pre-inserts n no-op jobs with EnqueueMany in batches of
// Config.InsertBatch (default 1000),
// then starts a worker and times the burn-down until the n-th handler call
// (and until its shutdown has written every outcome). The store must count
// n completed jobs at the end, or the result comes with an ErrCheck error.
func Throughput(ctx context.Context, cfg Config, n int) (*ThroughputResult, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if n < 1 {
		return nil, fmt.Errorf("bench: throughput: the number of jobs must be at least 1, got %d", n)
	}
	if cfg.Record && cfg.Processes > 0 {
		return nil, fmt.Errorf("bench: throughput: Record runs in this process only, not with Processes")
	}
	if cfg.Limited > 0 && (cfg.Processes > 0 || cfg.LimitKeys < 1) {
		return nil, fmt.Errorf("bench: throughput: Limited needs LimitKeys >= 1 and runs in this process only")
	}
	r, err := newRig(ctx, cfg, "throughput")
	if err != nil {
		return nil, err
	}
	res := &ThroughputResult{Params: ThroughputParams{Settings: cfg.settings(), N: n, InsertBatch: cfg.InsertBatch, Record: cfg.Record,
		Limited: cfg.Limited, LimitKeys: cfg.LimitKeys, Tracing: cfg.Tracing}}
	return finish(r, res, &res.Meta, runThroughput(ctx, r, res))
}

func runThroughput(ctx context.Context, r *rig, res *ThroughputResult) error {
	if r.cfg.Processes > 0 {
		return runThroughputProcs(ctx, r, res)
	}
	n := res.Params.N
	if res.Params.Limited > 0 {
		if err := r.insertLimited(ctx, res.Params.Limited, res.Params.LimitKeys, res.Params.InsertBatch); err != nil {
			return err
		}
	}
	ins, err := r.insert(ctx, noopKind, n, res.Params.InsertBatch, 0, time.Time{})
	if err != nil {
		return err
	}
	res.Insert, res.InsertRate = Duration(ins), rate(int64(n), ins)

	done := newCounter(n)
	w := r.newWorker(nil)
	held := make(chan struct{})
	if res.Params.Limited > 0 {
		redrive.Handle(w, limitedKind, func(ctx context.Context, _ *redrive.Job, _ struct{}) error {
			// Holds its slot through the burn-down, then snoozes.
			select {
			case <-held:
			case <-ctx.Done():
			}
			return redrive.Snooze(time.Hour)
		})
	}
	record := r.cfg.Record
	redrive.Handle(w, noopKind, func(ctx context.Context, job *redrive.Job, args noopArgs) error {
		if record {
			redrive.Record(ctx, "http_200", "http status 200 OK: {\"ok\":true}")
		}
		done.inc()
		return nil
	})
	if r.cfg.WorkStarted != nil {
		r.cfg.WorkStarted()
	}
	t0 := time.Now()
	r.start()
	if err := done.wait(ctx, r.cfg.StallTimeout, "throughput"); err != nil {
		return err
	}
	work := time.Since(t0)
	close(held)
	if r.cfg.WorkDone != nil {
		r.cfg.WorkDone()
	}
	if err := r.stop(); err != nil {
		return fmt.Errorf("bench: throughput: worker: %w", err)
	}
	durable := time.Since(t0)
	res.Work, res.Rate = Duration(work), rate(int64(n), work)
	res.Durable, res.DurableRate = Duration(durable), rate(int64(n), durable)
	res.Handled = done.n.Load()
	return checkThroughput(ctx, r, res)
}

// runThroughputProcs is the throughput workload with its workers in
// separate processes: they are started and connected first, then the jobs
// are inserted, then the processes are told to go. The work time ends at
// the last handler call of any process (each reports the time of its
// own); the durable time when every process has shut down and exited.
func runThroughputProcs(ctx context.Context, r *rig, res *ThroughputResult) error {
	n := res.Params.N
	done := newCounter(n)
	counts := make([]int64, r.cfg.Processes) // index i written by process i's reader only
	lasts := make([]int64, r.cfg.Processes)
	ps, err := startProcs(ctx, r.cfg, r.workerProcess(ModeThroughput, 0), func(i int, f []string) {
		if len(f) != 3 || f[0] != "done" {
			return
		}
		c, err1 := strconv.ParseInt(f[1], 10, 64)
		last, err2 := strconv.ParseInt(f[2], 10, 64)
		if err1 != nil || err2 != nil || c <= counts[i] {
			return
		}
		d := c - counts[i]
		counts[i], lasts[i] = c, last
		done.add(d)
	})
	if err != nil {
		return err
	}
	defer ps.kill()
	ins, err := r.insert(ctx, noopKind, n, res.Params.InsertBatch, 0, time.Time{})
	if err != nil {
		return err
	}
	res.Insert, res.InsertRate = Duration(ins), rate(int64(n), ins)
	if r.cfg.WorkStarted != nil {
		r.cfg.WorkStarted()
	}
	t0 := time.Now()
	if err := ps.start(); err != nil {
		return err
	}
	if err := done.wait(ctx, r.cfg.StallTimeout, "throughput"); err != nil {
		return err
	}
	if r.cfg.WorkDone != nil {
		r.cfg.WorkDone()
	}
	if err := ps.stop(); err != nil {
		return err
	}
	durable := time.Since(t0)
	var last int64
	for _, l := range lasts {
		last = max(last, l)
	}
	work := time.Unix(0, last).Sub(t0.Round(0))
	res.Work, res.Rate = Duration(work), rate(int64(n), work)
	res.Durable, res.DurableRate = Duration(durable), rate(int64(n), durable)
	res.Handled = done.n.Load()
	return checkThroughput(ctx, r, res)
}

// checkThroughput reads the store's counts and checks them.
func checkThroughput(ctx context.Context, r *rig, res *ThroughputResult) error {
	n := res.Params.N
	jobs, counters, err := r.stats(ctx)
	if err != nil {
		return err
	}
	res.StoreCompleted, res.StoreSucceeded = jobs[redrive.Completed], counters[store.StatSucceeded]
	var c checks
	c.expect("store completed", res.StoreCompleted, int64(n))
	c.expect("succeeded counter", res.StoreSucceeded, int64(n))
	return c.err("throughput")
}

// limitedKind is the kind of the jobs under a concurrency limit that the
// throughput workload adds with Config.Limited.
const limitedKind = "bench-limited"

// insertLimited enqueues n jobs under a limit of 5 per key, keys keys.
func (r *rig) insertLimited(ctx context.Context, n, keys, batch int) error {
	if err := r.client.SetLimits([]redrive.ConcurrencyLimit{{Name: "bench", Kind: limitedKind, Key: "payload.k", Max: 5}}); err != nil {
		return fmt.Errorf("bench: limits: %w", err)
	}
	reqs := make([]redrive.Request, 0, min(batch, n))
	for i := 0; i < n; {
		reqs = reqs[:0]
		for ; i < n && len(reqs) < batch; i++ {
			reqs = append(reqs, redrive.Request{Kind: limitedKind, Payload: map[string]string{"k": "k" + strconv.Itoa(i%keys)}})
		}
		if _, err := r.client.EnqueueMany(ctx, reqs); err != nil {
			return fmt.Errorf("bench: insert limited: %w", err)
		}
	}
	return nil
}
