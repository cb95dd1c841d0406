package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/redrivehq/redrive/store"
)

// scheduleColumns are the columns scanSchedule reads, in order.
const scheduleColumns = `name, spec, paused, paused_at, cursor_at, last_run, last_job_id, next_run, created_at, declared_at, updated_at`

// scanSchedule reads one row of scheduleColumns.
func scanSchedule(row interface{ Scan(...any) error }) (store.Schedule, error) {
	var sc store.Schedule
	var spec string
	var pausedAt, lastRun, lastJob, nextRun sql.NullInt64
	var cursor, created, declared, updated int64
	if err := row.Scan(&sc.Name, &spec, &sc.Paused, &pausedAt, &cursor, &lastRun, &lastJob, &nextRun, &created, &declared, &updated); err != nil {
		return store.Schedule{}, err
	}
	sc.Spec = []byte(spec)
	if pausedAt.Valid {
		sc.PausedAt = fromMicros(pausedAt.Int64)
	}
	if lastRun.Valid {
		sc.LastRun = fromMicros(lastRun.Int64)
	}
	sc.LastJobID = lastJob.Int64
	if nextRun.Valid {
		sc.NextRun = fromMicros(nextRun.Int64)
	}
	sc.Cursor = fromMicros(cursor)
	sc.CreatedAt = fromMicros(created)
	sc.DeclaredAt = fromMicros(declared)
	sc.UpdatedAt = fromMicros(updated)
	return sc, nil
}

// nullMicros is t in microseconds, or NULL for the zero time.
func nullMicros(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return micros(t)
}

// DeclareSchedule implements store.Store with one upsert.
func (s *Store) DeclareSchedule(ctx context.Context, d store.ScheduleDecl, now time.Time) (store.Schedule, error) {
	if err := store.CheckScheduleDecl(&d); err != nil {
		return store.Schedule{}, fmt.Errorf("sqlite: declare schedule: %w", err)
	}
	var sc store.Schedule
	err := s.write(ctx, func(tx *sql.Conn) error {
		row := tx.QueryRowContext(ctx, `INSERT INTO schedules (name, spec, cursor_at, next_run, created_at, declared_at, updated_at)
			VALUES (?1, ?2, ?3, ?4, ?5, ?5, ?5)
			ON CONFLICT (name) DO UPDATE SET spec = excluded.spec, declared_at = excluded.declared_at,
				next_run = CASE WHEN schedules.paused THEN schedules.next_run ELSE excluded.next_run END,
				updated_at = excluded.updated_at
			RETURNING `+scheduleColumns, d.Name, string(d.Spec), micros(d.Cursor), nullMicros(d.NextRun), micros(now))
		var err error
		sc, err = scanSchedule(row)
		if err != nil {
			return fmt.Errorf("sqlite: declare schedule %q: %w", d.Name, err)
		}
		return nil
	})
	if err != nil {
		return store.Schedule{}, err
	}
	return sc, nil
}

