package download_test

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redrivehq/redrive/download"
	"github.com/redrivehq/redrive/failure"
)

// TestOverwriteFalseKeepsExistingFile: a second download to a file that
// exists replaces it by default (as it always did), and with
// "overwrite": false fails, permanent (reason "exists"), naming the file
// and leaving it as it is, whether dest names the file or a directory
// (whose file's name comes with the response).
func TestOverwriteFalseKeepsExistingFile(t *testing.T) {
	first, second := data(50_000, 1), data(60_000, 2)
	var body atomic.Pointer[[]byte]
	body.Store(&first)
	var sent atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		serve(w, r, *body.Load(), `"v"`, &sent)
	}))
	defer srv.Close()
	h := newHandler(t, download.Options{})
	for _, dest := range []string{"kept.bin", "sub/"} {
		name := dest
		if strings.HasSuffix(dest, "/") {
			name = dest + "file.bin"
		}
		url := srv.URL + "/file.bin"
		body.Store(&first)
		if err := attempt(h, 1, map[string]any{"url": url, "dest": dest}); err != nil {
			t.Fatal(err)
		}
		final := filepath.Join(h.Dir(), name)
		wantFile(t, final, first)

		body.Store(&second)
		no := false
		err := attempt(h, 2, map[string]any{"url": url, "dest": dest, "overwrite": no})
		v := verdict(t, err, failure.Permanent, download.ReasonExists)
		if !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %v (%s) does not name the file %s", dest, err, v.Reason, name)
		}
		wantFile(t, final, first)
		wantOnly(t, filepath.Dir(final), filepath.Base(final))

		// The default replaces it, as before.
		if err := attempt(h, 3, map[string]any{"url": url, "dest": dest}); err != nil {
			t.Fatal(err)
		}
		wantFile(t, final, second)
		yes := true
		body.Store(&first)
		if err := attempt(h, 4, map[string]any{"url": url, "dest": dest, "overwrite": yes}); err != nil {
			t.Fatal(err)
		}
		wantFile(t, final, first)
	}
}

// TestOverwriteFalseRaceKeepsFile: a file that appears at the final name
// while an "overwrite": false download runs is kept: the end of the
// attempt never replaces it.
func TestOverwriteFalseRaceKeepsFile(t *testing.T) {
	content := data(30_000, 3)
	h := newHandler(t, download.Options{})
	final := filepath.Join(h.Dir(), "late.bin")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Another writer creates the file while the download runs.
		if err := os.WriteFile(final, []byte("theirs"), 0o600); err != nil {
			t.Error(err)
		}
		w.Write(content)
	}))
	defer srv.Close()
	err := attempt(h, 1, map[string]any{"url": srv.URL, "dest": "late.bin", "overwrite": false})
	verdict(t, err, failure.Permanent, download.ReasonExists)
	wantFile(t, final, []byte("theirs"))
	wantOnly(t, h.Dir(), "late.bin")
}

// TestCannotResumeIsLogged: a download whose server sends no validator
// says so when it starts, and the next attempt says why it starts over
// from byte 0.
func TestCannotResumeIsLogged(t *testing.T) {
	content := data(100_000, 7)
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			conn, bw, _ := w.(http.Hijacker).Hijack()
			bw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
			bw.Write(content[:5000])
			bw.Flush()
			conn.Close()
			return
		}
		w.Write(content)
	}))
	defer srv.Close()
	var logs bytes.Buffer
	var mu syncWriter
	mu.w = &logs
	h := newHandler(t, download.Options{Logger: slog.New(slog.NewTextHandler(&mu, nil))})
	p := map[string]any{"url": srv.URL, "dest": "nv.bin"}
	verdict(t, attempt(h, 8, p), failure.Transient, "")
	if err := attempt(h, 8, p); err != nil {
		t.Fatal(err)
	}
	out := mu.String()
	for _, want := range []string{"no strong ETag and no Last-Modified", "cannot resume", "partial_bytes=5000"} {
		if !strings.Contains(out, want) {
			t.Errorf("logs lack %q:\n%s", want, out)
		}
	}
}

// syncWriter is a writer safe for concurrent use.
type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

func (s *syncWriter) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.String()
}
