package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/redrivehq/redrive/internal/config"
	"github.com/redrivehq/redrive/store/postgres"
	"github.com/redrivehq/redrive/store/sqlite"
)

// databaseURLEnv is the environment variable --database-url defaults to.
const databaseURLEnv = "REDRIVE_DATABASE_URL"

// migration is one applied migration, as `redrive migrate` reports it.
type migration struct {
	Version   int       `json:"version"`
	Name      string    `json:"name"`
	AppliedAt time.Time `json:"applied_at"`
	// Now is true for the migrations this run applied.
	Now bool `json:"applied_now"`
}

// migrateReport is what `redrive migrate` did.
type migrateReport struct {
	Store  string `json:"store"`
	Target string `json:"target"` // the database file, or the URL without its password
	Schema string `json:"schema,omitempty"`
	// Applied lists every migration the schema holds (PostgreSQL only).
	Applied    []migration `json:"migrations,omitempty"`
	AppliedNow int         `json:"applied_now"`
}

// newMigrateCmd is `redrive migrate`: bring a database's schema up to
// date.
func newMigrateCmd(g *globalOptions) *cobra.Command {
	var dbURL, schema string
	var lockTimeout time.Duration
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Create or update the database schema",
		Long: `Apply the store's migrations and print what was done.

With --database-url (default: $` + databaseURLEnv + `), apply the PostgreSQL
migrations not yet applied to --schema, in one transaction under an advisory
lock (processes migrating together apply each migration once), and list the
schema's migrations. Run it from a deploy step when the engine's processes
open their store without migrating. A migration waits at most --lock-timeout
for each lock it needs on the store's tables, so that a long transaction on
jobs fails it (applying nothing) rather than stalling every worker queued
behind it: try again at a quieter time, or raise the bound.

Without --database-url, open the SQLite database --db, which applies its
migrations whenever it is opened.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var (
				rep *migrateReport
				err error
			)
			// The environment is read here rather than as the flag's default,
			// so that --help never prints a password.
			if !cmd.Flags().Changed("database-url") {
				dbURL = os.Getenv(databaseURLEnv)
			}
			if dbURL == "" {
				rep, err = migrateSQLite(cmd.Context(), g.DB)
			} else {
				rep, err = migratePostgres(cmd.Context(), dbURL, schema, lockTimeout)
			}
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if g.JSON {
				return writeJSON(out, rep)
			}
			if rep.Store == "sqlite" {
				_, err := fmt.Fprintf(out, "SQLite database %s: opened and migrated (no --database-url given: SQLite applies its migrations on open)\n", rep.Target)
				return err
			}
			status := "up to date, nothing applied"
			if rep.AppliedNow > 0 {
				status = fmt.Sprintf("applied %d migration(s)", rep.AppliedNow)
			}
			fmt.Fprintf(out, "PostgreSQL %s, schema %s: %s\n", rep.Target, rep.Schema, status)
			var fs []field
			for _, m := range rep.Applied {
				when := "applied " + m.AppliedAt.Local().Format(time.RFC3339)
				if m.Now {
					when += " (now)"
				}
				fs = append(fs, field{m.Name, when})
			}
			return writeFields(out, "  ", fs)
		},
	}
	f := cmd.Flags()
	f.StringVar(&dbURL, "database-url", "", "PostgreSQL URL (default $"+databaseURLEnv+"; empty: the SQLite --db)")
	f.StringVar(&schema, "schema", postgres.DefaultSchema, "PostgreSQL schema of the store")
	f.DurationVar(&lockTimeout, "lock-timeout", postgres.DefaultMigrateLockTimeout, "PostgreSQL: how long a migration waits for each lock it needs (0: no bound)")
	return cmd
}

// migrateSQLite opens (and so migrates) the SQLite database at path.
func migrateSQLite(ctx context.Context, path string) (*migrateReport, error) {
	st, err := sqlite.Open(ctx, path, sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, err
	}
	if err := st.Close(); err != nil {
		return nil, err
	}
	return &migrateReport{Store: "sqlite", Target: path}, nil
}

// migratePostgres applies the migrations to schema, each waiting at most
// lockTimeout for its locks (postgres.Options.MigrateLockTimeout), and
// lists them.
func migratePostgres(ctx context.Context, dbURL, schema string, lockTimeout time.Duration) (*migrateReport, error) {
	before, err := appliedBefore(ctx, dbURL, schema)
	if err != nil {
		return nil, err
	}
	// Open migrates (one transaction, under the schema's advisory lock).
	if lockTimeout <= 0 {
		lockTimeout = -1 // no bound, as lock_timeout = 0 (Options reads 0 as its default)
	}
	st, err := postgres.Open(ctx, dbURL, postgres.Options{Schema: schema, Logger: slog.New(slog.DiscardHandler), MigrateLockTimeout: lockTimeout})
	if err != nil {
		return nil, err
	}
	defer st.Close()
	rows, err := st.Pool().Query(ctx, `SELECT version, name, applied_at FROM `+
		pgx.Identifier{st.Schema(), "redrive_migrations"}.Sanitize()+` ORDER BY version`)
	if err != nil {
		return nil, fmt.Errorf("postgres: list the migrations: %w", err)
	}
	ms, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (migration, error) {
		var m migration
		err := row.Scan(&m.Version, &m.Name, &m.AppliedAt)
		return m, err
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: list the migrations: %w", err)
	}
	rep := &migrateReport{Store: "postgres", Target: config.RedactURL(dbURL), Schema: st.Schema(), Applied: ms}
	for i := range rep.Applied {
		if !before[rep.Applied[i].Version] {
			rep.Applied[i].Now = true
			rep.AppliedNow++
		}
	}
	return rep, nil
}

// appliedBefore returns the versions already recorded in the schema's
// migrations table (none when the schema or the table does not exist).
func appliedBefore(ctx context.Context, dbURL, schema string) (map[int]bool, error) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return nil, fmt.Errorf("postgres: connect: %w", err)
	}
	defer conn.Close(ctx)
	table := pgx.Identifier{schema, "redrive_migrations"}.Sanitize()
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, table).Scan(&exists); err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	done := map[int]bool{}
	if !exists {
		return done, nil
	}
	rows, err := conn.Query(ctx, `SELECT version FROM `+table)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	vs, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	for _, v := range vs {
		done[v] = true
	}
	return done, nil
}

// redactURL hides the password of a URL (see config.RedactURL).
func redactURL(s string) string { return config.RedactURL(s) }
