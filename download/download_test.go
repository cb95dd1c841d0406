package download_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/breaker"
	"github.com/redrivehq/redrive/download"
	"github.com/redrivehq/redrive/failure"
)

// data returns n deterministic pseudo-random bytes.
func data(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		binary.LittleEndian.PutUint64(b[i:], r.Uint64())
	}
	for i := n &^ 7; i < n; i++ {
		b[i] = byte(r.Uint32())
	}
	return b
}

func hexSum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func newHandler(t *testing.T, opts download.Options) *download.Handler {
	t.Helper()
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	h, err := download.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// attempt runs one attempt of job id with payload.
func attempt(h *download.Handler, id int64, payload any) error {
	raw, err := json.Marshal(payload)
	if err != nil {
		panic(err)
	}
	return h.Handle(context.Background(), &redrive.Job{ID: id, Kind: download.Kind, Payload: raw})
}

// verdict classifies err as the engine does and checks class and reason.
func verdict(t *testing.T, err error, class failure.Class, reason string) failure.Verdict {
	t.Helper()
	v := failure.Classify(err)
	if err == nil || v.Class != class || (reason != "" && v.Reason != reason) {
		t.Fatalf("err %v classified %s/%s, want %s/%s", err, v.Class, v.Reason, class, reason)
	}
	return v
}

// files lists the names in dir, hidden ones included.
func files(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

func wantFile(t *testing.T, path string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: %d bytes (sha256 %s), want %d bytes (sha256 %s)", path, len(got), hexSum(got), len(want), hexSum(want))
	}
}

func wantOnly(t *testing.T, dir string, names ...string) {
	t.Helper()
	got := files(t, dir)
	if strings.Join(got, ",") != strings.Join(names, ",") {
		t.Fatalf("%s holds %q, want %q", dir, got, names)
	}
}

// counter counts the body bytes a handler writes.
type counter struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (c counter) Write(p []byte) (int, error) {
	n, err := c.ResponseWriter.Write(p)
	c.n.Add(int64(n))
	return n, err
}

// serve serves content with etag (and Range, If-Range), counting bytes.
func serve(w http.ResponseWriter, r *http.Request, content []byte, etag string, sent *atomic.Int64) {
	w.Header().Set("ETag", etag)
	w.Header().Set("Content-Type", "application/octet-stream")
	http.ServeContent(counter{w, sent}, r, "", time.Time{}, bytes.NewReader(content))
}

// dropAfter answers 200 with the whole length announced, sends k bytes
// of content and closes the connection.
func dropAfter(t *testing.T, w http.ResponseWriter, content []byte, etag string, k int) {
	conn, bw, err := w.(http.Hijacker).Hijack()
	if err != nil {
		t.Error(err)
		return
	}
	defer conn.Close()
	fmt.Fprintf(bw, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\nETag: %s\r\nContent-Type: application/octet-stream\r\n\r\n", len(content), etag)
	bw.Write(content[:k])
	bw.Flush()
}

// TestResumeAfterDrop: a connection dropped mid-body is transient, the
// partial file stays, and the next attempt asks for and gets only the
// missing bytes.
func TestResumeAfterDrop(t *testing.T) {
	content := data(1<<20+123, 1)
	const cut = 300_000
	var n atomic.Int32
	var sent atomic.Int64
	var rng, ifRange string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			dropAfter(t, w, content, `"v1"`, cut)
			return
		}
		rng, ifRange = r.Header.Get("Range"), r.Header.Get("If-Range")
		serve(w, r, content, `"v1"`, &sent)
	}))
	defer srv.Close()
	h := newHandler(t, download.Options{})
	p := map[string]any{"url": srv.URL + "/f.bin", "dest": "sub/f.bin", "sha256": hexSum(content)}
	verdict(t, attempt(h, 7, p), failure.Transient, failure.ReasonConnectionReset)
	dir := filepath.Join(h.Dir(), "sub")
	wantOnly(t, dir, ".f.bin.redrive-7.meta", ".f.bin.redrive-7.part")
	if fi, _ := os.Stat(filepath.Join(dir, ".f.bin.redrive-7.part")); fi.Size() != cut {
		t.Fatalf("partial file of %d bytes, want %d", fi.Size(), cut)
	}
	if err := attempt(h, 7, p); err != nil {
		t.Fatal(err)
	}
	if rng != "bytes="+strconv.Itoa(cut)+"-" || ifRange != `"v1"` {
		t.Fatalf("resumed with Range %q If-Range %q", rng, ifRange)
	}
	if got := sent.Load(); got != int64(len(content)-cut) {
		t.Fatalf("resumed attempt transferred %d bytes, want the %d missing", got, len(content)-cut)
	}
	wantFile(t, filepath.Join(dir, "f.bin"), content)
	wantOnly(t, dir, "f.bin")
}

