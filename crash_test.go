package redrive_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/retry"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/sqlite"
)

// The crash test: a child process (this test binary, re-executed) works
// through a few thousand jobs and is killed with SIGKILL several times at
// random moments. After a final run, every job must be completed or dead
// exactly as its handler dictates: none lost, none completed twice in the
// store.

const crashChildEnv = "REDRIVE_CRASH_CHILD_DB"

// crashStall is how long the crash test lets a child run without a job
// finishing before it fails: a liveness bound, generous for a loaded
// machine.
const crashStall = 2 * time.Minute

// crashHandlers: "ok" completes, "permanent" fails permanently, "flaky"
// fails transiently on its first two attempts and then completes.
func crashHandlers(w *redrive.Worker) {
	pause := func(ctx context.Context) {
		select {
		case <-time.After(time.Duration(2000+rand.IntN(16000)) * time.Microsecond):
		case <-ctx.Done():
		}
	}
	w.HandleFunc("ok", func(ctx context.Context, j *redrive.Job) error {
		pause(ctx)
		return nil
	})
	w.HandleFunc("permanent", func(ctx context.Context, j *redrive.Job) error {
		pause(ctx)
		return redrive.Permanent(fmt.Errorf("job %d can never succeed", j.ID))
	})
	w.HandleFunc("flaky", func(ctx context.Context, j *redrive.Job) error {
		pause(ctx)
		if j.RetryCount < 2 {
			return &failure.StatusError{Code: 503}
		}
		return nil
	})
}

func crashPolicy() retry.Policy {
	p := retry.DefaultPolicy()
	p.MaxRetries = 12 // room for a lease_expired attempt at every kill
	p.Initial = 2 * time.Millisecond
	p.MaxDelay = 20 * time.Millisecond
	return p
}

// TestCrashChild is the child process; it does nothing in a normal run.
func TestCrashChild(t *testing.T) {
	path := os.Getenv(crashChildEnv)
	if path == "" {
		return // only does something as the crash test's child process
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := sqlite.Open(ctx, path, sqlite.Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quietLogger()})
	p := crashPolicy()
	w := redrive.NewWorker(c, redrive.WorkerOptions{
		Queues: map[string]int{redrive.DefaultQueue: 32}, Policy: &p, Logger: quietLogger(),
		LeaseDuration: 600 * time.Millisecond, RescueInterval: 100 * time.Millisecond, PollInterval: 50 * time.Millisecond,
		DisableRetryBudget: true,
	})
	crashHandlers(w)
	rounds := redrive.EngineSignal(w)
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	for {
		// Look again after each round of the worker's work (outcomes
		// written, a rescue...); the parent bounds the whole run.
		<-rounds
		n, err := c.Count(ctx, redrive.Filter{States: []redrive.State{redrive.Pending, redrive.Scheduled, redrive.Running}})
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			return
		}
	}
}

