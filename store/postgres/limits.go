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
// climit IS NULL AND fkey IS NULL: it neither takes the lock nor reads any limit.

// limitedFetchSQL leases, among the first limitWindow due jobs of queue
// $1 (run_at <= $2) under a limit whose group is not full, in (priority
// descending, run_at, id) order, those that fit their group's free slots
// (each group's first in that order; the slots counted once per group),
// and of them the first, $3 at most. $4 to $7 are as in the fetch
// statement. f is the full groups, read from the running limited jobs,
// and held the groups whose rate allows no start at $4 (their
// limit_rates row's tat - τ is later) or that a Retry-After holds then
// (held_until is later, whatever the limit): the window steps over the waiting
// jobs of those, so one group's flood, waiting on its slots or its rate,
// holds back no other. hw reads the held groups among the queue's first
// limitWindow due limited jobs (none read when no group is held), for
// when the first can start: a held group further down gives no hint; sw
// says whether any due job of the queue waits on a full group
// (FetchParams.SlotWait): one probe of jobs_limit_group_due per full
// group, however many due limited jobs come before (none read when no
// group is full). The window reads one priority at a time, highest
// first, as the fetch statement does: job_limit_priorities walks the
// distinct priorities of the queue's waiting limited jobs (one probe of
// jobs_limit_due each), and each priority's due jobs are one range of the
// index, so limited jobs of a higher priority due later are skipped by a
// probe, never walked.
//
// The selection and the lease are two statements of one transaction,
// under the lock: limitedSelectSQL picks the jobs ($4: now, as unix
// microseconds, for the rates) and says when a job a rate holds can start
// next; limitedLeaseSQL leases them and moves their groups' rate state.
// A group with a rate (rate_n > 0) gets, besides its free slots, at most
// the starts its GCRA allows at $4 (see store.LimitRate), and only jobs
// due by $4: a rate-limited job is never leased ahead of its due time.
const limitedSelectSQL = `WITH f AS MATERIALIZED (
	SELECT r.climit, r.ckey FROM {jobs} r
	WHERE r.state = 'running' AND r.climit IS NOT NULL
	GROUP BY r.climit, r.ckey
	HAVING count(*) >= coalesce((SELECT CASE WHEN l.max_running > 0 THEN l.max_running ELSE ` + noCap + ` END FROM {limits} l WHERE l.name = r.climit), 0)
), held AS MATERIALIZED (
	SELECT rt.name AS climit, rt.key AS ckey,
		GREATEST(CASE WHEN l.rate_n > 0 THEN rt.tat - (l.rate_burst - 1) * ((l.rate_per + l.rate_n - 1) / l.rate_n) ELSE 0 END, rt.held_until) AS at
	FROM {rates} rt JOIN {limits} l ON l.name = rt.name
	WHERE rt.held_until > $4
		OR (l.rate_n > 0 AND rt.tat - (l.rate_burst - 1) * ((l.rate_per + GREATEST(l.rate_n, 1) - 1) / GREATEST(l.rate_n, 1)) > $4)
), w AS MATERIALIZED (
	SELECT d.id, d.priority, d.run_at, d.climit, d.ckey FROM {schema}.job_limit_priorities($1::text) AS prio(p) CROSS JOIN LATERAL (
		SELECT j.id, j.priority, j.run_at, j.climit, j.ckey FROM {jobs} j
		WHERE j.state IN ('pending', 'scheduled') AND j.climit IS NOT NULL AND j.queue = $1::text AND j.priority = prio.p AND j.run_at <= $2
			AND (j.climit, j.ckey) NOT IN (SELECT climit, ckey FROM f) AND (j.climit, j.ckey) NOT IN (SELECT climit, ckey FROM held)
		ORDER BY j.run_at, j.id LIMIT ` + limitWindow + `) d
	LIMIT ` + limitWindow + `
), hw AS (
	SELECT climit, ckey, min(run_at) AS first FROM (
		SELECT d.climit, d.ckey, d.run_at FROM {schema}.job_limit_priorities($1::text) AS prio(p) CROSS JOIN LATERAL (
			SELECT j.climit, j.ckey, j.run_at FROM {jobs} j
			WHERE j.state IN ('pending', 'scheduled') AND j.climit IS NOT NULL AND j.queue = $1::text AND j.priority = prio.p AND j.run_at <= $2
			ORDER BY j.run_at, j.id LIMIT ` + limitWindow + `) d
		WHERE EXISTS (SELECT 1 FROM held)
		LIMIT ` + limitWindow + `) x
	WHERE (climit, ckey) IN (SELECT climit, ckey FROM held) AND (climit, ckey) NOT IN (SELECT climit, ckey FROM f)
	GROUP BY climit, ckey
), sw AS (
	SELECT EXISTS (SELECT 1 FROM f WHERE EXISTS (SELECT 1 FROM {jobs} j
		WHERE j.state IN ('pending', 'scheduled') AND j.climit IS NOT NULL AND j.climit = f.climit AND j.ckey = f.ckey AND j.queue = $1::text
			AND j.run_at <= $2)) AS v
), d AS (
	SELECT climit, ckey, count(*) AS waiting, count(*) FILTER (WHERE run_at <= {now}) AS waiting_now,
		(extract(epoch FROM min(run_at) FILTER (WHERE run_at > {now})) * 1000000)::bigint AS later
	FROM w GROUP BY climit, ckey
), g0 AS (
	SELECT d.climit, d.ckey, d.waiting, d.waiting_now, d.later, l.rate_n > 0 AS rated,
		CASE WHEN l.max_running > 0 THEN l.max_running - (SELECT count(*) FROM {jobs} r
			WHERE r.state = 'running' AND r.climit IS NOT NULL AND r.climit = d.climit AND r.ckey = d.ckey) ELSE ` + noCap + ` END AS cfree,
		CASE WHEN l.rate_n > 0 THEN (l.rate_per + l.rate_n - 1) / l.rate_n ELSE 1 END AS ti,
		CASE WHEN l.rate_n > 0 THEN (l.rate_burst - 1) * ((l.rate_per + l.rate_n - 1) / l.rate_n) ELSE 0 END AS tau,
		GREATEST(coalesce(rt.tat, $4), $4) AS base
	FROM d JOIN {limits} l ON l.name = d.climit LEFT JOIN {rates} rt ON rt.name = d.climit AND rt.key = d.ckey
), g AS MATERIALIZED (
	SELECT g0.*, CASE WHEN NOT rated THEN cfree WHEN $4 + tau < base THEN 0 ELSE LEAST(cfree, ($4 + tau - base) / ti + 1) END AS free
	FROM g0
), r AS (
	SELECT id, priority, run_at FROM (
		SELECT w.id, w.priority, w.run_at, g.free, row_number() OVER (PARTITION BY w.climit, w.ckey ORDER BY w.priority DESC, w.run_at, w.id) AS rn
		FROM w JOIN g ON g.climit = w.climit AND g.ckey = w.ckey WHERE g.free > 0 AND (NOT g.rated OR w.run_at <= {now})) x
	WHERE rn <= free ORDER BY priority DESC, run_at, id LIMIT $3
), h AS (
	SELECT CASE WHEN waiting_now > GREATEST(free, 0) THEN base + GREATEST(free, 0) * ti - tau
		WHEN waiting > waiting_now THEN GREATEST(base + GREATEST(free, 0) * ti - tau, later) END AS at
	FROM g WHERE rated
	UNION ALL
	SELECT GREATEST(held.at, (extract(epoch FROM hw.first) * 1000000)::bigint) FROM hw JOIN held ON held.climit = hw.climit AND held.ckey = hw.ckey
)
SELECT coalesce((SELECT array_agg(id ORDER BY priority DESC, run_at, id) FROM r), '{}'::bigint[]), (SELECT min(at) FROM h WHERE at > $4),
	coalesce((SELECT array_agg(priority::int ORDER BY priority DESC, run_at, id) FROM r), '{}'::int[]), (SELECT v FROM sw)`

