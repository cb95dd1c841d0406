package download_test

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/redrivehq/redrive/download"
	"github.com/redrivehq/redrive/failure"
)

// TestSidecarHoldsNoSecret: the sidecar of a partial file keeps no
// secret of the URL (its user name and password, its query), and still
// recognizes the URL: the next attempt resumes; an attempt for the same
// path with another query (another token) starts over.
func TestSidecarHoldsNoSecret(t *testing.T) {
	content := data(400_000, 9)
	const cut = 100_000
	var n atomic.Int32
	var sent atomic.Int64
	var rng atomic.Value
	rng.Store("")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			dropAfter(t, w, content, `"v1"`, cut)
			return
		}
		rng.Store(r.Header.Get("Range"))
		serve(w, r, content, `"v1"`, &sent)
	}))
	defer srv.Close()
	h := newHandler(t, download.Options{})
	const user, pass, token = "usr-SIDECAR-1", "pw-SIDECAR-2", "tok-SIDECAR-3"
	u := strings.Replace(srv.URL, "://", "://"+user+":"+pass+"@", 1) + "/f.bin?token=" + token + "&v=1"
	p := map[string]any{"url": u, "dest": "f.bin", "sha256": hexSum(content)}
	verdict(t, attempt(h, 11, p), failure.Transient, failure.ReasonConnectionReset)
	b, err := os.ReadFile(filepath.Join(h.Dir(), ".f.bin.redrive-11.meta"))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{user, pass, token, "SIDECAR"} {
		if strings.Contains(string(b), s) {
			t.Errorf("the sidecar holds %q: %s", s, b)
		}
	}
	// Another query: not the same URL, started over.
	other := map[string]any{"url": strings.Replace(u, token, "tok-other", 1), "dest": "f.bin", "sha256": hexSum(content)}
	if err := attempt(h, 11, other); err != nil {
		t.Fatal(err)
	}
	if rng.Load() != "" {
		t.Fatalf("an attempt with another URL resumed with Range %q", rng.Load())
	}
	wantFile(t, filepath.Join(h.Dir(), "f.bin"), content)

	// The same URL resumes.
	n.Store(0)
	sent.Store(0)
	os.Remove(filepath.Join(h.Dir(), "f.bin"))
	verdict(t, attempt(h, 12, p), failure.Transient, failure.ReasonConnectionReset)
	if err := attempt(h, 12, p); err != nil {
		t.Fatal(err)
	}
	if rng.Load() != "bytes="+strconv.Itoa(cut)+"-" || sent.Load() != int64(len(content)-cut) {
		t.Fatalf("the same URL resumed with Range %q, %d bytes sent", rng.Load(), sent.Load())
	}
	wantFile(t, filepath.Join(h.Dir(), "f.bin"), content)
}
