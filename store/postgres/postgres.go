// Package postgres is redrive's PostgreSQL store, for when several
// machines share the work. It uses github.com/jackc/pgx/v5 (pgxpool).
//
// # Schema
//
// Every table lives in one PostgreSQL schema (Options.Schema, "redrive"
// by default), so one database can hold several independent stores. The
// schema is created and migrated by Open (unless Options.SkipMigrate) or
// by Migrate; migrations are embedded, recorded in
// <schema>.redrive_migrations and applied in one transaction under a
// transaction-scoped advisory lock, so that processes starting together
// do not race. A migration waits at most Options.MigrateLockTimeout for
// each lock it needs; some lock the jobs table while they scan it, so a
// store with many jobs is best migrated from a deploy step.
//
// The store needs a direct connection or a pooler in session mode: the
// elector's advisory lock and Listen's LISTEN live in a session, which a
// pooler in transaction mode (PgBouncer's pool_mode = transaction) does
// not keep.
//
// Payloads and policies are stored as bytea: the exact bytes given come
// back. Query them in SQL with convert_from(payload, 'UTF8')::jsonb. A
// job's history is a jsonb array. Times are timestamptz (microseconds).
// The database must use the UTF8 encoding.
//
// # Concurrency
//
// Fetch leases with FOR UPDATE SKIP LOCKED, so any number of workers on
// any number of machines lease each job once. Enqueue, Fetch and Finish
// are each one statement (one round trip) however many jobs they carry;
// an Enqueue with idempotency keys adds a transaction and, when a key is
// taken, one read of the jobs holding the keys. Statements that fail on
// a deadlock or a serialization failure are retried. Concurrent Enqueue
// calls are written together (group commit): the calls that arrive while
// a write runs are merged into the next one, one statement or transaction
// and one commit for them all, each call getting what it would have got
// alone (see group.go for why: PostgreSQL commits notifying transactions
// one at a time).
//
// The store relies on the READ COMMITTED isolation level: its sessions
// default to it (default_transaction_isolation is set on connect, over a
// database's, role's or URL's repeatable read or serializable) and every
// transaction it begins asks for it explicitly.
//
// # Notifications
//
// Whenever a commit adds or reschedules waiting jobs (Enqueue, EnqueueTx,
// the Retry, Snooze and Release outcomes of Finish, Redrive), the store
// sends pg_notify('<schema>_redrive', queue) in the same transaction, so
// the notification is delivered on commit. Listen receives them. The
// jobs a Finish releases (a workflow's dependents, its callbacks) are
// announced after its commit instead: to this process's engine by
// OnRelease, to the others by a NOTIFY sent apart (released.go).
//
// # Transactional enqueue
//
// EnqueueTx enqueues inside the caller's own pgx transaction: the jobs
// exist if and only if the caller commits.
package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/redrivehq/redrive/store"
)

//go:embed migrations/*.sql
var migrations embed.FS

// migrationFS holds the migrations Migrate applies (tests add some).
var migrationFS fs.FS = migrations

// DefaultMigrateLockTimeout is Options.MigrateLockTimeout's default.
const DefaultMigrateLockTimeout = 5 * time.Second

// DefaultSchema is the schema used when Options.Schema is empty.
const DefaultSchema = "redrive"

