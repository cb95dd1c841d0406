package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"

	"github.com/redrivehq/redrive/store"
)

// The shared breakers live in the breakers table, one row per dependency.
// Every change is one transaction: lock the row (SELECT ... FOR UPDATE),
// apply the transition of package store, write the row back, and, when
// the breaker's state changed, pg_notify('<schema>_breaker', name) so that
// every process learns it on commit (ListenBreakers).

const breakerColumns = `name, state, since, opened_by, opened_at, ready_at, forced, probe_by, probe_until,
	window_us, counts, trips, version, updated_at`

// BreakerChannel returns the channel the store announces breaker changes
// on and ListenBreakers listens to: "<schema>_breaker".
func (s *Store) BreakerChannel() string { return s.schema + "_breaker" }

func (s *Store) breakersTable() string { return pgx.Identifier{s.schema, "breakers"}.Sanitize() }

func optTS(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := ts(t)
	return &u
}

func scanBreaker(row pgx.Row) (store.BreakerState, error) {
	var (
		st                            store.BreakerState
		openedAt, readyAt, probeUntil *time.Time
		windowUS                      int64
		counts                        []byte
	)
	err := row.Scan(&st.Name, &st.State, &st.Since, &st.OpenedBy, &openedAt, &readyAt, &st.Forced, &st.ProbeBy, &probeUntil,
		&windowUS, &counts, &st.Trips, &st.Version, &st.UpdatedAt)
	if err != nil {
		return st, err
	}
	st.Since, st.UpdatedAt = st.Since.UTC(), st.UpdatedAt.UTC()
	st.Window = store.Duration(time.Duration(windowUS) * time.Microsecond)
	if openedAt != nil {
		st.OpenedAt = openedAt.UTC()
	}
	if readyAt != nil {
		st.ReadyAt = readyAt.UTC()
	}
	if probeUntil != nil {
		st.ProbeUntil = probeUntil.UTC()
	}
	if err := json.Unmarshal(counts, &st.Counts); err != nil {
		return st, fmt.Errorf("counts of breaker %q: %w", st.Name, err)
	}
	for i := range st.Counts {
		st.Counts[i].At = st.Counts[i].At.UTC()
	}
	return st, nil
}

// announced reports whether a change from a to b is announced: anything
// but the counts.
func announced(a, b *store.BreakerState) bool {
	return a.State != b.State || !a.ReadyAt.Equal(b.ReadyAt) || a.Forced != b.Forced || a.ProbeBy != b.ProbeBy ||
		!a.ProbeUntil.Equal(b.ProbeUntil) || a.OpenedBy != b.OpenedBy || !a.OpenedAt.Equal(b.OpenedAt)
}