// TestKilledWorkerResumes: a partial file whose sidecar records fewer
// synced bytes than the file holds (a worker killed between checkpoints)
// is cut back to the synced size and resumed from there.
func TestKilledWorkerResumes(t *testing.T) {
	content := data(500_000, 2)
	var sent atomic.Int64
	var rng atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rng.Store(r.Header.Get("Range"))
		w.Header().Set("Last-Modified", "Mon, 02 Jan 2006 15:04:05 GMT")
		http.ServeContent(counter{w, &sent}, r, "", time.Date(2006, 1, 2, 15, 4, 5, 0, time.UTC), bytes.NewReader(content))
	}))
	defer srv.Close()
	h := newHandler(t, download.Options{})
	part := filepath.Join(h.Dir(), download.PartName("k.bin", "3"))
	// 200000 bytes on disk, the last 50000 of them garbage, 150000 synced.
	junk := append(bytes.Clone(content[:150_000]), make([]byte, 50_000)...)
	os.WriteFile(part, junk, 0o644)
	m, _ := json.Marshal(map[string]any{"url": srv.URL + "/k", "last_modified": "Mon, 02 Jan 2006 15:04:05 GMT", "total": len(content), "synced": 150_000})
	os.WriteFile(strings.TrimSuffix(part, ".part")+".meta", m, 0o644)
	if err := attempt(h, 3, map[string]any{"url": srv.URL + "/k", "dest": "k.bin"}); err != nil {
		t.Fatal(err)
	}
	if rng.Load() != "bytes=150000-" || sent.Load() != int64(len(content)-150_000) {
		t.Fatalf("Range %q, %d bytes sent", rng.Load(), sent.Load())
	}
	wantFile(t, filepath.Join(h.Dir(), "k.bin"), content)
	wantOnly(t, h.Dir(), "k.bin")
}

// TestCompletePartialFinishes: a 416 to a range from the end of a
// complete partial file finishes it without transferring anything.
func TestCompletePartialFinishes(t *testing.T) {
	content := data(10_000, 3)
	var sent atomic.Int64
	var status atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: counter{w, &sent}}
		serve(rec, r, content, `"c"`, &sent)
		status.Store(int32(rec.code))
	}))
	defer srv.Close()
	h := newHandler(t, download.Options{})
	part := filepath.Join(h.Dir(), download.PartName("c.bin", "4"))
	os.WriteFile(part, content, 0o644)
	m, _ := json.Marshal(map[string]any{"url": srv.URL, "etag": `"c"`, "total": len(content), "synced": len(content)})
	os.WriteFile(strings.TrimSuffix(part, ".part")+".meta", m, 0o644)
	if err := attempt(h, 4, map[string]any{"url": srv.URL, "dest": "c.bin", "sha256": hexSum(content)}); err != nil {
		t.Fatal(err)
	}
	if status.Load() != http.StatusRequestedRangeNotSatisfiable {
		t.Fatalf("server answered %d, want 416", status.Load())
	}
	wantFile(t, filepath.Join(h.Dir(), "c.bin"), content)
	wantOnly(t, h.Dir(), "c.bin")
}

type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.code = code
	s.ResponseWriter.WriteHeader(code)
}

// TestRangeIgnored: a server that answers a range with 200 and the whole
// file: the partial file is truncated and the result is right.
func TestRangeIgnored(t *testing.T) {
	content := data(400_000, 4)
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			dropAfter(t, w, content, `"r"`, 100_000)
			return
		}
		if r.Header.Get("Range") == "" {
			t.Error("second request without Range")
		}
		w.Header().Set("ETag", `"r"`)
		w.Header().Set("Content-Length", strconv.Itoa(len(content)))
		w.Write(content) // Range ignored
	}))
	defer srv.Close()
	h := newHandler(t, download.Options{})
	p := map[string]any{"url": srv.URL + "/x/r.bin", "dest": "out/"}
	verdict(t, attempt(h, 5, p), failure.Transient, "")
	if err := attempt(h, 5, p); err != nil {
		t.Fatal(err)
	}
	wantFile(t, filepath.Join(h.Dir(), "out", "r.bin"), content)
	wantOnly(t, filepath.Join(h.Dir(), "out"), "r.bin")
}

