package download_test

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redrivehq/redrive/download"
	"github.com/redrivehq/redrive/failure"
)

// TestTricklingServerStalls: a server that keeps the connection alive
// with a byte now and then holds a worker for the whole attempt timeout
// (an hour by default) unless the attempt demands a minimum progress:
// fewer than StallBytes in StallTimeout ends the attempt, transient
// (reason "stalled"), and what came is kept for the next attempt.
//
// Real time passing is what is tested: the server sleeps between bytes.
func TestTricklingServerStalls(t *testing.T) {
	const size = 150
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("ETag", `"t"`)
		w.Header().Set("Content-Length", strconv.Itoa(size))
		for range size {
			if _, err := w.Write([]byte{'t'}); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}))
	defer srv.Close()
	h := newHandler(t, download.Options{StallTimeout: 400 * time.Millisecond, StallBytes: 100})
	err := attempt(h, 100, map[string]any{"url": srv.URL + "/t.bin", "dest": "t.bin", "timeout": "10m"})
	verdict(t, err, failure.Transient, download.ReasonStalled)
	fi, serr := os.Stat(filepath.Join(h.Dir(), download.PartName("t.bin", "100")))
	if serr != nil || fi.Size() == 0 || fi.Size() >= size {
		t.Fatalf("partial file %v, %v: want the bytes that came, kept", fi, serr)
	}
}

// TestSilentServerStalls: a server that accepts the request and never
// answers is a stall too, not an hour's wait.
func TestSilentServerStalls(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	h := newHandler(t, download.Options{StallTimeout: 300 * time.Millisecond, StallBytes: 1})
	err := attempt(h, 101, map[string]any{"url": srv.URL + "/s.bin", "dest": "s.bin", "timeout": "20s"})
	verdict(t, err, failure.Transient, download.ReasonStalled)
}

// TestCloseDelimitedBodyVerified: a body without Content-Length or
// chunking ends when the connection closes, so a connection cut short
// looks like a whole file. With a validator, the attempt asks for the
// bytes after the end it saw: a 206 shows the body was cut, and its bytes
// complete the file (a 416 would have confirmed the end).
func TestCloseDelimitedBodyVerified(t *testing.T) {
	content := data(120_000, 54)
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			conn, bw, _ := w.(http.Hijacker).Hijack()
			defer conn.Close()
			fmt.Fprintf(bw, "HTTP/1.1 200 OK\r\nETag: \"d\"\r\nConnection: close\r\n\r\n")
			bw.Write(content[:70_000])
			bw.Flush()
			return
		}
		w.Header().Set("ETag", `"d"`)
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(content))
	}))
	defer srv.Close()
	h := newHandler(t, download.Options{})
	if err := attempt(h, 102, map[string]any{"url": srv.URL + "/d.bin", "dest": "d.bin"}); err != nil {
		t.Fatal(err)
	}
	wantFile(t, filepath.Join(h.Dir(), "d.bin"), content)
	wantOnly(t, h.Dir(), "d.bin")
}

// TestCloseDelimitedCutWithoutRanges: a server that ignores Range
// answers the check of a close-delimited body's end with a 200 of the
// whole file, whose Content-Length shows the body was cut: the short
// file must not be renamed into place as whole. (A 5xx to the check
// cannot confirm the end either.)
func TestCloseDelimitedCutWithoutRanges(t *testing.T) {
	content := data(120_000, 55)
	for _, probe := range []int{http.StatusOK, http.StatusServiceUnavailable} {
		var n atomic.Int32
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if n.Add(1) == 1 {
				conn, bw, _ := w.(http.Hijacker).Hijack()
				defer conn.Close()
				fmt.Fprintf(bw, "HTTP/1.1 200 OK\r\nETag: \"c\"\r\nConnection: close\r\n\r\n")
				bw.Write(content[:70_000])
				bw.Flush()
				return
			}
			w.Header().Set("ETag", `"c"`)
			if probe != http.StatusOK {
				w.WriteHeader(probe)
				return
			}
			w.Header().Set("Content-Length", strconv.Itoa(len(content)))
			w.Write(content) // Range ignored
		}))
		h := newHandler(t, download.Options{})
		err := attempt(h, 103, map[string]any{"url": srv.URL + "/c.bin", "dest": "c.bin"})
		srv.Close()
		if err == nil {
			b, _ := os.ReadFile(filepath.Join(h.Dir(), "c.bin"))
			if len(b) != len(content) {
				t.Errorf("check answered %d: a body cut after 70000 of %d bytes was renamed into place (%d bytes)",
					probe, len(content), len(b))
			}
			continue
		}
		verdict(t, err, failure.Transient, "")
		if _, serr := os.Stat(filepath.Join(h.Dir(), "c.bin")); serr == nil {
			t.Errorf("check answered %d: failed (%v) but c.bin exists", probe, err)
		}
	}
}
