package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/redrivehq/redrive/store"
)

// Fair shares (store/fairshare.go): a fair job has its key in fkey and, while
// it waits without a limit, is in jobs_fair_due (queue, priority, fkey,
// run_at, id) rather than jobs_ready, and in jobs_fair_first (queue,
// run_at). A fetch of a queue with fair jobs runs a round robin over the
// keys of each priority, highest first, with the priority's due jobs
// without a fair key taking a turn as one more key (store.FairLevel): a
// key is one probe for the next key, and one statement that leases up to
// its weight of its due jobs
// (FOR UPDATE SKIP LOCKED: two processes' round robins never lease one
// job twice), all in one transaction, so a fetch commits once. No shared
// state is written but the jobs and the attempts counter.
//
// Whether a queue has fair jobs is known without a round trip when the
// process is configured fair for it (FetchParams.FairWeights not nil) or
// enqueued fair jobs to it; otherwise a fetch asks jobs_fair_first at most
// once a second per queue (store.FairHints), so that a queue without fair
// jobs pays a probe a second, not one per fetch.

// fairWaiting is the condition of the two fair indexes.
const fairWaiting = `state IN ('pending', 'scheduled') AND climit IS NULL AND fkey IS NOT NULL`

type fairStatements struct {
	set, probe, levels, unkeyed, first, next, take, takeUnkeyed string
}

func renderFair(q func(string) string) fairStatements {
	return fairStatements{
		set:    q(`UPDATE {jobs} j SET fkey = t.key FROM unnest($1::bigint[], $2::text[]) AS t(id, key) WHERE j.id = t.id`),
		probe:  q(`SELECT EXISTS (SELECT 1 FROM {jobs} WHERE ` + fairWaiting + ` AND queue = $1::text)`),
		levels: q(`SELECT coalesce(array_agg(p), '{}') FROM {schema}.job_fair_priorities($1::text) AS pr(p)`),
		// unkeyed: the priorities with a due job without a limit or a
		// fair key, highest first.
		unkeyed: q(`SELECT coalesce(array_agg(pr.p), '{}') FROM {schema}.job_priorities($1::text) AS pr(p) WHERE EXISTS (SELECT 1 FROM {jobs}
	WHERE state IN ('pending', 'scheduled') AND climit IS NULL AND fkey IS NULL AND queue = $1::text AND priority = pr.p AND run_at <= $2)`),
		first: q(`SELECT fkey FROM {jobs} WHERE ` + fairWaiting + ` AND queue = $1::text AND priority = $2 ORDER BY fkey LIMIT 1`),
		next:  q(`SELECT fkey FROM {jobs} WHERE ` + fairWaiting + ` AND queue = $1::text AND priority = $2 AND fkey > $3 ORDER BY fkey LIMIT 1`),
		// take leases up to $5 due jobs of key $3 at priority $2, oldest
		// due first, as the fetch statement does (its attempts are counted
		// once for the fetch's transaction).
		take: q(`WITH picked AS (
	SELECT id FROM {jobs} WHERE ` + fairWaiting + ` AND queue = $1::text AND priority = $2 AND fkey = $3 AND run_at <= $4
	ORDER BY run_at, id LIMIT $5
	FOR UPDATE SKIP LOCKED
)
UPDATE {jobs} j SET state = 'running', attempt = j.attempt + 1, lease = j.lease + 1, attempted_at = GREATEST($6, j.run_at), lease_until = $7, worker = $8,
	progress_done = NULL, progress_total = NULL, progress_at = NULL
FROM picked WHERE j.id = picked.id
RETURNING {jcols}`),
		// takeUnkeyed is take for the due jobs of priority $2 without a
		// fair key: up to $4 due by $3.
		takeUnkeyed: q(`WITH picked AS (
	SELECT id FROM {jobs} WHERE state IN ('pending', 'scheduled') AND climit IS NULL AND fkey IS NULL AND queue = $1::text AND priority = $2 AND run_at <= $3
	ORDER BY run_at, id LIMIT $4
	FOR UPDATE SKIP LOCKED
)
UPDATE {jobs} j SET state = 'running', attempt = j.attempt + 1, lease = j.lease + 1, attempted_at = GREATEST($5, j.run_at), lease_until = $6, worker = $7,
	progress_done = NULL, progress_total = NULL, progress_at = NULL
FROM picked WHERE j.id = picked.id
RETURNING {jcols}`),
	}
}

// setFair gives the jobs just inserted (out[i] not Existing) their fair
// keys, in the insert's transaction, so that no fetch sees a fair job
// without its key.
func (s *Store) setFair(ctx context.Context, q querier, jobs []store.NewJob, out []*store.Job) error {
	var ids []int64
	var keys []string
	for i := range jobs {
		if !jobs[i].Fair || out[i] == nil || out[i].Existing {
			continue
		}
		ids, keys = append(ids, out[i].ID), append(keys, jobs[i].FairKey)
		s.fairHints.Mark(jobs[i].Queue)
	}
	if len(ids) == 0 {
		return nil
	}
	if _, err := q.Exec(ctx, s.sql.fair.set, ids, keys); err != nil {
		return err
	}
	return nil
}

// fairQueue reports whether a fetch with p should run the fair selection.
func (s *Store) fairQueue(ctx context.Context, p *store.FetchParams) (bool, error) {
	fair, probe := s.fairHints.Check(p)
	if !probe {
		return fair, nil
	}
	var any bool
	if err := s.pool.QueryRow(ctx, s.sql.fair.probe, p.Queue).Scan(&any); err != nil {
		return false, err
	}
	if any {
		s.fairHints.Mark(p.Queue)
	}
	return any, nil
}

