package sqlite

import (
	"database/sql"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redrivehq/redrive/store"
)

// fillDatabase caps the writer connection's database at its current size,
// as a full disk would: the next write that needs a new page fails with
// SQLITE_FULL.
func fillDatabase(t *testing.T, s *Store) {
	t.Helper()
	err := s.write(t.Context(), func(tx *sql.Conn) error {
		var n int64
		if err := tx.QueryRowContext(t.Context(), "PRAGMA page_count").Scan(&n); err != nil {
			return err
		}
		_, err := tx.ExecContext(t.Context(), "PRAGMA max_page_count = "+strconv.FormatInt(n, 10))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestLockErrorDoesNotHideFullDisk: while the disk is full, a write that
// meets the write lock held elsewhere must not replace the full disk in
// WriteHealth by the lock error, which the next transaction that takes
// the lock clears even when it changes no row: /readyz would turn green
// while no job can be written.
func TestLockErrorDoesNotHideFullDisk(t *testing.T) {
	s, path := openBusy(t)
	ctx := t.Context()
	now := time.Now()
	if _, err := s.Enqueue(ctx, []store.NewJob{{Queue: "q", Kind: "k", Payload: []byte(`1`)}}, now); err != nil {
		t.Fatal(err)
	}
	fillDatabase(t, s)
	big := []byte(`"` + strings.Repeat("x", 1<<20) + `"`)
	enqueueBig := func() error {
		_, err := s.Enqueue(ctx, []store.NewJob{{Queue: "q", Kind: "k", Payload: big}}, now)
		return err
	}
	if err := enqueueBig(); !errors.Is(err, store.ErrFull) {
		t.Fatalf("enqueue on a full disk: %v, want store.ErrFull", err)
	}
	if err := s.WriteHealth(); !errors.Is(err, store.ErrFull) {
		t.Fatalf("WriteHealth on a full disk = %v, want store.ErrFull", err)
	}

	release := holdWriteLock(t, path)
	if _, err := s.Enqueue(ctx, []store.NewJob{{Queue: "q", Kind: "k", Payload: []byte(`2`)}}, now); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("enqueue with the lock held elsewhere: %v, want store.ErrUnavailable", err)
	}
	if err := s.WriteHealth(); err == nil {
		t.Fatal("WriteHealth = nil with the disk full and the lock held elsewhere")
	}
	release()
	// A fetch of an empty queue takes the lock and changes no row: it
	// proves the lock is free, not that the disk has room.
	if _, err := s.Fetch(ctx, store.FetchParams{Queue: "empty", Worker: "w", Limit: 1, Now: now, LeaseUntil: now.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	health := s.WriteHealth()
	if err := enqueueBig(); !errors.Is(err, store.ErrFull) {
		t.Fatalf("enqueue, disk still full: %v, want store.ErrFull (the test proves nothing)", err)
	}
	if !errors.Is(health, store.ErrFull) {
		t.Fatalf("WriteHealth after the lock was released, the disk still full = %v, want store.ErrFull", health)
	}
}
