package redrive_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/breaker"
	"github.com/redrivehq/redrive/retry"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/postgres"
	"github.com/redrivehq/redrive/store/sqlite"
)

// The fleet proofs of shared circuit breakers: worker processes (this test
// binary, re-executed) share one store and call one HTTP dependency, served
// by the test, which goes down for 20 s. The dependency counts the calls:
//
//   - after it went down, the fleet makes at most N + (processes - 1) calls
//     before every process stops calling it (N = 5, the default rule: the
//     dependency goes down after a busy spell whose successes keep the
//     window's failure ratio low, so the fleet's run of failures in a row
//     is what trips it);
//   - then exactly one call (the probe) per half-open period, fleet-wide;
//   - after it recovers, the first probe closes the breaker for every
//     process: no failed probe after the recovery, every process calls again.

const (
	fleetStoreEnv   = "REDRIVE_FLEET_STORE" // "sqlite:<path>" or "postgres:<schema>"
	fleetIDEnv      = "REDRIVE_FLEET_ID"
	fleetDepEnv     = "REDRIVE_FLEET_DEP"
	fleetParentEnv  = "REDRIVE_FLEET_PARENT"
	fleetLocalEnv   = "REDRIVE_FLEET_LOCAL" // "1": the negative control, breakers not shared
	fleetFailures   = 5
	fleetBreak      = 3 * time.Second
	fleetOutage     = 20 * time.Second
	fleetJobs       = 2000
	fleetPace       = 20 * time.Millisecond // a handler's own work before its call
	fleetDependency = "dep"
)

// fleetBreakerConfig is the children's breaker: the default rule (N
// failures making up half the calls within 30 s, or N failures in a row),
// with a short break so that several half-open periods fit in the outage.
func fleetBreakerConfig() breaker.Config {
	return breaker.Config{Failures: fleetFailures, BreakDuration: fleetBreak}
}

// fleetBusyCalls is how many successful calls the fleet makes before the
// outage: many more than N, so that the window's ratio alone would let
// dozens of failures through.
const fleetBusyCalls = 150

// TestFleetBreakerChild is a worker process of the fleet tests; it does
// nothing in a normal run. It works until SIGTERM or until its parent goes
// away.
func TestFleetBreakerChild(t *testing.T) {
	spec := os.Getenv(fleetStoreEnv)
	if spec == "" {
		return // only does something as a child process of the tests below
	}
	id, dep := os.Getenv(fleetIDEnv), os.Getenv(fleetDepEnv)
	parent, _ := strconv.Atoi(os.Getenv(fleetParentEnv))
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("child", id)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	var st store.Store
	var err error
	switch kind, arg, _ := strings.Cut(spec, ":"); kind {
	case "sqlite":
		st, err = sqlite.Open(ctx, arg, sqlite.Options{Logger: log})
	case "postgres":
		st, err = postgres.Open(ctx, os.Getenv(pgURLEnv), postgres.Options{Schema: arg, MaxConns: 4, Logger: log})
	default:
		t.Fatalf("unknown store %q", spec)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: log})
	p := retry.DefaultPolicy()
	p.MaxRetries, p.Initial, p.MaxDelay, p.Jitter = 100000, 10*time.Millisecond, 50*time.Millisecond, retry.JitterNone
	w := redrive.NewWorker(c, redrive.WorkerOptions{
		ID: id, Queues: map[string]int{redrive.DefaultQueue: 1}, Logger: log, Policy: &p,
		DisableRetryBudget: true, PollInterval: 100 * time.Millisecond,
		Breakers: breaker.NewRegistry(fleetBreakerConfig()), LocalBreakers: os.Getenv(fleetLocalEnv) == "1",
	})
	client := &http.Client{Timeout: 5 * time.Second}
	redrive.Handle(w, "call", func(ctx context.Context, _ *redrive.Job, _ struct{}) error {
		time.Sleep(fleetPace)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, dep, nil)
		if err != nil {
			return err
		}
		req.Header.Set("X-Process", id)
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("dependency answered %d", resp.StatusCode)
		}
		return nil
	}, redrive.UsesDependency(fleetDependency))

	runCtx, cancelRun := context.WithCancel(ctx)
	defer cancelRun()
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			return
		case <-tick.C:
			if parent != 0 && os.Getppid() != parent {
				cancelRun()
			}
		}
	}
}

