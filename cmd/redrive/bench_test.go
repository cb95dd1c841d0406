package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/bench"
	"github.com/redrivehq/redrive/store"
)

// benchJSON runs a bench workload with --json and decodes its result.
// The tests check that the bench reports correct figures, not that it is
// fast: the run has no deadline of its own (runCLI's 30 s failed them on
// a loaded machine). A bench whose jobs stop moving ends itself after its
// stall timeout (bench.DefaultStallTimeout, measured from the last job
// that progressed), and go test's -timeout bounds the rest.
func benchJSON[T any](t *testing.T, args ...string) *T {
	t.Helper()
	args = append([]string{"--json", "bench"}, args...)
	args = append(args, "--db-dir", t.TempDir())
	var out, errOut bytes.Buffer
	err := run(t.Context(), args, &out, &errOut)
	stdout, stderr := out.String(), errOut.String()
	if err != nil {
		t.Fatalf("redrive %s: %v\nstderr: %s\nstdout: %s", strings.Join(args, " "), err, stderr, stdout)
	}
	var res T
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		t.Fatalf("redrive %s: output is not one JSON object: %v\n%s", strings.Join(args, " "), err, stdout)
	}
	return &res
}

func checkMeta(t *testing.T, m bench.Meta, workload string) {
	t.Helper()
	if m.Workload != workload {
		t.Errorf("workload = %q, want %q", m.Workload, workload)
	}
	if m.Env.GoVersion == "" || m.Env.GOMAXPROCS < 1 || m.Elapsed <= 0 || m.DBBytes <= 0 {
		t.Errorf("meta incomplete: %+v", m)
	}
	if m.DBPath != "" {
		t.Errorf("database kept at %q without --keep", m.DBPath)
	}
}

func TestBenchThroughput(t *testing.T) {
	r := benchJSON[bench.ThroughputResult](t, "throughput", "-n", "200", "--workers", "20")
	checkMeta(t, r.Meta, "throughput")
	if r.Params.N != 200 || r.Params.Workers != 20 || r.Params.Synchronous != "full" || r.Params.InsertBatch != 1000 {
		t.Errorf("params = %+v", r.Params)
	}
	if r.StoreCompleted != 200 || r.StoreSucceeded != 200 || r.Handled != 200 {
		t.Errorf("completed: store %d, succeeded %d, handled %d; want 200", r.StoreCompleted, r.StoreSucceeded, r.Handled)
	}
	if r.Insert <= 0 || r.Work <= 0 || r.Durable < r.Work {
		t.Errorf("times: insert %s, work %s, durable %s", r.Insert, r.Work, r.Durable)
	}
	if r.InsertRate <= 0 || r.Rate <= 0 || r.DurableRate <= 0 || r.DurableRate > r.Rate {
		t.Errorf("rates: insert %v, work %v, durable %v", r.InsertRate, r.Rate, r.DurableRate)
	}
	if got := 200 / time.Duration(r.Work).Seconds(); got < r.Rate*0.999 || got > r.Rate*1.001 {
		t.Errorf("rate %v is not N / work (%v)", r.Rate, got)
	}
}

// TestBenchThroughputRecord: with --record every job completed with a
// "completed" event in its history; without it, none has one.
func TestBenchThroughputRecord(t *testing.T) {
	for _, record := range []bool{true, false} {
		args := []string{"throughput", "-n", "50", "--workers", "10", "--keep"}
		if record {
			args = append(args, "--record")
		}
		r := benchJSON[bench.ThroughputResult](t, args...)
		if r.Params.Record != record || r.StoreCompleted != 50 || r.DBPath == "" {
			t.Fatalf("--record=%v: params %+v, completed %d, db %q", record, r.Params, r.StoreCompleted, r.DBPath)
		}
		res := decode[redrive.ListResult](t, mustCLI(t, "--db", r.DBPath, "--json", "jobs", "ls", "--state", "completed", "--limit", "100"))
		if len(res.Jobs) != 50 {
			t.Fatalf("--record=%v: %d completed jobs listed, want 50", record, len(res.Jobs))
		}
		for _, l := range res.Jobs {
			j := decode[redrive.Job](t, mustCLI(t, "--db", r.DBPath, "--json", "jobs", "show", fmt.Sprint(l.ID)))
			if want := map[bool]int{true: 1, false: 0}[record]; len(j.History) != want ||
				(record && (j.History[0].Kind != store.EventCompleted || j.History[0].Reason != "http_200")) {
				t.Fatalf("--record=%v: job %d history %+v, want %d completed event(s)", record, j.ID, j.History, want)
			}
		}
	}
}

