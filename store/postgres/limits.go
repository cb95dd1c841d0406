package postgres

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/redrivehq/redrive/store"
)

// Concurrency limits (store.Limits). A job under a limit names it
// (climit) and its group (ckey); a slot is a running job of the group.
// The fetch of limited jobs runs in its own transaction, which first
// takes a transaction-level advisory lock of the schema (limitLockKey):
// two such fetches never overlap, so each counts the running jobs of a
// group after the previous one committed, and never leases into a slot
// another just took. Nothing else needs the lock: every other change of a
// limited job's state takes it out of running (an outcome, a rescue),
// which only frees slots, and nothing but a fetch makes a job running.
// The fetch of unlimited jobs is the store's usual statement, with
// climit IS NULL: it neither takes the lock nor reads any limit.

// limitedFetchSQL leases, among the first limitWindow due jobs of queue
// $1 (run_at <= $2) under a limit whose group is not full, in (priority
// descending, run_at, id) order, those that fit their group's free slots
// (each group's first in that order; the slots counted once per group),
// and of them the first, $3 at most. $4 to $7 are as in the fetch
// statement. f is the full groups, read from the running limited jobs:
// the window steps over the waiting jobs of those, so one group's flood
// holds back no other. The window reads one priority at a time, highest
// first, as the fetch statement does: job_limit_priorities walks the
// distinct priorities of the queue's waiting limited jobs (one probe of
// jobs_limit_due each), and each priority's due jobs are one range of the
// index, so limited jobs of a higher priority due later are skipped by a
// probe, never walked.
const limitedFetchSQL = `WITH f AS MATERIALIZED (
	SELECT r.climit, r.ckey FROM {jobs} r
	WHERE r.state = 'running' AND r.climit IS NOT NULL
	GROUP BY r.climit, r.ckey
	HAVING count(*) >= coalesce((SELECT l.max_running FROM {limits} l WHERE l.name = r.climit), 0)
), w AS MATERIALIZED (
	SELECT d.id, d.priority, d.run_at, d.climit, d.ckey FROM {schema}.job_limit_priorities($1::text) AS prio(p) CROSS JOIN LATERAL (
		SELECT j.id, j.priority, j.run_at, j.climit, j.ckey FROM {jobs} j
		WHERE j.state IN ('pending', 'scheduled') AND j.climit IS NOT NULL AND j.queue = $1::text AND j.priority = prio.p AND j.run_at <= $2
			AND (j.climit, j.ckey) NOT IN (SELECT climit, ckey FROM f)
		ORDER BY j.run_at, j.id LIMIT ` + limitWindow + `) d
	LIMIT ` + limitWindow + `
), g AS (
	SELECT d.climit, d.ckey, (SELECT l.max_running FROM {limits} l WHERE l.name = d.climit)
		- (SELECT count(*) FROM {jobs} r WHERE r.state = 'running' AND r.climit IS NOT NULL AND r.climit = d.climit AND r.ckey = d.ckey) AS free
	FROM (SELECT DISTINCT climit, ckey FROM w) d
), r AS (
	SELECT id, free, rn FROM (
		SELECT w.id, w.priority, w.run_at, g.free, row_number() OVER (PARTITION BY w.climit, w.ckey ORDER BY w.priority DESC, w.run_at, w.id) AS rn
		FROM w JOIN g ON g.climit = w.climit AND g.ckey = w.ckey WHERE g.free > 0) x
	WHERE rn <= free ORDER BY priority DESC, run_at, id LIMIT $3
), upd AS (
	UPDATE {jobs} j SET state = 'running', attempt = j.attempt + 1, lease = j.lease + 1, attempted_at = GREATEST($4, j.run_at), lease_until = $5, worker = $6,
		progress_done = NULL, progress_total = NULL, progress_at = NULL
	FROM r WHERE j.id = r.id AND j.state IN ('pending', 'scheduled')
	RETURNING {jcols}
), cnt AS (
	INSERT INTO {counters} AS c (queue, name, shard, n)
	SELECT $1::text, 'attempts', $7::smallint, count(*) FROM upd HAVING count(*) > 0
	{upsert}
)
SELECT * FROM upd`

