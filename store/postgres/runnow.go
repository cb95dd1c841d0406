package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/redrivehq/redrive/store"
)

// RunNow implements store.Store with one statement, which changes the
// job only while it is scheduled, then wakes the workers listening for
// its queue; when it changed nothing, a read of the job tells why (a
// pending job is answered as it is).
func (s *Store) RunNow(ctx context.Context, id int64, now time.Time) (*store.Job, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	var job *store.Job
	err := s.retry(ctx, func() error {
		var err error
		job, err = scanJob(s.pool.QueryRow(ctx, `UPDATE `+s.sql.jobs+` SET state = 'pending', run_at = least(run_at, $2)
	WHERE id = $1 AND state = 'scheduled' RETURNING `+cols("", true), id, ts(now)), true, s.payloads)
		if err == nil {
			// Wake the listening workers of its queue, as an enqueue does.
			_, err = s.pool.Exec(ctx, s.sql.cancelNotify, job.Queue)
			return err
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		job, err = scanJob(s.pool.QueryRow(ctx, `SELECT `+cols("", true)+` FROM `+s.sql.jobs+` WHERE id = $1`, id), true, s.payloads)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("job %d: %w", id, store.ErrNotFound)
		}
		if err != nil {
			return err
		}
		if job.State != store.Pending {
			state := job.State
			job = nil
			return fmt.Errorf("job %d is %s (only a pending or scheduled job can run now): %w", id, state, store.ErrConflict)
		}
		return nil
	})
	if err != nil {
		return nil, s.fail("run now", err)
	}
	return job, nil
}