// fleetCall is one call the dependency received.
type fleetCall struct {
	at      time.Time
	process string
	ok      bool
}

// fleetDep is the dependency: it answers 200, or 503 while down, and
// records every call.
type fleetDep struct {
	mu    sync.Mutex
	down  bool
	calls []fleetCall
}

func (d *fleetDep) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	d.mu.Lock()
	down := d.down
	d.calls = append(d.calls, fleetCall{at: time.Now(), process: r.Header.Get("X-Process"), ok: !down})
	d.mu.Unlock()
	if down {
		http.Error(w, "down", http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// setDown switches the dependency and returns how many calls it received
// until then.
func (d *fleetDep) setDown(down bool) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.down = down
	return len(d.calls)
}

func (d *fleetDep) snapshot() []fleetCall {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]fleetCall(nil), d.calls...)
}

// waitCalls waits until every process made a successful call at index from
// or later.
func (d *fleetDep) waitCalls(t *testing.T, procs []string, from int, what string) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		seen := map[string]bool{}
		for _, c := range d.snapshot()[from:] {
			if c.ok {
				seen[c.process] = true
			}
		}
		all := true
		for _, p := range procs {
			all = all && seen[p]
		}
		if all {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: after 90 s only %v of %v called the dependency successfully", what, seen, procs)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestFleetBreakerPostgres(t *testing.T) {
	if testing.Short() {
		t.Skip("a 20 s outage")
	}
	url := pgTestURL(t)
	st, schema := pgFreshSchema(t, url, "fleet_")
	testFleetBreaker(t, st, "postgres:"+schema, 3, url, false)
}

