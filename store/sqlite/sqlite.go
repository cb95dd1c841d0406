// Package sqlite is redrive's embedded store: one SQLite file, no set-up,
// pure Go (modernc.org/sqlite, no cgo).
//
// The database runs in WAL mode with synchronous=FULL by default, so an
// acknowledged enqueue survives a crash of the process or of the machine.
// All writes go through one writer goroutine that groups the writes of
// many callers into one transaction (group commit): throughput is not
// capped by one fsync per job. The workers' writes (fetch, finish) go
// before enqueues, so a bulk import slows down rather than the work
// already due. Reads use a separate pool of connections
// and never wait for the writer.
package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redrivehq/redrive/store"

	"modernc.org/sqlite" // registers the "sqlite" database/sql driver
)

func init() {
	// redrive_contains_fold(haystack, needle) matches case-insensitively
	// with Unicode case folding (SQLite's lower() folds ASCII only).
	sqlite.MustRegisterDeterministicScalarFunction("redrive_contains_fold", 2,
		func(_ *sqlite.FunctionContext, args []driver.Value) (driver.Value, error) {
			h, _ := args[0].(string)
			n, _ := args[1].(string)
			if b, ok := args[0].([]byte); ok {
				h = string(b)
			}
			return containsFold(h, n), nil
		})
}

// containsFold reports whether needle occurs in haystack, ignoring case.
func containsFold(haystack, needle string) bool {
	if needle == "" {
		return true
	}
	return strings.Contains(strings.ToLower(haystack), strings.ToLower(needle))
}

//go:embed migrations/*.sql
var migrations embed.FS

// Options tune the store. The zero value is the safe default.
type Options struct {
	// Synchronous is SQLite's synchronous setting: "full" (default: every
	// commit is fsynced, an acknowledged write survives power loss) or
	// "normal" (survives a crash of the process, not of the machine).
	Synchronous string
	// MaxBatch bounds how many write requests share one transaction
	// (default 512).
	MaxBatch int
	// ReadConns is the size of the read pool (default 4).
	ReadConns int
	// CheckpointPages is how many pages the write-ahead log may hold
	// before SQLite copies them back into the database (default 10000,
	// about 40 MB). A queue rewrites the same pages over and over; a
	// larger interval copies each of them once instead of many times.
	CheckpointPages int
	// EnqueueRows bounds the jobs that enqueue requests add to one write
	// transaction while no worker is busy (default 512; one request is
	// always taken whole, however large). Enqueues yield to the workers:
	// while they fetch and finish jobs, a transaction takes at most one
	// enqueue request, and at least every other one takes none, so a
	// flood of enqueues slows itself down rather than the work already
	// due (see writer.go).
	EnqueueRows int
	// BusyTimeout is how long a connection waits for a lock another
	// process holds on the database (default 10s). A write that waits
	// longer fails with store.ErrUnavailable, and so does every request
	// of its transaction, at once (the API answers them 503 with
	// Retry-After); WriteHealth reports it until a transaction takes the
	// lock again. Reads, which in WAL mode do not wait for a writer,
	// return SQLite's error as it is.
	BusyTimeout time.Duration
	// Logger receives the store's logs (default slog.Default()).
	Logger *slog.Logger
	// ReadOnly opens an existing database for reading only, as the
	// CLI's listings do: SQLite opens the file read-only (mode=ro), no
	// migration runs (a database whose schema lacks one of this
	// build's migrations is refused, ErrSchemaOutdated), no lock file is
	// created, and every write fails with ErrReadOnly. A database whose
	// folder cannot be written (a read-only mount, a copy whose folder
	// is immutable) is read as well: when SQLite cannot create the
	// shared-memory file (-shm) the write-ahead log needs and the
	// database has no write-ahead log to read (its -wal file is absent
	// or empty, as after a clean close), it is opened immutable, which
	// is exact then since nothing can write to it; when it has one,
	// whose content SQLite cannot read without that file, Open refuses
	// with ErrUnreadableWAL rather than show stale data.
	ReadOnly bool
	// Payloads, when set, encrypts payloads at rest: the store seals
	// every payload it writes and opens every payload it reads (see
	// store.PayloadCodec). Without it, a sealed payload reads as
	// undecryptable (Job.PayloadError).
	Payloads store.PayloadCodec
}

// ErrReadOnly is the error of a write to a store opened with
// Options.ReadOnly.
var ErrReadOnly = errors.New("sqlite: the database is open read-only: this needs a read-write store")

// ErrSchemaOutdated is the error of a read-only Open of a database whose
// schema lacks migrations this build has.
var ErrSchemaOutdated = errors.New("sqlite: the database's schema is older than this build")

