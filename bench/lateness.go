package bench

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/store"
)

// LatenessParams are the parameters of the lateness workload.
type LatenessParams struct {
	Settings
	N int `json:"n"`
	// RetryDelay is the policy's one retry delay (Initial, no jitter).
	RetryDelay Duration `json:"retry_delay_ms"`
	// Interval separates two enqueues: the jobs are enqueued one by one,
	// spread over N*Interval, while the worker runs (as the River anchor's
	// lateness mode does).
	Interval Duration `json:"interval_ms"`
}

// Percentiles summarise a set of durations. P50 and P99 are the elements
// at len/2 and len*99/100 of the sorted set, as the River anchor computes
// them.
type Percentiles struct {
	N    int      `json:"n"`
	Min  Duration `json:"min_ms"`
	P50  Duration `json:"p50_ms"`
	P99  Duration `json:"p99_ms"`
	Max  Duration `json:"max_ms"`
	Mean Duration `json:"mean_ms"`
}

func percentiles(ds []time.Duration) Percentiles {
	if len(ds) == 0 {
		return Percentiles{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	return Percentiles{N: len(s), Min: Duration(s[0]), P50: Duration(s[len(s)/2]), P99: Duration(s[len(s)*99/100]),
		Max: Duration(s[len(s)-1]), Mean: Duration(sum / time.Duration(len(s)))}
}

// String formats the percentiles on one line.
func (p Percentiles) String() string {
	return fmt.Sprintf("p50 %s  p99 %s  max %s  (min %s, mean %s, n=%d)", p.P50, p.P99, p.Max, p.Min, p.Mean, p.N)
}

// LatenessResult is what the lateness workload measured.
type LatenessResult struct {
	Meta
	Params LatenessParams `json:"params"`

	// Due is, on each retry (attempt 2), the time its handler started
	// minus the retry's due time (the job's RunAt as fetched).
	Due Percentiles `json:"lateness_vs_due"`
	// SinceFailure is, on each retry, the time its handler started minus
	// (the time the first attempt's handler returned its error + the
	// retry delay): the River anchor's measure. It includes the engine's
	// time between the handler's return and the scheduling of the retry.
	SinceFailure Percentiles `json:"lateness_since_failure"`
	// Pickup is, on each first attempt, the time its handler started
	// minus the job's creation (enqueue) time.
	Pickup Percentiles `json:"pickup"`
	// CrossProcess counts, with worker processes, the retries that ran in
	// another process than the job's failure.
	CrossProcess int64 `json:"cross_process,omitempty"`
	// SinceFailureCross and SinceFailureSame split SinceFailure, with
	// worker processes, between the retries that ran in another process
	// than the failure and those that ran in the same one.
	SinceFailureCross *Percentiles `json:"lateness_since_failure_cross_process,omitempty"`
	SinceFailureSame  *Percentiles `json:"lateness_since_failure_same_process,omitempty"`
	// Completed counts the retries that succeeded.
	Completed                int64 `json:"completed"`
	StoreCompleted           int64 `json:"store_completed"`
	StoreRetried             int64 `json:"store_retried"`
	StoreSucceededAfterRetry int64 `json:"store_succeeded_after_retry"`
}

// Info implements Result.
func (r *LatenessResult) Info() *Meta { return &r.Meta }

// Parameters implements Result.
func (r *LatenessResult) Parameters() []Figure {
	p := r.Params
	return append([]Figure{
		{"jobs", strconv.Itoa(p.N)},
		{"retry delay", fmt.Sprintf("%s (1 retry, no jitter)", p.RetryDelay)},
		{"enqueue", fmt.Sprintf("one by one, every %s, worker running", p.Interval)},
	}, p.figures()...)
}

// Figures implements Result.
func (r *LatenessResult) Figures() []Figure {
	f := []Figure{
		{"lateness vs due time", r.Due.String()},
		{"lateness vs failure+delay", r.SinceFailure.String()},
		{"first pickup", r.Pickup.String()},
		{"completed", strconv.FormatInt(r.Completed, 10)},
	}
	if r.Params.Processes > 0 {
		f = append(f, Figure{"retries in another process", fmt.Sprintf("%d of %d", r.CrossProcess, r.Completed)})
		if r.SinceFailureCross != nil && r.SinceFailureSame != nil {
			f = append(f, Figure{"  lateness, other process", r.SinceFailureCross.String()},
				Figure{"  lateness, same process", r.SinceFailureSame.String()})
		}
	}
	return append(f, []Figure{
		{"store: completed", strconv.FormatInt(r.StoreCompleted, 10)},
		{"store: retried", strconv.FormatInt(r.StoreRetried, 10)},
		{"store: succeeded_after_retry", strconv.FormatInt(r.StoreSucceededAfterRetry, 10)},
	}...)
}

// Lateness measures how late retries start. With the worker running, it
// enqueues n jobs one by one, interval apart (as the River anchor does:
// 20ms, so 200 jobs are spread over 4s); each job fails its first attempt
// and is retried once after retryDelay (policy: Initial retryDelay, no
// jitter, 1 retry). On attempt 2 the handler records how late it started
// against the job's due time (RunAt as fetched) and against its first
// failure + retryDelay.
func Lateness(ctx context.Context, cfg Config, n int, retryDelay, interval time.Duration) (*LatenessResult, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	switch {
	case n < 1:
		return nil, fmt.Errorf("bench: lateness: the number of jobs must be at least 1, got %d", n)
	case retryDelay <= 0:
		return nil, fmt.Errorf("bench: lateness: the retry delay must be positive, got %s", retryDelay)
	case interval < 0:
		return nil, fmt.Errorf("bench: lateness: the enqueue interval must not be negative, got %s", interval)
	}
	r, err := newRig(ctx, cfg, "lateness")
	if err != nil {
		return nil, err
	}
	res := &LatenessResult{Params: LatenessParams{Settings: cfg.settings(), N: n, RetryDelay: Duration(retryDelay),
		Interval: Duration(interval)}}
	return finish(r, res, &res.Meta, runLateness(ctx, r, res))
}

func runLateness(ctx context.Context, r *rig, res *LatenessResult) error {
	if r.cfg.Processes > 0 {
		return runLatenessProcs(ctx, r, res)
	}
	n, delay := res.Params.N, time.Duration(res.Params.RetryDelay)
	p := latenessPolicy(delay)

	var mu sync.Mutex
	failedAt := make(map[int64]time.Time, n)
	var due, since, pickup []time.Duration
	done := newCounter(n)
	w := r.newWorker(&p)
	redrive.Handle(w, failKind, func(ctx context.Context, job *redrive.Job, args noopArgs) error {
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		if job.Attempt == 1 {
			pickup = append(pickup, now.Sub(job.CreatedAt))
			failedAt[job.ID] = time.Now()
			return redrive.Transient(errPlanned)
		}
		due = append(due, now.Sub(job.RunAt))
		if t, ok := failedAt[job.ID]; ok {
			since = append(since, now.Sub(t)-delay)
		}
		done.inc()
		return nil
	})
	r.start()
	if err := enqueueSpread(ctx, r, res.Params); err != nil {
		return err
	}
	if err := done.wait(ctx, r.cfg.StallTimeout+delay, "lateness"); err != nil {
		return err
	}
	if err := r.stop(); err != nil {
		return fmt.Errorf("bench: lateness: worker: %w", err)
	}
	mu.Lock()
	res.Due, res.SinceFailure, res.Pickup = percentiles(due), percentiles(since), percentiles(pickup)
	res.Completed = done.n.Load()
	mu.Unlock()
	return checkLateness(ctx, r, res)
}

// enqueueSpread enqueues the lateness workload's jobs one by one,
// interval apart.
func enqueueSpread(ctx context.Context, r *rig, p LatenessParams) error {
	for i := range p.N {
		if _, err := r.client.Enqueue(ctx, failKind, noopArgs{N: i}); err != nil {
			return fmt.Errorf("bench: lateness: enqueue: %w", err)
		}
		if interval := time.Duration(p.Interval); interval > 0 {
			select {
			case <-time.After(interval):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	return nil
}

// runLatenessProcs is the lateness workload with its workers in separate
// processes: this process enqueues; a job's retry may run in another
// process than its failure (woken by LISTEN/NOTIFY), so the lateness is
// computed here from the events every process reports, on the machine's
// one clock.
func runLatenessProcs(ctx context.Context, r *rig, res *LatenessResult) error {
	n, delay := res.Params.N, time.Duration(res.Params.RetryDelay)
	type retried struct {
		id, start int64
		proc      int
	}
	var mu sync.Mutex
	failedAt := make(map[int64]int64, n)
	failProc := make(map[int64]int, n)
	var retries []retried
	var due, pickup []time.Duration
	done := newCounter(n)
	ps, err := startProcs(ctx, r.cfg, r.workerProcess(ModeLateness, delay), func(i int, f []string) {
		v := make([]int64, len(f)-1)
		for k := range v {
			var err error
			if v[k], err = strconv.ParseInt(f[k+1], 10, 64); err != nil {
				return
			}
		}
		mu.Lock()
		defer mu.Unlock()
		switch {
		case f[0] == "pickup" && len(v) == 1:
			pickup = append(pickup, time.Duration(v[0]))
		case f[0] == "fail" && len(v) == 2:
			failedAt[v[0]], failProc[v[0]] = v[1], i
		case f[0] == "retry" && len(v) == 3:
			retries = append(retries, retried{id: v[0], start: v[1], proc: i})
			due = append(due, time.Duration(v[2]))
			done.inc()
		}
	})
	if err != nil {
		return err
	}
	defer ps.kill()
	if err := ps.start(); err != nil {
		return err
	}
	if err := enqueueSpread(ctx, r, res.Params); err != nil {
		return err
	}
	if err := done.wait(ctx, r.cfg.StallTimeout+delay, "lateness"); err != nil {
		return err
	}
	if err := ps.stop(); err != nil {
		return err
	}
	var since, cross, same []time.Duration
	for _, rt := range retries {
		if t, ok := failedAt[rt.id]; ok {
			l := time.Duration(rt.start-t) - delay
			since = append(since, l)
			if failProc[rt.id] != rt.proc {
				res.CrossProcess++
				cross = append(cross, l)
			} else {
				same = append(same, l)
			}
		}
	}
	res.Due, res.SinceFailure, res.Pickup = percentiles(due), percentiles(since), percentiles(pickup)
	pCross, pSame := percentiles(cross), percentiles(same)
	res.SinceFailureCross, res.SinceFailureSame = &pCross, &pSame
	res.Completed = done.n.Load()
	return checkLateness(ctx, r, res)
}

// checkLateness reads the store's counters and checks them.
func checkLateness(ctx context.Context, r *rig, res *LatenessResult) error {
	n := res.Params.N

	jobs, counters, err := r.stats(ctx)
	if err != nil {
		return err
	}
	res.StoreCompleted = jobs[redrive.Completed]
	res.StoreRetried = counters[store.StatRetried]
	res.StoreSucceededAfterRetry = counters[store.StatSucceededAfterRetry]
	var c checks
	c.expect("store completed", res.StoreCompleted, int64(n))
	c.expect("retried", res.StoreRetried, int64(n))
	c.expect("succeeded_after_retry", res.StoreSucceededAfterRetry, int64(n))
	c.expect("lateness samples vs failure", int64(res.SinceFailure.N), int64(n))
	return c.err("lateness")
}
