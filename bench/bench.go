// Package bench holds the workloads behind `redrive bench`: throughput
// (burn-down), continuous, failure, lateness and depth. Each one opens a
// fresh SQLite database (or, with Config.DatabaseURL, a fresh schema of a
// PostgreSQL database), drives the real redrive.Client and redrive.Worker
// on it and returns figures it measured (never estimated) with the
// parameters and the environment they were measured in.
//
// On PostgreSQL the throughput and lateness workloads can also run their
// workers in separate processes (Config.Processes): the caller supplies
// Config.Spawn, which starts a process that calls ServeWorker.
//
// The workloads are plain functions taking a Config, so that Go tests and
// benchmarks can drive them as well as the CLI:
//
//	res, err := bench.Throughput(ctx, bench.Config{Workers: 100}, 100000)
package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/trace"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/retry"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/postgres"
	"github.com/redrivehq/redrive/store/sqlite"
)

// Defaults of the workloads' parameters, shared with the CLI's flags.
const (
	DefaultWorkers       = 100
	DefaultThroughputN   = 100000
	DefaultFailureN      = 20000
	DefaultLatenessN     = 200
	DefaultProducers     = 4
	DefaultBatch         = 100
	DefaultDuration      = 10 * time.Second
	DefaultWarmup        = time.Second
	DefaultRetryDelay    = time.Second
	DefaultInterval      = 20 * time.Millisecond
	DefaultWaiting       = 1000000
	DefaultDue           = 50000
	DefaultCompare       = 1000
	DefaultStallTimeout  = time.Minute
	DefaultRetryEvery    = 100                   // continuous: one retry probe in 100 jobs
	DefaultProbeDelay    = 50 * time.Millisecond // continuous: the probes' retry delay
	DefaultRetryWorkers  = 10                    // continuous: handlers of the probes' queue
	DefaultBurnDown      = 50000                 // continuous: jobs of the burn-down run first
	insertBatch          = 1000                  // EnqueueMany batch of the burn-down workloads
	depthInsertBatch     = redrive.MaxBatch      // EnqueueMany batch of the depth pre-insert
	noopKind             = "bench.noop"
	failKind             = "bench.fail"
	rssSampleInterval    = 100 * time.Millisecond
	progressPollInterval = 50 * time.Millisecond
)

// ErrCheck is wrapped by the error a workload returns, together with its
// result, when a consistency check on the figures failed (for instance the
// store does not count N completed jobs).
var ErrCheck = errors.New("bench: check failed")

