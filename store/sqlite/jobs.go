package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/store"
)

const jobColumnsNoHistory = `id, queue, kind, payload, state, attempt, max_retries, policy, idem_key, dependency, reprocessable,
	created_at, run_at, attempted_at, finished_at, lease_until, worker, cancel_requested, retry_count,
	last_error, last_error_class, last_failed_at, dead_at, dead_reason, fingerprint, redriven, last_duration, last_delay,
	progress_done, progress_total, progress_at, replay_of, lease, priority, trace`

const jobColumns = jobColumnsNoHistory + `, history`

type scanner interface{ Scan(dest ...any) error }

// alsoScan scans a row of a job's columns followed by more columns
// (extra's destinations).
type alsoScan struct {
	sc    scanner
	extra any
}

func (a alsoScan) Scan(dest ...any) error { return a.sc.Scan(append(dest, a.extra)...) }

func micros(t time.Time) int64 { return t.UnixMicro() }

func fromMicros(v int64) time.Time { return time.UnixMicro(v).UTC() }

func optTime(v sql.NullInt64) *time.Time {
	if !v.Valid {
		return nil
	}
	t := fromMicros(v.Int64)
	return &t
}

func scanJob(sc scanner, withHistory bool, c store.PayloadCodec) (*store.Job, error) {
	var (
		j                                      store.Job
		payload, policy, history               []byte
		idem, worker                           sql.NullString
		state, class                           string
		reproc, cancelReq                      int
		created, runAt                         int64
		attempted, finished, lease, lastFailed sql.NullInt64
		dead, lastDuration, lastDelay          sql.NullInt64
		pDone, pTotal, pAt                     sql.NullInt64
		replayOf                               sql.NullInt64
		trace                                  storedTrace
	)
	dest := []any{&j.ID, &j.Queue, &j.Kind, &payload, &state, &j.Attempt, &j.MaxRetries, &policy, &idem, &j.Dependency, &reproc,
		&created, &runAt, &attempted, &finished, &lease, &worker, &cancelReq, &j.RetryCount,
		&j.LastError, &class, &lastFailed, &dead, &j.DeadReason, &j.Fingerprint, &j.Redriven, &lastDuration, &lastDelay,
		&pDone, &pTotal, &pAt, &replayOf, &j.Lease, &j.Priority, &trace}
	if withHistory {
		dest = append(dest, &history)
	}
	if err := sc.Scan(dest...); err != nil {
		return nil, err
	}
	j.Payload = json.RawMessage(payload)
	store.OpenJob(c, &j)
	if len(policy) > 0 {
		j.Policy = json.RawMessage(policy)
	}
	j.State = store.State(state)
	j.IdempotencyKey = idem.String
	j.Worker = worker.String
	j.Reprocessable = reproc != 0
	j.CancelRequested = cancelReq != 0
	j.CreatedAt = fromMicros(created)
	j.RunAt = fromMicros(runAt)
	j.AttemptedAt = optTime(attempted)
	j.FinishedAt = optTime(finished)
	j.LeaseUntil = optTime(lease)
	j.LastFailedAt = optTime(lastFailed)
	j.DeadAt = optTime(dead)
	j.LastDuration = store.Duration(lastDuration.Int64)
	j.LastDelay = store.Duration(lastDelay.Int64)
	j.ReplayOf = replayOf.Int64
	j.Trace = string(trace)
	if pDone.Valid {
		j.Progress = &store.JobProgress{Done: pDone.Int64, Total: pTotal.Int64, At: fromMicros(pAt.Int64)}
	}
	if err := store.DecodeStored(&j, class, history, withHistory); err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	return &j, nil
}

func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func nullBytes(b []byte) any {
	if len(b) == 0 {
		return nil
	}
	return []byte(b)
}

func eventJSON(e *store.Event) (any, error) {
	if e == nil {
		return nil, nil
	}
	b, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("sqlite: encode event: %w", err)
	}
	return string(b), nil
}

// Enqueue implements store.Store.
func (s *Store) Enqueue(ctx context.Context, jobs []store.NewJob, now time.Time) ([]*store.Job, error) {
	for i := range jobs {
		if err := validateNew(&jobs[i]); err != nil {
			return nil, fmt.Errorf("sqlite: job %d of %d: %w", i+1, len(jobs), err)
		}
	}
	plain := jobs
	jobs, err := store.SealNew(s.payloads, jobs)
	if err != nil {
		return nil, fmt.Errorf("sqlite: enqueue: %w", err)
	}
	out := make([]*store.Job, len(jobs))
	err = s.writeEnqueue(ctx, len(jobs), func(tx *sql.Conn) error {
		clear(out)
		counts := map[[2]string]int64{}
		mv := moves{}
		// Jobs without an idempotency key cannot conflict: consecutive runs
		// of them go in multi-row statements. Jobs with a key go one by one,
		// so that each conflict returns the job holding the key. Input order
		// is kept, so ids increase in insertion order.
		for i := 0; i < len(jobs); {
			if jobs[i].IdempotencyKey == "" {
				var run []int
				for i < len(jobs) && jobs[i].IdempotencyKey == "" && len(run) < multiInsertRows {
					run = append(run, i)
					i++
				}
				if err := s.insertMany(ctx, tx, jobs, run, now, out, counts, mv); err != nil {
					return err
				}
				continue
			}
			nj := &jobs[i]
			i++
			v := newRow(nj, now)
			var id int64
			holder, err := s.insertKeyed(ctx, tx, nj.IdempotencyKey, func() error {
				return s.stmt(tx, "insert").QueryRowContext(ctx, v.args()...).Scan(&id)
			})
			if err != nil {
				return fmt.Errorf("sqlite: enqueue: %w", err)
			}
			if holder != nil {
				out[i-1] = holder
				counts[[2]string{nj.Queue, store.StatDeduplicated}]++
				continue
			}
			counts[[2]string{nj.Queue, store.StatEnqueued}]++
			mv.move(nj.Queue, "", v.state)
			out[i-1] = v.job(id, nj)
		}
		if err := s.setLimits(ctx, tx, jobs, out, now); err != nil {
			return err
		}
		if err := s.setFair(ctx, tx, jobs, out); err != nil {
			return err
		}
		if err := s.addMoves(ctx, tx, mv); err != nil {
			return err
		}
		return s.addCounters(ctx, tx, counts)
	})
	if err != nil {
		return nil, err
	}
	if s.payloads != nil {
		store.PlainPayloads(out, func(i int) json.RawMessage { return plain[i].Payload })
	}
	return out, nil
}

// insertKeyed inserts a job whose idempotency key is key, unless the key
// is taken: by a deleted job whose key is kept, or by a job. insert runs
// the INSERT ... ON CONFLICT DO NOTHING RETURNING and scans its row; it
// returns sql.ErrNoRows when the key was taken. insertKeyed returns the
// job holding the key (Existing set), or nil when the job was inserted.
func (s *Store) insertKeyed(ctx context.Context, tx *sql.Conn, key string, insert func() error) (*store.Job, error) {
	// A key whose job was deleted is still taken.
	if j, err := keptKey(ctx, tx, key); err != nil || j != nil {
		return j, err
	}
	err := insert()
	if !errors.Is(err, sql.ErrNoRows) {
		return nil, err
	}
	j, err := scanJob(s.stmt(tx, "byKey").QueryRowContext(ctx, key), true, s.payloads)
	if err != nil {
		return nil, fmt.Errorf("read job holding key: %w", err)
	}
	j.Existing = true
	return j, nil
}

// multiInsertRows bounds the rows of one multi-row INSERT (13 parameters
// each, well under SQLite's limit).
const multiInsertRows = 100

// row is a new job's column values.
type row struct {
	queue, kind, dependency string
	payload, policy         []byte
	state                   store.State
	maxRetries, reproc      int
	priority                int
	idem, trace             any
	created, runAt          int64
}

func newRow(nj *store.NewJob, now time.Time) row {
	runAt := nj.RunAt
	if runAt.IsZero() {
		runAt = now
	}
	r := row{queue: nj.Queue, kind: nj.Kind, dependency: nj.Dependency, payload: nj.Payload, policy: nj.Policy,
		state: dueState(runAt, now), maxRetries: nj.MaxRetries, reproc: 1, idem: nullString(nj.IdempotencyKey),
		created: micros(now), runAt: micros(runAt), priority: nj.Priority, trace: traceArg(nj.Trace)}
	if len(r.payload) == 0 {
		r.payload = []byte("null")
	}
	if nj.NotReprocessable {
		r.reproc = 0
	}
	return r
}