func TestFleetBreakerSQLite(t *testing.T) {
	if testing.Short() {
		t.Skip("a 20 s outage")
	}
	path := filepath.Join(t.TempDir(), "fleet.db")
	st, err := sqlite.Open(t.Context(), path, sqlite.Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	testFleetBreaker(t, st, "sqlite:"+path, 2, "", false)
}

// TestFleetBreakerLocalControl is the negative control of the proofs: with
// breakers kept to each process (WorkerOptions.LocalBreakers), each
// process makes its own N calls to the dead dependency, more than the
// fleet's limit, and the measurement sees it.
func TestFleetBreakerLocalControl(t *testing.T) {
	if testing.Short() {
		t.Skip("an outage of two breaks")
	}
	path := filepath.Join(t.TempDir(), "fleet.db")
	st, err := sqlite.Open(t.Context(), path, sqlite.Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	testFleetBreaker(t, st, "sqlite:"+path, 2, "", true)
}

func testFleetBreaker(t *testing.T, st store.Store, spec string, processes int, pgURL string, local bool) {
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quietLogger()})
	reqs := make([]redrive.Request, fleetJobs)
	for i := range reqs {
		reqs[i] = redrive.Request{Kind: "call", Payload: struct{}{}}
	}
	if _, err := c.EnqueueMany(t.Context(), reqs); err != nil {
		t.Fatal(err)
	}
	dep := &fleetDep{}
	srv := httptest.NewServer(dep)
	t.Cleanup(srv.Close)

	var procs []string
	var children []*exec.Cmd
	for i := range processes {
		id := fmt.Sprint("fleet-", i+1)
		procs = append(procs, id)
		cmd := exec.Command(os.Args[0], "-test.run=^TestFleetBreakerChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), fleetStoreEnv+"="+spec, fleetIDEnv+"="+id, fleetDepEnv+"="+srv.URL,
			fleetParentEnv+"="+strconv.Itoa(os.Getpid()))
		if pgURL != "" {
			cmd.Env = append(cmd.Env, pgURLEnv+"="+pgURL)
		}
		if local {
			cmd.Env = append(cmd.Env, fleetLocalEnv+"=1")
		}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		children = append(children, cmd)
		t.Cleanup(func() {
			cmd.Process.Signal(syscall.SIGTERM)
			cmd.Wait()
			if t.Failed() {
				t.Logf("%s stderr:\n%s", id, stderr.String())
			}
		})
	}

	dep.waitCalls(t, procs, 0, "before the outage")
	for deadline := time.Now().Add(90 * time.Second); len(dep.snapshot()) < fleetBusyCalls; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after 90 s only %d calls of the busy spell before the outage", len(dep.snapshot()))
		}
	}
	downAt := dep.setDown(true)
	outage := fleetOutage
	if local {
		outage = 2 * fleetBreak
	}
	time.Sleep(outage)
	upAt := dep.setDown(false)
	dep.waitCalls(t, procs, upAt, "after the recovery")
	for _, cmd := range children {
		cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, cmd := range children {
		cmd.Wait()
	}
	calls := dep.snapshot()

	// The calls during the outage, cut into bursts by pauses of half a
	// break: the first burst is the fleet's before every process stopped,
	// each later one a half-open period's probes.
	down := calls[downAt:upAt]
	var bursts [][]fleetCall
	for i, call := range down {
		if i == 0 || call.at.Sub(down[i-1].at) >= fleetBreak/2 {
			bursts = append(bursts, nil)
		}
		bursts[len(bursts)-1] = append(bursts[len(bursts)-1], call)
	}
	if len(bursts) == 0 {
		t.Fatal("no call during the outage")
	}
	limit := fleetFailures + processes - 1
	t.Logf("%d processes: %d calls during the outage: first burst %d (limit %d), then %d half-open periods", processes, len(down),
		len(bursts[0]), limit, len(bursts)-1)
	if local {
		// Each process trips its own breaker, after its own failures: each
		// makes at least fleetFailures calls during the outage (a shared
		// breaker would stop the fleet after fleetFailures in all).
		// Counted per process, not in the first burst: on a busy
		// machine one process's failures can be more than half a break
		// apart, which cut the burst in two.
		perProcess := map[string]int{}
		for _, call := range down {
			perProcess[call.process]++
		}
		for _, id := range procs {
			if perProcess[id] < fleetFailures {
				t.Errorf("breakers kept to each process: %s made %d calls during the outage, want its own %d (calls by process: %v)",
					id, perProcess[id], fleetFailures, perProcess)
			}
		}
		return
	}
	if len(bursts[0]) > limit {
		t.Errorf("the fleet made %d calls after the dependency went down before all stopped; the limit is N + (processes - 1) = %d: %v",
			len(bursts[0]), limit, bursts[0])
	}
	for i, b := range bursts[1:] {
		if len(b) != 1 {
			t.Errorf("half-open period %d: %d calls, want exactly one probe fleet-wide: %v", i+1, len(b), b)
		}
	}
	if len(bursts) < 3 {
		t.Errorf("only %d half-open periods in a %v outage with a %v break", len(bursts)-1, fleetOutage, fleetBreak)
	}
	// After the recovery: no failed call, and the fleet's breaker opened
	// once plus once per failed probe, never again.
	for _, call := range calls[upAt:] {
		if !call.ok {
			t.Fatalf("a call failed after the recovery: %v", call)
		}
	}
	fleet, err := st.Breaker(t.Context(), fleetDependency)
	if err != nil {
		t.Fatal(err)
	}
	if fleet.State != store.BreakerClosed {
		t.Errorf("fleet breaker after the recovery: %+v", fleet)
	}
	if want := int64(len(bursts)); fleet.Trips != want {
		t.Errorf("fleet breaker tripped %d times, want %d (the outage, then each failed probe)", fleet.Trips, want)
	}
	// The first call after the recovery is the single probe that closed
	// the breaker: every process resumed after it without another probe
	// (trips unchanged above), and the calls up to each process's first
	// one after it are that probe plus the prober's own.
	first := calls[upAt]
	t.Logf("probe after the recovery by %s; every process resumed; %d trips", first.process, fleet.Trips)
}
