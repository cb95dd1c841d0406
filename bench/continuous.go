package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/retry"
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
	// MinCompleted, when above 0, makes the measured window last past
	// Duration until at least that many jobs completed in it and, with
	// retry probes, until a retry due within it has run: a loaded machine
	// then still measures a rate and a lateness instead of an empty
	// window. 0: the window ends at Duration, whatever it saw.
	MinCompleted int64 `json:"min_completed,omitempty"`
	// RetryEvery makes one job in RetryEvery of the producers' a probe
	// (0: none): it goes to the queue RetryQueue, fails its first attempt
	// and is retried once after RetryDelay (exactly: no jitter); the
	// workload measures how late the retry started. The probes have a
	// queue of their own (served by the same worker, RetryWorkers
	// handlers) so that the figure is the engine's lateness under the
	// flood, not the wait of a retry behind the flooded queue's backlog,
	// which is first in, first out by due time.
	RetryEvery   int      `json:"retry_every"`
	RetryDelay   Duration `json:"retry_delay_ms"`
	RetryWorkers int      `json:"retry_workers"`
	// BurnDown, when above 0, first runs the throughput workload (a
	// burn-down of BurnDown pre-inserted jobs) with the same settings on a
	// fresh database, and reports the flood's completed rate against its
	// rate.
	BurnDown int `json:"burn_down"`
}

// RetryQueue is the queue of the continuous workload's retry probes.
const RetryQueue = "bench.retry"

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

	// RetryLateness is, on each retry of a probe whose due time fell in
	// the measured window, the time its handler started minus its due
	// time (RunAt as fetched); RetrySinceFailure is the start minus (the
	// first attempt's failure + RetryDelay).
	RetryLateness     Percentiles `json:"retry_lateness"`
	RetrySinceFailure Percentiles `json:"retry_lateness_since_failure"`
	// Probes counts the probes enqueued, ProbesDone those whose retry
	// succeeded, StoreProbesCompleted the store's count of them.
	Probes               int64 `json:"probes,omitempty"`
	ProbesDone           int64 `json:"probes_done,omitempty"`
	StoreProbesCompleted int64 `json:"store_probes_completed,omitempty"`
	// BurnDownRate is the throughput workload's rate (handlers) with the
	// same settings, run just before; RatioToBurnDown is Rate over it.
	BurnDownRate    float64 `json:"burn_down_jobs_per_s,omitempty"`
	RatioToBurnDown float64 `json:"ratio_to_burn_down,omitempty"`
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
	f := []Figure{
		{"producers", fmt.Sprintf("%d x EnqueueMany(%d), rate %s", p.Producers, p.Batch, rt)},
		{"duration", fmt.Sprintf("%s (first %s is warm-up)", p.Duration, p.Warmup)},
	}
	if p.RetryEvery > 0 {
		f = append(f, Figure{"retry probes", fmt.Sprintf("1 job in %d, queue %s (%d handlers), fails once, retried after %s",
			p.RetryEvery, RetryQueue, p.RetryWorkers, p.RetryDelay)})
	}
	if p.BurnDown > 0 {
		f = append(f, Figure{"burn-down first", fmt.Sprintf("%d jobs, same settings, fresh database", p.BurnDown)})
	}
	return append(f, p.figures()...)
}