// unlimitedAboveSQL reads the priorities, highest first, of up to $3 of
// queue $1's jobs without a limit due by $2 whose priority is above $4
// (the lowest of the limited jobs a fetch selected; store.LimitedFirst).
const unlimitedAboveSQL = `SELECT coalesce(array_agg(priority::int ORDER BY priority DESC), '{}'::int[]) FROM (
	SELECT d.priority FROM {schema}.job_priorities($1::text) AS prio(p) CROSS JOIN LATERAL (
		SELECT j.priority FROM {jobs} j
		WHERE j.state IN ('pending', 'scheduled') AND j.climit IS NULL AND j.fkey IS NULL AND j.queue = $1::text AND j.priority = prio.p AND j.run_at <= $2
		ORDER BY j.run_at, j.id LIMIT $3) d
	WHERE prio.p > $4
	LIMIT $3) x`

// limitedLeaseSQL leases the jobs $1 that are still waiting ($2 to $5
// as in the fetch statement: now, lease end, worker, counter shard), and,
// $6 being now in unix microseconds, moves the rate state of their
// groups: TAT to max(TAT, now) + starts * T, and counts in throttled the
// starts the rate delayed (a job due before its group's rate allowed a
// start). The CTEs read the rows as they were before the statement.
const limitedLeaseSQL = `WITH upd AS (
	UPDATE {jobs} j SET state = 'running', attempt = j.attempt + 1, lease = j.lease + 1, attempted_at = GREATEST($2, j.run_at), lease_until = $3, worker = $4,
		progress_done = NULL, progress_total = NULL, progress_at = NULL
	FROM unnest($1::bigint[]) AS r(id) WHERE j.id = r.id AND j.state IN ('pending', 'scheduled')
	RETURNING {jcols}
), cnt AS (
	INSERT INTO {counters} AS c (queue, name, shard, n)
	SELECT $7::text, 'attempts', $5::smallint, count(*) FROM upd HAVING count(*) > 0
	{upsert}
), started AS (
	SELECT j.climit, j.ckey, j.run_at, l.rate_per, l.rate_n, l.rate_burst, rt.tat
	FROM upd u JOIN {jobs} j ON j.id = u.id JOIN {limits} l ON l.name = j.climit AND l.rate_n > 0
	LEFT JOIN {rates} rt ON rt.name = j.climit AND rt.key = j.ckey
), thr AS (
	UPDATE {limits} l SET throttled = l.throttled + x.n FROM (
		SELECT climit, count(*) AS n FROM started
		WHERE (extract(epoch FROM run_at) * 1000000)::bigint < tat - (rate_burst - 1) * ((rate_per + rate_n - 1) / rate_n)
		GROUP BY climit) x
	WHERE l.name = x.climit
), mv AS (
	INSERT INTO {rates} AS x (name, key, tat)
	SELECT climit, ckey, $6 + count(*) * ((rate_per + rate_n - 1) / rate_n) FROM started
	GROUP BY climit, ckey, rate_per, rate_n ORDER BY climit, ckey
	ON CONFLICT (name, key) DO UPDATE SET tat = GREATEST(x.tat, $6) + (excluded.tat - $6)
)
SELECT * FROM upd`

