package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/redrivehq/redrive/store"
)

// schedulesTable is the qualified name of the schedules table.
func (s *Store) schedulesTable() string { return pgx.Identifier{s.schema, "schedules"}.Sanitize() }

// scheduleColumns are the columns scanSchedule reads, in order.
const scheduleColumns = `name, spec, paused, paused_at, cursor_at, last_run, last_job_id, next_run, created_at, declared_at, updated_at`

// scanSchedule reads one row of scheduleColumns.
func scanSchedule(row pgx.Row) (store.Schedule, error) {
	var sc store.Schedule
	var spec []byte
	var pausedAt, lastRun, nextRun *time.Time
	var lastJob *int64
	if err := row.Scan(&sc.Name, &spec, &sc.Paused, &pausedAt, &sc.Cursor, &lastRun, &lastJob, &nextRun,
		&sc.CreatedAt, &sc.DeclaredAt, &sc.UpdatedAt); err != nil {
		return store.Schedule{}, err
	}
	sc.Spec = spec
	if pausedAt != nil {
		sc.PausedAt = pausedAt.UTC()
	}
	if lastRun != nil {
		sc.LastRun = lastRun.UTC()
	}
	if lastJob != nil {
		sc.LastJobID = *lastJob
	}
	if nextRun != nil {
		sc.NextRun = nextRun.UTC()
	}
	sc.Cursor = sc.Cursor.UTC()
	sc.CreatedAt = sc.CreatedAt.UTC()
	sc.DeclaredAt = sc.DeclaredAt.UTC()
	sc.UpdatedAt = sc.UpdatedAt.UTC()
	return sc, nil
}

// tsOrNil is t truncated to the microsecond, or NULL for the zero time.
func tsOrNil(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := ts(t)
	return &u
}

// checkScheduleName reports a name no schedule can have.
func checkScheduleName(op, name string) error {
	if err := store.CheckScheduleName(name); err != nil {
		return fmt.Errorf("postgres: %s: %w", op, err)
	}
	return nil
}

// DeclareSchedule implements store.Store with one upsert.
func (s *Store) DeclareSchedule(ctx context.Context, d store.ScheduleDecl, now time.Time) (store.Schedule, error) {
	if err := s.check(); err != nil {
		return store.Schedule{}, err
	}
	if err := store.CheckScheduleDecl(&d); err != nil {
		return store.Schedule{}, fmt.Errorf("postgres: declare schedule: %w", err)
	}
	if err := checkText("spec", string(d.Spec)); err != nil {
		return store.Schedule{}, fmt.Errorf("postgres: declare schedule %q: %w", d.Name, err)
	}
	t := s.schedulesTable()
	var sc store.Schedule
	err := s.retry(ctx, func() error {
		var err error
		sc, err = scanSchedule(s.pool.QueryRow(ctx, `INSERT INTO `+t+` AS sc (name, spec, cursor_at, next_run, created_at, declared_at, updated_at)
	VALUES ($1, $2, $3, $4, $5, $5, $5)
	ON CONFLICT (name) DO UPDATE SET spec = excluded.spec, declared_at = excluded.declared_at,
		next_run = CASE WHEN sc.paused THEN sc.next_run ELSE excluded.next_run END,
		updated_at = excluded.updated_at
	RETURNING `+scheduleColumns, d.Name, string(d.Spec), ts(d.Cursor), tsOrNil(d.NextRun), ts(now)))
		return err
	})
	if err != nil {
		return store.Schedule{}, s.fail(fmt.Sprintf("declare schedule %q", d.Name), err)
	}
	return sc, nil
}

