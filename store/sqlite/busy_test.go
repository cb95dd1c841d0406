package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redrivehq/redrive/store"
)

// openBusy opens a store with a short busy timeout, so that a write that
// finds the lock taken fails at once instead of after 10 s.
func openBusy(t *testing.T) (*Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "redrive.db")
	s, err := Open(t.Context(), path, Options{
		Synchronous: "normal", BusyTimeout: 5 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, path
}

// HoldWriteLock takes the database's write lock from a connection of its
// own, as another process would, and returns the function that lets it
// go.
func holdWriteLock(t *testing.T, path string) (release func()) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := db.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(t.Context(), "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			if _, err := conn.ExecContext(context.Background(), "ROLLBACK"); err != nil {
				t.Error(err)
			}
			conn.Close()
			db.Close()
		})
	}
	t.Cleanup(release)
	return release
}

// TestWriteLockHeldElsewhere: while another connection holds the write
// lock, a write fails with store.ErrUnavailable (not a plain error) and
// WriteHealth reports it; once the lock is released, the next write
// succeeds and WriteHealth clears, even when that write changed no row.
func TestWriteLockHeldElsewhere(t *testing.T) {
	s, path := openBusy(t)
	ctx := t.Context()
	now := time.Now()
	if _, err := s.Enqueue(ctx, []store.NewJob{{Queue: "q", Kind: "k", Payload: []byte(`1`)}}, now); err != nil {
		t.Fatal(err)
	}
	release := holdWriteLock(t, path)

	_, err := s.Enqueue(ctx, []store.NewJob{{Queue: "q", Kind: "k", Payload: []byte(`2`)}}, now)
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("enqueue with the lock held elsewhere: %v, want store.ErrUnavailable", err)
	}
	if err := s.WriteHealth(); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("WriteHealth with the lock held elsewhere = %v, want store.ErrUnavailable", err)
	}
	if _, err := s.Fetch(ctx, store.FetchParams{Queue: "q", Worker: "w", Limit: 1, Now: now, LeaseUntil: now.Add(time.Minute)}); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("fetch with the lock held elsewhere: %v, want store.ErrUnavailable", err)
	}

	release()
	// A fetch of an empty queue changes no row; taking the lock is proof
	// enough that the store can write again.
	if _, err := s.Fetch(ctx, store.FetchParams{Queue: "empty", Worker: "w", Limit: 1, Now: now, LeaseUntil: now.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteHealth(); err != nil {
		t.Fatalf("WriteHealth after the lock was released = %v, want nil", err)
	}
	if n, err := s.Count(ctx, store.Filter{}); err != nil || n != 1 {
		t.Fatalf("%d jobs (%v), want 1: the failed enqueue wrote nothing", n, err)
	}
}

// TestLockedBatchFailsOnce: when the shared transaction of a batch cannot
// take the write lock, every request of the batch fails with that error
// at once. Each request used to be run again alone, each waiting the busy
// timeout again: N requests stalled the writer N+1 times the timeout.
// Counted in BEGINs, one per transaction the writer formed.
func TestLockedBatchFailsOnce(t *testing.T) {
	s, path := openBusy(t)
	ctx := t.Context()
	release := holdWriteLock(t, path)
	defer release()

	const n = 8
	var batches, begins atomic.Int64
	gate := make(chan struct{})
	var first atomic.Bool
	first.Store(true)
	// Set before any request is sent (see TestEnqueueFloodYieldsToWork).
	s.onBatch = func(work, enqueues, rows int) {
		batches.Add(1)
		if first.CompareAndSwap(true, false) {
			<-gate // hold the writer until the others are queued
		}
	}
	s.onBegin = func() { begins.Add(1) }

	nop := func(*sql.Conn) error { return nil }
	errs := make(chan error, n+1)
	go func() { errs <- s.write(ctx, nop) }()
	for batches.Load() == 0 {
		runtime.Gosched()
	}
	for range n {
		go func() { errs <- s.write(ctx, nop) }()
	}
	deadline := time.Now().Add(time.Minute) // liveness bound only
	for len(s.ops) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d requests queued", len(s.ops), n)
		}
		runtime.Gosched()
	}
	close(gate)
	for range n + 1 {
		if err := <-errs; !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("write with the lock held elsewhere: %v, want store.ErrUnavailable", err)
		}
	}
	if b, g := batches.Load(), begins.Load(); b != 2 || g != 2 {
		t.Fatalf("%d transactions formed, %d BEGINs tried: want 2 and 2 (one alone, then %d requests together)", b, g, n)
	}
}
