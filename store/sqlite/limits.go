package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"time"

	"github.com/redrivehq/redrive/store"
)

// fetchLimitedSQL selects, in the writer's transaction, among the oldest
// limitWindow due jobs of a queue (parameters 1 and 2) under a
// concurrency limit whose group is not full (f: the full groups, read
// from the running jobs, as many as run under limits), those that fit
// their group's free slots (each group's oldest), and of them the oldest,
// up to parameter 3. The walk steps over the jobs of full groups, so a
// group with a free slot is never held back by another's waiting flood;
// it costs one index entry per such job, and runs only when limit_gen
// says a slot may have been freed. A group's
// free slots are its limit's max less its running jobs, counted through
// jobs_limit_running (a few index entries, at most max of them), once per
// group in the window. Jobs without a limit are not in jobs_limit_due,
// which holds the columns read (a covering index): the walk meets only
// limited jobs, and the window bounds what a fetch costs when many wait
// on full groups (see docs/design.md: a group's jobs behind that many
// older waiting jobs of full groups start once those move).
const fetchLimitedSQL = `WITH f AS MATERIALIZED (
	SELECT r.climit, r.ckey FROM jobs r INDEXED BY jobs_limit_running
	WHERE r.state = 'running' AND r.climit IS NOT NULL
	GROUP BY r.climit, r.ckey
	HAVING count(*) >= coalesce((SELECT l.max_running FROM conc_limits l WHERE l.name = r.climit), 0)
), w AS (
	SELECT id, state, run_at, climit, ckey FROM jobs INDEXED BY jobs_limit_due
	WHERE state IN ('pending', 'scheduled') AND climit IS NOT NULL AND queue = ? AND run_at <= ?
		AND (climit, ckey) NOT IN (SELECT climit, ckey FROM f)
	ORDER BY run_at, id LIMIT ` + limitWindow + `
), g AS (
	SELECT climit, ckey, (SELECT l.max_running FROM conc_limits l WHERE l.name = d.climit)
		- (SELECT count(*) FROM jobs r INDEXED BY jobs_limit_running
			WHERE r.state = 'running' AND r.climit IS NOT NULL AND r.climit = d.climit AND r.ckey = d.ckey) AS free
	FROM (SELECT DISTINCT climit, ckey FROM w) d
), r AS (
	SELECT w.id, w.state, w.run_at, g.free, row_number() OVER (PARTITION BY w.climit, w.ckey ORDER BY w.run_at, w.id) AS rn
	FROM w JOIN g ON g.climit = w.climit AND g.ckey = w.ckey WHERE g.free > 0
), t AS (
	SELECT id, state FROM r WHERE rn <= free ORDER BY run_at, id LIMIT ?
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

// joinIDs joins two JSON arrays of ids, either of which may be empty ("",
// or "[]").
func joinIDs(a, b string) string {
	empty := func(s string) bool { return len(s) <= 2 }
	switch {
	case empty(a):
		return b
	case empty(b):
		return a
	}
	return a[:len(a)-1] + "," + b[1:]
}