// Config holds the settings every workload shares. The zero value runs
// with the defaults.
type Config struct {
	// Workers is the worker's concurrency on the queue (default 100).
	Workers int
	// FetchBatch is WorkerOptions.FetchBatch: how many jobs one fetch
	// leases (0: the engine's default, the concurrency capped at 1000).
	FetchBatch int
	// Payloads, when set, encrypts every payload at rest (the stores'
	// Options.Payloads): the cost of payload encryption.
	Payloads store.PayloadCodec
	// Synchronous is sqlite.Options.Synchronous: "full" (default) or
	// "normal".
	Synchronous string
	// RetryBudget keeps the engine's per-queue retry budget on. It is off
	// by default: the failure and lateness workloads retry most of their
	// attempts on purpose, and the budget would spread those retries out
	// and measure itself instead of the engine.
	RetryBudget bool
	// DBDir is where the fresh database's directory is created (default:
	// the system's temporary directory).
	DBDir string
	// Keep keeps the database after the workload instead of deleting it;
	// its path is then reported in Meta.DBPath.
	Keep bool
	// ErrorLog receives the engine's error logs (default os.Stderr).
	// Everything below the error level is discarded.
	ErrorLog io.Writer
	// StallTimeout aborts a workload whose jobs stop progressing for that
	// long (default 1 minute): a liveness guard, not a measurement.
	StallTimeout time.Duration
	// InsertBatch is the EnqueueMany batch of the throughput workload's
	// pre-insert (0: 1000; at most redrive.MaxBatch).
	InsertBatch int
	// DatabaseURL, when set, runs the workload on PostgreSQL: in a fresh
	// schema redrive_bench_<random> of that database, dropped afterwards
	// unless Keep. DBDir and Synchronous are then not used.
	DatabaseURL string
	// Processes, when above 0, runs the workers of the throughput and
	// lateness workloads in that many separate processes started with
	// Spawn (each with Workers handler goroutines), this process only
	// enqueueing and collecting what they measured. It needs DatabaseURL.
	Processes int
	// Limited, when above 0, adds to the throughput workload that many
	// jobs under a concurrency limit (Max 5 per key, LimitKeys keys from a
	// payload field) in the same queue, inserted before the no-op jobs
	// (so older: due first). Their handlers hold their slots until the
	// worker shuts down, so all but LimitKeys*5 of them wait on a slot
	// through the whole burn-down, which times the no-op jobs only.
	// Workers should then be raised by LimitKeys*5 (the held handlers).
	// In-process only.
	Limited   int
	LimitKeys int
	// Record makes the throughput workload's handler call redrive.Record
	// before it succeeds, as the http kind does, so that every success
	// writes a "completed" event to its job's history. In-process only.
	Record bool
	// Spawn returns the command of one worker process: a process that
	// calls ServeWorker with the WorkerProcess that args (its Args)
	// describe, on its standard input and output. Required with Processes.
	Spawn func(ctx context.Context, args []string) (*exec.Cmd, error)
	// WorkStarted and WorkDone, when set, are called just before the
	// burn-down phase of the throughput workload starts and just after its
	// last job ran. A Go benchmark passes b.StartTimer and b.StopTimer so
	// that only the burn-down is timed.
	WorkStarted, WorkDone func()
	// TracerProvider, when set, is the client's and the in-process
	// worker's (ClientOptions.TracerProvider): the throughput workload
	// then measures the cost of tracing. Tracing names it in the
	// parameters ("off" when empty).
	TracerProvider trace.TracerProvider
	Tracing        string
}

func (c Config) withDefaults() (Config, error) {
	if c.Workers == 0 {
		c.Workers = DefaultWorkers
	}
	if c.Synchronous == "" {
		c.Synchronous = "full"
	}
	c.Synchronous = strings.ToLower(c.Synchronous)
	if c.ErrorLog == nil {
		c.ErrorLog = os.Stderr
	}
	if _, ok := c.ErrorLog.(*os.File); !ok {
		// The engine's logger and the worker processes' standard error
		// (copied by os/exec goroutines) write to it concurrently.
		c.ErrorLog = &lockedWriter{w: c.ErrorLog}
	}
	if c.StallTimeout <= 0 {
		c.StallTimeout = DefaultStallTimeout
	}
	if c.InsertBatch == 0 {
		c.InsertBatch = insertBatch
	}
	switch {
	case c.InsertBatch < 0 || c.InsertBatch > redrive.MaxBatch:
		return c, fmt.Errorf("bench: insert batch must be between 1 and %d, got %d", redrive.MaxBatch, c.InsertBatch)
	case c.Processes < 0:
		return c, fmt.Errorf("bench: processes must not be negative, got %d", c.Processes)
	case c.Processes > 0 && c.DatabaseURL == "":
		return c, errors.New("bench: worker processes need a PostgreSQL database (DatabaseURL)")
	case c.Processes > 0 && c.Spawn == nil:
		return c, errors.New("bench: worker processes need Spawn")
	case c.Workers < 1:
		return c, fmt.Errorf("bench: workers must be at least 1, got %d", c.Workers)
	case c.FetchBatch < 0:
		return c, fmt.Errorf("bench: fetch batch must not be negative, got %d", c.FetchBatch)
	case c.Synchronous != "full" && c.Synchronous != "normal":
		return c, fmt.Errorf("bench: synchronous must be \"full\" or \"normal\", got %q", c.Synchronous)
	}
	return c, nil
}

