package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"time"

	"github.com/redrivehq/redrive/store"
)

// fetchLimitedSQL selects, in the writer's transaction, among the first
// limitWindow due jobs of a queue (parameters 1 and 2) under a
// concurrency limit whose group is not full, in (priority descending,
// run_at, id) order, those that fit their group's free slots (each
// group's first in that order), and of them the first, up to parameter
// 3. The window reads one priority
// at a time, highest first, as the fetch of the others does: pr walks the
// distinct priorities of the queue's waiting limited jobs (one probe of
// jobs_limit_due each, in that order), and w reads each one's due jobs as
// one range of the index, oldest due first, until it has the window: the
// limited jobs of a higher priority due later are skipped by a probe,
// never walked. f is the full groups, read from the running limited
// jobs: the window steps over the waiting jobs of those (one index entry
// each), so one group's flood holds back no other. A group's free slots
// are its limit's max less its running jobs, counted through jobs_limit_running (a few index entries, at most
// max of them), once per group in the window. Jobs without a limit are
// not in jobs_limit_due, which holds the columns read (a covering index),
// and the window bounds what a fetch costs.
const fetchLimitedSQL = `WITH RECURSIVE pr(p) AS (
	SELECT (SELECT priority FROM jobs INDEXED BY jobs_limit_due WHERE state IN ('pending', 'scheduled') AND climit IS NOT NULL AND queue = ?1
		ORDER BY priority DESC LIMIT 1)
	UNION ALL
	SELECT (SELECT priority FROM jobs INDEXED BY jobs_limit_due WHERE state IN ('pending', 'scheduled') AND climit IS NOT NULL AND queue = ?1 AND priority < pr.p
		ORDER BY priority DESC LIMIT 1)
	FROM pr WHERE pr.p IS NOT NULL
), f AS MATERIALIZED (
	SELECT r.climit, r.ckey FROM jobs r INDEXED BY jobs_limit_running
	WHERE r.state = 'running' AND r.climit IS NOT NULL
	GROUP BY r.climit, r.ckey
	HAVING count(*) >= coalesce((SELECT l.max_running FROM conc_limits l WHERE l.name = r.climit), 0)
), w AS MATERIALIZED (
	SELECT j.id, j.state, j.priority, j.run_at, j.climit, j.ckey FROM pr CROSS JOIN jobs j INDEXED BY jobs_limit_due
	WHERE pr.p IS NOT NULL AND j.state IN ('pending', 'scheduled') AND j.climit IS NOT NULL AND j.queue = ?1 AND j.priority = pr.p AND j.run_at <= ?2
		AND (j.climit, j.ckey) NOT IN (SELECT climit, ckey FROM f)
	LIMIT ` + limitWindow + `
), g AS (
	SELECT climit, ckey, (SELECT l.max_running FROM conc_limits l WHERE l.name = d.climit)
		- (SELECT count(*) FROM jobs r INDEXED BY jobs_limit_running
			WHERE r.state = 'running' AND r.climit IS NOT NULL AND r.climit = d.climit AND r.ckey = d.ckey) AS free
	FROM (SELECT DISTINCT climit, ckey FROM w) d
), r AS (
	SELECT w.id, w.state, w.priority, w.run_at, g.free, row_number() OVER (PARTITION BY w.climit, w.ckey ORDER BY w.priority DESC, w.run_at, w.id) AS rn
	FROM w JOIN g ON g.climit = w.climit AND g.ckey = w.ckey WHERE g.free > 0
), t AS (
	SELECT id, state FROM r WHERE rn <= free ORDER BY priority DESC, run_at, id LIMIT ?3
)
SELECT json_group_array(id), count(*), count(*) FILTER (WHERE state = 'scheduled') FROM t`

// limitIdle remembers, per queue, that its last selection of limited
// jobs leased none: the limit_gen count then, and the due time of its
// next limited job not yet due. Until either moves, the selection would
// lease none again, and the fetch skips it. Only the writer goroutine
// reads and writes it.
type limitIdle map[string]idleMark

type idleMark struct{ gen, nextDue int64 }

// limitWindow is how many of a queue's oldest due limited jobs a fetch
// looks at (the same in both stores).
const limitWindow = "1000"

// setLimits puts the jobs Enqueue just inserted (out[i] not Existing)
// under the limits their NewJob names, in the enqueue's transaction, and
// gives each limit named its max if it has none yet. No fetch sees the
// jobs before: the writer runs one transaction at a time.
func (s *Store) setLimits(ctx context.Context, tx *sql.Conn, jobs []store.NewJob, out []*store.Job, now time.Time) error {
	seen := map[string]bool{}
	for i := range jobs {
		nj := &jobs[i]
		if nj.Limit == "" || out[i] == nil || out[i].Existing {
			continue
		}
		if !seen[nj.Limit] {
			seen[nj.Limit] = true
			if _, err := s.stmt(tx, "limitUpsert").ExecContext(ctx, nj.Limit, nj.LimitMax, micros(now)); err != nil {
				return fmt.Errorf("sqlite: enqueue: limit %q: %w", nj.Limit, err)
			}
		}
		if _, err := s.stmt(tx, "limitJob").ExecContext(ctx, nj.Limit, nj.LimitKey, out[i].ID); err != nil {
			return fmt.Errorf("sqlite: enqueue: limit %q: %w", nj.Limit, err)
		}
	}
	return nil
}