func TestBenchThroughputText(t *testing.T) {
	dir := t.TempDir()
	stdout, stderr, err := runCLI(t, "bench", "throughput", "-n", "100", "--synchronous", "normal", "--fetch-batch", "10",
		"--db-dir", dir, "--keep")
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	for _, want := range []string{"throughput  (go", "GOMAXPROCS=", "parameters:", "jobs          100", "fetch batch   10",
		"synchronous   normal", "results:", "insert            100 jobs in", "jobs/s", "store: completed  100 (succeeded counter 100)",
		"kept at " + dir} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
	dbs, _ := filepath.Glob(filepath.Join(dir, "redrive-bench-throughput-*", "redrive.db"))
	if len(dbs) != 1 {
		t.Errorf("--keep kept %v, want one database", dbs)
	}
}

func TestBenchDeletesDatabase(t *testing.T) {
	dir := t.TempDir()
	if _, stderr, err := runCLI(t, "bench", "throughput", "-n", "10", "--db-dir", dir); err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	left, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Errorf("database left behind in %s: %v", dir, left)
	}
}

func TestBenchFailure(t *testing.T) {
	r := benchJSON[bench.FailureResult](t, "failure", "-n", "200")
	checkMeta(t, r.Meta, "failure")
	if r.Params.N != 200 || r.Params.FailuresPerJob != 2 || r.Params.Jitter != "none" || r.Params.RetryInitial != bench.Duration(time.Millisecond) {
		t.Errorf("params = %+v", r.Params)
	}
	if r.Completed != 200 || r.Attempts != 600 {
		t.Errorf("handler: %d completed, %d attempts; want 200, 600", r.Completed, r.Attempts)
	}
	if r.StoreCompleted != 200 || r.StoreSucceededAfterRetry != 200 || r.StoreRetried != 400 || r.StoreAttempts != 600 ||
		r.StoreSucceeded != 200 || r.StoreDead != 0 {
		t.Errorf("store counters: %+v", r)
	}
	if r.Rate <= 0 || r.AttemptRate <= 0 || r.InsertRate <= 0 {
		t.Errorf("rates: %v jobs/s, %v attempts/s, insert %v", r.Rate, r.AttemptRate, r.InsertRate)
	}
	if ratio := r.AttemptRate / r.Rate; ratio < 2.99 || ratio > 3.01 {
		t.Errorf("attempts/s over jobs/s = %v, want 3", ratio)
	}
}

func TestBenchLateness(t *testing.T) {
	r := benchJSON[bench.LatenessResult](t, "lateness", "-n", "5", "--retry-delay", "50ms", "--interval", "5ms")
	checkMeta(t, r.Meta, "lateness")
	if r.Params.N != 5 || r.Params.RetryDelay != bench.Duration(50*time.Millisecond) || r.Params.Interval != bench.Duration(5*time.Millisecond) {
		t.Errorf("params = %+v", r.Params)
	}
	if r.Completed != 5 || r.StoreCompleted != 5 || r.StoreRetried != 5 || r.StoreSucceededAfterRetry != 5 {
		t.Errorf("counts: %+v", r)
	}
	for name, p := range map[string]bench.Percentiles{"due": r.Due, "since failure": r.SinceFailure, "pickup": r.Pickup} {
		if p.N != 5 || p.Min < 0 || p.P50 < p.Min || p.P99 < p.P50 || p.Max < p.P99 || p.Mean < p.Min || p.Mean > p.Max {
			t.Errorf("%s percentiles inconsistent: %+v", name, p)
		}
	}
	// The due time is the engine's failure time + the delay, after the
	// handler's own failure time: lateness since the failure is never
	// smaller (up to the store's microsecond rounding and clock reads).
	if r.SinceFailure.Min < r.Due.Min-bench.Duration(time.Millisecond) {
		t.Errorf("lateness since failure %s < lateness vs due %s", r.SinceFailure.Min, r.Due.Min)
	}
}