// ErrUnreadableWAL is the error of a read-only Open of a database whose
// write-ahead log cannot be read: its folder does not let SQLite create
// the shared-memory file the log needs.
var ErrUnreadableWAL = errors.New("sqlite: the database's write-ahead log cannot be read read-only")

// Store is a store.Store on a SQLite file.
type Store struct {
	// prefixFew is errorPrefixFew, which tests lower to take the other
	// plan of a listing by error prefix.
	prefixFew int
	path      string
	// released collects the queues of the jobs a transaction released
	// from blocked, and releaseID numbers the store for the trigger that
	// reports them (released.go).
	released  releases
	releaseID int64
	// payloads seals and opens payloads (Options.Payloads); nil: none.
	payloads store.PayloadCodec
	// limitIdle says which queues' fetches skip the selection of
	// limited jobs (limits.go); the writer goroutine's.
	limitIdle limitIdle
	// ratePrune counts the limited leases, to prune limit_rates now and
	// then (writer goroutine only).
	ratePrune int
	// slotTakes counts the takes of limit slots, to prune every ended
	// slot now and then (limits.go).
	slotTakes int
	// sel is the last selection of limited jobs (limits.go; writer
	// goroutine only).
	sel limitedSel
	// slotWait is whether the last selection of limited jobs saw a due
	// one waiting on a full group (FetchParams.SlotWait; writer
	// goroutine only).
	slotWait bool
	// fair is where each queue's round robin over its fair keys stopped
	// (fairshare.go).
	fair      store.FairCursors
	fairHints store.FairHints
	// lastWrite is the error of the last write transaction, nil after a
	// success (see WriteHealth).
	lastWrite atomic.Pointer[error]
	w         *sql.DB
	wconn     *sql.Conn
	r         *sql.DB
	log       *slog.Logger
	ops       chan *op // work requests: everything but Enqueue
	bulk      chan *op // Enqueue requests, which yield to ops
	maxB      int
	bulkRows  int
	// onBatch, when set (by tests), is called by the writer with the
	// composition of each transaction before it runs.
	onBatch func(work, enqueues, rows int)
	// onBegin, when set (by tests), is called by the writer before each
	// BEGIN.
	onBegin func()
	// onLocked, when set (by tests), is called by the writer once BEGIN
	// IMMEDIATE took the write lock.
	onLocked func()
	// onAwaitFetch, when set (by tests), is called by the writer as it
	// begins to wait for the next fetch (writer.go), with the requests it
	// holds.
	onAwaitFetch func(held int)
	// stmts are the statements of writeSQL prepared so far on the
	// writer connection, each on its first use (stmt), under stmtsMu.
	stmtsMu sync.Mutex
	stmts   map[string]*sql.Stmt
	// reads are the polled statements of readSQL prepared so far on the
	// read pool (readStmt), under stmtsMu.
	reads map[string]*sql.Stmt
	// readByIDs reads the jobs Fetch leased by a JSON array of their ids
	// on the read pool.
	readByIDs *sql.Stmt
	multi     map[int]*sql.Stmt // multi-row inserts by row count (negative: a workflow's members); writer goroutine only
	// turns are the locks the stores of the file take turns at the
	// write lock with (nil: no turns, see turn.go); writer goroutine
	// only, until Close.
	turns       *turns
	busyTimeout time.Duration
	synchronous string       // "full" or "normal", as the writer commits
	mu          sync.RWMutex // guards closed against sends on ops
	closed      bool
	done        chan struct{}
	// readOnly is Options.ReadOnly: no writer goroutine runs, and every
	// write fails with ErrReadOnly.
	readOnly bool
	// fetchedFull is set by a fetch that leased as many jobs as it asked
	// for, in the transaction the writer just ran (writer goroutine only,
	// see writer.go); nextFetchWait bounds how long the writer then waits
	// for the next fetch (fetchFollowWait; tests change it).
	fetchedFull   bool
	nextFetchWait atomic.Int64
}

var (
	_ store.Store             = (*Store)(nil)
	_ store.PayloadCodecStore = (*Store)(nil)
)

// op is one write request handled by the writer goroutine.
type op struct {
	ctx  context.Context
	fn   func(tx *sql.Conn) error
	done chan error
	// rows is the number of jobs an enqueue request adds (0: a work
	// request).
	rows int
	// fetch marks a Fetch: it ends the writer's wait for the next fetch
	// (see writer.go).
	fetch bool
}

