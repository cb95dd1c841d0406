package redrive_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/internal/testwait"
	"github.com/redrivehq/redrive/retry"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/postgres"
)

// The PostgreSQL proofs: several worker processes (this test binary,
// re-executed as in crash_test.go) share one PostgreSQL schema.
//
// TestPostgresThreeWorkerProcesses: three processes work through 20,000
// jobs; a handler-side guard table proves that no job ever runs in two
// places at once, and an execution count per job that none runs more
// often than its kind dictates.
//
// TestPostgresRestart: the PostgreSQL server is restarted while two
// worker processes are busy; they must resume by themselves and every job
// must still end as its handler dictates.

const (
	pgURLEnv          = "REDRIVE_POSTGRES_URL"
	pgRestartEnv      = "REDRIVE_PG_RESTART_TEST"
	pgChildSchemaEnv  = "REDRIVE_PGCLUSTER_SCHEMA"
	pgChildIDEnv      = "REDRIVE_PGCLUSTER_ID"
	pgChildModeEnv    = "REDRIVE_PGCLUSTER_MODE" // "cluster" or "restart"
	pgChildParentEnv  = "REDRIVE_PGCLUSTER_PARENT"
	pgClusterJobs     = 20000
	pgClusterRetries  = 3
	pgRestartJobs     = 5000
	pgRestartRetries  = 8 // room for lease_expired attempts caused by the outage
	pgChildConc       = 20
	pgChildStoreConns = 6
	pgChildGuardConns = 6
)

// pgTestURL returns the PostgreSQL URL, or skips the test when none is
// configured. CI always sets it, so a skip there is a failure.
func pgTestURL(t *testing.T) string {
	t.Helper()
	u := os.Getenv(pgURLEnv)
	if u == "" {
		if os.Getenv("CI") != "" {
			t.Fatal(pgURLEnv + " is not set in CI: the PostgreSQL tests must run there, not skip")
		}
		t.Skip(pgURLEnv + " is not set: set it to a PostgreSQL URL (e.g. postgres://postgres@127.0.0.1:5432/test?sslmode=disable) to run the PostgreSQL cluster tests")
	}
	return u
}

// pgFreshSchema opens a store on a new schema and drops the schema when
// the test ends (after every child process was stopped: cleanups run last
// registered first, and the children's cleanups are registered later).
func pgFreshSchema(t *testing.T, url, prefix string) (*postgres.Store, string) {
	t.Helper()
	b := make([]byte, 5)
	rand.Read(b)
	schema := prefix + hex.EncodeToString(b)
	st, err := postgres.Open(context.Background(), url, postgres.Options{Schema: schema, MaxConns: 4, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		st.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		for {
			conn, err := pgx.Connect(ctx, url)
			if err == nil {
				_, err = conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
				conn.Close(ctx)
			}
			if err == nil {
				return
			}
			if ctx.Err() != nil {
				t.Errorf("drop schema %s: %v", schema, err)
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
	})
	return st, schema
}

type pgArgs struct {
	I     int `json:"i"`
	Fails int `json:"fails,omitempty"` // flaky: transient failures before success
}

func pgClusterPolicy(retries int) retry.Policy {
	p := retry.DefaultPolicy()
	p.MaxRetries = retries
	p.Initial = time.Millisecond
	p.MaxDelay = 10 * time.Millisecond
	p.Jitter = retry.JitterNone
	return p
}

// TestPostgresClusterChild is a worker process of the PostgreSQL tests; it
// does nothing in a normal run. It works until SIGTERM (or until its
// parent goes away), logging JSON to stderr.
func TestPostgresClusterChild(t *testing.T) {
	schema := os.Getenv(pgChildSchemaEnv)
	if schema == "" {
		return // only does something as a child process of the tests below
	}
	url, id, mode := os.Getenv(pgURLEnv), os.Getenv(pgChildIDEnv), os.Getenv(pgChildModeEnv)
	parent, _ := strconv.Atoi(os.Getenv(pgChildParentEnv))
	level := slog.LevelWarn
	if mode == "restart" {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level})).With("child", id)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	st, err := postgres.Open(ctx, url, postgres.Options{Schema: schema, MaxConns: pgChildStoreConns, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: log})

	var executions atomic.Int64
	opts := redrive.WorkerOptions{
		ID: id, Queues: map[string]int{redrive.DefaultQueue: pgChildConc}, Logger: log,
		DisableRetryBudget: true, PollInterval: 250 * time.Millisecond,
	}
	var w *redrive.Worker
	switch mode {
	case "cluster":
		p := pgClusterPolicy(pgClusterRetries)
		opts.Policy = &p
		opts.LeaseDuration, opts.RescueInterval = 10*time.Second, time.Second
		// A negative control of the detectors: a lease far too short makes
		// leases expire under load, so jobs run twice, in two places at once.
		if d, err := time.ParseDuration(os.Getenv("REDRIVE_PGCLUSTER_LEASE")); err == nil && d > 0 {
			opts.LeaseDuration, opts.RescueInterval = d, d
		}
		cfg, err := pgxpool.ParseConfig(url)
		if err != nil {
			t.Fatal(err)
		}
		cfg.MaxConns = pgChildGuardConns
		guard, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer guard.Close()
		w = redrive.NewWorker(c, opts)
		pgClusterHandlers(w, guard, schema, id, &executions)
	case "restart":
		p := pgClusterPolicy(pgRestartRetries)
		p.MaxDelay = 50 * time.Millisecond
		opts.Policy = &p
		opts.LeaseDuration, opts.RescueInterval = 2*time.Second, 500*time.Millisecond
		w = redrive.NewWorker(c, opts)
		pgRestartHandlers(w, &executions)
	default:
		t.Fatalf("unknown mode %q", mode)
	}

	runCtx, cancelRun := context.WithCancel(ctx)
	defer cancelRun()
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			log.Warn("child done", "executions", executions.Load(), "run_error", fmt.Sprint(err))
			if err != nil {
				t.Fatal(err)
			}
			return
		case <-tick.C:
			log.Warn("child progress", "executions", executions.Load())
			if parent != 0 && os.Getppid() != parent {
				log.Error("parent process gone; stopping")
				cancelRun()
			}
		}
	}
}

