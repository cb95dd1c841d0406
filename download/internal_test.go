package download

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/failure"
)

func newInternal(t *testing.T) *Handler {
	t.Helper()
	h, err := New(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// prepared returns the attempt Handle would run for payload and job 1.
func prepared(t *testing.T, h *Handler, payload string) *attempt {
	t.Helper()
	pl, err := h.parse(json.RawMessage(payload))
	if err != nil {
		t.Fatal(err)
	}
	a := &attempt{h: h, pl: pl, br: h.opts.Breakers.Get(DiskBreaker)}
	a.part = filepath.Join(pl.dir, partName(pl.name, "1"))
	a.metaPath = a.part[:len(a.part)-len(".part")] + ".meta"
	return a
}

// TestResumableRules: a partial file is resumed only with a sidecar for
// the same URL, with a validator, and no larger than the file: from the
// file's size while the machine has not restarted since it was written,
// else from the last checkpoint.
func TestResumableRules(t *testing.T) {
	h := newInternal(t)
	for _, c := range []struct {
		name      string
		size      int
		m         *meta
		otherBoot bool // the machine restarted since the sidecar was written
		resume    int64
	}{
		{"ok", 100, &meta{URL: "http://x/a", ETag: `"e"`, Total: 200, Synced: 100}, false, 100},
		{"same boot: from the file's size", 150, &meta{URL: "http://x/a", LastModified: "d", Total: -1, Synced: 100}, false, 150},
		{"same boot, nothing synced yet", 70, &meta{URL: "http://x/a", ETag: `"e"`, Total: 200}, false, 70},
		{"after a restart: cut back to synced", 150, &meta{URL: "http://x/a", LastModified: "d", Total: -1, Synced: 100}, true, 100},
		{"after a restart, nothing synced", 70, &meta{URL: "http://x/a", ETag: `"e"`, Total: 200}, true, 0},
		{"other URL", 100, &meta{URL: "http://x/b", ETag: `"e"`, Total: 200, Synced: 100}, false, 0},
		{"no validator", 100, &meta{URL: "http://x/a", Total: 200, Synced: 100}, false, 0},
		{"after a restart, file shorter than synced", 50, &meta{URL: "http://x/a", ETag: `"e"`, Total: 200, Synced: 100}, true, 0},
		{"larger than the total", 100, &meta{URL: "http://x/a", ETag: `"e"`, Total: 80, Synced: 100}, false, 0},
		{"no sidecar", 100, nil, false, 0},
	} {
		a := prepared(t, h, `{"url":"http://x/a","dest":"a"}`)
		os.WriteFile(a.part, make([]byte, c.size), 0o644)
		if c.m != nil {
			a.saveMeta(c.m)
			if c.otherBoot {
				c.m.Boot = "an-earlier-boot"
				b, _ := json.Marshal(c.m)
				os.WriteFile(a.metaPath, b, 0o644)
			}
		}
		if err := a.open(); err != nil {
			t.Fatal(err)
		}
		m, off := a.resumable()
		if off != c.resume || (off > 0) != (m != nil) {
			t.Errorf("%s: resume from %d, want %d", c.name, off, c.resume)
		}
		fi, err := os.Stat(a.part)
		if err != nil || fi.Size() != off {
			t.Errorf("%s: partial file %v, %v; want %d bytes", c.name, fi, err, off)
		}
		if _, err := os.Stat(a.metaPath); (err == nil) != (off > 0) {
			t.Errorf("%s: sidecar %v, resumed from %d", c.name, err, off)
		}
		a.remove()
		a.end(t.Context(), &redrive.Job{}, nil)
	}
}

// TestWeakETagNotUsed: a weak ETag cannot be used in If-Range: the
// sidecar keeps Last-Modified instead.
func TestWeakETagNotUsed(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("ETag", `W/"weak"`)
		w.Header().Set("Last-Modified", "Mon, 02 Jan 2006 15:04:05 GMT")
		w.Header().Set("Content-Length", "10")
		w.Write([]byte("12345")) // short: the attempt fails and keeps its sidecar
	}))
	defer srv.Close()
	h := newInternal(t)
	payload, _ := json.Marshal(map[string]any{"url": srv.URL, "dest": "w"})
	if err := h.Handle(t.Context(), &redrive.Job{ID: 1, Payload: payload}); err == nil {
		t.Fatal("short body accepted")
	}
	a := prepared(t, h, string(payload))
	m, err := a.readMeta()
	if err != nil {
		t.Fatal(err)
	}
	if m.ETag != "" || m.validator() != "Mon, 02 Jan 2006 15:04:05 GMT" || m.Synced != 5 || m.Total != 10 {
		t.Fatalf("sidecar %+v", m)
	}
}

