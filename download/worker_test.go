package download_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/redrivehq/redrive/internal/testwait"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/breaker"
	"github.com/redrivehq/redrive/download"
	"github.com/redrivehq/redrive/retry"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/sqlite"
)

// startWorker runs a real worker with the download kind on a SQLite store,
// with a short retry policy (10ms base, no jitter).
func startWorker(t *testing.T, opts download.Options) (*redrive.Client, *redrive.Worker) {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "redrive.db"), sqlite.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	client := redrive.NewClient(st, redrive.ClientOptions{Logger: log})
	p := retry.DefaultPolicy()
	p.MaxRetries = 4
	p.Initial = 10 * time.Millisecond
	p.MaxDelay = 40 * time.Millisecond
	p.Jitter = retry.JitterNone
	w := redrive.NewWorker(client, redrive.WorkerOptions{Policy: &p, DisableRetryBudget: true, Logger: log,
		PollInterval: 50 * time.Millisecond})
	if err := download.Register(w, opts); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("worker: %v", err)
		}
		st.Close()
	})
	return client, w
}

func waitDone(t *testing.T, client *redrive.Client, id int64) *redrive.Job {
	t.Helper()
	var j *redrive.Job
	testwait.Until(t, fmt.Sprintf("job %d completed or dead", id), 15*time.Second, func() bool {
		var err error
		if j, err = client.Get(context.Background(), id); err != nil {
			t.Fatal(err)
		}
		return j.State == redrive.Completed || j.State == redrive.Dead
	})
	return j
}

// TestWorkerRetriesThenCompletes: through a real worker, a server that
// fails twice (a 503, then a connection dropped mid-body) then serves the
// rest: the job completes on its third attempt, the file has the right
// hash, the history says what happened.
func TestWorkerRetriesThenCompletes(t *testing.T) {
	content := data(700_000, 21)
	var n atomic.Int32
	var sent atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch n.Add(1) {
		case 1:
			http.Error(w, "busy", http.StatusServiceUnavailable)
		case 2:
			dropAfter(t, w, content, `"w"`, 400_000)
		default:
			serve(w, r, content, `"w"`, &sent)
		}
	}))
	defer srv.Close()
	dir := t.TempDir()
	client, _ := startWorker(t, download.Options{Dir: dir})
	sum := hexSum(content)
	j, err := client.Enqueue(context.Background(), download.Kind, map[string]any{"url": srv.URL + "/w.bin", "dest": "w/", "sha256": sum})
	if err != nil {
		t.Fatal(err)
	}
	j = waitDone(t, client, j.ID)
	if j.State != redrive.Completed || j.Attempt != 3 {
		t.Fatalf("state %s after %d attempts: %+v", j.State, j.Attempt, j.History)
	}
	if sent.Load() != int64(len(content)-400_000) {
		t.Fatalf("third attempt transferred %d bytes, want %d", sent.Load(), len(content)-400_000)
	}
	wantFile(t, filepath.Join(dir, "w", "w.bin"), content)
	wantOnly(t, filepath.Join(dir, "w"), "w.bin")
	if len(j.History) != 3 || j.History[0].Reason != "http_503" || j.History[1].Reason != "connection_reset" {
		t.Fatalf("history %+v", j.History)
	}
	if j.Progress == nil || j.Progress.Done != int64(len(content)) || j.Progress.Total != int64(len(content)) {
		t.Fatalf("final progress %+v, want %d of %d", j.Progress, len(content), len(content))
	}
	ev := j.History[2]
	if ev.Kind != store.EventCompleted || ev.Reason != download.ReasonDownloaded || ev.Note != "700000 bytes to w/w.bin, sha256 "+sum {
		t.Fatalf("completed event %+v", ev)
	}
}