// pgClusterHandlers registers the kinds of the three-process test. Every
// attempt first claims the job in overlap_guard (primary key job_id) and
// counts itself in execs; a unique violation on the claim means another
// worker is running the same job right now, and is recorded in overlaps.
func pgClusterHandlers(w *redrive.Worker, guard *pgxpool.Pool, schema, id string, executions *atomic.Int64) {
	s := pgx.Identifier{schema}.Sanitize()
	claim := `WITH g AS (INSERT INTO ` + s + `.overlap_guard(job_id, worker) VALUES ($1, $2) RETURNING job_id)
		INSERT INTO ` + s + `.execs(job_id, n) SELECT job_id, 1 FROM g
		ON CONFLICT (job_id) DO UPDATE SET n = execs.n + 1`
	count := `INSERT INTO ` + s + `.execs(job_id, n) VALUES ($1, 1) ON CONFLICT (job_id) DO UPDATE SET n = execs.n + 1`
	overlap := `INSERT INTO ` + s + `.overlaps(job_id, worker, attempt, holder)
		VALUES ($1, $2, $3, (SELECT worker FROM ` + s + `.overlap_guard WHERE job_id = $1))`
	release := `DELETE FROM ` + s + `.overlap_guard WHERE job_id = $1 AND worker = $2`

	run := func(kind string, outcome func(j *redrive.Job, a pgArgs) error) {
		redrive.Handle(w, kind, func(ctx context.Context, j *redrive.Job, a pgArgs) error {
			executions.Add(1)
			bg := context.WithoutCancel(ctx)
			owned := true
			if _, err := guard.Exec(bg, claim, j.ID, id); err != nil {
				var pe *pgconn.PgError
				if !errors.As(err, &pe) || pe.Code != "23505" {
					return fmt.Errorf("test harness: overlap guard: %w", err)
				}
				owned = false
				if _, err := guard.Exec(bg, overlap, j.ID, id, j.Attempt); err != nil {
					return fmt.Errorf("test harness: recording an overlap: %w", err)
				}
				if _, err := guard.Exec(bg, count, j.ID); err != nil {
					return fmt.Errorf("test harness: counting: %w", err)
				}
			}
			time.Sleep(pgClusterPause())
			res := outcome(j, a)
			if owned {
				if _, err := guard.Exec(bg, release, j.ID, id); err != nil {
					return fmt.Errorf("test harness: releasing the overlap guard: %w", err)
				}
			}
			return res
		})
	}
	pgOutcomes(run, func(j *redrive.Job, a pgArgs) bool { return j.Attempt <= a.Fails })
}

