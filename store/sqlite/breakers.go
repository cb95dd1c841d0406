package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redrivehq/redrive/store"
)

// The shared breakers live in the breakers table, one row per dependency.
// Every change runs in the writer's transaction: read the row, apply the
// transition of package store, write the row back. SQLite has no
// notifications: processes poll ListBreakers (see the engine's breaker
// sharing).

const breakerColumns = `name, state, since, opened_by, opened_at, ready_at, forced, probe_by, probe_until,
	window_us, counts, trips, version, updated_at`

func optMicros(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return micros(t)
}

func scanBreaker(sc scanner) (store.BreakerState, error) {
	var (
		st                            store.BreakerState
		since, updated, windowUS      int64
		openedAt, readyAt, probeUntil sql.NullInt64
		forced                        int
		counts                        string
	)
	err := sc.Scan(&st.Name, &st.State, &since, &st.OpenedBy, &openedAt, &readyAt, &forced, &st.ProbeBy, &probeUntil,
		&windowUS, &counts, &st.Trips, &st.Version, &updated)
	if err != nil {
		return st, err
	}
	st.Since, st.UpdatedAt = fromMicros(since), fromMicros(updated)
	st.Forced = forced != 0
	st.Window = store.Duration(time.Duration(windowUS) * time.Microsecond)
	if openedAt.Valid {
		st.OpenedAt = fromMicros(openedAt.Int64)
	}
	if readyAt.Valid {
		st.ReadyAt = fromMicros(readyAt.Int64)
	}
	if probeUntil.Valid {
		st.ProbeUntil = fromMicros(probeUntil.Int64)
	}
	if err := json.Unmarshal([]byte(counts), &st.Counts); err != nil {
		return st, fmt.Errorf("counts of breaker %q: %w", st.Name, err)
	}
	for i := range st.Counts {
		st.Counts[i].At = st.Counts[i].At.UTC()
	}
	return st, nil
}

