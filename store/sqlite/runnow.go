package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/redrivehq/redrive/store"
)

// RunNow implements store.Store.
func (s *Store) RunNow(ctx context.Context, id int64, now time.Time) (*store.Job, error) {
	var job *store.Job
	err := s.write(ctx, func(tx *sql.Conn) error {
		var state, queue string
		err := tx.QueryRowContext(ctx, `SELECT state, queue FROM jobs WHERE id = ?`, id).Scan(&state, &queue)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("sqlite: run job %d now: %w", id, store.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("sqlite: run job %d now: %w", id, err)
		}
		switch store.State(state) {
		case store.Pending:
		case store.Scheduled:
			if _, err := tx.ExecContext(ctx, `UPDATE jobs SET state = 'pending', run_at = min(run_at, ?) WHERE id = ?`, micros(now), id); err != nil {
				return fmt.Errorf("sqlite: run job %d now: %w", id, err)
			}
			mv := moves{}
			mv.move(queue, store.Scheduled, store.Pending)
			if err := s.addMoves(ctx, tx, mv); err != nil {
				return err
			}
		default:
			return fmt.Errorf("sqlite: run job %d now in state %s (only a pending or scheduled job can): %w", id, state, store.ErrConflict)
		}
		job, err = scanJob(tx.QueryRowContext(ctx, `SELECT `+jobColumns+` FROM jobs WHERE id = ?`, id), true, s.payloads)
		if err != nil {
			return fmt.Errorf("sqlite: run job %d now: %w", id, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return job, nil
}