// TestFileChanged: the file changed between attempts (a new ETag):
// If-Range makes the server send the whole new file, which replaces the
// partial one.
func TestFileChanged(t *testing.T) {
	v1, v2 := data(300_000, 5), data(280_000, 6)
	var n atomic.Int32
	var sent atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			dropAfter(t, w, v1, `"v1"`, 200_000)
			return
		}
		if r.Header.Get("If-Range") != `"v1"` {
			t.Errorf("If-Range %q", r.Header.Get("If-Range"))
		}
		serve(w, r, v2, `"v2"`, &sent)
	}))
	defer srv.Close()
	h := newHandler(t, download.Options{})
	p := map[string]any{"url": srv.URL, "dest": "changed.bin"}
	verdict(t, attempt(h, 6, p), failure.Transient, "")
	if err := attempt(h, 6, p); err != nil {
		t.Fatal(err)
	}
	if sent.Load() != int64(len(v2)) {
		t.Fatalf("%d bytes sent, want the whole new file", sent.Load())
	}
	wantFile(t, filepath.Join(h.Dir(), "changed.bin"), v2)
	wantOnly(t, h.Dir(), "changed.bin")
}

// TestNoValidatorRestarts: without ETag or Last-Modified a partial file
// is not resumed (it could mix two versions): the next attempt starts over.
func TestNoValidatorRestarts(t *testing.T) {
	content := data(100_000, 7)
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			conn, bw, _ := w.(http.Hijacker).Hijack()
			fmt.Fprintf(bw, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", len(content))
			bw.Write(content[:5000])
			bw.Flush()
			conn.Close()
			return
		}
		if r.Header.Get("Range") != "" {
			t.Errorf("Range %q without a validator", r.Header.Get("Range"))
		}
		w.Write(content)
	}))
	defer srv.Close()
	h := newHandler(t, download.Options{})
	p := map[string]any{"url": srv.URL, "dest": "nv.bin"}
	verdict(t, attempt(h, 8, p), failure.Transient, "")
	if err := attempt(h, 8, p); err != nil {
		t.Fatal(err)
	}
	wantFile(t, filepath.Join(h.Dir(), "nv.bin"), content)
}

// statuses answers with the statuses in turn (the last repeated), then
// with content; it counts requests.
func statuses(t *testing.T, header http.Header, content []byte, codes ...int) (*httptest.Server, *atomic.Int32) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i := int(n.Add(1)) - 1
		if i < len(codes) {
			for k, v := range header {
				w.Header()[k] = v
			}
			w.WriteHeader(codes[i])
			io.WriteString(w, "said "+strconv.Itoa(codes[i]))
			return
		}
		w.Write(content)
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

func TestStatusClassification(t *testing.T) {
	content := data(1000, 8)
	h := newHandler(t, download.Options{})
	for _, c := range []struct {
		code        int
		retryAfter  string
		class       failure.Class
		reason      string
		retryAfterD time.Duration
	}{
		{503, "", failure.Transient, "http_503", 0},
		{500, "", failure.Transient, "http_500", 0},
		{408, "", failure.Transient, "http_408", 0},
		{429, "7", failure.RateLimited, "http_429", 7 * time.Second},
		{503, "3", failure.RateLimited, "http_503", 3 * time.Second},
		{404, "", failure.Permanent, "http_404", 0},
		{410, "", failure.Permanent, "http_410", 0},
		{401, "", failure.NeedsAuth, "http_401", 0},
		{403, "", failure.NeedsAuth, "http_403", 0},
	} {
		hdr := http.Header{}
		if c.retryAfter != "" {
			hdr.Set("Retry-After", c.retryAfter)
		}
		srv, _ := statuses(t, hdr, content, c.code)
		err := attempt(h, 9, map[string]any{"url": srv.URL, "dest": "s.bin"})
		v := verdict(t, err, c.class, c.reason)
		if v.RetryAfter != c.retryAfterD || !strings.Contains(err.Error(), "said "+strconv.Itoa(c.code)) {
			t.Errorf("%d: retry after %s, error %q", c.code, v.RetryAfter, err)
		}
		// The next attempt succeeds: a failed attempt left nothing behind
		// that gets in the way.
		if err := attempt(h, 9, map[string]any{"url": srv.URL, "dest": "s.bin"}); err != nil {
			t.Fatalf("%d then 200: %v", c.code, err)
		}
		wantFile(t, filepath.Join(h.Dir(), "s.bin"), content)
	}
	wantOnly(t, h.Dir(), "s.bin")
}

