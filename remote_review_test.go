package redrive_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/breaker"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/retry"
	"github.com/redrivehq/redrive/store"
)

// TestRemoteInflightBoundedWithoutOutcomes: a worker that leases a job
// and dies before reporting (a poison job crashing every worker that
// takes it) leaves its attempt in RemoteWorkers' memory. With no outcome
// ever reported, those attempts must still be forgotten once their
// leases expired, or serve grows without bound.
func TestRemoteInflightBoundedWithoutOutcomes(t *testing.T) {
	ctx := context.Background()
	clock := &fencingClock{t: time.Date(2026, 11, 29, 1, 0, 0, 0, time.UTC)}
	st := openStore(t)
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quietLogger()})
	redrive.SetClock(c, clock.now)
	p := retry.Policy{MaxRetries: 1_000_000, Initial: time.Second, Multiplier: 1, MaxDelay: time.Second, Jitter: retry.JitterNone}
	ex := redrive.NewExecutor(redrive.ExecutorOptions{ID: "serve", Policy: &p, Logger: quietLogger(), Now: clock.now, DisableRetryBudget: true})
	const lease = 10 * time.Second
	rw := redrive.NewRemoteWorkers(c, ex, redrive.RemoteOptions{LeaseDuration: lease, Logger: quietLogger()})
	if _, err := c.Enqueue(ctx, "k", nil, redrive.InQueue("q")); err != nil {
		t.Fatal(err)
	}
	const rounds = 50
	for i := range rounds {
		jobs, err := rw.Lease(ctx, redrive.LeaseRequest{RemoteIdentity: redrive.RemoteIdentity{Worker: "py-1@a"},
			Queues: []string{"q"}, Kinds: []string{"k"}, Max: 1})
		if err != nil {
			t.Fatal(err)
		}
		if len(jobs) != 1 {
			t.Fatalf("round %d: leased %d jobs, want 1", i, len(jobs))
		}
		// The worker crashes; its lease expires and is rescued.
		clock.add(lease + time.Second)
		now := clock.now()
		expired, err := st.Expired(ctx, now, 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range expired {
			o := ex.Fail(j, failure.Verdict{Class: failure.Transient, Reason: "lease_expired"}, "lease expired", now, now)
			o.Worker, o.ExpiredBy = j.Worker, now
			if ok, err := st.Finish(ctx, []store.Outcome{o}); err != nil || !ok[0] {
				t.Fatalf("round %d: rescue: %v %v", i, ok, err)
			}
		}
		clock.add(2 * time.Second) // the retry becomes due
	}
	// Every attempt but the last few expired more than two leases ago.
	if n := redrive.RemoteInflight(rw); n > 4 {
		t.Fatalf("FINDING: %d attempts kept in memory after %d leases that all expired unreported (want at most 4)", n, rounds)
	}
}

// TestRemoteKnownWorkersBounded: every remote worker name that leases is
// kept in RemoteWorkers' memory. Workers that go away without calling
// stop (a crash, a pod replaced: each new process has a new name) must
// be forgotten once they have not been heard of for long, or serve
// grows with every worker process that ever ran.
func TestRemoteKnownWorkersBounded(t *testing.T) {
	ctx := context.Background()
	clock := &fencingClock{t: time.Date(2026, 11, 29, 1, 0, 0, 0, time.UTC)}
	st := openStore(t)
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quietLogger()})
	redrive.SetClock(c, clock.now)
	ex := redrive.NewExecutor(redrive.ExecutorOptions{ID: "serve", Logger: quietLogger(), Now: clock.now})
	const lease = 10 * time.Second
	rw := redrive.NewRemoteWorkers(c, ex, redrive.RemoteOptions{LeaseDuration: lease, Logger: quietLogger()})
	j, err := c.Enqueue(ctx, "k", nil, redrive.InQueue("q"))
	if err != nil {
		t.Fatal(err)
	}
	const procs = 50
	for i := range procs {
		// A worker process starts, leases (nothing due), and dies.
		if _, err := rw.Lease(ctx, redrive.LeaseRequest{RemoteIdentity: redrive.RemoteIdentity{Worker: fmt.Sprintf("py-%d@pod-%d", i, i)},
			Queues: []string{"empty"}, Kinds: []string{"k"}, Max: 1}); err != nil {
			t.Fatal(err)
		}
		clock.add(time.Hour)
	}
	// A live worker does its work.
	jobs, err := rw.Lease(ctx, redrive.LeaseRequest{RemoteIdentity: redrive.RemoteIdentity{Worker: "py-live@pod"},
		Queues: []string{"q"}, Kinds: []string{"k"}, Max: 1})
	if err != nil || len(jobs) != 1 {
		t.Fatalf("lease: %d jobs, %v", len(jobs), err)
	}
	res, err := rw.Outcomes(ctx, "py-live@pod", []redrive.RemoteOutcome{{ID: j.ID, Lease: jobs[0].Lease, Kind: redrive.RemoteComplete}})
	if err != nil || res[0].Err != nil {
		t.Fatalf("outcome: %v %v", err, res)
	}
	if n := redrive.RemoteKnown(rw); n > 2 {
		t.Fatalf("FINDING: %d remote workers kept in memory, %d of them gone for an hour or more (want at most 2)", n, n-1)
	}
}

