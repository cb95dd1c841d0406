package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/redrivehq/redrive/store"
)

// The secrets live in the secrets table, one row per name. Secret reads
// the row and, when it is missing, inserts one (ON CONFLICT DO NOTHING:
// a concurrent first caller may win) and reads again, in a statement of
// its own, which sees whichever row was committed.

func (s *Store) secretsTable() string { return pgx.Identifier{s.schema, "secrets"}.Sanitize() }

// Secret implements store.Secrets.
func (s *Store) Secret(ctx context.Context, name string) ([]byte, error) {
	if err := store.CheckSecretName(name); err != nil {
		return nil, fmt.Errorf("postgres: secret: %w", err)
	}
	if err := s.check(); err != nil {
		return nil, err
	}
	op := fmt.Sprintf("secret %q", name)
	var v []byte
	err := s.pool.QueryRow(ctx, `SELECT value FROM `+s.secretsTable()+` WHERE name = $1`, name).Scan(&v)
	if err == nil {
		return v, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return nil, s.fail(op, err)
	}
	fresh, err := store.NewSecret()
	if err != nil {
		return nil, fmt.Errorf("postgres: %s: %w", op, err)
	}
	if _, err := s.pool.Exec(ctx, `INSERT INTO `+s.secretsTable()+` (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING`, name, fresh); err != nil {
		return nil, s.fail(op, err)
	}
	if err := s.pool.QueryRow(ctx, `SELECT value FROM `+s.secretsTable()+` WHERE name = $1`, name).Scan(&v); err != nil {
		return nil, s.fail(op, err)
	}
	return v, nil
}

// RotateSecret implements store.Secrets.
func (s *Store) RotateSecret(ctx context.Context, name string) ([]byte, error) {
	if err := store.CheckSecretName(name); err != nil {
		return nil, fmt.Errorf("postgres: rotate secret: %w", err)
	}
	if err := s.check(); err != nil {
		return nil, err
	}
	op := fmt.Sprintf("rotate secret %q", name)
	fresh, err := store.NewSecret()
	if err != nil {
		return nil, fmt.Errorf("postgres: %s: %w", op, err)
	}
	if _, err := s.pool.Exec(ctx, `INSERT INTO `+s.secretsTable()+` (name, value) VALUES ($1, $2)
		ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value`, name, fresh); err != nil {
		return nil, s.fail(op, err)
	}
	return fresh, nil
}