func TestConnectionRefusedIsTransient(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	u := srv.URL
	srv.Close()
	verdict(t, attempt(newHandler(t, download.Options{}), 1, map[string]any{"url": u}), failure.Transient, failure.ReasonConnectionRefused)
}

func TestChecksumMismatchIsPermanent(t *testing.T) {
	content := data(50_000, 9)
	srv, _ := statuses(t, nil, content)
	h := newHandler(t, download.Options{})
	err := attempt(h, 10, map[string]any{"url": srv.URL, "dest": "sum.bin", "sha256": strings.Repeat("ab", 32)})
	verdict(t, err, failure.Permanent, download.ReasonChecksumMismatch)
	wantOnly(t, h.Dir())
	// Upper-case hex is accepted.
	if err := attempt(h, 10, map[string]any{"url": srv.URL, "dest": "sum.bin", "sha256": strings.ToUpper(hexSum(content))}); err != nil {
		t.Fatal(err)
	}
}

func TestTooLargeIsPermanent(t *testing.T) {
	content := data(100_000, 10)
	// Announced: refused before a byte is written.
	srv, _ := statuses(t, nil, content)
	h := newHandler(t, download.Options{})
	verdict(t, attempt(h, 11, map[string]any{"url": srv.URL, "dest": "big", "max_bytes": 99_999}), failure.Permanent, download.ReasonTooLarge)
	wantOnly(t, h.Dir())
	// Not announced (chunked): refused once the body goes past the limit.
	chunked := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for i := 0; i < len(content); i += 10_000 {
			w.Write(content[i : i+10_000])
			w.(http.Flusher).Flush()
		}
	}))
	defer chunked.Close()
	verdict(t, attempt(h, 11, map[string]any{"url": chunked.URL, "dest": "big", "max_bytes": 55_000}), failure.Permanent, download.ReasonTooLarge)
	wantOnly(t, h.Dir())
	// Options.MaxBytes is the default.
	h2 := newHandler(t, download.Options{MaxBytes: 1000})
	verdict(t, attempt(h2, 11, map[string]any{"url": chunked.URL, "dest": "big"}), failure.Permanent, download.ReasonTooLarge)
	wantOnly(t, h2.Dir())
}

func TestUnwritableIsPermanent(t *testing.T) {
	content := data(1000, 11)
	srv, n := statuses(t, nil, content)
	h := newHandler(t, download.Options{})
	os.WriteFile(filepath.Join(h.Dir(), "afile"), []byte("x"), 0o644)
	os.Mkdir(filepath.Join(h.Dir(), "adir"), 0o755)
	for _, dest := range []string{"afile/x.bin", "afile/", "adir"} {
		verdict(t, attempt(h, 12, map[string]any{"url": srv.URL, "dest": dest}), failure.Permanent, download.ReasonUnwritable)
	}
	if n.Load() != 0 {
		t.Errorf("%d requests sent for destinations known unwritable", n.Load())
	}
	if os.Geteuid() != 0 {
		ro := filepath.Join(h.Dir(), "ro")
		os.Mkdir(ro, 0o555)
		verdict(t, attempt(h, 12, map[string]any{"url": srv.URL, "dest": "ro/x.bin"}), failure.Permanent, download.ReasonUnwritable)
	}
}

// fullDisk fails every write with ENOSPC after writing half of it.
type fullDisk struct{ w io.Writer }

func (f fullDisk) Write(p []byte) (int, error) {
	n, _ := f.w.Write(p[:len(p)/2])
	return n, &os.PathError{Op: "write", Path: "x", Err: syscall.ENOSPC}
}