// finishFailsOnce is a store whose first Finish fails (a store briefly
// unreachable) without writing anything.
type finishFailsOnce struct {
	store.Store
	failed atomic.Bool
}

func (s *finishFailsOnce) Finish(ctx context.Context, outs []store.Outcome) ([]bool, error) {
	if s.failed.CompareAndSwap(false, true) {
		return nil, errors.New("store unreachable")
	}
	return s.Store.Finish(ctx, outs)
}

// TestRemoteOutcomeRetriedRecordsBreakerOnce: an outcome whose write
// failed is reported again by the worker (the protocol asks it to retry
// a 5xx). The attempt happened once: its breaker must count one failure,
// not one per try, or a single failure trips a breaker set to trip on
// two.
func TestRemoteOutcomeRetriedRecordsBreakerOnce(t *testing.T) {
	ctx := context.Background()
	st := &finishFailsOnce{Store: openStore(t)}
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quietLogger()})
	reg := breaker.NewRegistry(breaker.DefaultConfig())
	br := reg.Configure("dep", breaker.Config{Failures: 2, CountOnly: true, Window: time.Hour, BreakDuration: time.Hour})
	ex := redrive.NewExecutor(redrive.ExecutorOptions{ID: "serve", Breakers: reg, Logger: quietLogger(), DisableRetryBudget: true})
	rw := redrive.NewRemoteWorkers(c, ex, redrive.RemoteOptions{Logger: quietLogger()})
	j, err := c.Enqueue(ctx, "k", nil, redrive.InQueue("q"))
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := rw.Lease(ctx, redrive.LeaseRequest{RemoteIdentity: redrive.RemoteIdentity{Worker: "py-1@a"},
		Queues: []string{"q"}, Kinds: []string{"k"}, Dependencies: map[string]string{"k": "dep"}, Max: 1})
	if err != nil || len(jobs) != 1 {
		t.Fatalf("lease: %d jobs, %v", len(jobs), err)
	}
	out := []redrive.RemoteOutcome{{ID: j.ID, Lease: jobs[0].Lease, Kind: redrive.RemoteFail, Class: failure.Transient, Error: "503"}}
	if _, err := rw.Outcomes(ctx, "py-1@a", out); err == nil {
		t.Fatal("the first outcome's write did not fail")
	}
	res, err := rw.Outcomes(ctx, "py-1@a", out)
	if err != nil || res[0].Err != nil {
		t.Fatalf("retried outcome: %v %+v", err, res)
	}
	if s := br.Status(); s.State != breaker.Closed || s.Failures != 1 {
		t.Fatalf("FINDING: one failed attempt reported twice left the breaker %s with %d failures (want closed, 1)", s.State, s.Failures)
	}
}

// TestRemoteWorkerWithServePIDNotRescued: the Python and TypeScript
// clients send their pid and host name by default. In a Kubernetes pod
// (serve and a worker sidecar share the pod's host name, each has its
// own PID namespace, both often PID 1) serve takes the worker to run in
// its own PID namespace: a worker with serve's very PID is "replaced by
// this process", and its jobs are rescued while it runs them, to be
// handed out again: the job runs twice at once.
func TestRemoteWorkerWithServePIDNotRescued(t *testing.T) {
	host, err := os.Hostname()
	if err != nil || !strings.Contains(redrive.ProcessInstance(), "/") {
		t.Skip("no host name or PID namespace on this system")
	}
	ctx := context.Background()
	st := openStore(t)
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quietLogger()})
	ex := redrive.NewExecutor(redrive.ExecutorOptions{ID: "serve", Logger: quietLogger()})
	rw := redrive.NewRemoteWorkers(c, ex, redrive.RemoteOptions{LeaseDuration: time.Hour, Logger: quietLogger()})
	j, err := c.Enqueue(ctx, "k", nil, redrive.InQueue("q"))
	if err != nil {
		t.Fatal(err)
	}
	// The sidecar: same host name, PID 1 in its namespace as serve is in
	// its own (here: this process's PID).
	jobs, err := rw.Lease(ctx, redrive.LeaseRequest{RemoteIdentity: redrive.RemoteIdentity{Worker: "py-1@" + "sidecar", Host: host, PID: os.Getpid()},
		Queues: []string{"q"}, Kinds: []string{"k"}, Max: 1})
	if err != nil || len(jobs) != 1 {
		t.Fatalf("lease: %d jobs, %v", len(jobs), err)
	}
	// serve's Go worker (on another queue) runs its rescues.
	w := redrive.NewWorker(c, redrive.WorkerOptions{Queues: map[string]int{"other": 1}, Logger: quietLogger(),
		RescueInterval: 10 * time.Millisecond})
	w.HandleFunc("k", func(context.Context, *redrive.Job) error { return nil })
	rescued := redrive.RescueSignal(w)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	for range 3 {
		<-rescued
	}
	stop()
	<-done
	got, err := c.Get(ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != redrive.Running || got.Lease != jobs[0].Lease {
		t.Fatalf("FINDING: the remote worker's job was rescued while it ran: %s, lease %d (handed out %d)", got.State, got.Lease, jobs[0].Lease)
	}
}