// Open opens (creating if needed) the database at path, applies the
// embedded migrations, and starts the writer.
func Open(ctx context.Context, path string, opts Options) (*Store, error) {
	if path == "" {
		return nil, fmt.Errorf("sqlite: empty database path")
	}
	sync := strings.ToLower(opts.Synchronous)
	switch sync {
	case "":
		sync = "full"
	case "full", "normal":
	default:
		return nil, fmt.Errorf("sqlite: synchronous must be \"full\" or \"normal\", not %q", opts.Synchronous)
	}
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = 512
	}
	if opts.ReadConns <= 0 {
		opts.ReadConns = 4
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.EnqueueRows <= 0 {
		opts.EnqueueRows = 512
	}
	if opts.CheckpointPages <= 0 {
		opts.CheckpointPages = 10000
	}
	if opts.BusyTimeout <= 0 {
		opts.BusyTimeout = 10 * time.Second
	}
	if opts.ReadOnly {
		return openReadOnly(ctx, path, opts)
	}
	pragmas := []string{
		"busy_timeout(" + strconv.FormatInt(max(opts.BusyTimeout.Milliseconds(), 1), 10) + ")",
		"journal_mode(WAL)",
		"synchronous(" + sync + ")",
		"foreign_keys(on)",
		// A workflow's cancel cascades down its graph by the trigger
		// jobs_flow firing itself (migration 0032).
		"recursive_triggers(on)",
		// 8 MB of page cache per connection. The driver's allocator
		// gives each 4 KiB page (and its header) an 8 KiB slot: the
		// cache costs twice its size in resident memory. 16 MB (32 MB
		// resident) was most of the 100 MiB that inserting ten
		// million jobs peaked at; the insert appends, and runs as fast
		// with 8 MB (BENCHMARKS.md, "Depth: 10,000,000 waiting jobs").
		"cache_size(-8000)",
		"temp_store(memory)",
		"wal_autocheckpoint(" + strconv.Itoa(opts.CheckpointPages) + ")",
	}
	dsn := func(extra ...string) string {
		v := url.Values{}
		for _, p := range append(pragmas, extra...) {
			v.Add("_pragma", p)
		}
		v.Set("_txlock", "immediate")
		return "file:" + path + "?" + v.Encode()
	}
	w, err := sql.Open("sqlite", dsn())
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	wconn, err := w.Conn(ctx)
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	s := &Store{limitIdle: limitIdle{},
		prefixFew:   errorPrefixFew,
		synchronous: sync,
		path:        path,
		payloads:    opts.Payloads,
		w:           w,
		wconn:       wconn,
		log:         opts.Logger,
		ops:         make(chan *op, opts.MaxBatch),
		bulk:        make(chan *op, opts.MaxBatch),
		maxB:        opts.MaxBatch,
		bulkRows:    opts.EnqueueRows,
		stmts:       map[string]*sql.Stmt{},
		reads:       map[string]*sql.Stmt{},
		multi:       map[int]*sql.Stmt{},
		done:        make(chan struct{}),

		busyTimeout: opts.BusyTimeout,
	}
	file, err := dbFile(ctx, wconn)
	if err == nil {
		s.turns, err = openTurns(file)
	}
	if err != nil {
		s.log.Warn("sqlite: writing without taking turns with other processes at the write lock", "path", path, "error", err)
	}
	if err := s.migrate(ctx); err != nil {
		s.turns.close()
		wconn.Close()
		w.Close()
		return nil, err
	}
	if err := s.watchReleases(ctx); err != nil {
		s.turns.close()
		wconn.Close()
		w.Close()
		return nil, err
	}
	r, err := sql.Open("sqlite", dsn("query_only(1)"))
	if err != nil {
		s.turns.close()
		wconn.Close()
		w.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	r.SetMaxOpenConns(opts.ReadConns)
	r.SetMaxIdleConns(opts.ReadConns)
	s.r = r
	if s.readByIDs, err = r.PrepareContext(ctx, `SELECT `+leasedColumns+` FROM jobs WHERE id IN (SELECT value FROM json_each(?))`); err != nil {
		s.closeDBs()
		return nil, fmt.Errorf("sqlite: prepare: %w", err)
	}
	s.nextFetchWait.Store(int64(fetchFollowWait))
	go s.writer()
	return s, nil
}

// Path returns the database file's path.
func (s *Store) Path() string { return s.path }

func (s *Store) migrate(ctx context.Context) error {
	if _, err := s.wconn.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS redrive_migrations (
		version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)`); err != nil {
		return fmt.Errorf("sqlite: migrate: %w", err)
	}
	entries, err := fs.ReadDir(migrations, "migrations")
	if err != nil {
		return fmt.Errorf("sqlite: migrate: %w", err)
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Name() < entries[j].Name() })
	for _, e := range entries {
		name := e.Name()
		v, err := strconv.Atoi(strings.SplitN(name, "_", 2)[0])
		if err != nil {
			return fmt.Errorf("sqlite: migration %s: name must start with a number", name)
		}
		var n int
		if err := s.wconn.QueryRowContext(ctx, `SELECT count(*) FROM redrive_migrations WHERE version = ?`, v).Scan(&n); err != nil {
			return fmt.Errorf("sqlite: migrate: %w", err)
		}
		if n > 0 {
			continue
		}
		body, err := migrations.ReadFile("migrations/" + name)
		if err != nil {
			return fmt.Errorf("sqlite: migrate: %w", err)
		}
		if err := s.applyMigration(ctx, v, name, string(body)); err != nil {
			return err
		}
		s.log.Info("sqlite: applied migration", "migration", name, "path", s.path)
	}
	return nil
}

// applyMigration applies one migration in a write transaction of its
// own, which takes its turn at the write lock as the writer's do (see
// turn.go).
func (s *Store) applyMigration(ctx context.Context, v int, name, body string) error {
	endTurn, err := s.takeTurn()
	if err != nil {
		return fmt.Errorf("sqlite: migration %s: %w", name, err)
	}
	defer endTurn()
	tx, err := s.wconn.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlite: migrate: %w", classify(err))
	}
	if _, err := tx.ExecContext(ctx, body); err != nil {
		tx.Rollback()
		return fmt.Errorf("sqlite: migration %s: %w", name, err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO redrive_migrations (version, name, applied_at) VALUES (?, ?, ?)`,
		v, name, time.Now().UnixMicro()); err != nil {
		tx.Rollback()
		return fmt.Errorf("sqlite: migration %s: %w", name, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqlite: migration %s: %w", name, err)
	}
	return nil
}

// fenced is the WHERE clause of the statements that apply an outcome: the
// job (parameter 1) runs the lease (2) for the worker (3), and, when
// parameter 4 is not NULL (a rescue), that lease ended before it.
const fenced = `WHERE id = ? AND state = 'running' AND lease = ? AND worker = ? AND coalesce(lease_until < ?, 1)`

// fetchTop is the highest priority below ?2 of the waiting jobs without a
// limit of queue ?1 (NULL: none), one probe of the jobs_ready index. SQLite runs a
// scalar subquery that refers to nothing outside it once per statement.
const fetchTop = `(SELECT priority FROM jobs WHERE state IN ('pending', 'scheduled') AND climit IS NULL AND fkey IS NULL AND queue = ?1 AND priority < ?2
		ORDER BY priority DESC LIMIT 1)`

// dueAt tells whether queue ?1 has a waiting job without a limit of
// priority p due by ?3, one probe of the jobs_ready index.
const dueAt = `EXISTS (SELECT 1 FROM jobs WHERE state IN ('pending', 'scheduled') AND climit IS NULL AND fkey IS NULL AND queue = ?1 AND priority = pr.p AND run_at <= ?3)`

// Statements prepared on the writer connection, each once per store on
// its first use (stmt): a store that never redrives a job never parses
// the redrive. Preparing all of them in Open parsed some thirty
// statements (each UPDATE of jobs also codes the table's triggers) for
// every store opened, most of a short-lived store's CPU (a CLI command,
// a test).
var writeSQL = map[string]string{
	// A rotation's re-sealing (rekeyStep), a row at a time: prepared
	// once rather than parsed for each of a rotation's rows.
	"rekeyPayload": `UPDATE jobs SET payload = ? WHERE id = ?`,
	"rekeyHistory": `UPDATE jobs SET history = ? WHERE id = ?`,
	"rekeyResult":  `UPDATE jobs SET result = ? WHERE id = ?`,
	// A replay's copy of a job (replayStep), a row at a time.
	"replayInsert": `INSERT INTO jobs (queue, kind, payload, state, max_retries, policy, dependency, reprocessable, priority,
		created_at, run_at, replay_of, history, climit, ckey, fkey, trace) VALUES (?, ?, ?, 'pending', ?, ?, ?, ?, ?, ?, ?, ?, json_array(json(?)), ?, ?, ?, ?)`,
	"insert": `INSERT INTO jobs (queue, kind, payload, state, max_retries, policy, idem_key, dependency, reprocessable, created_at, run_at, priority, trace)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (idem_key) WHERE idem_key IS NOT NULL DO NOTHING RETURNING id`,
	"byKey": `SELECT ` + jobColumns + ` FROM jobs WHERE idem_key = ?`,
	// AddDead inserts a job that died elsewhere.
	"insertDead": insertDeadSQL,
	// Fetch selects the due jobs without a limit of one priority
	// through the jobs_ready index, then leases them by id: the selection takes the highest
	// priority of the queue's waiting jobs below ?2 (one probe of the
	// index) and returns one row: the ids of its due jobs, oldest due
	// first, as one JSON array (which the lease and the read back take as
	// it is), how many there are, how many of them were scheduled (for
	// the counts), and their priority (NULL when none is due).
	"fetchSelect": `SELECT json_group_array(id), count(*), count(*) FILTER (WHERE state = 'scheduled'), max(priority) FROM (
		SELECT id, state, priority FROM jobs WHERE state IN ('pending', 'scheduled') AND climit IS NULL AND fkey IS NULL AND queue = ?1 AND priority = ` + fetchTop + ` AND run_at <= ?3
		ORDER BY run_at, id LIMIT ?4)`,
	// fetchNext is the highest priority below ?2 at which queue ?1 has a
	// job due by ?3 (NULL: none), for a fetch whose selection found none
	// due at the top: pr walks the distinct priorities of the queue's
	// waiting jobs down from ?2, one probe of jobs_ready each, and stops
	// at the first with a due job (two more probes each), all in one
	// statement however many levels wait with nothing due.
	"fetchNext": `WITH RECURSIVE pr(p) AS (
		SELECT ` + fetchTop + `
		UNION ALL
		SELECT (SELECT priority FROM jobs WHERE state IN ('pending', 'scheduled') AND climit IS NULL AND fkey IS NULL AND queue = ?1 AND priority < pr.p
			ORDER BY priority DESC LIMIT 1) FROM pr WHERE pr.p IS NOT NULL AND NOT ` + dueAt + `)
		SELECT p FROM pr WHERE p IS NULL OR ` + dueAt + ` LIMIT 1`,
	// fetchLimited is the selection of the due jobs under a concurrency
	// limit (limits.go), in the same shape as fetchSelect.
	"fetchLimited":   fetchLimitedSQL,
	"rateThrottled":  rateThrottledSQL,
	"unlimitedAbove": unlimitedAboveSQL,
	"rateMove":       rateMoveSQL,
	"limitUpsert":    `INSERT INTO conc_limits (name, max_running, rate_n, rate_per, rate_burst, hold_retry_after, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (name) DO NOTHING`,
	"limitHold":      limitHoldSQL,
	"limitJob":       `UPDATE jobs SET climit = ?, ckey = ? WHERE id = ?`,
	"limitGen":       `SELECT n FROM limit_gen WHERE id = 1`,
	// limitNextDue: the earliest run_at after ?2 of queue ?1's limited
	// jobs, one probe of jobs_limit_due per distinct priority.
	"limitNextDue": firstSQL(limitedCond, "run_at > ?2"),
	"fetchLease": `UPDATE jobs SET state = 'running', attempt = attempt + 1, lease = lease + 1, attempted_at = max(?, run_at), lease_until = ?, worker = ?,
		progress_done = NULL, progress_total = NULL, progress_at = NULL
		WHERE id IN (SELECT value FROM json_each(?))`,
	"complete": `UPDATE jobs SET state = 'completed', finished_at = ?, last_duration = ?, lease_until = NULL, worker = NULL, cancel_requested = 0,
		progress_done = coalesce(?, progress_done), progress_total = CASE WHEN ? IS NULL THEN progress_total ELSE ? END,
		progress_at = CASE WHEN ? IS NULL THEN progress_at ELSE ? END,
		history = CASE WHEN ? IS NULL THEN history ELSE json_insert(coalesce(history, '[]'), '$[#]', json(?)) END,
		result = ?
		` + fenced,
	"retry": `UPDATE jobs SET state = ?, run_at = ?, retry_count = retry_count + 1, last_error = ?, last_error_class = ?, last_failed_at = ?,
		last_duration = ?, last_delay = ?, lease_until = NULL, worker = NULL,
		progress_done = NULL, progress_total = NULL, progress_at = NULL,
		history = CASE WHEN ? IS NULL THEN history ELSE json_insert(coalesce(history, '[]'), '$[#]', json(?)) END
		` + fenced + ` AND cancel_requested = 0`,
	// retryCanceled is a Retry of a job whose cancellation was requested:
	// the failure is recorded and the job ends canceled, with a canceled
	// event after the outcome's.
	"retryCanceled": `UPDATE jobs SET state = 'canceled', finished_at = ?, last_error = ?, last_error_class = ?, last_failed_at = ?,
		last_duration = ?, lease_until = NULL, worker = NULL, cancel_requested = 0,
		progress_done = NULL, progress_total = NULL, progress_at = NULL,
		history = json_insert(CASE WHEN ? IS NULL THEN coalesce(history, '[]') ELSE json_insert(coalesce(history, '[]'), '$[#]', json(?)) END,
			'$[#]', json(?))
		` + fenced + ` AND cancel_requested <> 0`,
	"bury": `UPDATE jobs SET state = 'dead', dead_at = ?, finished_at = ?, dead_reason = ?, fingerprint = ?,
		last_error = ?, last_error_class = ?, last_failed_at = ?, last_duration = ?, lease_until = NULL, worker = NULL, cancel_requested = 0,
		progress_done = NULL, progress_total = NULL, progress_at = NULL,
		history = CASE WHEN ? IS NULL THEN history ELSE json_insert(coalesce(history, '[]'), '$[#]', json(?)) END
		` + fenced,
	"snooze": `UPDATE jobs SET state = ?, run_at = ?, attempt = attempt - 1, lease_until = NULL, worker = NULL,
		progress_done = NULL, progress_total = NULL, progress_at = NULL,
		history = CASE WHEN ? IS NULL THEN history ELSE json_insert(coalesce(history, '[]'), '$[#]', json(?)) END
		` + fenced + ` AND cancel_requested = 0`,
	// snoozeCanceled is a Snooze or Release of a job whose cancellation
	// was requested: the job ends canceled, with a canceled event after
	// the outcome's.
	"snoozeCanceled": `UPDATE jobs SET state = 'canceled', finished_at = ?, lease_until = NULL, worker = NULL, cancel_requested = 0,
		progress_done = NULL, progress_total = NULL, progress_at = NULL,
		history = json_insert(CASE WHEN ? IS NULL THEN coalesce(history, '[]') ELSE json_insert(coalesce(history, '[]'), '$[#]', json(?)) END,
			'$[#]', json(?))
		` + fenced + ` AND cancel_requested <> 0`,
	"cancelRunning": `UPDATE jobs SET state = 'canceled', finished_at = ?, lease_until = NULL, worker = NULL, cancel_requested = 0,
		progress_done = NULL, progress_total = NULL, progress_at = NULL,
		history = CASE WHEN ? IS NULL THEN history ELSE json_insert(coalesce(history, '[]'), '$[#]', json(?)) END
		` + fenced,
	// Progress: fenced on the running lease and worker, as outcomes.
	"progress": `UPDATE jobs SET progress_done = ?, progress_total = ?, progress_at = ?
		WHERE id = ? AND state = 'running' AND lease = ? AND worker = ?`,
	// Redrive: prepared once, since preparing a statement that changes a
	// job's state also codes the jobs table's triggers.
	"redriveRead": `SELECT state, queue, reprocessable, CASE WHEN ? THEN payload END, coalesce(climit, ''), coalesce(ckey, ''), fkey
		FROM jobs WHERE id = ?`,
	"redrive": `UPDATE jobs SET state = 'pending', run_at = ?, attempt = 0, retry_count = 0,
		redriven = redriven + 1, dead_at = NULL, dead_reason = '', finished_at = NULL, last_delay = NULL,
		payload = coalesce(?, payload), ckey = CASE WHEN climit IS NULL THEN ckey ELSE ? END, fkey = ?,
		history = json_insert(coalesce(history, '[]'), '$[#]', json(?)) WHERE id = ?`,
	"counter": `INSERT INTO counters (queue, name, n) VALUES (?, ?, ?)
		ON CONFLICT (queue, name) DO UPDATE SET n = n + excluded.n`,
	"jobCount": `INSERT INTO job_counts (queue, state, n) VALUES (?, ?, ?)
		ON CONFLICT (queue, state) DO UPDATE SET n = n + excluded.n`,
}

func (s *Store) runBatch(batch []*op) {
	live := batch[:0:0]
	for _, o := range batch {
		if err := o.ctx.Err(); err != nil {
			o.done <- err
			continue
		}
		live = append(live, o)
	}
	if len(live) == 0 {
		return
	}
	errs := make([]error, len(live))
	err := s.inTx(func(tx *sql.Conn) error {
		for i, o := range live {
			errs[i] = o.fn(tx)
			if errs[i] != nil && !isRequestError(errs[i]) {
				return errs[i]
			}
		}
		return nil
	})
	if err == nil {
		for i, o := range live {
			o.done <- errs[i]
		}
		return
	}
	if len(live) == 1 || storeWide(err) {
		// One request, or a failure no request caused: running each
		// request alone would fail them the same way, each after its own
		// wait (the busy timeout when another process holds the lock).
		for _, o := range live {
			o.done <- err
		}
		return
	}
	// The shared transaction failed: run each request alone so that one
	// bad request cannot fail the others (a full disk may still take the
	// small ones).
	for _, o := range live {
		var opErr error
		txErr := s.inTx(func(tx *sql.Conn) error {
			opErr = o.fn(tx)
			if opErr != nil && !isRequestError(opErr) {
				return opErr
			}
			return nil
		})
		if txErr != nil {
			o.done <- txErr
		} else {
			o.done <- opErr
		}
	}
}

// isRequestError reports errors that concern one request only and leave
// the transaction usable (validation, not found, conflicts): the request
// must have made no change before returning them.
func isRequestError(err error) bool {
	return errors.Is(err, store.ErrInvalid) || errors.Is(err, store.ErrNotFound) ||
		errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrNotReprocessable)
}

