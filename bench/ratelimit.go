package bench

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/redrivehq/redrive"
)

// Defaults of the rate workload.
const (
	DefaultRateLimit     = "200/s"
	DefaultRateBurst     = 10
	DefaultRateDuration  = 60 * time.Second
	DefaultRateProcesses = 3
	// ModeRate is the worker process mode of the rate workload: each
	// handler writes "start <unix ns> <attempted_at unix ns>".
	ModeRate = "rate"
	// rateKind is the kind of the rate-limited jobs.
	rateKind = "bench.rated"
	// rateLimitName is the limit the jobs are under.
	rateLimitName = "bench-rate"
)

// RateParams are the rate workload's parameters.
type RateParams struct {
	Settings
	// Rate ("200/s") and Burst are the limit's; Duration how long the
	// workers run; Processes how many worker processes share the limit
	// (on SQLite, processes on one database file).
	Rate      string   `json:"rate"`
	Burst     int      `json:"burst"`
	Duration  Duration `json:"duration_ms"`
	Processes int      `json:"processes"`
	// Jobs is how many were enqueued: more than the limit lets start in
	// Duration, so that the limit, not the supply, sets the pace.
	Jobs int `json:"jobs"`
}

// RateResult is what the rate workload measured, from the handlers' own
// timestamps (and, for comparison, from the start times the store
// recorded in the transaction that leased each job).
type RateResult struct {
	Meta
	Params RateParams `json:"params"`
	// Starts is how many handlers started within Duration of the first;
	// Achieved their number over Duration, Target the limit's rate in
	// jobs a second, Deviation (Achieved/Target - 1) in percent.
	Starts    int64   `json:"starts"`
	Achieved  float64 `json:"jobs_per_s"`
	Target    float64 `json:"target_jobs_per_s"`
	Deviation float64 `json:"deviation_pct"`
	// Excess is the most, over every window [t_i, t_j] of the run, that
	// the starts in it went above burst + rate·(t_j - t_i), in jobs
	// (0 or less: the limit held in every window); HandlerExcess from the
	// handlers' clocks, StoreExcess from the store's start times.
	HandlerExcess float64 `json:"handler_excess_jobs"`
	StoreExcess   float64 `json:"store_excess_jobs"`
	// PerProcess is how many starts each process made.
	PerProcess []int64 `json:"per_process"`
	// Lag is the median and largest gap between a job's start as the
	// handler's Job reports it (AttemptedAt, the engine's dispatch) and
	// its handler's start.
	LagP50 Duration `json:"lag_p50_ms"`
	LagMax Duration `json:"lag_max_ms"`
}

// Info implements Result.
func (r *RateResult) Info() *Meta { return &r.Meta }

// Parameters implements Result.
func (r *RateResult) Parameters() []Figure {
	p := r.Params
	return append([]Figure{
		{"limit", fmt.Sprintf("%s, burst %d, one group, fleet-wide", p.Rate, p.Burst)},
		{"processes", fmt.Sprintf("%d worker processes sharing the limit", p.Processes)},
		{"duration", p.Duration.String()},
		{"jobs", fmt.Sprintf("%d no-op jobs, all due at the start", p.Jobs)},
	}, p.figures()...)
}

// Figures implements Result.
func (r *RateResult) Figures() []Figure {
	return []Figure{
		{"achieved", fmt.Sprintf("%d starts in %s = %.2f jobs/s (target %.2f): %+.2f%%", r.Starts, r.Params.Duration, r.Achieved, r.Target, r.Deviation)},
		{"worst window (handlers)", fmt.Sprintf("%+.2f jobs over burst + rate·t", r.HandlerExcess)},
		{"worst window (store)", fmt.Sprintf("%+.2f jobs over burst + rate·t", r.StoreExcess)},
		{"starts per process", fmt.Sprint(r.PerProcess)},
		{"lease to handler", fmt.Sprintf("p50 %s, max %s", r.LagP50, r.LagMax)},
	}
}

// Rate measures how well a fleet-wide rate limit holds: it enqueues more
// jobs under one limit of p.Rate (burst p.Burst) than it lets start in
// p.Duration, runs p.Processes worker processes (on PostgreSQL, or on
// the one SQLite file) for p.Duration, and compares the starts the
// handlers saw with the limit: the rate achieved, and the worst window.
func Rate(ctx context.Context, cfg Config, p RateParams) (*RateResult, error) {
	procsWanted := p.Processes
	cfg.Processes = 0
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	r0, err := redrive.ParseRate(p.Rate)
	switch {
	case err != nil:
		return nil, fmt.Errorf("bench: rate: %w", err)
	case r0.N == 0:
		return nil, fmt.Errorf("bench: rate: a rate is required")
	case procsWanted < 1:
		return nil, fmt.Errorf("bench: rate: processes must be at least 1, got %d", procsWanted)
	case p.Duration <= 0:
		return nil, fmt.Errorf("bench: rate: duration must be positive")
	case cfg.Spawn == nil:
		return nil, fmt.Errorf("bench: rate: worker processes need Spawn")
	}
	target := float64(r0.N) / r0.Per.Seconds()
	p.Settings = cfg.settings()
	p.Jobs = int(math.Ceil(target*time.Duration(p.Duration).Seconds()*1.1)) + p.Burst + 100
	r, err := newRig(ctx, cfg, "rate")
	if err != nil {
		return nil, err
	}
	res := &RateResult{Params: p, Target: target}
	err = runRate(ctx, r, cfg, procsWanted, res)
	return finish(r, res, &res.Meta, err)
}