// updateBreaker reads the row of name (or a new closed record at now),
// lets apply change it, and writes it back when apply reports a change,
// all in one write transaction.
func (s *Store) updateBreaker(ctx context.Context, op, name string, now time.Time, apply func(st *store.BreakerState) bool) (store.BreakerState, error) {
	var out store.BreakerState
	err := s.write(ctx, func(tx *sql.Conn) error {
		st, err := scanBreaker(tx.QueryRowContext(ctx, `SELECT `+breakerColumns+` FROM breakers WHERE name = ?`, name))
		switch {
		case errors.Is(err, sql.ErrNoRows):
			st = store.NewBreakerState(name, now)
			// A record deleted and created again starts above every
			// version it had (see DeleteBreaker).
			if st.Version, err = breakerFloor(ctx, tx, name); err != nil {
				return fmt.Errorf("sqlite: %s %q: %w", op, name, err)
			}
		case err != nil:
			return fmt.Errorf("sqlite: %s %q: %w", op, name, err)
		}
		if !apply(&st) {
			out = st
			return nil
		}
		counts, err := json.Marshal(st.Counts)
		if err != nil {
			return fmt.Errorf("sqlite: %s %q: %w", op, name, err)
		}
		if st.Counts == nil {
			counts = []byte("[]")
		}
		_, err = tx.ExecContext(ctx, `INSERT OR REPLACE INTO breakers (`+breakerColumns+`)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			st.Name, st.State, micros(st.Since), st.OpenedBy, optMicros(st.OpenedAt), optMicros(st.ReadyAt), st.Forced,
			st.ProbeBy, optMicros(st.ProbeUntil), int64(time.Duration(st.Window)/time.Microsecond), string(counts),
			st.Trips, st.Version, micros(st.UpdatedAt))
		if err != nil {
			return fmt.Errorf("sqlite: %s %q: %w", op, name, err)
		}
		out = st
		return nil
	})
	if err != nil {
		return store.BreakerState{}, err
	}
	return out, nil
}

// ReportBreaker implements store.Breakers.
func (s *Store) ReportBreaker(ctx context.Context, r store.BreakerReport) (store.BreakerState, error) {
	if err := r.Validate(); err != nil {
		return store.BreakerState{}, fmt.Errorf("sqlite: report breaker: %w", err)
	}
	return s.updateBreaker(ctx, "report breaker", r.Name, r.Now, func(st *store.BreakerState) bool {
		return store.ApplyBreakerReport(st, r)
	})
}

// ClaimBreakerProbe implements store.Breakers.
func (s *Store) ClaimBreakerProbe(ctx context.Context, c store.BreakerClaim) (store.BreakerState, bool, error) {
	if err := c.Validate(); err != nil {
		return store.BreakerState{}, false, fmt.Errorf("sqlite: claim breaker probe: %w", err)
	}
	granted := false
	st, err := s.updateBreaker(ctx, "claim breaker probe", c.Name, c.Now, func(st *store.BreakerState) bool {
		granted = store.ApplyBreakerClaim(st, c)
		return granted
	})
	return st, granted, err
}

// SettleBreakerProbe implements store.Breakers.
func (s *Store) SettleBreakerProbe(ctx context.Context, p store.BreakerSettle) (store.BreakerState, error) {
	if err := p.Validate(); err != nil {
		return store.BreakerState{}, fmt.Errorf("sqlite: settle breaker probe: %w", err)
	}
	return s.updateBreaker(ctx, "settle breaker probe", p.Name, p.Now, func(st *store.BreakerState) bool {
		return store.ApplyBreakerSettle(st, p)
	})
}

// SetBreaker implements store.Breakers.
func (s *Store) SetBreaker(ctx context.Context, p store.BreakerSet) (store.BreakerState, error) {
	if err := p.Validate(); err != nil {
		return store.BreakerState{}, fmt.Errorf("sqlite: set breaker: %w", err)
	}
	return s.updateBreaker(ctx, "set breaker", p.Name, p.Now, func(st *store.BreakerState) bool {
		store.ApplyBreakerSet(st, p)
		return true
	})
}

// Breaker implements store.Breakers.
func (s *Store) Breaker(ctx context.Context, name string) (store.BreakerState, error) {
	db, err := s.readDB()
	if err != nil {
		return store.BreakerState{}, err
	}
	st, err := scanBreaker(db.QueryRowContext(ctx, `SELECT `+breakerColumns+` FROM breakers WHERE name = ?`, name))
	if errors.Is(err, sql.ErrNoRows) {
		return store.BreakerState{}, fmt.Errorf("sqlite: breaker %q: %w", name, store.ErrNotFound)
	}
	if err != nil {
		return store.BreakerState{}, fmt.Errorf("sqlite: breaker %q: %w", name, err)
	}
	return st, nil
}

// ListBreakers implements store.Breakers.
func (s *Store) ListBreakers(ctx context.Context) ([]store.BreakerState, error) {
	db, err := s.readDB()
	if err != nil {
		return nil, err
	}
	rows, err := db.QueryContext(ctx, `SELECT `+breakerColumns+` FROM breakers`)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list breakers: %w", err)
	}
	defer rows.Close()
	out := []store.BreakerState{}
	for rows.Next() {
		st, err := scanBreaker(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlite: list breakers: %w", err)
		}
		out = append(out, st)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: list breakers: %w", err)
	}
	store.SortBreakers(out)
	return out, nil
}

// breakerFloor reads the version above every deleted record's of name.
func breakerFloor(ctx context.Context, tx *sql.Conn, name string) (int64, error) {
	var v int64
	err := tx.QueryRowContext(ctx, `SELECT version FROM breaker_floor WHERE name = ?`, name).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	return v, err
}

// DeleteBreaker implements store.Breakers: in the writer's transaction,
// read the row, check it is unused, delete it and raise the version floor
// above its version.
func (s *Store) DeleteBreaker(ctx context.Context, d store.BreakerDelete) (store.BreakerState, error) {
	if err := d.Validate(); err != nil {
		return store.BreakerState{}, fmt.Errorf("sqlite: delete breaker: %w", err)
	}
	var out store.BreakerState
	err := s.write(ctx, func(tx *sql.Conn) error {
		st, err := scanBreaker(tx.QueryRowContext(ctx, `SELECT `+breakerColumns+` FROM breakers WHERE name = ?`, d.Name))
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return fmt.Errorf("sqlite: delete breaker %q: %w", d.Name, store.ErrNotFound)
		case err != nil:
			return fmt.Errorf("sqlite: delete breaker %q: %w", d.Name, err)
		}
		if err := store.CheckBreakerDelete(&st, d); err != nil {
			return fmt.Errorf("sqlite: delete breaker: %w", err)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM breakers WHERE name = ?`, d.Name); err != nil {
			return fmt.Errorf("sqlite: delete breaker %q: %w", d.Name, err)
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO breaker_floor (name, version) VALUES (?, ?)
			ON CONFLICT (name) DO UPDATE SET version = max(version, excluded.version)`, d.Name, st.Version+1)
		if err != nil {
			return fmt.Errorf("sqlite: delete breaker %q: %w", d.Name, err)
		}
		out = st
		return nil
	})
	if err != nil {
		return store.BreakerState{}, err
	}
	return out, nil
}
