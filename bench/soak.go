package bench

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/retry"
	"github.com/redrivehq/redrive/store"
)

// Defaults of the soak workload, shared with the CLI's flags.
const (
	DefaultSoakDuration       = 30 * time.Minute
	DefaultSoakSample         = time.Minute
	DefaultSoakRateFraction   = 0.6
	DefaultSoakTransient      = 0.05
	DefaultSoakDead           = 0.005
	DefaultSoakPeriodic       = time.Second
	DefaultSoakCompleted      = time.Minute
	DefaultSoakDLQMaxAge      = 3 * time.Minute
	DefaultSoakKeyRetention   = 5 * time.Minute
	DefaultSoakCleanup        = 10 * time.Second
	DefaultSoakRatioGoal      = 0.95
	DefaultSoakLatenessGoal   = 5 * time.Millisecond
	DefaultSoakPlateauMargin  = 0.10
	soakKind                  = "bench.soak"
	soakTickKind              = "bench.soak.tick"
	soakTickSchedule          = "bench-soak-tick"
	soakTickWorkers           = 2
	soakPostgresJobsTableName = "jobs"
)

// SoakTickQueue is the queue of the soak workload's periodic job: a
// queue of its own, so that the default queue's counts are the
// producers' jobs only.
const SoakTickQueue = "bench.tick"

// SoakParams are the parameters of the soak workload.
type SoakParams struct {
	Settings
	// Producers goroutines enqueue EnqueueMany batches of Batch jobs at
	// Rate jobs/s in all.
	Producers int `json:"producers"`
	Batch     int `json:"batch"`
	// Rate is the producers' total rate in jobs/s. 0: RateFraction of the
	// burn-down rate of BurnDown jobs, measured first (throughput
	// workload, same settings, fresh database).
	Rate         float64 `json:"rate"`
	RateFraction float64 `json:"rate_fraction"`
	BurnDown     int     `json:"burn_down"`
	// Duration is the whole run; a row is recorded every Sample.
	Duration Duration `json:"duration_ms"`
	Sample   Duration `json:"sample_ms"`
	// Transient is the share of jobs that fail transiently on their first
	// two attempts and succeed on the third, Dead the share that fail
	// permanently (to the DLQ), each chosen by a hash of the job's
	// payload number; RetryDelay is the policy's constant retry delay (no
	// jitter).
	Transient  float64  `json:"transient"`
	Dead       float64  `json:"dead"`
	RetryDelay Duration `json:"retry_delay_ms"`
	// PeriodicEvery is the interval of a periodic schedule (a no-op job in
	// the queue SoakTickQueue).
	PeriodicEvery Duration `json:"periodic_every_ms"`
	// The worker's retention settings (WorkerOptions).
	CompletedRetention Duration `json:"completed_retention_ms"`
	DLQMaxAge          Duration `json:"dlq_max_age_ms"`
	KeyRetention       Duration `json:"key_retention_ms"`
	CleanupInterval    Duration `json:"cleanup_interval_ms"`
	// The goals: every row after the first completes at least RatioGoal
	// of what it enqueued; every row's retry lateness p99 is at most
	// LatenessGoal; the last third's largest RSS, database size (and on
	// PostgreSQL the jobs table's dead tuples and index size) are at most
	// PlateauMargin above the middle third's.
	RatioGoal     float64  `json:"ratio_goal"`
	LatenessGoal  Duration `json:"lateness_goal_ms"`
	PlateauMargin float64  `json:"plateau_margin"`
}

// WithDefaults returns the parameters with every zero field set to its
// default (Rate stays 0: measured).
func (p SoakParams) WithDefaults() SoakParams {
	def := func(d *Duration, v time.Duration) {
		if *d == 0 {
			*d = Duration(v)
		}
	}
	if p.Producers == 0 {
		p.Producers = DefaultProducers
	}
	if p.Batch == 0 {
		p.Batch = DefaultBatch
	}
	if p.RateFraction == 0 {
		p.RateFraction = DefaultSoakRateFraction
	}
	if p.BurnDown == 0 {
		p.BurnDown = DefaultBurnDown
	}
	def(&p.Duration, DefaultSoakDuration)
	def(&p.Sample, DefaultSoakSample)
	def(&p.RetryDelay, DefaultRetryDelay)
	def(&p.PeriodicEvery, DefaultSoakPeriodic)
	def(&p.CompletedRetention, DefaultSoakCompleted)
	def(&p.DLQMaxAge, DefaultSoakDLQMaxAge)
	def(&p.KeyRetention, DefaultSoakKeyRetention)
	def(&p.CleanupInterval, DefaultSoakCleanup)
	def(&p.LatenessGoal, DefaultSoakLatenessGoal)
	if p.RatioGoal == 0 {
		p.RatioGoal = DefaultSoakRatioGoal
	}
	if p.PlateauMargin == 0 {
		p.PlateauMargin = DefaultSoakPlateauMargin
	}
	return p
}

