package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/redrivehq/redrive/store"
)

// LimitGroups implements store.LimitUse: a read of jobs_limit_running on
// the read pool, one entry per running job of the limit.
func (s *Store) LimitGroups(ctx context.Context, name string, n int) ([]store.LimitGroup, error) {
	if n < 1 || n > store.MaxLimitGroups {
		return nil, fmt.Errorf("sqlite: limit groups: %w: n %d is out of range [1, %d]", store.ErrInvalid, n, store.MaxLimitGroups)
	}
	db, err := s.readDB()
	if err != nil {
		return nil, fmt.Errorf("sqlite: limit groups: %w", err)
	}
	rows, err := db.QueryContext(ctx, `SELECT ckey, count(*) AS n FROM jobs INDEXED BY jobs_limit_running
		WHERE state = 'running' AND climit IS NOT NULL AND climit = ?
		GROUP BY ckey ORDER BY n DESC, ckey LIMIT ?`, name, n)
	if err != nil {
		return nil, fmt.Errorf("sqlite: limit groups: %w", err)
	}
	defer rows.Close()
	out := []store.LimitGroup{}
	for rows.Next() {
		var g store.LimitGroup
		if err := rows.Scan(&g.Key, &g.Running); err != nil {
			return nil, fmt.Errorf("sqlite: limit groups: %w", err)
		}
		out = append(out, g)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: limit groups: %w", err)
	}
	return out, nil
}

// JobLimit implements store.LimitUse.
func (s *Store) JobLimit(ctx context.Context, id int64) (store.JobLimit, bool, error) {
	db, err := s.readDB()
	if err != nil {
		return store.JobLimit{}, false, fmt.Errorf("sqlite: job limit: %w", err)
	}
	var l store.JobLimit
	var next *int64
	err = db.QueryRowContext(ctx, `SELECT j.climit, j.ckey, coalesce(l.max_running, 0),
		(SELECT count(*) FROM jobs r INDEXED BY jobs_limit_running
			WHERE r.state = 'running' AND r.climit IS NOT NULL AND r.climit = j.climit AND r.ckey = j.ckey),
		(SELECT max(CASE WHEN l.rate_n > 0 THEN rt.tat - (l.rate_burst - 1) * ((l.rate_per + l.rate_n - 1) / l.rate_n) ELSE 0 END, rt.held_until)
			FROM limit_rates rt WHERE rt.name = j.climit AND rt.key = j.ckey)
		FROM jobs j LEFT JOIN conc_limits l ON l.name = j.climit
		WHERE j.id = ? AND j.climit IS NOT NULL`, id).Scan(&l.Name, &l.Key, &l.Max, &l.Running, &next)
	if errors.Is(err, sql.ErrNoRows) {
		return store.JobLimit{}, false, nil
	}
	if err != nil {
		return store.JobLimit{}, false, fmt.Errorf("sqlite: job limit: %w", err)
	}
	if next != nil && *next > 0 {
		l.NextStart = time.UnixMicro(*next).UTC()
	}
	return l, true, nil
}