// settings returns the parameters every result reports.
func (c Config) settings() Settings {
	s := Settings{Store: "sqlite", Workers: c.Workers, FetchBatch: c.FetchBatch, Synchronous: c.Synchronous,
		RetryBudget: c.RetryBudget, Processes: c.Processes}
	if c.DatabaseURL != "" {
		s.Store, s.Synchronous = "postgres", ""
	}
	return s
}

// Settings are the parameters shared by every workload, as reported.
type Settings struct {
	// Store is "sqlite" or "postgres".
	Store   string `json:"store"`
	Workers int    `json:"workers"`
	// FetchBatch 0 means the engine's default (the concurrency, at most 1000).
	FetchBatch  int    `json:"fetch_batch"`
	Synchronous string `json:"synchronous"`
	RetryBudget bool   `json:"retry_budget"`
	// Processes is the number of worker processes (0: the workers run in
	// the benchmark's own process); Workers is per process.
	Processes int `json:"processes,omitempty"`
}

func (s Settings) figures() []Figure {
	fb := strconv.Itoa(s.FetchBatch)
	if s.FetchBatch == 0 {
		fb = "engine default (min(workers, 1000))"
	}
	budget := "off"
	if s.RetryBudget {
		budget = "on"
	}
	workers := strconv.Itoa(s.Workers)
	if s.Processes > 0 {
		workers = fmt.Sprintf("%d per process, %d worker processes", s.Workers, s.Processes)
	}
	f := []Figure{{"workers", workers}, {"fetch batch", fb}}
	if s.Store == "postgres" {
		f = append(f, Figure{"store", "postgres (fresh schema)"})
	} else {
		f = append(f, Figure{"synchronous", s.Synchronous})
	}
	return append(f, Figure{"retry budget", budget})
}