// pgClusterPause is a handler's work: up to 1.5ms, or the duration in
// REDRIVE_PGCLUSTER_PAUSE (for the negative control, with
// REDRIVE_PGCLUSTER_LEASE shorter than it).
func pgClusterPause() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("REDRIVE_PGCLUSTER_PAUSE")); err == nil && d > 0 {
		return d
	}
	return time.Duration(mrand.IntN(1500)) * time.Microsecond
}

// pgOutcomes registers the four kinds through run: ok completes, flaky
// fails transiently while failing(job) and then completes, permanent dies
// at once, poison fails transiently forever.
func pgOutcomes(run func(kind string, outcome func(*redrive.Job, pgArgs) error), failing func(*redrive.Job, pgArgs) bool) {
	run("ok", func(*redrive.Job, pgArgs) error { return nil })
	run("flaky", func(j *redrive.Job, a pgArgs) error {
		if failing(j, a) {
			return redrive.Transient(fmt.Errorf("flaky job %d: attempt %d fails", j.ID, j.Attempt))
		}
		return nil
	})
	run("permanent", func(j *redrive.Job, _ pgArgs) error {
		return redrive.Permanent(fmt.Errorf("job %d can never succeed", j.ID))
	})
	run("poison", func(j *redrive.Job, _ pgArgs) error {
		return redrive.Transient(fmt.Errorf("poison job %d always fails", j.ID))
	})
}

// pgRestartHandlers registers the kinds of the restart test: no database
// access in handlers, so the outage only affects the engine. A flaky job
// fails while its retry count is below Fails (a lease_expired retry
// counts, as in the crash test).
func pgRestartHandlers(w *redrive.Worker, executions *atomic.Int64) {
	run := func(kind string, outcome func(j *redrive.Job, a pgArgs) error) {
		redrive.Handle(w, kind, func(ctx context.Context, j *redrive.Job, a pgArgs) error {
			executions.Add(1)
			select {
			case <-time.After(time.Duration(20+mrand.IntN(40)) * time.Millisecond):
			case <-ctx.Done():
			}
			return outcome(j, a)
		})
	}
	pgOutcomes(run, func(j *redrive.Job, a pgArgs) bool { return j.RetryCount < a.Fails })
}

// pgJobMix returns n requests: 70% ok, 15% flaky (1 or 2 failures), 10%
// permanent, 5% poison, shuffled by rnd.
func pgJobMix(n int, rnd *mrand.Rand, fixedFails int) []redrive.Request {
	reqs := make([]redrive.Request, n)
	for i := range reqs {
		a := pgArgs{I: i}
		var kind string
		switch r := rnd.IntN(100); {
		case r < 70:
			kind = "ok"
		case r < 85:
			kind = "flaky"
			a.Fails = 1 + rnd.IntN(2)
			if fixedFails > 0 {
				a.Fails = fixedFails
			}
		case r < 95:
			kind = "permanent"
		default:
			kind = "poison"
		}
		reqs[i] = redrive.Request{Kind: kind, Payload: a}
	}
	return reqs
}

func pgEnqueue(t *testing.T, c *redrive.Client, reqs []redrive.Request) map[int64]pgArgs {
	t.Helper()
	want := make(map[int64]pgArgs, len(reqs))
	for i := 0; i < len(reqs); i += 1000 {
		jobs, err := c.EnqueueMany(context.Background(), reqs[i:min(i+1000, len(reqs))])
		if err != nil {
			t.Fatal(err)
		}
		for k, j := range jobs {
			a := reqs[i+k].Payload.(pgArgs)
			want[j.ID] = a
		}
	}
	return want
}

// pgChild is a running child worker process.
type pgChild struct {
	id     string
	cmd    *exec.Cmd
	log    string
	exited chan error
}

func startPgChildren(t *testing.T, n int, schema, mode string) []*pgChild {
	t.Helper()
	var children []*pgChild
	for i := range n {
		ch := &pgChild{id: fmt.Sprintf("%s-child-%d", mode, i), exited: make(chan error, 1)}
		ch.log = filepath.Join(t.TempDir(), ch.id+".log")
		out, err := os.Create(ch.log)
		if err != nil {
			t.Fatal(err)
		}
		ch.cmd = exec.Command(os.Args[0], "-test.run=^TestPostgresClusterChild$", "-test.count=1")
		ch.cmd.Env = append(os.Environ(), pgChildSchemaEnv+"="+schema, pgChildIDEnv+"="+ch.id, pgChildModeEnv+"="+mode,
			pgChildParentEnv+"="+strconv.Itoa(os.Getpid()))
		ch.cmd.Stdout, ch.cmd.Stderr = out, out
		if err := ch.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { ch.exited <- ch.cmd.Wait(); out.Close() }()
		children = append(children, ch)
		t.Cleanup(func() { ch.stop(t) }) // no-op when already stopped
	}
	return children
}

