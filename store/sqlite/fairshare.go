package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redrivehq/redrive/store"
)

// Fair shares (store/fairshare.go): a fair job has its key in fkey and,
// while it waits without a limit, is in jobs_fair_due (queue, priority,
// fkey, run_at, id) rather than jobs_ready, and in jobs_fair_first
// (queue, run_at). A fetch of a queue with fair jobs (store.FairHints:
// the process is configured fair for it, enqueued fair jobs to it, or
// found some by a probe of jobs_fair_first, which a queue without any
// pays once a second) runs a round robin over the keys of each priority,
// highest first, with the priority's due jobs without a fair key taking
// a turn as one more key (store.FairLevel): a key is one probe for the
// next key and one range of its due jobs.

// fairWaiting is the condition of the two fair indexes.
const fairWaiting = `state IN ('pending', 'scheduled') AND climit IS NULL AND fkey IS NOT NULL`

// Statements of the fair fetch, prepared on the writer connection.
var fairSQL = map[string]string{
	"fairAny": `SELECT EXISTS (SELECT 1 FROM jobs INDEXED BY jobs_fair_first WHERE ` + fairWaiting + ` AND queue = ?1)`,
	// fairLevels: the distinct priorities of the queue's waiting fair
	// jobs, highest first, one probe each.
	"fairLevels": `WITH RECURSIVE pr(p) AS (
		SELECT (SELECT priority FROM jobs INDEXED BY jobs_fair_due WHERE ` + fairWaiting + ` AND queue = ?1 ORDER BY priority DESC LIMIT 1)
		UNION ALL
		SELECT (SELECT priority FROM jobs INDEXED BY jobs_fair_due WHERE ` + fairWaiting + ` AND queue = ?1 AND priority < pr.p ORDER BY priority DESC LIMIT 1)
		FROM pr WHERE pr.p IS NOT NULL)
		SELECT json_group_array(p) FROM pr WHERE p IS NOT NULL`,
	"fairFirstKey": `SELECT fkey FROM jobs INDEXED BY jobs_fair_due WHERE ` + fairWaiting + ` AND queue = ?1 AND priority = ?2 ORDER BY fkey LIMIT 1`,
	"fairNextKey":  `SELECT fkey FROM jobs INDEXED BY jobs_fair_due WHERE ` + fairWaiting + ` AND queue = ?1 AND priority = ?2 AND fkey > ?3 ORDER BY fkey LIMIT 1`,
	// fairSelect: up to ?5 due jobs of key ?3 at priority ?2, oldest due
	// first, as fetchSelect returns them.
	"fairSelect": `SELECT json_group_array(id), count(*), count(*) FILTER (WHERE state = 'scheduled') FROM (
		SELECT id, state FROM jobs INDEXED BY jobs_fair_due WHERE ` + fairWaiting + ` AND queue = ?1 AND priority = ?2 AND fkey = ?3 AND run_at <= ?4
		ORDER BY run_at, id LIMIT ?5)`,
	// fairUnkeyed: up to ?4 due jobs without a limit or a fair key at
	// priority ?2, oldest due first (a range of jobs_ready).
	"fairUnkeyed": `SELECT json_group_array(id), count(*), count(*) FILTER (WHERE state = 'scheduled') FROM (
		SELECT id, state FROM jobs WHERE state IN ('pending', 'scheduled') AND climit IS NULL AND fkey IS NULL AND queue = ?1 AND priority = ?2 AND run_at <= ?3
		ORDER BY run_at, id LIMIT ?4)`,
	"fairJob": `UPDATE jobs SET fkey = ? WHERE id = ?`,
}

func init() {
	for name, q := range fairSQL {
		writeSQL[name] = q
	}
}

// fairFirstSQL is the earliest run_at matching cond among queue ?1's
// waiting fair jobs: one probe of jobs_fair_first.
func fairFirstSQL(cond string) string {
	return `SELECT run_at FROM jobs INDEXED BY jobs_fair_first WHERE ` + fairWaiting + ` AND queue = ?1 AND ` + cond + ` ORDER BY run_at LIMIT 1`
}

// setFair gives the jobs just inserted (out[i] not Existing) their fair
// keys, in the insert's transaction, so that no fetch sees a fair job
// without its key.
func (s *Store) setFair(ctx context.Context, tx *sql.Conn, jobs []store.NewJob, out []*store.Job) error {
	for i := range jobs {
		if !jobs[i].Fair || out[i] == nil || out[i].Existing {
			continue
		}
		if _, err := s.stmt(tx, "fairJob").ExecContext(ctx, jobs[i].FairKey, out[i].ID); err != nil {
			return fmt.Errorf("sqlite: enqueue: fair key: %w", err)
		}
		s.fairHints.Mark(jobs[i].Queue)
	}
	return nil
}

// fairFetch is the fair part of one fetch.
type fairFetch struct {
	s      *Store
	ctx    context.Context
	tx     *sql.Conn
	p      *store.FetchParams
	dueBy  int64
	levels []int64 // the fair priorities not served yet, highest first
	top    int64   // the highest priority not served yet with a due job without a fair key
	hasTop bool
}