// updateBreaker locks the row of name, lets apply change it and writes it
// back when apply reports a change, in one transaction. create makes a
// missing row first (a closed record at now); without it a missing row is
// handed to apply as a new record and written only if apply changes it.
func (s *Store) updateBreaker(ctx context.Context, op, name string, now time.Time, create bool,
	apply func(st *store.BreakerState) bool) (store.BreakerState, error) {
	if err := s.check(); err != nil {
		return store.BreakerState{}, err
	}
	var out store.BreakerState
	err := s.retry(ctx, func() error {
		return s.inTx(ctx, func(tx pgx.Tx) error {
			st, locked, err := s.lockBreaker(ctx, tx, name, now, create)
			if err != nil {
				return err
			}
			if st.Version == 0 {
				// A new record (version 0 until its first change) starts
				// above every version a deleted one had. The floor is
				// read after the row's lock: a deletion of the row that
				// committed before is seen (see DeleteBreaker).
				if st.Version, err = s.breakerFloor(ctx, tx, name); err != nil {
					return err
				}
			}
			before := st
			if !apply(&st) {
				out = st
				return nil
			}
			counts, err := json.Marshal(st.Counts)
			if err != nil {
				return err
			}
			if st.Counts == nil {
				counts = []byte("[]")
			}
			// A row this transaction did not lock (there was none) is only
			// inserted: if another created it meanwhile, start again on it
			// rather than overwrite its changes.
			upsert := ` ON CONFLICT (name) DO UPDATE SET state = excluded.state, since = excluded.since, opened_by = excluded.opened_by,
					opened_at = excluded.opened_at, ready_at = excluded.ready_at, forced = excluded.forced,
					probe_by = excluded.probe_by, probe_until = excluded.probe_until, window_us = excluded.window_us,
					counts = excluded.counts, trips = excluded.trips, version = excluded.version, updated_at = excluded.updated_at`
			if !locked {
				upsert = ` ON CONFLICT (name) DO NOTHING`
			}
			tag, err := tx.Exec(ctx, `INSERT INTO `+s.breakersTable()+` (`+breakerColumns+`)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)`+upsert,
				st.Name, st.State, ts(st.Since), cleanText(st.OpenedBy), optTS(st.OpenedAt), optTS(st.ReadyAt), st.Forced,
				cleanText(st.ProbeBy), optTS(st.ProbeUntil), int64(time.Duration(st.Window)/time.Microsecond), string(counts),
				st.Trips, st.Version, ts(st.UpdatedAt))
			if err != nil {
				return err
			}
			if tag.RowsAffected() == 0 {
				return errBreakerRace
			}
			if announced(&before, &st) {
				if _, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, s.BreakerChannel(), st.Name); err != nil {
					return err
				}
			}
			out = st
			return nil
		})
	})
	if err != nil {
		return store.BreakerState{}, s.fail(fmt.Sprintf("%s %q", op, name), err)
	}
	return out, nil
}

// errBreakerRace is a retryable failure of updateBreaker: the row it
// found missing was created by another transaction before it wrote it.
var errBreakerRace = &pgconn.PgError{Code: "40001", Message: "breaker record created concurrently"}

// lockBreaker locks the row of name and returns it with locked true. With
// create it makes a missing row first (a closed record at now, version
// 0), so the row is always locked; without it a missing row is returned as
// a new record at now, not locked. A row deleted by another transaction
// while this one waited for its lock is looked for (or created) again.
func (s *Store) lockBreaker(ctx context.Context, tx pgx.Tx, name string, now time.Time, create bool) (store.BreakerState, bool, error) {
	for attempt := 0; ; attempt++ {
		if create {
			_, err := tx.Exec(ctx, `INSERT INTO `+s.breakersTable()+` (name, state, since, version, updated_at)
				VALUES ($1, 'closed', $2, 0, $2) ON CONFLICT (name) DO NOTHING`, name, ts(now))
			if err != nil {
				return store.BreakerState{}, false, err
			}
		}
		st, err := scanBreaker(tx.QueryRow(ctx, `SELECT `+breakerColumns+` FROM `+s.breakersTable()+` WHERE name = $1 FOR UPDATE`, name))
		switch {
		case err == nil:
			return st, true, nil
		case !errors.Is(err, pgx.ErrNoRows):
			return store.BreakerState{}, false, err
		case !create:
			return store.NewBreakerState(name, ts(now)), false, nil
		case attempt >= 5:
			return store.BreakerState{}, false, errBreakerRace
		}
		// The row this transaction found when inserting was deleted
		// before it could lock it: insert it now.
	}
}

// ReportBreaker implements store.Breakers.
func (s *Store) ReportBreaker(ctx context.Context, r store.BreakerReport) (store.BreakerState, error) {
	if err := r.Validate(); err != nil {
		return store.BreakerState{}, fmt.Errorf("postgres: report breaker: %w", err)
	}
	r.Process = cleanText(r.Process)
	r.Now = ts(r.Now)
	r.ReadyAt = ts(r.ReadyAt)
	return s.updateBreaker(ctx, "report breaker", r.Name, r.Now, true, func(st *store.BreakerState) bool {
		return store.ApplyBreakerReport(st, r)
	})
}

// ClaimBreakerProbe implements store.Breakers.
func (s *Store) ClaimBreakerProbe(ctx context.Context, c store.BreakerClaim) (store.BreakerState, bool, error) {
	if err := c.Validate(); err != nil {
		return store.BreakerState{}, false, fmt.Errorf("postgres: claim breaker probe: %w", err)
	}
	c.Process = cleanText(c.Process)
	c.Now, c.Until = ts(c.Now), ts(c.Until)
	granted := false
	st, err := s.updateBreaker(ctx, "claim breaker probe", c.Name, c.Now, false, func(st *store.BreakerState) bool {
		granted = store.ApplyBreakerClaim(st, c)
		return granted
	})
	return st, granted, err
}