func (r *row) args() []any {
	return []any{r.queue, r.kind, r.payload, string(r.state), r.maxRetries, nullBytes(r.policy), r.idem, r.dependency, r.reproc, r.created, r.runAt, r.priority, r.trace}
}

func (r *row) job(id int64, nj *store.NewJob) *store.Job {
	return &store.Job{
		ID: id, Queue: r.queue, Kind: r.kind, Payload: json.RawMessage(r.payload), State: r.state,
		MaxRetries: r.maxRetries, Policy: nj.Policy, IdempotencyKey: nj.IdempotencyKey,
		Dependency: r.dependency, Reprocessable: r.reproc == 1, Priority: r.priority,
		CreatedAt: fromMicros(r.created), RunAt: fromMicros(r.runAt), History: []store.Event{}, Trace: nj.Trace,
	}
}

// insertMany inserts the jobs at idx (none has an idempotency key) in one
// statement. AUTOINCREMENT hands out increasing ids in VALUES order, so
// the returned ids, sorted, are the jobs' ids in order.
func (s *Store) insertMany(ctx context.Context, tx *sql.Conn, jobs []store.NewJob, idx []int, now time.Time, out []*store.Job, counts map[[2]string]int64, mv moves) error {
	q := `INSERT INTO jobs (queue, kind, payload, state, max_retries, policy, idem_key, dependency, reprocessable, created_at, run_at, priority, trace) VALUES ` +
		strings.Repeat("(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?), ", len(idx)-1) + "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id"
	rowsv := make([]row, len(idx))
	args := make([]any, 0, 13*len(idx))
	for k, i := range idx {
		rowsv[k] = newRow(&jobs[i], now)
		args = append(args, rowsv[k].args()...)
	}
	st, err := s.multiInsert(ctx, tx, len(idx), q)
	if err != nil {
		return fmt.Errorf("sqlite: enqueue: %w", err)
	}
	rows, err := st.QueryContext(ctx, args...)
	if err != nil {
		return fmt.Errorf("sqlite: enqueue: %w", err)
	}
	ids := make([]int64, 0, len(idx))
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return fmt.Errorf("sqlite: enqueue: %w", err)
		}
		ids = append(ids, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("sqlite: enqueue: %w", err)
	}
	if len(ids) != len(idx) {
		return fmt.Errorf("sqlite: enqueue: inserted %d rows, want %d", len(ids), len(idx))
	}
	slices.Sort(ids)
	for k, i := range idx {
		out[i] = rowsv[k].job(ids[k], &jobs[i])
		counts[[2]string{jobs[i].Queue, store.StatEnqueued}]++
		mv.move(jobs[i].Queue, "", rowsv[k].state)
	}
	return nil
}

// multiInsert returns the prepared multi-row INSERT for n rows, preparing
// it once per size on the writer connection.
func (s *Store) multiInsert(ctx context.Context, tx *sql.Conn, n int, q string) (*sql.Stmt, error) {
	st, ok := s.multi[n]
	if !ok {
		var err error
		st, err = s.wconn.PrepareContext(ctx, q)
		if err != nil {
			return nil, err
		}
		s.multi[n] = st
	}
	return st, nil
}

func validateNew(nj *store.NewJob) error {
	if nj.Queue == "" {
		return fmt.Errorf("%w: queue is empty", store.ErrInvalid)
	}
	if nj.Kind == "" {
		return fmt.Errorf("%w: kind is empty", store.ErrInvalid)
	}
	if len(nj.Payload) > 0 && !json.Valid(nj.Payload) {
		return fmt.Errorf("%w: payload is not valid JSON", store.ErrInvalid)
	}
	if len(nj.Policy) > 0 && !json.Valid(nj.Policy) {
		return fmt.Errorf("%w: policy is not valid JSON", store.ErrInvalid)
	}
	if err := store.CheckPriority(nj.Priority); err != nil {
		return err
	}
	if err := store.CheckNewFair(nj); err != nil {
		return err
	}
	if err := store.CheckTrace(nj.Trace); err != nil {
		return err
	}
	return store.CheckNewLimit(nj)
}

// addCounter adds c to counts, under its name and class ("dead.permanent").
func addCounter(counts map[[2]string]int64, c store.Counter) {
	name := c.Name
	if c.Class != "" {
		name += "." + c.Class
	}
	counts[[2]string{c.Queue, name}] += c.N
}

func (s *Store) addCounters(ctx context.Context, tx *sql.Conn, counts map[[2]string]int64) error {
	return s.upsertCounts(ctx, tx, "counter", counts)
}

// moves records state transitions: jobs per (queue, state), kept exactly
// in job_counts by every write that changes a job's state.
type moves map[[2]string]int64

func (m moves) move(queue string, from, to store.State) {
	if from != "" {
		m[[2]string{queue, string(from)}]--
	}
	if to != "" {
		m[[2]string{queue, string(to)}]++
	}
}

func (s *Store) addMoves(ctx context.Context, tx *sql.Conn, m moves) error {
	return s.upsertCounts(ctx, tx, "jobCount", m)
}

func (s *Store) upsertCounts(ctx context.Context, tx *sql.Conn, stmt string, counts map[[2]string]int64) error {
	if len(counts) == 0 {
		return nil
	}
	st := s.stmt(tx, stmt)
	for k, n := range counts {
		if n == 0 {
			continue
		}
		if _, err := st.ExecContext(ctx, k[0], k[1], n); err != nil {
			return fmt.Errorf("sqlite: counts: %w", err)
		}
	}
	return nil
}

