package server

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/store/sqlite"
)

// TestDiskFull runs the API on a SQLite file in a 2 MiB tmpfs and fills
// it: enqueues are answered 507 store_full with a Retry-After, /readyz
// says the store cannot write, nothing answered 201 is lost; once room is
// made, enqueues and readiness come back. It mounts a file system, so it
// needs root (CI runs as root; elsewhere it skips).
func TestDiskFull(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tiny")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", dir).CombinedOutput(); err != nil {
		if os.Getenv("CI") != "" && os.Geteuid() == 0 {
			t.Fatalf("mount a tmpfs: %v: %s", err, out)
		}
		t.Skipf("cannot mount a tmpfs to fill (needs root): %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() })
	st, err := sqlite.Open(context.Background(), filepath.Join(dir, "redrive.db"), sqlite.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quiet})
	api := New(Options{Client: c, Logger: quiet})
	srv := httptest.NewServer(api)
	defer srv.Close()
	defer api.Close()
	e := &env{t: t, srv: srv, client: c, st: st}
	payload := `"` + strings.Repeat("x", 16<<10) + `"`
	created := 0
	var full resp
	for i := 0; i < 200; i++ {
		r := e.do("POST", "/v1/jobs", fmt.Sprintf(`{"kind":"k","payload":%s}`, payload))
		if r.status == 201 {
			created++
			continue
		}
		full = r
		break
	}
	if full.status != 507 || full.header.Get("Retry-After") == "" {
		t.Fatalf("after %d jobs: status %d, Retry-After %q: %s; want 507 with Retry-After", created, full.status, full.header.Get("Retry-After"), full.body)
	}
	wantErr(t, full, 507, "store_full", "")
	wantErr(t, e.do("GET", "/readyz", ""), 503, "not_writable", "")
	if n, err := c.Count(context.Background(), redrive.Filter{}); err != nil || n != int64(created) {
		t.Fatalf("%d jobs stored (%v), %d answered 201", n, err, created)
	}
	// Room again.
	if out, err := exec.Command("mount", "-o", "remount,size=16m", dir).CombinedOutput(); err != nil {
		t.Fatalf("remount: %v: %s", err, out)
	}
	e.want(e.do("POST", "/v1/jobs", fmt.Sprintf(`{"kind":"k","payload":%s}`, payload)), 201, nil)
	e.want(e.do("GET", "/readyz", ""), 200, nil)
}
