package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redrivehq/redrive"
)

// ContinuousParams are the parameters of the continuous workload.
type ContinuousParams struct {
	Settings
	// Producers goroutines enqueue EnqueueMany batches of Batch jobs.
	Producers int `json:"producers"`
	Batch     int `json:"batch"`
	// Rate caps the producers' total enqueue rate in jobs/s; 0 means as
	// fast as they can.
	Rate float64 `json:"rate"`
	// Duration is the whole run; the first Warmup of it is left out of the
	// steady-state rates.
	Duration Duration `json:"duration_ms"`
	Warmup   Duration `json:"warmup_ms"`
}

// ContinuousResult is what the continuous workload measured.
type ContinuousResult struct {
	Meta
	Params ContinuousParams `json:"params"`

	// Steady is the measured window: from the end of the warm-up to the
	// end of the run.
	Steady Duration `json:"steady_ms"`
	// SteadyEnqueued and SteadyCompleted count the jobs enqueued and
	// completed (handler calls) in the window; the rates are over it.
	SteadyEnqueued  int64   `json:"steady_enqueued"`
	SteadyCompleted int64   `json:"steady_completed"`
	EnqueueRate     float64 `json:"enqueue_jobs_per_s"`
	Rate            float64 `json:"jobs_per_s"`
	// Enqueued and Completed are the totals of the whole run.
	Enqueued  int64 `json:"enqueued"`
	Completed int64 `json:"completed"`
	// Backlog is the store's count of jobs not completed (pending,
	// scheduled, running) once producers and worker have stopped at the
	// end of the run.
	Backlog        int64 `json:"backlog"`
	StoreCompleted int64 `json:"store_completed"`
}

// Info implements Result.
func (r *ContinuousResult) Info() *Meta { return &r.Meta }

// Parameters implements Result.
func (r *ContinuousResult) Parameters() []Figure {
	p := r.Params
	rt := "unbounded"
	if p.Rate > 0 {
		rt = fmtRate(p.Rate, "jobs")
	}
	return append([]Figure{
		{"producers", fmt.Sprintf("%d x EnqueueMany(%d), rate %s", p.Producers, p.Batch, rt)},
		{"duration", fmt.Sprintf("%s (first %s is warm-up)", p.Duration, p.Warmup)},
	}, p.figures()...)
}

// Figures implements Result.
func (r *ContinuousResult) Figures() []Figure {
	return []Figure{
		{"steady enqueue", fmt.Sprintf("%d jobs in %s = %s", r.SteadyEnqueued, r.Steady, fmtRate(r.EnqueueRate, "jobs"))},
		{"steady completed", fmt.Sprintf("%d jobs in %s = %s", r.SteadyCompleted, r.Steady, fmtRate(r.Rate, "jobs"))},
		{"total", fmt.Sprintf("%d enqueued, %d completed", r.Enqueued, r.Completed)},
		{"backlog at end", fmt.Sprintf("%d jobs (store: %d completed)", r.Backlog, r.StoreCompleted)},
	}
}

// Continuous runs producers that enqueue no-op jobs continuously while a
// worker burns them down, for duration. It reports the completed and
// enqueued jobs per second in steady state (after warmup) and the backlog
// left at the end. The store must account for every job enqueued.
func Continuous(ctx context.Context, cfg Config, p ContinuousParams) (*ContinuousResult, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	switch {
	case p.Producers < 1:
		return nil, fmt.Errorf("bench: continuous: producers must be at least 1, got %d", p.Producers)
	case p.Batch < 1 || p.Batch > redrive.MaxBatch:
		return nil, fmt.Errorf("bench: continuous: batch must be between 1 and %d, got %d", redrive.MaxBatch, p.Batch)
	case p.Rate < 0:
		return nil, fmt.Errorf("bench: continuous: rate must not be negative, got %v", p.Rate)
	case p.Warmup < 0:
		return nil, fmt.Errorf("bench: continuous: warm-up must not be negative, got %s", p.Warmup)
	case p.Duration <= p.Warmup:
		return nil, fmt.Errorf("bench: continuous: duration (%s) must be longer than the warm-up (%s)", p.Duration, p.Warmup)
	}
	p.Settings = cfg.settings()
	r, err := newRig(ctx, cfg, "continuous")
	if err != nil {
		return nil, err
	}
	res := &ContinuousResult{Params: p}
	return finish(r, res, &res.Meta, runContinuous(ctx, r, res))
}

