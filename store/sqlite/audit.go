package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/redrivehq/redrive/store"
)

// The audit log lives in the audit table, appended to by AppendAudit in
// the writer's transaction and deleted from by retention only.

const auditColumns = `id, at, actor, role, action, target, count, operation_id, note, remote, status`

// AppendAudit implements store.Audit.
func (s *Store) AppendAudit(ctx context.Context, e store.AuditEntry) (store.AuditEntry, error) {
	if err := store.CheckAuditEntry(e); err != nil {
		return e, fmt.Errorf("sqlite: append audit: %w", err)
	}
	if e.At.IsZero() {
		e.At = time.Now()
	}
	e.At = fromMicros(micros(e.At))
	err := s.write(ctx, func(tx *sql.Conn) error {
		return tx.QueryRowContext(ctx, `INSERT INTO audit (at, actor, role, action, target, count, operation_id, note, remote, status)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id`, micros(e.At), e.Actor, e.Role, e.Action, e.Target, e.Count,
			e.OperationID, e.Note, e.Remote, e.Status).Scan(&e.ID)
	})
	if err != nil {
		return e, fmt.Errorf("sqlite: append audit: %w", err)
	}
	return e, nil
}

// ListAudit implements store.Audit.
func (s *Store) ListAudit(ctx context.Context, f store.AuditFilter, before int64, limit int) ([]store.AuditEntry, int64, error) {
	if limit <= 0 || limit > store.MaxPageSize {
		limit = store.MaxPageSize
	}
	db, err := s.readDB()
	if err != nil {
		return nil, 0, err
	}
	var where []string
	var args []any
	if before > 0 {
		where, args = append(where, "id < ?"), append(args, before)
	}
	if f.Actor != "" {
		where, args = append(where, "actor = ?"), append(args, f.Actor)
	}
	if f.Action != "" {
		where, args = append(where, "action = ?"), append(args, f.Action)
	}
	if !f.Since.IsZero() {
		where, args = append(where, "at >= ?"), append(args, micros(f.Since))
	}
	if !f.Until.IsZero() {
		where, args = append(where, "at < ?"), append(args, micros(f.Until))
	}
	q := `SELECT ` + auditColumns + ` FROM audit`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	q += ` ORDER BY id DESC LIMIT ?`
	rows, err := db.QueryContext(ctx, q, append(args, limit+1)...)
	if err != nil {
		return nil, 0, fmt.Errorf("sqlite: list audit: %w", err)
	}
	defer rows.Close()
	var out []store.AuditEntry
	for rows.Next() {
		var e store.AuditEntry
		var at int64
		if err := rows.Scan(&e.ID, &at, &e.Actor, &e.Role, &e.Action, &e.Target, &e.Count, &e.OperationID, &e.Note, &e.Remote, &e.Status); err != nil {
			return nil, 0, fmt.Errorf("sqlite: list audit: %w", err)
		}
		e.At = fromMicros(at)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("sqlite: list audit: %w", err)
	}
	var next int64
	if len(out) > limit {
		out = out[:limit]
		next = out[limit-1].ID
	}
	return out, next, nil
}

// DeleteAudit implements store.Audit.
func (s *Store) DeleteAudit(ctx context.Context, before time.Time) (int64, error) {
	var n int64
	err := s.write(ctx, func(tx *sql.Conn) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM audit WHERE at < ?`, micros(before))
		if err != nil {
			return fmt.Errorf("sqlite: delete audit: %w", err)
		}
		n, err = res.RowsAffected()
		return err
	})
	return n, err
}