// fairFetch is the fair part of one fetch.
type fairFetch struct {
	s       *Store
	p       *store.FetchParams
	dueBy   time.Time
	levels  []int16 // the priorities with waiting fair jobs, highest first
	unkeyed []int16 // the priorities with due jobs without a fair key, highest first
}

// newFairFetch returns the fair part of a fetch, nil when the queue has
// no waiting fair job.
func (s *Store) newFairFetch(ctx context.Context, p *store.FetchParams, dueBy time.Time) (*fairFetch, error) {
	ok, err := s.fairQueue(ctx, p)
	if err != nil || !ok {
		return nil, err
	}
	f := &fairFetch{s: s, p: p, dueBy: dueBy}
	if err := s.pool.QueryRow(ctx, s.sql.fair.levels, p.Queue).Scan(&f.levels); err != nil {
		return nil, err
	}
	if len(f.levels) == 0 {
		return nil, nil
	}
	if err := s.pool.QueryRow(ctx, s.sql.fair.unkeyed, p.Queue, ts(dueBy)).Scan(&f.unkeyed); err != nil {
		return nil, err
	}
	return f, nil
}

// run leases up to want due jobs of the queue without a limit, priority
// by priority, highest first: a priority's fair keys by round robin, its
// jobs without a fair key taking turns with them as one more key
// (store.FairLevel); a priority without fair jobs oldest due first. All
// in one transaction: after an error nothing is leased, and the cursors
// move only once it committed.
func (f *fairFetch) run(ctx context.Context, want int) ([]*store.Job, error) {
	// One transaction: one commit (one WAL flush) a fetch, not one a
	// key; a key's later turns in it do not see the jobs it leased
	// before (they are running).
	type cursor struct {
		prio int16
		cur  store.FairCursor
	}
	var out []*store.Job
	var moved []cursor
	err := f.s.retry(ctx, func() error {
		out, moved = nil, nil
		levels, unkeyed := f.levels, f.unkeyed
		return pgx.BeginTxFunc(ctx, f.s.pool, readCommitted, func(tx pgx.Tx) error {
			lease := func(prio int16, key *string, n int) (int, error) {
				stmt, args := f.s.sql.fair.takeUnkeyed, []any{f.p.Queue, prio, ts(f.dueBy), n}
				if key != nil {
					stmt, args = f.s.sql.fair.take, []any{f.p.Queue, prio, *key, ts(f.dueBy), n}
				}
				rows, err := tx.Query(ctx, stmt, append(args, ts(f.p.Now), ts(f.p.LeaseUntil), cleanText(f.p.Worker))...)
				if err != nil {
					return 0, err
				}
				jobs, err := collect(rows, false)
				if err != nil {
					return 0, err
				}
				out = append(out, jobs...)
				return len(jobs), nil
			}
			for len(out) < want && (len(levels) > 0 || len(unkeyed) > 0) {
				if len(unkeyed) > 0 && (len(levels) == 0 || unkeyed[0] > levels[0]) {
					// A priority of jobs without a fair key only.
					if _, err := lease(unkeyed[0], nil, want-len(out)); err != nil {
						return err
					}
					unkeyed = unkeyed[1:]
					continue
				}
				prio := levels[0]
				levels = levels[1:]
				mixed := len(unkeyed) > 0 && unkeyed[0] == prio
				if mixed {
					unkeyed = unkeyed[1:]
				}
				next := func(after string, first bool) (string, bool, error) {
					var k string
					var err error
					if first {
						err = tx.QueryRow(ctx, f.s.sql.fair.first, f.p.Queue, prio).Scan(&k)
					} else {
						err = tx.QueryRow(ctx, f.s.sql.fair.next, f.p.Queue, prio, after).Scan(&k)
					}
					if errors.Is(err, pgx.ErrNoRows) {
						return "", false, nil
					}
					return k, err == nil, err
				}
				take := func(key string, n int) (int, error) {
					if key == store.FairUnkeyed {
						return lease(prio, nil, n)
					}
					return lease(prio, &key, n)
				}
				cur, _, err := store.FairLevel(f.s.fairCursors.Get(f.p.Queue, int64(prio)), f.p.FairWeights, want-len(out), mixed, next, take)
				if err != nil {
					return err
				}
				moved = append(moved, cursor{prio, cur})
			}
			if len(out) == 0 {
				return nil
			}
			_, err := tx.Exec(ctx, f.s.sql.counterOne, f.p.Queue, "attempts", shard(), int64(len(out)))
			return err
		})
	})
	if err != nil {
		return nil, err
	}
	for _, m := range moved {
		f.s.fairCursors.Put(f.p.Queue, int64(m.prio), m.cur)
	}
	return out, nil
}

// JobFairKey implements store.FairUse.
func (s *Store) JobFairKey(ctx context.Context, id int64) (string, bool, error) {
	if err := s.check(); err != nil {
		return "", false, err
	}
	var k *string
	err := s.pool.QueryRow(ctx, `SELECT fkey FROM `+s.sql.jobs+` WHERE id = $1`, id).Scan(&k)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, s.fail("job fair key", err)
	}
	if k == nil {
		return "", false, nil
	}
	return *k, true, nil
}