// newFairFetch returns the fair part of a fetch, nil when the queue has
// no waiting fair job.
func (s *Store) newFairFetch(ctx context.Context, tx *sql.Conn, p *store.FetchParams, dueBy time.Time) (*fairFetch, error) {
	fair, probe := s.fairHints.Check(p)
	if probe {
		if err := s.stmt(tx, "fairAny").QueryRowContext(ctx, p.Queue).Scan(&fair); err != nil {
			return nil, err
		}
		if fair {
			s.fairHints.Mark(p.Queue)
		}
	}
	if !fair {
		return nil, nil
	}
	f := &fairFetch{s: s, ctx: ctx, tx: tx, p: p, dueBy: micros(dueBy)}
	var levels string
	if err := s.stmt(tx, "fairLevels").QueryRowContext(ctx, p.Queue).Scan(&levels); err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(levels), &f.levels); err != nil {
		return nil, err
	}
	if len(f.levels) == 0 {
		return nil, nil // the usual fetch
	}
	if err := f.nextTop(int64(store.MaxPriority + 1)); err != nil {
		return nil, err
	}
	return f, nil
}

// nextTop finds the highest priority below below with a due job without a
// fair key.
func (f *fairFetch) nextTop(below int64) error {
	var top sql.NullInt64
	if err := f.s.stmt(f.tx, "fetchNext").QueryRowContext(f.ctx, f.p.Queue, below, f.dueBy).Scan(&top); err != nil {
		return err
	}
	f.top, f.hasTop = top.Int64, top.Valid
	return nil
}

// run leases the due jobs of the queue without a limit, priority by
// priority, highest first, until the fetch has its limit: a priority's
// fair keys by round robin, its jobs without a fair key taking turns with
// them as one more key (store.FairLevel); a priority without fair jobs as
// the usual fetch does, oldest due first. The cursors it moves are staged
// in the writer's transaction (store.FairCursors.Stage): they take effect
// only if it commits.
func (f *fairFetch) run(n, scheduled *int64, parts *[]string) error {
	limit := int64(f.p.Limit)
	for *n < limit && (len(f.levels) > 0 || f.hasTop) {
		if f.hasTop && (len(f.levels) == 0 || f.top > f.levels[0]) {
			// A priority of jobs without a fair key only.
			if _, err := f.takeUnkeyed(f.top, int(limit-*n), n, scheduled, parts); err != nil {
				return err
			}
			if err := f.nextTop(f.top); err != nil {
				return err
			}
			continue
		}
		prio := f.levels[0]
		f.levels = f.levels[1:]
		unkeyed := f.hasTop && f.top == prio
		next := func(after string, first bool) (string, bool, error) {
			var k string
			var err error
			if first {
				err = f.s.stmt(f.tx, "fairFirstKey").QueryRowContext(f.ctx, f.p.Queue, prio).Scan(&k)
			} else {
				err = f.s.stmt(f.tx, "fairNextKey").QueryRowContext(f.ctx, f.p.Queue, prio, after).Scan(&k)
			}
			if err == sql.ErrNoRows {
				return "", false, nil
			}
			return k, err == nil, err
		}
		take := func(key string, want int) (int, error) {
			if key == store.FairUnkeyed {
				return f.takeUnkeyed(prio, want, n, scheduled, parts)
			}
			var part string
			var k, sch int64
			if err := f.s.stmt(f.tx, "fairSelect").QueryRowContext(f.ctx, f.p.Queue, prio, key, f.dueBy, want).Scan(&part, &k, &sch); err != nil {
				return 0, err
			}
			return f.lease(part, k, sch, n, scheduled, parts)
		}
		cur, _, err := store.FairLevel(f.s.fair.Get(f.p.Queue, prio), f.p.FairWeights, int(limit-*n), unkeyed, next, take)
		if err != nil {
			return err
		}
		f.s.fair.Stage(f.p.Queue, prio, cur)
		if unkeyed {
			if err := f.nextTop(prio); err != nil {
				return err
			}
		}
	}
	return nil
}

// takeUnkeyed leases up to want due jobs without a fair key of priority
// prio, oldest due first.
func (f *fairFetch) takeUnkeyed(prio int64, want int, n, scheduled *int64, parts *[]string) (int, error) {
	var part string
	var k, sch int64
	if err := f.s.stmt(f.tx, "fairUnkeyed").QueryRowContext(f.ctx, f.p.Queue, prio, f.dueBy, want).Scan(&part, &k, &sch); err != nil {
		return 0, err
	}
	return f.lease(part, k, sch, n, scheduled, parts)
}

// lease leases the k jobs of part (a JSON array of ids, sch of them
// scheduled) and counts them in the fetch.
func (f *fairFetch) lease(part string, k, sch int64, n, scheduled *int64, parts *[]string) (int, error) {
	if k == 0 {
		return 0, nil
	}
	if _, err := f.s.stmt(f.tx, "fetchLease").ExecContext(f.ctx, micros(f.p.Now), micros(f.p.LeaseUntil), f.p.Worker, part); err != nil {
		return 0, err
	}
	*parts = append(*parts, strings.TrimSuffix(strings.TrimPrefix(part, "["), "]"))
	*n += k
	*scheduled += sch
	return int(k), nil
}

// JobFairKey implements store.FairUse.
func (s *Store) JobFairKey(ctx context.Context, id int64) (string, bool, error) {
	db, err := s.readDB()
	if err != nil {
		return "", false, fmt.Errorf("sqlite: job fair key: %w", err)
	}
	var k sql.NullString
	err = db.QueryRowContext(ctx, `SELECT fkey FROM jobs WHERE id = ?`, id).Scan(&k)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("sqlite: job fair key: %w", err)
	}
	return k.String, k.Valid, nil
}
