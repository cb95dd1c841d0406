package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redrivehq/redrive/store"
)

// openShared opens a store on path as another process would: its own
// writer, its own connections, its own handles on the lock files.
// A maxBatch of 1 makes one transaction per request.
func openShared(t *testing.T, path string, maxBatch int) *Store {
	t.Helper()
	s, err := Open(t.Context(), path, Options{Synchronous: "normal", MaxBatch: maxBatch, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// hammer keeps s's writer busy with back-to-back write transactions, each
// bumping a counter, from several goroutines, until the test ends; it
// returns the count of transactions s began (read through onBegin, which
// must not be set elsewhere) and a channel closed once s began warm of
// them.
func hammer(t *testing.T, s *Store, warm int64) (*atomic.Int64, <-chan struct{}) {
	t.Helper()
	begins := new(atomic.Int64)
	started := make(chan struct{})
	// Set before any request is sent: the writer reads it only after it
	// received one.
	s.onBegin = func() {
		if begins.Add(1) == warm {
			close(started)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	for range 8 {
		wg.Go(func() {
			for ctx.Err() == nil {
				err := s.write(ctx, func(tx *sql.Conn) error {
					// Some work while holding the lock, as a batch of
					// fetches and finishes would, then a write.
					var n int
					if err := tx.QueryRowContext(ctx, `WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 1000)
						SELECT count(*) FROM c`).Scan(&n); err != nil {
						return err
					}
					_, err := tx.ExecContext(ctx, `INSERT INTO counters (queue, name, n) VALUES ('hammer', 'n', 1)
						ON CONFLICT (queue, name) DO UPDATE SET n = n + 1`)
					return err
				})
				if err != nil && ctx.Err() == nil {
					t.Errorf("hammering write: %v", err)
					return
				}
			}
		})
	}
	return begins, started
}

// TestWriteTurnAgainstAHammeringProcess: while another process (here a
// second store on the same file) runs write transactions back to back, a
// breaker report gets the write lock after at most the other's
// transaction in progress and one more, every time. With SQLite's busy
// handler alone, the waiting writer slept up to 100 ms between tries and
// found the lock free only by chance in the microseconds between the
// other's transactions: it waited behind hundreds of them, and in the
// fleet tests on a loaded disk a report missed its 2 s fleet timeout.
// Counted in the other's transactions, not in time.
func TestWriteTurnAgainstAHammeringProcess(t *testing.T) {
	path := filepath.Join(t.TempDir(), "redrive.db")
	// The other store runs one request per transaction, and the hammering
	// goroutines keep a request queued at all times: its writer begins
	// the next transaction as soon as one commits.
	other, s := openShared(t, path, 1), openShared(t, path, 0)
	begins, started := hammer(t, other, 20)
	select {
	case <-started:
	case <-time.After(time.Minute): // liveness bound only
		t.Fatalf("the other store began %d of 20 transactions", begins.Load())
	}
	// Each wait is counted from the moment the store's writer is about to
	// take the lock to the moment it has it: the other's transactions that
	// began meanwhile.
	var waitedFrom atomic.Int64
	waits := make(chan int64, 1)
	s.onBegin = func() { waitedFrom.Store(begins.Load()) }
	s.onLocked = func() {
		select {
		case waits <- begins.Load() - waitedFrom.Load():
		default:
		}
	}
	const reports, limit = 10, 3
	worst := int64(0)
	for i := range reports {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute) // liveness bound only
		_, err := s.ReportBreaker(ctx, store.BreakerReport{Name: "dep", Process: "p", Now: time.Now(), Failures: i + 1, Requests: i + 1,
			Rule: store.BreakerRule{Failures: 1000, Window: time.Minute, BreakDuration: time.Second}})
		cancel()
		if err != nil {
			t.Fatalf("report %d: %v", i, err)
		}
		worst = max(worst, <-waits)
	}
	if worst > limit {
		t.Fatalf("a breaker report waited for the write lock while the other store began %d transactions, want at most %d "+
			"(the one holding the lock, one taking its turn)", worst, limit)
	}
	t.Logf("%d reports: at most %d of the other's transactions began while one waited", reports, worst)
}

// TestWriteTurnTimesOut: a store that does not get its turn within the
// busy timeout (another process holds it, stuck) fails the write with
// store.ErrUnavailable, as for SQLite's own lock, and writes again once
// the turn is let go; the wait it gave up does not keep the turn from it.
func TestWriteTurnTimesOut(t *testing.T) {
	s, path := openBusy(t)
	ctx := t.Context()
	// The given-up wait's request is granted the turn once it is let go,
	// and lets it go again: the test waits for that before writing, since
	// the store's 5 ms busy timeout is shorter than a loaded machine may
	// take to run the request's goroutine.
	requestEnded := make(chan struct{})
	s.turns.turn.onEnd = func() { close(requestEnded) }
	now := time.Now()
	_, turn, _ := turnPaths(path)
	held, err := openLockFile(turn)
	if err != nil {
		t.Fatal(err)
	}
	defer held.close()
	if err := held.lock(time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the second write waits on a new handle
		_, err := s.Enqueue(ctx, []store.NewJob{{Queue: "q", Kind: "k", Payload: []byte(`1`)}}, now)
		if !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("enqueue with the turn held elsewhere: %v, want store.ErrUnavailable", err)
		}
	}
	if err := s.WriteHealth(); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("WriteHealth with the turn held elsewhere = %v, want store.ErrUnavailable", err)
	}
	if err := held.unlock(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-requestEnded:
	case <-time.After(time.Minute): // liveness bound only
		t.Fatal("the given-up wait's request did not end within a minute of the turn being let go")
	}
	if _, err := s.Enqueue(ctx, []store.NewJob{{Queue: "q", Kind: "k", Payload: []byte(`2`)}}, now); err != nil {
		t.Fatalf("enqueue once the turn was let go: %v", err)
	}
	if err := s.WriteHealth(); err != nil {
		t.Fatalf("WriteHealth once the turn was let go = %v, want nil", err)
	}
	if n, err := s.Count(ctx, store.Filter{}); err != nil || n != 1 {
		t.Fatalf("%d jobs (%v), want 1", n, err)
	}
}

// TestWriteTurnOfTheFileSQLiteOpens: the stores of one database take
// turns through the same lock files however its path is spelt. SQLite
// follows a symbolic link and decodes %XX escapes in the path (it opens
// it as a file: URI), so a store opened through a link, or through an
// escaped name, writes the same database as one opened by its plain name
// and must wait for the same turn: here it is held on the plain name's
// lock file, and the write waits for it until the busy timeout.
func TestWriteTurnOfTheFileSQLiteOpens(t *testing.T) {
	for _, tc := range []struct{ name, spelt, plain string }{
		{"symlink", "link.db", "redrive.db"},
		{"escaped", "re%64rive.db", "redrive.db"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			plain := filepath.Join(dir, tc.plain)
			spelt := filepath.Join(dir, tc.spelt)
			if tc.name == "symlink" {
				if err := os.Symlink(plain, spelt); err != nil {
					t.Fatal(err)
				}
			}
			s, err := Open(t.Context(), spelt, Options{Synchronous: "normal", BusyTimeout: 5 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if _, err := os.Stat(plain); err != nil {
				t.Fatalf("SQLite did not open %s: %v", plain, err)
			}
			held, err := openLockFile(plain + "-turn")
			if err != nil {
				t.Fatal(err)
			}
			defer held.close()
			if err := held.lock(time.Now().Add(time.Minute)); err != nil {
				t.Fatal(err)
			}
			_, err = s.Enqueue(t.Context(), []store.NewJob{{Queue: "q", Kind: "k", Payload: []byte(`1`)}}, time.Now())
			if !errors.Is(err, store.ErrUnavailable) {
				t.Fatalf("enqueue through %s with the turn of %s held elsewhere: %v, want store.ErrUnavailable", tc.spelt, tc.plain, err)
			}
		})
	}
}

// TestMigrationTakesTheTurn: Open applies the migrations in write
// transactions of its own, before the writer starts; they too take their
// turn, or a process opening a database that other processes write back
// to back is starved at Open as their writers were. With the turn held
// elsewhere, opening a new database fails with store.ErrUnavailable after
// the busy timeout and succeeds once it is let go; opening one whose
// migrations are all applied writes nothing and does not wait.
func TestMigrationTakesTheTurn(t *testing.T) {
	path := filepath.Join(t.TempDir(), "redrive.db")
	opts := Options{Synchronous: "normal", BusyTimeout: 5 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)}
	_, turn, _ := turnPaths(path)
	held, err := openLockFile(turn)
	if err != nil {
		t.Fatal(err)
	}
	defer held.close()
	if err := held.lock(time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if s, err := Open(t.Context(), path, opts); !errors.Is(err, store.ErrUnavailable) {
		if err == nil {
			s.Close()
		}
		t.Fatalf("open a new database with the turn held elsewhere: %v, want store.ErrUnavailable", err)
	}
	if err := held.unlock(); err != nil {
		t.Fatal(err)
	}
	s, err := Open(t.Context(), path, opts)
	if err != nil {
		t.Fatalf("open once the turn was let go: %v", err)
	}
	s.Close()
	if err := held.lock(time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	s, err = Open(t.Context(), path, opts)
	if err != nil {
		t.Fatalf("open a migrated database with the turn held elsewhere: %v", err)
	}
	s.Close()
}