// Fetch implements store.Store. The writer only flips the due rows to
// running; the rows themselves are read on the read pool, off the
// writer's path. The ids travel as SQLite made them, one JSON array, from
// the selection to the lease and to the read.
func (s *Store) Fetch(ctx context.Context, p store.FetchParams) ([]*store.Job, error) {
	if p.Limit <= 0 {
		return nil, nil
	}
	dueBy := p.DueBy
	if dueBy.IsZero() {
		dueBy = p.Now
	}
	var ids, limitedIDs string
	var n, scheduled, limited int64
	var leaseNow time.Time // the limited jobs' start (store.LeaseNow)
	err := s.writeFetch(ctx, func(tx *sql.Conn) error {
		ids, n, scheduled, limitedIDs, limited = "", 0, 0, "", 0
		// The jobs under a concurrency limit first (limits.go), by
		// priority then due time within what their groups' free slots
		// allow, leased at once; then the others.
		var ls int64
		var err error
		var nextStart int64
		leaseNow = store.LeaseNow(&p)
		s.slotWait = false
		if limitedIDs, limited, ls, nextStart, err = s.fetchLimited(ctx, tx, p.Queue, leaseNow, dueBy, p.Limit); err != nil {
			return fmt.Errorf("sqlite: fetch: %w", err)
		}
		if p.SlotWait != nil {
			*p.SlotWait = s.slotWait
		}
		if p.NextStart != nil {
			*p.NextStart = time.Time{}
			if nextStart != 0 {
				*p.NextStart = fromMicros(nextStart)
			}
		}
		if limited > 0 {
			if err := s.rateLeased(ctx, tx, limitedIDs, leaseNow); err != nil {
				return fmt.Errorf("sqlite: fetch: %w", err)
			}
			if _, err := s.stmt(tx, "fetchLease").ExecContext(ctx, micros(leaseNow), micros(p.LeaseUntil), p.Worker, limitedIDs); err != nil {
				return fmt.Errorf("sqlite: fetch: %w", err)
			}
		}
		n, scheduled = limited, ls
		// The jobs without a limit, one priority at a time, the highest
		// first: each selection is a range of the jobs_ready index (which
		// holds only the waiting jobs without a limit) holding only due
		// jobs, so jobs of a higher priority due later are skipped by a
		// probe, not walked. With every job at one priority and enough
		// due, it is one statement and one probe; when fewer than the
		// limit are due, one more statement finds that no lower priority
		// has a due job. Levels with none due cost a probe or two each
		// inside that statement, not a statement each (201 levels of
		// future jobs made an idle poll 57 times dearer).
		var parts []string
		if limited > 0 {
			parts = append(parts, strings.TrimSuffix(strings.TrimPrefix(limitedIDs, "["), "]"))
		}
		// A queue with fair jobs (fairshare.go): each priority's keys by
		// round robin, its jobs without a key taking a turn with them; a
		// queue without pays one probe a second (store.FairHints).
		fair, err := s.newFairFetch(ctx, tx, &p, dueBy)
		if err != nil {
			return fmt.Errorf("sqlite: fetch: %w", err)
		}
		if fair != nil {
			if err := fair.run(&n, &scheduled, &parts); err != nil {
				return fmt.Errorf("sqlite: fetch: %w", err)
			}
		}
		for below := int64(store.MaxPriority + 1); fair == nil && n < int64(p.Limit); {
			var part string
			var k, sch int64
			var prio sql.NullInt64
			if err := s.stmt(tx, "fetchSelect").QueryRowContext(ctx, p.Queue, below, micros(dueBy), int64(p.Limit)-n).Scan(&part, &k, &sch, &prio); err != nil {
				return fmt.Errorf("sqlite: fetch: %w", err)
			}
			if k == 0 {
				// None due at the top priority: one statement finds the
				// next priority with a due job, however many levels
				// between have none, and the selection goes on at it.
				if err := s.stmt(tx, "fetchNext").QueryRowContext(ctx, p.Queue, below, micros(dueBy)).Scan(&prio); err != nil {
					return fmt.Errorf("sqlite: fetch: %w", err)
				}
				if !prio.Valid {
					break
				}
				below = prio.Int64 + 1
				continue
			}
			below = prio.Int64
			if _, err := s.stmt(tx, "fetchLease").ExecContext(ctx, micros(p.Now), micros(p.LeaseUntil), p.Worker, part); err != nil {
				return fmt.Errorf("sqlite: fetch: %w", err)
			}
			parts = append(parts, strings.TrimSuffix(strings.TrimPrefix(part, "["), "]"))
			n += k
			scheduled += sch
		}
		if fetchFailHook != nil {
			if err := fetchFailHook(); err != nil {
				return fmt.Errorf("sqlite: fetch: %w", err)
			}
		}
		if n == 0 {
			return nil
		}
		// A fetch that got all it asked for is followed by its caller's
		// next one at once (a worker with more free slots): the writer
		// waits for it (writer.go).
		s.fetchedFull = s.fetchedFull || n == int64(p.Limit)
		ids = "[" + strings.Join(parts, ",") + "]"
		mv := moves{}
		mv[[2]string{p.Queue, string(store.Running)}] = n
		mv[[2]string{p.Queue, string(store.Pending)}] = -(n - scheduled)
		mv[[2]string{p.Queue, string(store.Scheduled)}] = -scheduled
		if err := s.addMoves(ctx, tx, mv); err != nil {
			return err
		}
		return s.addCounters(ctx, tx, map[[2]string]int64{{p.Queue, store.StatAttempts}: n})
	})
	if err != nil || n == 0 {
		return nil, err
	}
	if fetchLeasedHook != nil {
		fetchLeasedHook()
	}
	// The jobs are this worker's now: they are read back even when ctx
	// ended meanwhile (a worker bounds its fetch by the lease, which a
	// loaded machine's fetch could outlast), for otherwise they would wait
	// for their leases to expire and be rescued as failed attempts. The
	// read has a bound of its own, for a store that hangs.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), readBackTimeout)
	defer cancel()
	var limitedAt map[int64]bool
	if limited > 0 && micros(leaseNow) != micros(p.Now) {
		// The limited jobs started at leaseNow, the others at p.Now.
		var lids []int64
		if err := json.Unmarshal([]byte(limitedIDs), &lids); err != nil {
			return nil, fmt.Errorf("sqlite: fetch: %w", err)
		}
		limitedAt = make(map[int64]bool, len(lids))
		for _, id := range lids {
			limitedAt[id] = true
		}
	}
	jobs, err := s.readLeased(rctx, ids, int(n), p, limitedAt, micros(leaseNow))
	if err != nil {
		return nil, fmt.Errorf("sqlite: fetch: jobs %d leased but not read back (their leases will expire and be rescued): %w", n, err)
	}
	sort.Slice(jobs, func(a, b int) bool {
		if jobs[a].Priority != jobs[b].Priority {
			return jobs[a].Priority > jobs[b].Priority
		}
		if !jobs[a].RunAt.Equal(jobs[b].RunAt) {
			return jobs[a].RunAt.Before(jobs[b].RunAt)
		}
		return jobs[a].ID < jobs[b].ID
	})
	return jobs, nil
}

// readBackTimeout bounds the read of the jobs a fetch has just leased.
const readBackTimeout = 30 * time.Second

// fetchFailHook, when set (tests), runs at the end of a fetch's part of
// the writer's transaction, after its leases and cursor moves: an error
// fails the fetch and rolls the transaction back.
var fetchFailHook func() error

// fetchLeasedHook, when set (tests), runs between a fetch's lease and the
// read of the leased jobs.
var fetchLeasedHook func()

// leasedColumns are the columns read back of a job Fetch has just leased:
// those the lease did not set itself. What it set (state, worker,
// lease_until, attempted_at, no progress) is known, and so are the columns
// that are never set on a job waiting to run (finished_at, dead_at,
// dead_reason: every move back to pending or scheduled clears them), and
// the queue.
const leasedColumns = `id, kind, payload, attempt, max_retries, policy, idem_key, dependency, reprocessable,
	created_at, run_at, cancel_requested, retry_count, last_error, last_error_class, last_failed_at, fingerprint, redriven,
	last_duration, last_delay, replay_of, lease, priority, trace`

// decoder decodes the values the driver gives for columns, keeping the
// first that has an unexpected type.
type decoder struct{ err error }

func (d *decoder) bad(v any) {
	if d.err == nil {
		d.err = fmt.Errorf("unexpected column value of type %T", v)
	}
}

// int decodes an INTEGER column (NULL: 0).
func (d *decoder) int(v any) int64 {
	n, _ := d.optInt(v)
	return n
}

// optInt decodes an INTEGER column that may be NULL.
func (d *decoder) optInt(v any) (int64, bool) {
	switch v := v.(type) {
	case int64:
		return v, true
	case nil:
		return 0, false
	}
	d.bad(v)
	return 0, false
}

// str decodes a TEXT column (NULL: "").
func (d *decoder) str(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case []byte:
		return string(v)
	case nil:
		return ""
	}
	d.bad(v)
	return ""
}

// bytes decodes a BLOB column (NULL: nil). The bytes are the caller's
// (database/sql copies them into an *any).
func (d *decoder) bytes(v any) []byte {
	switch v := v.(type) {
	case []byte:
		return v
	case string:
		return []byte(v)
	case nil:
		return nil
	}
	d.bad(v)
	return nil
}

// leasedJob is a job read back by Fetch with the times its lease set,
// allocated at once.
type leasedJob struct {
	job                store.Job
	attempted, leaseTo time.Time
}