// ratePruneSQL deletes the rate rows whose TAT and hold are past ($1):
// such a row says no more than no row.
const ratePruneSQL = `DELETE FROM {rates} WHERE tat <= $1 AND held_until <= $1`

// ratePruneEvery is how many limited leases of a process pass between
// two prunings of limit_rates (a scan of the groups that started jobs
// lately).
const ratePruneEvery = 1000

// slotPruneEvery is how many takes of limit slots pass between two
// prunings of every ended slot (a scan of limit_slots, which holds the
// slots held and those whose holders died holding them). A variable for
// the tests.
var slotPruneEvery int64 = 1000

// noCap is the free slots of a limit with max_running 0 (a rate only):
// more than any fetch leases.
const noCap = "1000000000"

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
// the jobs $1; limitCreateSQL creates one limit with its settings if it
// does not exist; limitChangeSQL sets one limit's settings.
const (
	limitEnsureSQL = `INSERT INTO {limits} (name, max_running, rate_n, rate_per, rate_burst, hold_retry_after, updated_at)
	SELECT name, max, rn, rp, rb, hold, $3 FROM unnest($1::text[], $2::int[], $4::int[], $5::bigint[], $6::int[], $7::bool[]) AS t(name, max, rn, rp, rb, hold)
	ORDER BY name
	ON CONFLICT (name) DO NOTHING`
	limitJobsSQL   = `UPDATE {jobs} j SET climit = t.name, ckey = t.key FROM unnest($1::bigint[], $2::text[], $3::text[]) AS t(id, name, key) WHERE j.id = t.id`
	limitCreateSQL = `INSERT INTO {limits} (name, max_running, rate_n, rate_per, rate_burst, hold_retry_after, updated_at)
	VALUES ($1, $2, $3, $4, $5, $6, $7)
	ON CONFLICT (name) DO NOTHING`
	limitChangeSQL = `INSERT INTO {limits} (name, max_running, rate_n, rate_per, rate_burst, hold_retry_after, updated_at)
	VALUES ($1, $2, $3, $4, $5, $6, $7)
	ON CONFLICT (name) DO UPDATE SET max_running = excluded.max_running, rate_n = excluded.rate_n, rate_per = excluded.rate_per,
		rate_burst = excluded.rate_burst, hold_retry_after = excluded.hold_retry_after, updated_at = excluded.updated_at`
)