// limitWindow is how many of a queue's oldest due limited jobs a fetch
// looks at: it bounds the cost of a fetch when many wait on full groups
// (see docs/design.md).
const limitWindow = "1000"

// limitedDueSQL says whether queue $1 has due jobs under a limit: a
// probe of jobs_limit_due per distinct priority of its waiting limited
// jobs (job_limit_priorities), one more each.
const limitedDueSQL = `SELECT EXISTS (SELECT 1 FROM {schema}.job_limit_priorities($1::text) AS p(p) WHERE EXISTS (
	SELECT 1 FROM {jobs} WHERE state IN ('pending', 'scheduled') AND climit IS NOT NULL AND queue = $1::text AND priority = p.p AND run_at <= $2))`

// limitGenSQL reads the limit_gen count; limitNextDueSQL the due time of
// queue $1's next limited job due after $2 (the earliest of each
// priority's, as limitedDueSQL walks them).
const (
	limitGenSQL     = `SELECT n FROM {limitgen} WHERE id = 1`
	limitNextDueSQL = `SELECT min((SELECT run_at FROM {jobs} WHERE state IN ('pending', 'scheduled') AND climit IS NOT NULL AND queue = $1::text AND priority = p.p AND run_at > $2
	ORDER BY run_at LIMIT 1)) FROM {schema}.job_limit_priorities($1::text) AS p(p)`
)

// limitEnsureSQL creates the limits named ($1) with their max ($2) if
// they do not exist; limitJobsSQL sets the limit ($2) and group ($3) of
// the jobs $1; limitSetSQL sets one limit.
const (
	limitEnsureSQL = `INSERT INTO {limits} (name, max_running, updated_at)
	SELECT name, max, $3 FROM unnest($1::text[], $2::int[]) AS t(name, max) ORDER BY name
	ON CONFLICT (name) DO NOTHING`
	limitJobsSQL = `UPDATE {jobs} j SET climit = t.name, ckey = t.key FROM unnest($1::bigint[], $2::text[], $3::text[]) AS t(id, name, key) WHERE j.id = t.id`
	limitSetSQL  = `INSERT INTO {limits} (name, max_running, updated_at) VALUES ($1, $2, $3)
	ON CONFLICT (name) DO UPDATE SET max_running = excluded.max_running, updated_at = excluded.updated_at`
)

// limitListSQL reads the limits ($2: only that one, unless empty) and
// their use at $1.
const limitListSQL = `SELECT l.name, l.max_running, l.updated_at,
	coalesce(g.in_use, 0), coalesce(g.busiest, 0), coalesce(g.groups, 0), coalesce(w.n, 0)
FROM {limits} l
LEFT JOIN (SELECT climit, sum(n)::bigint AS in_use, max(n) AS busiest, count(*) AS groups FROM (
	SELECT climit, ckey, count(*) AS n FROM {jobs} WHERE state = 'running' AND climit IS NOT NULL GROUP BY climit, ckey) x
	GROUP BY climit) g ON g.climit = l.name
LEFT JOIN (SELECT climit, count(*) AS n FROM {jobs} WHERE state IN ('pending', 'scheduled') AND climit IS NOT NULL AND run_at <= $1
	GROUP BY climit) w ON w.climit = l.name
WHERE $2::text = '' OR l.name = $2::text
ORDER BY l.name`

// limitProbeEvery is how often a process that has seen no limited job in
// a queue asks whether one is due: a limited job enqueued by another
// process waits at most about this long for the first fetch of a process
// that had none.
const limitProbeEvery = 100 * time.Millisecond

// limitHints remembers, per queue, whether it had due limited jobs at the
// last look, so that the fetches of a queue without any pay nothing but
// a probe every limitProbeEvery.
type limitHints struct {
	m sync.Map // queue -> *limitHint
}