// TestFinishRefusesForeignNames: whatever name reaches finish (a sidecar
// read back from disk, a bug), the file is renamed only to a single name
// in the destination's directory that is not a working file's.
func TestFinishRefusesForeignNames(t *testing.T) {
	for _, name := range []string{"../../escaped.txt", "../escaped.txt", "a/b", "..", ".redrive-7.part", ".x.redrive-7.meta"} {
		base := t.TempDir()
		h, err := New(Options{Dir: filepath.Join(base, "dl")})
		if err != nil {
			t.Fatal(err)
		}
		a := prepared(t, h, `{"url":"http://x/a","dest":"x/"}`)
		os.MkdirAll(a.pl.dir, 0o755)
		os.WriteFile(a.part, []byte("abc"), 0o644)
		if err := a.open(); err != nil {
			t.Fatal(err)
		}
		defer a.end(t.Context(), &redrive.Job{}, nil)
		err = a.finish(t.Context(), &meta{Name: name}, 3, sha256.New())
		if v := failure.Classify(err); v.Class != failure.Permanent {
			t.Errorf("%q: finish returned %v (%s), want a permanent refusal", name, err, v.Class)
		}
		for _, p := range []string{filepath.Join(base, "escaped.txt"), filepath.Join(h.root, "escaped.txt"), filepath.Join(a.pl.dir, "a")} {
			if _, err := os.Stat(p); err == nil {
				t.Errorf("%q: renamed to %s", name, p)
			}
		}
	}
}

// FuzzWorkNames: every name Sweep may remove is one no dest may take, no
// served name is sanitised into one, and the partial file names the
// handler makes parse back to their job's key.
func FuzzWorkNames(f *testing.F) {
	for _, s := range []string{".redrive-1.part", ".a.bin.redrive-k0123abcd.meta", ".redrive-7.meta.tmp", "a.part", ".x.redrive-.part",
		"..redrive-1.part", ".REDRIVE-1.part", "data.bin"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if _, _, ok := parseWorkName(s); ok && !isWorkName(s) {
			t.Fatalf("Sweep may remove %q, which a dest may name", s)
		}
		if n := sanitize(s); isWorkName(n) {
			t.Fatalf("sanitize(%q) = %q, a working file's name", s, n)
		}
		if n := sanitize(s); n != "" {
			for _, key := range []string{"12", "k0123456789abcdef", "a00ff00ff00ff00ff"} {
				p := partName(n, key)
				k, part, ok := parseWorkName(p)
				if !ok || k != key || part != p {
					t.Fatalf("partName(%q, %q) = %q parses as %q, %q, %v", n, key, p, k, part, ok)
				}
			}
		}
	})
}

// TestLegacySidecarRewritten: a sidecar written before the URL was
// hashed (the whole URL, its secrets included, in "url") is resumed from
// and rewritten at once without the URL's secrets.
func TestLegacySidecarRewritten(t *testing.T) {
	h := newInternal(t)
	const raw = "http://bob:pw-LEGACY-1@x/a?token=tok-LEGACY-2"
	a := prepared(t, h, `{"url":"`+raw+`","dest":"a"}`)
	os.WriteFile(a.part, make([]byte, 100), 0o644)
	b, _ := json.Marshal(&meta{URL: raw, ETag: `"e"`, Total: 200, Synced: 100})
	os.WriteFile(a.metaPath, b, 0o644)
	if err := a.open(); err != nil {
		t.Fatal(err)
	}
	defer a.end(t.Context(), &redrive.Job{}, nil)
	defer a.remove()
	if m, off := a.resumable(); m == nil || off != 100 {
		t.Fatalf("a legacy sidecar of the same URL: resume from %d", off)
	}
	got, err := os.ReadFile(a.metaPath)
	if err != nil || bytes.Contains(got, []byte("LEGACY")) || !bytes.Contains(got, []byte(`"url":"http://x/a"`)) {
		t.Fatalf("the sidecar after the resume: %s, %v", got, err)
	}
	m, err := a.readMeta()
	if err != nil || !m.from(raw) || m.from("http://bob:pw-LEGACY-1@x/a?token=other") {
		t.Fatalf("the rewritten sidecar does not recognize its URL alone: %+v, %v", m, err)
	}
}