// limitListSQL reads the limits ($2: only that one, unless empty) and
// their use at $1 ($3 in unix microseconds); limitHoldsSQL the groups
// of those that a Retry-After holds then, the latest hold first.
const limitListSQL = `SELECT l.name, l.max_running, l.rate_n, l.rate_per, l.rate_burst, l.throttled, l.updated_at,
	coalesce(g.in_use, 0), coalesce(g.busiest, 0), coalesce(g.groups, 0), coalesce(w.n, 0), l.hold_retry_after,
	(SELECT count(*) FROM {rates} rt WHERE rt.name = l.name AND rt.held_until > $3)
FROM {limits} l
LEFT JOIN (SELECT climit, sum(n)::bigint AS in_use, max(n) AS busiest, count(*) AS groups FROM (
	SELECT climit, ckey, count(*) AS n FROM {jobs} WHERE state = 'running' AND climit IS NOT NULL GROUP BY climit, ckey) x
	GROUP BY climit) g ON g.climit = l.name
LEFT JOIN (SELECT climit, count(*) AS n FROM {jobs} WHERE state IN ('pending', 'scheduled') AND climit IS NOT NULL AND run_at <= $1
	GROUP BY climit) w ON w.climit = l.name
WHERE $2::text = '' OR l.name = $2::text
ORDER BY l.name`

