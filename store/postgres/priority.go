package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/redrivehq/redrive/store"
)

// SetPriority implements store.Store with one statement, which changes
// the job only while it waits (pending or scheduled); when it changed
// nothing, a read of the job's state tells why.
func (s *Store) SetPriority(ctx context.Context, id int64, priority int) (*store.Job, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if err := store.CheckPriority(priority); err != nil {
		return nil, fmt.Errorf("postgres: set priority of job %d: %w", id, err)
	}
	var job *store.Job
	err := s.retry(ctx, func() error {
		var err error
		job, err = scanJob(s.pool.QueryRow(ctx, `UPDATE `+s.sql.jobs+` SET priority = $2
	WHERE id = $1 AND state IN ('pending', 'scheduled') RETURNING `+cols("", true), id, int16(priority)), true, s.payloads)
		if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		var state string
		err = s.pool.QueryRow(ctx, `SELECT state FROM `+s.sql.jobs+` WHERE id = $1`, id).Scan(&state)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("job %d: %w", id, store.ErrNotFound)
		}
		if err != nil {
			return err
		}
		return fmt.Errorf("job %d is %s (only a pending or scheduled job's priority can change): %w", id, state, store.ErrConflict)
	})
	if err != nil {
		return nil, s.fail("set priority", err)
	}
	return job, nil
}