type limitHint struct {
	due    atomic.Bool
	probed atomic.Int64 // UnixNano of the last probe
	// idle, when set, says the last selection leased none: at limit_gen
	// count gen, with the next limited job not yet due at nextDue.
	mu   sync.Mutex
	idle *idleMark
}

type idleMark struct {
	gen     int64
	nextDue time.Time
}

func (h *limitHints) get(queue string) *limitHint {
	if v, ok := h.m.Load(queue); ok {
		return v.(*limitHint)
	}
	v, _ := h.m.LoadOrStore(queue, &limitHint{})
	return v.(*limitHint)
}

// limitLockKey is the advisory lock key of the schema's limited fetches.
func (s *Store) limitLockKey() int64 {
	h := fnv.New64a()
	h.Write([]byte("redrive limits " + s.schema))
	return int64(h.Sum64())
}

// fetchLimited leases the due limited jobs of p.Queue that have a free
// slot, up to p.Limit, when the queue may have some (see limitHints).
func (s *Store) fetchLimited(ctx context.Context, p store.FetchParams, dueBy time.Time) ([]*store.Job, error) {
	h := s.limitHints.get(p.Queue)
	if !h.due.Load() {
		now := time.Now().UnixNano()
		last := h.probed.Load()
		if now-last < int64(limitProbeEvery) || !h.probed.CompareAndSwap(last, now) {
			return nil, nil
		}
		var due bool
		if err := s.pool.QueryRow(ctx, s.sql.limitedDue, p.Queue, ts(dueBy)).Scan(&due); err != nil {
			return nil, err
		}
		if !due {
			return nil, nil
		}
		h.due.Store(true)
	}
	h.mu.Lock()
	idle := h.idle
	h.mu.Unlock()
	if idle != nil {
		var gen int64
		if err := s.pool.QueryRow(ctx, s.sql.limitGen).Scan(&gen); err != nil {
			return nil, err
		}
		if gen == idle.gen && dueBy.Before(idle.nextDue) {
			return nil, nil // nothing can start since the last selection
		}
	}
	var jobs []*store.Job
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, s.limitLockKey()); err != nil {
			return err
		}
		// The count before the selection: a change after it is seen by
		// the next fetch.
		var gen int64
		if err := tx.QueryRow(ctx, s.sql.limitGen).Scan(&gen); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, s.sql.limitedFetch, p.Queue, ts(dueBy), p.Limit, ts(p.Now), ts(p.LeaseUntil), cleanText(p.Worker), shard())
		if err != nil {
			return err
		}
		jobs, err = collect(rows, false)
		if err != nil {
			return err
		}
		if len(jobs) > 0 {
			h.mu.Lock()
			h.idle = nil
			h.mu.Unlock()
			return nil
		}
		var next *time.Time
		if err := tx.QueryRow(ctx, s.sql.limitNextDue, p.Queue, ts(dueBy)).Scan(&next); err != nil {
			return err
		}
		m := &idleMark{gen: gen, nextDue: time.Unix(1<<62, 0)}
		if next != nil {
			m.nextDue = *next
		}
		h.mu.Lock()
		h.idle = m
		h.mu.Unlock()
		// Nothing leased: are there still due limited jobs (waiting on
		// a slot), or none, so that the next fetches skip this path?
		var due bool
		if err := tx.QueryRow(ctx, s.sql.limitedDue, p.Queue, ts(dueBy)).Scan(&due); err != nil {
			return err
		}
		if !due {
			h.probed.Store(time.Now().UnixNano())
			h.due.Store(false)
		}
		return nil
	})
	return jobs, err
}

// hasLimits reports whether some job is under a limit.
func hasLimits(jobs []store.NewJob) bool {
	for i := range jobs {
		if jobs[i].Limit != "" {
			return true
		}
	}
	return false
}

