package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
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
// jobs, and held the groups whose rate allows no start at ?4 (their
// limit_rates row's tat - τ is later) or that a Retry-After holds then
// (held_until is later, whatever the limit): the window steps over the waiting
// jobs of those (one index entry each), so one group's flood, waiting on
// its slots or its rate, holds back no other. hw reads the held groups
// among the queue's first limitWindow due limited jobs (none read when
// no group is held), for when the first can start (the fetch's
// NextStart): a held group further down gives no hint. sw says whether
// any due job of the queue waits on a full group (FetchParams.SlotWait):
// one probe of jobs_limit_group_due per full group, so a full group's
// job behind any number of others is seen (none read when no group is
// full). A group's free slots
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
	HAVING count(*) >= coalesce((SELECT CASE WHEN l.max_running > 0 THEN l.max_running ELSE ` + noCap + ` END FROM conc_limits l WHERE l.name = r.climit), 0)
), held AS MATERIALIZED (
	SELECT rt.name AS climit, rt.key AS ckey,
		max(CASE WHEN l.rate_n > 0 THEN rt.tat - (l.rate_burst - 1) * ((l.rate_per + l.rate_n - 1) / l.rate_n) ELSE 0 END, rt.held_until) AS at
	FROM limit_rates rt JOIN conc_limits l ON l.name = rt.name
	WHERE rt.held_until > ?4 OR (l.rate_n > 0 AND rt.tat - (l.rate_burst - 1) * ((l.rate_per + l.rate_n - 1) / l.rate_n) > ?4)
), w AS MATERIALIZED (
	SELECT j.id, j.state, j.priority, j.run_at, j.climit, j.ckey FROM pr CROSS JOIN jobs j INDEXED BY jobs_limit_due
	WHERE pr.p IS NOT NULL AND j.state IN ('pending', 'scheduled') AND j.climit IS NOT NULL AND j.queue = ?1 AND j.priority = pr.p AND j.run_at <= ?2
		AND (j.climit, j.ckey) NOT IN (SELECT climit, ckey FROM f) AND (j.climit, j.ckey) NOT IN (SELECT climit, ckey FROM held)
	LIMIT ` + limitWindow + `
), hw AS (
	SELECT climit, ckey, min(run_at) AS first FROM (
		SELECT j.climit, j.ckey, j.run_at FROM pr CROSS JOIN jobs j INDEXED BY jobs_limit_due
		WHERE pr.p IS NOT NULL AND EXISTS (SELECT 1 FROM held) AND j.state IN ('pending', 'scheduled') AND j.climit IS NOT NULL AND j.queue = ?1
			AND j.priority = pr.p AND j.run_at <= ?2
		LIMIT ` + limitWindow + `)
	WHERE (climit, ckey) IN (SELECT climit, ckey FROM held) AND (climit, ckey) NOT IN (SELECT climit, ckey FROM f)
	GROUP BY climit, ckey
), sw AS (
	SELECT EXISTS (SELECT 1 FROM f WHERE EXISTS (SELECT 1 FROM jobs j INDEXED BY jobs_limit_group_due
		WHERE j.state IN ('pending', 'scheduled') AND j.climit IS NOT NULL AND j.climit = f.climit AND j.ckey = f.ckey AND j.queue = ?1
			AND j.run_at <= ?2)) AS v
), d AS (
	SELECT climit, ckey, count(*) AS waiting, count(*) FILTER (WHERE run_at <= ?4) AS waiting_now, min(run_at) FILTER (WHERE run_at > ?4) AS later
	FROM w GROUP BY climit, ckey
), g0 AS (
	SELECT d.climit, d.ckey, d.waiting, d.waiting_now, d.later, l.rate_n > 0 AS rated,
		CASE WHEN l.max_running > 0 THEN l.max_running - (SELECT count(*) FROM jobs r INDEXED BY jobs_limit_running
			WHERE r.state = 'running' AND r.climit IS NOT NULL AND r.climit = d.climit AND r.ckey = d.ckey) ELSE ` + noCap + ` END AS cfree,
		CASE WHEN l.rate_n > 0 THEN (l.rate_per + l.rate_n - 1) / l.rate_n ELSE 1 END AS ti,
		CASE WHEN l.rate_n > 0 THEN (l.rate_burst - 1) * ((l.rate_per + l.rate_n - 1) / l.rate_n) ELSE 0 END AS tau,
		max(coalesce(rt.tat, ?4), ?4) AS base
	FROM d JOIN conc_limits l ON l.name = d.climit LEFT JOIN limit_rates rt ON rt.name = d.climit AND rt.key = d.ckey
), g AS MATERIALIZED (
	SELECT climit, ckey, waiting, waiting_now, later, rated, ti, tau, base,
		CASE WHEN NOT rated THEN cfree WHEN ?4 + tau < base THEN 0 ELSE min(cfree, (?4 + tau - base) / ti + 1) END AS free
	FROM g0
), r AS (
	SELECT w.id, w.state, w.priority, w.run_at, g.free, row_number() OVER (PARTITION BY w.climit, w.ckey ORDER BY w.priority DESC, w.run_at, w.id) AS rn
	FROM w JOIN g ON g.climit = w.climit AND g.ckey = w.ckey WHERE g.free > 0 AND (NOT g.rated OR w.run_at <= ?4)
), t AS (
	SELECT id, state, priority FROM r WHERE rn <= free ORDER BY priority DESC, run_at, id LIMIT ?3
), h AS (
	SELECT CASE WHEN waiting_now > max(free, 0) THEN base + max(free, 0) * ti - tau
		WHEN waiting > waiting_now THEN max(base + max(free, 0) * ti - tau, later) END AS at
	FROM g WHERE rated
	UNION ALL
	SELECT max(held.at, hw.first) FROM hw JOIN held ON held.climit = hw.climit AND held.ckey = hw.ckey
)
SELECT json_group_array(id), count(*), count(*) FILTER (WHERE state = 'scheduled'), (SELECT min(at) FROM h WHERE at > ?4),
	json_group_array(priority), json_group_array(state = 'scheduled'), (SELECT v FROM sw) FROM t`

// unlimitedAboveSQL reads the priorities, highest first, of up to ?3 of
// queue ?1's jobs without a limit due by ?2 whose priority is above ?4
// (the lowest of the limited jobs a fetch selected): pr walks the
// distinct priorities down to ?4, one probe of jobs_ready each, so with
// every job at one priority it is one probe.
const unlimitedAboveSQL = `WITH RECURSIVE pr(p) AS (
	SELECT (SELECT priority FROM jobs WHERE state IN ('pending', 'scheduled') AND climit IS NULL AND fkey IS NULL AND queue = ?1 ORDER BY priority DESC LIMIT 1)
	UNION ALL
	SELECT (SELECT priority FROM jobs WHERE state IN ('pending', 'scheduled') AND climit IS NULL AND fkey IS NULL AND queue = ?1 AND priority < pr.p
		ORDER BY priority DESC LIMIT 1)
	FROM pr WHERE pr.p IS NOT NULL AND pr.p > ?4
)
SELECT json_group_array(priority) FROM (SELECT j.priority FROM pr CROSS JOIN jobs j
	WHERE pr.p IS NOT NULL AND pr.p > ?4 AND j.state IN ('pending', 'scheduled') AND j.climit IS NULL AND j.fkey IS NULL AND j.queue = ?1 AND j.priority = pr.p AND j.run_at <= ?2
	LIMIT ?3)`

// noCap is the free slots of a limit with max_running 0 (a rate only):
// more than any fetch leases.
const noCap = "1000000000"

// rateLeaseSQL counts, then records, the starts of the jobs just leased
// (?1, a JSON array of ids) at ?2 (unix microseconds) in the rate state
// of their groups: a start the rate delayed (its job due before its
// group's rate allowed a start) is counted in throttled; each group's
// TAT moves to max(TAT, now) + starts * T. Rows of groups whose TAT and
// hold are past (no more than no row) are deleted.
const (
	rateThrottledSQL = `UPDATE conc_limits SET throttled = throttled + (
		SELECT count(*) FROM jobs j JOIN limit_rates rt ON rt.name = j.climit AND rt.key = j.ckey
		WHERE j.id IN (SELECT value FROM json_each(?1)) AND j.climit = conc_limits.name
			AND j.run_at < rt.tat - (conc_limits.rate_burst - 1) * ((conc_limits.rate_per + conc_limits.rate_n - 1) / conc_limits.rate_n))
	WHERE rate_n > 0 AND name IN (SELECT climit FROM jobs WHERE id IN (SELECT value FROM json_each(?1)))`
	rateMoveSQL = `INSERT INTO limit_rates (name, key, tat)
		SELECT j.climit, j.ckey, ?2 + count(*) * ((l.rate_per + l.rate_n - 1) / l.rate_n)
		FROM jobs j JOIN conc_limits l ON l.name = j.climit AND l.rate_n > 0
		WHERE j.id IN (SELECT value FROM json_each(?1))
		GROUP BY j.climit, j.ckey
	ON CONFLICT (name, key) DO UPDATE SET tat = max(tat, ?2) + (excluded.tat - ?2)`
	ratePruneSQL = `DELETE FROM limit_rates WHERE tat <= ?1 AND held_until <= ?1`

	// limitHoldSQL holds, until ?2, the group of job ?1's limit if the
	// limit holds on Retry-After (a later hold of the group wins).
	limitHoldSQL = `INSERT INTO limit_rates (name, key, tat, held_until)
		SELECT j.climit, j.ckey, 0, ?2 FROM jobs j JOIN conc_limits l ON l.name = j.climit WHERE j.id = ?1 AND l.hold_retry_after = 1
	ON CONFLICT (name, key) DO UPDATE SET held_until = max(held_until, excluded.held_until)`
)

// limitIdle remembers, per queue, that its last selection of limited
// jobs leased none: the limit_gen count then, and the due time of its
// next limited job not yet due. Until either moves, the selection would
// lease none again, and the fetch skips it. Only the writer goroutine
// reads and writes it.
type limitIdle map[string]idleMark

// rateAt, when not 0, is when a job a rate held can start next: the
// selection runs again from then. slotWait is whether a due job waited
// on a full group's slot then.
type idleMark struct {
	gen, nextDue, rateAt int64
	slotWait             bool
}

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
			if _, err := s.stmt(tx, "limitUpsert").ExecContext(ctx, nj.Limit, nj.LimitMax,
				nj.LimitRate.N, nj.LimitRate.Per.Microseconds(), nj.LimitRate.Burst, nj.LimitHold, micros(now)); err != nil {
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
	return s.changeLimit(ctx, "set limit", name, store.LimitChange{Max: &max}, now)
}

// limitBack reads back the limit named name after op changed it.
func (s *Store) limitBack(ctx context.Context, now time.Time, name, op string) (store.LimitState, error) {
	ls, err := s.limits(ctx, now, name)
	if err != nil {
		return store.LimitState{}, fmt.Errorf("sqlite: %s: %w", op, err)
	}
	if len(ls) != 1 {
		return store.LimitState{}, fmt.Errorf("sqlite: %s: %q not read back", op, name)
	}
	return ls[0], nil
}

// SetLimitRate implements store.Limits.
func (s *Store) SetLimitRate(ctx context.Context, name string, r store.LimitRate, now time.Time) (store.LimitState, error) {
	return s.changeLimit(ctx, "set limit rate", name, store.LimitChange{Rate: &r}, now)
}

// SetLimitHold implements store.Limits.
func (s *Store) SetLimitHold(ctx context.Context, name string, on bool, now time.Time) (store.LimitState, error) {
	return s.changeLimit(ctx, "set limit hold", name, store.LimitChange{Hold: &on}, now)
}

// ChangeLimit implements store.Limits: in one write transaction.
func (s *Store) ChangeLimit(ctx context.Context, name string, ch store.LimitChange, now time.Time) (store.LimitState, error) {
	return s.changeLimit(ctx, "change limit", name, ch, now)
}

// changeLimit applies ch to the limit named name in one write
// transaction (op names the call in errors).
func (s *Store) changeLimit(ctx context.Context, op, name string, ch store.LimitChange, now time.Time) (store.LimitState, error) {
	if err := store.CheckLimitChange(name, ch); err != nil {
		return store.LimitState{}, fmt.Errorf("sqlite: %s: %w", op, err)
	}
	err := s.write(ctx, func(tx *sql.Conn) error {
		var old store.LimitSettings
		var per int64
		exists := true
		err := tx.QueryRowContext(ctx, `SELECT max_running, rate_n, rate_per, rate_burst, hold_retry_after FROM conc_limits WHERE name = ?`, name).
			Scan(&old.Max, &old.Rate.N, &per, &old.Rate.Burst, &old.Hold)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			exists = false
		case err != nil:
			return err
		}
		old.Rate.Per = time.Duration(per) * time.Microsecond
		set, err := ch.Apply(exists, old)
		if errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("limit %q: %w", name, err)
		}
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO conc_limits (name, max_running, rate_n, rate_per, rate_burst, hold_retry_after, updated_at)
			VALUES (?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (name) DO UPDATE SET max_running = excluded.max_running, rate_n = excluded.rate_n, rate_per = excluded.rate_per,
				rate_burst = excluded.rate_burst, hold_retry_after = excluded.hold_retry_after, updated_at = excluded.updated_at`,
			name, set.Max, set.Rate.N, set.Rate.Per.Microseconds(), set.Rate.Burst, set.Hold, micros(now)); err != nil {
			return err
		}
		if ch.Rate != nil {
			r := set.Rate
			if r.N == 0 {
				r = store.LimitRate{}
			}
			q, args := rateResetSQL(r, now)
			if _, err := tx.ExecContext(ctx, q, append(args, name)...); err != nil {
				return err
			}
		}
		if ch.Hold != nil && !*ch.Hold {
			if _, err := tx.ExecContext(ctx, `UPDATE limit_rates SET held_until = 0 WHERE name = ? AND held_until > 0`, name); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return store.LimitState{}, fmt.Errorf("sqlite: %s: %w", op, err)
	}
	return s.limitBack(ctx, now, name, op)
}