// TestDiskFull: ENOSPC is transient (disk_full) and trips the "disk"
// breaker after its threshold; while it is open, attempts return its
// *breaker.OpenError (a deferral) without a request.
func TestDiskFull(t *testing.T) {
	content := data(100_000, 12)
	var reqs atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reqs.Add(1)
		serve(w, r, content, `"d"`, new(atomic.Int64))
	}))
	defer srv.Close()
	reg := breaker.NewRegistry(breaker.Config{Failures: 3, BreakDuration: time.Hour})
	h := newHandler(t, download.Options{Breakers: reg})
	var full atomic.Bool
	full.Store(true)
	download.SetWriteHook(h, func(w io.Writer) io.Writer {
		if full.Load() {
			return fullDisk{w}
		}
		return w
	})
	p := map[string]any{"url": srv.URL, "dest": "d.bin"}
	for i := range 3 {
		err := attempt(h, 13, p)
		verdict(t, err, failure.Transient, download.ReasonDiskFull)
		if !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("attempt %d: %v does not wrap ENOSPC", i+1, err)
		}
	}
	if st := reg.Get(download.DiskBreaker).State(); st != breaker.Open {
		t.Fatalf("disk breaker %s after 3 ENOSPC, want open", st)
	}
	before := reqs.Load()
	err := attempt(h, 13, p)
	var open *breaker.OpenError
	if !errors.As(err, &open) || open.Name != download.DiskBreaker || reqs.Load() != before {
		t.Fatalf("with the breaker open: %v, %d requests; want a *breaker.OpenError and none", err, reqs.Load()-before)
	}
	// Space is back and the breaker reset: the download completes.
	full.Store(false)
	reg.Get(download.DiskBreaker).Reset()
	if err := attempt(h, 13, p); err != nil {
		t.Fatal(err)
	}
	wantFile(t, filepath.Join(h.Dir(), "d.bin"), content)
}

// TestOtherErrorsDoNotTripDisk: HTTP failures do not count against the
// disk breaker.
func TestOtherErrorsDoNotTripDisk(t *testing.T) {
	srv, _ := statuses(t, nil, nil, 500, 500, 500, 500, 500, 500)
	reg := breaker.NewRegistry(breaker.Config{Failures: 2})
	h := newHandler(t, download.Options{Breakers: reg})
	for range 5 {
		verdict(t, attempt(h, 14, map[string]any{"url": srv.URL, "dest": "x"}), failure.Transient, "http_500")
	}
	if st := reg.Get(download.DiskBreaker).State(); st != breaker.Closed {
		t.Fatalf("disk breaker %s", st)
	}
}

// TestDirectoryDestNames: a directory destination's file is named by
// Content-Disposition, sanitised, else by the URL's last segment.
func TestDirectoryDestNames(t *testing.T) {
	content := data(100, 13)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if cd := r.URL.Query().Get("cd"); cd != "" {
			w.Header().Set("Content-Disposition", cd)
		}
		w.Write(content)
	}))
	defer srv.Close()
	h := newHandler(t, download.Options{})
	for _, c := range []struct{ path, cd, dest, want string }{
		{"/a/report.pdf", "", "", "report.pdf"},
		{"/a/b%20c.txt", "", "docs/", "docs/b c.txt"},
		{"/x", `attachment; filename="../../etc/passwd"`, "in/", "in/passwd"},
		{"/x", `attachment; filename*=UTF-8''%E2%82%AC%20rates.csv`, "", "€ rates.csv"},
		{"/x", `attachment; filename=".hidden"`, "h/", "h/hidden"},
		{"/", "", "root/", "root/download"},
	} {
		u := srv.URL + c.path
		if c.cd != "" {
			u += "?cd=" + urlQueryEscape(c.cd)
		}
		if err := attempt(h, 15, map[string]any{"url": u, "dest": c.dest}); err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		wantFile(t, filepath.Join(h.Dir(), filepath.FromSlash(c.want)), content)
	}
}