// ListSchedules implements store.Store.
func (s *Store) ListSchedules(ctx context.Context) ([]store.Schedule, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT `+scheduleColumns+` FROM `+s.schedulesTable()+` ORDER BY name COLLATE "C"`)
	if err != nil {
		return nil, s.fail("list schedules", err)
	}
	defer rows.Close()
	out := []store.Schedule{}
	for rows.Next() {
		sc, err := scanSchedule(rows)
		if err != nil {
			return nil, s.fail("list schedules", err)
		}
		out = append(out, sc)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("list schedules", err)
	}
	return out, nil
}

// GetSchedule implements store.Store.
func (s *Store) GetSchedule(ctx context.Context, name string) (store.Schedule, error) {
	if err := s.check(); err != nil {
		return store.Schedule{}, err
	}
	if err := checkScheduleName("get schedule", name); err != nil {
		return store.Schedule{}, err
	}
	sc, err := scanSchedule(s.pool.QueryRow(ctx, `SELECT `+scheduleColumns+` FROM `+s.schedulesTable()+` WHERE name = $1`, name))
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Schedule{}, fmt.Errorf("postgres: schedule %q: %w", name, store.ErrNoSchedule)
	}
	if err != nil {
		return store.Schedule{}, s.fail(fmt.Sprintf("get schedule %q", name), err)
	}
	return sc, nil
}

// PauseSchedule implements store.Store with one update.
func (s *Store) PauseSchedule(ctx context.Context, name string, paused bool, next, now time.Time) (store.Schedule, error) {
	if err := s.check(); err != nil {
		return store.Schedule{}, err
	}
	if err := checkScheduleName("pause schedule", name); err != nil {
		return store.Schedule{}, err
	}
	t := s.schedulesTable()
	var sc store.Schedule
	err := s.retry(ctx, func() error {
		var row pgx.Row
		if paused {
			row = s.pool.QueryRow(ctx, `UPDATE `+t+` SET paused = true, paused_at = coalesce(paused_at, $2),
	updated_at = $2 WHERE name = $1 RETURNING `+scheduleColumns, name, ts(now))
		} else {
			row = s.pool.QueryRow(ctx, `UPDATE `+t+` SET cursor_at = CASE WHEN paused THEN greatest(cursor_at, $2) ELSE cursor_at END,
	next_run = CASE WHEN paused THEN $3 ELSE next_run END,
	paused = false, paused_at = NULL, updated_at = $2 WHERE name = $1 RETURNING `+scheduleColumns, name, ts(now), tsOrNil(next))
		}
		var err error
		sc, err = scanSchedule(row)
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Schedule{}, fmt.Errorf("postgres: schedule %q: %w", name, store.ErrNoSchedule)
	}
	if err != nil {
		return store.Schedule{}, s.fail(fmt.Sprintf("pause schedule %q", name), err)
	}
	return sc, nil
}

// AdvanceSchedule implements store.Store: an update fenced on the cursor,
// which PostgreSQL's row lock serializes: of two concurrent advances from
// one cursor, the second finds the cursor moved.
func (s *Store) AdvanceSchedule(ctx context.Context, a store.ScheduleAdvance) (bool, error) {
	if err := s.check(); err != nil {
		return false, err
	}
	if err := checkScheduleName("advance schedule", a.Name); err != nil {
		return false, err
	}
	var n int64
	err := s.retry(ctx, func() error {
		tag, err := s.pool.Exec(ctx, `UPDATE `+s.schedulesTable()+` SET cursor_at = $3,
	last_run = CASE WHEN $5::bigint <> 0 THEN $4 ELSE last_run END,
	last_job_id = CASE WHEN $5::bigint <> 0 THEN $5 ELSE last_job_id END,
	next_run = $6, updated_at = $7
WHERE name = $1 AND cursor_at = $2 AND NOT paused`,
			a.Name, ts(a.From), ts(a.To), tsOrNil(a.LastRun), a.LastJobID, tsOrNil(a.NextRun), ts(a.Now))
		n = tag.RowsAffected()
		return err
	})
	if err != nil {
		return false, s.fail(fmt.Sprintf("advance schedule %q", a.Name), err)
	}
	return n == 1, nil
}

// DeleteSchedule implements store.Store.
func (s *Store) DeleteSchedule(ctx context.Context, name string) (bool, error) {
	if err := s.check(); err != nil {
		return false, err
	}
	if err := checkScheduleName("delete schedule", name); err != nil {
		return false, err
	}
	var n int64
	err := s.retry(ctx, func() error {
		tag, err := s.pool.Exec(ctx, `DELETE FROM `+s.schedulesTable()+` WHERE name = $1`, name)
		n = tag.RowsAffected()
		return err
	})
	if err != nil {
		return false, s.fail(fmt.Sprintf("delete schedule %q", name), err)
	}
	return n == 1, nil
}