// stop sends SIGTERM and waits for a clean exit; it reports whether the
// child exited cleanly.
func (ch *pgChild) stop(t *testing.T) bool {
	if ch.cmd.ProcessState != nil {
		return ch.cmd.ProcessState.Success()
	}
	ch.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-ch.exited:
		if err != nil {
			t.Errorf("child %s: %v\n%s", ch.id, err, ch.tail(40))
			return false
		}
		return true
	case <-time.After(45 * time.Second):
		ch.cmd.Process.Kill()
		<-ch.exited
		t.Errorf("child %s did not stop within 45s of SIGTERM\n%s", ch.id, ch.tail(40))
		return false
	}
}

func (ch *pgChild) tail(n int) string {
	b, _ := os.ReadFile(ch.log)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// pgLogSummary is what a child's JSON log says.
type pgLogSummary struct {
	levels     map[string]int
	messages   map[string]int // "LEVEL message" -> count, for warnings and errors
	executions int64          // from the last progress or done line
	before     int64          // executions logged before the given time
	resumed    time.Duration  // from the given time to the first progress line showing more executions
	samples    []string       // first error lines
}

func (ch *pgChild) summary(t *testing.T, before time.Time) pgLogSummary {
	s := pgLogSummary{levels: map[string]int{}, messages: map[string]int{}}
	f, err := os.Open(ch.log)
	if err != nil {
		t.Error(err)
		return s
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var rec struct {
			Time       time.Time `json:"time"`
			Level      string    `json:"level"`
			Msg        string    `json:"msg"`
			Executions *int64    `json:"executions"`
		}
		if json.Unmarshal(sc.Bytes(), &rec) != nil || rec.Level == "" {
			continue // the test framework's own lines
		}
		if rec.Msg == "child progress" || rec.Msg == "child done" {
			if rec.Executions != nil {
				s.executions = *rec.Executions
				if rec.Time.Before(before) {
					s.before = *rec.Executions
				} else if s.resumed == 0 && *rec.Executions > s.before {
					s.resumed = rec.Time.Sub(before)
				}
			}
			continue
		}
		s.levels[rec.Level]++
		if rec.Level == "WARN" || rec.Level == "ERROR" {
			s.messages[rec.Level+" "+rec.Msg]++
		}
		if rec.Level == "ERROR" && len(s.samples) < 3 {
			s.samples = append(s.samples, sc.Text())
		}
	}
	return s
}

func (s pgLogSummary) String() string {
	keys := make([]string, 0, len(s.messages))
	for k := range s.messages {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	fmt.Fprintf(&b, "levels %v", s.levels)
	for _, k := range keys {
		fmt.Fprintf(&b, "; %q x%d", k, s.messages[k])
	}
	return b.String()
}

var pgActive = redrive.Filter{States: []redrive.State{redrive.Pending, redrive.Scheduled, redrive.Running}}

// pgWaitDrained polls until no job is pending, scheduled or running. Query
// errors (a restarting server) are retried. It fails the test when a child
// exits early or when no job has finished for stall: a liveness bound on
// progress, not on the whole run, which on a loaded machine takes as long
// as it takes (a bound of 100 s on the whole failed with 1,333 of 20,000
// jobs left while they were still finishing).
func pgWaitDrained(t *testing.T, c *redrive.Client, children []*pgChild, stall time.Duration, tick func(remaining int64)) {
	t.Helper()
	left, moved := int64(-1), time.Now()
	for {
		n, err := c.Count(context.Background(), pgActive)
		if err == nil {
			if tick != nil {
				tick(n)
			}
			if n == 0 {
				return
			}
			if left < 0 || n < left {
				left, moved = n, time.Now()
			}
		}
		for _, ch := range children {
			select {
			case err := <-ch.exited:
				ch.exited <- err
				t.Fatalf("child %s exited while jobs remained: %v\n%s", ch.id, err, ch.tail(40))
			default:
			}
		}
		if time.Since(moved) > stall {
			running, _ := c.List(context.Background(), redrive.Filter{States: []redrive.State{redrive.Running}}, store.Page{Limit: 5})
			for _, j := range running.Jobs {
				t.Logf("still running: job %d kind %s attempt %d worker %s lease until %v", j.ID, j.Kind, j.Attempt, j.Worker, j.LeaseUntil)
			}
			t.Fatalf("%d jobs still pending, scheduled or running, none finished for %v (last error %v)", n, stall, err)
		}
		time.Sleep(100 * time.Millisecond) // the poll's interval: it waits for the count, not for time
	}
}

// pgVerdict compares every job with what its kind dictates and returns
// the number of jobs completed and dead, and the lease_expired rescues.
type pgVerdict struct {
	completed, dead, rescued int64
	byKind                   map[string]int
	jobs                     map[int64]*redrive.Job
}

func pgCheckJobs(t *testing.T, c *redrive.Client, want map[int64]pgArgs, retries int, exact bool) pgVerdict {
	t.Helper()
	v := pgVerdict{byKind: map[string]int{}, jobs: map[int64]*redrive.Job{}}
	page := store.Page{Limit: store.MaxPageSize}
	bad := 0
	errorf := func(format string, args ...any) {
		bad++
		if bad <= 20 {
			t.Errorf(format, args...)
		}
	}
	for {
		res, err := c.List(context.Background(), redrive.Filter{}, page)
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range res.Jobs {
			v.jobs[j.ID] = j
			a, ok := want[j.ID]
			if !ok {
				errorf("unexpected job %d (%s)", j.ID, j.Kind)
				continue
			}
			v.byKind[j.Kind]++
			rescued := 0
			completions, deaths := 0, 0
			for _, ev := range j.History {
				if ev.Reason == "lease_expired" || ev.Reason == redrive.ReasonWorkerGone {
					rescued++
				}
				switch ev.Kind {
				case store.EventCompleted:
					completions++
				case store.EventDead:
					deaths++
				}
			}
			v.rescued += int64(rescued)
			if deaths > 1 || completions > 1 {
				errorf("job %d (%s) recorded %d deaths and %d completions", j.ID, j.Kind, deaths, completions)
			}
			switch j.State {
			case redrive.Completed:
				v.completed++
			case redrive.Dead:
				v.dead++
			}
			switch j.Kind {
			case "ok", "flaky":
				if j.State != redrive.Completed {
					errorf("job %d (%s, fails %d) ended %s after %d attempts, reason %q, last error %q", j.ID, j.Kind, a.Fails, j.State, j.Attempt, j.DeadReason, j.LastError)
					continue
				}
				wantAttempts := 1 + a.Fails
				if exact && j.Attempt != wantAttempts {
					errorf("job %d (%s, fails %d) completed at attempt %d, want %d", j.ID, j.Kind, a.Fails, j.Attempt, wantAttempts)
				}
				if !exact && j.RetryCount < a.Fails {
					errorf("job %d (%s, fails %d) completed with retry_count %d", j.ID, j.Kind, a.Fails, j.RetryCount)
				}
			case "permanent":
				if j.State != redrive.Dead || j.DeadReason != retry.ReasonPermanent {
					errorf("job %d (permanent) ended %s, reason %q, attempt %d", j.ID, j.State, j.DeadReason, j.Attempt)
				} else if exact && j.Attempt != 1 {
					errorf("job %d (permanent) died at attempt %d, want 1", j.ID, j.Attempt)
				}
			case "poison":
				if j.State != redrive.Dead || j.DeadReason != retry.ReasonExhausted || j.Attempt != retries+1 {
					errorf("job %d (poison) ended %s, reason %q, attempt %d; want dead, %s, attempt %d", j.ID, j.State, j.DeadReason, j.Attempt, retry.ReasonExhausted, retries+1)
				}
			default:
				errorf("job %d has unexpected kind %q", j.ID, j.Kind)
			}
		}
		if res.Next == "" {
			break
		}
		page.Cursor = res.Next
	}
	if len(v.jobs) != len(want) {
		t.Errorf("%d jobs in the store, want %d: jobs were lost", len(v.jobs), len(want))
	}
	if bad > 20 {
		t.Errorf("... and %d more wrong jobs", bad-20)
	}
	return v
}

// pgCheckCounters: outcomes add to the counters only when applied, so the
// counters match the jobs exactly unless an outcome was applied twice.
func pgCheckCounters(t *testing.T, c *redrive.Client, v pgVerdict) map[string]int64 {
	t.Helper()
	stats, err := c.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ctr := stats.Counters[redrive.DefaultQueue]
	var dead int64
	for k, n := range ctr {
		if strings.HasPrefix(k, store.StatDead+".") {
			dead += n
		}
	}
	if ctr[store.StatSucceeded] != v.completed || dead != v.dead {
		t.Errorf("counters succeeded=%d dead=%d, jobs completed=%d dead=%d: an outcome was applied twice (or lost)",
			ctr[store.StatSucceeded], dead, v.completed, v.dead)
	}
	if ctr[store.StatRescued] != v.rescued {
		t.Errorf("rescued counter %d, lease_expired and worker_gone events %d", ctr[store.StatRescued], v.rescued)
	}
	return ctr
}

func TestPostgresThreeWorkerProcesses(t *testing.T) {
	url := pgTestURL(t)
	if testing.Short() {
		t.Skip("multi-process PostgreSQL test skipped in -short mode")
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("REDRIVE_PGCLUSTER_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d (set REDRIVE_PGCLUSTER_SEED to replay the job mix)", seed)
	st, schema := pgFreshSchema(t, url, "redrive_pgcluster_")
	ctx := context.Background()
	s := pgx.Identifier{schema}.Sanitize()
	for _, ddl := range []string{
		`CREATE TABLE ` + s + `.overlap_guard (job_id bigint PRIMARY KEY, worker text NOT NULL)`,
		`CREATE TABLE ` + s + `.execs (job_id bigint PRIMARY KEY, n int NOT NULL)`,
		`CREATE TABLE ` + s + `.overlaps (job_id bigint NOT NULL, worker text NOT NULL, attempt int NOT NULL, holder text, at timestamptz NOT NULL DEFAULT now())`,
	} {
		if _, err := st.Pool().Exec(ctx, ddl); err != nil {
			t.Fatal(err)
		}
	}
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quietLogger()})

	t0 := time.Now()
	want := pgEnqueue(t, c, pgJobMix(pgClusterJobs, mrand.New(mrand.NewPCG(seed, 2)), 0))
	t.Logf("enqueued %d jobs in 20 batches in %v", len(want), time.Since(t0).Round(time.Millisecond))

	start := time.Now()
	children := startPgChildren(t, 3, schema, "cluster")
	last := time.Now()
	pgWaitDrained(t, c, children, time.Minute, func(n int64) {
		if time.Since(last) >= 5*time.Second {
			last = time.Now()
			t.Logf("%v: %d jobs left", time.Since(start).Round(time.Second), n)
		}
	})
	elapsed := time.Since(start)
	for _, ch := range children {
		if !ch.stop(t) {
			t.FailNow()
		}
	}

	v := pgCheckJobs(t, c, want, pgClusterRetries, true)
	ctr := pgCheckCounters(t, c, v)

	// No job ran in two places at once.
	rows, err := st.Pool().Query(ctx, `SELECT job_id, worker, attempt, coalesce(holder, '') FROM `+s+`.overlaps ORDER BY job_id LIMIT 20`)
	if err != nil {
		t.Fatal(err)
	}
	overlaps := 0
	for rows.Next() {
		var id int64
		var worker, holder string
		var attempt int
		if err := rows.Scan(&id, &worker, &attempt, &holder); err != nil {
			t.Fatal(err)
		}
		overlaps++
		t.Errorf("OVERLAP: job %d (%s) attempt %d started on %s while %s was running it", id, v.jobs[id].Kind, attempt, worker, holder)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var guardLeft int
	if err := st.Pool().QueryRow(ctx, `SELECT count(*) FROM `+s+`.overlap_guard`).Scan(&guardLeft); err != nil {
		t.Fatal(err)
	}
	if guardLeft != 0 {
		t.Errorf("%d overlap_guard rows left: a handler did not finish", guardLeft)
	}

	// Executions per job: exactly what the kind dictates. More is an
	// at-least-once duplicate, acceptable only after a lease expired,
	// which must not happen here.
	execs := map[int64]int{}
	rows, err = st.Pool().Query(ctx, `SELECT job_id, n FROM `+s+`.execs`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id int64
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			t.Fatal(err)
		}
		execs[id] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var duplicates, missing, totalExecs int
	for id, a := range want {
		j := v.jobs[id]
		if j == nil {
			continue
		}
		expect := 1
		switch j.Kind {
		case "flaky":
			expect = 1 + a.Fails
		case "poison":
			expect = pgClusterRetries + 1
		}
		n := execs[id]
		totalExecs += n
		switch {
		case n > expect:
			duplicates++
			if duplicates <= 10 {
				t.Errorf("DUPLICATE: job %d (%s) executed %d times, want %d (attempt %d, history %d events)", id, j.Kind, n, expect, j.Attempt, len(j.History))
			}
		case n < expect:
			missing++
			if missing <= 10 {
				t.Errorf("job %d (%s) executed %d times, want %d", id, j.Kind, n, expect)
			}
		}
	}
	if v.rescued != 0 {
		t.Errorf("%d leases expired and were rescued; none should with a 10s lease", v.rescued)
	}

	// How the work was split.
	var split []string
	for _, ch := range children {
		sum := ch.summary(t, time.Time{})
		split = append(split, fmt.Sprintf("%s %d (%.1f%%)", ch.id, sum.executions, 100*float64(sum.executions)/float64(max(totalExecs, 1))))
		if sum.executions == 0 {
			t.Errorf("child %s executed no job", ch.id)
		}
		if sum.levels["ERROR"] > 0 {
			t.Errorf("child %s logged %d errors: %s\n%s", ch.id, sum.levels["ERROR"], sum, strings.Join(sum.samples, "\n"))
		} else {
			t.Logf("child %s log: %s", ch.id, sum)
		}
	}
	t.Logf("%d jobs (%v) by 3 processes x %d handlers in %v: %.0f jobs/s, %.0f executions/s; %d executions: %s",
		len(want), v.byKind, pgChildConc, elapsed.Round(time.Millisecond), float64(len(want))/elapsed.Seconds(),
		float64(totalExecs)/elapsed.Seconds(), totalExecs, strings.Join(split, ", "))
	t.Logf("completed %d, dead %d; counters succeeded=%d dead.permanent=%d dead.transient=%d retried=%d; overlaps %d, at-least-once duplicates %d, rescued %d",
		v.completed, v.dead, ctr[store.StatSucceeded], ctr["dead.permanent"], ctr["dead.transient"], ctr[store.StatRetried], overlaps, duplicates, v.rescued)
}

func TestPostgresRestart(t *testing.T) {
	url := pgTestURL(t)
	if os.Getenv(pgRestartEnv) != "1" {
		t.Skip(pgRestartEnv + "=1 is not set: this test restarts the shared PostgreSQL server, so it runs only on request " +
			"and alone (CI runs it as a separate step: " + pgRestartEnv + "=1 go test -count=1 -run '^TestPostgresRestart$' .)")
	}
	versions, err := os.ReadDir("/etc/postgresql")
	if err != nil || len(versions) == 0 {
		t.Fatalf("no cluster under /etc/postgresql to restart: %v", err)
	}
	st, schema := pgFreshSchema(t, url, "redrive_pgrestart_")
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quietLogger()})
	rnd := mrand.New(mrand.NewPCG(uint64(time.Now().UnixNano()), 3))
	want := pgEnqueue(t, c, pgJobMix(pgRestartJobs, rnd, 2))

	start := time.Now()
	children := startPgChildren(t, 2, schema, "restart")

	// Partway through, restart the server (phase 1), then, later, stop it
	// for longer than the 2s lease and start it again (phase 2), so that
	// leases expire and are rescued, and outcomes recorded late are fenced.
	pgWaitFinished(t, c, start, pgRestartJobs/5)
	backAt := []time.Time{ // when each outage was over
		pgOutage(t, url, "restart", "pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql | head -1) main restart"),
	}
	if pgWaitFinished(t, c, start, pgRestartJobs*55/100) > pgRestartJobs*85/100 {
		t.Log("phase 2 skipped: fewer than 15% of the jobs left after the restart")
	} else {
		backAt = append(backAt, pgOutage(t, url, "stop, 3s, start",
			"v=$(ls /etc/postgresql | head -1) && pg_ctlcluster --skip-systemctl-redirect $v main stop && sleep 3 && pg_ctlcluster --skip-systemctl-redirect $v main start"))
	}

	pgWaitDrained(t, c, children, 2*time.Minute, nil)
	elapsed := time.Since(start)
	for _, ch := range children {
		ch.stop(t)
	}

	v := pgCheckJobs(t, c, want, pgRestartRetries, false)
	ctr := pgCheckCounters(t, c, v)
	t.Logf("%d jobs (%v) in %v: completed %d, dead %d; counters succeeded=%d retried=%d rescued=%d (lease_expired events %d)",
		len(want), v.byKind, elapsed.Round(time.Millisecond), v.completed, v.dead, ctr[store.StatSucceeded], ctr[store.StatRetried], ctr[store.StatRescued], v.rescued)

	// The workers resumed by themselves: each executed jobs after each
	// outage was over. Their logs show what they went through.
	for _, ch := range children {
		var after []string
		var sum pgLogSummary
		for i, at := range backAt {
			sum = ch.summary(t, at)
			after = append(after, fmt.Sprintf("%d after outage %d, executing again within %v of the server accepting connections", sum.executions-sum.before, i+1, sum.resumed.Round(time.Millisecond)))
			if sum.executions <= sum.before {
				t.Errorf("child %s executed nothing after outage %d was over (%d executions before, %d in all): it did not resume", ch.id, i+1, sum.before, sum.executions)
			}
		}
		t.Logf("child %s: %d executions (%s); log: %s", ch.id, sum.executions, strings.Join(after, ", "), sum)
		for _, l := range sum.samples {
			t.Logf("  %s", l)
		}
	}
}