// SettleBreakerProbe implements store.Breakers.
func (s *Store) SettleBreakerProbe(ctx context.Context, p store.BreakerSettle) (store.BreakerState, error) {
	if err := p.Validate(); err != nil {
		return store.BreakerState{}, fmt.Errorf("postgres: settle breaker probe: %w", err)
	}
	p.Process = cleanText(p.Process)
	p.Now, p.ReadyAt = ts(p.Now), ts(p.ReadyAt)
	return s.updateBreaker(ctx, "settle breaker probe", p.Name, p.Now, false, func(st *store.BreakerState) bool {
		return store.ApplyBreakerSettle(st, p)
	})
}

// SetBreaker implements store.Breakers.
func (s *Store) SetBreaker(ctx context.Context, p store.BreakerSet) (store.BreakerState, error) {
	if err := p.Validate(); err != nil {
		return store.BreakerState{}, fmt.Errorf("postgres: set breaker: %w", err)
	}
	p.By = cleanText(p.By)
	p.Now, p.Until = ts(p.Now), ts(p.Until)
	if p.Until.Equal(ts(time.Time{})) {
		p.Until = time.Time{}
	}
	return s.updateBreaker(ctx, "set breaker", p.Name, p.Now, true, func(st *store.BreakerState) bool {
		store.ApplyBreakerSet(st, p)
		return true
	})
}

// Breaker implements store.Breakers.
func (s *Store) Breaker(ctx context.Context, name string) (store.BreakerState, error) {
	if err := s.check(); err != nil {
		return store.BreakerState{}, err
	}
	st, err := scanBreaker(s.pool.QueryRow(ctx, `SELECT `+breakerColumns+` FROM `+s.breakersTable()+` WHERE name = $1`, cleanText(name)))
	if errors.Is(err, pgx.ErrNoRows) {
		return store.BreakerState{}, fmt.Errorf("postgres: breaker %q: %w", name, store.ErrNotFound)
	}
	if err != nil {
		return store.BreakerState{}, s.fail(fmt.Sprintf("breaker %q", name), err)
	}
	return st, nil
}

