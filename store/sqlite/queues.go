package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/redrivehq/redrive/store"
)

// Queues implements store.Store: the queues of the queues table (paused
// or resumed once), of job_counts (queues with jobs) and of counters, read
// in one snapshot.
func (s *Store) Queues(ctx context.Context) ([]store.QueueState, error) {
	db, err := s.readDB()
	if err != nil {
		return nil, err
	}
	rows, err := db.QueryContext(ctx, `SELECT n.name, coalesce(q.paused, 0), q.paused_at FROM (
		SELECT name FROM queues
		UNION SELECT queue FROM job_counts WHERE n <> 0
		UNION SELECT queue FROM counters
	) n LEFT JOIN queues q ON q.name = n.name`)
	if err != nil {
		return nil, fmt.Errorf("sqlite: queues: %w", err)
	}
	defer rows.Close()
	out := []store.QueueState{}
	for rows.Next() {
		var q store.QueueState
		var pausedAt sql.NullInt64
		if err := rows.Scan(&q.Name, &q.Paused, &pausedAt); err != nil {
			return nil, fmt.Errorf("sqlite: queues: %w", err)
		}
		if pausedAt.Valid {
			q.PausedAt = fromMicros(pausedAt.Int64)
		}
		out = append(out, q)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: queues: %w", err)
	}
	// Sorted here, by bytes, as Go compares strings.
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// SetPaused implements store.Store with one upsert: a second pause keeps
// the time of the first.
func (s *Store) SetPaused(ctx context.Context, queue string, paused bool, now time.Time) (store.QueueState, error) {
	if queue == "" {
		return store.QueueState{}, fmt.Errorf("sqlite: set paused: %w: queue name is empty", store.ErrInvalid)
	}
	var pausedAt any
	if paused {
		pausedAt = micros(now)
	}
	st := store.QueueState{Name: queue}
	err := s.write(ctx, func(tx *sql.Conn) error {
		var at sql.NullInt64
		err := tx.QueryRowContext(ctx, `INSERT INTO queues (name, paused, paused_at) VALUES (?, ?, ?)
			ON CONFLICT (name) DO UPDATE SET paused = excluded.paused,
				paused_at = CASE WHEN excluded.paused AND queues.paused THEN queues.paused_at ELSE excluded.paused_at END
			RETURNING paused, paused_at`, queue, paused, pausedAt).Scan(&st.Paused, &at)
		if err != nil {
			return fmt.Errorf("sqlite: set paused %q: %w", queue, err)
		}
		if at.Valid {
			st.PausedAt = fromMicros(at.Int64)
		}
		return nil
	})
	if err != nil {
		return store.QueueState{}, err
	}
	return st, nil
}

// OldestDue implements store.Store: one query, in which each queue is one
// probe of the jobs_due index (queue, run_at, id), the partial index of
// the pending and scheduled jobs.
func (s *Store) OldestDue(ctx context.Context, queues []string, now time.Time) (map[string]time.Time, error) {
	out := map[string]time.Time{}
	if len(queues) == 0 {
		return out, nil
	}
	db, err := s.readDB()
	if err != nil {
		return nil, err
	}
	names, err := json.Marshal(queues)
	if err != nil {
		return nil, fmt.Errorf("sqlite: oldest due: %w", err)
	}
	rows, err := db.QueryContext(ctx, oldestDueSQL, micros(now), string(names))
	if err != nil {
		return nil, fmt.Errorf("sqlite: oldest due: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var runAt sql.NullInt64
		if err := rows.Scan(&name, &runAt); err != nil {
			return nil, fmt.Errorf("sqlite: oldest due: %w", err)
		}
		if runAt.Valid {
			out[name] = fromMicros(runAt.Int64)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: oldest due: %w", err)
	}
	return out, nil
}

// oldestDueSQL reads the oldest due run_at of each queue of a JSON array
// ($2) at $1; its conditions are the jobs_due and jobs_limit_due
// indexes', so that one probe of each serves it.
const oldestDueSQL = `SELECT value, min(coalesce(a, b), coalesce(b, a)) FROM (SELECT q.value, (SELECT run_at FROM jobs
	WHERE state IN ('pending', 'scheduled') AND climit IS NULL AND queue = q.value AND run_at <= ?1
	ORDER BY run_at LIMIT 1) AS a, (SELECT run_at FROM jobs
	WHERE state IN ('pending', 'scheduled') AND climit IS NOT NULL AND queue = q.value AND run_at <= ?1
	ORDER BY run_at LIMIT 1) AS b
FROM json_each(?2) q)`
