package download_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
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

// rangeServer serves first for the first request (dropping the connection
// after k bytes, with firstHeader), then answers a Range request with a
// 206 of second's bytes from the range's start with secondHeader, ignoring
// If-Range, and a request without Range with second whole.
func rangeServer(t *testing.T, first []byte, firstHeader string, k int, second []byte, secondHeader map[string]string) *httptest.Server {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			conn, bw, _ := w.(http.Hijacker).Hijack()
			defer conn.Close()
			fmt.Fprintf(bw, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n", len(first), firstHeader)
			bw.Write(first[:k])
			bw.Flush()
			return
		}
		for k, v := range secondHeader {
			w.Header().Set(k, v)
		}
		var from int
		if _, err := fmt.Sscanf(r.Header.Get("Range"), "bytes=%d-", &from); err == nil {
			w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", from, len(second)-1, len(second)))
			w.Header().Set("Content-Length", strconv.Itoa(len(second)-from))
			w.WriteHeader(http.StatusPartialContent)
			w.Write(second[from:])
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(second)))
		w.Write(second)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestPartialOfAnotherVersion: a server that honours Range but ignores
// If-Range answers a 206 from a file that changed at the same size (a new
// ETag, or a new Last-Modified): its bytes are not appended to the old
// ones, the attempt starts over and gets the new file whole.
func TestPartialOfAnotherVersion(t *testing.T) {
	v1, v2 := data(200_000, 46), data(200_000, 47)
	for _, c := range []struct {
		name          string
		first         string
		secondHeaders map[string]string
	}{
		{"etag", "ETag: \"v1\"\r\n", map[string]string{"ETag": `"v2"`}},
		{"etag missing from the 206", "ETag: \"v1\"\r\n", map[string]string{"Last-Modified": "Mon, 02 Jan 2006 15:04:05 GMT"}},
		{"last-modified", "Last-Modified: Mon, 02 Jan 2006 15:04:05 GMT\r\n", map[string]string{"Last-Modified": "Tue, 03 Jan 2006 15:04:05 GMT"}},
	} {
		srv := rangeServer(t, v1, c.first, 80_000, v2, c.secondHeaders)
		h := newHandler(t, download.Options{})
		p := map[string]any{"url": srv.URL + "/v.bin", "dest": "v.bin"}
		verdict(t, attempt(h, 80, p), failure.Transient, "")
		if err := attempt(h, 80, p); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		got, _ := os.ReadFile(filepath.Join(h.Dir(), "v.bin"))
		if !bytes.Equal(got, v2) {
			t.Errorf("%s: the file is not the new version whole (old bytes first: %v)", c.name, bytes.Equal(got[:80_000], v1[:80_000]))
		}
	}
}

// TestPartialOfAnotherEncoding: the first answer was gzip-encoded (the
// payload asked for it), the 206 that resumes it is not: the encodings
// are not mixed in one file, the attempt starts over.
func TestPartialOfAnotherEncoding(t *testing.T) {
	encoded, plain := data(150_000, 48), data(150_000, 49)
	srv := rangeServer(t, encoded, "ETag: \"e\"\r\nContent-Encoding: gzip\r\n", 50_000, plain, map[string]string{"ETag": `"e"`})
	h := newHandler(t, download.Options{})
	p := map[string]any{"url": srv.URL + "/g", "dest": "g.bin", "headers": map[string]string{"Accept-Encoding": "gzip"}}
	verdict(t, attempt(h, 81, p), failure.Transient, "")
	if err := attempt(h, 81, p); err != nil {
		t.Fatal(err)
	}
	wantFile(t, filepath.Join(h.Dir(), "g.bin"), plain)
}
