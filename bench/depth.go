package bench

import (
	"context"
	"fmt"
	"runtime/debug"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redrivehq/redrive"
)

// waitingDelay is how far in the future the depth workload's waiting jobs
// are due without a spread: far enough never to become due during a run.
const waitingDelay = 365 * 24 * time.Hour

// DefaultDepthLead is when the first waiting job is due, after the start
// of their insert, when they are spread (DepthParams.Spread).
const DefaultDepthLead = 15 * time.Minute

// DepthParams are the parameters of the depth workload.
type DepthParams struct {
	Settings
	// Waiting jobs are scheduled in the same queue as the Due no-op jobs
	// that are burnt down: all a year ahead, or, with a Spread, due evenly
	// over Spread from Lead after the start of their insert (a backlog due
	// over the next hour, say, as real backlogs are).
	Waiting int      `json:"waiting"`
	Due     int      `json:"due"`
	Spread  Duration `json:"spread_ms,omitempty"`
	Lead    Duration `json:"lead_ms,omitempty"`
	// Settle, on PostgreSQL, vacuums and analyzes the jobs table and
	// takes a checkpoint between the insert and the burn-down, in both
	// runs: a backlog built over hours has been vacuumed and analyzed by
	// autovacuum, one inserted a moment ago is being.
	Settle bool `json:"settle,omitempty"`
	// Compare is the waiting count of the baseline run (0: no baseline;
	// none either when it equals Waiting).
	Compare     int `json:"compare"`
	InsertBatch int `json:"insert_batch"`
}

// DepthRun is one run of the depth workload on its own fresh database.
type DepthRun struct {
	Waiting int `json:"waiting"`
	Due     int `json:"due"`
	// The pre-insert of the waiting jobs, then of the due ones.
	InsertWaiting     Duration `json:"insert_waiting_ms"`
	InsertWaitingRate float64  `json:"insert_waiting_jobs_per_s"`
	InsertDue         Duration `json:"insert_due_ms"`
	InsertDueRate     float64  `json:"insert_due_jobs_per_s"`
	// Settle is the time the vacuum, analyze and checkpoint took.
	Settle Duration `json:"settle_ms,omitempty"`
	// Work is the time from the worker's start to the last due job's
	// handler call; Rate is Due over it.
	Work Duration `json:"work_ms"`
	Rate float64  `json:"jobs_per_s"`
	// Resident memory of the process, sampled every 100ms: the largest
	// value during the pre-insert (database opening included), during the
	// burn-down, and overall (the final Stats query and closing included).
	MaxRSSInsert int64 `json:"max_rss_insert_bytes"`
	MaxRSSWork   int64 `json:"max_rss_work_bytes"`
	MaxRSS       int64 `json:"max_rss_bytes"`
	RSSSamples   int   `json:"rss_samples"`
	// WaitingRan counts the waiting jobs that became due and ran before
	// the last due job did (with a Spread whose Lead passed): they are
	// not in Rate.
	WaitingRan int64 `json:"waiting_ran"`
	// The store's counts at the end: Due and WaitingRan completed, the
	// rest of Waiting still scheduled (or pending, once due).
	StoreCompleted int64 `json:"store_completed"`
	StoreScheduled int64 `json:"store_scheduled"`
	DBBytes        int64 `json:"db_bytes"`
	// DBPath is the database kept with Config.Keep.
	DBPath string `json:"db_path,omitempty"`
}

// DepthResult is what the depth workload measured: the run with Waiting
// jobs and, when asked for, the baseline run with Compare waiting jobs.
type DepthResult struct {
	Meta
	Params   DepthParams `json:"params"`
	Run      DepthRun    `json:"run"`
	Baseline *DepthRun   `json:"baseline,omitempty"`
	// RateRatio is Run.Rate / Baseline.Rate (0 without a baseline).
	RateRatio float64 `json:"rate_ratio"`
}

// Info implements Result.
func (r *DepthResult) Info() *Meta { return &r.Meta }

// Parameters implements Result.
func (r *DepthResult) Parameters() []Figure {
	p := r.Params
	cmp := "none"
	if r.Baseline != nil {
		cmp = fmt.Sprintf("same run with %d waiting", p.Compare)
	}
	due := "due in " + fmtDur(waitingDelay)
	if p.Spread > 0 {
		due = fmt.Sprintf("due evenly over %s from %s after their insert began", fmtDur(time.Duration(p.Spread)), fmtDur(time.Duration(p.Lead)))
	}
	return append([]Figure{
		{"waiting jobs", fmt.Sprintf("%d, %s, same queue", p.Waiting, due)},
		{"due jobs", strconv.Itoa(p.Due)},
		{"insert batch", strconv.Itoa(p.InsertBatch)},
		{"baseline", cmp},
	}, p.figures()...)
}