// TestRemoteSidecarOtherPIDNotRescued: as above, with a sidecar whose
// pid is not serve's: that pid names no process in serve's PID
// namespace, so serve finds the worker gone and rescues the job it runs.
func TestRemoteSidecarOtherPIDNotRescued(t *testing.T) {
	host, err := os.Hostname()
	if err != nil || !strings.Contains(redrive.ProcessInstance(), "/") {
		t.Skip("no host name or PID namespace on this system")
	}
	// A pid that runs nothing here: a child's, once it exited.
	child := exec.Command("true")
	if err := child.Run(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	st := openStore(t)
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quietLogger()})
	ex := redrive.NewExecutor(redrive.ExecutorOptions{ID: "serve", Logger: quietLogger()})
	rw := redrive.NewRemoteWorkers(c, ex, redrive.RemoteOptions{LeaseDuration: time.Hour, Logger: quietLogger()})
	j, err := c.Enqueue(ctx, "k", nil, redrive.InQueue("q"))
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := rw.Lease(ctx, redrive.LeaseRequest{RemoteIdentity: redrive.RemoteIdentity{Worker: "py-7@sidecar", Host: host, PID: child.Process.Pid},
		Queues: []string{"q"}, Kinds: []string{"k"}, Max: 1})
	if err != nil || len(jobs) != 1 {
		t.Fatalf("lease: %d jobs, %v", len(jobs), err)
	}
	w := redrive.NewWorker(c, redrive.WorkerOptions{Queues: map[string]int{"other": 1}, Logger: quietLogger(),
		RescueInterval: 10 * time.Millisecond})
	w.HandleFunc("k", func(context.Context, *redrive.Job) error { return nil })
	rescued := redrive.RescueSignal(w)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	for range 3 {
		<-rescued
	}
	stop()
	<-done
	got, err := c.Get(ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != redrive.Running || got.Lease != jobs[0].Lease {
		t.Fatalf("FINDING: the sidecar's job was rescued while it ran: %s, lease %d (handed out %d)", got.State, got.Lease, jobs[0].Lease)
	}
}

// TestRemoteOtherDependencyFreesProbe: a job handed out with its kind's
// breaker half-open holds that breaker's one probe. When the worker
// reports a failure on another breaker, the probe it held must be
// returned; left out, the breaker refuses every call for a whole break
// and then, the probe presumed failed, opens again.
func TestRemoteOtherDependencyFreesProbe(t *testing.T) {
	ctx := context.Background()
	clock := &fencingClock{t: time.Date(2026, 11, 29, 1, 0, 0, 0, time.UTC)}
	st := openStore(t)
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quietLogger()})
	reg := breaker.NewRegistry(breaker.DefaultConfig())
	a := reg.Configure("a", breaker.Config{Failures: 1, CountOnly: true, Window: time.Hour, BreakDuration: time.Minute,
		HalfOpenProbes: 1, Now: clock.now})
	ex := redrive.NewExecutor(redrive.ExecutorOptions{ID: "serve", Breakers: reg, Logger: quietLogger(), DisableRetryBudget: true})
	rw := redrive.NewRemoteWorkers(c, ex, redrive.RemoteOptions{Logger: quietLogger()})
	tok, err := a.Allow()
	if err != nil {
		t.Fatal(err)
	}
	a.Record(tok, errors.New("down"))
	if a.State() != breaker.Open {
		t.Fatalf("breaker %s, want open", a.State())
	}
	clock.add(time.Minute + time.Second) // the break ends: one probe may go
	j, err := c.Enqueue(ctx, "k", nil, redrive.InQueue("q"))
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := rw.Lease(ctx, redrive.LeaseRequest{RemoteIdentity: redrive.RemoteIdentity{Worker: "py-1@a"},
		Queues: []string{"q"}, Kinds: []string{"k"}, Dependencies: map[string]string{"k": "a"}, Max: 1})
	if err != nil || len(jobs) != 1 {
		t.Fatalf("lease: %d jobs, %v", len(jobs), err)
	}
	res, err := rw.Outcomes(ctx, "py-1@a", []redrive.RemoteOutcome{{ID: j.ID, Lease: jobs[0].Lease, Kind: redrive.RemoteFail,
		Class: failure.Transient, Error: "503 from b", Dependency: "b"}})
	if err != nil || res[0].Err != nil {
		t.Fatalf("outcome: %v %+v", err, res)
	}
	if _, err := a.Allow(); err != nil {
		t.Fatalf("FINDING: breaker a still holds the probe of an attempt that ended: %v", err)
	}
}