const limitHoldsSQL = `SELECT name, key, held_until FROM {rates} WHERE held_until > $1 AND ($2::text = '' OR name = $2::text)
ORDER BY name, held_until DESC, key`

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
	// rateAt, when not zero, is when a job a rate held can start next:
	// the selection runs again from then.
	rateAt time.Time
	// slotWait is whether a due job waited on a full group's slot then.
	slotWait bool
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
// slot (and their rate allows), up to p.Limit, when the queue may have
// some (see limitHints), and sets *p.NextStart.
func (s *Store) fetchLimited(ctx context.Context, p store.FetchParams, dueBy time.Time) ([]*store.Job, error) {
	if p.NextStart != nil {
		*p.NextStart = time.Time{}
	}
	if p.SlotWait != nil {
		*p.SlotWait = false
	}
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
		if gen == idle.gen && dueBy.Before(idle.nextDue) && (idle.rateAt.IsZero() || p.Now.Before(idle.rateAt)) {
			if p.NextStart != nil {
				*p.NextStart = idle.rateAt
			}
			if p.SlotWait != nil {
				*p.SlotWait = idle.slotWait
			}
			return nil, nil // nothing can start since the last selection
		}
	}
	var jobs []*store.Job
	var nextStart time.Time
	var slotWait bool
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		jobs, nextStart, slotWait = nil, time.Time{}, false
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, s.limitLockKey()); err != nil {
			return err
		}
		// The count before the selection: a change after it is seen by
		// the next fetch.
		var gen int64
		if err := tx.QueryRow(ctx, s.sql.limitGen).Scan(&gen); err != nil {
			return err
		}
		leaseNow := store.LeaseNow(&p)
		now := leaseNow.UnixMicro()
		var ids []int64
		var prios []int32
		var hint *int64
		var sw *bool
		if err := tx.QueryRow(ctx, s.sql.limitedSelect, p.Queue, ts(dueBy), p.Limit, now, ts(leaseNow)).Scan(&ids, &hint, &prios, &sw); err != nil {
			return err
		}
		slotWait = sw != nil && *sw
		if hint != nil {
			nextStart = time.UnixMicro(*hint).UTC()
		}
		selected := len(ids) > 0
		if selected {
			// No limited job goes before an unlimited one of a higher
			// priority: lease only those in the fetch's first p.Limit.
			var up []int32
			if err := tx.QueryRow(ctx, s.sql.unlimitedAbove, p.Queue, ts(dueBy), p.Limit, prios[len(prios)-1]).Scan(&up); err != nil {
				return err
			}
			lp, uq := make([]int, len(prios)), make([]int, len(up))
			for i, v := range prios {
				lp[i] = int(v)
			}
			for i, v := range up {
				uq[i] = int(v)
			}
			ids = ids[:store.LimitedFirst(lp, uq, p.Limit)]
		}
		if len(ids) > 0 {
			rows, err := tx.Query(ctx, s.sql.limitedLease, ids, ts(leaseNow), ts(p.LeaseUntil), cleanText(p.Worker), shard(), now, p.Queue)
			if err != nil {
				return err
			}
			if jobs, err = collect(rows, false, s.payloads); err != nil {
				return err
			}
			if s.ratePrunes.Add(1)%ratePruneEvery == 0 {
				if _, err := tx.Exec(ctx, s.sql.ratePrune, now); err != nil {
					return err
				}
			}
		}
		if len(jobs) > 0 || selected {
			h.mu.Lock()
			h.idle = nil
			h.mu.Unlock()
			return nil
		}
		var next *time.Time
		if err := tx.QueryRow(ctx, s.sql.limitNextDue, p.Queue, ts(dueBy)).Scan(&next); err != nil {
			return err
		}
		m := &idleMark{gen: gen, nextDue: time.Unix(1<<62, 0), rateAt: nextStart, slotWait: slotWait}
		if next != nil {
			m.nextDue = *next
		}
		h.mu.Lock()
		h.idle = m
		h.mu.Unlock()
		// Nothing leased: are there still due limited jobs (waiting on
		// a slot or a rate), or none, so that the next fetches skip this
		// path? A queue with limited jobs due later keeps the path: the
		// idle mark skips its selection until the next comes due, which
		// then starts at its due time, not at the next probe.
		if next != nil {
			return nil
		}
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
	if err == nil && p.NextStart != nil {
		*p.NextStart = nextStart
	}
	if err == nil && p.SlotWait != nil {
		*p.SlotWait = slotWait
	}
	return jobs, err
}