func urlQueryEscape(s string) string {
	var b strings.Builder
	for _, c := range []byte(s) {
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}

func TestSanitize(t *testing.T) {
	for in, want := range map[string]string{
		"a.txt": "a.txt", "../b": "b", `..\..\c.exe`: "c.exe", "...": "", "x\x00y\nz": "x_y_z",
		" . name. ": "name", strings.Repeat("é", 200): strings.Repeat("é", 100),
	} {
		if got := download.Sanitize(in); got != want {
			t.Errorf("Sanitize(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestContentRange(t *testing.T) {
	for in, want := range map[string][4]int64{
		"bytes 0-9/10":    {0, 9, 10, 1},
		"bytes 5-9/*":     {5, 9, -1, 1},
		"bytes */10":      {-1, -1, 10, 1},
		"bytes 5-4/10":    {-1, -1, -1, 0},
		"bytes 0-10/10":   {-1, -1, -1, 0},
		"items 0-1/2":     {-1, -1, -1, 0},
		"bytes x-1/2":     {-1, -1, -1, 0},
		"bytes 0-1":       {-1, -1, -1, 0},
		"bytes 0-1/-3":    {-1, -1, -1, 0},
		"bytes 100-199/*": {100, 199, -1, 1},
	} {
		s, e, tot, ok := download.ContentRange(in)
		okn := int64(0)
		if ok {
			okn = 1
		}
		if [4]int64{s, e, tot, okn} != want {
			t.Errorf("%q: %d %d %d %v, want %v", in, s, e, tot, ok, want)
		}
	}
}

// TestGuardIsShared: the http kind's SSRF guard applies, at enqueue
// (Validate), at dial time and on redirects.
func TestGuardIsShared(t *testing.T) {
	h := newHandler(t, download.Options{})
	err := h.Validate(json.RawMessage(`{"url":"http://169.254.169.254/latest/meta-data/"}`))
	var fe *redrive.FieldError
	if !errors.As(err, &fe) || fe.Field != "payload.url" || !strings.Contains(err.Error(), "allowed by download.Options.AllowLinkLocal") {
		t.Fatalf("metadata URL: %v", err)
	}
	redir := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://[fe80::1]/x", http.StatusFound)
	}))
	defer redir.Close()
	err = attempt(h, 16, map[string]any{"url": redir.URL})
	verdict(t, err, failure.Permanent, "")
	if !strings.Contains(err.Error(), "download: refusing to connect to fe80::1") {
		t.Fatalf("redirect to link-local: %v", err)
	}
	var hit atomic.Bool
	local := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hit.Store(true) }))
	defer local.Close()
	port := local.URL[strings.LastIndexByte(local.URL, ':'):]
	hb := newHandler(t, download.Options{BlockPrivate: true, AllowPrivateSetting: "--download-allow-private"})
	err = attempt(hb, 16, map[string]any{"url": "http://localhost" + port})
	verdict(t, err, failure.Permanent, "")
	if hit.Load() || !strings.Contains(err.Error(), "allowed by --download-allow-private") {
		t.Fatalf("localhost with private addresses blocked: %v, request sent %v", err, hit.Load())
	}
}

func TestValidateRefusals(t *testing.T) {
	h := newHandler(t, download.Options{MaxBytes: 1 << 20})
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(h.Dir(), "escape")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "f"), filepath.Join(h.Dir(), "escape-file")); err != nil {
		t.Fatal(err)
	}
	os.Mkdir(filepath.Join(h.Dir(), "in"), 0o755)
	if err := os.Symlink(filepath.Join(h.Dir(), "in"), filepath.Join(h.Dir(), "inside")); err != nil {
		t.Fatal(err)
	}
	many := map[string]string{}
	for i := range download.MaxHeaders + 1 {
		many["X-H"+strconv.Itoa(i)] = "v"
	}
	manyJSON, _ := json.Marshal(many)
	for _, c := range []struct{ payload, field, want string }{
		{`"a string"`, "payload", "want a JSON object"},
		{`{"url":"http://x"} {}`, "payload", "trailing data"},
		{`{"url":"http://x","urls":1}`, "payload", "unknown field"},
		{`{"dest":"a"}`, "payload.url", "url is required"},
		{`{"url":"ftp://x/a"}`, "payload.url", "scheme must be http or https"},
		{`{"url":"file:///etc/passwd"}`, "payload.url", "scheme must be http or https"},
		{`{"url":"http://"}`, "payload.url", "has no host"},
		{`{"url":"http://x","dest":"/etc/passwd"}`, "payload.dest", "absolute"},
		{`{"url":"http://x","dest":"../x"}`, "payload.dest", `".."`},
		{`{"url":"http://x","dest":"a/../../x"}`, "payload.dest", `".."`},
		{`{"url":"http://x","dest":"a/.."}`, "payload.dest", `".."`},
		{`{"url":"http://x","dest":"escape/x"}`, "payload.dest", "symbolic link"},
		{`{"url":"http://x","dest":"escape/"}`, "payload.dest", "symbolic link"},
		{`{"url":"http://x","dest":"escape/deeper/x"}`, "payload.dest", "symbolic link"},
		{`{"url":"http://x","dest":"escape-file"}`, "payload.dest", "cannot resolve"},
		{`{"url":"http://x","dest":"a\nb"}`, "payload.dest", "control character"},
		{`{"url":"http://x","dest":"."}`, "payload.dest", "download directory itself"},
		{`{"url":"http://x","sha256":"abc"}`, "payload.sha256", "64 hex digits"},
		{`{"url":"http://x","sha256":"` + strings.Repeat("zz", 32) + `"}`, "payload.sha256", "64 hex digits"},
		{`{"url":"http://x","max_bytes":-1}`, "payload.max_bytes", "negative"},
		{`{"url":"http://x","max_bytes":2000000}`, "payload.max_bytes", "above the limit"},
		{`{"url":"http://x","timeout":"soon"}`, "payload.timeout", `timeout "soon"`},
		{`{"url":"http://x","timeout":"48h"}`, "payload.timeout", "above the limit"},
		{`{"url":"http://x","headers":{"Bad Name":"v"}}`, "payload.headers", "not a valid HTTP token"},
		{`{"url":"http://x","headers":{"X":"a\r\nB: c"}}`, "payload.headers", "line break"},
		{`{"url":"http://x","headers":{"range":"bytes=0-"}}`, "payload.headers", "set by the handler"},
		{`{"url":"http://x","headers":` + string(manyJSON) + `}`, "payload.headers", "the limit is 100"},
	} {
		err := h.Validate(json.RawMessage(c.payload))
		var fe *redrive.FieldError
		if !errors.As(err, &fe) || fe.Field != c.field || !errors.Is(err, redrive.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want a *FieldError on %s matching ErrInvalid and mentioning %q", c.payload, err, c.field, c.want)
		}
		// An attempt refuses it too, permanently.
		herr := h.Handle(context.Background(), &redrive.Job{ID: 1, Payload: json.RawMessage(c.payload)})
		if v := failure.Classify(herr); v.Class != failure.Permanent {
			t.Errorf("%s: attempt %v classified %s, want permanent", c.payload, herr, v.Class)
		}
	}
	for _, ok := range []string{
		`{"url":"http://x"}`, `{"url":"https://x/a","dest":"a/b/c.bin"}`, `{"url":"http://x","dest":"inside/f"}`,
		`{"url":"http://x","dest":"in/"}`, `{"url":"http://x","dest":"./a/./b"}`, `{"url":"http://x","dest":"a..b"}`,
		`{"url":"http://x","sha256":"` + strings.Repeat("Ab", 32) + `","max_bytes":1048576,"timeout":30,"headers":{"Host":"h","X":"y"}}`,
	} {
		if err := h.Validate(json.RawMessage(ok)); err != nil {
			t.Errorf("%s: %v, want accepted", ok, err)
		}
	}
}

