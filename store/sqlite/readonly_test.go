package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/redrivehq/redrive/store"
)

// seedRO makes a database with n pending jobs in dir and closes it
// cleanly (its write-ahead log written back into it); it removes the
// lock files the read-write store left, so that a test sees what a
// read-only open creates.
func seedRO(t *testing.T, dir string, n int) string {
	t.Helper()
	ctx := context.Background()
	db := filepath.Join(dir, "ro.db")
	s, err := Open(ctx, db, Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	for range n {
		if _, err := s.Enqueue(ctx, []store.NewJob{{Queue: "q", Kind: "k"}}, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for _, suffix := range []string{"-gate", "-turn", "-wal", "-shm"} {
		os.Remove(db + suffix)
	}
	return db
}

func openRO(t *testing.T, db string) (*Store, error) {
	t.Helper()
	return Open(context.Background(), db, Options{ReadOnly: true, Logger: slog.New(slog.DiscardHandler)})
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// TestReadOnlyOpen: a read-only store reads, refuses every write with
// ErrReadOnly (the file unchanged), runs no migration and creates no
// lock file.
func TestReadOnlyOpen(t *testing.T) {
	dir := t.TempDir()
	db := seedRO(t, dir, 3)
	before, err := os.ReadFile(db)
	if err != nil {
		t.Fatal(err)
	}
	s, err := openRO(t, db)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if n, err := s.Count(ctx, store.Filter{Queue: "q"}); err != nil || n != 3 {
		t.Fatalf("count: %d, %v", n, err)
	}
	if res, err := s.List(ctx, store.Filter{}, store.Page{Limit: 10}); err != nil || len(res.Jobs) != 3 {
		t.Fatalf("list: %v", err)
	}
	if _, err := s.Stats(ctx); err != nil {
		t.Fatalf("stats: %v", err)
	}
	if _, err := s.Enqueue(ctx, []store.NewJob{{Queue: "q", Kind: "k"}}, time.Now()); !errors.Is(err, ErrReadOnly) {
		t.Errorf("enqueue: %v, want ErrReadOnly", err)
	}
	if _, err := s.Cancel(ctx, 1, time.Now()); !errors.Is(err, ErrReadOnly) {
		t.Errorf("cancel: %v, want ErrReadOnly", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	after, err := os.ReadFile(db)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(before, after) {
		t.Error("the database file changed")
	}
	for _, name := range dirNames(t, dir) {
		if name != "ro.db" && name != "ro.db-shm" && name != "ro.db-wal" {
			t.Errorf("the read-only open left %s", name)
		}
	}
}

// TestReadOnlySchemaOutdated: a database that lacks one of this build's
// migrations (or is no redrive database) is refused, not migrated.
func TestReadOnlySchemaOutdated(t *testing.T) {
	dir := t.TempDir()
	db := seedRO(t, dir, 0)
	raw, err := sql.Open("sqlite", "file:"+db)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Exec(`DELETE FROM redrive_migrations WHERE version = (SELECT max(version) FROM redrive_migrations)`); err != nil {
		t.Fatal(err)
	}
	raw.Close()
	if _, err := openRO(t, db); !errors.Is(err, ErrSchemaOutdated) {
		t.Fatalf("open of an outdated schema: %v, want ErrSchemaOutdated", err)
	}
	empty := filepath.Join(dir, "empty.db")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := openRO(t, empty); !errors.Is(err, ErrSchemaOutdated) {
		t.Fatalf("open of an empty file: %v, want ErrSchemaOutdated", err)
	}
	if _, err := openRO(t, filepath.Join(dir, "missing.db")); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("open of a missing file: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "missing.db")); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("a read-only open created the database")
	}
}

// immutable makes paths immutable with chattr +i (which binds root too)
// until the test ends (the last a folder); it skips the test where chattr is not available
// or the file system does not support it.
func immutable(t *testing.T, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if out, err := exec.Command("chattr", "+i", p).CombinedOutput(); err != nil {
			if os.Getenv("CI") == "" {
				t.Skipf("chattr +i: %v: %s", err, out)
			}
			t.Fatalf("chattr +i %s: %v: %s", p, err, out)
		}
		t.Cleanup(func() { _ = exec.Command("chattr", "-i", p).Run() })
	}
	// Even root cannot create a file in an immutable folder.
	if f, err := os.Create(filepath.Join(paths[len(paths)-1], "probe")); err == nil {
		f.Close()
		t.Fatal("chattr +i did not make the folder read-only")
	}
}

// TestReadOnlyImmutableFolder: in a folder nothing can write to (chattr
// +i, which root meets), a cleanly closed database reads (opened
// immutable, as SQLite cannot create its -shm file), while one whose
// write-ahead log holds changes is refused with ErrUnreadableWAL rather
// than read stale. A plain Open fails there, as before.
func TestReadOnlyImmutableFolder(t *testing.T) {
	if _, err := exec.LookPath("chattr"); err != nil {
		t.Skip("no chattr")
	}
	t.Run("clean", func(t *testing.T) {
		dir := t.TempDir()
		db := seedRO(t, dir, 2)
		immutable(t, db, dir)
		if _, err := Open(context.Background(), db, Options{Logger: slog.New(slog.DiscardHandler)}); err == nil {
			t.Fatal("a read-write open of an immutable database succeeded")
		}
		s, err := openRO(t, db)
		if err != nil {
			t.Fatalf("read-only open: %v", err)
		}
		defer s.Close()
		if n, err := s.Count(context.Background(), store.Filter{}); err != nil || n != 2 {
			t.Fatalf("count: %d, %v", n, err)
		}
		if _, err := s.Enqueue(context.Background(), []store.NewJob{{Queue: "q", Kind: "k"}}, time.Now()); !errors.Is(err, ErrReadOnly) {
			t.Errorf("enqueue: %v", err)
		}
	})
	t.Run("file only", func(t *testing.T) {
		// A read-only copy in a writable folder.
		dir := t.TempDir()
		db := seedRO(t, dir, 2)
		if out, err := exec.Command("chattr", "+i", db).CombinedOutput(); err != nil {
			t.Skipf("chattr: %v: %s", err, out)
		}
		t.Cleanup(func() { _ = exec.Command("chattr", "-i", db).Run() })
		s, err := openRO(t, db)
		if err != nil {
			t.Fatalf("read-only open: %v", err)
		}
		defer s.Close()
		if n, err := s.Count(context.Background(), store.Filter{}); err != nil || n != 2 {
			t.Fatalf("count: %d, %v", n, err)
		}
	})
	t.Run("wal", func(t *testing.T) {
		dir := t.TempDir()
		db := seedRO(t, dir, 1)
		// A connection that writes without writing the log back, kept
		// open while the folder becomes immutable: the -wal file holds
		// a job the database file does not.
		w, err := sql.Open("sqlite", "file:"+db+"?_pragma=wal_autocheckpoint(0)")
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		if _, err := w.Exec(`UPDATE jobs SET priority = 5`); err != nil {
			t.Fatal(err)
		}
		if st, err := os.Stat(db + "-wal"); err != nil || st.Size() == 0 {
			t.Fatalf("no write-ahead log: %v", err)
		}
		// A copy of the three files, as a backup would take them.
		cp := t.TempDir()
		for _, suffix := range []string{"", "-wal"} {
			b, err := os.ReadFile(db + suffix)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(cp, "ro.db"+suffix), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		cdb := filepath.Join(cp, "ro.db")
		immutable(t, cdb, cdb+"-wal", cp)
		_, err = openRO(t, cdb)
		if !errors.Is(err, ErrUnreadableWAL) {
			t.Fatalf("read-only open with an unreadable log: %v, want ErrUnreadableWAL", err)
		}
		t.Log(err)
	})
}