// rateResetSQL is the statement, and its arguments but the limit's
// name (last), that brings the rate state of a limit's groups under its
// new rate r set at now: no tat later than now + Burst·T, as if each
// group had just used its whole burst at the new rate (so raising a rate
// takes effect at once, and lowering one holds a group at most one new
// interval); no rate, no rate state.
func rateResetSQL(r store.LimitRate, now time.Time) (string, []any) {
	if r.IsZero() {
		// The rows keep their holds; the pruning deletes them after.
		return `UPDATE limit_rates SET tat = 0 WHERE name = ?`, nil
	}
	bound := micros(now) + int64(r.Burst)*r.Interval().Microseconds()
	return `UPDATE limit_rates SET tat = ? WHERE tat > ? AND name = ?`, []any{bound, bound}
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
	rows, err := db.QueryContext(ctx, `SELECT l.name, l.max_running, l.rate_n, l.rate_per, l.rate_burst, l.throttled, l.updated_at,
		coalesce(g.in_use, 0), coalesce(g.busiest, 0), coalesce(g.groups, 0), coalesce(w.n, 0), l.hold_retry_after,
		(SELECT count(*) FROM limit_rates rt WHERE rt.name = l.name AND rt.held_until > ?1)
		FROM conc_limits l
		LEFT JOIN (SELECT climit, sum(n) AS in_use, max(n) AS busiest, count(*) AS groups FROM (
			SELECT climit, ckey, count(*) AS n FROM jobs WHERE state = 'running' AND climit IS NOT NULL GROUP BY climit, ckey)
			GROUP BY climit) g ON g.climit = l.name
		LEFT JOIN (SELECT climit, count(*) AS n FROM jobs WHERE state IN ('pending', 'scheduled') AND climit IS NOT NULL AND run_at <= ?1
			GROUP BY climit) w ON w.climit = l.name
		WHERE ?2 = '' OR l.name = ?2
		ORDER BY l.name`, micros(now), name)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.LimitState
	for rows.Next() {
		var l store.LimitState
		var updated, per int64
		var r store.LimitRate
		if err := rows.Scan(&l.Name, &l.Max, &r.N, &per, &r.Burst, &l.Throttled, &updated, &l.InUse, &l.Busiest, &l.Groups, &l.Waiting,
			&l.HoldOnRetryAfter, &l.HeldGroups); err != nil {
			return nil, err
		}
		if r.N > 0 {
			r.Per = time.Duration(per) * time.Microsecond
			l.Rate = &r
		}
		l.UpdatedAt = fromMicros(updated)
		out = append(out, l)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows.Close()
	return out, s.limitHolds(ctx, db, out, now, name)
}

// limitHolds fills the Holds of the limits ls (only the one named name,
// if not empty) that a Retry-After holds at now: those whose hold ends
// last, store.MaxLimitHolds at most each.
func (s *Store) limitHolds(ctx context.Context, db *sql.DB, ls []store.LimitState, now time.Time, name string) error {
	held := map[string]*store.LimitState{}
	for i := range ls {
		if ls[i].HeldGroups > 0 {
			held[ls[i].Name] = &ls[i]
		}
	}
	if len(held) == 0 {
		return nil
	}
	rows, err := db.QueryContext(ctx, `SELECT name, key, held_until FROM limit_rates WHERE held_until > ?1 AND (?2 = '' OR name = ?2)
		ORDER BY name, held_until DESC, key`, micros(now), name)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var n, k string
		var until int64
		if err := rows.Scan(&n, &k, &until); err != nil {
			return err
		}
		if l := held[n]; l != nil && len(l.Holds) < store.MaxLimitHolds {
			l.Holds = append(l.Holds, store.LimitHold{Key: k, Until: fromMicros(until)})
		}
	}
	return rows.Err()
}

