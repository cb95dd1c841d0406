package redrive_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/internal/testwait"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/postgres"
	"github.com/redrivehq/redrive/store/sqlite"
)

// The restart test: a child process (this test binary, re-executed)
// leases jobs with a one-hour lease and hangs in their handlers; it is
// killed with SIGKILL. A worker started afterwards on the same host finds
// the child's process gone and rescues its jobs at once (reason
// worker_gone), long before their leases would expire.

const restartChildEnv = "REDRIVE_RESTART_CHILD" // sqlite:<path> or postgres:<schema>

// openRestartStore opens the store a restart test names.
func openRestartStore(ctx context.Context, spec string) (store.Store, error) {
	kind, where, _ := strings.Cut(spec, ":")
	if kind == "postgres" {
		return postgres.Open(ctx, os.Getenv("REDRIVE_POSTGRES_URL"), postgres.Options{Schema: where, Logger: quietLogger()})
	}
	return sqlite.Open(ctx, where, sqlite.Options{Logger: quietLogger()})
}

// TestRestartChild is the child process; it does nothing in a normal run.
func TestRestartChild(t *testing.T) {
	spec := os.Getenv(restartChildEnv)
	if spec == "" {
		return // only does something as the restart test's child process
	}
	ctx := context.Background()
	st, err := openRestartStore(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quietLogger()})
	w := redrive.NewWorker(c, redrive.WorkerOptions{Queues: map[string]int{redrive.DefaultQueue: 8}, Logger: quietLogger(),
		LeaseDuration: time.Hour, PollInterval: 20 * time.Millisecond})
	w.HandleFunc("hang", func(ctx context.Context, j *redrive.Job) error {
		<-ctx.Done()
		return ctx.Err()
	})
	_ = w.Run(ctx) // runs until killed
}

func TestRestartRescuesAtOnce(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	spec := "sqlite:" + sqlitePath(t, st)
	if pg, ok := st.(*postgres.Store); ok {
		spec = "postgres:" + pg.Schema()
	}
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quietLogger()})
	const n = 5
	reqs := make([]redrive.Request, n)
	for i := range reqs {
		reqs[i] = redrive.Request{Kind: "hang", Payload: i}
	}
	jobs, err := c.EnqueueMany(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	child := exec.Command(os.Args[0], "-test.run=^TestRestartChild$", "-test.count=1")
	child.Env = append(os.Environ(), restartChildEnv+"="+spec)
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	t.Cleanup(func() {
		if !killed {
			child.Process.Kill()
			child.Wait()
		}
	})
	// The child is another process: the store is where its leases show.
	var leases []time.Time
	testwait.Watch(t, fmt.Sprintf("the child to lease the %d jobs", n), 30*time.Second, func() (bool, string) {
		leases = leases[:0]
		for _, j := range jobs {
			got, err := c.Get(ctx, j.ID)
			if err != nil {
				t.Fatal(err)
			}
			if got.State == redrive.Running && got.LeaseUntil != nil {
				leases = append(leases, *got.LeaseUntil)
			}
		}
		return len(leases) == n, fmt.Sprintf("%d leased", len(leases))
	})
	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	child.Wait()
	killed = true
	workers, err := c.Workers(ctx)
	if err != nil || len(workers) != 1 || workers[0].PID != child.Process.Pid || workers[0].Running != n {
		t.Fatalf("registry before the restart: %+v, %v; want the child with %d running jobs", workers, err, n)
	}

	// The restart: a new worker, this process, same host.
	w := redrive.NewWorker(c, redrive.WorkerOptions{Queues: map[string]int{redrive.DefaultQueue: 8}, Logger: quietLogger(),
		LeaseDuration: time.Hour, PollInterval: 20 * time.Millisecond, Policy: ptr(fastPolicy(3))})
	w.HandleFunc("hang", func(ctx context.Context, j *redrive.Job) error { return nil })
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	defer func() { stop(); <-done }()
	e := &env{t: t, client: c}
	for i, j := range jobs {
		got := e.waitState(j.ID, redrive.Completed)
		var rescued *redrive.Event
		for k := range got.History {
			if got.History[k].Reason == redrive.ReasonWorkerGone {
				rescued = &got.History[k]
			}
		}
		if rescued == nil || got.Attempt != 2 {
			t.Fatalf("job %d: attempt %d, history %+v; want a worker_gone rescue, then attempt 2", j.ID, got.Attempt, got.History)
		}
		if !strings.Contains(rescued.Error, fmt.Sprintf("process %d no longer runs", child.Process.Pid)) {
			t.Errorf("job %d: rescue says %q", j.ID, rescued.Error)
		}
		if !got.FinishedAt.Before(leases[i]) {
			t.Errorf("job %d completed at %s, not before its old lease ended (%s): rescued by lease expiry, not at once",
				j.ID, got.FinishedAt, leases[i])
		}
	}
	ws, _ := c.Workers(ctx)
	states := map[string]string{}
	for _, wi := range ws {
		states[wi.ID] = wi.State
	}
	if len(ws) != 2 || states[w.ID()] != redrive.WorkerLive || states[workers[0].ID] != redrive.WorkerGone {
		t.Errorf("registry after the restart: %+v", ws)
	}
}

func ptr[T any](v T) *T { return &v }

// sqlitePath is the file of a SQLite store opened by openStore.
func sqlitePath(t *testing.T, st store.Store) string {
	t.Helper()
	s, ok := st.(*sqlite.Store)
	if !ok {
		return ""
	}
	return s.Path()
}
