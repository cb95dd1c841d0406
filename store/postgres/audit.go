package postgres

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/redrivehq/redrive/store"
)

// The audit log lives in the audit table, appended to by AppendAudit and
// deleted from by retention only.

func (s *Store) auditTable() string { return pgx.Identifier{s.schema, "audit"}.Sanitize() }

const auditColumns = `id, at, actor, role, action, target, count, operation_id, note, remote, status`

// AppendAudit implements store.Audit.
func (s *Store) AppendAudit(ctx context.Context, e store.AuditEntry) (store.AuditEntry, error) {
	if err := store.CheckAuditEntry(e); err != nil {
		return e, fmt.Errorf("postgres: append audit: %w", err)
	}
	if err := s.check(); err != nil {
		return e, err
	}
	if e.At.IsZero() {
		e.At = time.Now()
	}
	e.At = ts(e.At)
	err := s.pool.QueryRow(ctx, `INSERT INTO `+s.auditTable()+` (at, actor, role, action, target, count, operation_id, note, remote, status)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING id`, e.At, e.Actor, e.Role, e.Action, e.Target, e.Count,
		e.OperationID, e.Note, e.Remote, e.Status).Scan(&e.ID)
	if err != nil {
		return e, s.fail("append audit", err)
	}
	return e, nil
}

// ListAudit implements store.Audit.
func (s *Store) ListAudit(ctx context.Context, f store.AuditFilter, before int64, limit int) ([]store.AuditEntry, int64, error) {
	if err := s.check(); err != nil {
		return nil, 0, err
	}
	if limit <= 0 || limit > store.MaxPageSize {
		limit = store.MaxPageSize
	}
	var where []string
	var args []any
	arg := func(cond string, v any) {
		args = append(args, v)
		where = append(where, fmt.Sprintf(cond, len(args)))
	}
	if before > 0 {
		arg("id < $%d", before)
	}
	if f.Actor != "" {
		arg("actor = $%d", f.Actor)
	}
	if f.Action != "" {
		arg("action = $%d", f.Action)
	}
	if !f.Since.IsZero() {
		arg("at >= $%d", ts(f.Since))
	}
	if !f.Until.IsZero() {
		arg("at < $%d", ts(f.Until))
	}
	q := `SELECT ` + auditColumns + ` FROM ` + s.auditTable()
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	args = append(args, limit+1)
	q += fmt.Sprintf(` ORDER BY id DESC LIMIT $%d`, len(args))
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, 0, s.fail("list audit", err)
	}
	defer rows.Close()
	var out []store.AuditEntry
	for rows.Next() {
		var e store.AuditEntry
		if err := rows.Scan(&e.ID, &e.At, &e.Actor, &e.Role, &e.Action, &e.Target, &e.Count, &e.OperationID, &e.Note, &e.Remote, &e.Status); err != nil {
			return nil, 0, s.fail("list audit", err)
		}
		e.At = e.At.UTC()
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, s.fail("list audit", err)
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
	if err := s.check(); err != nil {
		return 0, err
	}
	tag, err := s.pool.Exec(ctx, `DELETE FROM `+s.auditTable()+` WHERE at < $1`, ts(before))
	if err != nil {
		return 0, s.fail("delete audit", err)
	}
	return tag.RowsAffected(), nil
}
