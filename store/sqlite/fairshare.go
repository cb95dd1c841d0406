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
// highest first: a key is one probe for the next key and one range of
// its due jobs.

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
	top    int64   // the highest priority with a due job without a fair key
	hasTop bool
}

// newFairFetch returns the fair part of a fetch, nil when the queue has
// no due fair job.
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
	var top sql.NullInt64
	if err := s.stmt(tx, "fetchNext").QueryRowContext(ctx, p.Queue, int64(store.MaxPriority+1), f.dueBy).Scan(&top); err != nil {
		return nil, err
	}
	f.top, f.hasTop = top.Int64, top.Valid
	return f, nil
}

// run leases, by round robin, the due fair jobs of the levels at or above
// the highest priority of the unfair due jobs (above true), or of the
// levels left (above false), until the fetch has its limit.
func (f *fairFetch) run(above bool, n, scheduled *int64, parts *[]string) error {
	for len(f.levels) > 0 && *n < int64(f.p.Limit) {
		prio := f.levels[0]
		if above && f.hasTop && prio < f.top {
			return nil
		}
		f.levels = f.levels[1:]
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
			var part string
			var k, sch int64
			if err := f.s.stmt(f.tx, "fairSelect").QueryRowContext(f.ctx, f.p.Queue, prio, key, f.dueBy, want).Scan(&part, &k, &sch); err != nil {
				return 0, err
			}
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
		cur, _, err := store.FairRound(f.s.fair.Get(f.p.Queue, prio), f.p.FairWeights, f.p.Limit-int(*n), next, take)
		if err != nil {
			return err
		}
		f.s.fair.Put(f.p.Queue, prio, cur)
	}
	return nil
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