// Figures implements Result.
func (r *ContinuousResult) Figures() []Figure {
	f := []Figure{
		{"steady enqueue", fmt.Sprintf("%d jobs in %s = %s", r.SteadyEnqueued, r.Steady, fmtRate(r.EnqueueRate, "jobs"))},
		{"steady completed", fmt.Sprintf("%d jobs in %s = %s", r.SteadyCompleted, r.Steady, fmtRate(r.Rate, "jobs"))},
	}
	if r.BurnDownRate > 0 {
		f = append(f, Figure{"burn-down (same run)", fmt.Sprintf("%s; completed under the flood = %.2fx of it",
			fmtRate(r.BurnDownRate, "jobs"), r.RatioToBurnDown)})
	}
	if r.Params.RetryEvery > 0 {
		f = append(f, Figure{"retry lateness vs due", r.RetryLateness.String()},
			Figure{"retry lateness vs failure+delay", r.RetrySinceFailure.String()},
			Figure{"retry probes", fmt.Sprintf("%d enqueued, %d retried and completed (store: %d completed)",
				r.Probes, r.ProbesDone, r.StoreProbesCompleted)})
	}
	return append(f,
		Figure{"total", fmt.Sprintf("%d enqueued, %d completed", r.Enqueued, r.Completed)},
		Figure{"backlog at end", fmt.Sprintf("%d jobs (store: %d completed)", r.Backlog, r.StoreCompleted)},
	)
}

// Continuous runs producers that enqueue no-op jobs continuously while a
// worker burns them down, for duration. It reports the completed and
// enqueued jobs per second in steady state (after warmup) and the backlog
// left at the end. The store must account for every job enqueued. With
// RetryEvery, a share of the jobs are retry probes (see
// ContinuousParams) and it reports how late their retries started; with
// BurnDown, it first measures the burn-down rate with the same settings
// and reports the completed rate against it.
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
	case p.MinCompleted < 0:
		return nil, fmt.Errorf("bench: continuous: min-completed must not be negative, got %d", p.MinCompleted)
	case p.Duration <= p.Warmup:
		return nil, fmt.Errorf("bench: continuous: duration (%s) must be longer than the warm-up (%s)", p.Duration, p.Warmup)
	case p.RetryEvery < 0:
		return nil, fmt.Errorf("bench: continuous: retry every must not be negative, got %d", p.RetryEvery)
	case p.RetryEvery > 0 && p.RetryDelay <= 0:
		return nil, fmt.Errorf("bench: continuous: the retry delay must be positive, got %s", p.RetryDelay)
	case p.RetryWorkers < 0:
		return nil, fmt.Errorf("bench: continuous: retry workers must not be negative, got %d", p.RetryWorkers)
	case p.BurnDown < 0:
		return nil, fmt.Errorf("bench: continuous: burn-down must not be negative, got %d", p.BurnDown)
	case cfg.Processes > 0:
		return nil, errors.New("bench: continuous: worker processes are not supported")
	}
	if p.RetryEvery > 0 && p.RetryWorkers == 0 {
		p.RetryWorkers = DefaultRetryWorkers
	}
	p.Settings = cfg.settings()
	var burn *ThroughputResult
	if p.BurnDown > 0 {
		if burn, err = Throughput(ctx, cfg, p.BurnDown); err != nil {
			return nil, fmt.Errorf("bench: continuous: burn-down: %w", err)
		}
	}
	r, err := newRig(ctx, cfg, "continuous")
	if err != nil {
		return nil, err
	}
	res := &ContinuousResult{Params: p}
	if burn != nil {
		res.BurnDownRate = burn.Rate
	}
	return finish(r, res, &res.Meta, runContinuous(ctx, r, res))
}