func (p SoakParams) validate() error {
	switch {
	case p.Producers < 1:
		return fmt.Errorf("bench: soak: producers must be at least 1, got %d", p.Producers)
	case p.Batch < 1 || p.Batch > redrive.MaxBatch:
		return fmt.Errorf("bench: soak: batch must be between 1 and %d, got %d", redrive.MaxBatch, p.Batch)
	case p.Rate < 0:
		return fmt.Errorf("bench: soak: rate must not be negative, got %v", p.Rate)
	case p.Rate == 0 && (p.RateFraction <= 0 || p.RateFraction > 1):
		return fmt.Errorf("bench: soak: rate fraction must be above 0 and at most 1, got %v", p.RateFraction)
	case p.Rate == 0 && p.BurnDown < 1:
		return fmt.Errorf("bench: soak: without a rate, the burn-down must be at least 1 job, got %d", p.BurnDown)
	case p.Sample <= 0 || p.Duration < p.Sample:
		return fmt.Errorf("bench: soak: the sample interval (%s) must be positive and at most the duration (%s)", p.Sample, p.Duration)
	case p.Transient < 0 || p.Dead < 0 || p.Transient+p.Dead > 1:
		return fmt.Errorf("bench: soak: the transient (%v) and dead (%v) shares must be between 0 and 1 together", p.Transient, p.Dead)
	case p.RetryDelay <= 0:
		return fmt.Errorf("bench: soak: the retry delay must be positive, got %s", p.RetryDelay)
	case p.PeriodicEvery < Duration(time.Second):
		return fmt.Errorf("bench: soak: the periodic interval must be at least 1s, got %s", p.PeriodicEvery)
	case p.CompletedRetention <= 0 || p.DLQMaxAge <= 0 || p.KeyRetention <= 0 || p.CleanupInterval <= 0:
		return errors.New("bench: soak: the retention settings must be positive")
	case p.RatioGoal <= 0 || p.LatenessGoal <= 0 || p.PlateauMargin <= 0:
		return errors.New("bench: soak: the goals must be positive")
	}
	return nil
}

// SoakSample is one row of the soak workload: what happened during one
// sample interval, and the state at its end. The counts are the
// producers' jobs (the periodic job's runs are Periodic).
type SoakSample struct {
	// At is the end of the interval, from the start of the run.
	At       Duration `json:"t_ms"`
	Interval Duration `json:"interval_ms"`
	// Enqueued counts the jobs the producers enqueued; Completed, Retried
	// and Dead are the store's counters (succeeded, retried, dead: written
	// durably, unaffected by retention). Handled counts the attempts that
	// succeeded as the worker's Observer was told of them, before their
	// outcome is written: it runs ahead of Completed when the writes lag.
	// Periodic counts the periodic job's successful runs (Observer).
	Enqueued  int64 `json:"enqueued"`
	Completed int64 `json:"completed"`
	Retried   int64 `json:"retried"`
	Dead      int64 `json:"dead"`
	Handled   int64 `json:"handled"`
	Periodic  int64 `json:"periodic"`
	// Ratio is Completed over Enqueued.
	Ratio float64 `json:"ratio"`
	// RetryLateness is the engine's lateness of the retries that started
	// in the interval (AttemptInfo.Lateness: start minus due time);
	// PeriodicLateness that of the periodic job's runs; Pickup that of the
	// producers' jobs' first attempts (their wait in the queue).
	RetryLateness    Percentiles `json:"retry_lateness"`
	PeriodicLateness Percentiles `json:"periodic_lateness"`
	Pickup           Percentiles `json:"pickup"`
	// RSS is the process's resident set at the end of the interval,
	// RSSMax the largest seen in it (sampled every 100 ms); GoHeap is the
	// Go heap in use (runtime.MemStats.HeapInuse).
	RSS    int64 `json:"rss_bytes"`
	RSSMax int64 `json:"rss_max_bytes"`
	GoHeap int64 `json:"go_heap_bytes"`
	// DBBytes is the database's size: SQLite's main file and WAL, or the
	// PostgreSQL schema's tables with their indexes and TOAST.
	DBBytes int64 `json:"db_bytes"`
	// Backlog is the store's count of the default queue's pending,
	// scheduled and running jobs; StoredCompleted and StoredDead its
	// completed and dead jobs not yet deleted by retention.
	Backlog         int64 `json:"backlog"`
	StoredCompleted int64 `json:"stored_completed"`
	StoredDead      int64 `json:"stored_dead"`
	// PG is, on PostgreSQL, the jobs table's statistics; Tables every
	// table's of the schema (in the CSV, not in the JSON summary).
	PG     *PGJobsSample   `json:"pg,omitempty"`
	Tables []PGTableSample `json:"-"`
}

