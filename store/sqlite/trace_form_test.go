package sqlite

import (
	"context"
	"database/sql"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/redrivehq/redrive/internal/tracectx"
	"github.com/redrivehq/redrive/store"
)

// TestTraceStoredForm: a trace context with a packed form is stored as a
// BLOB of its 25 bytes (and its tracestate), one without as its text; a
// row written before migration 0037 (its context as TEXT) reads as it
// did; a BLOB that is no packed form reads as no context, counted in
// tracectx.Malformed, and stays in the row.
func TestTraceStoredForm(t *testing.T) {
	path := filepath.Join(t.TempDir(), "redrive.db")
	open := func() *Store {
		s, err := Open(t.Context(), path, Options{Synchronous: "normal", Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
	traces := []string{tp, tp + " rojo=00f067aa0ba902b7", "00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-00", tp, tp}
	now := time.Unix(1700000000, 0).UTC()
	s := open()
	var jobs []store.NewJob
	for _, tc := range traces {
		jobs = append(jobs, store.NewJob{Queue: "q", Kind: "k", Trace: tc})
	}
	created, err := s.Enqueue(t.Context(), jobs, now)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()

	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	form := func(id int64) (typ string, n int) {
		t.Helper()
		if err := db.QueryRowContext(t.Context(), `SELECT typeof(trace), length(CAST(trace AS BLOB)) FROM jobs WHERE id = ?`, id).Scan(&typ, &n); err != nil {
			t.Fatal(err)
		}
		return typ, n
	}
	for i, want := range []struct {
		typ string
		n   int
	}{{"blob", 25}, {"blob", 25 + len("rojo=00f067aa0ba902b7")}, {"text", len(traces[2])}} {
		if typ, n := form(created[i].ID); typ != want.typ || n != want.n {
			t.Errorf("job %d (%q) stored as %s of %d bytes, want %s of %d", created[i].ID, traces[i], typ, n, want.typ, want.n)
		}
	}
	// Job 4 as a row written before 0037 keeps it; job 5's is corrupt.
	if _, err := db.ExecContext(t.Context(), `UPDATE jobs SET trace = ? WHERE id = ?`, tp, created[3].ID); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(t.Context(), `UPDATE jobs SET trace = x'0102' WHERE id = ?`, created[4].ID); err != nil {
		t.Fatal(err)
	}
	db.Close()

	s = open()
	defer s.Close()
	want := append([]string(nil), traces...)
	want[4] = ""
	before := tracectx.Malformed.Load()
	for i, c := range created {
		j, err := s.Get(t.Context(), c.ID)
		if err != nil {
			t.Fatal(err)
		}
		if j.Trace != want[i] {
			t.Errorf("Get(%d).Trace = %q, want %q", c.ID, j.Trace, want[i])
		}
	}
	leased, err := s.Fetch(context.Background(), store.FetchParams{Queue: "q", Limit: 10, Now: now, LeaseUntil: now.Add(time.Minute), Worker: "w"})
	if err != nil {
		t.Fatal(err)
	}
	if len(leased) != len(created) {
		t.Fatalf("Fetch leased %d jobs, want %d", len(leased), len(created))
	}
	for _, j := range leased {
		if i := int(j.ID - created[0].ID); j.Trace != want[i] {
			t.Errorf("Fetch: job %d Trace = %q, want %q", j.ID, j.Trace, want[i])
		}
	}
	// A fetch shares the text of consecutive jobs with one context: the
	// next one's differs.
	b := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203332-01"
	run := []string{tp, tp, b, tp, b, b, "", tp}
	var batch []store.NewJob
	for _, tc := range run {
		batch = append(batch, store.NewJob{Queue: "r", Kind: "k", Trace: tc})
	}
	if _, err := s.Enqueue(t.Context(), batch, now); err != nil {
		t.Fatal(err)
	}
	leased, err = s.Fetch(context.Background(), store.FetchParams{Queue: "r", Limit: 10, Now: now, LeaseUntil: now.Add(time.Minute), Worker: "w"})
	if err != nil || len(leased) != len(run) {
		t.Fatalf("Fetch of r: %d jobs, %v; want %d", len(leased), err, len(run))
	}
	for i, j := range leased {
		if j.Trace != run[i] {
			t.Errorf("Fetch of r: job %d (%d) Trace = %q, want %q", j.ID, i, j.Trace, run[i])
		}
	}
	if got := tracectx.Malformed.Load() - before; got != 2 {
		t.Errorf("Malformed counted %d, want 2 (the corrupt context's Get and Fetch)", got)
	}
	s.Close()
	db, err = sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if typ, n := form(created[4].ID); typ != "blob" || n != 2 {
		t.Errorf("the corrupt context is now %s of %d bytes, want the blob of 2 kept", typ, n)
	}
}
