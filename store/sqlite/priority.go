package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/redrivehq/redrive/store"
)

// SetPriority implements store.Store.
func (s *Store) SetPriority(ctx context.Context, id int64, priority int) (*store.Job, error) {
	if err := store.CheckPriority(priority); err != nil {
		return nil, fmt.Errorf("sqlite: set priority of job %d: %w", id, err)
	}
	var job *store.Job
	err := s.write(ctx, func(tx *sql.Conn) error {
		var state string
		err := tx.QueryRowContext(ctx, `SELECT state FROM jobs WHERE id = ?`, id).Scan(&state)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("sqlite: set priority of job %d: %w", id, store.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("sqlite: set priority of job %d: %w", id, err)
		}
		if st := store.State(state); st != store.Pending && st != store.Scheduled {
			return fmt.Errorf("sqlite: set priority of job %d in state %s (only a pending or scheduled job's can change): %w", id, state, store.ErrConflict)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE jobs SET priority = ? WHERE id = ?`, priority, id); err != nil {
			return fmt.Errorf("sqlite: set priority of job %d: %w", id, err)
		}
		job, err = scanJob(tx.QueryRowContext(ctx, `SELECT `+jobColumns+` FROM jobs WHERE id = ?`, id), true, s.payloads)
		if err != nil {
			return fmt.Errorf("sqlite: set priority of job %d: %w", id, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return job, nil
}