// Env describes where the figures were measured.
type Env struct {
	GoVersion  string `json:"go_version"`
	OS         string `json:"os"`
	Arch       string `json:"arch"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	NumCPU     int    `json:"num_cpu"`
}

// CurrentEnv returns the environment of this process.
func CurrentEnv() Env {
	return Env{GoVersion: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH,
		GOMAXPROCS: runtime.GOMAXPROCS(0), NumCPU: runtime.NumCPU()}
}

// String formats the environment on one line.
func (e Env) String() string {
	return fmt.Sprintf("%s %s/%s, GOMAXPROCS=%d, NumCPU=%d", e.GoVersion, e.OS, e.Arch, e.GOMAXPROCS, e.NumCPU)
}

// Meta is what every result carries besides its own parameters and
// figures.
type Meta struct {
	Workload string    `json:"workload"`
	Env      Env       `json:"env"`
	Started  time.Time `json:"started"`
	// Elapsed is the wall time of the whole workload, set-up included.
	Elapsed Duration `json:"elapsed_ms"`
	// DBBytes is the size of the database files (main file and WAL) at
	// the end of the workload; on PostgreSQL, the size of the schema's
	// tables with their indexes and TOAST.
	DBBytes int64 `json:"db_bytes"`
	// DBPath is the database kept with Config.Keep; empty when it was
	// deleted.
	DBPath string `json:"db_path,omitempty"`
	// Schema is the PostgreSQL schema the workload ran in (dropped
	// afterwards unless Config.Keep; then SchemaKept is true).
	Schema     string `json:"schema,omitempty"`
	SchemaKept bool   `json:"schema_kept,omitempty"`
}

// Figure is one named value of a result, formatted for people.
type Figure struct {
	Name  string
	Value string
}

// Result is what every workload returns: its metadata, its parameters and
// its figures, for the CLI's human output. The concrete types also encode
// to JSON with every figure.
type Result interface {
	Info() *Meta
	Parameters() []Figure
	Figures() []Figure
}

// Duration is a time.Duration that encodes to JSON as a number of
// milliseconds, as the engine's store.Duration does (the JSON codec is
// that type's); it prints rounded for reading.
type Duration time.Duration

// MarshalJSON encodes the duration as milliseconds.
func (d Duration) MarshalJSON() ([]byte, error) { return store.Duration(d).MarshalJSON() }

// UnmarshalJSON decodes a number of milliseconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	if err := (*store.Duration)(d).UnmarshalJSON(b); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	return nil
}

// String formats the duration like time.Duration, rounded for reading.
func (d Duration) String() string { return fmtDur(time.Duration(d)) }

func fmtDur(d time.Duration) string {
	switch {
	case d >= 10*time.Second:
		return d.Round(10 * time.Millisecond).String()
	case d >= time.Second:
		return d.Round(time.Millisecond).String()
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond).String()
	default:
		return d.Round(time.Microsecond).String()
	}
}

// rate is n per second over d, 0 for an empty d.
func rate(n int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

func fmtRate(r float64, unit string) string {
	return strconv.FormatFloat(r, 'f', 0, 64) + " " + unit + "/s"
}

// noopArgs is the payload of the no-op jobs (like the River anchor's).
type noopArgs struct {
	N int `json:"n"`
}

// rig is one workload's fresh database, client and worker.
type rig struct {
	cfg     Config
	meta    *Meta
	dir     string
	path    string
	log     *slog.Logger
	store   store.Store
	pg      *postgres.Store // the store, on PostgreSQL
	client  *redrive.Client
	worker  *redrive.Worker
	cancel  context.CancelFunc
	done    chan error
	stopped bool
}

// newRig creates a fresh database in its own directory (or a fresh
// PostgreSQL schema) and a client on it.
func newRig(ctx context.Context, cfg Config, workload string) (*rig, error) {
	if cfg.DatabaseURL != "" {
		return newPostgresRig(ctx, cfg, workload)
	}
	dir, err := os.MkdirTemp(cfg.DBDir, "redrive-bench-"+workload+"-")
	if err != nil {
		return nil, fmt.Errorf("bench: create the database directory: %w", err)
	}
	log := slog.New(slog.NewTextHandler(cfg.ErrorLog, &slog.HandlerOptions{Level: slog.LevelError}))
	r := &rig{cfg: cfg, dir: dir, path: filepath.Join(dir, "redrive.db"), log: log,
		meta: &Meta{Workload: workload, Env: CurrentEnv(), Started: time.Now()}}
	st, err := sqlite.Open(ctx, r.path, sqlite.Options{Synchronous: cfg.Synchronous, Logger: log, Payloads: cfg.Payloads})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	r.store = st
	r.client = redrive.NewClient(r.store, redrive.ClientOptions{Logger: log, TracerProvider: cfg.TracerProvider})
	return r, nil
}

// newPostgresRig creates a fresh schema redrive_bench_<random> and a
// client on it.
func newPostgresRig(ctx context.Context, cfg Config, workload string) (*rig, error) {
	b := make([]byte, 6)
	rand.Read(b)
	schema := "redrive_bench_" + hex.EncodeToString(b)
	log := slog.New(slog.NewTextHandler(cfg.ErrorLog, &slog.HandlerOptions{Level: slog.LevelError}))
	st, err := postgres.Open(ctx, cfg.DatabaseURL, postgres.Options{Schema: schema, Logger: log, Payloads: cfg.Payloads})
	if err != nil {
		return nil, err
	}
	r := &rig{cfg: cfg, log: log, store: st, pg: st,
		meta: &Meta{Workload: workload, Env: CurrentEnv(), Started: time.Now(), Schema: schema}}
	r.client = redrive.NewClient(st, redrive.ClientOptions{Logger: log, TracerProvider: cfg.TracerProvider})
	return r, nil
}

// newWorker returns a worker on the default queue with the configured
// concurrency, fetch batch and retry budget; policy may be nil.
func (r *rig) newWorker(policy *retry.Policy) *redrive.Worker {
	return r.newWorkerQueues(policy, map[string]int{redrive.DefaultQueue: r.cfg.Workers})
}

// newWorkerQueues is newWorker on the given queues (name: concurrency).
func (r *rig) newWorkerQueues(policy *retry.Policy, queues map[string]int) *redrive.Worker {
	return r.newWorkerOpts(redrive.WorkerOptions{Queues: queues, Policy: policy})
}

// newWorkerOpts returns a worker with opts and the configured fetch
// batch and retry budget, logging to the rig's logger.
func (r *rig) newWorkerOpts(opts redrive.WorkerOptions) *redrive.Worker {
	opts.FetchBatch = r.cfg.FetchBatch
	opts.DisableRetryBudget = !r.cfg.RetryBudget
	opts.Logger = r.log
	r.worker = redrive.NewWorker(r.client, opts)
	return r.worker
}

// start runs the worker in the background.
func (r *rig) start() {
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	r.done = make(chan error, 1)
	go func() { r.done <- r.worker.Run(ctx) }()
}

// stop shuts the worker down gracefully and waits until every outcome is
// written.
func (r *rig) stop() error {
	if r.cancel == nil || r.stopped {
		return nil
	}
	r.stopped = true
	r.cancel()
	return <-r.done
}

// close stops the worker, closes the store, measures the database files
// and deletes them unless Keep.
func (r *rig) close() error {
	err := r.stop()
	if r.pg != nil {
		return r.closePostgres(err)
	}
	if cerr := r.store.Close(); err == nil {
		err = cerr
	}
	r.meta.DBBytes = r.sqliteBytes()
	r.meta.Elapsed = Duration(time.Since(r.meta.Started))
	if r.cfg.Keep {
		r.meta.DBPath = r.path
		return err
	}
	if rerr := os.RemoveAll(r.dir); err == nil && rerr != nil {
		err = fmt.Errorf("bench: delete the database: %w", rerr)
	}
	return err
}

// closePostgres measures the schema's tables, drops the schema unless
// Keep and closes the store.
func (r *rig) closePostgres(err error) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool := r.pg.Pool()
	n, serr := r.postgresBytes(ctx)
	r.meta.DBBytes = n
	if serr != nil && err == nil {
		err = serr
	}
	if r.cfg.Keep {
		r.meta.SchemaKept = true
	} else if _, derr := pool.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{r.pg.Schema()}.Sanitize()+" CASCADE"); derr != nil && err == nil {
		err = fmt.Errorf("bench: drop the schema %s (drop it by hand): %w", r.pg.Schema(), derr)
	}
	if cerr := r.store.Close(); err == nil {
		err = cerr
	}
	r.meta.Elapsed = Duration(time.Since(r.meta.Started))
	return err
}

// dbBytes measures the database: on SQLite its main file and WAL, on
// PostgreSQL the schema's tables with their indexes and TOAST.
func (r *rig) dbBytes(ctx context.Context) (int64, error) {
	if r.pg != nil {
		return r.postgresBytes(ctx)
	}
	return r.sqliteBytes(), nil
}

// sqliteBytes is the size of the SQLite database's main file and WAL.
func (r *rig) sqliteBytes() int64 {
	var n int64
	for _, suffix := range []string{"", "-wal"} {
		if fi, err := os.Stat(r.path + suffix); err == nil {
			n += fi.Size()
		}
	}
	return n
}

// postgresBytes is the size of the schema's tables with their indexes and
// TOAST.
func (r *rig) postgresBytes(ctx context.Context) (int64, error) {
	var n int64
	if err := r.pg.Pool().QueryRow(ctx, `SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relkind = 'r'`, r.pg.Schema()).Scan(&n); err != nil {
		return 0, fmt.Errorf("bench: measure the schema %s: %w", r.pg.Schema(), err)
	}
	return n, nil
}

// finish closes the rig, fills in the result's metadata and returns the
// result with err; a result is returned only when it holds figures worth
// printing: no error, or a failed consistency check.
func finish[T any](r *rig, res *T, meta *Meta, err error) (*T, error) {
	if cerr := r.close(); err == nil {
		err = cerr
	}
	*meta = *r.meta
	if err != nil && !errors.Is(err, ErrCheck) {
		return nil, err
	}
	return res, err
}

// insert enqueues n no-op jobs of kind in batches, due at runAt (zero:
// now), numbering their payloads from first. It returns the time taken.
func (r *rig) insert(ctx context.Context, kind string, n, batch, first int, runAt time.Time) (time.Duration, error) {
	return r.insertAt(ctx, kind, n, batch, first, func(int) time.Time { return runAt })
}

// insertAt is insert with the i-th job (from 0) due at runAt(i).
func (r *rig) insertAt(ctx context.Context, kind string, n, batch, first int, runAt func(i int) time.Time) (time.Duration, error) {
	reqs := make([]redrive.Request, 0, min(batch, n))
	t0 := time.Now()
	for i := 0; i < n; {
		reqs = reqs[:0]
		for ; i < n && len(reqs) < batch; i++ {
			reqs = append(reqs, redrive.Request{Kind: kind, Payload: noopArgs{N: first + i}, RunAt: runAt(i)})
		}
		if _, err := r.client.EnqueueMany(ctx, reqs); err != nil {
			return 0, fmt.Errorf("bench: insert: %w", err)
		}
	}
	return time.Since(t0), nil
}

// stats reads the store's counts of the default queue.
func (r *rig) stats(ctx context.Context) (jobs map[redrive.State]int64, counters map[string]int64, err error) {
	st, err := r.client.Stats(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("bench: stats: %w", err)
	}
	jobs, counters = st.Jobs[redrive.DefaultQueue], st.Counters[redrive.DefaultQueue]
	if jobs == nil {
		jobs = map[redrive.State]int64{}
	}
	if counters == nil {
		counters = map[string]int64{}
	}
	return jobs, counters, nil
}

// counter counts handler calls and closes reached when the count first
// reaches target.
type counter struct {
	n       atomic.Int64
	target  int64
	reached chan struct{}
}

func newCounter(target int) *counter {
	c := &counter{target: int64(target), reached: make(chan struct{})}
	if target <= 0 {
		close(c.reached)
	}
	return c
}

func (c *counter) inc() { c.add(1) }

// add adds d (positive) to the count.
func (c *counter) add(d int64) {
	if n := c.n.Add(d); n >= c.target && n-d < c.target {
		close(c.reached)
	}
}

// wait blocks until the counter reaches its target. It gives up when ctx
// ends or when the count has not moved for stall.
func (c *counter) wait(ctx context.Context, stall time.Duration, what string) error {
	tick := time.NewTicker(progressPollInterval)
	defer tick.Stop()
	last, lastMove := c.n.Load(), time.Now()
	for {
		select {
		case <-c.reached:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("bench: %s: %d of %d done: %w", what, c.n.Load(), c.target, ctx.Err())
		case now := <-tick.C:
			if n := c.n.Load(); n != last {
				last, lastMove = n, now
			} else if now.Sub(lastMove) > stall {
				return fmt.Errorf("bench: %s: stalled at %d of %d for %s", what, n, c.target, stall)
			}
		}
	}
}

// lockedWriter serializes the writes on w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// checks collects consistency checks on a result's figures.
type checks []string

func (c *checks) expect(name string, got, want int64) {
	if got != want {
		*c = append(*c, fmt.Sprintf("%s is %d, want %d", name, got, want))
	}
}

func (c checks) err(workload string) error {
	if len(c) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s: %s", ErrCheck, workload, strings.Join(c, "; "))
}
