package download_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/download"
	"github.com/redrivehq/redrive/failure"
)

// TestForgedSidecarCannotEscape replays the attack of issue 40: job 50
// (dest "x/") fails with a 503; job 51 downloads a forged sidecar to
// job 50's sidecar path, naming "../../escaped.txt"; job 52 downloads the
// attacker's bytes to job 50's partial file; job 50's retry gets a 416
// and would rename the attacker's file out of the download directory.
// The dest of another job's working files is refused, at enqueue and by
// an attempt, and nothing lands outside the directory.
func TestForgedSidecarCannotEscape(t *testing.T) {
	real := data(4096, 40)
	evil := bytes.Repeat([]byte("evil"), 1024) // as long as the real file
	var victimCalls atomic.Int32
	mux := http.NewServeMux()
	var srvURL string
	mux.HandleFunc("/victim.bin", func(w http.ResponseWriter, r *http.Request) {
		if victimCalls.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("ETag", `"v"`)
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(real))
	})
	mux.HandleFunc("/meta", func(w http.ResponseWriter, r *http.Request) {
		m, _ := json.Marshal(map[string]any{"url": srvURL + "/victim.bin", "etag": `"v"`,
			"total": len(evil), "synced": len(evil), "name": "../../escaped.txt"})
		w.Write(m)
	})
	mux.HandleFunc("/part", func(w http.ResponseWriter, r *http.Request) { w.Write(evil) })
	srv := httptest.NewServer(mux)
	defer srv.Close()
	srvURL = srv.URL
	base := t.TempDir()
	h := newHandler(t, download.Options{Dir: filepath.Join(base, "dl")})

	victim := map[string]any{"url": srv.URL + "/victim.bin", "dest": "x/"}
	verdict(t, attempt(h, 50, victim), failure.Transient, "http_503")
	for id, p := range map[int64]map[string]any{
		51: {"url": srv.URL + "/meta", "dest": "x/.redrive-50.meta"},
		52: {"url": srv.URL + "/part", "dest": "x/.redrive-50.part"},
		53: {"url": srv.URL + "/part", "dest": "x/.victim.bin.redrive-50.part"},
		54: {"url": srv.URL + "/part", "dest": "x/.REDRIVE-50.part"}, // a case-insensitive file system
		55: {"url": srv.URL + "/part", "dest": ".redrive-50.part/y"},
	} {
		raw, _ := json.Marshal(p)
		err := h.Validate(raw)
		var fe *redrive.FieldError
		if !errors.As(err, &fe) || fe.Field != "payload.dest" || !strings.Contains(err.Error(), "working file") {
			t.Errorf("job %d (dest %s) accepted at enqueue: %v", id, p["dest"], err)
		}
		verdict(t, attempt(h, id, p), failure.Permanent, "")
	}
	if err := attempt(h, 50, victim); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(base, "escaped.txt")); err == nil {
		t.Fatal("a file was written outside the download directory")
	}
	wantFile(t, filepath.Join(h.Dir(), "x", "victim.bin"), real)
	wantOnly(t, filepath.Join(h.Dir(), "x"), "victim.bin")
}

// TestPlantedSidecarNameNotTrusted: a sidecar already on disk (planted
// by someone with access to the directory, or left by an older version)
// whose name leads out of the directory, or names a working file, is not
// trusted: the attempt starts over and names the file from the response.
func TestPlantedSidecarNameNotTrusted(t *testing.T) {
	real := data(3000, 41)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("ETag", `"p"`)
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(real))
	}))
	defer srv.Close()
	for i, name := range []string{"../../escaped.txt", "../escaped.txt", "a/b", ".redrive-9.part", "..", "."} {
		base := t.TempDir()
		h := newHandler(t, download.Options{Dir: filepath.Join(base, "dl")})
		x := filepath.Join(h.Dir(), "x")
		os.MkdirAll(x, 0o755)
		os.WriteFile(filepath.Join(x, ".redrive-60.part"), real, 0o644)
		m, _ := json.Marshal(map[string]any{"url": srv.URL + "/good.bin", "etag": `"p"`,
			"total": len(real), "synced": len(real), "name": name})
		os.WriteFile(filepath.Join(x, ".redrive-60.meta"), m, 0o644)
		if err := attempt(h, 60, map[string]any{"url": srv.URL + "/good.bin", "dest": "x/"}); err != nil {
			t.Fatalf("%d %q: %v", i, name, err)
		}
		for _, p := range []string{filepath.Join(base, "escaped.txt"), filepath.Join(h.Dir(), "escaped.txt")} {
			if _, err := os.Stat(p); err == nil {
				t.Fatalf("%q: the sidecar's name was used: %s exists", name, p)
			}
		}
		wantFile(t, filepath.Join(x, "good.bin"), real)
		wantOnly(t, x, "good.bin")
	}
}