// inTx runs fn in one transaction on the writer connection. The writer
// owns the connection, so it issues BEGIN and COMMIT itself: statements
// prepared once on the connection are then used as they are (database/sql
// would prepare them again in every *sql.Tx).
func (s *Store) inTx(fn func(tx *sql.Conn) error) (err error) {
	ctx := context.Background()
	if s.onBegin != nil {
		s.onBegin()
	}
	endTurn, err := s.takeTurn()
	if err != nil {
		return s.noteWrite(err)
	}
	defer endTurn()
	if _, err := s.wconn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		// Busy (another process holds the write lock past the busy
		// timeout), I/O, a read-only file: the store cannot write.
		return s.noteWrite(classify(fmt.Errorf("sqlite: begin: %w", err)))
	}
	if s.onLocked != nil {
		s.onLocked()
	}
	rollback := func() {
		// After some errors (a full disk, I/O) SQLite has rolled back
		// already: no transaction is active, and that is not a failure.
		if _, err := s.wconn.ExecContext(ctx, "ROLLBACK"); err != nil && !strings.Contains(err.Error(), "no transaction is active") {
			s.log.Error("sqlite: rollback failed", "error", err)
		}
	}
	committed := false
	defer func() {
		if !committed {
			s.fair.Discard()
			s.released.end(false)
		}
		if p := recover(); p != nil {
			rollback()
			panic(p)
		}
	}()
	// While the last write failed, a transaction that changed no row
	// (a rescue pass that found nothing) commits without touching the
	// disk: it proves nothing, so only one that changed rows clears the
	// failure. The count is read only then, off the hot path. A failure
	// to take the write lock is the exception: the BEGIN IMMEDIATE that
	// just succeeded proves the lock is to be had again.
	before := int64(-1)
	if p := s.lastWrite.Load(); p != nil && !isLockError(*p) {
		before = s.totalChanges(ctx)
	}
	if err := fn(s.wconn); err != nil {
		rollback()
		return s.noteWrite(classify(err))
	}
	if _, err := s.wconn.ExecContext(ctx, "COMMIT"); err != nil {
		rollback()
		return s.noteWrite(classify(fmt.Errorf("sqlite: commit: %w", err)))
	}
	// The fetches' round robins move on only now (fairshare.go): a
	// fetch rolled back costs no key its turn.
	committed = true
	s.fair.Commit()
	s.released.end(true)
	if before >= 0 && s.totalChanges(ctx) == before {
		return nil
	}
	return s.noteWrite(nil)
}

