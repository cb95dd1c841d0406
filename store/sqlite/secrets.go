package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/redrivehq/redrive/store"
)

// The secrets live in the secrets table, one row per name. Secret reads
// it and, when the row is missing, inserts one in the writer's
// transaction, keeping the row already there if another caller won.

// Secret implements store.Secrets.
func (s *Store) Secret(ctx context.Context, name string) ([]byte, error) {
	if err := store.CheckSecretName(name); err != nil {
		return nil, fmt.Errorf("sqlite: secret: %w", err)
	}
	db, err := s.readDB()
	if err != nil {
		return nil, err
	}
	var v []byte
	err = db.QueryRowContext(ctx, `SELECT value FROM secrets WHERE name = ?`, name).Scan(&v)
	if err == nil {
		return v, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("sqlite: secret %q: %w", name, err)
	}
	fresh, err := store.NewSecret()
	if err != nil {
		return nil, fmt.Errorf("sqlite: secret %q: %w", name, err)
	}
	err = s.write(ctx, func(tx *sql.Conn) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO secrets (name, value) VALUES (?, ?) ON CONFLICT (name) DO NOTHING`, name, fresh); err != nil {
			return err
		}
		return tx.QueryRowContext(ctx, `SELECT value FROM secrets WHERE name = ?`, name).Scan(&v)
	})
	if err != nil {
		return nil, fmt.Errorf("sqlite: secret %q: %w", name, err)
	}
	return v, nil
}

// RotateSecret implements store.Secrets.
func (s *Store) RotateSecret(ctx context.Context, name string) ([]byte, error) {
	if err := store.CheckSecretName(name); err != nil {
		return nil, fmt.Errorf("sqlite: rotate secret: %w", err)
	}
	fresh, err := store.NewSecret()
	if err != nil {
		return nil, fmt.Errorf("sqlite: rotate secret %q: %w", name, err)
	}
	err = s.write(ctx, func(tx *sql.Conn) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO secrets (name, value) VALUES (?, ?)
			ON CONFLICT (name) DO UPDATE SET value = excluded.value`, name, fresh)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("sqlite: rotate secret %q: %w", name, err)
	}
	return fresh, nil
}