// ListBreakers implements store.Breakers.
func (s *Store) ListBreakers(ctx context.Context) ([]store.BreakerState, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT `+breakerColumns+` FROM `+s.breakersTable())
	if err != nil {
		return nil, s.fail("list breakers", err)
	}
	defer rows.Close()
	out := []store.BreakerState{}
	for rows.Next() {
		st, err := scanBreaker(rows)
		if err != nil {
			return nil, s.fail("list breakers", err)
		}
		out = append(out, st)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("list breakers", err)
	}
	store.SortBreakers(out)
	return out, nil
}

func (s *Store) breakerFloorTable() string {
	return pgx.Identifier{s.schema, "breaker_floor"}.Sanitize()
}

// breakerFloor reads the version above every deleted record's of name.
func (s *Store) breakerFloor(ctx context.Context, tx pgx.Tx, name string) (int64, error) {
	var v int64
	err := tx.QueryRow(ctx, `SELECT version FROM `+s.breakerFloorTable()+` WHERE name = $1`, name).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	return v, err
}

// DeleteBreaker implements store.Breakers: lock the row, check it is
// unused, delete it, raise the version floor above its version and
// announce the change, in one transaction. A report racing the deletion
// waits for the row's lock: it then creates the record again, from the
// raised floor.
func (s *Store) DeleteBreaker(ctx context.Context, d store.BreakerDelete) (store.BreakerState, error) {
	if err := d.Validate(); err != nil {
		return store.BreakerState{}, fmt.Errorf("postgres: delete breaker: %w", err)
	}
	if err := s.check(); err != nil {
		return store.BreakerState{}, err
	}
	d.Now = ts(d.Now)
	var out store.BreakerState
	err := s.retry(ctx, func() error {
		return s.inTx(ctx, func(tx pgx.Tx) error {
			st, err := scanBreaker(tx.QueryRow(ctx, `SELECT `+breakerColumns+` FROM `+s.breakersTable()+` WHERE name = $1 FOR UPDATE`, d.Name))
			if errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("postgres: delete breaker %q: %w", d.Name, store.ErrNotFound)
			}
			if err != nil {
				return err
			}
			if err := store.CheckBreakerDelete(&st, d); err != nil {
				return fmt.Errorf("postgres: delete breaker: %w", err)
			}
			if _, err := tx.Exec(ctx, `DELETE FROM `+s.breakersTable()+` WHERE name = $1`, d.Name); err != nil {
				return err
			}
			_, err = tx.Exec(ctx, `INSERT INTO `+s.breakerFloorTable()+` AS f (name, version) VALUES ($1, $2)
				ON CONFLICT (name) DO UPDATE SET version = greatest(f.version, excluded.version)`, d.Name, st.Version+1)
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, s.BreakerChannel(), st.Name); err != nil {
				return err
			}
			out = st
			return nil
		})
	})
	switch {
	case errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrConflict):
		return store.BreakerState{}, err
	case err != nil:
		return store.BreakerState{}, s.fail(fmt.Sprintf("delete breaker %q", d.Name), err)
	}
	return out, nil
}

var _ store.BreakerNotifier = (*Store)(nil)

// ListenBreakers implements store.BreakerNotifier on a dedicated
// connection (not taken from the pool), as Listen does for queues: fn gets
// the name of each breaker whose state changed, and "" on every
// (re)connection. It reconnects with exponential backoff (100 ms doubling
// to 30 s) and returns when ctx is done (ctx.Err()) or the store is closed
// (an error wrapping store.ErrClosed).
func (s *Store) ListenBreakers(ctx context.Context, fn func(name string)) error {
	if err := s.check(); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(s.done, cancel)
	defer stop()
	channel := s.BreakerChannel()
	const minBackoff, maxBackoff = 100 * time.Millisecond, 30 * time.Second
	backoff := minBackoff
	for {
		conn, err := s.listenOn(ctx, channel)
		if err == nil {
			backoff = minBackoff
			fn("")
			err = s.receiveOn(ctx, conn, channel, fn)
			closeCtx, cancelClose := context.WithTimeout(context.Background(), 5*time.Second)
			conn.Close(closeCtx)
			cancelClose()
		}
		if ctx.Err() != nil {
			return s.listenEnd(ctx)
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		s.log.Warn("postgres: breaker listen connection lost, reconnecting", "channel", channel, "error", err, "retry_in", wait)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return s.listenEnd(ctx)
		case <-t.C:
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// listenOn opens a connection and LISTENs on channel.
func (s *Store) listenOn(ctx context.Context, channel string) (*pgx.Conn, error) {
	cfg := s.pool.Config().ConnConfig.Copy()
	cfg.BuildContextWatcherHandler = s.listenWatcher
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		conn.Close(context.Background())
		return nil, err
	}
	return conn, nil
}

// receiveOn hands the notifications of channel to fn until the connection
// fails or ctx is done, pinging an idle connection as receive does.
func (s *Store) receiveOn(ctx context.Context, conn *pgx.Conn, channel string, fn func(string)) error {
	for {
		wctx, cancel := context.WithTimeout(ctx, time.Duration(listenIdle.Load()))
		n, err := conn.WaitForNotification(wctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if wctx.Err() == nil || conn.IsClosed() {
				return err
			}
			pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err = conn.Ping(pctx)
			cancel()
			if err != nil {
				return err
			}
			if s.listenPinged != nil {
				s.listenPinged()
			}
			continue
		}
		if n.Channel == channel {
			fn(n.Payload)
		}
	}
}

// listenWatcher makes a canceled wait only interrupt the read: no cancel
// request is sent to the server, and the connection stays usable.
func (s *Store) listenWatcher(c *pgconn.PgConn) ctxwatch.Handler {
	return &pgconn.DeadlineContextWatcherHandler{Conn: c.Conn()}
}