// totalChanges is the number of rows the writer connection has changed
// since it opened, or -1 when it cannot be read.
func (s *Store) totalChanges(ctx context.Context) int64 {
	var n int64
	if err := s.wconn.QueryRowContext(ctx, "SELECT total_changes()").Scan(&n); err != nil {
		return -1
	}
	return n
}

// classify wraps an error of SQLite's that says the database cannot be
// written with store.ErrFull, store.ErrReadOnly or store.ErrUnavailable.
func classify(err error) error {
	var se *sqlite.Error
	if err == nil || !errors.As(err, &se) {
		return err
	}
	switch se.Code() & 0xff { // the primary result code
	case 13: // SQLITE_FULL
		return fmt.Errorf("%w: the disk is full: %w", store.ErrFull, err)
	case 8: // SQLITE_READONLY
		return fmt.Errorf("%w: %w", store.ErrReadOnly, err)
	case 10, 14, 5, 6: // SQLITE_IOERR, SQLITE_CANTOPEN, SQLITE_BUSY, SQLITE_LOCKED
		return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
	}
	return err
}

// isLockError reports whether err is SQLite's SQLITE_BUSY or SQLITE_LOCKED:
// another connection held a lock for longer than the busy timeout.
func isLockError(err error) bool {
	if errors.Is(err, errTurn) {
		return true
	}
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	c := se.Code() & 0xff
	return c == 5 || c == 6
}