func TestCrashRecovery(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test skipped in -short mode")
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("REDRIVE_CRASH_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d (set REDRIVE_CRASH_SEED to replay)", seed)
	rnd := rand.New(rand.NewPCG(seed, 1))

	path := filepath.Join(t.TempDir(), "crash.db")
	ctx := context.Background()
	st, err := sqlite.Open(ctx, path, sqlite.Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quietLogger()})
	const n = 4000
	want := map[int64]string{}
	var reqs []redrive.Request
	kinds := []string{"ok", "ok", "ok", "permanent", "flaky"}
	for i := range n {
		reqs = append(reqs, redrive.Request{Kind: kinds[i%len(kinds)], Payload: map[string]int{"i": i}})
	}
	jobs, err := c.EnqueueMany(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		want[j.ID] = j.Kind
	}

	finished := func() int64 {
		n, err := c.Count(ctx, redrive.Filter{States: []redrive.State{redrive.Completed, redrive.Dead}})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	// run starts a child and, with kill > 0, kills it with SIGKILL once it
	// has finished kill more jobs (or fewer, if fewer are left): the kill
	// lands at a point of the work, not of the wall clock, so that each
	// run makes progress however slow the machine is (a kill after
	// 100-450 ms of real time landed before a loaded machine's child had
	// finished anything, and the final run was left with all the work).
	// With kill == 0 it waits for the child to finish every job and exit.
	// Either way it fails the test when no job finishes for
	// crashStall: a liveness bound on progress, not on the run.
	run := func(kill int64) {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), crashChildEnv+"="+path)
		out, _ := os.CreateTemp(t.TempDir(), "child")
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		waitErr := make(chan error, 1)
		go func() { waitErr <- cmd.Wait() }()
		last, moved := finished(), time.Now()
		target := min(last+kill, n)
		for {
			select {
			case err := <-waitErr:
				if err != nil || kill > 0 {
					b, _ := os.ReadFile(out.Name())
					t.Fatalf("child run (kill after %d jobs) ended by itself: %v\n%s", kill, err, b)
				}
				return
			case <-time.After(20 * time.Millisecond): // the poll's interval: it waits for the count, not for time
			}
			now := finished()
			if kill > 0 && now >= target {
				if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
				<-waitErr
				return
			}
			if now != last {
				last, moved = now, time.Now()
			} else if time.Since(moved) > crashStall {
				cmd.Process.Kill()
				<-waitErr
				b, _ := os.ReadFile(out.Name())
				t.Fatalf("child run (kill after %d jobs): no job finished for %v, %d of %d finished\n%s", kill, crashStall, now, n, b)
			}
		}
	}
	kills := 0
	for range 6 {
		k := int64(20 + rnd.IntN(300))
		if finished()+k >= n {
			break // leave the last jobs to the final run
		}
		run(k)
		kills++
		t.Logf("kill %d after %d more jobs: %d of %d jobs finished", kills, k, finished(), n)
	}
	run(0)

	// Every job is there and ended as its handler dictates.
	var rescued, completedCount, deadCount int64
	page := store.Page{Limit: store.MaxPageSize}
	seen := 0
	for {
		res, err := c.List(ctx, redrive.Filter{}, page)
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range res.Jobs {
			seen++
			kind, ok := want[j.ID]
			if !ok {
				t.Fatalf("unexpected job %d", j.ID)
			}
			switch kind {
			case "ok", "flaky":
				if j.State != redrive.Completed {
					t.Errorf("job %d (%s) ended %s after %d attempts: %q", j.ID, kind, j.State, j.Attempt, j.LastError)
				}
				completedCount++
			case "permanent":
				if j.State != redrive.Dead || j.DeadReason != retry.ReasonPermanent {
					t.Errorf("job %d (permanent) ended %s reason %q", j.ID, j.State, j.DeadReason)
				}
				deadCount++
			}
			completions, deaths := 0, 0
			for _, ev := range j.History {
				switch ev.Kind {
				case store.EventDead:
					deaths++
				case store.EventCompleted:
					completions++
				}
				if ev.Reason == "lease_expired" || ev.Reason == redrive.ReasonWorkerGone {
					rescued++
				}
			}
			if deaths > 1 || completions > 1 {
				t.Errorf("job %d recorded %d deaths and %d completions", j.ID, deaths, completions)
			}
			if kind == "flaky" && j.RetryCount < 2 {
				t.Errorf("flaky job %d completed with retry_count %d", j.ID, j.RetryCount)
			}
		}
		if res.Next == "" {
			break
		}
		page.Cursor = res.Next
	}
	if seen != n {
		t.Fatalf("%d jobs in the store, want %d: jobs were lost", seen, n)
	}
	// Completion is recorded once: the counters, which outcomes only add
	// to when they are applied, match the jobs exactly.
	stats, err := c.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ctr := stats.Counters[redrive.DefaultQueue]
	if ctr["succeeded"] != completedCount || ctr["dead.permanent"] != deadCount {
		t.Fatalf("counters succeeded=%d dead.permanent=%d, jobs completed=%d dead=%d: an outcome was applied twice",
			ctr["succeeded"], ctr["dead.permanent"], completedCount, deadCount)
	}
	if ctr["rescued"] != rescued {
		t.Fatalf("rescued counter %d, lease_expired and worker_gone events %d", ctr["rescued"], rescued)
	}
	t.Logf("%d jobs: %d completed, %d dead; %d expired leases rescued across %d kills", n, completedCount, deadCount, rescued, kills)
	if errors.Is(ctx.Err(), context.Canceled) {
		t.Fatal("unreachable")
	}
}
