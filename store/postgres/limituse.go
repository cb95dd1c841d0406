package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/redrivehq/redrive/store"
)

// LimitGroups implements store.LimitUse: a read of the running limited
// jobs of the limit (the partial index of running limited jobs).
func (s *Store) LimitGroups(ctx context.Context, name string, n int) ([]store.LimitGroup, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if n < 1 || n > store.MaxLimitGroups {
		return nil, fmt.Errorf("postgres: limit groups: %w: n %d is out of range [1, %d]", store.ErrInvalid, n, store.MaxLimitGroups)
	}
	rows, err := s.pool.Query(ctx, `SELECT ckey, count(*) AS n FROM `+s.sql.jobs+`
		WHERE state = 'running' AND climit IS NOT NULL AND climit = $1
		GROUP BY ckey ORDER BY n DESC, ckey LIMIT $2`, name, n)
	if err != nil {
		return nil, s.fail("limit groups", err)
	}
	defer rows.Close()
	out := []store.LimitGroup{}
	for rows.Next() {
		var g store.LimitGroup
		if err := rows.Scan(&g.Key, &g.Running); err != nil {
			return nil, s.fail("limit groups", err)
		}
		out = append(out, g)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("limit groups", err)
	}
	return out, nil
}

// JobLimit implements store.LimitUse.
func (s *Store) JobLimit(ctx context.Context, id int64) (store.JobLimit, bool, error) {
	if err := s.check(); err != nil {
		return store.JobLimit{}, false, err
	}
	var l store.JobLimit
	var next *int64
	err := s.pool.QueryRow(ctx, `SELECT j.climit, j.ckey, coalesce(l.max_running, 0),
		(SELECT count(*) FROM `+s.sql.jobs+` r
			WHERE r.state = 'running' AND r.climit IS NOT NULL AND r.climit = j.climit AND r.ckey = j.ckey),
		(SELECT GREATEST(CASE WHEN l.rate_n > 0 THEN rt.tat - (l.rate_burst - 1) * ((l.rate_per + l.rate_n - 1) / l.rate_n) ELSE 0 END, rt.held_until)
			FROM `+pgx.Identifier{s.schema}.Sanitize()+`.limit_rates rt WHERE rt.name = j.climit AND rt.key = j.ckey)
		FROM `+s.sql.jobs+` j LEFT JOIN `+pgx.Identifier{s.schema}.Sanitize()+`.conc_limits l ON l.name = j.climit
		WHERE j.id = $1 AND j.climit IS NOT NULL`, id).Scan(&l.Name, &l.Key, &l.Max, &l.Running, &next)
	if errors.Is(err, pgx.ErrNoRows) {
		return store.JobLimit{}, false, nil
	}
	if err != nil {
		return store.JobLimit{}, false, s.fail("job limit", err)
	}
	if next != nil && *next > 0 {
		l.NextStart = time.UnixMicro(*next).UTC()
	}
	return l, true, nil
}
