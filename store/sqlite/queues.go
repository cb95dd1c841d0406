package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"sort"
	"time"

	"github.com/redrivehq/redrive/store"
)

// Queues implements store.Store: the queues of the queues table (paused
// or resumed once), of job_counts (queues with jobs) and of counters, read
// in one snapshot.
func (s *Store) Queues(ctx context.Context) ([]store.QueueState, error) {
	st, err := s.readStmt(ctx, readQueues)
	if err != nil {
		return nil, err
	}
	rows, err := st.QueryContext(ctx)
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

// queuesSQL is Queues' statement.
const queuesSQL = `SELECT n.name, coalesce(q.paused, 0), q.paused_at FROM (
		SELECT name FROM queues
		UNION SELECT queue FROM job_counts WHERE n <> 0
		UNION SELECT queue FROM counters
	) n LEFT JOIN queues q ON q.name = n.name`

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

// OldestDue implements store.Store: one query a queue, each a probe of
// the jobs_ready index (queue, priority, run_at, id) per distinct
// priority of the queue's waiting jobs without a limit, and the same of
// jobs_limit_due for those under one (firstDueSQL).
func (s *Store) OldestDue(ctx context.Context, queues []string, now time.Time) (map[string]time.Time, error) {
	out := map[string]time.Time{}
	if len(queues) == 0 {
		return out, nil
	}
	st, err := s.readStmt(ctx, readNextDue)
	if err != nil {
		return nil, err
	}
	for _, q := range queues {
		var runAt sql.NullInt64
		if err := st.QueryRowContext(ctx, q, micros(now)).Scan(&runAt); err != nil {
			return nil, fmt.Errorf("sqlite: oldest due: %w", err)
		}
		if runAt.Valid {
			out[q] = fromMicros(runAt.Int64)
		}
	}
	return out, nil
}

// The conditions of the two disjoint indexes of waiting jobs: jobs_ready
// holds those without a limit, jobs_limit_due those under one.
const (
	unlimitedCond = "climit IS NULL AND fkey IS NULL"
	limitedCond   = "climit IS NOT NULL"
)

// firstSQL returns a statement reading the earliest run_at matching cond
// (a condition on run_at, which may use ?2) among the waiting jobs of
// queue ?1 in the index of lim (unlimitedCond or limitedCond), NULL if
// none: pr walks the distinct priorities of those jobs, one probe each,
// and each priority's earliest matching job is one more. With every job
// at one priority, three probes.
func firstSQL(lim, cond string) string {
	w := `FROM jobs WHERE state IN ('pending', 'scheduled') AND ` + lim + ` AND queue = ?1`
	return `WITH RECURSIVE pr(p) AS (
	SELECT (SELECT priority ` + w + ` ORDER BY priority DESC LIMIT 1)
	UNION ALL
	SELECT (SELECT priority ` + w + ` AND priority < pr.p ORDER BY priority DESC LIMIT 1)
	FROM pr WHERE pr.p IS NOT NULL)
SELECT min((SELECT run_at ` + w + ` AND priority = pr.p AND ` + cond + `
	ORDER BY run_at LIMIT 1)) FROM pr WHERE pr.p IS NOT NULL`
}

// firstDueSQL reads the earliest run_at at or before ?2 among the waiting
// jobs of queue ?1 (NULL: none), from the three indexes (firstSQL,
// fairFirstSQL).
var firstDueSQL = `SELECT min(m) FROM (SELECT (` + firstSQL(unlimitedCond, "run_at <= ?2") + `) AS m
	UNION ALL SELECT (` + firstSQL(limitedCond, "run_at <= ?2") + `)
	UNION ALL SELECT (` + fairFirstSQL("run_at <= ?2") + `))`

// firstAfterSQL reads the earliest run_at after ?2 among the waiting
// jobs of queue ?1 (NULL: none), from the three indexes (firstSQL, fairFirstSQL).
var firstAfterSQL = `SELECT min(m) FROM (SELECT (` + firstSQL(unlimitedCond, "run_at > ?2") + `) AS m
	UNION ALL SELECT (` + firstSQL(limitedCond, "run_at > ?2") + `)
	UNION ALL SELECT (` + fairFirstSQL("run_at > ?2") + `))`
