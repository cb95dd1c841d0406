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
// keys of each priority, highest first: a key is one probe for the next
// key, and one statement that leases up to its weight of its due jobs
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
	set, probe, levels, top, first, next, take string
}

func renderFair(q func(string) string) fairStatements {
	return fairStatements{
		set:    q(`UPDATE {jobs} j SET fkey = t.key FROM unnest($1::bigint[], $2::text[]) AS t(id, key) WHERE j.id = t.id`),
		probe:  q(`SELECT EXISTS (SELECT 1 FROM {jobs} WHERE ` + fairWaiting + ` AND queue = $1::text)`),
		levels: q(`SELECT coalesce(array_agg(p), '{}') FROM {schema}.job_fair_priorities($1::text) AS pr(p)`),
		// top: the highest priority with a due job without a limit or a
		// fair key (NULL: none).
		top: q(`SELECT pr.p FROM {schema}.job_priorities($1::text) AS pr(p) WHERE EXISTS (SELECT 1 FROM {jobs}
	WHERE state IN ('pending', 'scheduled') AND climit IS NULL AND fkey IS NULL AND queue = $1::text AND priority = pr.p AND run_at <= $2) LIMIT 1`),
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
	s      *Store
	p      *store.FetchParams
	dueBy  time.Time
	levels []int16
	top    *int16
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
	err = s.pool.QueryRow(ctx, s.sql.fair.top, p.Queue, ts(dueBy)).Scan(&f.top)
	if errors.Is(err, pgx.ErrNoRows) {
		f.top, err = nil, nil
	}
	if err != nil {
		return nil, err
	}
	return f, nil
}

// run leases, by round robin, the due fair jobs of the levels at or above
// the highest priority of the due jobs without a fair key (above true),
// or of the levels left (above false), until the fetch has want jobs, in
// one transaction: after an error nothing is leased.
func (f *fairFetch) run(ctx context.Context, above bool, want int) ([]*store.Job, error) {
	// One transaction: one commit (one WAL flush) a fetch, not one a
	// key; a key's later turns in it do not see the jobs it leased
	// before (they are running).
	levels := f.levels
	type cursor struct {
		prio int16
		cur  store.FairCursor
	}
	var out []*store.Job
	var moved []cursor
	err := f.s.retry(ctx, func() error {
		out, moved, f.levels = nil, nil, levels
		return pgx.BeginTxFunc(ctx, f.s.pool, readCommitted, func(tx pgx.Tx) error {
			for len(f.levels) > 0 && len(out) < want {
				prio := f.levels[0]
				if above && f.top != nil && prio < *f.top {
					break
				}
				f.levels = f.levels[1:]
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
					rows, err := tx.Query(ctx, f.s.sql.fair.take, f.p.Queue, prio, key, ts(f.dueBy), n,
						ts(f.p.Now), ts(f.p.LeaseUntil), cleanText(f.p.Worker))
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
				cur, _, err := store.FairRound(f.s.fairCursors.Get(f.p.Queue, int64(prio)), f.p.FairWeights, want-len(out), next, take)
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
