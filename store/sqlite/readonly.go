package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
)

// openReadOnly opens the database at path for reading only (see
// Options.ReadOnly).
func openReadOnly(ctx context.Context, path string, opts Options) (*Store, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("sqlite: open %s read-only: %w", path, err)
	}
	dsn := func(immutable bool) string {
		v := url.Values{}
		v.Add("_pragma", "busy_timeout("+strconv.FormatInt(max(opts.BusyTimeout.Milliseconds(), 1), 10)+")")
		v.Add("_pragma", "query_only(1)")
		v.Add("_pragma", "cache_size(-16000)")
		v.Add("_pragma", "temp_store(memory)")
		v.Set("mode", "ro")
		if immutable {
			v.Set("immutable", "1")
		}
		return "file:" + path + "?" + v.Encode()
	}
	r, err := sql.Open("sqlite", dsn(false))
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s read-only: %w", path, err)
	}
	applied, err := appliedMigrations(ctx, r)
	if err != nil && isCantOpen(err) {
		// SQLite could not create the -shm file: the folder is read-only.
		r.Close()
		if st, serr := os.Stat(path + "-wal"); serr == nil && st.Size() > 0 {
			return nil, fmt.Errorf("%w: %s-wal holds changes not yet in %s, and SQLite cannot create %s-shm to read them (the folder is read-only): "+
				"copy the database's files to a writable folder, or open it once read-write (which writes the log back into the database)",
				ErrUnreadableWAL, path, path, path)
		}
		// No write-ahead log: the database file holds everything, and
		// nothing can write to it in a folder where no -wal can be made.
		opts.Logger.Debug("sqlite: the database's folder is read-only; reading it as immutable", "path", path)
		if r, err = sql.Open("sqlite", dsn(true)); err != nil {
			return nil, fmt.Errorf("sqlite: open %s read-only: %w", path, err)
		}
		applied, err = appliedMigrations(ctx, r)
	}
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("sqlite: open %s read-only: %w", path, err)
	}
	if missing := missingMigrations(applied); len(missing) > 0 {
		r.Close()
		return nil, fmt.Errorf("%w: %s lacks migration %s: open it read-write once (any redrive command that writes, or redrive migrate) to upgrade it",
			ErrSchemaOutdated, path, strings.Join(missing, ", "))
	}
	r.SetMaxOpenConns(opts.ReadConns)
	r.SetMaxIdleConns(opts.ReadConns)
	// The writer's handle is one more read-only connection: nothing
	// writes through it (send refuses), and no writer goroutine runs.
	w, err := sql.Open("sqlite", dsn(false))
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("sqlite: open %s read-only: %w", path, err)
	}
	w.SetMaxOpenConns(1)
	s := &Store{limitIdle: limitIdle{}, path: path, payloads: opts.Payloads, w: w, r: r, log: opts.Logger, readOnly: true,
		ops: make(chan *op), bulk: make(chan *op), maxB: opts.MaxBatch, bulkRows: opts.EnqueueRows,
		stmts: map[string]*sql.Stmt{}, reads: map[string]*sql.Stmt{}, multi: map[int]*sql.Stmt{}, done: make(chan struct{}), busyTimeout: opts.BusyTimeout}
	close(s.done)
	if s.readByIDs, err = r.PrepareContext(ctx, `SELECT `+leasedColumns+` FROM jobs WHERE id IN (SELECT value FROM json_each(?))`); err != nil {
		s.closeDBs()
		return nil, fmt.Errorf("sqlite: prepare: %w", err)
	}
	return s, nil
}

// isCantOpen reports SQLite's SQLITE_CANTOPEN (14).
func isCantOpen(err error) bool {
	return err != nil && strings.Contains(err.Error(), "(14)")
}

// appliedMigrations reads the versions of the migrations the database
// has.
func appliedMigrations(ctx context.Context, db *sql.DB) (map[int]bool, error) {
	rows, err := db.QueryContext(ctx, `SELECT version FROM redrive_migrations`)
	if err != nil {
		if strings.Contains(err.Error(), "no such table") {
			return map[int]bool{}, nil
		}
		return nil, err
	}
	defer rows.Close()
	out := map[int]bool{}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out[v] = true
	}
	return out, rows.Err()
}

// missingMigrations names the migrations of this build that applied
// lacks.
func missingMigrations(applied map[int]bool) []string {
	entries, err := fs.ReadDir(migrations, "migrations")
	if err != nil {
		return []string{err.Error()}
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Name() < entries[j].Name() })
	var out []string
	for _, e := range entries {
		v, err := strconv.Atoi(strings.SplitN(e.Name(), "_", 2)[0])
		if err != nil || !applied[v] {
			out = append(out, e.Name())
		}
	}
	return out
}