// hasLimits reports whether some job is under a limit or fair: such a
// batch is inserted in a transaction of its own, with its limits and
// fair keys.
func hasLimits(jobs []store.NewJob) bool {
	for i := range jobs {
		if jobs[i].Limit != "" || jobs[i].Fair {
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
	s.noteEnqueued(len(jobs))
	return out, nil
}

// setLimits puts the jobs just inserted (out[i] not Existing) under the
// limits their NewJob names, in the insert's transaction, and gives each
// limit named its max if it has none yet.
func (s *Store) setLimits(ctx context.Context, q querier, jobs []store.NewJob, out []*store.Job, now time.Time) error {
	if err := s.setFair(ctx, q, jobs, out); err != nil {
		return err
	}
	var ids []int64
	var names, keys []string
	var limNames []string
	var limMax, limRateN, limBurst []int32
	var limPer []int64
	var limHold []bool
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
			limRateN, limPer, limBurst = append(limRateN, int32(nj.LimitRate.N)), append(limPer, nj.LimitRate.Per.Microseconds()), append(limBurst, int32(nj.LimitRate.Burst))
			limHold = append(limHold, nj.LimitHold)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	if _, err := q.Exec(ctx, s.sql.limitEnsure, limNames, limMax, ts(now), limRateN, limPer, limBurst, limHold); err != nil {
		return fmt.Errorf("limits: %w", err)
	}
	if _, err := q.Exec(ctx, s.sql.limitJobs, ids, names, keys); err != nil {
		return fmt.Errorf("limits: %w", err)
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
		return store.LimitState{}, s.fail(op, err)
	}
	if len(ls) != 1 {
		return store.LimitState{}, fmt.Errorf("postgres: %s: %q not read back", op, name)
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

// ChangeLimit implements store.Limits: in one transaction, under the
// limited fetches' advisory lock.
func (s *Store) ChangeLimit(ctx context.Context, name string, ch store.LimitChange, now time.Time) (store.LimitState, error) {
	return s.changeLimit(ctx, "change limit", name, ch, now)
}

// changeLimit applies ch to the limit named name in one transaction
// (op names the call in errors). It runs under the limited fetches'
// lock: no fetch reads the old rate in its selection and the new one in
// its lease, the groups' rate state moves only under it, and a
// concurrent change cannot go between the check that the limit keeps a
// max or a rate and the change.
func (s *Store) changeLimit(ctx context.Context, op, name string, ch store.LimitChange, now time.Time) (store.LimitState, error) {
	if err := s.check(); err != nil {
		return store.LimitState{}, err
	}
	if err := store.CheckLimitChange(name, ch); err != nil {
		return store.LimitState{}, fmt.Errorf("postgres: %s: %w", op, err)
	}
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, s.limitLockKey()); err != nil {
			return err
		}
		// An enqueue creates a missing limit without the lock (its
		// INSERT ... ON CONFLICT DO NOTHING): a limit read as missing is
		// created only if it still is, else read again, locked, and the
		// change applied to what the enqueue created.
		var set store.LimitSettings
		for {
			var old store.LimitSettings
			var lmax, rn, burst int32
			var per int64
			exists := true
			err := tx.QueryRow(ctx, `SELECT max_running, rate_n, rate_per, rate_burst, hold_retry_after FROM `+s.schema+`.conc_limits WHERE name = $1 FOR UPDATE`, name).
				Scan(&lmax, &rn, &per, &burst, &old.Hold)
			switch {
			case errors.Is(err, pgx.ErrNoRows):
				exists = false
			case err != nil:
				return err
			}
			old.Max, old.Rate = int(lmax), store.LimitRate{N: int(rn), Per: time.Duration(per) * time.Microsecond, Burst: int(burst)}
			set, err = ch.Apply(exists, old)
			if errors.Is(err, store.ErrNotFound) {
				return fmt.Errorf("limit %q: %w", name, err)
			}
			if err != nil {
				return err
			}
			if exists {
				if _, err := tx.Exec(ctx, s.sql.limitChange, name, set.Max, set.Rate.N, set.Rate.Per.Microseconds(), set.Rate.Burst, set.Hold, ts(now)); err != nil {
					return err
				}
				break
			}
			tag, err := tx.Exec(ctx, s.sql.limitCreate, name, set.Max, set.Rate.N, set.Rate.Per.Microseconds(), set.Rate.Burst, set.Hold, ts(now))
			if err != nil {
				return err
			}
			if tag.RowsAffected() == 1 {
				break
			}
		}
		if ch.Rate != nil {
			// The groups' rate state under the new rate: no tat later
			// than now + Burst·T, as if each group had just used its whole
			// burst at the new rate (raising a rate takes effect at once,
			// lowering one holds a group at most one new interval); no
			// rate, no rate state (the rows keep their holds: the pruning
			// deletes them after).
			if set.Rate.N == 0 {
				if _, err := tx.Exec(ctx, `UPDATE `+s.schema+`.limit_rates SET tat = 0 WHERE name = $1`, name); err != nil {
					return err
				}
			} else {
				bound := now.UnixMicro() + int64(set.Rate.Burst)*set.Rate.Interval().Microseconds()
				if _, err := tx.Exec(ctx, `UPDATE `+s.schema+`.limit_rates SET tat = $1 WHERE tat > $1 AND name = $2`, bound, name); err != nil {
					return err
				}
			}
		}
		if ch.Hold != nil && !*ch.Hold {
			if _, err := tx.Exec(ctx, `UPDATE `+s.schema+`.limit_rates SET held_until = 0 WHERE name = $1 AND held_until > 0`, name); err != nil {
				return err
			}
		}
		return nil
	})
	if errors.Is(err, store.ErrNoCapNoRate) || errors.Is(err, store.ErrNotFound) {
		return store.LimitState{}, fmt.Errorf("postgres: %s: %w", op, err)
	}
	if err != nil {
		return store.LimitState{}, s.fail(op, err)
	}
	return s.limitBack(ctx, now, name, op)
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
	rows, err := s.pool.Query(ctx, s.sql.limitList, ts(now), name, now.UnixMicro())
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.LimitState
	for rows.Next() {
		var l store.LimitState
		var r store.LimitRate
		var per int64
		if err := rows.Scan(&l.Name, &l.Max, &r.N, &per, &r.Burst, &l.Throttled, &l.UpdatedAt, &l.InUse, &l.Busiest, &l.Groups, &l.Waiting,
			&l.HoldOnRetryAfter, &l.HeldGroups); err != nil {
			return nil, err
		}
		if r.N > 0 {
			r.Per = time.Duration(per) * time.Microsecond
			l.Rate = &r
		}
		l.UpdatedAt = l.UpdatedAt.UTC()
		out = append(out, l)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows.Close()
	return out, s.limitHolds(ctx, out, now, name)
}

// limitHolds fills the Holds of the limits ls (only the one named name,
// if not empty) that a Retry-After holds at now: those whose hold ends
// last, store.MaxLimitHolds at most each.
func (s *Store) limitHolds(ctx context.Context, ls []store.LimitState, now time.Time, name string) error {
	held := map[string]*store.LimitState{}
	for i := range ls {
		if ls[i].HeldGroups > 0 {
			held[ls[i].Name] = &ls[i]
		}
	}
	if len(held) == 0 {
		return nil
	}
	rows, err := s.pool.Query(ctx, s.sql.limitHolds, now.UnixMicro(), name)
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
			l.Holds = append(l.Holds, store.LimitHold{Key: k, Until: time.UnixMicro(until).UTC()})
		}
	}
	return rows.Err()
}