// Options tune the store. The zero value is the usual choice.
type Options struct {
	// Schema is the PostgreSQL schema holding the store's tables (default
	// "redrive"). It must be a lower-case identifier (letters, digits and
	// underscores, not starting with a digit) of at most 55 bytes, so
	// that the notification channel "<schema>_redrive" is a valid
	// channel name.
	Schema string
	// MaxConns bounds the connection pool (0: the URL's pool_max_conns,
	// or pgxpool's default of max(4, number of CPUs)). Listen uses one
	// more connection of its own.
	MaxConns int
	// Logger receives the store's logs (default slog.Default()).
	Logger *slog.Logger
	// SkipMigrate leaves the schema alone on Open: by default Open
	// creates the schema and applies any missing migration. With
	// SkipMigrate, Open fails unless every migration was already applied
	// (run Migrate, or Open without SkipMigrate, from a deploy step).
	SkipMigrate bool
	// MigrateLockTimeout bounds how long a migration waits for each lock
	// it needs on the store's tables (lock_timeout; default
	// DefaultMigrateLockTimeout, negative: no bound). A migration that
	// alters jobs waits for every transaction using jobs to end, and every
	// statement on jobs queued behind it waits too: a long transaction
	// (a report, an EnqueueTx of a slow caller) would stall the whole
	// fleet. Past the bound the migration fails, leaving the schema as it
	// was, and Open or Migrate returns an error saying so: try again.
	MigrateLockTimeout time.Duration
	// Payloads, when set, encrypts payloads at rest: the store seals
	// every payload it writes and opens every payload it reads (see
	// store.PayloadCodec). Without it, a sealed payload reads as
	// undecryptable (Job.PayloadError).
	Payloads store.PayloadCodec
}

// Store is a store.Store on PostgreSQL. It is safe for concurrent use.
type Store struct {
	// prefixFew is errorPrefixFew, which tests lower to take the other
	// plan of a listing by error prefix.
	prefixFew int
	// payloads seals and opens payloads (Options.Payloads); nil: none.
	payloads store.PayloadCodec
	pool     *pgxpool.Pool
	schema   string // unquoted
	channel  string // notification channel
	log      *slog.Logger
	sql      statements
	// lockTimeout is Options.MigrateLockTimeout (0: none).
	lockTimeout time.Duration
	// fold is appended to lower()'s arguments for case-insensitive
	// matching: "" when the database's collation folds Unicode, or an
	// explicit ICU collation.
	fold string

	// group merges concurrent Enqueue calls (group.go).
	group enqueueGroup
	// released announces the jobs Finish released (released.go).
	released releases
	// limitHints says which queues may have due limited jobs (limits.go).
	limitHints limitHints
	// fairHints says which queues have fair jobs, fairCursors where each
	// queue's round robin over its fair keys stopped (fairshare.go).
	fairHints   store.FairHints
	fairCursors store.FairCursors
	// ratePrunes counts the limited leases, to prune limit_rates now and
	// then (limits.go).
	ratePrunes atomic.Int64
	// slotTakes counts the takes of limit slots, to prune every ended
	// slot now and then (limits.go).
	slotTakes atomic.Int64

	// Test hooks, set before the calls they watch: listenPinged is
	// called after each ping of an idle listening connection;
	// electRound, at the end of each round of an election (Elect) with
	// whether the store then leads.
	listenPinged func()
	electRound   func(role string, leading bool)
	// finishStatement is called before each Finish statement with
	// whether it is the statement complete (plain completions) and the
	// number of outcomes it takes.
	finishStatement func(complete bool, outcomes int)

	// analyze checks the jobs table's statistics now and then
	// (analyze.go).
	analyze analyzer

	closed atomic.Bool
	// done is canceled by Close; it stops Listen.
	done       context.Context
	cancelDone context.CancelFunc
}

var (
	_ store.Store             = (*Store)(nil)
	_ store.PayloadCodecStore = (*Store)(nil)
)

var schemaRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,54}$`)

// Open connects to the database at url (a PostgreSQL URL or key=value
// connection string, as pgx accepts), applies the embedded migrations
// unless opts.SkipMigrate, and returns the store.
func Open(ctx context.Context, url string, opts Options) (*Store, error) {
	schema := opts.Schema
	if schema == "" {
		schema = DefaultSchema
	}
	if !schemaRE.MatchString(schema) {
		return nil, fmt.Errorf("postgres: schema %q: want a lower-case identifier (a-z, 0-9, _; not starting with a digit) of at most 55 bytes", schema)
	}
	if opts.MaxConns < 0 || opts.MaxConns > 1<<20 {
		return nil, fmt.Errorf("postgres: MaxConns %d out of range", opts.MaxConns)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	switch {
	case opts.MigrateLockTimeout == 0:
		opts.MigrateLockTimeout = DefaultMigrateLockTimeout
	case opts.MigrateLockTimeout < 0:
		opts.MigrateLockTimeout = 0
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("postgres: parse connection string: %w", err)
	}
	if opts.MaxConns > 0 {
		cfg.MaxConns = int32(opts.MaxConns)
	}
	// Every statement the store runs outside a transaction of its own
	// (most of them) is a transaction of its own, at the session's
	// default isolation: set it to what the store relies on (see
	// readCommitted), over the database's, the role's or the URL's. It is
	// set once connected, not as a startup parameter: a pooler in session
	// mode (PgBouncer) refuses startup parameters it does not know.
	// Every connection of the store (the pool's, Listen's, the
	// elector's) is made from this configuration.
	after := cfg.ConnConfig.AfterConnect
	cfg.ConnConfig.AfterConnect = func(ctx context.Context, c *pgconn.PgConn) error {
		if after != nil {
			if err := after(ctx, c); err != nil {
				return err
			}
		}
		return c.Exec(ctx, `SET default_transaction_isolation = 'read committed'`).Close()
	}
	if cfg.ConnConfig.RuntimeParams["application_name"] == "" {
		cfg.ConnConfig.RuntimeParams["application_name"] = "redrive"
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: connect: %w", err)
	}
	done, cancel := context.WithCancel(context.Background())
	s := &Store{
		prefixFew:   errorPrefixFew,
		payloads:    opts.Payloads,
		pool:        pool,
		schema:      schema,
		channel:     schema + "_redrive",
		log:         opts.Logger,
		lockTimeout: opts.MigrateLockTimeout,
		done:        done,
		cancelDone:  cancel,
	}
	s.sql = render(pgx.Identifier{schema}.Sanitize(), s.channel)
	s.initReleases(pgx.Identifier{schema}.Sanitize())
	if opts.SkipMigrate {
		err = s.checkMigrated(ctx)
	} else {
		err = s.Migrate(ctx)
	}
	if err == nil {
		err = s.detectFold(ctx)
	}
	if err != nil {
		cancel()
		pool.Close()
		return nil, err
	}
	return s, nil
}

// Schema returns the schema holding the store's tables.
func (s *Store) Schema() string { return s.schema }

// Channel returns the notification channel the store notifies on and
// Listen listens to: "<schema>_redrive".
func (s *Store) Channel() string { return s.channel }

// Pool returns the store's connection pool, for callers that want to
// begin their own transactions for EnqueueTx. Do not close it: Close does.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// migration is one embedded migration file.
type migration struct {
	version int
	name    string
}

func embeddedMigrations() ([]migration, error) {
	entries, err := fs.ReadDir(migrationFS, "migrations")
	if err != nil {
		return nil, err
	}
	var out []migration
	for _, e := range entries {
		name := e.Name()
		v, err := strconv.Atoi(strings.SplitN(name, "_", 2)[0])
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %s: name must start with a positive number", name)
		}
		out = append(out, migration{version: v, name: name})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].version < out[j].version })
	return out, nil
}

// lockKey is the advisory lock key that serializes the migrations of one
// schema.
func lockKey(schema string) int64 {
	h := fnv.New64a()
	h.Write([]byte("redrive:migrate:" + schema))
	return int64(h.Sum64())
}

// Migrate creates the schema if needed and applies the embedded
// migrations not yet applied, in one transaction under an advisory lock
// (pg_advisory_xact_lock), so that concurrent callers apply each
// migration once. It is called by Open unless Options.SkipMigrate.
func (s *Store) Migrate(ctx context.Context) error {
	if err := s.check(); err != nil {
		return err
	}
	ms, err := embeddedMigrations()
	if err != nil {
		return fmt.Errorf("postgres: migrate: %w", err)
	}
	schema := pgx.Identifier{s.schema}.Sanitize()
	var applied []string
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		applied = applied[:0]
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, lockKey(s.schema)); err != nil {
			return err
		}
		// Set once the advisory lock is held: waiting for another process's
		// migrations is not bounded.
		if s.lockTimeout > 0 {
			// In whole milliseconds, rounded up (0 would mean no bound),
			// at most the largest the server takes (~24 days).
			ms := min((s.lockTimeout+time.Millisecond-1)/time.Millisecond, math.MaxInt32)
			if _, err := tx.Exec(ctx, fmt.Sprintf(`SET LOCAL lock_timeout = %d`, ms)); err != nil {
				return err
			}
		}
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, s.schema).Scan(&exists); err != nil {
			return err
		}
		if !exists {
			if _, err := tx.Exec(ctx, `CREATE SCHEMA `+schema); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+schema+`.redrive_migrations (
			version    integer     PRIMARY KEY,
			name       text        NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
			return err
		}
		done, err := s.appliedVersions(ctx, tx)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SET LOCAL search_path TO `+schema); err != nil {
			return err
		}
		for _, m := range ms {
			if done[m.version] {
				continue
			}
			body, err := fs.ReadFile(migrationFS, "migrations/"+m.name)
			if err != nil {
				return err
			}
			// No arguments: pgx runs it with the simple protocol, which
			// accepts several statements.
			if _, err := tx.Exec(ctx, string(body)); err != nil {
				var pe *pgconn.PgError
				if errors.As(err, &pe) && pe.Code == "55P03" { // lock_not_available
					return fmt.Errorf("migration %s: waited %v for a lock held by another transaction, and gave up so as not to stall the statements queued behind it (nothing was applied; try again, or raise Options.MigrateLockTimeout): %w",
						m.name, s.lockTimeout, err)
				}
				return fmt.Errorf("migration %s: %w", m.name, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO `+schema+`.redrive_migrations (version, name) VALUES ($1, $2)`, m.version, m.name); err != nil {
				return fmt.Errorf("migration %s: %w", m.name, err)
			}
			applied = append(applied, m.name)
		}
		return s.bindCountFunctions(ctx, tx)
	})
	if err != nil {
		return s.fail("migrate", err)
	}
	for _, name := range applied {
		s.log.Info("postgres: applied migration", "migration", name, "schema", s.schema)
	}
	return nil
}

