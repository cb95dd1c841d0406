package postgres

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/redrivehq/redrive/store"
)

// queuesTable is the qualified name of the queues table.
func (s *Store) queuesTable() string { return pgx.Identifier{s.schema, "queues"}.Sanitize() }

// Queues implements store.Store with one statement: the queues of the
// queues table, of the counters, and of the jobs, read from the job
// counts the database keeps (a queue with a job has a count above zero),
// so the cost does not grow with the number of jobs.
func (s *Store) Queues(ctx context.Context) ([]store.QueueState, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	qt := s.queuesTable()
	rows, err := s.pool.Query(ctx, `WITH names AS (
	SELECT name FROM `+qt+`
	UNION SELECT queue FROM `+s.sql.counters+`
	UNION SELECT queue FROM `+s.sql.jobCounts+` GROUP BY queue, state HAVING sum(n) <> 0
)
SELECT n.name, coalesce(q.paused, false), q.paused_at FROM names n LEFT JOIN `+qt+` q ON q.name = n.name`)
	if err != nil {
		return nil, s.fail("queues", err)
	}
	defer rows.Close()
	out := []store.QueueState{}
	for rows.Next() {
		var q store.QueueState
		var at *time.Time
		if err := rows.Scan(&q.Name, &q.Paused, &at); err != nil {
			return nil, s.fail("queues", err)
		}
		if at != nil {
			q.PausedAt = at.UTC()
		}
		out = append(out, q)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("queues", err)
	}
	// Sorted here, by bytes, as Go compares strings (the database's
	// collation may order otherwise).
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// SetPaused implements store.Store with one upsert: a second pause keeps
// the time of the first.
func (s *Store) SetPaused(ctx context.Context, queue string, paused bool, now time.Time) (store.QueueState, error) {
	if err := s.check(); err != nil {
		return store.QueueState{}, err
	}
	if queue == "" {
		return store.QueueState{}, fmt.Errorf("postgres: set paused: %w: queue name is empty", store.ErrInvalid)
	}
	if err := checkText("queue", queue); err != nil {
		return store.QueueState{}, fmt.Errorf("postgres: set paused: %w", err)
	}
	if len(queue) > maxIndexed {
		return store.QueueState{}, fmt.Errorf("postgres: set paused: %w: queue name longer than %d bytes", store.ErrInvalid, maxIndexed)
	}
	var pausedAt *time.Time
	if paused {
		t := ts(now)
		pausedAt = &t
	}
	qt := s.queuesTable()
	st := store.QueueState{Name: queue}
	var at *time.Time
	err := s.retry(ctx, func() error {
		return s.pool.QueryRow(ctx, `INSERT INTO `+qt+` AS q (name, paused, paused_at) VALUES ($1, $2, $3)
	ON CONFLICT (name) DO UPDATE SET paused = excluded.paused,
		paused_at = CASE WHEN excluded.paused AND q.paused THEN q.paused_at ELSE excluded.paused_at END
	RETURNING paused, paused_at`, queue, paused, pausedAt).Scan(&st.Paused, &at)
	})
	if err != nil {
		return store.QueueState{}, s.fail(fmt.Sprintf("set paused %q", queue), err)
	}
	if at != nil {
		st.PausedAt = at.UTC()
	}
	return st, nil
}
