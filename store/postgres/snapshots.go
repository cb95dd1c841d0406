package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/redrivehq/redrive/store"
)

// checkMinute validates the minute of a snapshot.
func checkMinute(op string, at time.Time) error {
	if err := store.WholeMinute(at); err != nil {
		return fmt.Errorf("postgres: %s: %w", op, err)
	}
	return nil
}

// snapshotSQL records a minute and, only if it was not recorded yet, the
// counters summed over their shards and the use of the concurrency limits
// (see store.LimitSample), in one statement: the counters are
// read from the statement's MVCC snapshot, without taking any lock the
// hot path would wait for.
func (s *Store) snapshotSQL() string {
	schema := pgx.Identifier{s.schema}.Sanitize()
	return `WITH m AS (
	INSERT INTO ` + schema + `.stat_minutes (minute) VALUES ($1) ON CONFLICT (minute) DO NOTHING RETURNING minute
), c AS (
	INSERT INTO ` + schema + `.stat_snapshots (minute, queue, name, n)
	SELECT m.minute, c.queue, c.name, sum(c.n)::bigint FROM m CROSS JOIN ` + s.sql.counters + ` c
	GROUP BY m.minute, c.queue, c.name HAVING sum(c.n) <> 0
), g AS (
	SELECT climit, ckey, count(*) AS n FROM ` + s.sql.jobs + ` WHERE state = 'running' AND climit IS NOT NULL GROUP BY climit, ckey
)
INSERT INTO ` + schema + `.stat_snapshots (minute, queue, name, n)
SELECT m.minute, '', '` + store.SnapLimitInUse + `' || g.climit, sum(g.n)::bigint FROM m CROSS JOIN g GROUP BY m.minute, g.climit
UNION ALL
SELECT m.minute, '', '` + store.SnapLimitBusiest + `' || g.climit, max(g.n)::bigint FROM m CROSS JOIN g GROUP BY m.minute, g.climit`
}

// Snapshot implements store.Store.
func (s *Store) Snapshot(ctx context.Context, at time.Time) error {
	if err := s.check(); err != nil {
		return err
	}
	if err := checkMinute("snapshot", at); err != nil {
		return err
	}
	q := s.snapshotSQL()
	err := s.retry(ctx, func() error {
		_, err := s.pool.Exec(ctx, q, ts(at))
		return err
	})
	if err != nil {
		return s.fail("snapshot", err)
	}
	return nil
}

// Snapshots implements store.Store.
func (s *Store) Snapshots(ctx context.Context, since time.Time) ([]store.Snapshot, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	schema := pgx.Identifier{s.schema}.Sanitize()
	rows, err := s.pool.Query(ctx, `SELECT m.minute, s.queue, s.name, s.n
	FROM `+schema+`.stat_minutes m LEFT JOIN `+schema+`.stat_snapshots s ON s.minute = m.minute
	WHERE m.minute >= $1 ORDER BY m.minute`, ts(since))
	if err != nil {
		return nil, s.fail("snapshots", err)
	}
	defer rows.Close()
	out := []store.Snapshot{}
	for rows.Next() {
		var (
			at          time.Time
			queue, name *string
			n           *int64
		)
		if err := rows.Scan(&at, &queue, &name, &n); err != nil {
			return nil, s.fail("snapshots", err)
		}
		at = at.UTC()
		if len(out) == 0 || !out[len(out)-1].At.Equal(at) {
			out = append(out, store.Snapshot{At: at, Counters: map[string]map[string]int64{}})
		}
		if queue == nil {
			continue // a minute whose counters were all zero
		}
		store.AddSnapshotRow(&out[len(out)-1], *queue, *name, *n)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("snapshots", err)
	}
	return out, nil
}

// DeleteSnapshots implements store.Store, in one statement.
func (s *Store) DeleteSnapshots(ctx context.Context, before time.Time) (int64, error) {
	if err := s.check(); err != nil {
		return 0, err
	}
	schema := pgx.Identifier{s.schema}.Sanitize()
	var n int64
	err := s.retry(ctx, func() error {
		return s.pool.QueryRow(ctx, `WITH d AS (
	DELETE FROM `+schema+`.stat_snapshots WHERE minute < $1
), m AS (
	DELETE FROM `+schema+`.stat_minutes WHERE minute < $1 RETURNING 1
)
SELECT count(*) FROM m`, ts(before)).Scan(&n)
	})
	if err != nil {
		return 0, s.fail("delete snapshots", err)
	}
	return n, nil
}
