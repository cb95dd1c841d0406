package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// OldestDue implements store.Store with one statement, in which each
// queue is one probe of the jobs_ready index (queue, priority, run_at,
// id) per distinct priority of its waiting jobs without a limit
// (job_priorities), and one more for each to find the priorities; and
// the same of jobs_limit_due for its jobs under a limit
// (job_limit_priorities); and one probe of jobs_fair_first for its fair
// jobs.
func (s *Store) OldestDue(ctx context.Context, queues []string, now time.Time) (map[string]time.Time, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	out := map[string]time.Time{}
	if len(queues) == 0 {
		return out, nil
	}
	fn := pgx.Identifier{s.schema}.Sanitize()
	rows, err := s.pool.Query(ctx, `SELECT q, least((SELECT min((SELECT run_at FROM `+s.sql.jobs+`
	WHERE state IN ('pending', 'scheduled') AND climit IS NULL AND fkey IS NULL AND queue = q AND priority = p.p AND run_at <= $2
	ORDER BY run_at LIMIT 1)) FROM `+fn+`.job_priorities(q) AS p(p)), (SELECT min((SELECT run_at FROM `+s.sql.jobs+`
	WHERE state IN ('pending', 'scheduled') AND climit IS NOT NULL AND queue = q AND priority = p.p AND run_at <= $2
	ORDER BY run_at LIMIT 1)) FROM `+fn+`.job_limit_priorities(q) AS p(p)), (SELECT run_at FROM `+s.sql.jobs+`
	WHERE `+fairWaiting+` AND queue = q AND run_at <= $2 ORDER BY run_at LIMIT 1))
FROM unnest($1::text[]) AS q`, queues, now)
	if err != nil {
		return nil, s.fail("oldest due", err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var runAt *time.Time
		if err := rows.Scan(&name, &runAt); err != nil {
			return nil, s.fail("oldest due", err)
		}
		if runAt != nil {
			out[name] = runAt.UTC()
		}
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("oldest due", err)
	}
	return out, nil
}