func runRate(ctx context.Context, r *rig, cfg Config, nprocs int, res *RateResult) error {
	p := res.Params
	if err := r.client.SetLimits([]redrive.ConcurrencyLimit{{Name: rateLimitName, Kind: rateKind, Rate: p.Rate, Burst: p.Burst}}); err != nil {
		return err
	}
	if _, err := r.insert(ctx, rateKind, p.Jobs, cfg.InsertBatch, 0, time.Time{}); err != nil {
		return err
	}
	wp := WorkerProcess{Mode: ModeRate, Workers: cfg.Workers, FetchBatch: cfg.FetchBatch, RetryBudget: cfg.RetryBudget, RetryDelay: DefaultRetryDelay}
	if r.pg != nil {
		wp.DatabaseURL, wp.Schema = cfg.DatabaseURL, r.pg.Schema()
	} else {
		wp.SQLitePath = r.path
	}
	var mu sync.Mutex
	type start struct {
		handler, store int64
		proc           int
	}
	var starts []start
	pcfg := cfg
	pcfg.Processes = nprocs
	ps, err := startProcs(ctx, pcfg, wp, func(i int, f []string) {
		if len(f) != 3 || f[0] != "start" {
			return
		}
		h, _ := strconv.ParseInt(f[1], 10, 64)
		s, _ := strconv.ParseInt(f[2], 10, 64)
		mu.Lock()
		starts = append(starts, start{h, s, i})
		mu.Unlock()
	})
	if err != nil {
		return err
	}
	if err := ps.start(); err != nil {
		ps.kill()
		return err
	}
	select {
	case <-time.After(time.Duration(p.Duration) + time.Second):
	case <-ctx.Done():
		ps.kill()
		return ctx.Err()
	}
	if err := ps.stop(); err != nil {
		return err
	}
	if len(starts) == 0 {
		return fmt.Errorf("bench: rate: no job started")
	}
	slices.SortFunc(starts, func(a, b start) int { return int(a.handler - b.handler) })
	first := starts[0].handler
	end := first + int64(time.Duration(p.Duration))
	res.PerProcess = make([]int64, nprocs)
	var hs []int64
	for _, s := range starts {
		if s.handler > end {
			continue
		}
		res.Starts++
		res.PerProcess[s.proc]++
		hs = append(hs, s.handler)
	}
	// The store's start times: attempted_at, set by the fetch that
	// leased each job (the handlers start a little later).
	ss, err := r.leaseTimes(ctx)
	if err != nil {
		return err
	}
	var lags []time.Duration
	for _, s := range starts {
		if s.store != 0 {
			lags = append(lags, time.Duration(s.handler-s.store))
		}
	}
	res.Achieved = float64(res.Starts) / time.Duration(p.Duration).Seconds()
	res.Deviation = (res.Achieved/res.Target - 1) * 100
	slices.Sort(ss)
	res.HandlerExcess = windowExcess(hs, res.Target, p.Burst)
	res.StoreExcess = windowExcess(ss, res.Target, p.Burst)
	slices.Sort(lags)
	if len(lags) > 0 {
		res.LagP50, res.LagMax = Duration(lags[len(lags)/2]), Duration(lags[len(lags)-1])
	}
	var c checks
	if res.Starts > int64(p.Jobs) {
		c = append(c, "more starts than jobs")
	}
	return c.err("rate")
}

// leaseTimes returns the start times (unix ns) the store recorded for the
// rate workload's jobs that started, sorted.
func (r *rig) leaseTimes(ctx context.Context) ([]int64, error) {
	var out []int64
	if r.pg != nil {
		rows, err := r.pg.Pool().Query(ctx, `SELECT (extract(epoch FROM attempted_at) * 1000000)::bigint * 1000 FROM `+
			pgx.Identifier{r.pg.Schema(), "jobs"}.Sanitize()+` WHERE kind = $1 AND attempted_at IS NOT NULL ORDER BY 1`, rateKind)
		if err != nil {
			return nil, fmt.Errorf("bench: rate: read the start times: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var t int64
			if err := rows.Scan(&t); err != nil {
				return nil, err
			}
			out = append(out, t)
		}
		return out, rows.Err()
	}
	db, err := sql.Open("sqlite", "file:"+r.path+"?mode=ro")
	if err != nil {
		return nil, err
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, `SELECT attempted_at * 1000 FROM jobs WHERE kind = ? AND attempted_at IS NOT NULL ORDER BY 1`, rateKind)
	if err != nil {
		return nil, fmt.Errorf("bench: rate: read the start times: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var t int64
		if err := rows.Scan(&t); err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// windowExcess returns the most that the starts ts (sorted, unix ns) in
// a window [t_i, t_j] exceed burst + rate·(t_j - t_i): with
// e(i, j) = (j - i + 1) - burst - rate·(t_j - t_i), the largest over i <= j
// is found in one pass, keeping the largest rate·t_i - i seen.
func windowExcess(ts []int64, rate float64, burst int) float64 {
	best := math.Inf(-1)
	maxLeft := math.Inf(-1)
	for j, t := range ts {
		maxLeft = max(maxLeft, rate*float64(t)/1e9-float64(j))
		best = max(best, float64(j)-rate*float64(t)/1e9+maxLeft+1-float64(burst))
	}
	return best
}