// bindCountFunctions points the job-count trigger functions (migration
// 0011) at the store's schema. They find job_counts by their search_path,
// which is the schema's name when the migration ran: after the schema is
// renamed they would look for it in the old one, and every write of jobs
// would fail. Run by Migrate, which Open runs. A function already bound
// is left alone: its search_path is stored as quote_ident writes the
// schema (quoted when it is a keyword such as "order").
func (s *Store) bindCountFunctions(ctx context.Context, tx pgx.Tx) error {
	rows, err := tx.Query(ctx, `SELECT p.oid::regprocedure::text FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
		WHERE n.nspname = $1 AND p.proname LIKE 'job\_counts\_%' AND NOT coalesce(p.proconfig, '{}') @> ARRAY['search_path=' || quote_ident($1)]`, s.schema)
	if err != nil {
		return err
	}
	fns, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, fn := range fns {
		if _, err := tx.Exec(ctx, `ALTER FUNCTION `+fn+` SET search_path = `+pgx.Identifier{s.schema}.Sanitize()); err != nil {
			return fmt.Errorf("bind %s to schema %s: %w", fn, s.schema, err)
		}
	}
	return nil
}

func (s *Store) appliedVersions(ctx context.Context, q querier) (map[int]bool, error) {
	rows, err := q.Query(ctx, `SELECT version FROM `+pgx.Identifier{s.schema, "redrive_migrations"}.Sanitize())
	if err != nil {
		return nil, err
	}
	done := map[int]bool{}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			rows.Close()
			return nil, err
		}
		done[v] = true
	}
	return done, rows.Err()
}