func runContinuous(ctx context.Context, r *rig, res *ContinuousResult) error {
	p := res.Params
	delay := time.Duration(p.RetryDelay)
	var completed, enqueued, probes atomic.Int64
	var pol *retry.Policy
	queues := map[string]int{redrive.DefaultQueue: r.cfg.Workers}
	if p.RetryEvery > 0 {
		lp := latenessPolicy(delay)
		pol = &lp
		queues[RetryQueue] = p.RetryWorkers
	}
	w := r.newWorkerQueues(pol, queues)
	redrive.Handle(w, noopKind, func(ctx context.Context, job *redrive.Job, args noopArgs) error {
		completed.Add(1)
		return nil
	})
	// Retry probes: a sample is kept for each retry due within the
	// measured window, however late it runs (chosen by its due time, not
	// by when it ran: the latest ones are what the figure is for).
	var mu sync.Mutex
	failedAt := map[int64]time.Time{}
	var samples []retrySample
	var probesDone atomic.Int64
	redrive.Handle(w, failKind, func(ctx context.Context, job *redrive.Job, args noopArgs) error {
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		if job.Attempt == 1 {
			failedAt[job.ID] = now
			return redrive.Transient(errPlanned)
		}
		probesDone.Add(1)
		s := retrySample{due: job.RunAt, late: now.Sub(job.RunAt)}
		if t, ok := failedAt[job.ID]; ok {
			s.since, s.sinceKnown = now.Sub(t)-delay, true
			delete(failedAt, job.ID)
		}
		samples = append(samples, s)
		return nil
	})

	pctx, stopProducers := context.WithCancel(ctx)
	defer stopProducers()
	r.start()
	t0 := time.Now()
	prod := startProducers(ctx, pctx, stopProducers, r, p.Producers, p.Batch, p.Rate, func(k, seq int, req *redrive.Request) {
		*req = redrive.Request{Kind: noopKind, Payload: noopArgs{N: k<<32 | seq}}
		if p.RetryEvery > 0 && seq%p.RetryEvery == p.RetryEvery-1 {
			req.Kind, req.Queue = failKind, RetryQueue
		}
	}, func(reqs []redrive.Request) {
		nProbes := 0
		for i := range reqs {
			if reqs[i].Kind == failKind {
				nProbes++
			}
		}
		enqueued.Add(int64(len(reqs) - nProbes))
		probes.Add(int64(nProbes))
	})

	var warmEnq, warmDone int64
	var tWarm, tEnd time.Time
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
		enough := func() bool {
			if completed.Load()-warmDone < p.MinCompleted {
				return false
			}
			if p.RetryEvery == 0 {
				return true
			}
			mu.Lock()
			defer mu.Unlock()
			for i := len(samples) - 1; i >= 0; i-- {
				if !samples[i].due.Before(tWarm) {
					return true
				}
			}
			return false
		}
		extend := func() bool {
			if p.MinCompleted <= 0 {
				return true
			}
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			for !enough() {
				select {
				case <-tick.C:
				case <-pctx.Done():
					return false
				}
			}
			return true
		}
		if sleep(t0.Add(time.Duration(p.Duration))) && extend() {
			var endEnq, endDone int64
			tEnd, endEnq, endDone = time.Now(), enqueued.Load(), completed.Load()
			steady := tEnd.Sub(tWarm)
			res.Steady = Duration(steady)
			res.SteadyEnqueued, res.SteadyCompleted = endEnq-warmEnq, endDone-warmDone
			res.EnqueueRate, res.Rate = rate(res.SteadyEnqueued, steady), rate(res.SteadyCompleted, steady)
		}
	}
	stopProducers()
	prodErr := prod.wait()
	// The retries due within the window run before the worker stops,
	// however late: a probe that failed before the window's end minus the
	// delay is due within it.
	if !tEnd.IsZero() && p.RetryEvery > 0 {
		wctx, cancel := context.WithTimeout(ctx, time.Minute+100*delay)
		err := waitRetries(wctx, &mu, failedAt, tEnd.Add(-delay))
		cancel()
		if err != nil {
			return err
		}
	}
	if err := r.stop(); err != nil {
		return fmt.Errorf("bench: continuous: worker: %w", err)
	}
	if prodErr != nil {
		return prodErr
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	res.Enqueued, res.Completed = enqueued.Load(), completed.Load()
	res.Probes, res.ProbesDone = probes.Load(), probesDone.Load()
	mu.Lock()
	var lateness, since []time.Duration
	for _, s := range samples {
		if !s.due.Before(tWarm) && s.due.Before(tEnd) {
			lateness = append(lateness, s.late)
			if s.sinceKnown {
				since = append(since, s.since)
			}
		}
	}
	mu.Unlock()
	res.RetryLateness, res.RetrySinceFailure = percentiles(lateness), percentiles(since)
	if res.BurnDownRate > 0 {
		res.RatioToBurnDown = res.Rate / res.BurnDownRate
	}

	st, err := r.client.Stats(ctx)
	if err != nil {
		return fmt.Errorf("bench: stats: %w", err)
	}
	jobs := st.Jobs[redrive.DefaultQueue]
	res.StoreCompleted = jobs[redrive.Completed]
	res.Backlog = jobs[redrive.Pending] + jobs[redrive.Scheduled] + jobs[redrive.Running]
	var c checks
	c.expect("store completed + backlog", res.StoreCompleted+res.Backlog, res.Enqueued)
	c.expect("store completed", res.StoreCompleted, res.Completed)
	if p.RetryEvery > 0 {
		pj := st.Jobs[RetryQueue]
		res.StoreProbesCompleted = pj[redrive.Completed]
		c.expect("store probes completed", res.StoreProbesCompleted, res.ProbesDone)
		c.expect("store probes", pj[redrive.Completed]+pj[redrive.Pending]+pj[redrive.Scheduled]+pj[redrive.Running], res.Probes)
	}
	return c.err("continuous")
}