// enqueueLimited is Enqueue for a batch holding jobs under a limit: the
// insert and the columns of their limits in one transaction, outside the
// group commit, so that no fetch sees a limited job without its limit.
func (s *Store) enqueueLimited(ctx context.Context, jobs []store.NewJob, now time.Time) ([]*store.Job, error) {
	out, err := s.withKeptKeys(ctx, jobs, now, func(sub []store.NewJob, b *enqueueBatch) ([]*store.Job, error) {
		var out []*store.Job
		err := s.retry(ctx, func() error {
			for try := 0; ; try++ {
				err := s.inTx(ctx, func(tx pgx.Tx) error {
					var err error
					if out, err = s.enqueueOn(ctx, tx, sub, b); err != nil {
						return err
					}
					return s.setLimits(ctx, tx, sub, out, now)
				})
				if errors.Is(err, errHolderGone) && try < 10 {
					continue
				}
				return err
			}
		})
		return out, err
	})
	if err != nil {
		return nil, s.fail("enqueue", err)
	}
	for i := range jobs {
		if jobs[i].Limit != "" {
			s.limitHints.get(jobs[i].Queue).due.Store(true)
		}
	}
	return out, nil
}

// setLimits puts the jobs just inserted (out[i] not Existing) under the
// limits their NewJob names, in the insert's transaction, and gives each
// limit named its max if it has none yet.
func (s *Store) setLimits(ctx context.Context, q querier, jobs []store.NewJob, out []*store.Job, now time.Time) error {
	var ids []int64
	var names, keys []string
	var limNames []string
	var limMax []int32
	seen := map[string]bool{}
	for i := range jobs {
		nj := &jobs[i]
		if nj.Limit == "" || out[i] == nil || out[i].Existing {
			continue
		}
		ids, names, keys = append(ids, out[i].ID), append(names, nj.Limit), append(keys, nj.LimitKey)
		if !seen[nj.Limit] {
			seen[nj.Limit] = true
			limNames, limMax = append(limNames, nj.Limit), append(limMax, int32(nj.LimitMax))
		}
	}
	if len(ids) == 0 {
		return nil
	}
	if _, err := q.Exec(ctx, s.sql.limitEnsure, limNames, limMax, ts(now)); err != nil {
		return fmt.Errorf("limits: %w", err)
	}
	if _, err := q.Exec(ctx, s.sql.limitJobs, ids, names, keys); err != nil {
		return fmt.Errorf("limits: %w", err)
	}
	return nil
}

// SetLimit implements store.Limits.
func (s *Store) SetLimit(ctx context.Context, name string, max int, now time.Time) (store.LimitState, error) {
	if err := s.check(); err != nil {
		return store.LimitState{}, err
	}
	if err := store.CheckLimitName("name", name); err != nil {
		return store.LimitState{}, fmt.Errorf("postgres: set limit: %w", err)
	}
	if err := store.CheckLimitMax(max); err != nil {
		return store.LimitState{}, fmt.Errorf("postgres: set limit: %w", err)
	}
	if _, err := s.pool.Exec(ctx, s.sql.limitSet, name, max, ts(now)); err != nil {
		return store.LimitState{}, s.fail("set limit", err)
	}
	ls, err := s.limits(ctx, now, name)
	if err != nil {
		return store.LimitState{}, s.fail("set limit", err)
	}
	if len(ls) != 1 {
		return store.LimitState{}, fmt.Errorf("postgres: set limit: %q not read back", name)
	}
	return ls[0], nil
}

// ListLimits implements store.Limits.
func (s *Store) ListLimits(ctx context.Context, now time.Time) ([]store.LimitState, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	ls, err := s.limits(ctx, now, "")
	if err != nil {
		return nil, s.fail("list limits", err)
	}
	return ls, nil
}

func (s *Store) limits(ctx context.Context, now time.Time, name string) ([]store.LimitState, error) {
	rows, err := s.pool.Query(ctx, s.sql.limitList, ts(now), name)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.LimitState
	for rows.Next() {
		var l store.LimitState
		if err := rows.Scan(&l.Name, &l.Max, &l.UpdatedAt, &l.InUse, &l.Busiest, &l.Groups, &l.Waiting); err != nil {
			return nil, err
		}
		l.UpdatedAt = l.UpdatedAt.UTC()
		out = append(out, l)
	}
	return out, rows.Err()
}
