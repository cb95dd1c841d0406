package server

import (
	"context"
	"database/sql"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/store/sqlite"
)

// TestSQLiteLockedElsewhere: while another process (here another
// connection) holds the SQLite write lock past the busy timeout, an
// enqueue is answered 503 unavailable with a Retry-After, not 500
// internal, and /readyz says the store cannot write; once the lock is
// released both come back.
func TestSQLiteLockedElsewhere(t *testing.T) {
	path := filepath.Join(t.TempDir(), "redrive.db")
	st, err := sqlite.Open(context.Background(), path, sqlite.Options{Logger: quiet, BusyTimeout: 5 * time.Millisecond})
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
	e.want(e.do("POST", "/v1/jobs", `{"kind":"k","payload":1}`), 201, nil)
	e.want(e.do("GET", "/readyz", ""), 200, nil)

	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(context.Background(), "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	r := e.do("POST", "/v1/jobs", `{"kind":"k","payload":2}`)
	wantErr(t, r, 503, "unavailable", "")
	if r.header.Get("Retry-After") == "" {
		t.Fatalf("503 without Retry-After: %s", r.body)
	}
	wantErr(t, e.do("GET", "/readyz", ""), 503, "not_writable", "")

	if _, err := conn.ExecContext(context.Background(), "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	e.want(e.do("POST", "/v1/jobs", `{"kind":"k","payload":3}`), 201, nil)
	e.want(e.do("GET", "/readyz", ""), 200, nil)
	if n, err := c.Count(context.Background(), redrive.Filter{}); err != nil || n != 2 {
		t.Fatalf("%d jobs (%v), want 2", n, err)
	}
}