// TakeLimitStarts implements store.Limits: under the limited fetches'
// advisory lock, so the group's tat moves in step with their leases.
func (s *Store) TakeLimitStarts(ctx context.Context, name, key string, r store.LimitRate, n int, clock func() time.Time) (int, time.Time, error) {
	if err := s.check(); err != nil {
		return 0, time.Time{}, err
	}
	if err := store.CheckTakeStarts(name, key, r, n); err != nil {
		return 0, time.Time{}, fmt.Errorf("postgres: take limit starts: %w", err)
	}
	var took int
	var next time.Time
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, s.limitLockKey()); err != nil {
			return err
		}
		rate := r
		var sn, sper, sburst int64
		err := tx.QueryRow(ctx, `SELECT rate_n, rate_per, rate_burst FROM `+s.schema+`.conc_limits WHERE name = $1`, name).Scan(&sn, &sper, &sburst)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return err
		case sn > 0:
			rate = store.LimitRate{N: int(sn), Per: time.Duration(sper) * time.Microsecond, Burst: int(sburst)}
		}
		var tat, heldUntil time.Time
		var t, h int64
		err = tx.QueryRow(ctx, `SELECT tat, held_until FROM `+s.schema+`.limit_rates WHERE name = $1 AND key = $2`, name, key).Scan(&t, &h)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return err
		default:
			tat, heldUntil = time.UnixMicro(t), time.UnixMicro(h)
		}
		var newTat time.Time
		took, newTat, next = rate.TakeHeld(tat, heldUntil, clock(), n)
		if took == 0 {
			return nil
		}
		_, err = tx.Exec(ctx, `INSERT INTO `+s.schema+`.limit_rates (name, key, tat) VALUES ($1, $2, $3)
			ON CONFLICT (name, key) DO UPDATE SET tat = excluded.tat`, name, key, newTat.UnixMicro())
		return err
	})
	if err != nil {
		return 0, time.Time{}, s.fail("take limit starts", err)
	}
	return took, next, nil
}