// retrySample is one retry of a probe: when it was due, how late its
// handler started, and how late against its first failure + the delay.
type retrySample struct {
	due        time.Time
	late       time.Duration
	since      time.Duration
	sinceKnown bool
}

// waitRetries waits until no probe that failed before failedBefore waits
// for its retry (each retry removes its probe from failedAt), polling: a
// run's end, not a hot path.
func waitRetries(ctx context.Context, mu *sync.Mutex, failedAt map[int64]time.Time, failedBefore time.Time) error {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		mu.Lock()
		waiting := 0
		for _, t := range failedAt {
			if t.Before(failedBefore) {
				waiting++
			}
		}
		mu.Unlock()
		if waiting == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("bench: continuous: %d retries due in the window had not run: %w", waiting, ctx.Err())
		case <-tick.C:
		}
	}
}

// producers are the goroutines of startProducers.
type producers struct {
	wg   sync.WaitGroup
	errs chan error
}

// startProducers starts n goroutines that enqueue EnqueueMany batches of
// batch requests until pctx ends, at rate jobs/s in all (0: as fast as
// they can). fill sets the seq-th request of producer k; enqueued is
// called (concurrently) with each batch once it is enqueued. The batches
// are enqueued with ctx, not pctx: stopping the producers must not cancel
// a batch midway, or the counts would be off. A failed enqueue calls stop
// and is returned by wait.
func startProducers(ctx, pctx context.Context, stop context.CancelFunc, r *rig, n, batch int, rate float64,
	fill func(k, seq int, req *redrive.Request), enqueued func([]redrive.Request)) *producers {
	ps := &producers{errs: make(chan error, n)}
	var every time.Duration // per producer, between two batches
	if rate > 0 {
		every = time.Duration(float64(time.Second) * float64(batch) * float64(n) / rate)
	}
	for k := range n {
		ps.wg.Go(func() {
			reqs := make([]redrive.Request, batch)
			next := time.Now()
			for seq := 0; pctx.Err() == nil; {
				for i := range reqs {
					fill(k, seq, &reqs[i])
					seq++
				}
				if _, err := r.client.EnqueueMany(ctx, reqs); err != nil {
					if ctx.Err() == nil {
						ps.errs <- fmt.Errorf("bench: enqueue: %w", err)
						stop()
					}
					return
				}
				enqueued(reqs)
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
	return ps
}

// wait waits for the producers to return (their context must be ending)
// and returns the first enqueue error.
func (ps *producers) wait() error {
	ps.wg.Wait()
	select {
	case err := <-ps.errs:
		return err
	default:
		return nil
	}
}