// pgWaitFinished waits until at least n jobs are completed or dead and
// returns how many are.
func pgWaitFinished(t *testing.T, c *redrive.Client, start time.Time, n int) int {
	t.Helper()
	finished := redrive.Filter{States: []redrive.State{redrive.Completed, redrive.Dead}}
	var got int64
	// The workers are other processes: the store is where their work shows.
	testwait.Watch(t, fmt.Sprintf("%d jobs finished", n), 90*time.Second-time.Since(start), func() (bool, string) {
		var err error
		got, err = c.Count(context.Background(), finished)
		return err == nil && got >= int64(n), fmt.Sprintf("%d finished (error %v)", got, err)
	})
	t.Logf("%d jobs finished after %v", got, time.Since(start).Round(time.Millisecond))
	return int(got)
}

// pgOutage runs script (bash) to take the server down and up again, waits
// until pg_isready, and logs how long connections were refused, as seen
// by a probe that opens a fresh connection every 20ms. It returns when the
// probe first connected again.
func pgOutage(t *testing.T, url, name, script string) (up time.Time) {
	t.Helper()
	probeCtx, stopProbe := context.WithCancel(context.Background())
	type window struct{ down, up time.Time }
	probed := make(chan window, 1)
	connected := make(chan struct{}, 1) // sent on after each probe that connected
	go func() {
		var w window
		for probeCtx.Err() == nil {
			cctx, cancel := context.WithTimeout(probeCtx, 500*time.Millisecond)
			conn, err := pgx.Connect(cctx, url)
			if err == nil {
				_, err = conn.Exec(cctx, "SELECT 1")
				conn.Close(cctx)
			}
			cancel()
			now := time.Now()
			if err != nil && probeCtx.Err() == nil && w.down.IsZero() {
				w.down = now
			}
			if err == nil && !w.down.IsZero() && w.up.IsZero() {
				w.up = now
			}
			if err == nil {
				select {
				case connected <- struct{}{}:
				default:
				}
			}
			time.Sleep(20 * time.Millisecond) // real time: the probe's period, the resolution of the outage measured
		}
		probed <- w
	}()
	began := time.Now()
	out, err := exec.Command("bash", "-c", script).CombinedOutput()
	took := time.Since(began)
	if err != nil {
		stopProbe()
		t.Fatalf("%s failed after %v: %v\n%s", name, took, err, out)
	}
	isReady := time.NewTicker(100 * time.Millisecond)
	defer isReady.Stop()
	for i := 0; exec.Command("pg_isready", "-h", "127.0.0.1", "-p", "5432", "-q").Run() != nil; i++ {
		if i > 600 {
			stopProbe()
			t.Fatalf("PostgreSQL does not accept connections 60s after %s", name)
		}
		<-isReady.C
	}
	ready := time.Since(began)
	// The probe's next connection after pg_isready: it saw the server up.
	select {
	case <-connected:
	default:
	}
	select {
	case <-connected:
	case <-time.After(30 * time.Second):
		t.Errorf("the probe did not connect within 30s of pg_isready after %s", name)
	}
	stopProbe()
	w := <-probed
	outage := "not observed by the 20ms probe"
	if !w.down.IsZero() && !w.up.IsZero() {
		outage = fmt.Sprintf("%v (from +%v)", w.up.Sub(w.down).Round(time.Millisecond), w.down.Sub(began).Round(time.Millisecond))
	}
	t.Logf("PostgreSQL %s: command took %v, pg_isready after %v; connections refused for %s", name, took.Round(time.Millisecond), ready.Round(time.Millisecond), outage)
	if w.up.IsZero() {
		return began.Add(ready)
	}
	return w.up
}