// storeWide reports whether err, a write transaction's, says the store
// cannot write at all (it is busy, locked by another process, failing
// I/O or read-only), as opposed to a failure one request may have caused.
func storeWide(err error) bool {
	return errors.Is(err, store.ErrUnavailable) || errors.Is(err, store.ErrReadOnly)
}

// noteWrite records how the last write ended, for WriteHealth, and
// returns err. Request errors (validation, not found) say nothing of the
// store's health. A lock error does not replace another failure (a full
// disk, I/O): the write ended before it could tell whether that one is
// over, and the lock error is cleared by any transaction that takes the
// lock, the other only by one that changes rows (see inTx). Only the
// writer goroutine calls it.
func (s *Store) noteWrite(err error) error {
	if err != nil && isRequestError(err) {
		return err
	}
	switch p := s.lastWrite.Load(); {
	case err == nil:
		s.lastWrite.Store(nil)
	case isLockError(err) && p != nil && !isLockError(*p):
	default:
		s.lastWrite.Store(&err)
	}
	return err
}

// WriteHealth implements store.WriteHealth.
func (s *Store) WriteHealth() error {
	if p := s.lastWrite.Load(); p != nil {
		return *p
	}
	return nil
}

// stmt returns writeSQL's statement name on the writer connection,
// prepared on its first use and kept for the store's life.
func (s *Store) stmt(_ *sql.Conn, name string) writeStmt {
	return writeStmt{s: s, name: name}
}

