package download_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/download"
	"github.com/redrivehq/redrive/failure"
)

// TestRefusedRedirectLeavesNothing: a job whose retry meets a redirect
// the guard refuses is over (permanent): the partial file and sidecar of
// its first attempt are removed.
func TestRefusedRedirectLeavesNothing(t *testing.T) {
	content := data(100_000, 50)
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			dropAfter(t, w, content, `"r"`, 40_000)
			return
		}
		http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/", http.StatusFound)
	}))
	defer srv.Close()
	h := newHandler(t, download.Options{})
	p := map[string]any{"url": srv.URL + "/r.bin", "dest": "r/"}
	verdict(t, attempt(h, 90, p), failure.Transient, "")
	verdict(t, attempt(h, 90, p), failure.Permanent, "")
	wantOnly(t, filepath.Join(h.Dir(), "r"))
}

// TestCanceledLeavesNothing: a job a user cancels while it downloads
// (its context ends with cause ErrJobCanceled) leaves no working files.
func TestCanceledLeavesNothing(t *testing.T) {
	content := data(100_000, 51)
	srv, _, _ := stalling(t, content, `"x"`, 30_000)
	h := newHandler(t, download.Options{})
	// The cancel comes once bytes are in the partial file.
	wrote := make(chan struct{})
	var once sync.Once
	download.SetWriteHook(h, func(w io.Writer) io.Writer {
		return hookWriter{w, func() { once.Do(func() { close(wrote) }) }}
	})
	ctx, cancel := context.WithCancelCause(context.Background())
	raw := []byte(`{"url":"` + srv.URL + `/x.bin","dest":"x/"}`)
	done := make(chan error, 1)
	go func() { done <- h.Handle(ctx, &redrive.Job{ID: 91, Kind: download.Kind, Payload: raw}) }()
	<-wrote
	cancel(redrive.ErrJobCanceled)
	if err := <-done; err == nil {
		t.Fatal("canceled attempt succeeded")
	}
	wantOnly(t, filepath.Join(h.Dir(), "x"))
}

// hookWriter calls after after each write.
type hookWriter struct {
	w     io.Writer
	after func()
}

func (h hookWriter) Write(p []byte) (int, error) {
	n, err := h.w.Write(p)
	h.after()
	return n, err
}

// TestLastRetryLeavesNothing: through a real worker, a job whose last
// attempt fails (transient, no retry left) is dead, and its working files
// are gone.
func TestLastRetryLeavesNothing(t *testing.T) {
	content := data(100_000, 52)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		dropAfter(t, w, content, `"l"`, 40_000)
	}))
	defer srv.Close()
	dir := t.TempDir()
	client, _ := startWorker(t, download.Options{Dir: dir})
	j, err := client.Enqueue(context.Background(), download.Kind, map[string]any{"url": srv.URL + "/l.bin", "dest": "l/"},
		redrive.MaxRetries(1))
	if err != nil {
		t.Fatal(err)
	}
	if j = waitDone(t, client, j.ID); j.State != redrive.Dead || j.Attempt != 2 {
		t.Fatalf("state %s after %d attempts", j.State, j.Attempt)
	}
	wantOnly(t, filepath.Join(dir, "l"))
}

// TestSweep: Sweep removes the working files of jobs that are over (a
// final state, or purged) and those it cannot look up once older than
// OrphanAge; it keeps those of jobs still to run, younger ones, files
// that are not working files, and a partial file an attempt holds.
func TestSweep(t *testing.T) {
	content := data(100_000, 53)
	srv, held, release := stalling(t, content, `"s"`, 20_000)
	states := map[int64]redrive.State{1: redrive.Completed, 2: redrive.Dead, 3: redrive.Canceled,
		5: redrive.Pending, 6: redrive.Scheduled, 7: redrive.Dead}
	lookup := func(_ context.Context, id int64) (*redrive.Job, error) {
		st, ok := states[id]
		if !ok {
			return nil, redrive.ErrNotFound
		}
		return &redrive.Job{ID: id, State: st}, nil
	}
	h := newHandler(t, download.Options{Lookup: lookup, OrphanAge: time.Hour, SweepInterval: -1})
	root := h.Dir()
	old := time.Now().Add(-2 * time.Hour)
	put := func(rel string, aged bool) {
		p := filepath.Join(root, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte("x"), 0o644)
		if aged {
			os.Chtimes(p, old, old)
		}
	}
	for _, c := range []struct {
		rel  string
		aged bool
	}{
		{"a/.redrive-1.part", false}, {"a/.redrive-1.meta", false}, // completed
		{"b/.f.bin.redrive-2.part", false}, {"b/.f.bin.redrive-2.meta.tmp", false}, // dead
		{".redrive-3.meta", false},                                       // canceled
		{".redrive-4.part", false},                                       // purged
		{".redrive-5.part", true},                                        // pending: kept however old
		{"c/.g.redrive-6.meta", true},                                    // scheduled
		{".redrive-kabc123.part", true}, {".redrive-kabc123.meta", true}, // a broker job's, old
		{".redrive-kdef456.part", false},                             // a broker job's, young
		{".hidden", true}, {"x.part", true}, {".notours.part", true}, // not working files
	} {
		put(c.rel, c.aged)
	}
	// Job 7 is dead in the store, but an attempt holds its partial file
	// (it was redriven meanwhile): kept.
	done := make(chan error, 1)
	go func() { done <- attempt(h, 7, map[string]any{"url": srv.URL + "/s.bin", "dest": "s.bin"}) }()
	<-held
	n, err := h.Sweep(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	var left []string
	filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			rel, _ := filepath.Rel(root, p)
			left = append(left, rel)
		}
		return nil
	})
	sort.Strings(left)
	want := []string{".hidden", ".notours.part", ".redrive-5.part", ".redrive-kdef456.part", "c/.g.redrive-6.meta", "s.bin", "x.part"}
	if n != 8 || len(left) != len(want) {
		t.Fatalf("removed %d, left %q; want 8 removed, %q left", n, left, want)
	}
	for i := range want {
		if left[i] != want[i] {
			t.Fatalf("left %q, want %q", left, want)
		}
	}
}