// stalling serves content with an ETag, but the first request sends only
// the first k bytes and then waits for release before sending the rest.
// held is closed once those k bytes are sent. The test's end releases
// it too (before the server closes, which waits for its handlers).
func stalling(t *testing.T, content []byte, etag string, k int) (srv *httptest.Server, held chan struct{}, release func()) {
	held = make(chan struct{})
	released := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(released) }) }
	var n atomic.Int32
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			w.Header().Set("ETag", etag)
			w.Header().Set("Content-Length", strconv.Itoa(len(content)))
			w.Write(content[:k])
			w.(http.Flusher).Flush()
			close(held)
			select {
			case <-released:
			case <-r.Context().Done():
				return
			}
			w.Write(content[k:])
			return
		}
		w.Header().Set("ETag", etag)
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(content))
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(release)
	return srv, held, release
}

// TestAnonymousJobsDoNotShare: two jobs without id or idempotency key (an
// AMQP message published without a message id) with a directory dest,
// running at once, each end with their own bytes: before, both used
// ".redrive-0.part", and one renamed the other's bytes as its own.
func TestAnonymousJobsDoNotShare(t *testing.T) {
	a, b := data(200_000, 42), data(200_000, 43)
	srvA, held, release := stalling(t, a, `"a"`, 50_000)
	srvB := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(b))
	}))
	defer srvB.Close()
	h := newHandler(t, download.Options{})
	anon := func(u string, sum []byte) *redrive.Job {
		raw, _ := json.Marshal(map[string]any{"url": u, "dest": "d/", "sha256": hexSum(sum)})
		return &redrive.Job{Kind: download.Kind, Payload: raw}
	}
	errA := make(chan error, 1)
	go func() { errA <- h.Handle(context.Background(), anon(srvA.URL+"/a.bin", a)) }()
	<-held
	if err := h.Handle(context.Background(), anon(srvB.URL+"/b.bin", b)); err != nil {
		t.Fatal(err)
	}
	release()
	if err := <-errA; err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(h.Dir(), "d")
	wantFile(t, filepath.Join(dir, "a.bin"), a)
	wantFile(t, filepath.Join(dir, "b.bin"), b)
	wantOnly(t, dir, "a.bin", "b.bin")
}

// TestAnonymousJobLeavesNothing: a job without identity cannot be resumed
// by a later attempt (nothing names it): a failed attempt removes its
// working files.
func TestAnonymousJobLeavesNothing(t *testing.T) {
	content := data(100_000, 44)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		dropAfter(t, w, content, `"e"`, 30_000)
	}))
	defer srv.Close()
	h := newHandler(t, download.Options{})
	raw, _ := json.Marshal(map[string]any{"url": srv.URL + "/e.bin", "dest": "e/"})
	err := h.Handle(context.Background(), &redrive.Job{Kind: download.Kind, Payload: raw})
	verdict(t, err, failure.Transient, "")
	wantOnly(t, filepath.Join(h.Dir(), "e"))
}

// TestConcurrentAttemptsOfOneJob: a second attempt of a job whose first
// attempt still runs (its lease expired while the handler ran) does not
// touch the partial file the first one writes: it fails, transient, and
// the first completes with the right bytes.
func TestConcurrentAttemptsOfOneJob(t *testing.T) {
	content := data(300_000, 45)
	srv, held, release := stalling(t, content, `"c"`, 100_000)
	h := newHandler(t, download.Options{})
	p := map[string]any{"url": srv.URL + "/c.bin", "dest": "c.bin", "sha256": hexSum(content)}
	first := make(chan error, 1)
	go func() { first <- attempt(h, 70, p) }()
	<-held
	verdict(t, attempt(h, 70, p), failure.Transient, download.ReasonInUse)
	release()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	wantFile(t, filepath.Join(h.Dir(), "c.bin"), content)
	wantOnly(t, h.Dir(), "c.bin")
}
