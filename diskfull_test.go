package redrive_test

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/internal/testwait"
	"github.com/redrivehq/redrive/store/sqlite"
)

// mountTiny mounts a tmpfs of size at a new folder and returns it; it
// needs root (CI runs as root; elsewhere the test skips).
func mountTiny(t *testing.T, size string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tiny")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		if os.Getenv("CI") != "" && os.Geteuid() == 0 {
			t.Fatalf("mount a tmpfs: %v: %s", err, out)
		}
		t.Skipf("cannot mount a tmpfs (needs root): %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() })
	return dir
}

// fill writes a file in dir until the disk is full.
func fill(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	for {
		if _, err := f.Write(buf); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				return path
			}
			t.Fatal(err)
		}
	}
}

// TestDiskFullOutcomesKept: jobs that finish while the disk is full keep
// their outcomes until the store takes them, past their leases: when
// space returns, each job is recorded once, none is rescued and run
// again. The engine runs on a clock that stands still until the disk is
// full and then moves past the leases: on the wall clock, a loaded
// machine let the 1 s leases of jobs waiting for the disk to fill expire
// (their heartbeats late), and the jobs were rescued before the test
// began.
func TestDiskFullOutcomesKept(t *testing.T) {
	dir := mountTiny(t, "2m")
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "redrive.db"), sqlite.Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quietLogger()})
	var moved atomic.Int64
	start := time.Now()
	redrive.SetClock(c, func() time.Time { return start.Add(time.Duration(moved.Load())) })
	const n = 20
	reqs := make([]redrive.Request, n)
	for i := range reqs {
		reqs[i] = redrive.Request{Kind: "k", Payload: i}
	}
	jobs, err := c.EnqueueMany(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	gate := make(chan struct{})
	var mu sync.Mutex
	runs := map[int64]int{}
	w := redrive.NewWorker(c, redrive.WorkerOptions{Queues: map[string]int{redrive.DefaultQueue: n}, Logger: quietLogger(),
		LeaseDuration: time.Second, RescueInterval: 100 * time.Millisecond, PollInterval: 20 * time.Millisecond})
	w.HandleFunc("k", func(ctx context.Context, j *redrive.Job) error {
		mu.Lock()
		runs[j.ID]++
		mu.Unlock()
		<-gate
		return nil
	})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	defer func() { stop(); <-done }()
	testwait.Until(t, "every job started", time.Minute, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(runs) == n
	})
	// Empty the write-ahead log, so that the next write must grow it.
	raw, err := sql.Open("sqlite", filepath.Join(dir, "redrive.db"))
	if err != nil {
		t.Fatal(err)
	}
	wal := filepath.Join(dir, "redrive.db-wal")
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if _, err := raw.Exec("PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Stat(wal); err == nil && fi.Size() == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the write-ahead log could not be emptied")
		}
	}
	raw.Close()
	filler := fill(t, dir)
	defer os.Remove(filler)             // before the worker stops, should the test fail
	close(gate)                         // the jobs finish while no write can succeed
	moved.Store(int64(2 * time.Second)) // past the 1 s leases
	// The worker's writes fail on the full disk, and it keeps retrying.
	testwait.Until(t, "a write failing on the full disk", time.Minute, func() bool { return st.WriteHealth() != nil })
	if done, _ := c.Count(ctx, redrive.Filter{States: []redrive.State{redrive.Completed}}); done != 0 {
		t.Fatalf("%d jobs completed with the disk full: the test proves nothing", done)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, client: c}
	for _, j := range jobs {
		got := e.waitState(j.ID, redrive.Completed)
		for _, ev := range got.History {
			t.Errorf("job %d has a %s event (%s): it should simply have completed", j.ID, ev.Kind, ev.Reason)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, j := range jobs {
		if runs[j.ID] != 1 {
			t.Errorf("job %d ran %d times", j.ID, runs[j.ID])
		}
	}
}