// fetchLimited runs the selection of limited jobs of a fetch, unless the
// queue's idle mark says it would lease none, and returns the ids
// selected, how many, how many of them were scheduled, and when a job a
// rate holds can start next (0: none held). It leases nothing: the
// caller leases the ids, then calls rateLeased.
func (s *Store) fetchLimited(ctx context.Context, tx *sql.Conn, queue string, now, dueBy time.Time, limit int) (ids string, n, scheduled, nextStart int64, err error) {
	ids, n, scheduled, nextStart, err = s.selectLimited(ctx, tx, queue, now, dueBy, limit)
	if err != nil || n == 0 {
		return ids, n, scheduled, nextStart, err
	}
	k, err := s.limitedFirst(ctx, tx, queue, dueBy, limit)
	if err != nil {
		return "", 0, 0, 0, err
	}
	if k < int(n) {
		ids, n, scheduled = s.sel.cut(k)
	}
	return ids, n, scheduled, nextStart, nil
}

// limitedSel is the last selection of limited jobs (writer goroutine
// only): their ids, priorities and scheduled flags, in the order picked.
type limitedSel struct {
	ids   []int64
	prios []int
	sched []bool
}

// cut returns the first k jobs of the selection as a JSON array of ids,
// with how many they are and how many of them were scheduled.
func (l *limitedSel) cut(k int) (string, int64, int64) {
	b, _ := json.Marshal(l.ids[:k])
	var sch int64
	for _, s := range l.sched[:k] {
		if s {
			sch++
		}
	}
	return string(b), int64(k), sch
}