// PGJobsSample is what pg_stat_user_tables says of the jobs table (and
// the schema's tables in all) at the end of a soak row.
type PGJobsSample struct {
	Live           int64 `json:"n_live_tup"`
	DeadTuples     int64 `json:"n_dead_tup"`
	TableBytes     int64 `json:"table_bytes"`
	IndexBytes     int64 `json:"index_bytes"`
	Autovacuum     int64 `json:"autovacuum_count"`
	Autoanalyze    int64 `json:"autoanalyze_count"`
	DeadTuplesAll  int64 `json:"n_dead_tup_all_tables"`
	AutovacuumAll  int64 `json:"autovacuum_count_all_tables"`
	IndexBytesAll  int64 `json:"index_bytes_all_tables"`
	LiveTuplesAll  int64 `json:"n_live_tup_all_tables"`
	AutoanalyzeAll int64 `json:"autoanalyze_count_all_tables"`
	TableBytesAll  int64 `json:"table_bytes_all_tables"`
	TablesSampled  int   `json:"tables"`

	// Analyze counts the jobs table's ANALYZE statements (the store's
	// own, analyze.go), apart from autovacuum's.
	Analyze int64 `json:"analyze_count"`
	// VacuumPhase is the phase of the vacuum of the jobs table running
	// at the end of the row (pg_stat_progress_vacuum), "" when none runs.
	VacuumPhase string `json:"vacuum_phase,omitempty"`
	// OldestXminAge is the age in transactions of the oldest snapshot or
	// transaction of the database's other sessions (pg_stat_activity's
	// backend_xmin and backend_xid): what a vacuum may not remove is
	// newer than it.
	OldestXminAge int64 `json:"oldest_xmin_age"`
}

// PGTableSample is one table's row of pg_stat_user_tables at the end of
// a soak row.
type PGTableSample struct {
	At          Duration `json:"t_ms"`
	Table       string   `json:"table"`
	Live        int64    `json:"n_live_tup"`
	DeadTuples  int64    `json:"n_dead_tup"`
	TableBytes  int64    `json:"table_bytes"`
	IndexBytes  int64    `json:"index_bytes"`
	Autovacuum  int64    `json:"autovacuum_count"`
	Autoanalyze int64    `json:"autoanalyze_count"`
	Analyze     int64    `json:"analyze_count"`
}

// SoakGoal is one goal's verdict.
type SoakGoal struct {
	Name string `json:"name"`
	// Status is PASS, FAIL or N/A (not enough rows to judge).
	Status string `json:"status"`
	Detail string `json:"detail"`
}

// SoakResult is what the soak workload measured.
type SoakResult struct {
	Meta
	Params SoakParams `json:"params"`
	// BurnDownRate is the burn-down measured first (0 when Rate was
	// given).
	BurnDownRate float64 `json:"burn_down_jobs_per_s,omitempty"`
	// Rows are the samples, in order.
	Rows  []SoakSample `json:"rows"`
	Goals []SoakGoal   `json:"goals"`
	// The totals of the run, and the store's count of the default
	// queue's jobs left (pending, scheduled, running) once the producers
	// and the worker stopped.
	Enqueued  int64 `json:"enqueued"`
	Completed int64 `json:"completed"`
	Retried   int64 `json:"retried"`
	Dead      int64 `json:"dead"`
	Periodic  int64 `json:"periodic"`
	Backlog   int64 `json:"backlog"`
	// StoreSucceeded, StoreRetried and StoreDead are the store's counters
	// of the default queue at the end: they must equal Completed, Retried
	// and Dead (the Observer's counts).
	StoreSucceeded int64 `json:"store_succeeded"`
	StoreRetried   int64 `json:"store_retried"`
	StoreDead      int64 `json:"store_dead"`
}

// Info implements Result.
func (r *SoakResult) Info() *Meta { return &r.Meta }