// FuzzValidate: any payload: Validate never panics; a refusal is a
// *FieldError matching ErrInvalid; an accepted dest stays inside the
// download directory.
func FuzzValidate(f *testing.F) {
	for _, s := range []string{
		`{"url":"http://x","dest":"a/b"}`, `{"url":"http://x","dest":"../a"}`, `{"url":"http://x","dest":"/a"}`,
		`{"url":"https://x","sha256":"` + strings.Repeat("0", 64) + `"}`, `{"url":"http://x","dest":"a/"}`,
		`{"url":"http://x","max_bytes":-5}`, `{"url":"http://[::1]:80/","headers":{"A":"b"},"timeout":"5s"}`, `[]`, `null`,
	} {
		f.Add([]byte(s))
	}
	dir := f.TempDir()
	h, err := download.New(download.Options{Dir: dir})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		err := h.Validate(raw)
		if err != nil {
			var fe *redrive.FieldError
			if !errors.As(err, &fe) || !errors.Is(err, redrive.ErrInvalid) || !strings.HasPrefix(fe.Field, "payload") {
				t.Fatalf("%q: %v is not a payload *FieldError matching ErrInvalid", raw, err)
			}
			return
		}
		var p download.Payload
		if json.Unmarshal(raw, &p) != nil {
			t.Fatalf("%q accepted but does not decode", raw)
		}
		full := filepath.Join(h.Dir(), filepath.FromSlash(p.Dest))
		rel, err := filepath.Rel(h.Dir(), full)
		if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			t.Fatalf("%q accepted with dest %q outside the directory", raw, p.Dest)
		}
	})
}

func TestNewNeedsDir(t *testing.T) {
	if _, err := download.New(download.Options{}); err == nil {
		t.Fatal("New without Dir succeeded")
	}
	f := filepath.Join(t.TempDir(), "file")
	os.WriteFile(f, nil, 0o644)
	if _, err := download.New(download.Options{Dir: f}); err == nil {
		t.Fatal("New with a file as Dir succeeded")
	}
	d := filepath.Join(t.TempDir(), "new", "dir")
	if _, err := download.New(download.Options{Dir: d}); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
		t.Fatalf("Dir not created: %v", err)
	}
}