// writeStmt is a statement of writeSQL, prepared when first run.
type writeStmt struct {
	s    *Store
	name string
}

// prepared returns the statement, preparing it on the writer connection
// if no call did before. A failed preparation is not kept: the next use
// tries again.
func (w writeStmt) prepared(ctx context.Context) (*sql.Stmt, error) {
	s := w.s
	s.stmtsMu.Lock()
	defer s.stmtsMu.Unlock()
	if st := s.stmts[w.name]; st != nil {
		return st, nil
	}
	q, ok := writeSQL[w.name]
	if !ok {
		return nil, fmt.Errorf("sqlite: no statement %q", w.name)
	}
	st, err := s.wconn.PrepareContext(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("sqlite: prepare %s: %w", w.name, err)
	}
	s.stmts[w.name] = st
	return st, nil
}

// ExecContext runs the statement with args.
func (w writeStmt) ExecContext(ctx context.Context, args ...any) (sql.Result, error) {
	st, err := w.prepared(ctx)
	if err != nil {
		return nil, err
	}
	return st.ExecContext(ctx, args...)
}

// QueryRowContext runs the statement with args for one row.
func (w writeStmt) QueryRowContext(ctx context.Context, args ...any) rowOrErr {
	st, err := w.prepared(ctx)
	if err != nil {
		return rowOrErr{err: err}
	}
	return rowOrErr{row: st.QueryRowContext(ctx, args...)}
}

