package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/redrivehq/redrive/store"
)

// DeleteKeys implements store.Store.
func (s *Store) DeleteKeys(ctx context.Context, before time.Time) (int64, error) {
	if err := s.check(); err != nil {
		return 0, err
	}
	var n int64
	err := s.retry(ctx, func() error {
		tag, err := s.pool.Exec(ctx, `DELETE FROM `+s.sql.keys+` WHERE created_at < $1`, ts(before))
		n = tag.RowsAffected()
		return err
	})
	if err != nil {
		return 0, s.fail("delete keys", err)
	}
	return n, nil
}

// workersTable is the qualified name of the workers table.
func (s *Store) workersTable() string { return pgx.Identifier{s.schema, "workers"}.Sanitize() }

// RegisterWorker implements store.Store.
func (s *Store) RegisterWorker(ctx context.Context, w store.WorkerInfo) error {
	if err := s.check(); err != nil {
		return err
	}
	if w.ID == "" {
		return fmt.Errorf("postgres: register worker: %w: empty id", store.ErrInvalid)
	}
	queues, err := json.Marshal(w.Queues)
	if err != nil {
		return fmt.Errorf("postgres: register worker: %w", err)
	}
	kinds, err := store.EncodeKinds(w.Kinds)
	if err != nil {
		return fmt.Errorf("postgres: register worker: %w", err)
	}
	err = s.retry(ctx, func() error {
		_, err := s.pool.Exec(ctx, `INSERT INTO `+s.workersTable()+` (id, host, pid, instance, version, queues, kinds, started_at, heartbeat_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
			ON CONFLICT (id) DO UPDATE SET host = excluded.host, pid = excluded.pid, instance = excluded.instance,
				version = excluded.version, queues = excluded.queues, kinds = excluded.kinds, started_at = excluded.started_at,
				heartbeat_at = excluded.heartbeat_at, stopped_at = NULL, stop_reason = ''`,
			cleanText(w.ID), cleanText(w.Host), w.PID, cleanText(w.Instance), cleanText(w.Version), string(queues),
			kinds, ts(w.StartedAt), ts(w.HeartbeatAt))
		return err
	})
	if err != nil {
		return s.fail("register worker", err)
	}
	return nil
}

// HeartbeatWorker implements store.Store.
func (s *Store) HeartbeatWorker(ctx context.Context, id string, at time.Time) error {
	if err := s.check(); err != nil {
		return err
	}
	var n int64
	err := s.retry(ctx, func() error {
		tag, err := s.pool.Exec(ctx, `UPDATE `+s.workersTable()+` SET heartbeat_at = $2 WHERE id = $1 AND stopped_at IS NULL`,
			cleanText(id), ts(at))
		n = tag.RowsAffected()
		return err
	})
	if err != nil {
		return s.fail("heartbeat worker", err)
	}
	if n == 0 {
		return fmt.Errorf("postgres: heartbeat worker %q: %w", id, store.ErrNotFound)
	}
	return nil
}

// StopWorker implements store.Store.
func (s *Store) StopWorker(ctx context.Context, id string, at time.Time, reason string) error {
	if err := s.check(); err != nil {
		return err
	}
	err := s.retry(ctx, func() error {
		_, err := s.pool.Exec(ctx, `UPDATE `+s.workersTable()+` SET stopped_at = $2, stop_reason = $3 WHERE id = $1 AND stopped_at IS NULL`,
			cleanText(id), ts(at), cleanText(reason))
		return err
	})
	if err != nil {
		return s.fail("stop worker", err)
	}
	return nil
}

// Workers implements store.Store.
func (s *Store) Workers(ctx context.Context) ([]store.WorkerInfo, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	// A running job has a lease: the condition on it reads the jobs_lease
	// index.
	rows, err := s.pool.Query(ctx, `SELECT w.id, w.host, w.pid, w.instance, w.version, w.queues, w.kinds, w.started_at, w.heartbeat_at,
			w.stopped_at, w.stop_reason, coalesce(r.n, 0)
		FROM `+s.workersTable()+` w
		LEFT JOIN (SELECT worker, count(*) AS n FROM `+s.sql.jobs+` WHERE state = 'running' AND lease_until IS NOT NULL GROUP BY worker) r ON r.worker = w.id
		ORDER BY w.started_at DESC, w.id`)
	if err != nil {
		return nil, s.fail("workers", err)
	}
	defer rows.Close()
	out := []store.WorkerInfo{}
	for rows.Next() {
		var w store.WorkerInfo
		var queues, kinds []byte
		if err := rows.Scan(&w.ID, &w.Host, &w.PID, &w.Instance, &w.Version, &queues, &kinds, &w.StartedAt, &w.HeartbeatAt,
			&w.StoppedAt, &w.StopReason, &w.Running); err != nil {
			return nil, s.fail("workers", err)
		}
		if err := json.Unmarshal(queues, &w.Queues); err != nil {
			return nil, fmt.Errorf("postgres: workers: queues of %q: %w", w.ID, err)
		}
		if kinds != nil {
			if w.Kinds, err = store.DecodeKinds(kinds); err != nil {
				return nil, fmt.Errorf("postgres: workers: kinds of %q: %w", w.ID, err)
			}
		}
		w.StartedAt, w.HeartbeatAt, w.StoppedAt = w.StartedAt.UTC(), w.HeartbeatAt.UTC(), utcPtr(w.StoppedAt)
		out = append(out, w)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("workers", err)
	}
	return out, nil
}

// DeleteWorkers implements store.Store.
func (s *Store) DeleteWorkers(ctx context.Context, before time.Time) (int64, error) {
	if err := s.check(); err != nil {
		return 0, err
	}
	var n int64
	err := s.retry(ctx, func() error {
		tag, err := s.pool.Exec(ctx, `DELETE FROM `+s.workersTable()+` WHERE stopped_at < $1 OR heartbeat_at < $1`, ts(before))
		n = tag.RowsAffected()
		return err
	})
	if err != nil {
		return 0, s.fail("delete workers", err)
	}
	return n, nil
}

// Leased implements store.Store.
func (s *Store) Leased(ctx context.Context, worker string, limit int) ([]*store.Job, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if limit <= 0 {
		return []*store.Job{}, nil
	}
	// (lease_until IS NOT NULL: see Workers.)
	rows, err := s.pool.Query(ctx, `SELECT `+cols("", false)+` FROM `+s.sql.jobs+` WHERE state = 'running' AND lease_until IS NOT NULL AND worker = $1 ORDER BY id LIMIT $2`,
		cleanText(worker), limit)
	if err != nil {
		return nil, s.fail("leased", err)
	}
	jobs, err := collect(rows, false, s.payloads)
	if err != nil {
		return nil, s.fail("leased", err)
	}
	if jobs == nil {
		jobs = []*store.Job{}
	}
	return jobs, nil
}