// checkMigrated fails unless every embedded migration was applied.
func (s *Store) checkMigrated(ctx context.Context) error {
	ms, err := embeddedMigrations()
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	done, err := s.appliedVersions(ctx, s.pool)
	if err != nil {
		return fmt.Errorf("postgres: schema %q is not migrated (run Migrate): %w", s.schema, err)
	}
	for _, m := range ms {
		if !done[m.version] {
			return fmt.Errorf("postgres: schema %q lacks migration %s (run Migrate)", s.schema, m.name)
		}
	}
	return nil
}

// detectFold finds how to lower-case Unicode text in this database:
// lower() folds only ASCII under the "C" collation, so ErrorContains then
// uses the ICU root collation if the server has it.
func (s *Store) detectFold(ctx context.Context) error {
	const probe = `SELECT lower('ÀÉÎÕÜЖ'%[1]s) = 'àéîõüж'`
	var ok bool
	if err := s.pool.QueryRow(ctx, fmt.Sprintf(probe, "")).Scan(&ok); err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	if ok {
		return nil
	}
	icu := ` COLLATE "und-x-icu"`
	if err := s.pool.QueryRow(ctx, fmt.Sprintf(probe, icu)).Scan(&ok); err == nil && ok {
		s.fold = icu
		return nil
	}
	s.log.Warn("postgres: the database collation folds only ASCII and ICU is not available: error text filters will match other letters case-sensitively",
		"schema", s.schema)
	return nil
}

// Close closes the pool (waiting for the calls in progress) and stops
// Listen. Calls after Close return store.ErrClosed; Close itself may be
// called again.
func (s *Store) Close() error {
	if !s.closed.CompareAndSwap(false, true) {
		return nil
	}
	s.cancelDone()
	s.stopAnalyze()
	s.stopAnnouncing()
	s.pool.Close()
	return nil
}

// check returns ErrClosed once the store is closed.
func (s *Store) check() error {
	if s.closed.Load() {
		return fmt.Errorf("postgres: %w", store.ErrClosed)
	}
	return nil
}

// fail wraps err for the operation op, reporting ErrClosed when the
// store was closed under the call.
func (s *Store) fail(op string, err error) error {
	if s.closed.Load() && !errors.Is(err, store.ErrClosed) {
		return fmt.Errorf("postgres: %s: %w (%v)", op, store.ErrClosed, err)
	}
	if kind := unavailability(err); kind != nil {
		return fmt.Errorf("postgres: %s: %w: %w", op, kind, err)
	}
	return fmt.Errorf("postgres: %s: %w", op, err)
}

// unavailability says whether err means the database cannot take the
// call now (store.ErrUnavailable: unreachable, shutting down, starting,
// out of connections), has no room (store.ErrFull) or cannot be written
// (store.ErrReadOnly); nil otherwise.
func unavailability(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case pe.Code == "53100": // disk_full
			return store.ErrFull
		case pe.Code == "25006": // read_only_sql_transaction (a standby)
			return store.ErrReadOnly
		case strings.HasPrefix(pe.Code, "57P"), strings.HasPrefix(pe.Code, "08"), pe.Code == "53300": // shutdown, connection, too many connections
			return store.ErrUnavailable
		}
		return nil
	}
	var ce *pgconn.ConnectError
	var ne net.Error
	if errors.As(err, &ce) || errors.As(err, &ne) || pgconn.SafeToRetry(err) || errors.Is(err, io.ErrUnexpectedEOF) ||
		strings.Contains(err.Error(), "conn closed") {
		return store.ErrUnavailable
	}
	return nil
}

// querier is what pgxpool.Pool, pgx.Conn and pgx.Tx have in common.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// readCommitted is the isolation level of every transaction the store
// begins, set explicitly whatever the server's default
// (default_transaction_isolation, which a DBA may set to repeatable read
// on the database or the role, or a URL in its options). The store relies
// on each statement seeing what committed before it: Migrate reads the
// catalog after waiting for the advisory lock, the enqueue of idempotency
// keys reads the kept keys after its insert, and the statements that lock
// rows FOR UPDATE work on the latest version of each row. Under a
// snapshot taken at the first statement these fail (a schema created by
// another process "already exists") or answer wrong (a kept key answered
// by a second job).
var readCommitted = pgx.TxOptions{IsoLevel: pgx.ReadCommitted}