func mb(b int64) string { return strconv.FormatFloat(float64(b)/(1<<20), 'f', 1, 64) + " MiB" }

func (d *DepthRun) figures(prefix string) []Figure {
	return []Figure{
		{prefix + "insert waiting", fmt.Sprintf("%d jobs in %s = %s", d.Waiting, d.InsertWaiting, fmtRate(d.InsertWaitingRate, "jobs"))},
		{prefix + "insert due", fmt.Sprintf("%d jobs in %s = %s", d.Due, d.InsertDue, fmtRate(d.InsertDueRate, "jobs"))},
		{prefix + "settle", settleFigure(d.Settle)},
		{prefix + "burn-down", fmt.Sprintf("%d jobs in %s = %s", d.Due, d.Work, fmtRate(d.Rate, "jobs"))},
		{prefix + "max RSS", fmt.Sprintf("%s during burn-down, %s during insert, %s overall incl. final stats (%d samples)",
			mb(d.MaxRSSWork), mb(d.MaxRSSInsert), mb(d.MaxRSS), d.RSSSamples)},
		{prefix + "waiting jobs run", fmt.Sprintf("%d (became due before the last due job ran)", d.WaitingRan)},
		{prefix + "store", fmt.Sprintf("%d completed, %d scheduled, database %s", d.StoreCompleted, d.StoreScheduled, mb(d.DBBytes))},
	}
}

// Figures implements Result.
func (r *DepthResult) Figures() []Figure {
	f := r.Run.figures("")
	if r.Baseline != nil {
		f = append(f, Figure{fmt.Sprintf("baseline, %d waiting:", r.Baseline.Waiting), ""})
		f = append(f, r.Baseline.figures("  ")...)
		f = append(f, Figure{"burn-down vs baseline", fmt.Sprintf("%.1f%% of the baseline's rate", 100*r.RateRatio)})
	}
	return f
}

// Depth measures throughput with a deep backlog: it pre-inserts p.Waiting
// jobs due a year from now and p.Due no-op jobs due now (EnqueueMany in
// batches of redrive.MaxBatch), then times the burn-down of the due ones
// while sampling the process's resident memory every 100ms. Unless
// p.Compare is 0 or p.Waiting, it then repeats the run on a fresh database
// with p.Compare waiting jobs and reports the ratio of the two rates.
func Depth(ctx context.Context, cfg Config, p DepthParams) (*DepthResult, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	switch {
	case p.Waiting < 0:
		return nil, fmt.Errorf("bench: depth: waiting must not be negative, got %d", p.Waiting)
	case p.Due < 1:
		return nil, fmt.Errorf("bench: depth: due must be at least 1, got %d", p.Due)
	case p.Compare < 0:
		return nil, fmt.Errorf("bench: depth: compare must not be negative, got %d", p.Compare)
	case p.Settle && cfg.DatabaseURL == "":
		return nil, fmt.Errorf("bench: depth: settle is for PostgreSQL (give a database URL)")
	case p.Spread < 0 || p.Lead < 0:
		return nil, fmt.Errorf("bench: depth: spread and lead must not be negative, got %s and %s",
			time.Duration(p.Spread), time.Duration(p.Lead))
	}
	if p.Spread > 0 && p.Lead == 0 {
		p.Lead = Duration(DefaultDepthLead)
	}
	if p.Spread == 0 {
		p.Lead = 0
	}
	p.Settings, p.InsertBatch = cfg.settings(), depthInsertBatch
	res := &DepthResult{Params: p}
	started := time.Now()
	run, meta, err := depthRun(ctx, cfg, p, p.Waiting)
	if run == nil {
		return nil, err
	}
	res.Run, res.Meta = *run, meta
	if err == nil && p.Compare > 0 && p.Compare != p.Waiting {
		var base *DepthRun
		base, _, err = depthRun(ctx, cfg, p, p.Compare)
		if base == nil {
			return nil, err
		}
		res.Baseline = base
		if base.Rate > 0 {
			res.RateRatio = res.Run.Rate / base.Rate
		}
	}
	res.Started, res.Elapsed = started, Duration(time.Since(started))
	return res, err
}