// limitedFirst returns how many of the selected limited jobs (s.sel)
// belong in the fetch's first limit of the queue's due jobs by priority:
// the unlimited jobs of a higher priority go before them (the limited
// win ties), so that no limited job is leased ahead of an unlimited one
// of a higher priority.
func (s *Store) limitedFirst(ctx context.Context, tx *sql.Conn, queue string, dueBy time.Time, limit int) (int, error) {
	l := &s.sel
	var raw string
	if err := s.stmt(tx, "unlimitedAbove").QueryRowContext(ctx, queue, micros(dueBy), limit, l.prios[len(l.prios)-1]).Scan(&raw); err != nil {
		return 0, err
	}
	var up []int
	if err := json.Unmarshal([]byte(raw), &up); err != nil {
		return 0, err
	}
	return store.LimitedFirst(l.prios, up, limit), nil
}

// selectLimited runs the selection of fetchLimited and keeps what it
// picked in s.sel.
func (s *Store) selectLimited(ctx context.Context, tx *sql.Conn, queue string, now, dueBy time.Time, limit int) (ids string, n, scheduled, nextStart int64, err error) {
	var gen int64
	if err := s.stmt(tx, "limitGen").QueryRowContext(ctx).Scan(&gen); err != nil {
		return "", 0, 0, 0, err
	}
	due, at := micros(dueBy), micros(now)
	if m, ok := s.limitIdle[queue]; ok && m.gen == gen && due < m.nextDue && (m.rateAt == 0 || at < m.rateAt) {
		s.slotWait = m.slotWait
		return "", 0, 0, m.rateAt, nil
	}
	var hint sql.NullInt64
	var prios, sched string
	var slotWait sql.NullBool
	if err := s.stmt(tx, "fetchLimited").QueryRowContext(ctx, queue, due, limit, at).Scan(&ids, &n, &scheduled, &hint, &prios, &sched, &slotWait); err != nil {
		return "", 0, 0, 0, err
	}
	s.slotWait = slotWait.Bool
	if n > 0 {
		delete(s.limitIdle, queue)
		s.sel = limitedSel{}
		if err := json.Unmarshal([]byte(ids), &s.sel.ids); err != nil {
			return "", 0, 0, 0, err
		}
		if err := json.Unmarshal([]byte(prios), &s.sel.prios); err != nil {
			return "", 0, 0, 0, err
		}
		var sch []int
		if err := json.Unmarshal([]byte(sched), &sch); err != nil {
			return "", 0, 0, 0, err
		}
		for _, v := range sch {
			s.sel.sched = append(s.sel.sched, v != 0)
		}
		if len(s.sel.ids) != int(n) || len(s.sel.prios) != int(n) || len(s.sel.sched) != int(n) {
			return "", 0, 0, 0, fmt.Errorf("limited selection: %d jobs, %d ids, %d priorities", n, len(s.sel.ids), len(s.sel.prios))
		}
		return ids, n, scheduled, hint.Int64, nil
	}
	var next sql.NullInt64
	if err := s.stmt(tx, "limitNextDue").QueryRowContext(ctx, queue, due).Scan(&next); err != nil {
		return "", 0, 0, 0, err
	}
	m := idleMark{gen: gen, nextDue: math.MaxInt64, rateAt: hint.Int64, slotWait: slotWait.Bool}
	if next.Valid {
		m.nextDue = next.Int64
	}
	s.limitIdle[queue] = m
	return ids, 0, 0, hint.Int64, nil
}

