package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/redrivehq/redrive/store"
)

// Taking turns at the write lock.
//
// Every process (every Store) on a database file writes from one
// connection, in transactions that each begin with BEGIN IMMEDIATE. When
// another process holds the write lock, SQLite's busy handler sleeps and
// tries again, up to 100 ms between tries, and only a try that falls in
// the gap between two of the holder's transactions gets in. A process
// that writes back to back (a busy worker, on a slow disk) leaves gaps of
// microseconds: the other processes' writes then waited out the busy
// timeout, and a shared breaker's report missed its 2 s bound, so the
// fleet fell back to local breakers.
//
// So the stores of a file take turns through two advisory locks (flock)
// on files beside it, <db>-gate and <db>-turn, before BEGIN IMMEDIATE:
//
//   - a writer takes the gate, then the turn, then lets the gate go; it
//     holds the turn until its transaction committed or rolled back;
//   - the kernel wakes a writer waiting for a lock as soon as it is free,
//     without polling;
//   - the only writer ever waiting for the turn is the one holding the
//     gate: when the holder lets the turn go and comes back for more, it
//     finds the gate taken and waits, so the waiter goes next. Between two
//     processes they alternate; with more, a writer that waits for the
//     gate waits behind one transaction per handover.
//
// A writer gives up after the busy timeout, as SQLite's busy handler
// does, with store.ErrUnavailable. Connections other than redrive's (the
// sqlite3 shell) do not take turns; SQLite's busy handler still waits for
// them. Where the lock files cannot be created (a read-only directory, an
// in-memory database), the store writes without taking turns.

// errTurn is the failure to get the turn within the busy timeout.
var errTurn = errors.New("sqlite: another process held the write lock for longer than the busy timeout")

// turnPaths returns the lock files of the database file SQLite opened
// (see dbFile), or false for an in-memory or temporary database, which
// has none.
func turnPaths(file string) (gate, turn string, ok bool) {
	if file == "" {
		return "", "", false
	}
	return file + "-gate", file + "-turn", true
}

// dbFile returns the name of the file SQLite opened for the connection's
// main database: the path as given, made absolute, with its %XX escapes
// decoded and symbolic links followed, as SQLite names the -wal and -shm
// files beside it; "" for an in-memory or temporary database. The lock
// files are named after it, so that every store writing to one database
// takes turns with the others however its path was spelt.
func dbFile(ctx context.Context, conn *sql.Conn) (string, error) {
	var file string
	if err := conn.QueryRowContext(ctx, `SELECT file FROM pragma_database_list WHERE name = 'main'`).Scan(&file); err != nil {
		return "", fmt.Errorf("sqlite: the database's file name: %w", err)
	}
	return file, nil
}

// takeTurn waits for the writer's turn at the write lock and returns the
// function that ends it. It fails with store.ErrUnavailable when the turn
// did not come within the busy timeout. Only the writer goroutine calls
// it.
func (s *Store) takeTurn() (end func(), err error) {
	if s.turns == nil {
		return func() {}, nil
	}
	deadline := time.Now().Add(s.busyTimeout)
	if err := s.turns.gate.lock(deadline); err != nil {
		return nil, fmt.Errorf("%w: %w: %w", store.ErrUnavailable, errTurn, err)
	}
	err = s.turns.turn.lock(deadline)
	if uerr := s.turns.gate.unlock(); uerr != nil && err == nil {
		s.turns.turn.unlock()
		err = uerr
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w: %w", store.ErrUnavailable, errTurn, err)
	}
	return func() {
		if err := s.turns.turn.unlock(); err != nil {
			s.log.Error("sqlite: letting the write turn go failed", "error", err)
		}
	}, nil
}