func TestBenchContinuous(t *testing.T) {
	r := benchJSON[bench.ContinuousResult](t, "continuous", "--duration", "1500ms", "--warmup", "300ms", "--producers", "2", "--batch", "50",
		"--burn-down", "2000", "--retry-every", "10", "--retry-delay", "10ms", "--retry-workers", "4", "--min-completed", "50")
	checkMeta(t, r.Meta, "continuous")
	if r.Params.Producers != 2 || r.Params.Batch != 50 || r.Params.Duration != bench.Duration(1500*time.Millisecond) || r.Params.MinCompleted != 50 {
		t.Errorf("params = %+v", r.Params)
	}
	// The window is made by timers, and lasts until it saw 50 jobs
	// complete and a probe's retry (under load, 1.2 s of a 1.5 s run saw
	// none): how long it lasted depends on the machine, what is checked
	// is that it was measured.
	if r.Steady <= 0 || r.SteadyCompleted < 50 || r.SteadyEnqueued <= 0 || r.Rate <= 0 || r.EnqueueRate <= 0 {
		t.Errorf("steady state: %+v", r)
	}
	if (r.Enqueued+r.Probes)%50 != 0 || r.StoreCompleted+r.Backlog != r.Enqueued || r.StoreCompleted != r.Completed || r.Backlog < 0 {
		t.Errorf("accounting: enqueued %d (+%d probes), completed %d (store %d), backlog %d", r.Enqueued, r.Probes, r.Completed, r.StoreCompleted, r.Backlog)
	}
	// One job in 10 is a probe: the producers' calls of 50 carry 5 each.
	if r.Probes == 0 || r.Probes*9 != r.Enqueued || r.ProbesDone != r.StoreProbesCompleted || r.ProbesDone > r.Probes {
		t.Errorf("probes: %d enqueued beside %d jobs, %d done (store %d)", r.Probes, r.Enqueued, r.ProbesDone, r.StoreProbesCompleted)
	}
	// A sample for each retry due within the window, however late it ran
	// (the worker waits for them before it stops).
	if r.RetryLateness.N == 0 || r.RetryLateness.N > int(r.ProbesDone) || r.RetrySinceFailure.N != r.RetryLateness.N {
		t.Errorf("retry lateness: %d and %d samples for %d retries", r.RetryLateness.N, r.RetrySinceFailure.N, r.ProbesDone)
	}
	if r.Params.BurnDown != 2000 || r.BurnDownRate <= 0 || r.RatioToBurnDown <= 0 || r.RatioToBurnDown != r.Rate/r.BurnDownRate {
		t.Errorf("burn-down: %d jobs, %v jobs/s, ratio %v (rate %v)", r.Params.BurnDown, r.BurnDownRate, r.RatioToBurnDown, r.Rate)
	}
}

func TestBenchDepth(t *testing.T) {
	r := benchJSON[bench.DepthResult](t, "depth", "--waiting", "3000", "--due", "300", "--compare", "1000")
	checkMeta(t, r.Meta, "depth")
	for _, run := range []*bench.DepthRun{&r.Run, r.Baseline} {
		if run == nil {
			t.Fatal("no baseline run")
		}
		if run.StoreCompleted != 300 || run.StoreScheduled != int64(run.Waiting) || run.Due != 300 {
			t.Errorf("run with %d waiting: %+v", run.Waiting, run)
		}
		if run.Rate <= 0 || run.InsertWaitingRate <= 0 || run.InsertDueRate <= 0 || run.Work <= 0 {
			t.Errorf("run with %d waiting: rates %+v", run.Waiting, run)
		}
		if run.MaxRSS <= 0 || run.MaxRSSWork <= 0 || run.MaxRSSWork > run.MaxRSS || run.MaxRSSInsert > run.MaxRSS || run.RSSSamples < 2 {
			t.Errorf("run with %d waiting: RSS %d (work %d, insert %d, %d samples)", run.Waiting, run.MaxRSS, run.MaxRSSWork, run.MaxRSSInsert, run.RSSSamples)
		}
	}
	if r.Run.Waiting != 3000 || r.Baseline.Waiting != 1000 {
		t.Errorf("waiting: run %d, baseline %d", r.Run.Waiting, r.Baseline.Waiting)
	}
	if want := r.Run.Rate / r.Baseline.Rate; r.RateRatio != want {
		t.Errorf("rate ratio %v, want %v", r.RateRatio, want)
	}
	// No baseline when it would repeat the run.
	r = benchJSON[bench.DepthResult](t, "depth", "--waiting", "10", "--due", "20", "--compare", "10")
	if r.Baseline != nil || r.RateRatio != 0 {
		t.Errorf("baseline run with --compare equal to --waiting: %+v", r.Baseline)
	}
}