// rateLeased records, in the fetch's transaction, the starts at now of
// the limited jobs ids just leased in their groups' rate state (and
// counts those the rate delayed). Every ratePruneEvery calls it also
// deletes the rate rows that say no more than no row.
func (s *Store) rateLeased(ctx context.Context, tx *sql.Conn, ids string, now time.Time) error {
	if _, err := s.stmt(tx, "rateThrottled").ExecContext(ctx, ids); err != nil {
		return err
	}
	if _, err := s.stmt(tx, "rateMove").ExecContext(ctx, ids, micros(now)); err != nil {
		return err
	}
	if s.ratePrune++; s.ratePrune%ratePruneEvery == 0 {
		if _, err := tx.ExecContext(ctx, ratePruneSQL, micros(now)); err != nil {
			return err
		}
	}
	return nil
}

// ratePruneEvery is how many limited leases pass between two prunings of
// limit_rates (a scan of the groups that started jobs lately).
const ratePruneEvery = 1000

// slotPruneEvery is how many takes of limit slots pass between two
// prunings of every ended slot (a scan of limit_slots, which holds the
// slots held and those whose holders died holding them). A variable for
// the tests.
var slotPruneEvery = 1000

// TakeLimitStarts implements store.Limits: in the writer's transaction,
// which every fetch of every process on the file also takes, so the
// group's tat moves in step with the limited fetches.
func (s *Store) TakeLimitStarts(ctx context.Context, name, key string, r store.LimitRate, n int, clock func() time.Time) (int, time.Time, error) {
	if err := store.CheckTakeStarts(name, key, r, n); err != nil {
		return 0, time.Time{}, fmt.Errorf("sqlite: take limit starts: %w", err)
	}
	var took int
	var next time.Time
	err := s.write(ctx, func(tx *sql.Conn) error {
		var sn, sper, sburst int64
		err := tx.QueryRowContext(ctx, `SELECT rate_n, rate_per, rate_burst FROM conc_limits WHERE name = ?`, name).Scan(&sn, &sper, &sburst)
		switch {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return err
		case sn > 0:
			r = store.LimitRate{N: int(sn), Per: time.Duration(sper) * time.Microsecond, Burst: int(sburst)}
		}
		var tat, heldUntil time.Time
		var t, h int64
		err = tx.QueryRowContext(ctx, `SELECT tat, held_until FROM limit_rates WHERE name = ? AND key = ?`, name, key).Scan(&t, &h)
		switch {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return err
		default:
			tat, heldUntil = time.UnixMicro(t), time.UnixMicro(h)
		}
		var newTat time.Time
		took, newTat, next = r.TakeHeld(tat, heldUntil, clock(), n)
		if took == 0 {
			return nil
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO limit_rates (name, key, tat) VALUES (?, ?, ?)
			ON CONFLICT (name, key) DO UPDATE SET tat = excluded.tat`, name, key, micros(newTat))
		return err
	})
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("sqlite: take limit starts: %w", err)
	}
	return took, next, nil
}

// TakeLimitSlot implements store.Limits: in the writer's transaction,
// which every take of every process on the file also takes, so two
// takes never count a group's slots at once.
func (s *Store) TakeLimitSlot(ctx context.Context, name, key string, max int, holder string, now, until time.Time) (int64, error) {
	if err := store.CheckTakeSlot(name, key, max, holder, now, until); err != nil {
		return 0, fmt.Errorf("sqlite: take limit slot: %w", err)
	}
	var token int64
	err := s.write(ctx, func(tx *sql.Conn) error {
		token = 0
		var stored int64
		err := tx.QueryRowContext(ctx, `SELECT max_running FROM conc_limits WHERE name = ?`, name).Scan(&stored)
		switch {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return err
		case stored > 0:
			max = int(stored)
		}
		// The ended leases of the group go: they hold nothing. Every
		// slotPruneEvery takes, those of every group go: a holder killed
		// with a slot of a key never taken again left its row.
		prune := `DELETE FROM limit_slots WHERE name = ? AND key = ? AND until <= ?`
		args := []any{name, key, micros(now)}
		if s.slotTakes++; s.slotTakes%slotPruneEvery == 0 {
			prune, args = `DELETE FROM limit_slots WHERE until <= ?`, []any{micros(now)}
		}
		if _, err := tx.ExecContext(ctx, prune, args...); err != nil {
			return err
		}
		var held int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM limit_slots WHERE name = ? AND key = ?`,
			name, key).Scan(&held); err != nil {
			return err
		}
		if held >= max {
			return nil
		}
		return tx.QueryRowContext(ctx, `INSERT INTO limit_slots (name, key, holder, until) VALUES (?, ?, ?, ?) RETURNING token`,
			name, key, holder, micros(until)).Scan(&token)
	})
	if err != nil {
		return 0, fmt.Errorf("sqlite: take limit slot: %w", err)
	}
	return token, nil
}