func runContinuous(ctx context.Context, r *rig, res *ContinuousResult) error {
	p := res.Params
	var completed, enqueued atomic.Int64
	w := r.newWorker(nil)
	redrive.Handle(w, noopKind, func(ctx context.Context, job *redrive.Job, args noopArgs) error {
		completed.Add(1)
		return nil
	})

	pctx, stopProducers := context.WithCancel(ctx)
	defer stopProducers()
	var producers sync.WaitGroup
	errs := make(chan error, p.Producers)
	var every time.Duration // per producer, between two batches
	if p.Rate > 0 {
		every = time.Duration(float64(time.Second) * float64(p.Batch) * float64(p.Producers) / p.Rate)
	}
	r.start()
	t0 := time.Now()
	for k := range p.Producers {
		producers.Go(func() {
			reqs := make([]redrive.Request, p.Batch)
			next := time.Now()
			for seq := 0; pctx.Err() == nil; {
				for i := range reqs {
					reqs[i] = redrive.Request{Kind: noopKind, Payload: noopArgs{N: k<<32 | seq}}
					seq++
				}
				// The parent context, not pctx: stopping the producers must
				// not cancel a batch midway, or the count would be off.
				if _, err := r.client.EnqueueMany(ctx, reqs); err != nil {
					if ctx.Err() == nil {
						errs <- fmt.Errorf("bench: continuous: enqueue: %w", err)
						stopProducers()
					}
					return
				}
				enqueued.Add(int64(p.Batch))
				if every > 0 {
					next = next.Add(every)
					select {
					case <-time.After(time.Until(next)):
					case <-pctx.Done():
					}
				}
			}
		})
	}

	var warmEnq, warmDone int64
	var tWarm time.Time
	sleep := func(until time.Time) bool {
		select {
		case <-time.After(time.Until(until)):
			return true
		case <-pctx.Done():
			return false
		}
	}
	if sleep(t0.Add(time.Duration(p.Warmup))) {
		tWarm, warmEnq, warmDone = time.Now(), enqueued.Load(), completed.Load()
		if sleep(t0.Add(time.Duration(p.Duration))) {
			tEnd, endEnq, endDone := time.Now(), enqueued.Load(), completed.Load()
			steady := tEnd.Sub(tWarm)
			res.Steady = Duration(steady)
			res.SteadyEnqueued, res.SteadyCompleted = endEnq-warmEnq, endDone-warmDone
			res.EnqueueRate, res.Rate = rate(res.SteadyEnqueued, steady), rate(res.SteadyCompleted, steady)
		}
	}
	stopProducers()
	producers.Wait()
	if err := r.stop(); err != nil {
		return fmt.Errorf("bench: continuous: worker: %w", err)
	}
	select {
	case err := <-errs:
		return err
	default:
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	res.Enqueued, res.Completed = enqueued.Load(), completed.Load()

	jobs, _, err := r.stats(ctx)
	if err != nil {
		return err
	}
	res.StoreCompleted = jobs[redrive.Completed]
	res.Backlog = jobs[redrive.Pending] + jobs[redrive.Scheduled] + jobs[redrive.Running]
	var c checks
	c.expect("store completed + backlog", res.StoreCompleted+res.Backlog, res.Enqueued)
	c.expect("store completed", res.StoreCompleted, res.Completed)
	return c.err("continuous")
}
