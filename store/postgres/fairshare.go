package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/redrivehq/redrive/store"
)

// Fair shares (store/fairshare.go): a fair job has its key in fkey (of
// collation "C": keys compare by bytes, as on SQLite, whatever the
// database's collation) and, while it waits without a limit, is in
// jobs_fair_due (queue, priority, fkey, run_at, id) rather than
// jobs_ready, and in jobs_fair_first (queue, run_at). A fetch of a queue
// with fair jobs runs a round robin over the keys of each priority,
// highest first, with the priority's due jobs without a fair key taking
// a turn as one more key (store.FairLevel). The whole walk is one call
// of job_fair_fetch (migration 0028, a port of store.FairRound): one
// round trip and one commit a fetch, where walking the keys from here
// took two round trips a key visited. In it, a key is one probe of
// jobs_fair_due for the next key, and one statement that leases up to
// its weight of its due jobs (FOR UPDATE SKIP LOCKED: two processes'
// round robins never lease one job twice). The cursors (where this
// process's previous fetch stopped) go in as arguments and come back as
// rows. No shared state is written but the jobs and the attempts
// counter.
//
// Whether a queue has fair jobs is known without a round trip when the
// process is configured fair for it (FetchParams.FairWeights not nil) or
// enqueued fair jobs to it; otherwise a fetch asks jobs_fair_first at most
// once a second per queue (store.FairHints), so that a queue without fair
// jobs pays a probe a second, not one per fetch.

// fairWaiting is the condition of the two fair indexes.
const fairWaiting = `state IN ('pending', 'scheduled') AND climit IS NULL AND fkey IS NOT NULL`

type fairStatements struct {
	set, probe, fetch string
}

func renderFair(q func(string) string) fairStatements {
	return fairStatements{
		set:   q(`UPDATE {jobs} j SET fkey = t.key FROM unnest($1::bigint[], $2::text[]) AS t(id, key) WHERE j.id = t.id`),
		probe: q(`SELECT EXISTS (SELECT 1 FROM {jobs} WHERE ` + fairWaiting + ` AND queue = $1::text)`),
		// fetch is the whole fair fetch (job_fair_fetch, migration 0028):
		// the cursor rows first four columns set, the leased jobs the
		// others.
		fetch: q(`SELECT f.out_prio, f.out_key, f.out_used, f.out_unk, ` + cols("(f.out_job).", false) + `
FROM {schema}.job_fair_fetch($1::text, $2, $3, $4, $5, $6, $7::text[], $8::int[], $9::smallint[], $10::text[], $11::int[], $12::boolean[], $13::smallint) AS f`),
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

// fairFetch leases up to want due jobs of the queue without a limit,
// priority by priority, highest first: a priority's fair keys by round
// robin, its jobs without a fair key taking turns with them as one more
// key (store.FairLevel); a priority without fair jobs oldest due first.
// One call of job_fair_fetch (migration 0028), one statement: after an
// error nothing is leased, and the cursors move only once it committed.
// ok is false when the queue has no fair job to the hints (the caller
// runs the plain fetch).
func (s *Store) fairFetch(ctx context.Context, p *store.FetchParams, dueBy time.Time, want int) (jobs []*store.Job, ok bool, err error) {
	if ok, err := s.fairQueue(ctx, p); err != nil || !ok {
		return nil, false, err
	}
	wkeys := make([]string, 0, len(p.FairWeights))
	wvals := make([]int32, 0, len(p.FairWeights))
	for k, w := range p.FairWeights {
		wkeys, wvals = append(wkeys, k), append(wvals, int32(w))
	}
	// The process's cursors of the queue: every priority's, as the
	// function may visit any.
	var cprios []int16
	var ckeys []*string
	var cused []int32
	var cunk []bool
	for prio, cur := range s.fairCursors.Queue(p.Queue) {
		if !cur.Set {
			continue
		}
		key := &cur.Key
		if cur.Key == store.FairUnkeyed {
			key = nil
		}
		cprios, ckeys, cused, cunk = append(cprios, int16(prio)), append(ckeys, key), append(cused, int32(cur.Used)), append(cunk, key == nil)
	}
	type cursor struct {
		prio int16
		cur  store.FairCursor
	}
	var moved []cursor
	err = s.retry(ctx, func() error {
		jobs, moved = nil, nil
		rows, err := s.pool.Query(ctx, s.sql.fair.fetch, p.Queue, ts(dueBy), ts(p.Now), ts(p.LeaseUntil), cleanText(p.Worker), want,
			wkeys, wvals, cprios, ckeys, cused, cunk, shard())
		if err != nil {
			return err
		}
		defer rows.Close()
		sc := newJobScan(false, s.payloads)
		skip := prefixRow{rows: rows, skip: 4}
		for rows.Next() {
			if rows.RawValues()[0] == nil {
				j, err := sc.scan(skip)
				if err != nil {
					return err
				}
				jobs = append(jobs, j)
				continue
			}
			var prio int16
			var key *string
			var used int32
			var unk bool
			dest := make([]any, 4+len(sc.dest))
			dest[0], dest[1], dest[2], dest[3] = &prio, &key, &used, &unk
			if err := rows.Scan(dest...); err != nil {
				return err
			}
			c := cursor{prio: prio}
			switch {
			case unk:
				c.cur = store.FairCursor{Key: store.FairUnkeyed, Used: int(used), Set: true}
			case key != nil:
				c.cur = store.FairCursor{Key: *key, Used: int(used), Set: true}
			}
			moved = append(moved, c)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, true, err
	}
	for _, m := range moved {
		s.fairCursors.Put(p.Queue, int64(m.prio), m.cur)
	}
	return jobs, true, nil
}

// prefixRow scans a row's columns after its first skip ones.
type prefixRow struct {
	rows pgx.Rows
	skip int
}

// Scan implements pgx.Row.
func (r prefixRow) Scan(dest ...any) error {
	return r.rows.Scan(append(make([]any, r.skip, r.skip+len(dest)), dest...)...)
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