// slotLockKey is the advisory lock key of the takes of one group's slots.
func (s *Store) slotLockKey(name, key string) int64 {
	h := fnv.New64a()
	h.Write([]byte("redrive slots " + s.schema + "\x00" + name + "\x00" + key))
	return int64(h.Sum64())
}

// TakeLimitSlot implements store.Limits: under the group's advisory lock
// (transaction-scoped), so two takes of a group never count its slots at
// once.
func (s *Store) TakeLimitSlot(ctx context.Context, name, key string, max int, holder string, now, until time.Time) (int64, error) {
	if err := s.check(); err != nil {
		return 0, err
	}
	if err := store.CheckTakeSlot(name, key, max, holder, now, until); err != nil {
		return 0, fmt.Errorf("postgres: take limit slot: %w", err)
	}
	var token int64
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		token = 0
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, s.slotLockKey(name, key)); err != nil {
			return err
		}
		var stored int64
		err := tx.QueryRow(ctx, `SELECT max_running FROM `+s.schema+`.conc_limits WHERE name = $1`, name).Scan(&stored)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return err
		case stored > 0:
			max = int(stored)
		}
		// The ended leases of the group go: they hold nothing.
		if _, err := tx.Exec(ctx, `DELETE FROM `+s.schema+`.limit_slots WHERE name = $1 AND key = $2 AND until <= $3`,
			name, key, now.UnixMicro()); err != nil {
			return err
		}
		// Every slotPruneEvery takes, those of every group go too: a
		// holder killed with a slot of a key never taken again left its
		// row. A row of another group whose lease ended holds nothing
		// either, so its group's lock is not needed to delete it.
		if s.slotTakes.Add(1)%slotPruneEvery == 0 {
			if _, err := tx.Exec(ctx, `DELETE FROM `+s.schema+`.limit_slots WHERE until <= $1`, now.UnixMicro()); err != nil {
				return err
			}
		}
		var held int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM `+s.schema+`.limit_slots WHERE name = $1 AND key = $2`,
			name, key).Scan(&held); err != nil {
			return err
		}
		if held >= max {
			return nil
		}
		return tx.QueryRow(ctx, `INSERT INTO `+s.schema+`.limit_slots (name, key, holder, until) VALUES ($1, $2, $3, $4) RETURNING token`,
			name, key, holder, until.UnixMicro()).Scan(&token)
	})
	if err != nil {
		return 0, s.fail("take limit slot", err)
	}
	return token, nil
}

// RenewLimitSlots implements store.Limits: one statement, which locks the
// rows it renews, so a renewal and a take of the same slot (which
// deletes it once ended) are ordered.
func (s *Store) RenewLimitSlots(ctx context.Context, tokens []int64, now, until time.Time) ([]int64, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if err := store.CheckRenewSlots(tokens, now, until); err != nil {
		return nil, fmt.Errorf("postgres: renew limit slots: %w", err)
	}
	if len(tokens) == 0 {
		return nil, nil
	}
	rows, err := s.pool.Query(ctx, `UPDATE `+s.schema+`.limit_slots SET until = $1 WHERE until > $2 AND token = ANY($3) RETURNING token`,
		until.UnixMicro(), now.UnixMicro(), tokens)
	if err != nil {
		return nil, s.fail("renew limit slots", err)
	}
	renewed, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, s.fail("renew limit slots", err)
	}
	got := make(map[int64]bool, len(renewed))
	for _, t := range renewed {
		got[t] = true
	}
	var lost []int64
	for _, t := range tokens {
		if !got[t] {
			lost = append(lost, t)
		}
	}
	return lost, nil
}

// ReleaseLimitSlot implements store.Limits.
func (s *Store) ReleaseLimitSlot(ctx context.Context, token int64, now time.Time) (bool, error) {
	if err := s.check(); err != nil {
		return false, err
	}
	var until int64
	err := s.pool.QueryRow(ctx, `DELETE FROM `+s.schema+`.limit_slots WHERE token = $1 RETURNING until`, token).Scan(&until)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return false, nil
	case err != nil:
		return false, s.fail("release limit slot", err)
	}
	return until > now.UnixMicro(), nil
}