// TestEnqueueRefused: a payload Validate refuses is refused at enqueue
// with ErrInvalid naming the field, and nothing is stored.
func TestEnqueueRefused(t *testing.T) {
	client, _ := startWorker(t, download.Options{Dir: t.TempDir()})
	for _, p := range []map[string]any{
		{"url": "http://example.com/x", "dest": "../x"},
		{"url": "http://example.com/x", "dest": "/etc/x"},
		{"dest": "x"},
		{"url": "http://example.com/x", "sha256": "nope"},
	} {
		_, err := client.Enqueue(context.Background(), download.Kind, p)
		var fe *redrive.FieldError
		if !errors.Is(err, redrive.ErrInvalid) || !errors.As(err, &fe) || !strings.HasPrefix(fe.Field, "payload.") {
			t.Errorf("%v: %v, want ErrInvalid with a field", p, err)
		}
	}
	if n, _ := client.Count(context.Background(), redrive.Filter{}); n != 0 {
		t.Errorf("%d jobs stored", n)
	}
}

// TestWorkerDiskBreakerIsTheWorkers: Register uses the worker's breaker
// registry by default, so the disk breaker is the worker's.
func TestWorkerDiskBreakerIsTheWorkers(t *testing.T) {
	srv, _ := statuses(t, nil, []byte("x"))
	dir := t.TempDir()
	client, w := startWorker(t, download.Options{Dir: dir})
	j, err := client.Enqueue(context.Background(), download.Kind, map[string]any{"url": srv.URL, "dest": "x"})
	if err != nil {
		t.Fatal(err)
	}
	if j = waitDone(t, client, j.ID); j.State != redrive.Completed {
		t.Fatalf("state %s", j.State)
	}
	if _, ok := w.Breakers().Lookup(download.DiskBreaker); !ok {
		t.Fatal("no disk breaker in the worker's registry")
	}
	if _, err := os.Stat(filepath.Join(dir, "x")); err != nil {
		t.Fatal(err)
	}
}

// TestOpenDiskBreakerDefers: through a real worker, a download job met by
// an open disk breaker is deferred without using an attempt or sending a
// request, and runs once the breaker lets it. The breaker runs on a fake
// clock that the test moves past the break only once it has seen the
// deferral: on the wall clock, a 2 s break could be over before a loaded
// machine's first fetch. The handler compared the breaker's ready time
// with the wall clock instead of asking the breaker, which let a request
// through while the breaker was still open by its own clock.
func TestOpenDiskBreakerDefers(t *testing.T) {
	srv, n := statuses(t, nil, []byte("payload"))
	dir := t.TempDir()
	// The breaker's clock stands still an hour behind the wall clock, as
	// if the worker took that long to fetch the job, until the test moves
	// it on.
	var moved atomic.Int64
	start := time.Now().Add(-time.Hour)
	clock := func() time.Time { return start.Add(time.Duration(moved.Load())) }
	reg := breaker.NewRegistry(breaker.Config{})
	br := reg.Configure(download.DiskBreaker, breaker.Config{Failures: 1, BreakDuration: 2 * time.Second, Now: clock})
	tok, _ := br.Allow()
	br.Record(tok, syscall.ENOSPC)
	if br.State() != breaker.Open {
		t.Fatalf("breaker %s", br.State())
	}
	client, _ := startWorker(t, download.Options{Dir: dir, Breakers: reg})
	j, err := client.Enqueue(context.Background(), download.Kind, map[string]any{"url": srv.URL, "dest": "later.txt"})
	if err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, fmt.Sprintf("job %d deferred", j.ID), time.Minute, func() bool {
		got, err := client.Get(context.Background(), j.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.State == redrive.Completed || got.State == redrive.Dead {
			t.Fatalf("job %d ended %s while the breaker was open: %+v", j.ID, got.State, got.History)
		}
		return len(got.History) > 0
	})
	if n.Load() != 0 {
		t.Fatalf("%d requests sent while the breaker was open", n.Load())
	}
	moved.Store(int64(3 * time.Second)) // the break is over
	j = waitDone(t, client, j.ID)
	if j.State != redrive.Completed || j.Attempt != 1 || n.Load() != 1 {
		t.Fatalf("state %s after %d attempts, %d requests: %+v", j.State, j.Attempt, n.Load(), j.History)
	}
	if len(j.History) < 2 || j.History[0].Kind != store.EventDeferred || j.History[0].Reason != "breaker_open:disk" {
		t.Fatalf("history %+v, want a deferral first", j.History)
	}
	wantFile(t, filepath.Join(dir, "later.txt"), []byte("payload"))
}