// Parameters implements Result.
func (r *SoakResult) Parameters() []Figure {
	p := r.Params
	rt := fmtRate(p.Rate, "jobs")
	if r.BurnDownRate > 0 {
		rt += fmt.Sprintf(" (%.2f of the burn-down of %d jobs, %s)", p.RateFraction, p.BurnDown, fmtRate(r.BurnDownRate, "jobs"))
	}
	f := []Figure{
		{"producers", fmt.Sprintf("%d x EnqueueMany(%d), %s", p.Producers, p.Batch, rt)},
		{"duration", fmt.Sprintf("%s, a row every %s", p.Duration, p.Sample)},
		{"failures", fmt.Sprintf("%.1f%% fail transiently twice (retry after %s, no jitter), %.1f%% die",
			100*p.Transient, p.RetryDelay, 100*p.Dead)},
		{"periodic", fmt.Sprintf("every %s, queue %s", p.PeriodicEvery, SoakTickQueue)},
		{"retention", fmt.Sprintf("completed %s, dead %s, keys %s, cleanup every %s (first after 1m)",
			p.CompletedRetention, p.DLQMaxAge, p.KeyRetention, p.CleanupInterval)},
	}
	return append(f, p.figures()...)
}

// Figures implements Result.
func (r *SoakResult) Figures() []Figure {
	f := []Figure{
		{"total", fmt.Sprintf("%d enqueued, %d completed, %d retries, %d dead, %d periodic runs; backlog at end %d",
			r.Enqueued, r.Completed, r.Retried, r.Dead, r.Periodic, r.Backlog)},
		{"store counters", fmt.Sprintf("succeeded %d, retried %d, dead %d", r.StoreSucceeded, r.StoreRetried, r.StoreDead)},
	}
	for _, g := range r.Goals {
		f = append(f, Figure{g.Status + " " + g.Name, g.Detail})
	}
	return f
}

// Failed reports whether a goal failed.
func (r *SoakResult) Failed() bool {
	for _, g := range r.Goals {
		if g.Status == "FAIL" {
			return true
		}
	}
	return false
}

// Soak runs the engine in steady state for a duration: producers at a
// fixed rate (a fraction of the burn-down rate measured first, unless
// given), a share of jobs failing transiently twice and a share dying,
// a periodic job, and retention with short settings, all at once. Every
// Sample it records a row (see SoakSample) and passes it to row (when not
// nil) as soon as it is taken, so that a long run's rows are kept however
// it ends; at the end it judges the goals (SoakParams). Every job the
// producers enqueued must be accounted for (completed, dead or left in the
// backlog), or the result comes with an ErrCheck error.
func Soak(ctx context.Context, cfg Config, p SoakParams, row func(SoakSample)) (*SoakResult, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	p = p.WithDefaults()
	if err := p.validate(); err != nil {
		return nil, err
	}
	if cfg.Processes > 0 {
		return nil, errors.New("bench: soak: worker processes are not supported")
	}
	p.Settings = cfg.settings()
	res := &SoakResult{}
	if p.Rate == 0 {
		burn, err := Throughput(ctx, cfg, p.BurnDown)
		if err != nil {
			return nil, fmt.Errorf("bench: soak: burn-down: %w", err)
		}
		res.BurnDownRate = burn.Rate
		p.Rate = p.RateFraction * burn.Rate
	}
	res.Params = p
	r, err := newRig(ctx, cfg, "soak")
	if err != nil {
		return nil, err
	}
	if row == nil {
		row = func(SoakSample) {}
	}
	err = runSoak(ctx, r, res, row)
	res.Goals = soakGoals(res.Params, res.Rows)
	return finish(r, res, &res.Meta, err)
}

// soakFate is what becomes of a soak job: 0 succeeds at once, 1 fails
// transiently on its first two attempts, 2 dies. It hashes the job's
// payload number (splitmix64), so the shares hold over any stretch of
// jobs and a job's fate is the same on every attempt.
func soakFate(n int, transient, dead float64) int {
	x := uint64(n) + 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	x ^= x >> 31
	u := float64(x>>11) / (1 << 53)
	switch {
	case u < transient:
		return 1
	case u < transient+dead:
		return 2
	}
	return 0
}

// soakObserver counts the outcomes of the soak's attempts and keeps the
// lateness of the retries and periodic runs since the last row.
type soakObserver struct {
	completed, retried, dead, periodic atomic.Int64

	mu                          sync.Mutex
	retryLate, tickLate, pickup []time.Duration
}

// ObserveAttempt implements redrive.Observer.
func (o *soakObserver) ObserveAttempt(a redrive.AttemptInfo) {
	switch a.Kind {
	case soakKind:
		switch a.Outcome {
		case redrive.OutcomeCompleted:
			o.completed.Add(1)
		case redrive.OutcomeRetry:
			o.retried.Add(1)
		case redrive.OutcomeDead:
			o.dead.Add(1)
		}
		o.mu.Lock()
		if a.Retry {
			o.retryLate = append(o.retryLate, a.Lateness)
		} else {
			o.pickup = append(o.pickup, a.Lateness)
		}
		o.mu.Unlock()
	case soakTickKind:
		if a.Outcome == redrive.OutcomeCompleted {
			o.periodic.Add(1)
		}
		o.mu.Lock()
		o.tickLate = append(o.tickLate, a.Lateness)
		o.mu.Unlock()
	}
}