// rowOrErr is a *sql.Row, or the error that kept its statement from
// running.
type rowOrErr struct {
	row *sql.Row
	err error
}

// Scan is sql.Row's Scan, or the error.
func (r rowOrErr) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	return r.row.Scan(dest...)
}

// Statements of the read pool that pollers run again and again (a
// worker's NextDue between fetches, the dashboard's and the breakers'
// Queues), prepared once per store on first use (readStmt) rather than
// parsed on every call.
const (
	readNextDue   = "nextDue"
	readNextAfter = "nextDueAfter"
	readQueues    = "queues"
)

var readSQL = map[string]string{
	readNextDue:   firstDueSQL,
	readNextAfter: firstAfterSQL,
	readQueues:    queuesSQL,
}

// readStmt returns readSQL's statement name on the read pool, prepared on
// its first use (database/sql then prepares it on each pooled connection
// once, as that connection first runs it).
func (s *Store) readStmt(ctx context.Context, name string) (*sql.Stmt, error) {
	db, err := s.readDB()
	if err != nil {
		return nil, err
	}
	s.stmtsMu.Lock()
	defer s.stmtsMu.Unlock()
	if st := s.reads[name]; st != nil {
		return st, nil
	}
	st, err := db.PrepareContext(ctx, readSQL[name])
	if err != nil {
		return nil, fmt.Errorf("sqlite: prepare %s: %w", name, err)
	}
	s.reads[name] = st
	return st, nil
}

// Close stops the writer after the queued writes and closes the database.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.ops)
	close(s.bulk)
	s.mu.Unlock()
	<-s.done
	return s.closeDBs()
}

func (s *Store) closeDBs() error {
	releasing.Delete(s.releaseID)
	var errs []error
	s.stmtsMu.Lock()
	for _, st := range s.stmts {
		st.Close()
	}
	for _, st := range s.reads {
		st.Close()
	}
	s.stmtsMu.Unlock()
	for _, st := range s.multi {
		st.Close()
	}
	if s.readByIDs != nil {
		s.readByIDs.Close()
	}
	if s.wconn != nil {
		errs = append(errs, s.wconn.Close())
	}
	errs = append(errs, s.w.Close())
	s.turns.close()
	if s.r != nil {
		errs = append(errs, s.r.Close())
	}
	return errors.Join(errs...)
}

func (s *Store) readDB() (*sql.DB, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, store.ErrClosed
	}
	return s.r, nil
}

// Synchronous reports how the store commits: "full" (every commit is
// fsynced) or "normal" (fsynced at checkpoints), as Options.Synchronous
// asked. A read-only store writes nothing and reports "".
func (s *Store) Synchronous() string {
	return s.synchronous
}
