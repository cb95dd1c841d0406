package redrive_test

import (
	"context"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
)

// TestWorkersOfOneProcessLeaveEachOther: two workers of one process share
// its PID; neither may take the other for a predecessor that reused the
// PID and rescue its running jobs (it did, at random, before the fix).
func TestWorkersOfOneProcessLeaveEachOther(t *testing.T) {
	st := openStore(t)
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quietLogger()})
	ctx := context.Background()
	started := make(chan struct{}, 1)
	release := make(chan struct{})
	run := func(id string, handler bool) <-chan struct{} {
		w := redrive.NewWorker(c, redrive.WorkerOptions{ID: id, Logger: quietLogger(), RescueInterval: 20 * time.Millisecond,
			Queues: map[string]int{redrive.DefaultQueue: 1}})
		if handler {
			w.HandleFunc("hold", func(ctx context.Context, j *redrive.Job) error {
				started <- struct{}{}
				<-release
				return nil
			})
		}
		rescues := redrive.RescueSignal(w)
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- w.Run(runCtx) }()
		t.Cleanup(func() { cancel(); <-done })
		return rescues
	}
	defer close(release)
	run("first", true)
	j, err := c.Enqueue(ctx, "hold", nil)
	if err != nil {
		t.Fatal(err)
	}
	<-started
	// The second registers, then looks for gone workers of this host at
	// its start and at each of its rescuer's rounds: two rounds past,
	// it had its chances to take the first's job for a gone one's.
	rescues := run("second", false)
	for range 2 {
		select {
		case <-rescues:
		case <-time.After(30 * time.Second):
			t.Fatal("the second worker's rescuer did not run")
		}
	}
	got, err := c.Get(ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != redrive.Running || got.Attempt != 1 || len(got.History) != 0 {
		t.Fatalf("job %s, attempt %d, history %+v: the second worker rescued the first one's job", got.State, got.Attempt, got.History)
	}
	ws, err := c.Workers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range ws {
		if w.State != redrive.WorkerLive {
			t.Errorf("worker %s is %s, want live", w.ID, w.State)
		}
	}
}