// take returns the lateness kept since the last call and starts anew.
func (o *soakObserver) take() (retry, tick, pickup []time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	retry, tick, pickup = o.retryLate, o.tickLate, o.pickup
	o.retryLate, o.tickLate, o.pickup = nil, nil, nil
	return retry, tick, pickup
}

func runSoak(ctx context.Context, r *rig, res *SoakResult, row func(SoakSample)) error {
	p := res.Params
	delay := time.Duration(p.RetryDelay)
	pol := retry.DefaultPolicy()
	pol.MaxRetries = 2
	pol.Initial, pol.MaxDelay, pol.Multiplier = delay, delay, 1
	pol.Jitter = retry.JitterNone
	obs := &soakObserver{}
	w := r.newWorkerOpts(redrive.WorkerOptions{
		Queues:             map[string]int{redrive.DefaultQueue: r.cfg.Workers, SoakTickQueue: soakTickWorkers},
		Policy:             &pol,
		Observer:           obs,
		CompletedRetention: time.Duration(p.CompletedRetention),
		DLQMaxAge:          time.Duration(p.DLQMaxAge),
		KeyRetention:       time.Duration(p.KeyRetention),
		CleanupInterval:    time.Duration(p.CleanupInterval),
		Periodic: []redrive.Periodic{{Name: soakTickSchedule, Every: time.Duration(p.PeriodicEvery), Kind: soakTickKind,
			Payload: noopArgs{}, Options: []redrive.Option{redrive.InQueue(SoakTickQueue)}}},
	})
	redrive.Handle(w, soakKind, func(ctx context.Context, job *redrive.Job, args noopArgs) error {
		switch soakFate(args.N, p.Transient, p.Dead) {
		case 1:
			if job.Attempt <= 2 {
				return redrive.Transient(errPlanned)
			}
		case 2:
			return redrive.Permanent(errPlanned)
		}
		return nil
	})
	redrive.Handle(w, soakTickKind, func(ctx context.Context, job *redrive.Job, args noopArgs) error { return nil })

	var enqueued atomic.Int64
	pctx, stopProducers := context.WithCancel(ctx)
	defer stopProducers()
	rss := startRSS(rssSampleInterval)
	r.start()
	t0 := time.Now()
	prod := startProducers(ctx, pctx, stopProducers, r, p.Producers, p.Batch, p.Rate, func(k, seq int, req *redrive.Request) {
		*req = redrive.Request{Kind: soakKind, Payload: noopArgs{N: k<<32 | seq}}
	}, func(reqs []redrive.Request) { enqueued.Add(int64(len(reqs))) })

	var last struct {
		at                                          time.Duration
		enq, handled, periodic, done, retried, dead int64
	}
	sample := func(at time.Duration) error {
		s := SoakSample{At: Duration(at), Interval: Duration(at - last.at)}
		jobs, counters, err := r.stats(ctx)
		if err != nil {
			return err
		}
		enq, handled, per := enqueued.Load(), obs.completed.Load(), obs.periodic.Load()
		done, rt, dead := counters[store.StatSucceeded], counters[store.StatRetried], deadCount(counters)
		s.Enqueued, s.Handled, s.Periodic = enq-last.enq, handled-last.handled, per-last.periodic
		s.Completed, s.Retried, s.Dead = done-last.done, rt-last.retried, dead-last.dead
		last.at, last.enq, last.handled, last.periodic, last.done, last.retried, last.dead = at, enq, handled, per, done, rt, dead
		if s.Enqueued > 0 {
			s.Ratio = float64(s.Completed) / float64(s.Enqueued)
		}
		s.Backlog = jobs[redrive.Pending] + jobs[redrive.Scheduled] + jobs[redrive.Running]
		s.StoredCompleted, s.StoredDead = jobs[redrive.Completed], jobs[redrive.Dead]
		retryLate, tickLate, pickup := obs.take()
		s.RetryLateness, s.PeriodicLateness, s.Pickup = percentiles(retryLate), percentiles(tickLate), percentiles(pickup)
		s.RSSMax = rss.mark()
		if s.RSS, err = ReadRSS(); err != nil {
			return err
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		s.GoHeap = int64(ms.HeapInuse)
		if s.DBBytes, err = r.dbBytes(ctx); err != nil {
			return err
		}
		if r.pg != nil {
			tables, err := r.pgTables(ctx, s.At)
			if err != nil {
				return err
			}
			s.PG, s.Tables = pgJobsSample(tables), tables
			if s.PG.VacuumPhase, s.PG.OldestXminAge, err = r.pgVacuumState(ctx); err != nil {
				return err
			}
		}
		res.Rows = append(res.Rows, s)
		row(s)
		return nil
	}

	var runErr error
	end := t0.Add(time.Duration(p.Duration))
	for next := t0.Add(time.Duration(p.Sample)); runErr == nil; next = next.Add(time.Duration(p.Sample)) {
		if next.After(end) {
			next = end
		}
		select {
		case <-time.After(time.Until(next)):
		case <-pctx.Done():
		}
		if pctx.Err() != nil {
			break
		}
		runErr = sample(time.Since(t0))
		if !next.Before(end) {
			break
		}
	}
	stopProducers()
	prodErr := prod.wait()
	werr := r.stop()
	rss.finish()
	switch {
	case prodErr != nil:
		return prodErr
	case runErr != nil:
		return fmt.Errorf("bench: soak: sample: %w", runErr)
	case werr != nil:
		return fmt.Errorf("bench: soak: worker: %w", werr)
	case ctx.Err() != nil:
		return ctx.Err()
	}
	res.Enqueued, res.Completed, res.Retried = enqueued.Load(), obs.completed.Load(), obs.retried.Load()
	res.Dead, res.Periodic = obs.dead.Load(), obs.periodic.Load()
	jobs, counters, err := r.stats(ctx)
	if err != nil {
		return err
	}
	res.Backlog = jobs[redrive.Pending] + jobs[redrive.Scheduled] + jobs[redrive.Running]
	res.StoreSucceeded, res.StoreRetried = counters[store.StatSucceeded], counters[store.StatRetried]
	res.StoreDead = deadCount(counters)
	var c checks
	c.expect("completed + dead + backlog", res.Completed+res.Dead+res.Backlog, res.Enqueued)
	c.expect("store succeeded", res.StoreSucceeded, res.Completed)
	c.expect("store retried", res.StoreRetried, res.Retried)
	c.expect("store dead", res.StoreDead, res.Dead)
	return c.err("soak")
}

// deadCount sums a queue's dead counters (one per failure class).
func deadCount(counters map[string]int64) int64 {
	var n int64
	for name, v := range counters {
		if name == store.StatDead || strings.HasPrefix(name, store.StatDead+".") {
			n += v
		}
	}
	return n
}

// pgTables reads pg_stat_user_tables for the schema's tables.
func (r *rig) pgTables(ctx context.Context, at Duration) ([]PGTableSample, error) {
	rows, err := r.pg.Pool().Query(ctx, `SELECT relname, n_live_tup, n_dead_tup, pg_table_size(relid),
		pg_indexes_size(relid), autovacuum_count, autoanalyze_count, analyze_count
		FROM pg_stat_user_tables WHERE schemaname = $1 ORDER BY relname`, r.pg.Schema())
	if err != nil {
		return nil, fmt.Errorf("bench: read pg_stat_user_tables: %w", err)
	}
	defer rows.Close()
	var out []PGTableSample
	for rows.Next() {
		t := PGTableSample{At: at}
		if err := rows.Scan(&t.Table, &t.Live, &t.DeadTuples, &t.TableBytes, &t.IndexBytes, &t.Autovacuum, &t.Autoanalyze, &t.Analyze); err != nil {
			return nil, fmt.Errorf("bench: read pg_stat_user_tables: %w", err)
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("bench: read pg_stat_user_tables: %w", err)
	}
	return out, nil
}

// pgVacuumState reads the phase of the vacuum of the jobs table running
// (pg_stat_progress_vacuum; "" when none runs) and the age of the
// database's oldest snapshot or transaction other than this session's.
func (r *rig) pgVacuumState(ctx context.Context) (phase string, xminAge int64, err error) {
	err = r.pg.Pool().QueryRow(ctx, `SELECT
		coalesce((SELECT phase FROM pg_stat_progress_vacuum WHERE relid = to_regclass(quote_ident($1) || '.jobs')), ''),
		coalesce((SELECT max(greatest(age(backend_xmin), age(backend_xid))) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid()), 0)`, r.pg.Schema()).Scan(&phase, &xminAge)
	if err != nil {
		return "", 0, fmt.Errorf("bench: read the jobs table's vacuum: %w", err)
	}
	return phase, xminAge, nil
}

// pgJobsSample sums up one row's tables: the jobs table's own figures and
// the totals of all.
func pgJobsSample(tables []PGTableSample) *PGJobsSample {
	s := &PGJobsSample{TablesSampled: len(tables)}
	for _, t := range tables {
		if t.Table == soakPostgresJobsTableName {
			s.Live, s.DeadTuples, s.TableBytes, s.IndexBytes = t.Live, t.DeadTuples, t.TableBytes, t.IndexBytes
			s.Autovacuum, s.Autoanalyze, s.Analyze = t.Autovacuum, t.Autoanalyze, t.Analyze
		}
		s.LiveTuplesAll += t.Live
		s.DeadTuplesAll += t.DeadTuples
		s.TableBytesAll += t.TableBytes
		s.IndexBytesAll += t.IndexBytes
		s.AutovacuumAll += t.Autovacuum
		s.AutoanalyzeAll += t.Autoanalyze
	}
	return s
}

// soakGoals judges the rows against the goals of p.
func soakGoals(p SoakParams, rows []SoakSample) []SoakGoal {
	at := func(s SoakSample) string { return "t=" + time.Duration(s.At).Round(time.Second).String() }
	var goals []SoakGoal

	// Completed per row against enqueued, after the first row (whose
	// jobs' retries are still ahead of them).
	g := SoakGoal{Name: fmt.Sprintf("completed/enqueued >= %.2f every row after the first", p.RatioGoal)}
	var fails []string
	low := -1.0
	for i, s := range rows {
		if i == 0 {
			continue
		}
		if low < 0 || s.Ratio < low {
			low = s.Ratio
		}
		if s.Ratio < p.RatioGoal {
			fails = append(fails, fmt.Sprintf("%s: %.3f (%d of %d)", at(s), s.Ratio, s.Completed, s.Enqueued))
		}
	}
	switch {
	case len(rows) < 2:
		g.Status, g.Detail = "N/A", "fewer than 2 rows"
	case len(fails) > 0:
		g.Status, g.Detail = "FAIL", failList(fails)
	default:
		g.Status, g.Detail = "PASS", fmt.Sprintf("lowest %.3f", low)
	}
	goals = append(goals, g)

	// Retry lateness p99 per row.
	g = SoakGoal{Name: fmt.Sprintf("retry lateness p99 <= %s every row", p.LatenessGoal)}
	fails = fails[:0]
	var worst time.Duration
	for _, s := range rows {
		l := s.RetryLateness
		switch {
		case l.N == 0 && s.Enqueued > 0 && p.Transient > 0:
			fails = append(fails, at(s)+": no retry started")
		case l.P99 > p.LatenessGoal:
			fails = append(fails, fmt.Sprintf("%s: p99 %s (n=%d)", at(s), l.P99, l.N))
		}
		worst = max(worst, time.Duration(l.P99))
	}
	switch {
	case len(rows) == 0:
		g.Status, g.Detail = "N/A", "no rows"
	case len(fails) > 0:
		g.Status, g.Detail = "FAIL", failList(fails)
	default:
		g.Status, g.Detail = "PASS", "worst row's p99 "+fmtDur(worst)
	}
	goals = append(goals, g)

	// Plateaus: the last third's largest value against the middle third's.
	plateau := func(name string, v func(SoakSample) int64) {
		g := SoakGoal{Name: fmt.Sprintf("%s plateau: last third's max <= middle third's max + %.0f%%", name, 100*p.PlateauMargin)}
		n := len(rows)
		if n < 3 {
			g.Status, g.Detail = "N/A", "fewer than 3 rows"
			goals = append(goals, g)
			return
		}
		var mid, lastMax int64
		for _, s := range rows[n/3 : 2*n/3] {
			mid = max(mid, v(s))
		}
		var lastAt SoakSample
		for _, s := range rows[2*n/3:] {
			if x := v(s); x > lastMax {
				lastMax, lastAt = x, s
			}
		}
		growth := 0.0
		if mid > 0 {
			growth = float64(lastMax)/float64(mid) - 1
		}
		g.Detail = fmt.Sprintf("middle third max %s, last third max %s (%+.1f%%)", fmtSize(name, mid), fmtSize(name, lastMax), 100*growth)
		if float64(lastMax) > float64(mid)*(1+p.PlateauMargin) {
			g.Status = "FAIL"
			g.Detail += ", at " + at(lastAt)
		} else {
			g.Status = "PASS"
		}
		goals = append(goals, g)
	}
	plateau("RSS", func(s SoakSample) int64 { return s.RSSMax })
	plateau("database size", func(s SoakSample) int64 { return s.DBBytes })
	if len(rows) > 0 && rows[0].PG != nil {
		plateau("jobs dead tuples", func(s SoakSample) int64 { return s.PG.DeadTuples })
		plateau("jobs index size", func(s SoakSample) int64 { return s.PG.IndexBytes })
	}
	return goals
}

// fmtSize formats a plateau's value: bytes in MiB, tuples as a count.
func fmtSize(name string, v int64) string {
	if strings.Contains(name, "tuples") {
		return strconv.FormatInt(v, 10)
	}
	return fmt.Sprintf("%.1f MiB", float64(v)/(1<<20))
}

// failList formats the failing rows, at most 10 of them.
func failList(fails []string) string {
	if len(fails) > 10 {
		return fmt.Sprintf("%d rows: %s, ...", len(fails), strings.Join(fails[:10], "; "))
	}
	return fmt.Sprintf("%d rows: %s", len(fails), strings.Join(fails, "; "))
}

// SoakCSVHeader is the header of the soak's CSV, one column per field of
// SoakSample (the PostgreSQL columns are empty on SQLite). Times are in
// seconds or milliseconds as their names say, sizes in bytes.
var SoakCSVHeader = []string{
	"t_s", "interval_s", "enqueued", "completed", "retried", "dead", "handled", "periodic", "ratio",
	"enqueue_per_s", "completed_per_s",
	"retry_n", "retry_p50_ms", "retry_p99_ms", "retry_max_ms", "periodic_p99_ms", "pickup_p50_ms", "pickup_p99_ms",
	"rss_bytes", "rss_max_bytes", "go_heap_bytes", "db_bytes",
	"backlog", "stored_completed", "stored_dead",
	"pg_jobs_live", "pg_jobs_dead", "pg_jobs_table_bytes", "pg_jobs_index_bytes", "pg_jobs_autovacuum",
	"pg_dead_all", "pg_index_bytes_all", "pg_autovacuum_all",
	"pg_jobs_analyze", "pg_jobs_autoanalyze", "pg_jobs_vacuum_phase", "pg_oldest_xmin_age",
}

// CSV returns the row's fields in the order of SoakCSVHeader.
func (s SoakSample) CSV() []string {
	i := func(v int64) string { return strconv.FormatInt(v, 10) }
	f := func(v float64, prec int) string { return strconv.FormatFloat(v, 'f', prec, 64) }
	ms := func(d Duration) string { return f(float64(d)/float64(time.Millisecond), 3) }
	lat := func(d Duration, n int) string {
		if n == 0 {
			return ""
		}
		return ms(d)
	}
	sec := time.Duration(s.Interval).Seconds()
	out := []string{
		f(time.Duration(s.At).Seconds(), 1), f(sec, 1), i(s.Enqueued), i(s.Completed), i(s.Retried), i(s.Dead), i(s.Handled), i(s.Periodic),
		f(s.Ratio, 4), f(float64(s.Enqueued)/sec, 1), f(float64(s.Completed)/sec, 1),
		strconv.Itoa(s.RetryLateness.N), lat(s.RetryLateness.P50, s.RetryLateness.N), lat(s.RetryLateness.P99, s.RetryLateness.N),
		lat(s.RetryLateness.Max, s.RetryLateness.N), lat(s.PeriodicLateness.P99, s.PeriodicLateness.N),
		lat(s.Pickup.P50, s.Pickup.N), lat(s.Pickup.P99, s.Pickup.N),
		i(s.RSS), i(s.RSSMax), i(s.GoHeap), i(s.DBBytes), i(s.Backlog), i(s.StoredCompleted), i(s.StoredDead),
	}
	if pg := s.PG; pg != nil {
		return append(out, i(pg.Live), i(pg.DeadTuples), i(pg.TableBytes), i(pg.IndexBytes), i(pg.Autovacuum),
			i(pg.DeadTuplesAll), i(pg.IndexBytesAll), i(pg.AutovacuumAll),
			i(pg.Analyze), i(pg.Autoanalyze), pg.VacuumPhase, i(pg.OldestXminAge))
	}
	return append(out, "", "", "", "", "", "", "", "", "", "", "", "")
}

// PGTablesCSVHeader is the header of the CSV of PGTableSample rows.
var PGTablesCSVHeader = []string{"t_s", "table", "n_live_tup", "n_dead_tup", "table_bytes", "index_bytes",
	"autovacuum_count", "autoanalyze_count", "analyze_count"}

// CSV returns the row's fields in the order of PGTablesCSVHeader.
func (t PGTableSample) CSV() []string {
	i := func(v int64) string { return strconv.FormatInt(v, 10) }
	return []string{strconv.FormatFloat(time.Duration(t.At).Seconds(), 'f', 1, 64), t.Table, i(t.Live), i(t.DeadTuples),
		i(t.TableBytes), i(t.IndexBytes), i(t.Autovacuum), i(t.Autoanalyze), i(t.Analyze)}
}
