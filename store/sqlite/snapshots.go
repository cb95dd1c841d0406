package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/redrivehq/redrive/store"
)

// checkMinute validates the minute of a snapshot.
func checkMinute(op string, at time.Time) error {
	if err := store.WholeMinute(at); err != nil {
		return fmt.Errorf("sqlite: %s: %w", op, err)
	}
	return nil
}

// snapshotLimitsSQL records, in a snapshot (parameter 1), the use of each
// concurrency limit with a running job (see store.LimitSample): a read
// of jobs_limit_running, one entry per running limited job.
const snapshotLimitsSQL = `WITH g AS (
	SELECT climit, ckey, count(*) AS n FROM jobs INDEXED BY jobs_limit_running
	WHERE state = 'running' AND climit IS NOT NULL GROUP BY climit, ckey
)
INSERT INTO stat_snapshots (minute, queue, name, n)
SELECT ?1, '', '` + store.SnapLimitInUse + `' || climit, sum(n) FROM g GROUP BY climit
UNION ALL
SELECT ?1, '', '` + store.SnapLimitBusiest + `' || climit, max(n) FROM g GROUP BY climit`

// Snapshot implements store.Store. It runs in the writer's shared
// transaction: one insert of the minute and one copy of the counters
// table, so the snapshot is consistent with the writes committed before
// it and costs the writer next to nothing.
func (s *Store) Snapshot(ctx context.Context, at time.Time) error {
	if err := checkMinute("snapshot", at); err != nil {
		return err
	}
	m := micros(at)
	err := s.write(ctx, func(tx *sql.Conn) error {
		res, err := tx.ExecContext(ctx, `INSERT INTO stat_minutes (minute) VALUES (?) ON CONFLICT (minute) DO NOTHING`, m)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return err // the minute was recorded already: the first snapshot wins
		}
		if _, err = tx.ExecContext(ctx, `INSERT INTO stat_snapshots (minute, queue, name, n)
			SELECT ?, queue, name, n FROM counters WHERE n <> 0`, m); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, snapshotLimitsSQL, m)
		return err
	})
	if err != nil {
		return fmt.Errorf("sqlite: snapshot: %w", err)
	}
	return nil
}

// Snapshots implements store.Store.
func (s *Store) Snapshots(ctx context.Context, since time.Time) ([]store.Snapshot, error) {
	db, err := s.readDB()
	if err != nil {
		return nil, fmt.Errorf("sqlite: snapshots: %w", err)
	}
	rows, err := db.QueryContext(ctx, `SELECT m.minute, s.queue, s.name, s.n
		FROM stat_minutes m LEFT JOIN stat_snapshots s ON s.minute = m.minute
		WHERE m.minute >= ? ORDER BY m.minute`, micros(since))
	if err != nil {
		return nil, fmt.Errorf("sqlite: snapshots: %w", err)
	}
	defer rows.Close()
	out := []store.Snapshot{}
	for rows.Next() {
		var (
			minute      int64
			queue, name sql.NullString
			n           sql.NullInt64
		)
		if err := rows.Scan(&minute, &queue, &name, &n); err != nil {
			return nil, fmt.Errorf("sqlite: snapshots: %w", err)
		}
		at := fromMicros(minute)
		if len(out) == 0 || !out[len(out)-1].At.Equal(at) {
			out = append(out, store.Snapshot{At: at, Counters: map[string]map[string]int64{}})
		}
		if !queue.Valid {
			continue // a minute whose counters were all zero
		}
		store.AddSnapshotRow(&out[len(out)-1], queue.String, name.String, n.Int64)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: snapshots: %w", err)
	}
	return out, nil
}

// snapshotDeleteBatch is how many minutes one write transaction of
// DeleteSnapshots deletes, so that a large deletion (a retention made
// shorter) does not hold the writer for long.
const snapshotDeleteBatch = 100

// DeleteSnapshots implements store.Store. It deletes the minutes in
// batches, each in its own write, and looks on the read pool first, so
// that a call with nothing to delete costs the writer nothing.
func (s *Store) DeleteSnapshots(ctx context.Context, before time.Time) (int64, error) {
	db, err := s.readDB()
	if err != nil {
		return 0, fmt.Errorf("sqlite: delete snapshots: %w", err)
	}
	cut := micros(before)
	var found int
	err = db.QueryRowContext(ctx, `SELECT count(*) FROM (SELECT 1 FROM stat_minutes WHERE minute < ? LIMIT 1)`, cut).Scan(&found)
	if err != nil {
		return 0, fmt.Errorf("sqlite: delete snapshots: %w", err)
	}
	if found == 0 {
		return 0, nil
	}
	var total int64
	for {
		var n int64
		err := s.write(ctx, func(tx *sql.Conn) error {
			var last sql.NullInt64
			if err := tx.QueryRowContext(ctx, `SELECT max(minute) FROM (SELECT minute FROM stat_minutes WHERE minute < ? ORDER BY minute LIMIT ?)`,
				cut, snapshotDeleteBatch).Scan(&last); err != nil {
				return err
			}
			if !last.Valid {
				n = 0
				return nil
			}
			if _, err := tx.ExecContext(ctx, `DELETE FROM stat_snapshots WHERE minute <= ?`, last.Int64); err != nil {
				return err
			}
			res, err := tx.ExecContext(ctx, `DELETE FROM stat_minutes WHERE minute <= ?`, last.Int64)
			if err != nil {
				return err
			}
			n, err = res.RowsAffected()
			return err
		})
		if err != nil {
			return total, fmt.Errorf("sqlite: delete snapshots: %w", err)
		}
		total += n
		if n < snapshotDeleteBatch {
			return total, nil
		}
	}
}