// depthRun runs once on a fresh database with waiting jobs behind p.Due.
// It returns a nil run on errors other than failed checks.
func depthRun(ctx context.Context, cfg Config, p DepthParams, waiting int) (*DepthRun, Meta, error) {
	debug.FreeOSMemory() // start from the process's floor, not a previous run's garbage
	rss := startRSS(rssSampleInterval)
	r, err := newRig(ctx, cfg, "depth")
	if err != nil {
		rss.finish()
		return nil, Meta{}, err
	}
	run := &DepthRun{Waiting: waiting, Due: p.Due}
	err = runDepth(ctx, r, run, rss, p)
	var meta Meta
	out, err := finish(r, run, &meta, err)
	run.DBBytes, run.DBPath = meta.DBBytes, meta.DBPath
	var rerr error
	run.MaxRSS, run.RSSSamples, rerr = rss.finish()
	if err == nil && rerr != nil {
		err = rerr
	}
	return out, meta, err
}

func runDepth(ctx context.Context, r *rig, run *DepthRun, rss *rssSampler, p DepthParams) error {
	spread, lead := time.Duration(p.Spread), time.Duration(p.Lead)
	t0 := time.Now()
	runAt := func(int) time.Time { return t0.Add(waitingDelay) }
	if spread > 0 {
		step := spread / time.Duration(max(run.Waiting, 1))
		first := t0.Add(lead)
		runAt = func(i int) time.Time { return first.Add(time.Duration(i) * step) }
	}
	ins, err := r.insertAt(ctx, noopKind, run.Waiting, depthInsertBatch, 0, runAt)
	if err != nil {
		return err
	}
	run.InsertWaiting, run.InsertWaitingRate = Duration(ins), rate(int64(run.Waiting), ins)
	ins, err = r.insert(ctx, noopKind, run.Due, depthInsertBatch, run.Waiting, time.Time{})
	if err != nil {
		return err
	}
	run.InsertDue, run.InsertDueRate = Duration(ins), rate(int64(run.Due), ins)
	if p.Settle {
		t := time.Now()
		if err := r.settlePostgres(ctx); err != nil {
			return err
		}
		run.Settle = Duration(time.Since(t))
	}
	run.MaxRSSInsert = rss.mark()

	done := newCounter(run.Due)
	var early atomic.Int64
	w := r.newWorker(nil)
	redrive.Handle(w, noopKind, func(ctx context.Context, job *redrive.Job, args noopArgs) error {
		if args.N < run.Waiting { // a waiting job that became due
			early.Add(1)
			return nil
		}
		done.inc()
		return nil
	})
	t0 = time.Now()
	r.start()
	if err := done.wait(ctx, r.cfg.StallTimeout, "depth"); err != nil {
		return err
	}
	work := time.Since(t0)
	run.WaitingRan = early.Load()
	run.MaxRSSWork = rss.mark()
	run.Work, run.Rate = Duration(work), rate(int64(run.Due), work)
	if err := r.stop(); err != nil {
		return fmt.Errorf("bench: depth: worker: %w", err)
	}
	jobs, _, err := r.stats(ctx)
	if err != nil {
		return err
	}
	// The worker has stopped: no handler runs any more.
	run.WaitingRan = early.Load()
	run.StoreCompleted, run.StoreScheduled = jobs[redrive.Completed], jobs[redrive.Scheduled]
	var c checks
	c.expect("store completed", run.StoreCompleted, int64(run.Due)+run.WaitingRan)
	c.expect("store scheduled and pending", run.StoreScheduled+jobs[redrive.Pending], int64(run.Waiting)-run.WaitingRan)
	return c.err("depth")
}

func settleFigure(d Duration) string {
	if d == 0 {
		return "none"
	}
	return "VACUUM (ANALYZE) jobs and CHECKPOINT in " + time.Duration(d).Round(time.Millisecond).String()
}

// settlePostgres vacuums and analyzes the schema's jobs table and takes
// a checkpoint.
func (r *rig) settlePostgres(ctx context.Context) error {
	pool := r.pg.Pool()
	table := pgx.Identifier{r.pg.Schema(), "jobs"}.Sanitize()
	if _, err := pool.Exec(ctx, "VACUUM (ANALYZE) "+table); err != nil {
		return fmt.Errorf("bench: depth: vacuum: %w", err)
	}
	if _, err := pool.Exec(ctx, "CHECKPOINT"); err != nil {
		return fmt.Errorf("bench: depth: checkpoint: %w", err)
	}
	return nil
}
