package bench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/retry"
	"github.com/redrivehq/redrive/store"
)

// failuresPerJob is how many attempts of each job of the failure workload
// fail before one succeeds.
const failuresPerJob = 2

// FailureParams are the parameters of the failure workload.
type FailureParams struct {
	Settings
	N int `json:"n"`
	// FailuresPerJob attempts fail before the job succeeds.
	FailuresPerJob int `json:"failures_per_job"`
	InsertBatch    int `json:"insert_batch"`
	// The retry policy: Initial, doubling, no jitter.
	RetryInitial Duration `json:"retry_initial_ms"`
	MaxRetries   int      `json:"max_retries"`
	Jitter       string   `json:"jitter"`
}

// FailureResult is what the failure workload measured.
type FailureResult struct {
	Meta
	Params FailureParams `json:"params"`

	Insert     Duration `json:"insert_ms"`
	InsertRate float64  `json:"insert_jobs_per_s"`
	// Work is the time from the worker's start to the N-th completion.
	Work Duration `json:"work_ms"`
	// Rate is completed jobs per second; AttemptRate is handler calls
	// (failed and successful) per second, over Work.
	Rate        float64 `json:"jobs_per_s"`
	AttemptRate float64 `json:"attempts_per_s"`
	// Attempts counts handler calls; Completed the successful ones.
	Attempts  int64 `json:"attempts"`
	Completed int64 `json:"completed"`
	// The store's counts at the end.
	StoreCompleted           int64 `json:"store_completed"`
	StoreAttempts            int64 `json:"store_attempts"`
	StoreSucceeded           int64 `json:"store_succeeded"`
	StoreSucceededAfterRetry int64 `json:"store_succeeded_after_retry"`
	StoreRetried             int64 `json:"store_retried"`
	StoreDead                int64 `json:"store_dead"`
}

// Info implements Result.
func (r *FailureResult) Info() *Meta { return &r.Meta }

// Parameters implements Result.
func (r *FailureResult) Parameters() []Figure {
	p := r.Params
	return append([]Figure{
		{"jobs", strconv.Itoa(p.N)},
		{"failures per job", strconv.Itoa(p.FailuresPerJob)},
		{"retry policy", fmt.Sprintf("initial %s, x2, jitter %s, %d retries", p.RetryInitial, p.Jitter, p.MaxRetries)},
		{"insert batch", strconv.Itoa(p.InsertBatch)},
	}, p.figures()...)
}

// Figures implements Result.
func (r *FailureResult) Figures() []Figure {
	return []Figure{
		{"insert", fmt.Sprintf("%d jobs in %s = %s", r.Params.N, r.Insert, fmtRate(r.InsertRate, "jobs"))},
		{"work", fmt.Sprintf("%d jobs, %d attempts in %s", r.Completed, r.Attempts, r.Work)},
		{"completed rate", fmtRate(r.Rate, "jobs")},
		{"attempt rate", fmtRate(r.AttemptRate, "attempts")},
		{"store: completed", strconv.FormatInt(r.StoreCompleted, 10)},
		{"store: attempts", strconv.FormatInt(r.StoreAttempts, 10)},
		{"store: succeeded", strconv.FormatInt(r.StoreSucceeded, 10)},
		{"store: succeeded_after_retry", strconv.FormatInt(r.StoreSucceededAfterRetry, 10)},
		{"store: retried", strconv.FormatInt(r.StoreRetried, 10)},
		{"store: dead", strconv.FormatInt(r.StoreDead, 10)},
	}
}

// errPlanned is the failure the failure and lateness workloads return.
var errPlanned = errors.New("bench: planned failure")

// Failure pre-inserts n jobs that each fail twice (a transient error on
// attempts 1 and 2) then succeed, under a policy of 1ms initial delay
// without jitter, so that the figures measure the engine's overhead per
// failure rather than waiting. It checks the store's counters:
// succeeded_after_retry == n and retried == 2n.
func Failure(ctx context.Context, cfg Config, n int) (*FailureResult, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if n < 1 {
		return nil, fmt.Errorf("bench: failure: the number of jobs must be at least 1, got %d", n)
	}
	r, err := newRig(ctx, cfg, "failure")
	if err != nil {
		return nil, err
	}
	p := retry.DefaultPolicy()
	p.Initial = time.Millisecond
	p.Jitter = retry.JitterNone
	p.MaxRetries = failuresPerJob
	res := &FailureResult{Params: FailureParams{Settings: cfg.settings(), N: n, FailuresPerJob: failuresPerJob,
		InsertBatch: insertBatch, RetryInitial: Duration(p.Initial), MaxRetries: p.MaxRetries, Jitter: p.Jitter.String()}}
	return finish(r, res, &res.Meta, runFailure(ctx, r, res, p))
}

func runFailure(ctx context.Context, r *rig, res *FailureResult, p retry.Policy) error {
	n := res.Params.N
	ins, err := r.insert(ctx, failKind, n, insertBatch, 0, time.Time{})
	if err != nil {
		return err
	}
	res.Insert, res.InsertRate = Duration(ins), rate(int64(n), ins)

	done := newCounter(n)
	var attempts atomic.Int64
	w := r.newWorker(&p)
	redrive.Handle(w, failKind, func(ctx context.Context, job *redrive.Job, args noopArgs) error {
		attempts.Add(1)
		if job.Attempt <= failuresPerJob {
			return redrive.Transient(errPlanned)
		}
		done.inc()
		return nil
	})
	t0 := time.Now()
	r.start()
	if err := done.wait(ctx, r.cfg.StallTimeout, "failure"); err != nil {
		return err
	}
	work := time.Since(t0)
	res.Attempts, res.Completed = attempts.Load(), done.n.Load()
	if err := r.stop(); err != nil {
		return fmt.Errorf("bench: failure: worker: %w", err)
	}
	res.Work, res.Rate, res.AttemptRate = Duration(work), rate(int64(n), work), rate(res.Attempts, work)

	jobs, counters, err := r.stats(ctx)
	if err != nil {
		return err
	}
	res.StoreCompleted = jobs[redrive.Completed]
	res.StoreAttempts = counters[store.StatAttempts]
	res.StoreSucceeded = counters[store.StatSucceeded]
	res.StoreSucceededAfterRetry = counters[store.StatSucceededAfterRetry]
	res.StoreRetried = counters[store.StatRetried]
	res.StoreDead = jobs[redrive.Dead]
	var c checks
	c.expect("store completed", res.StoreCompleted, int64(n))
	c.expect("succeeded_after_retry", res.StoreSucceededAfterRetry, int64(n))
	c.expect("retried", res.StoreRetried, int64(failuresPerJob*n))
	c.expect("attempts counter", res.StoreAttempts, int64((failuresPerJob+1)*n))
	c.expect("dead jobs", res.StoreDead, 0)
	return c.err("failure")
}
