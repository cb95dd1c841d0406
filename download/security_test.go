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
	"strings"
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

// keep the imports used when tests are trimmed.
var _ = context.Background