// SetLimit implements store.Limits.
func (s *Store) SetLimit(ctx context.Context, name string, max int, now time.Time) (store.LimitState, error) {
	if err := store.CheckLimitName("name", name); err != nil {
		return store.LimitState{}, fmt.Errorf("sqlite: set limit: %w", err)
	}
	if err := store.CheckLimitMax(max); err != nil {
		return store.LimitState{}, fmt.Errorf("sqlite: set limit: %w", err)
	}
	err := s.write(ctx, func(tx *sql.Conn) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO conc_limits (name, max_running, updated_at) VALUES (?, ?, ?)
			ON CONFLICT (name) DO UPDATE SET max_running = excluded.max_running, updated_at = excluded.updated_at`, name, max, micros(now))
		return err
	})
	if err != nil {
		return store.LimitState{}, fmt.Errorf("sqlite: set limit: %w", err)
	}
	ls, err := s.limits(ctx, now, name)
	if err != nil {
		return store.LimitState{}, fmt.Errorf("sqlite: set limit: %w", err)
	}
	if len(ls) != 1 {
		return store.LimitState{}, fmt.Errorf("sqlite: set limit: %q not read back", name)
	}
	return ls[0], nil
}

// ListLimits implements store.Limits.
func (s *Store) ListLimits(ctx context.Context, now time.Time) ([]store.LimitState, error) {
	ls, err := s.limits(ctx, now, "")
	if err != nil {
		return nil, fmt.Errorf("sqlite: list limits: %w", err)
	}
	return ls, nil
}

// limits reads the limits (only the one named name, if not empty) and
// their use, on the read pool.
func (s *Store) limits(ctx context.Context, now time.Time, name string) ([]store.LimitState, error) {
	db, err := s.readDB()
	if err != nil {
		return nil, err
	}
	rows, err := db.QueryContext(ctx, `SELECT l.name, l.max_running, l.updated_at,
		coalesce(g.in_use, 0), coalesce(g.busiest, 0), coalesce(g.groups, 0), coalesce(w.n, 0)
		FROM conc_limits l
		LEFT JOIN (SELECT climit, sum(n) AS in_use, max(n) AS busiest, count(*) AS groups FROM (
			SELECT climit, ckey, count(*) AS n FROM jobs WHERE state = 'running' AND climit IS NOT NULL GROUP BY climit, ckey)
			GROUP BY climit) g ON g.climit = l.name
		LEFT JOIN (SELECT climit, count(*) AS n FROM jobs WHERE state IN ('pending', 'scheduled') AND climit IS NOT NULL AND run_at <= ?
			GROUP BY climit) w ON w.climit = l.name
		WHERE ? = '' OR l.name = ?
		ORDER BY l.name`, micros(now), name, name)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.LimitState
	for rows.Next() {
		var l store.LimitState
		var updated int64
		if err := rows.Scan(&l.Name, &l.Max, &updated, &l.InUse, &l.Busiest, &l.Groups, &l.Waiting); err != nil {
			return nil, err
		}
		l.UpdatedAt = fromMicros(updated)
		out = append(out, l)
	}
	return out, rows.Err()
}

// fetchLimited runs the selection of limited jobs of a fetch, unless the
// queue's idle mark says it would lease none, and returns the ids
// selected, how many, and how many of them were scheduled.
func (s *Store) fetchLimited(ctx context.Context, tx *sql.Conn, queue string, dueBy time.Time, limit int) (ids string, n, scheduled int64, err error) {
	var gen int64
	if err := s.stmt(tx, "limitGen").QueryRowContext(ctx).Scan(&gen); err != nil {
		return "", 0, 0, err
	}
	due := micros(dueBy)
	if m, ok := s.limitIdle[queue]; ok && m.gen == gen && due < m.nextDue {
		return "", 0, 0, nil
	}
	if err := s.stmt(tx, "fetchLimited").QueryRowContext(ctx, queue, due, limit).Scan(&ids, &n, &scheduled); err != nil {
		return "", 0, 0, err
	}
	if n > 0 {
		delete(s.limitIdle, queue)
		return ids, n, scheduled, nil
	}
	var next sql.NullInt64
	if err := s.stmt(tx, "limitNextDue").QueryRowContext(ctx, queue, due).Scan(&next); err != nil {
		return "", 0, 0, err
	}
	m := idleMark{gen: gen, nextDue: math.MaxInt64}
	if next.Valid {
		m.nextDue = next.Int64
	}
	s.limitIdle[queue] = m
	return ids, 0, 0, nil
}