// inTx runs fn in a transaction of the pool at readCommitted, committed
// when fn returns nil and rolled back otherwise.
func (s *Store) inTx(ctx context.Context, fn func(pgx.Tx) error) error {
	return pgx.BeginTxFunc(ctx, s.pool, readCommitted, fn)
}

// retryable reports errors after which the whole statement or
// transaction can simply run again: deadlocks and serialization failures.
func retryable(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code == "40P01" || pe.Code == "40001"
	}
	return false
}

// retry runs fn, which must be atomic (one statement or one transaction
// of its own), again after a deadlock or a serialization failure.
func (s *Store) retry(ctx context.Context, fn func() error) error {
	for attempt := 0; ; attempt++ {
		err := fn()
		if err == nil || attempt >= 6 || !retryable(err) || ctx.Err() != nil {
			return err
		}
		d := time.Duration(1<<attempt) * time.Millisecond
		d += rand.N(d)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// counterShards is how many rows share each (queue, name) counter.
const counterShards = 16

func shard() int16 { return int16(rand.IntN(counterShards)) }

// Listen listens for the store's notifications on a dedicated connection
// (not taken from the pool) and calls fn with the queue of each; it
// blocks until ctx is done (returning ctx.Err()) or the store is closed
// (returning an error wrapping store.ErrClosed).
//
// fn is also called with the empty string each time the listener has
// (re)connected, the first time included: notifications sent while it was
// not listening are lost, so the caller should then check every queue.
// When the connection drops, Listen reconnects with exponential backoff
// (100 ms doubling to 30 s), logging each attempt. fn runs on Listen's
// goroutine and should return quickly.
func (s *Store) Listen(ctx context.Context, fn func(queue string)) error {
	if err := s.check(); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(s.done, cancel)
	defer stop()
	const minBackoff, maxBackoff = 100 * time.Millisecond, 30 * time.Second
	backoff := minBackoff
	for {
		conn, err := s.listenConn(ctx)
		if err == nil {
			backoff = minBackoff
			fn("")
			err = s.receive(ctx, conn, fn)
			closeCtx, cancelClose := context.WithTimeout(context.Background(), 5*time.Second)
			conn.Close(closeCtx)
			cancelClose()
		}
		if ctx.Err() != nil {
			return s.listenEnd(ctx)
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		s.log.Warn("postgres: listen connection lost, reconnecting", "channel", s.channel, "error", err, "retry_in", wait)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return s.listenEnd(ctx)
		case <-t.C:
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// listenEnd is Listen's result once its context is done.
func (s *Store) listenEnd(ctx context.Context) error {
	if s.done.Err() != nil {
		return fmt.Errorf("postgres: listen: %w", store.ErrClosed)
	}
	return ctx.Err()
}

// listenConn opens a connection and LISTENs on the store's channel.
func (s *Store) listenConn(ctx context.Context) (*pgx.Conn, error) {
	cfg := s.pool.Config().ConnConfig.Copy()
	// A canceled wait only interrupts the read: no cancel request is
	// sent to the server, and the connection stays usable.
	cfg.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.DeadlineContextWatcherHandler{Conn: c.Conn()}
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{s.channel}.Sanitize()); err != nil {
		conn.Close(context.Background())
		return nil, err
	}
	return conn, nil
}

// listenIdle is how long Listen waits for a notification before it
// pings its connection, in nanoseconds (atomic: tests shorten it while
// listeners of earlier tests may still be winding down).
var listenIdle atomic.Int64

func init() { listenIdle.Store(int64(30 * time.Second)) }

// receive hands notifications to fn until the connection fails or ctx is
// done. An idle connection is pinged every 30 s, so that a connection
// lost without a word is noticed.
func (s *Store) receive(ctx context.Context, conn *pgx.Conn, fn func(string)) error {
	return s.receiveOn(ctx, conn, s.channel, fn)
}