// ListSchedules implements store.Store.
func (s *Store) ListSchedules(ctx context.Context) ([]store.Schedule, error) {
	db, err := s.readDB()
	if err != nil {
		return nil, err
	}
	rows, err := db.QueryContext(ctx, `SELECT `+scheduleColumns+` FROM schedules ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list schedules: %w", err)
	}
	defer rows.Close()
	out := []store.Schedule{}
	for rows.Next() {
		sc, err := scanSchedule(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlite: list schedules: %w", err)
		}
		out = append(out, sc)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: list schedules: %w", err)
	}
	return out, nil
}

// checkScheduleName reports a name no schedule can have.
func checkScheduleName(op, name string) error {
	if err := store.CheckScheduleName(name); err != nil {
		return fmt.Errorf("sqlite: %s: %w", op, err)
	}
	return nil
}

// GetSchedule implements store.Store.
func (s *Store) GetSchedule(ctx context.Context, name string) (store.Schedule, error) {
	if err := checkScheduleName("get schedule", name); err != nil {
		return store.Schedule{}, err
	}
	db, err := s.readDB()
	if err != nil {
		return store.Schedule{}, err
	}
	sc, err := scanSchedule(db.QueryRowContext(ctx, `SELECT `+scheduleColumns+` FROM schedules WHERE name = ?`, name))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Schedule{}, fmt.Errorf("sqlite: schedule %q: %w", name, store.ErrNoSchedule)
	}
	if err != nil {
		return store.Schedule{}, fmt.Errorf("sqlite: get schedule %q: %w", name, err)
	}
	return sc, nil
}

// PauseSchedule implements store.Store with one update.
func (s *Store) PauseSchedule(ctx context.Context, name string, paused bool, next, now time.Time) (store.Schedule, error) {
	if err := checkScheduleName("pause schedule", name); err != nil {
		return store.Schedule{}, err
	}
	var sc store.Schedule
	err := s.write(ctx, func(tx *sql.Conn) error {
		var row *sql.Row
		if paused {
			row = tx.QueryRowContext(ctx, `UPDATE schedules SET paused = 1, paused_at = coalesce(paused_at, ?2),
				updated_at = ?2 WHERE name = ?1 RETURNING `+scheduleColumns, name, micros(now))
		} else {
			row = tx.QueryRowContext(ctx, `UPDATE schedules SET cursor_at = CASE WHEN paused THEN max(cursor_at, ?2) ELSE cursor_at END,
				next_run = CASE WHEN paused THEN ?3 ELSE next_run END,
				paused = 0, paused_at = NULL, updated_at = ?2 WHERE name = ?1 RETURNING `+scheduleColumns,
				name, micros(now), nullMicros(next))
		}
		var err error
		sc, err = scanSchedule(row)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("sqlite: schedule %q: %w", name, store.ErrNoSchedule)
		}
		if err != nil {
			return fmt.Errorf("sqlite: pause schedule %q: %w", name, err)
		}
		return nil
	})
	if err != nil {
		return store.Schedule{}, err
	}
	return sc, nil
}

// AdvanceSchedule implements store.Store: an update fenced on the cursor.
func (s *Store) AdvanceSchedule(ctx context.Context, a store.ScheduleAdvance) (bool, error) {
	if err := checkScheduleName("advance schedule", a.Name); err != nil {
		return false, err
	}
	var applied bool
	err := s.write(ctx, func(tx *sql.Conn) error {
		res, err := tx.ExecContext(ctx, `UPDATE schedules SET cursor_at = ?3,
				last_run = CASE WHEN ?5 <> 0 THEN ?4 ELSE last_run END,
				last_job_id = CASE WHEN ?5 <> 0 THEN ?5 ELSE last_job_id END,
				next_run = ?6, updated_at = ?7
			WHERE name = ?1 AND cursor_at = ?2 AND NOT paused`,
			a.Name, micros(a.From), micros(a.To), nullMicros(a.LastRun), a.LastJobID, nullMicros(a.NextRun), micros(a.Now))
		if err != nil {
			return fmt.Errorf("sqlite: advance schedule %q: %w", a.Name, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return fmt.Errorf("sqlite: advance schedule %q: %w", a.Name, err)
		}
		applied = n == 1
		return nil
	})
	return applied, err
}

// DeleteSchedule implements store.Store.
func (s *Store) DeleteSchedule(ctx context.Context, name string) (bool, error) {
	if err := checkScheduleName("delete schedule", name); err != nil {
		return false, err
	}
	var deleted bool
	err := s.write(ctx, func(tx *sql.Conn) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM schedules WHERE name = ?`, name)
		if err != nil {
			return fmt.Errorf("sqlite: delete schedule %q: %w", name, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return fmt.Errorf("sqlite: delete schedule %q: %w", name, err)
		}
		deleted = n == 1
		return nil
	})
	return deleted, err
}