// TestBenchDepthSpread spreads the waiting jobs: behind the default lead
// none becomes due; with a lead and a spread of a millisecond all do, run
// before the due jobs (they are due first), and are counted apart.
func TestBenchDepthSpread(t *testing.T) {
	r := benchJSON[bench.DepthResult](t, "depth", "--waiting", "500", "--due", "100", "--compare", "0", "--spread", "1h")
	if r.Params.Spread != bench.Duration(time.Hour) || r.Params.Lead != bench.Duration(bench.DefaultDepthLead) {
		t.Errorf("params: spread %v, lead %v", r.Params.Spread, r.Params.Lead)
	}
	if run := r.Run; run.WaitingRan != 0 || run.StoreCompleted != 100 || run.StoreScheduled != 500 {
		t.Errorf("spread over the hour after the lead: %+v", run)
	}
	r = benchJSON[bench.DepthResult](t, "depth", "--waiting", "200", "--due", "100", "--compare", "0", "--spread", "1ms", "--lead", "1ns")
	if run := r.Run; run.WaitingRan != 200 || run.StoreCompleted != 300 || run.StoreScheduled != 0 || run.Rate <= 0 {
		t.Errorf("waiting jobs all due before the due ones: %+v", run)
	}
	for _, args := range [][]string{{"--spread", "-1s"}, {"--spread", "1h", "--lead", "0s"}} {
		_, stderr, err := runCLI(t, append([]string{"bench", "depth", "--waiting", "1", "--due", "1"}, args...)...)
		if err == nil || !strings.Contains(stderr+err.Error(), "must") {
			t.Errorf("bench depth %v: %v, %q", args, err, stderr)
		}
	}
}

func TestBenchDLQ(t *testing.T) {
	r := benchJSON[bench.DLQResult](t, "dlq", "-n", "300", "--redrive", "100", "--pages", "2", "--repeat", "2")
	checkMeta(t, r.Meta, "dlq")
	if r.Redriven != 100 || r.StoreDead != 200 || r.RedriveRate <= 0 || r.FillRate <= 0 {
		t.Errorf("redriven %d, %d dead at the end, rates %v and %v", r.Redriven, r.StoreDead, r.RedriveRate, r.FillRate)
	}
	byName := map[string]bench.DLQTiming{}
	for _, tm := range r.Timings {
		byName[tm.Name] = tm
	}
	for name, rows := range map[string]int64{"list, first page": 50, "count": 300, "count by queue": 100, "groups (limit 200)": 60} {
		if tm, ok := byName[name]; !ok || tm.Rows != rows || tm.Calls < 1 || tm.P50 <= 0 {
			t.Errorf("%s: %+v, want %d rows", name, tm, rows)
		}
	}
}

// TestBenchRate: two worker processes on one SQLite file share a rate
// limit; the starts the store recorded keep to burst + rate·t in every
// window (the figure from the handlers' clocks is reported, not checked:
// it includes the machine's dispatch jitter).
func TestBenchRate(t *testing.T) {
	r := benchJSON[bench.RateResult](t, "rate", "--rate", "100/s", "--burst", "5", "--duration", "1s", "--processes", "2", "--workers", "4")
	checkMeta(t, r.Meta, "rate")
	if r.Starts < 1 || len(r.PerProcess) != 2 || r.Target != 100 || r.Params.Jobs < 100 {
		t.Errorf("rate result: %+v", r)
	}
	if r.StoreExcess > 1e-6 {
		t.Errorf("the store's starts went %v jobs over burst + rate·t in a window", r.StoreExcess)
	}
}

func TestBenchBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"throughput", "-n", "0"}, "-n must be at least 1"},
		{[]string{"throughput", "--tracing", "sometimes"}, `--tracing "sometimes": want off, always or a sampling ratio in (0, 1]`},
		{[]string{"throughput", "--tracing", "1.5"}, `--tracing "1.5": want off, always or a sampling ratio`},
		{[]string{"throughput", "--tracing", "off,off"}, `--tracing "off" given twice`},
		{[]string{"throughput", "--rounds", "0"}, "--rounds must be at least 1"},
		{[]string{"throughput", "--synchronous", "sometimes"}, `--synchronous must be full or normal, got "sometimes"`},
		{[]string{"failure", "--workers", "0"}, "--workers must be at least 1"},
		{[]string{"throughput", "--fetch-batch", "-1"}, "--fetch-batch must not be negative"},
		{[]string{"continuous", "--duration", "1s", "--warmup", "1s"}, "--duration (1s) must be longer than --warmup (1s)"},
		{[]string{"lateness", "--interval", "-1ms"}, "--interval must not be negative"},
		{[]string{"depth", "--due", "0"}, "--due must be at least 1"},
		{[]string{"dlq", "-n", "10", "--redrive", "11"}, "--redrive must be between 0 and -n, got 11"},
		{[]string{"throughput", "--db-dir", "/nonexistent/redrive"}, `--db-dir "/nonexistent/redrive" is not a directory`},
		{[]string{"lateness", "--processes", "2"}, "--processes needs --database-url"},
		{[]string{"throughput", "--processes", "-1", "--database-url", "postgres:///x"}, "--processes must not be negative"},
		{[]string{"failure", "--processes", "2"}, "unknown flag: --processes"},
		{[]string{"throughput", "--record", "--processes", "2", "--database-url", "postgres:///x"}, "--record runs the workers in this process"},
		{[]string{"worker", "--mode", "lateness"}, "--database-url and --schema"},
		{[]string{"rate", "--processes", "0"}, "--processes must be at least 1"},
		{[]string{"rate", "--rate", "0/s"}, "--rate"},
		{[]string{"rate", "--burst", "0"}, "--burst must be at least 1"},
		{[]string{"rate", "--duration", "0s"}, "--duration must be positive"},
		{[]string{"soak", "--duration", "1s", "--sample", "2s"}, "--sample (2s) must be positive and at most --duration (1s)"},
		{[]string{"soak", "--rate-fraction", "1.5"}, "--rate-fraction must be above 0 and at most 1"},
		{[]string{"soak", "--transient", "0.9", "--dead", "0.2"}, "--transient and --dead must be shares"},
		{[]string{"soak", "--periodic-every", "500ms"}, "--periodic-every must be at least 1s"},
	} {
		_, stderr, err := runCLI(t, append([]string{"bench"}, tc.args...)...)
		if err == nil {
			t.Errorf("%v: no error", tc.args)
			continue
		}
		if !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: stderr %q lacks %q", tc.args, stderr, tc.want)
		}
	}
}

// TestBenchThroughputTracing: --tracing alternates the modes, each round,
// and sums each mode's rate up against off, with the allocations and the
// burn-down's CPU time per job.
func TestBenchThroughputTracing(t *testing.T) {
	stdout, stderr, err := runCLI(t, "bench", "throughput", "-n", "50", "--workers", "10", "--tracing", "off,always,0.01", "--rounds", "2")
	if err != nil {
		t.Fatalf("%v\n%s\n%s", err, stdout, stderr)
	}
	if got := strings.Count(stdout, "store: completed  50 "); got != 6 {
		t.Errorf("%d burn-downs of 50 jobs completed, want 6:\n%s", got, stdout)
	}
	for _, want := range []string{"tracing       always", "tracing       0.01", "tracing: burn-down rate per mode",
		"  off     median ", "  always  median ", " of off  (runs: ", "allocs, ", " KiB, CPU ", " of off) per job"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
	if i, j := strings.Index(stdout, "tracing       always"), strings.LastIndex(stdout, "tracing       0.01"); i < 0 || j < i {
		t.Errorf("the modes did not alternate:\n%s", stdout)
	}
}