// TestTimeoutMidBodyResumes: an attempt that runs out of its timeout
// mid-body is transient and the next resumes.
func TestTimeoutMidBodyResumes(t *testing.T) {
	content := data(200_000, 14)
	var n atomic.Int32
	release := make(chan struct{})
	var once sync.Once
	defer once.Do(func() { close(release) })
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			w.Header().Set("ETag", `"t"`)
			w.Header().Set("Content-Length", strconv.Itoa(len(content)))
			w.Write(content[:50_000])
			w.(http.Flusher).Flush()
			<-release
			return
		}
		if r.Header.Get("Range") != "bytes=50000-" {
			t.Errorf("Range %q", r.Header.Get("Range"))
		}
		serve(w, r, content, `"t"`, new(atomic.Int64))
	}))
	defer srv.Close()
	h := newHandler(t, download.Options{})
	p := map[string]any{"url": srv.URL, "dest": "t.bin", "timeout": "300ms"}
	err := attempt(h, 17, p)
	verdict(t, err, failure.Transient, failure.ReasonDeadlineExceeded)
	once.Do(func() { close(release) })
	if err := attempt(h, 17, p); err != nil {
		t.Fatal(err)
	}
	wantFile(t, filepath.Join(h.Dir(), "t.bin"), content)
}

// genReader is a deterministic stream of n bytes, generated on the fly:
// a 1 MiB pseudo-random block, each copy stamped with its index.
type genReader struct {
	block []byte
	off   int64
	n     int64
}

func newGen(n int64) *genReader { return &genReader{block: data(1<<20, 99), n: n} }

func (g *genReader) Read(p []byte) (int, error) {
	if g.off >= g.n {
		return 0, io.EOF
	}
	total := 0
	for len(p) > 0 && g.off < g.n {
		bi, bo := g.off>>20, int(g.off&(1<<20-1))
		var stamp [8]byte
		binary.LittleEndian.PutUint64(stamp[:], uint64(bi))
		k := min(len(p), 1<<20-bo, int(g.n-g.off))
		copy(p[:k], g.block[bo:bo+k])
		for i := bo; i < 8 && i < bo+k; i++ {
			p[i-bo] = stamp[i]
		}
		p, g.off, total = p[k:], g.off+int64(k), total+k
	}
	return total, nil
}

// TestTwoGiB: a 2 GiB file, generated as it is served, lands whole; the
// check streams both the expected and the written bytes through SHA-256.
func TestTwoGiB(t *testing.T) {
	if testing.Short() {
		t.Skip("2 GiB download skipped with -short")
	}
	const size = 2 << 30
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(size))
		w.Header().Set("ETag", `"big"`)
		io.CopyBuffer(w, newGen(size), make([]byte, 256<<10))
	}))
	defer srv.Close()
	want := sha256.New()
	io.Copy(want, newGen(size))
	h := newHandler(t, download.Options{})
	if err := attempt(h, 18, map[string]any{"url": srv.URL, "dest": "big.bin", "sha256": hex.EncodeToString(want.Sum(nil))}); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(h.Dir(), "big.bin"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := sha256.New()
	n, _ := io.Copy(got, bufio.NewReaderSize(f, 1<<20))
	if n != size || !bytes.Equal(got.Sum(nil), want.Sum(nil)) {
		t.Fatalf("%d bytes, sha256 %x; want %d bytes, %x", n, got.Sum(nil), size, want.Sum(nil))
	}
	wantOnly(t, h.Dir(), "big.bin")
}

// TestSymlinkedPartialNotFollowed: a symbolic link planted where a job's
// partial file goes is removed, not written through.
func TestSymlinkedPartialNotFollowed(t *testing.T) {
	content := data(5000, 15)
	srv, _ := statuses(t, nil, content)
	h := newHandler(t, download.Options{})
	victim := filepath.Join(t.TempDir(), "victim")
	os.WriteFile(victim, []byte("keep"), 0o644)
	if err := os.Symlink(victim, filepath.Join(h.Dir(), download.PartName("s.bin", "19"))); err != nil {
		t.Fatal(err)
	}
	if err := attempt(h, 19, map[string]any{"url": srv.URL, "dest": "s.bin"}); err != nil {
		t.Fatal(err)
	}
	wantFile(t, victim, []byte("keep"))
	wantFile(t, filepath.Join(h.Dir(), "s.bin"), content)
	wantOnly(t, h.Dir(), "s.bin")
}