// RenewLimitSlots implements store.Limits.
func (s *Store) RenewLimitSlots(ctx context.Context, tokens []int64, now, until time.Time) ([]int64, error) {
	if err := store.CheckRenewSlots(tokens, now, until); err != nil {
		return nil, fmt.Errorf("sqlite: renew limit slots: %w", err)
	}
	if len(tokens) == 0 {
		return nil, nil
	}
	var lost []int64
	err := s.write(ctx, func(tx *sql.Conn) error {
		lost = lost[:0]
		renewed := make(map[int64]bool, len(tokens))
		args := make([]any, 0, len(tokens)+2)
		args = append(args, micros(until), micros(now))
		for _, t := range tokens {
			args = append(args, t)
		}
		rows, err := tx.QueryContext(ctx, `UPDATE limit_slots SET until = ? WHERE until > ? AND token IN (?`+
			strings.Repeat(", ?", len(tokens)-1)+`) RETURNING token`, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var t int64
			if err := rows.Scan(&t); err != nil {
				return err
			}
			renewed[t] = true
		}
		if err := rows.Err(); err != nil {
			return err
		}
		for _, t := range tokens {
			if !renewed[t] {
				lost = append(lost, t)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("sqlite: renew limit slots: %w", err)
	}
	return lost, nil
}

// ReleaseLimitSlot implements store.Limits.
func (s *Store) ReleaseLimitSlot(ctx context.Context, token int64, now time.Time) (bool, error) {
	var held bool
	err := s.write(ctx, func(tx *sql.Conn) error {
		var until int64
		err := tx.QueryRowContext(ctx, `DELETE FROM limit_slots WHERE token = ? RETURNING until`, token).Scan(&until)
		if errors.Is(err, sql.ErrNoRows) {
			held = false
			return nil
		}
		held = until > micros(now)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("sqlite: release limit slot: %w", err)
	}
	return held, nil
}