// readLeased reads the n jobs Fetch leased with p, their ids a JSON array,
// on the read pool, with one statement whose SQL never changes, so it is
// parsed once per connection rather than once per call.
func (s *Store) readLeased(ctx context.Context, ids string, n int, p store.FetchParams, limitedAt map[int64]bool, leaseNow int64) ([]*store.Job, error) {
	if _, err := s.readDB(); err != nil {
		return nil, err
	}
	rows, err := s.readByIDs.QueryContext(ctx, ids)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	now := micros(p.Now)
	lease := fromMicros(micros(p.LeaseUntil))
	out := make([]*store.Job, 0, n)
	// The columns are scanned as the driver gives them (into *any, which
	// database/sql assigns without converting) and decoded here: a scan
	// into an int went through a string.
	var v [23]any
	var trace traceScan // the last column, scanned without a copy
	dest := make([]any, len(v)+1)
	for i := range v {
		dest[i] = &v[i]
	}
	dest[len(v)] = &trace
	for rows.Next() {
		if len(out) == n {
			return nil, fmt.Errorf("more than the %d jobs leased", n)
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		var d decoder
		runAt := d.int(v[10])
		lastFailed, failed := d.optInt(v[15])
		replayOf, _ := d.optInt(v[20])
		lastDuration, _ := d.optInt(v[18])
		lastDelay, _ := d.optInt(v[19])
		start := now
		if limitedAt[d.int(v[0])] {
			start = leaseNow
		}
		lj := &leasedJob{attempted: fromMicros(max(start, runAt)), leaseTo: lease}
		lj.job = store.Job{ID: d.int(v[0]), Queue: p.Queue, Kind: d.str(v[1]), Payload: json.RawMessage(d.bytes(v[2])),
			State: store.Running, Attempt: int(d.int(v[3])), MaxRetries: int(d.int(v[4])), Policy: json.RawMessage(d.bytes(v[5])),
			IdempotencyKey: d.str(v[6]), Dependency: d.str(v[7]), Reprocessable: d.int(v[8]) != 0,
			CreatedAt: fromMicros(d.int(v[9])), RunAt: fromMicros(runAt), Worker: p.Worker, CancelRequested: d.int(v[11]) != 0,
			RetryCount: int(d.int(v[12])), LastError: d.str(v[13]), Fingerprint: d.str(v[16]), Redriven: int(d.int(v[17])),
			LastDuration: store.Duration(lastDuration), LastDelay: store.Duration(lastDelay), ReplayOf: replayOf,
			AttemptedAt: &lj.attempted, LeaseUntil: &lj.leaseTo, Lease: d.int(v[21]), Priority: int(d.int(v[22])), Trace: trace.text}
		j := &lj.job
		if len(j.Policy) == 0 {
			j.Policy = nil
		}
		if failed {
			t := fromMicros(lastFailed)
			j.LastFailedAt = &t
		}
		class := d.str(v[14])
		if d.err != nil {
			return nil, fmt.Errorf("job %d: %w", j.ID, d.err)
		}
		if err := store.DecodeStored(j, class, nil, false); err != nil {
			return nil, err
		}
		store.OpenJob(s.payloads, j)
		out = append(out, j)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// NextDue implements store.Store.
func (s *Store) NextDue(ctx context.Context, queue string) (time.Time, bool, error) {
	st, err := s.readStmt(ctx, readNextDue)
	if err != nil {
		return time.Time{}, false, err
	}
	var v sql.NullInt64
	// The waiting jobs are in three indexes: without a limit, under one,
	// and fair.
	err = st.QueryRowContext(ctx, queue, int64(math.MaxInt64)).Scan(&v)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("sqlite: next due: %w", err)
	}
	if !v.Valid {
		return time.Time{}, false, nil
	}
	return fromMicros(v.Int64), true, nil
}

// NextDueAfter implements store.Store.
func (s *Store) NextDueAfter(ctx context.Context, queue string, after time.Time) (time.Time, bool, error) {
	st, err := s.readStmt(ctx, readNextAfter)
	if err != nil {
		return time.Time{}, false, err
	}
	var v sql.NullInt64
	if err := st.QueryRowContext(ctx, queue, micros(after)).Scan(&v); err != nil {
		return time.Time{}, false, fmt.Errorf("sqlite: next due after: %w", err)
	}
	if !v.Valid {
		return time.Time{}, false, nil
	}
	return fromMicros(v.Int64), true, nil
}

// Finish implements store.Store. Every outcome is checked before any is
// applied: a call with an invalid one fails whole.
func (s *Store) Finish(ctx context.Context, outcomes []store.Outcome) ([]bool, error) {
	if err := store.CheckOutcomes(outcomes); err != nil {
		return nil, fmt.Errorf("sqlite: finish: %w", err)
	}
	for i := range outcomes {
		if outcomes[i].Queue == "" {
			return nil, fmt.Errorf("sqlite: finish: %w: outcome %d (job %d) has no queue", store.ErrInvalid, i, outcomes[i].JobID)
		}
	}
	outcomes, serr := store.SealResults(s.payloads, outcomes)
	if serr != nil {
		return nil, fmt.Errorf("sqlite: finish: %w", serr)
	}
	events := make([]any, len(outcomes))
	for i := range outcomes {
		ev, err := eventJSON(outcomes[i].Event)
		if err != nil {
			return nil, err
		}
		events[i] = ev
	}
	// Plain completions go many to a statement (see finish.go), the other
	// outcomes one by one.
	chunks, alone := completions(outcomes)
	applied := make([]bool, len(outcomes))
	err := s.write(ctx, func(tx *sql.Conn) error {
		clear(applied)
		counts := map[[2]string]int64{}
		mv := moves{}
		note := func(o *store.Outcome, i int, to store.State, counters []store.Counter) {
			mv.move(o.Queue, store.Running, to)
			applied[i] = true
			for _, c := range counters {
				addCounter(counts, c)
			}
		}
		batch := flowBatchWorth(outcomes)
		if batch {
			if err := s.flowBatchBegin(ctx, tx); err != nil {
				return err
			}
		}
		one := alone
		stale, err := s.completeChunks(ctx, tx, chunks, func(i int) { note(&outcomes[i], i, store.Completed, outcomes[i].Counters) })
		if err != nil {
			return err
		}
		if len(stale) > 0 {
			one = append(one[:len(one):len(one)], stale...)
		}
		for _, i := range one {
			o := &outcomes[i]
			ev := events[i]
			at := micros(o.At)
			// The fence: the job, its lease, its worker, and for a rescue
			// the time its lease must have ended by.
			var expiredBy any
			if !o.ExpiredBy.IsZero() {
				expiredBy = micros(o.ExpiredBy)
			}
			fence := [...]any{o.JobID, o.Lease, o.Worker, expiredBy}
			var res sql.Result
			var err error
			var to store.State
			switch o.Kind {
			case store.Complete:
				var pDone, pTotal, pAt any
				if p := o.Progress; p != nil {
					pDone, pTotal, pAt = p.Done, p.Total, micros(p.At)
				}
				res, err = s.stmt(tx, "complete").ExecContext(ctx, at, int64(o.Duration), pDone, pDone, pTotal, pDone, pAt, ev, ev,
					nullBytes(o.Result), fence[0], fence[1], fence[2], fence[3])
				to = store.Completed
			case store.Retry:
				to = dueState(o.RunAt, o.At)
				res, err = s.stmt(tx, "retry").ExecContext(ctx, string(to), micros(o.RunAt), o.Error, o.ClassName(), at,
					int64(o.Duration), int64(o.RetryDelay), ev, ev, fence[0], fence[1], fence[2], fence[3])
			case store.Bury:
				res, err = s.stmt(tx, "bury").ExecContext(ctx, at, at, o.DeadReason, o.Fingerprint, o.Error, o.ClassName(), at,
					int64(o.Duration), ev, ev, fence[0], fence[1], fence[2], fence[3])
				to = store.Dead
			case store.Snooze:
				to = dueState(o.RunAt, o.At)
				res, err = s.stmt(tx, "snooze").ExecContext(ctx, string(to), micros(o.RunAt), ev, ev, fence[0], fence[1], fence[2], fence[3])
			case store.Release:
				res, err = s.stmt(tx, "snooze").ExecContext(ctx, string(store.Pending), at, ev, ev, fence[0], fence[1], fence[2], fence[3])
				to = store.Pending
			case store.Cancel:
				res, err = s.stmt(tx, "cancelRunning").ExecContext(ctx, at, ev, ev, fence[0], fence[1], fence[2], fence[3])
				to = store.Canceled
			}
			n, err := rowsChanged(res, err)
			if err != nil {
				return fmt.Errorf("sqlite: finish job %d: %w", o.JobID, err)
			}
			counters := o.Counters
			if n == 0 && o.EndsIfCanceled() {
				// Not applied: stale, or its job's cancellation was
				// requested, which ends the job canceled.
				ce := o.CanceledEvent()
				cev, err := eventJSON(&ce)
				if err != nil {
					return err
				}
				if o.Kind == store.Retry {
					res, err = s.stmt(tx, "retryCanceled").ExecContext(ctx, at, o.Error, o.ClassName(), at, int64(o.Duration), ev, ev, cev,
						fence[0], fence[1], fence[2], fence[3])
				} else {
					res, err = s.stmt(tx, "snoozeCanceled").ExecContext(ctx, at, ev, ev, cev, fence[0], fence[1], fence[2], fence[3])
				}
				if n, err = rowsChanged(res, err); err != nil {
					return fmt.Errorf("sqlite: finish job %d: %w", o.JobID, err)
				}
				to, counters = store.Canceled, o.CanceledCounters()
			}
			if n == 0 {
				continue // stale: the job is not running this lease for this worker
			}
			note(o, i, to, counters)
			if !o.HoldUntil.IsZero() && to != store.Canceled && (o.Kind == store.Retry || o.Kind == store.Bury) {
				// A Retry-After holds the job's group, if its limit says so.
				if _, err := s.stmt(tx, "limitHold").ExecContext(ctx, o.JobID, micros(o.HoldUntil)); err != nil {
					return fmt.Errorf("sqlite: finish job %d: hold its limit's group: %w", o.JobID, err)
				}
			}
		}
		if batch {
			if err := s.flowBatchEnd(ctx, tx); err != nil {
				return err
			}
		}
		if err := s.addMoves(ctx, tx, mv); err != nil {
			return err
		}
		return s.addCounters(ctx, tx, counts)
	})
	if err != nil {
		return nil, err
	}
	return applied, nil
}

// rowsChanged returns how many rows the statement whose result and error
// are res and err changed.
func rowsChanged(res sql.Result, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func dueState(runAt, now time.Time) store.State {
	if runAt.After(now) {
		return store.Scheduled
	}
	return store.Pending
}

// Heartbeat implements store.Store: each chunk of leases is renewed by
// one statement, joined with them by job id and token.
func (s *Store) Heartbeat(ctx context.Context, worker string, leases []store.Lease, until time.Time) (store.HeartbeatResult, error) {
	var res store.HeartbeatResult
	if len(leases) == 0 {
		return res, nil
	}
	renewed := map[store.Lease]bool{}
	err := s.write(ctx, func(tx *sql.Conn) error {
		clear(renewed)
		res.Canceled = res.Canceled[:0]
		for chunk := range leaseChunks(leases, 400) {
			q := `WITH h(id, lease) AS (VALUES ` + strings.Repeat("(?, ?), ", len(chunk)-1) + `(?, ?))
				UPDATE jobs SET lease_until = ? FROM h
				WHERE jobs.id = h.id AND jobs.lease = h.lease AND jobs.state = 'running' AND jobs.worker = ?
				RETURNING jobs.id, jobs.lease, jobs.cancel_requested`
			args := make([]any, 0, 2*len(chunk)+2)
			for _, l := range chunk {
				args = append(args, l.JobID, l.Token)
			}
			args = append(args, micros(until), worker)
			rows, err := tx.QueryContext(ctx, q, args...)
			if err != nil {
				return fmt.Errorf("sqlite: heartbeat: %w", err)
			}
			for rows.Next() {
				var l store.Lease
				var c int
				if err := rows.Scan(&l.JobID, &l.Token, &c); err != nil {
					rows.Close()
					return fmt.Errorf("sqlite: heartbeat: %w", err)
				}
				renewed[l] = true
				if c != 0 {
					res.Canceled = append(res.Canceled, l)
				}
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return fmt.Errorf("sqlite: heartbeat: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return store.HeartbeatResult{}, err
	}
	for _, l := range leases {
		if !renewed[l] {
			res.Lost = append(res.Lost, l)
		}
	}
	sortLeases(res.Canceled)
	sortLeases(res.Lost)
	res.Lost = slices.Compact(res.Lost)
	return res, nil
}

// sortLeases sorts leases by job id, then token.
func sortLeases(ls []store.Lease) {
	slices.SortFunc(ls, func(a, b store.Lease) int {
		if a.JobID != b.JobID {
			return cmp.Compare(a.JobID, b.JobID)
		}
		return cmp.Compare(a.Token, b.Token)
	})
}

func leaseChunks(ls []store.Lease, n int) func(func([]store.Lease) bool) {
	return func(yield func([]store.Lease) bool) {
		for len(ls) > 0 {
			k := min(n, len(ls))
			if !yield(ls[:k]) {
				return
			}
			ls = ls[k:]
		}
	}
}

// Progress implements store.Store.
func (s *Store) Progress(ctx context.Context, worker string, updates []store.ProgressUpdate) error {
	if len(updates) == 0 {
		return nil
	}
	return s.write(ctx, func(tx *sql.Conn) error {
		st := s.stmt(tx, "progress")
		for _, u := range updates {
			if _, err := st.ExecContext(ctx, u.Done, u.Total, micros(u.At), u.JobID, u.Lease, worker); err != nil {
				return fmt.Errorf("sqlite: progress of job %d: %w", u.JobID, err)
			}
		}
		return nil
	})
}

// CancelRequested implements store.CancelChecker: a read of the jobs by
// primary key, which takes no write lock.
func (s *Store) CancelRequested(ctx context.Context, worker string, leases []store.Lease) ([]store.Lease, error) {
	if len(leases) == 0 {
		return nil, nil
	}
	db, err := s.readDB()
	if err != nil {
		return nil, err
	}
	asked := make(map[store.Lease]bool, len(leases))
	ids := make([]int64, 0, len(leases))
	for _, l := range leases {
		if !asked[l] {
			asked[l] = true
			ids = append(ids, l.JobID)
		}
	}
	var out []store.Lease
	for chunk := range chunks(ids, 500) {
		q := `SELECT id, lease FROM jobs WHERE id IN (` + placeholders(len(chunk)) + `)
			AND state = 'running' AND worker = ? AND cancel_requested <> 0`
		rows, err := db.QueryContext(ctx, q, append(int64Args(chunk), worker)...)
		if err != nil {
			return nil, fmt.Errorf("sqlite: cancel requested: %w", err)
		}
		for rows.Next() {
			var l store.Lease
			if err := rows.Scan(&l.JobID, &l.Token); err != nil {
				rows.Close()
				return nil, fmt.Errorf("sqlite: cancel requested: %w", err)
			}
			if asked[l] {
				out = append(out, l)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("sqlite: cancel requested: %w", err)
		}
	}
	sortLeases(out)
	return slices.Compact(out), nil
}

func chunks(ids []int64, n int) func(func([]int64) bool) {
	return func(yield func([]int64) bool) {
		for len(ids) > 0 {
			k := min(n, len(ids))
			if !yield(ids[:k]) {
				return
			}
			ids = ids[k:]
		}
	}
}

func placeholders(n int) string {
	if n <= 0 {
		return ""
	}
	return strings.Repeat("?, ", n-1) + "?"
}

func int64Args(ids []int64) []any {
	out := make([]any, len(ids))
	for i, id := range ids {
		out[i] = id
	}
	return out
}

// Expired implements store.Store.
func (s *Store) Expired(ctx context.Context, now time.Time, limit int) ([]*store.Job, error) {
	db, err := s.readDB()
	if err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = 100
	}
	rows, err := db.QueryContext(ctx, `SELECT `+jobColumnsNoHistory+` FROM jobs
		WHERE state = 'running' AND lease_until < ? ORDER BY lease_until, id LIMIT ?`, micros(now), limit)
	if err != nil {
		return nil, fmt.Errorf("sqlite: expired: %w", err)
	}
	return collect(rows, false, s.payloads)
}

func collect(rows *sql.Rows, withHistory bool, c store.PayloadCodec) ([]*store.Job, error) {
	defer rows.Close()
	var out []*store.Job
	for rows.Next() {
		j, err := scanJob(rows, withHistory, c)
		if err != nil {
			return nil, fmt.Errorf("sqlite: %w", err)
		}
		out = append(out, j)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	return out, nil
}

// Get implements store.Store.
func (s *Store) Get(ctx context.Context, id int64) (*store.Job, error) {
	db, err := s.readDB()
	if err != nil {
		return nil, err
	}
	var result []byte
	row := db.QueryRowContext(ctx, `SELECT `+jobColumns+`, result FROM jobs WHERE id = ?`, id)
	j, err := scanJob(alsoScan{row, &result}, true, s.payloads)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("sqlite: job %d: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: get job %d: %w", id, err)
	}
	store.OpenJobResult(s.payloads, j, result)
	if err := setBlockedDependents(ctx, db, []*store.Job{j}); err != nil {
		return nil, err
	}
	return j, nil
}

// where builds the WHERE clause of a filter.
func where(f store.Filter) (string, []any, error) { return whereKeys(f, true) }

// errorKey is the key of jobs_dead_error (migration 0041): it must be
// written as the index's expression for the planner to use the index.
// 200 is store.ErrorPrefixKeyLen.
const errorKey = "substr(last_error, 1, 200)"

// whereKeys builds the WHERE clause of a filter. With prefixKeys, an
// ErrorPrefix is written as a range of jobs_dead_error's keys (which the
// planner may then read); without, as a test of each row's error only.
func whereKeys(f store.Filter, prefixKeys bool) (string, []any, error) {
	var conds []string
	var args []any
	if len(f.States) > 0 {
		// The states are written in the statement, not bound: the
		// planner then uses the partial indexes of a state (jobs_dead...)
		// whose condition a parameter would not prove.
		states := make([]string, len(f.States))
		for i, st := range f.States {
			if !st.Valid() {
				return "", nil, fmt.Errorf("%w: unknown state %q", store.ErrInvalid, st)
			}
			states[i] = "'" + string(st) + "'"
		}
		if len(states) == 1 {
			conds = append(conds, "state = "+states[0])
		} else {
			conds = append(conds, "state IN ("+strings.Join(states, ", ")+")")
		}
	}
	if f.Queue != "" {
		conds = append(conds, "queue = ?")
		args = append(args, f.Queue)
	}
	if f.Kind != "" {
		conds = append(conds, "kind = ?")
		args = append(args, f.Kind)
	}
	if f.Class != "" {
		c, err := failure.ParseClass(f.Class)
		if err != nil {
			return "", nil, fmt.Errorf("%w: %v", store.ErrInvalid, err)
		}
		conds = append(conds, "last_error_class = ?")
		args = append(args, c.String())
	}
	if f.Reason != "" {
		conds = append(conds, "dead_reason = ?")
		args = append(args, f.Reason)
	}
	if f.Fingerprint != "" {
		conds = append(conds, "fingerprint = ?")
		args = append(args, f.Fingerprint)
	}
	if !f.Since.IsZero() || !f.Until.IsZero() {
		ref := refTime(f)
		if !f.Since.IsZero() {
			conds = append(conds, ref+" >= ?")
			args = append(args, micros(f.Since))
		}
		if !f.Until.IsZero() {
			conds = append(conds, ref+" < ?")
			args = append(args, micros(f.Until))
		}
	}
	if f.ErrorContains != "" {
		conds = append(conds, "redrive_contains_fold(last_error, ?)")
		args = append(args, f.ErrorContains)
	}
	if f.ErrorPrefix != "" {
		c, a, err := errorPrefixConds(f.ErrorPrefix, prefixKeys)
		if err != nil {
			return "", nil, err
		}
		conds = append(conds, c...)
		args = append(args, a...)
	}
	if len(f.IDs) > 0 {
		conds = append(conds, "id IN ("+placeholders(len(f.IDs))+")")
		args = append(args, int64Args(f.IDs)...)
	}
	if f.PayloadField != "" || len(f.PayloadValue) > 0 {
		c, a, err := payloadMatch(f)
		if err != nil {
			return "", nil, err
		}
		conds = append(conds, c)
		args = append(args, a...)
	}
	if len(conds) == 0 {
		return "1", nil, nil
	}
	return strings.Join(conds, " AND "), args, nil
}

// errorPrefixConds are the conditions of Filter.ErrorPrefix p: with
// keys, the range of jobs_dead_error's keys that start with p (exact for
// a p shorter than the key; a longer one is checked whole too); without,
// a test of each row's error.
func errorPrefixConds(p string, keys bool) ([]string, []any, error) {
	if err := store.CheckErrorPrefix(p); err != nil {
		return nil, nil, err
	}
	n := utf8.RuneCountInString(p)
	whole := []string{"substr(last_error, 1, ?) = ?"}
	wholeArgs := []any{n, p}
	if !keys {
		return whole, wholeArgs, nil
	}
	lo, hi, eq := store.ErrorPrefixRange(p)
	switch {
	case eq:
		return append([]string{errorKey + " = ?"}, whole...), append([]any{lo}, wholeArgs...), nil
	case hi == "":
		return append([]string{errorKey + " >= ?"}, whole...), append([]any{lo}, wholeArgs...), nil
	}
	return []string{errorKey + " >= ?", errorKey + " < ?"}, []any{lo, hi}, nil
}

func refTime(f store.Filter) string {
	if f.DeadOnly() {
		return "dead_at"
	}
	return "(CASE state WHEN 'dead' THEN dead_at WHEN 'completed' THEN finished_at WHEN 'canceled' THEN finished_at ELSE created_at END)"
}

// List implements store.Store.
func (s *Store) List(ctx context.Context, f store.Filter, p store.Page) (store.ListResult, error) {
	db, err := s.readDB()
	if err != nil {
		return store.ListResult{}, err
	}
	dead := f.DeadOnly()
	// A dead-only listing by error prefix reads its page from the
	// prefix's range of jobs_dead_error when the range is short, else
	// walks the newest dead jobs (through the index of another filter,
	// if any) testing each one's error.
	byPrefix := false
	if dead && f.ErrorPrefix != "" {
		if byPrefix, err = s.fewWithErrorPrefix(ctx, db, f, p.Size()); err != nil {
			return store.ListResult{}, fmt.Errorf("sqlite: list: %w", err)
		}
	}
	w, args, err := whereKeys(f, byPrefix)
	if err != nil {
		return store.ListResult{}, fmt.Errorf("sqlite: list: %w", err)
	}
	order := "id DESC"
	if dead {
		order = "dead_at DESC, id DESC"
	}
	if p.Cursor != "" {
		t, id, err := store.DecodeCursor(p.Cursor, dead)
		if err != nil {
			return store.ListResult{}, fmt.Errorf("sqlite: list: %w", err)
		}
		if dead {
			w += " AND (dead_at, id) < (?, ?)"
			args = append(args, t, id)
		} else {
			w += " AND id < ?"
			args = append(args, id)
		}
	}
	limit := p.Size()
	args = append(args, limit+1)
	q := `SELECT ` + jobColumns + ` FROM jobs WHERE ` + w + ` ORDER BY ` + order + ` LIMIT ?`
	if byPrefix {
		// The page's ids from the index alone (its entries hold the
		// key, dead_at and id), then their rows.
		q = `SELECT ` + jobColumns + ` FROM jobs WHERE id IN (SELECT id FROM jobs INDEXED BY jobs_dead_error WHERE ` + w +
			` ORDER BY ` + order + ` LIMIT ?) ORDER BY ` + order
	}
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return store.ListResult{}, fmt.Errorf("sqlite: list: %w", err)
	}
	jobs, err := collect(rows, true, s.payloads)
	if err != nil {
		return store.ListResult{}, err
	}
	if err := setBlockedDependents(ctx, db, jobs); err != nil {
		return store.ListResult{}, err
	}
	return p.Result(jobs, dead), nil
}

// errorPrefixFew is the most dead jobs with one error prefix that a page
// of them reads from jobs_dead_error and sorts; with more, a page walks
// the newest dead jobs instead, and finds its jobs among the first
// pageSize x dead/matches on average. Each costs a row read an entry
// (the index is not covering: its key is an expression), so the two
// plans' worst cases meet near the square root of a page times the dead
// jobs (store.ErrorPrefixFew: 7,142 for pages of 50 at 1,000,000), which
// this bounds. See BENCHMARKS.md, "The DLQ at depth".
const errorPrefixFew = 5000

// fewWithErrorPrefix reports whether fewer dead jobs match f (dead-only,
// with an ErrorPrefix) than where a page of size changes plans: from the
// bounds of the causes' errors when f names only fields of the cause and
// the bounds decide, else by reading at most that many entries of
// jobs_dead_error.
func (s *Store) fewWithErrorPrefix(ctx context.Context, db *sql.DB, f store.Filter, size int) (bool, error) {
	few := int64(s.prefixFew)
	if f.PrefixCauseOnly() {
		cs, err := causeBounds(ctx, db, f)
		if err != nil {
			return false, err
		}
		_, matched, total, exact := store.PrefixCounts(cs, f.ErrorPrefix)
		few = min(few, store.ErrorPrefixFew(size, total))
		if exact {
			return matched < few, nil
		}
	}
	c, a, err := errorPrefixConds(f.ErrorPrefix, true)
	if err != nil {
		return false, err
	}
	var n int64
	err = db.QueryRowContext(ctx, `SELECT count(*) FROM (SELECT 1 FROM jobs INDEXED BY jobs_dead_error WHERE state = 'dead' AND `+
		strings.Join(c, " AND ")+` LIMIT ?)`, append(a, few)...).Scan(&n)
	return n < few, err
}

// queryer is a database or a transaction.
type queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// causeBounds reads the counted causes of dead jobs that f's fields of
// the cause select (its ErrorPrefix aside), with the bounds of their
// errors (migration 0044).
func causeBounds(ctx context.Context, q queryer, f store.Filter) ([]store.CauseBounds, error) {
	if err := store.CheckErrorPrefix(f.ErrorPrefix); err != nil {
		return nil, err
	}
	f.States, f.ErrorPrefix = nil, ""
	w, args, err := where(f)
	if err != nil {
		return nil, err
	}
	rows, err := q.QueryContext(ctx, `SELECT fingerprint, n, error_lo, error_hi FROM dead_groups WHERE `+w, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var cs []store.CauseBounds
	for rows.Next() {
		var c store.CauseBounds
		var lo, hi sql.NullString
		if err := rows.Scan(&c.Fingerprint, &c.N, &lo, &hi); err != nil {
			return nil, err
		}
		c.Lo, c.Hi, c.Known = lo.String, hi.String, lo.Valid && hi.Valid
		cs = append(cs, c)
	}
	return cs, rows.Err()
}

// Count implements store.Store.
func (s *Store) Count(ctx context.Context, f store.Filter) (int64, error) {
	db, err := s.readDB()
	if err != nil {
		return 0, err
	}
	q := `SELECT count(*) FROM jobs WHERE `
	if f.DeadOnly() && f.PrefixCauseOnly() {
		// The causes whose errors all start with the prefix, as
		// counted, when no cause straddles its range; else the jobs.
		cs, err := causeBounds(ctx, db, f)
		if err != nil {
			return 0, fmt.Errorf("sqlite: count: %w", err)
		}
		if _, matched, _, exact := store.PrefixCounts(cs, f.ErrorPrefix); exact {
			return matched, nil
		}
	}
	if f.DeadOnly() && f.CauseOnly() {
		// The dead jobs of the causes the filter selects, as counted.
		f.States = nil
		q = `SELECT coalesce(sum(n), 0) FROM dead_groups WHERE `
	}
	w, args, err := where(f)
	if err != nil {
		return 0, fmt.Errorf("sqlite: count: %w", err)
	}
	var n int64
	if err := db.QueryRowContext(ctx, q+w, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("sqlite: count: %w", err)
	}
	return n, nil
}

// Groups implements store.Store. The sample of a group is its most
// recent dead job (latest dead_at, then largest id).
func (s *Store) Groups(ctx context.Context, f store.Filter, limit int) ([]store.Group, error) {
	db, err := s.readDB()
	if err != nil {
		return nil, err
	}
	if !f.SelectsDead() {
		return []store.Group{}, nil
	}
	f.States = []store.State{store.Dead}
	w, args, err := where(f)
	if err != nil {
		return nil, fmt.Errorf("sqlite: groups: %w", err)
	}
	limit = store.Page{Limit: limit}.Size()
	// One read transaction: the counts and the jobs probed agree.
	tx, err := db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("sqlite: groups: %w", err)
	}
	defer tx.Rollback()
	var gs []store.Group
	exact := false
	if f.CauseOnly() {
		gs, err = causeCounts(ctx, tx, f, limit)
		exact = true
	} else if f.PrefixCauseOnly() {
		gs, exact, err = prefixCauseCounts(ctx, tx, f, limit)
	}
	if err == nil && !exact {
		gs, err = countGroups(ctx, tx, w, args, limit)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: groups: %w", err)
	}
	// Each group's first and last dead job, and its sample, are the ends
	// of its range of jobs_dead_fingerprint (fingerprint, dead_at, id).
	last, err := tx.PrepareContext(ctx, `SELECT id, dead_at, last_error, last_error_class, dead_reason, queue, kind
		FROM jobs INDEXED BY jobs_dead_fingerprint WHERE `+w+` AND fingerprint = ? ORDER BY dead_at DESC, id DESC LIMIT 1`)
	if err != nil {
		return nil, fmt.Errorf("sqlite: groups: %w", err)
	}
	defer last.Close()
	first, err := tx.PrepareContext(ctx, `SELECT dead_at FROM jobs INDEXED BY jobs_dead_fingerprint WHERE `+w+` AND fingerprint = ? ORDER BY dead_at, id LIMIT 1`)
	if err != nil {
		return nil, fmt.Errorf("sqlite: groups: %w", err)
	}
	defer first.Close()
	out := make([]store.Group, 0, len(gs))
	for _, g := range gs {
		var lastAt, firstAt int64
		a := append(slices.Clip(args), g.Fingerprint)
		err := last.QueryRowContext(ctx, a...).Scan(&g.SampleID, &lastAt, &g.Sample, &g.Class, &g.Reason, &g.Queue, &g.Kind)
		if err == nil {
			err = first.QueryRowContext(ctx, a...).Scan(&firstAt)
		}
		if errors.Is(err, sql.ErrNoRows) {
			continue // counted but gone: cannot be, within one transaction
		}
		if err != nil {
			return nil, fmt.Errorf("sqlite: groups: %w", err)
		}
		g.First, g.Last = fromMicros(firstAt), fromMicros(lastAt)
		out = append(out, g)
	}
	return store.RankGroups(out, limit), nil
}

// causeCounts returns the fingerprints with dead jobs matching f (a
// CauseOnly filter) and their counts, from dead_groups: the groups that
// can rank among the first limit by count (store.GroupCandidates).
func causeCounts(ctx context.Context, tx *sql.Tx, f store.Filter, limit int) ([]store.Group, error) {
	f.States = nil
	w, args, err := where(f)
	if err != nil {
		return nil, err
	}
	rows, err := tx.QueryContext(ctx, `SELECT fingerprint, sum(n) FROM dead_groups WHERE `+w+`
		GROUP BY fingerprint HAVING sum(n) > 0`, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var gs []store.Group
	for rows.Next() {
		var g store.Group
		if err := rows.Scan(&g.Fingerprint, &g.Count); err != nil {
			return nil, err
		}
		gs = append(gs, g)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return store.GroupCandidates(gs, limit), nil
}

// prefixCauseCounts returns the fingerprints with dead jobs matching f (a
// PrefixCauseOnly filter) and their counts, from the causes whose errors
// all start with its prefix, when the bounds of the causes' errors
// decide (exact); else nothing.
func prefixCauseCounts(ctx context.Context, tx *sql.Tx, f store.Filter, limit int) ([]store.Group, bool, error) {
	cs, err := causeBounds(ctx, tx, f)
	if err != nil {
		return nil, false, err
	}
	byFP, _, _, exact := store.PrefixCounts(cs, f.ErrorPrefix)
	if !exact {
		return nil, false, nil
	}
	gs := make([]store.Group, 0, len(byFP))
	for fp, n := range byFP {
		gs = append(gs, store.Group{Fingerprint: fp, Count: n})
	}
	return store.GroupCandidates(gs, limit), true, nil
}

// countGroups counts the dead jobs matching w by fingerprint, reading
// them: filters that dead_groups cannot answer.
func countGroups(ctx context.Context, tx *sql.Tx, w string, args []any, limit int) ([]store.Group, error) {
	rows, err := tx.QueryContext(ctx, `SELECT fingerprint, count(*) FROM jobs WHERE `+w+` GROUP BY fingerprint`, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var gs []store.Group
	for rows.Next() {
		var g store.Group
		if err := rows.Scan(&g.Fingerprint, &g.Count); err != nil {
			return nil, err
		}
		gs = append(gs, g)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return store.GroupCandidates(gs, limit), nil
}

// Cancel implements store.Store.
func (s *Store) Cancel(ctx context.Context, id int64, now time.Time) (*store.Job, error) {
	ev, err := eventJSON(&store.Event{Kind: store.EventCanceled, At: now})
	if err != nil {
		return nil, err
	}
	var job *store.Job
	err = s.write(ctx, func(tx *sql.Conn) error {
		var state, queue string
		err := tx.QueryRowContext(ctx, `SELECT state, queue FROM jobs WHERE id = ?`, id).Scan(&state, &queue)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("sqlite: cancel job %d: %w", id, store.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("sqlite: cancel job %d: %w", id, err)
		}
		switch store.State(state) {
		case store.Pending, store.Scheduled, store.Blocked, store.Dead:
			if _, err := tx.ExecContext(ctx, `UPDATE jobs SET state = 'canceled', finished_at = ?,
				history = json_insert(coalesce(history, '[]'), '$[#]', json(?)) WHERE id = ?`, micros(now), ev, id); err != nil {
				return fmt.Errorf("sqlite: cancel job %d: %w", id, err)
			}
			if store.State(state) == store.Blocked {
				break // the trigger jobs_unblocked counts moves out of blocked
			}
			mv := moves{}
			mv.move(queue, store.State(state), store.Canceled)
			if err := s.addMoves(ctx, tx, mv); err != nil {
				return err
			}
			if err := s.addCounters(ctx, tx, map[[2]string]int64{{queue, store.StatCanceled}: 1}); err != nil {
				return err
			}
		case store.Running:
			if _, err := tx.ExecContext(ctx, `UPDATE jobs SET cancel_requested = 1 WHERE id = ?`, id); err != nil {
				return fmt.Errorf("sqlite: cancel job %d: %w", id, err)
			}
		default:
			return fmt.Errorf("sqlite: cancel job %d in state %s: %w", id, state, store.ErrConflict)
		}
		job, err = scanJob(tx.QueryRowContext(ctx, `SELECT `+jobColumns+` FROM jobs WHERE id = ?`, id), true, s.payloads)
		if err != nil {
			return fmt.Errorf("sqlite: cancel job %d: %w", id, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return job, nil
}

// Redrive implements store.Store.
func (s *Store) Redrive(ctx context.Context, p store.RedriveParams) (store.RedriveResult, error) {
	res := store.RedriveResult{Redriven: []int64{}, Refused: []int64{}, Skipped: []int64{}}
	if len(p.Payload) > 0 && !json.Valid(p.Payload) {
		return res, fmt.Errorf("sqlite: redrive: %w: payload is not valid JSON", store.ErrInvalid)
	}
	if err := store.CheckRedriveKeys(p.Keys); err != nil {
		return res, fmt.Errorf("sqlite: redrive: %w", err)
	}
	ev, err := eventJSON(&store.Event{Kind: store.EventRedriven, At: p.Now, Note: p.Note})
	if err != nil {
		return res, err
	}
	err = s.write(ctx, func(tx *sql.Conn) error { return s.redriveTx(ctx, tx, p, ev, &res) })
	return res, err
}

// redriveTx redrives the dead jobs p.IDs in tx, recording ev (the
// redriven event's JSON) in their history: Redrive, and the steps of a
// redrive operation.
func (s *Store) redriveTx(ctx context.Context, tx *sql.Conn, p store.RedriveParams, ev any, res *store.RedriveResult) error {
	res.Redriven, res.Refused, res.Skipped = res.Redriven[:0], res.Refused[:0], res.Skipped[:0]
	counts := map[[2]string]int64{}
	mv := moves{}
	seen := make(map[int64]bool, len(p.IDs))
	for _, id := range p.IDs {
		// An id given twice is redriven, and reported, once.
		if seen[id] {
			continue
		}
		seen[id] = true
		var state, queue string
		var reproc int
		var old []byte
		var climit, ckey string
		var fkey *string
		err := s.stmt(tx, "redriveRead").QueryRowContext(ctx, len(p.Payload) > 0, id).Scan(&state, &queue, &reproc, &old, &climit, &ckey, &fkey)
		if errors.Is(err, sql.ErrNoRows) || (err == nil && state != string(store.Dead)) {
			res.Skipped = append(res.Skipped, id)
			continue
		}
		if err != nil {
			return fmt.Errorf("sqlite: redrive job %d: %w", id, err)
		}
		if reproc == 0 {
			res.Refused = append(res.Refused, id)
			continue
		}
		ev := ev
		if len(p.Payload) > 0 {
			// Edit and redrive: the history keeps the payload replaced,
			// and the job moves to the limit group and fair key the new
			// payload names.
			if ev, err = eventJSON(&store.Event{Kind: store.EventRedriven, At: p.Now, Note: p.Note,
				PreviousPayload: store.PreviousPayload(old)}); err != nil {
				return err
			}
			ckey, fkey = p.Keys.LimitKey(climit, ckey), p.Keys.FairKey(queue, fkey)
		}
		payload, err := store.SealPayload(s.payloads, queue, p.Payload)
		if err != nil {
			return fmt.Errorf("sqlite: redrive job %d: %w", id, err)
		}
		_, err = s.stmt(tx, "redrive").ExecContext(ctx, micros(p.Now), nullBytes(payload), ckey, fkey, ev, id)
		if err != nil {
			return fmt.Errorf("sqlite: redrive job %d: %w", id, err)
		}
		res.Redriven = append(res.Redriven, id)
		counts[[2]string{queue, store.StatRedriven}]++
		mv.move(queue, store.Dead, store.Pending)
	}
	n, err := unblocks(ctx, tx, res.Redriven)
	if err != nil {
		return err
	}
	res.Unblocks = n
	if err := s.addMoves(ctx, tx, mv); err != nil {
		return err
	}
	return s.addCounters(ctx, tx, counts)
}

// Purge implements store.Store.
func (s *Store) Purge(ctx context.Context, f store.Filter, limit int) (int64, error) {
	if !f.SelectsDead() {
		return 0, nil
	}
	f.States = []store.State{store.Dead}
	w, args, err := where(f)
	if err != nil {
		return 0, fmt.Errorf("sqlite: purge: %w", err)
	}
	if limit <= 0 {
		return 0, nil
	}
	var n int64
	err = s.write(ctx, func(tx *sql.Conn) (err error) {
		n, err = s.deleteJobs(ctx, tx, "purge", `DELETE FROM jobs WHERE id IN (SELECT id FROM jobs WHERE `+w+` LIMIT ?) RETURNING `+deletedColumns,
			append(args, limit), store.Dead)
		return err
	})
	return n, err
}

// deleteJobs runs a DELETE ... RETURNING queue of jobs in state and keeps
// the counts: the jobs leave state, and dead jobs count as purged.
func (s *Store) deleteJobs(ctx context.Context, tx *sql.Conn, op, query string, args []any, state store.State) (int64, error) {
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return 0, fmt.Errorf("sqlite: %s: %w", op, err)
	}
	var n int64
	counts := map[[2]string]int64{}
	mv := moves{}
	var keys []tombstone
	for rows.Next() {
		var q string
		var t tombstone
		if err := rows.Scan(&q, &t.key, &t.id, &t.kind, &t.created, &t.finished); err != nil {
			rows.Close()
			return 0, fmt.Errorf("sqlite: %s: %w", op, err)
		}
		if t.key.Valid {
			t.queue = q
			keys = append(keys, t)
		}
		n++
		mv.move(q, state, "")
		if state == store.Dead {
			counts[[2]string{q, store.StatPurged}]++ // purged, or expired by retention
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("sqlite: %s: %w", op, err)
	}
	if err := keepKeys(ctx, tx, keys, state); err != nil {
		return 0, fmt.Errorf("sqlite: %s: %w", op, err)
	}
	if err := s.addMoves(ctx, tx, mv); err != nil {
		return 0, err
	}
	return n, s.addCounters(ctx, tx, counts)
}

// deleteFinishedSQL deletes up to a limit of the jobs of a finished state
// that finished before a time. Its predicate (finished_at IS NOT NULL)
// matches the partial index jobs_finished (migration 0021), so it reads
// only the expired rows, not the whole jobs table; the limit keeps one
// call's write transaction short (the cleaner calls it until fewer than
// the limit are deleted).
const deleteFinishedSQL = `DELETE FROM jobs WHERE id IN (SELECT id FROM jobs
			WHERE state = ? AND finished_at IS NOT NULL AND finished_at < ? LIMIT ?) RETURNING ` + deletedColumns

// DeleteFinished implements store.Store.
func (s *Store) DeleteFinished(ctx context.Context, state store.State, before time.Time, limit int) (int64, error) {
	switch state {
	case store.Completed, store.Dead, store.Canceled:
	default:
		return 0, fmt.Errorf("sqlite: delete finished: %w: state %q is not a finished state", store.ErrInvalid, state)
	}
	if limit <= 0 {
		return 0, nil
	}
	var n int64
	err := s.write(ctx, func(tx *sql.Conn) (err error) {
		n, err = s.deleteJobs(ctx, tx, "delete finished", deleteFinishedSQL,
			[]any{string(state), micros(before), limit}, state)
		return err
	})
	return n, err
}

// Stats implements store.Store.
func (s *Store) Stats(ctx context.Context) (store.Stats, error) {
	st := store.Stats{Jobs: map[string]map[store.State]int64{}, Counters: map[string]map[string]int64{}}
	db, err := s.readDB()
	if err != nil {
		return st, err
	}
	tx, err := db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return st, fmt.Errorf("sqlite: stats: %w", err)
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, `SELECT queue, state, n FROM job_counts WHERE n <> 0`)
	if err != nil {
		return st, fmt.Errorf("sqlite: stats: %w", err)
	}
	for rows.Next() {
		var q, state string
		var n int64
		if err := rows.Scan(&q, &state, &n); err != nil {
			rows.Close()
			return st, fmt.Errorf("sqlite: stats: %w", err)
		}
		if st.Jobs[q] == nil {
			st.Jobs[q] = map[store.State]int64{}
		}
		st.Jobs[q][store.State(state)] = n
	}
	rows.Close()
	rows, err = tx.QueryContext(ctx, `SELECT queue, name, n FROM counters`)
	if err != nil {
		return st, fmt.Errorf("sqlite: stats: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var q, name string
		var n int64
		if err := rows.Scan(&q, &name, &n); err != nil {
			return st, fmt.Errorf("sqlite: stats: %w", err)
		}
		if st.Counters[q] == nil {
			st.Counters[q] = map[string]int64{}
		}
		st.Counters[q][name] = n
	}
	return st, rows.Err()
}
