package redrive_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
)

// waitProgress waits until job id shows done/total, failing after a
// liveness bound (not a measure: how soon progress shows is the
// heartbeat's business, and a loaded machine delays it).
func (e *env) waitProgress(id int64, done, total int64) *redrive.Job {
	e.t.Helper()
	const within = time.Minute
	start := time.Now()
	for {
		j, err := e.client.Get(context.Background(), id)
		if err != nil {
			e.t.Fatal(err)
		}
		if p := j.Progress; p != nil && p.Done == done && p.Total == total {
			return j
		}
		if time.Since(start) > within {
			e.t.Fatalf("job %d: progress %+v after %s, want %d/%d", id, j.Progress, within, done, total)
		}
		e.waitEngine()
	}
}

// A running job shows the latest progress its handler reported within a
// few heartbeats; the completed job keeps the final value, even one
// reported just before the handler returned.
func TestProgress(t *testing.T) {
	e := newEnv(t, redrive.WorkerOptions{LeaseDuration: 300 * time.Millisecond}) // heartbeats every 100ms
	step := make(chan struct{})
	e.worker.HandleFunc("copy", func(ctx context.Context, job *redrive.Job) error {
		for i := int64(1); i <= 40; i++ {
			redrive.Progress(ctx, i<<16, 100<<16) // cheap: only the last value is sent
		}
		for _, pct := range []int64{70, 100} {
			select {
			case <-step:
			case <-ctx.Done():
				return ctx.Err()
			}
			redrive.Progress(ctx, pct<<16, 100<<16)
		}
		return nil
	})
	e.start()
	job, err := e.client.Enqueue(context.Background(), "copy", nil)
	if err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	j := e.waitProgress(job.ID, 40<<16, 100<<16)
	if j.State != redrive.Running {
		t.Fatalf("state %s with progress, want running", j.State)
	}
	if j.Progress.At.IsZero() || j.Progress.At.After(time.Now()) {
		t.Errorf("progress at %s, want a time before now", j.Progress.At)
	}
	t.Logf("first progress seen after %s", time.Since(before))
	step <- struct{}{}
	e.waitProgress(job.ID, 70<<16, 100<<16)
	step <- struct{}{}
	j = e.waitState(job.ID, redrive.Completed)
	if p := j.Progress; p == nil || p.Done != 100<<16 || p.Total != 100<<16 {
		t.Errorf("completed job progress %+v, want the final %d/%d", p, 100<<16, 100<<16)
	}
}

// A failed attempt's progress is cleared: the next attempt starts
// without one, and a success without progress leaves none. The lease is
// the default one: progress is sent every second whatever the lease, and
// a 300 ms lease, heartbeated every 100 ms, expired on a loaded machine
// (the job rescued, its first attempt's progress never seen).
func TestProgressClearedOnRetry(t *testing.T) {
	e := newEnv(t, redrive.WorkerOptions{})
	started, release := make(chan struct{}), make(chan struct{})
	seen := make(chan struct{}) // the test saw the first attempt's progress
	e.worker.HandleFunc("flaky", func(ctx context.Context, job *redrive.Job) error {
		if job.Attempt == 1 {
			redrive.Progress(ctx, 3, -1) // unknown total
			select {
			case <-seen:
			case <-ctx.Done():
			}
			return errors.New("connection reset")
		}
		close(started)
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	e.start()
	job, err := e.client.Enqueue(context.Background(), "flaky", nil)
	if err != nil {
		t.Fatal(err)
	}
	e.waitProgress(job.ID, 3, 0) // total stored as 0: unknown
	close(seen)
	<-started
	j, err := e.client.Get(context.Background(), job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if j.Attempt != 2 || j.Progress != nil {
		t.Errorf("second attempt: attempt %d, progress %+v; want 2, none", j.Attempt, j.Progress)
	}
	close(release)
	if j := e.waitState(job.ID, redrive.Completed); j.Progress != nil {
		t.Errorf("completed job progress %+v, want none", j.Progress)
	}
}

// Outside a handler Progress does nothing.
func TestProgressOutsideHandler(t *testing.T) {
	redrive.Progress(context.Background(), 1, 2)
	redrive.Progress(t.Context(), -1, -1)
}

// A handler copying a large body reports how many bytes it copied; the
// job shows it while it runs, and keeps the final value once completed.
func ExampleProgress() {
	ctx := context.Background()
	client, quiet, done := exampleClient(ctx) // a SQLite store in a temporary folder
	defer done()
	worker := redrive.NewWorker(client, redrive.WorkerOptions{Logger: quiet})

	type Download struct{ Size int64 }
	redrive.Handle(worker, "download", func(ctx context.Context, job *redrive.Job, d Download) error {
		body := io.LimitReader(strings.NewReader(strings.Repeat("x", int(d.Size))), d.Size) // the response body
		buf := make([]byte, 64<<10)
		var copied int64
		for {
			n, err := body.Read(buf)
			copied += int64(n) // ... written to the destination
			redrive.Progress(ctx, copied, d.Size)
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return err
			}
		}
	})
	runCtx, stop := context.WithCancel(ctx)
	stopped := make(chan struct{})
	go func() { worker.Run(runCtx); close(stopped) }()

	job, _ := client.Enqueue(ctx, "download", Download{Size: 1 << 20})
	j := waitFor(client, job.ID, redrive.Completed)
	fmt.Printf("%s: %d of %d bytes\n", j.State, j.Progress.Done, j.Progress.Total)

	stop()
	<-stopped
	// Output:
	// completed: 1048576 of 1048576 bytes
}
