package postgres

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/store"
)

// ts is a time as stored: microseconds (timestamptz keeps no more), UTC.
func ts(t time.Time) time.Time { return t.Truncate(time.Microsecond).UTC() }

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// jobScan reads rows of the columns of jobColumns (and the history when
// withHistory) into jobs. Its destinations are allocated once and reused
// row after row: a fetch reads a thousand rows at a time.
type jobScan struct {
	withHistory              bool
	payloads                 store.PayloadCodec
	j                        store.Job
	payload, policy, history []byte
	idem, worker             *string
	state, class             string
	lastDuration, lastDelay  *int64
	pDone, pTotal            *int64
	pAt                      *time.Time
	replayOf                 *int64
	priority                 int16
	trace                    *string
	tracePacked              []byte
	dest                     []any
}

func newJobScan(withHistory bool, c store.PayloadCodec) *jobScan {
	sc := &jobScan{withHistory: withHistory, payloads: c}
	j := &sc.j
	sc.dest = []any{&j.ID, &j.Queue, &j.Kind, &sc.payload, &sc.state, &j.Attempt, &j.MaxRetries, &sc.policy, &sc.idem, &j.Dependency,
		&j.Reprocessable, &j.CreatedAt, &j.RunAt, &j.AttemptedAt, &j.FinishedAt, &j.LeaseUntil, &sc.worker, &j.CancelRequested,
		&j.RetryCount, &j.LastError, &sc.class, &j.LastFailedAt, &j.DeadAt, &j.DeadReason, &j.Fingerprint, &j.Redriven,
		&sc.lastDuration, &sc.lastDelay, &sc.pDone, &sc.pTotal, &sc.pAt, &sc.replayOf, &j.Lease, &sc.priority, &sc.trace, &sc.tracePacked}
	if withHistory {
		sc.dest = append(sc.dest, &sc.history)
	}
	return sc
}

// scan reads one row into a new job.
func (sc *jobScan) scan(row pgx.Row) (*store.Job, error) {
	// Every destination starts empty, so that no pointer or buffer of the
	// previous row is reused by this one.
	sc.j = store.Job{}
	sc.payload, sc.policy, sc.history = nil, nil, nil
	sc.idem, sc.worker, sc.trace, sc.tracePacked = nil, nil, nil, nil
	sc.lastDuration, sc.lastDelay, sc.pDone, sc.pTotal, sc.pAt, sc.replayOf = nil, nil, nil, nil, nil, nil
	if err := row.Scan(sc.dest...); err != nil {
		return nil, err
	}
	j := sc.j
	j.Payload = json.RawMessage(sc.payload)
	if len(sc.policy) > 0 {
		j.Policy = json.RawMessage(sc.policy)
	}
	j.State = store.State(sc.state)
	if sc.idem != nil {
		j.IdempotencyKey = *sc.idem
	}
	if sc.worker != nil {
		j.Worker = *sc.worker
	}
	var text string
	if sc.trace != nil {
		text = *sc.trace
	}
	j.Trace = readTrace(text, sc.tracePacked)
	j.CreatedAt = j.CreatedAt.UTC()
	j.RunAt = j.RunAt.UTC()
	j.AttemptedAt = utcPtr(j.AttemptedAt)
	j.FinishedAt = utcPtr(j.FinishedAt)
	j.LeaseUntil = utcPtr(j.LeaseUntil)
	j.LastFailedAt = utcPtr(j.LastFailedAt)
	j.DeadAt = utcPtr(j.DeadAt)
	if sc.lastDuration != nil {
		j.LastDuration = store.Duration(*sc.lastDuration)
	}
	if sc.lastDelay != nil {
		j.LastDelay = store.Duration(*sc.lastDelay)
	}
	if sc.replayOf != nil {
		j.ReplayOf = *sc.replayOf
	}
	j.Priority = int(sc.priority)
	if sc.pDone != nil {
		j.Progress = &store.JobProgress{Done: *sc.pDone}
		if sc.pTotal != nil {
			j.Progress.Total = *sc.pTotal
		}
		if sc.pAt != nil {
			j.Progress.At = sc.pAt.UTC()
		}
	}
	if err := store.DecodeStored(&j, sc.class, sc.history, sc.withHistory); err != nil {
		return nil, err
	}
	store.OpenJob(sc.payloads, &j)
	return &j, nil
}

// scanJob reads the columns of jobColumns, and the history when
// withHistory, into a job.
func scanJob(row pgx.Row, withHistory bool, c store.PayloadCodec) (*store.Job, error) {
	return newJobScan(withHistory, c).scan(row)
}

// alsoScan scans a row of a job's columns followed by more columns
// (extra's destinations).
type alsoScan struct {
	row   pgx.Row
	extra any
}

func (a alsoScan) Scan(dest ...any) error { return a.row.Scan(append(dest, a.extra)...) }

// collect reads rows of the columns of jobColumns (and the history when
// withHistory) into jobs. Rows of the layout pgx asks for (rawLayout)
// are decoded straight from their bytes (decodeRaw), without pgx's scan
// plans: a fetch reads a thousand rows at a time.
func collect(rows pgx.Rows, withHistory bool, c store.PayloadCodec) ([]*store.Job, error) {
	defer rows.Close()
	var out []*store.Job
	sc := newJobScan(withHistory, c)
	raw, binaryHistory := false, false
	for n := 0; rows.Next(); n++ {
		if n == 0 && rawDecode {
			raw, binaryHistory = rawLayout(rows.FieldDescriptions(), withHistory)
		}
		var j *store.Job
		var err error
		if raw {
			j, err = sc.decodeRaw(rows.RawValues(), binaryHistory)
		} else {
			j, err = sc.scan(rows)
		}
		if err != nil {
			return nil, err
		}
		out = append(out, j)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// cleanText makes s storable in a text column: PostgreSQL text holds
// neither NUL bytes nor invalid UTF-8. It is used for free text (error
// messages, worker names); identifiers are validated instead.
func cleanText(s string) string {
	if utf8.ValidString(s) && !strings.ContainsRune(s, 0) {
		return s
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}

// checkText reports an identifier-like field PostgreSQL cannot store as
// given.
func checkText(field, s string) error {
	if !utf8.ValidString(s) {
		return fmt.Errorf("%w: %s is not valid UTF-8", store.ErrInvalid, field)
	}
	if strings.ContainsRune(s, 0) {
		return fmt.Errorf("%w: %s contains a NUL byte", store.ErrInvalid, field)
	}
	return nil
}

// maxIndexed bounds, in bytes, the text of indexed columns a caller
// chooses (queue, idempotency key): a b-tree entry holds at most about
// 2.7 kB, and a notification payload (the queue) 8 kB.
const maxIndexed = 1000

// storedFingerprint is the fingerprint as stored: cleaned, and replaced
// by a digest of itself when too long to be indexed. Filters go through
// it too, so they match what was stored.
func storedFingerprint(fp string) string {
	fp = cleanText(fp)
	if len(fp) <= maxIndexed {
		return fp
	}
	sum := sha256.Sum256([]byte(fp))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// storedReason is a dead reason as stored: cleaned, and cut to its first
// maxIndexed bytes (at a character's boundary), so that it fits in the
// jobs_dead_reason index. A reason is a short machine-readable word; a
// longer one is cut, not refused: the job still dies. Filters go through
// it too, so they match what was stored.
func storedReason(r string) string {
	r = cleanText(r)
	if len(r) <= maxIndexed {
		return r
	}
	n := maxIndexed
	for n > 0 && !utf8.RuneStart(r[n]) {
		n--
	}
	return r[:n]
}

// eventJSON encodes an event for the history ("" for none). Its text is
// cleaned first: jsonb refuses \u0000.
func eventJSON(e *store.Event) (string, error) {
	if e == nil {
		return "", nil
	}
	b, err := json.Marshal(cleanEvent(*e))
	if err != nil {
		return "", fmt.Errorf("encode event: %w", err)
	}
	return string(b), nil
}

// cleanEvent returns e with its text cleaned (cleanText), so that jsonb
// keeps it.
func cleanEvent(e store.Event) store.Event {
	e.Class, e.Error, e.Reason, e.Worker, e.Note = cleanText(e.Class), cleanText(e.Error), cleanText(e.Reason), cleanText(e.Worker), cleanText(e.Note)
	e.Kind, e.PreviousPayload = store.EventKind(cleanText(string(e.Kind))), cleanText(e.PreviousPayload)
	return e
}

func dueState(runAt, now time.Time) store.State {
	if runAt.After(now) {
		return store.Scheduled
	}
	return store.Pending
}

// enqueueBatch is an Enqueue call's jobs, validated, as column arrays.
type enqueueBatch struct {
	queues, kinds, states, keys, deps []string
	payloads, policies                [][]byte
	maxRetries                        []int32
	reproc, isNew                     []bool
	runAts                            []time.Time
	// nows are the enqueue times (created_at), one per job: a batch
	// merged from several calls (see group.go) holds each call's own.
	nows []time.Time
	// priorities are the jobs' priorities (store.Job.Priority).
	priorities []int16
	// traces are the jobs' trace contexts (store.Job.Trace, "": none).
	traces []string
	// packed are the packed forms of traces (tracectx.AppendPacked), nil
	// for a context that has none, which is stored as its text.
	packed  [][]byte
	hasKeys bool
}

func validateNew(nj *store.NewJob) error {
	if nj.Queue == "" {
		return fmt.Errorf("%w: queue is empty", store.ErrInvalid)
	}
	if nj.Kind == "" {
		return fmt.Errorf("%w: kind is empty", store.ErrInvalid)
	}
	for _, f := range [][2]string{{"queue", nj.Queue}, {"kind", nj.Kind}, {"idempotency key", nj.IdempotencyKey}, {"dependency", nj.Dependency}} {
		if err := checkText(f[0], f[1]); err != nil {
			return err
		}
	}
	if len(nj.Queue) > maxIndexed {
		return fmt.Errorf("%w: queue name longer than %d bytes", store.ErrInvalid, maxIndexed)
	}
	if len(nj.Kind) > maxIndexed {
		return fmt.Errorf("%w: kind longer than %d bytes", store.ErrInvalid, maxIndexed)
	}
	if len(nj.IdempotencyKey) > maxIndexed {
		return fmt.Errorf("%w: idempotency key longer than %d bytes", store.ErrInvalid, maxIndexed)
	}
	if len(nj.Payload) > 0 && !json.Valid(nj.Payload) {
		return fmt.Errorf("%w: payload is not valid JSON", store.ErrInvalid)
	}
	if len(nj.Policy) > 0 && !json.Valid(nj.Policy) {
		return fmt.Errorf("%w: policy is not valid JSON", store.ErrInvalid)
	}
	if err := store.CheckTrace(nj.Trace); err != nil {
		return err
	}
	if nj.MaxRetries > 1<<31-1 || nj.MaxRetries < -1<<31 {
		return fmt.Errorf("%w: max retries %d out of range", store.ErrInvalid, nj.MaxRetries)
	}
	if err := store.CheckPriority(nj.Priority); err != nil {
		return err
	}
	if err := store.CheckNewFair(nj); err != nil {
		return err
	}
	return store.CheckNewLimit(nj)
}

func newBatch(jobs []store.NewJob, now time.Time, c store.PayloadCodec) (*enqueueBatch, error) {
	n := len(jobs)
	b := &enqueueBatch{
		queues: make([]string, n), kinds: make([]string, n), states: make([]string, n), keys: make([]string, n), deps: make([]string, n),
		payloads: make([][]byte, n), policies: make([][]byte, n), maxRetries: make([]int32, n),
		reproc: make([]bool, n), isNew: make([]bool, n), runAts: make([]time.Time, n), nows: make([]time.Time, n),
		priorities: make([]int16, n), traces: make([]string, n), packed: make([][]byte, n),
	}
	now = ts(now)
	seen := map[string]bool{}
	for i := range jobs {
		nj := &jobs[i]
		if err := validateNew(nj); err != nil {
			return nil, fmt.Errorf("job %d of %d: %w", i+1, n, err)
		}
		runAt := nj.RunAt
		if runAt.IsZero() {
			runAt = now
		}
		b.queues[i], b.kinds[i], b.keys[i], b.deps[i] = nj.Queue, nj.Kind, nj.IdempotencyKey, nj.Dependency
		b.payloads[i] = nj.Payload
		if len(b.payloads[i]) == 0 {
			b.payloads[i] = []byte("null")
		}
		if c != nil {
			sealed, err := c.Seal(nj.Queue, b.payloads[i])
			if err != nil {
				return nil, fmt.Errorf("job %d of %d: seal payload: %w", i+1, n, err)
			}
			b.payloads[i] = sealed
		}
		if len(nj.Policy) > 0 {
			b.policies[i] = nj.Policy
		}
		b.maxRetries[i] = int32(nj.MaxRetries)
		b.reproc[i] = !nj.NotReprocessable
		b.runAts[i] = ts(runAt)
		b.nows[i] = now
		b.priorities[i] = int16(nj.Priority)
		b.traces[i] = nj.Trace
		b.packed[i] = packTrace(nj.Trace)
		b.states[i] = string(dueState(b.runAts[i], now))
		// A key repeated within the call: only its first job is inserted,
		// the others get that job back.
		b.isNew[i] = nj.IdempotencyKey == "" || !seen[nj.IdempotencyKey]
		if nj.IdempotencyKey != "" {
			seen[nj.IdempotencyKey] = true
			b.hasKeys = true
		}
	}
	return b, nil
}

// plainPayload is the payload of a new job as its Job shows it (the
// batch holds the stored, maybe sealed, form).
func plainPayload(p json.RawMessage) json.RawMessage {
	if len(p) == 0 {
		return json.RawMessage("null")
	}
	return p
}

// job is the i-th job of the batch as inserted with id.
func (b *enqueueBatch) job(i int, id int64, nj *store.NewJob) *store.Job {
	return &store.Job{
		ID: id, Queue: b.queues[i], Kind: b.kinds[i], Payload: plainPayload(nj.Payload), State: store.State(b.states[i]),
		MaxRetries: int(b.maxRetries[i]), Policy: nj.Policy, IdempotencyKey: b.keys[i], Dependency: b.deps[i],
		Reprocessable: b.reproc[i], CreatedAt: b.nows[i], RunAt: b.runAts[i], Priority: int(b.priorities[i]), History: []store.Event{},
		Trace: b.traces[i],
	}
}

// errHolderGone means a job holding a key was deleted between the insert
// that found the key taken and the read of the job: the enqueue runs
// again (the key is free now).
var errHolderGone = errors.New("job holding the idempotency key vanished")

// Enqueue implements store.Store. Concurrent calls are written together
// (group commit, see group.go): their jobs go to the database in one
// statement, or one transaction when some have idempotency keys, with one
// commit and one notification per queue for them all. Jobs without
// idempotency keys are inserted by one statement; with keys, the
// statement and the read of the jobs already holding keys share a
// transaction.
func (s *Store) Enqueue(ctx context.Context, jobs []store.NewJob, now time.Time) ([]*store.Job, error) {
	if hasLimits(jobs) {
		return s.enqueueLimited(ctx, jobs, now) // limits.go
	}
	out, err := s.withKeptKeys(ctx, jobs, now, func(sub []store.NewJob, b *enqueueBatch) ([]*store.Job, error) {
		return s.group.enqueue(ctx, s, sub, b)
	})
	if err != nil {
		return nil, s.fail("enqueue", err)
	}
	s.noteEnqueued(len(jobs))
	return out, nil
}

// enqueueAlone writes one batch (one call's, or several merged) in one
// statement, or one transaction when it has keys, retried after a
// deadlock, a serialization failure or a vanished key holder.
func (s *Store) enqueueAlone(ctx context.Context, jobs []store.NewJob, b *enqueueBatch) ([]*store.Job, error) {
	var out []*store.Job
	err := s.retry(ctx, func() error {
		for try := 0; ; try++ {
			var err error
			if b.hasKeys {
				err = s.inTx(ctx, func(tx pgx.Tx) error {
					out, err = s.enqueueOn(ctx, tx, jobs, b)
					return err
				})
			} else if useCopy(jobs, b) {
				out, err = s.enqueueCopy(ctx, jobs, b) // bulk.go
			} else {
				out, err = s.enqueueOn(ctx, s.pool, jobs, b)
			}
			if errors.Is(err, errHolderGone) && try < 10 {
				continue
			}
			return err
		}
	})
	return out, err
}

// withKeptKeys runs enqueue on the jobs, and again on fewer when some of
// their keys turn out to be kept keys of deleted jobs (enqueue then fails
// with a *keptKeysError and must have left nothing behind): those jobs are
// answered with the deleted job, and counted as deduplicated.
func (s *Store) withKeptKeys(ctx context.Context, jobs []store.NewJob, now time.Time,
	enqueue func(sub []store.NewJob, b *enqueueBatch) ([]*store.Job, error)) ([]*store.Job, error) {
	out := make([]*store.Job, len(jobs))
	kept := map[string]*store.Job{}
	for {
		var idx []int
		var sub []store.NewJob
		for i := range jobs {
			if jobs[i].IdempotencyKey != "" && kept[jobs[i].IdempotencyKey] != nil {
				continue
			}
			idx = append(idx, i)
			sub = append(sub, jobs[i])
		}
		b, err := s.prepareEnqueue(sub, now)
		if err != nil {
			return nil, err
		}
		var res []*store.Job
		if b != nil {
			res, err = enqueue(sub, b)
		}
		var kk *keptKeysError
		if errors.As(err, &kk) {
			for k, j := range kk.jobs {
				kept[k] = j
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		for n, i := range idx {
			out[i] = res[n]
		}
		dedup := map[string]int64{}
		for i := range jobs {
			if out[i] == nil {
				c := *kept[jobs[i].IdempotencyKey]
				out[i] = &c
				dedup[jobs[i].Queue]++
			}
		}
		for q, n := range dedup {
			if _, err := s.pool.Exec(ctx, s.sql.counterOne, cleanText(q), store.StatDeduplicated, shard(), n); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
}

// keptKeysError aborts an enqueue whose batch holds keys of deleted jobs.
type keptKeysError struct{ jobs map[string]*store.Job }

func (e *keptKeysError) Error() string {
	return fmt.Sprintf("%d idempotency keys belong to deleted jobs", len(e.jobs))
}

// checkKeptKeys fails with a *keptKeysError when a key the batch just
// inserted is a kept key of a deleted job. It runs after the insert, in
// the same transaction: a job deleted before the insert could take its
// key had its key kept in the same transaction as the delete, so this
// later statement sees it.
func (s *Store) checkKeptKeys(ctx context.Context, q querier, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	rows, err := q.Query(ctx, s.sql.keptKeys, keys)
	if err != nil {
		return err
	}
	defer rows.Close()
	found := map[string]*store.Job{}
	for rows.Next() {
		j := &store.Job{Existing: true, Gone: true, History: []store.Event{}}
		var state string
		if err := rows.Scan(&j.IdempotencyKey, &j.ID, &j.Queue, &j.Kind, &state, &j.CreatedAt, &j.FinishedAt); err != nil {
			return err
		}
		j.State = store.State(state)
		j.CreatedAt = j.CreatedAt.UTC()
		j.RunAt = j.CreatedAt
		j.FinishedAt = utcPtr(j.FinishedAt)
		found[j.IdempotencyKey] = j
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if len(found) > 0 {
		return &keptKeysError{jobs: found}
	}
	return nil
}

// EnqueueTx is Enqueue inside the caller's transaction tx: the jobs exist
// if and only if tx commits, and their notification is sent on commit.
// now is the enqueue time, as for Enqueue. tx must be on a database
// holding the store's schema. With idempotency keys tx must run at the
// READ COMMITTED isolation level (PostgreSQL's default): at a stricter
// level the keys kept after tx's snapshot are not seen, so the call is
// refused (store.ErrInvalid), leaving tx as it was. Invalid jobs are
// refused before any statement that writes runs, leaving tx as it was;
// after any other error, roll tx back. With idempotency
// keys, EnqueueTx works inside a savepoint. The store's own pool is not
// used, but a closed store still refuses with store.ErrClosed.
func (s *Store) EnqueueTx(ctx context.Context, tx pgx.Tx, jobs []store.NewJob, now time.Time) ([]*store.Job, error) {
	if len(jobs) == 0 {
		if err := s.check(); err != nil {
			return nil, err
		}
		return []*store.Job{}, nil
	}
	checked := false
	out, err := s.withKeptKeys(ctx, jobs, now, func(sub []store.NewJob, b *enqueueBatch) ([]*store.Job, error) {
		if !b.hasKeys {
			out, err := s.enqueueOn(ctx, tx, sub, b)
			if err != nil {
				return nil, err
			}
			return out, s.setLimits(ctx, tx, sub, out, now)
		}
		if !checked {
			if err := readCommittedTx(ctx, tx); err != nil {
				return nil, err
			}
			checked = true
		}
		for try := 0; ; try++ {
			sp, err := tx.Begin(ctx)
			if err != nil {
				return nil, err
			}
			out, err := s.enqueueOn(ctx, sp, sub, b)
			if err == nil {
				err = s.setLimits(ctx, sp, sub, out, now)
			}
			if err != nil {
				sp.Rollback(ctx)
				if errors.Is(err, errHolderGone) && try < 10 {
					continue
				}
				return nil, err
			}
			if err := sp.Commit(ctx); err != nil {
				return nil, err
			}
			return out, nil
		}
	})
	if err != nil {
		if errors.Is(err, store.ErrInvalid) || errors.Is(err, store.ErrClosed) {
			return nil, err
		}
		return nil, fmt.Errorf("postgres: enqueue: %w", err)
	}
	s.noteEnqueued(len(jobs))
	return out, nil
}

// readCommittedTx refuses a caller's transaction that does not run at
// READ COMMITTED. The kept keys are read after the insert: at a stricter
// level that read sees the transaction's snapshot, which misses a key
// kept (its job deleted by retention) after the snapshot was taken, and
// the key would be answered by a second job.
func readCommittedTx(ctx context.Context, tx pgx.Tx) error {
	var level string
	if err := tx.QueryRow(ctx, `SELECT current_setting('transaction_isolation')`).Scan(&level); err != nil {
		return err
	}
	// PostgreSQL runs READ UNCOMMITTED as READ COMMITTED.
	if level != "read committed" && level != "read uncommitted" {
		return fmt.Errorf("%w: idempotency keys need a READ COMMITTED transaction, and this one is %s (begin it with pgx.TxOptions{IsoLevel: pgx.ReadCommitted})",
			store.ErrInvalid, strings.ToUpper(level))
	}
	return nil
}

// enqueueOn inserts the batch with q and reads the jobs holding the keys
// that were taken.
func (s *Store) enqueueOn(ctx context.Context, q querier, jobs []store.NewJob, b *enqueueBatch) ([]*store.Job, error) {
	if !b.hasKeys {
		return s.enqueuePlain(ctx, q, jobs, b)
	}
	rows, err := q.Query(ctx, s.sql.enqueue, b.queues, b.kinds, b.payloads, b.states, b.maxRetries, b.policies, b.keys, b.deps,
		b.reproc, b.runAts, b.isNew, b.nows, shard(), b.priorities, b.traces, b.packed)
	if err != nil {
		return nil, err
	}
	out := make([]*store.Job, len(jobs))
	for rows.Next() {
		var ord, id int64
		if err := rows.Scan(&ord, &id); err != nil {
			rows.Close()
			return nil, err
		}
		i := int(ord - 1)
		if i < 0 || i >= len(out) {
			rows.Close()
			return nil, fmt.Errorf("insert returned row %d of %d", ord, len(out))
		}
		out[i] = b.job(i, id, &jobs[i])
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var prev int64
	var missing, inserted []string
	for i, j := range out {
		if j == nil {
			missing = append(missing, b.keys[i])
			continue
		}
		if b.keys[i] != "" {
			inserted = append(inserted, b.keys[i])
		}
		if j.ID <= prev {
			return nil, fmt.Errorf("ids %d then %d: not increasing in input order", prev, j.ID)
		}
		prev = j.ID
	}
	if err := s.checkKeptKeys(ctx, q, inserted); err != nil {
		return nil, err
	}
	if len(missing) == 0 {
		return out, nil
	}
	// The rows not inserted are the ones whose key was taken, by another
	// job or by an earlier job of this call. A statement of its own sees
	// the jobs committed by concurrent callers the insert waited for.
	slices.Sort(missing)
	missing = slices.Compact(missing)
	holders, err := q.Query(ctx, s.sql.byKeys, missing)
	if err != nil {
		return nil, err
	}
	found, err := collect(holders, true, s.payloads)
	if err != nil {
		return nil, err
	}
	byKey := make(map[string]*store.Job, len(found))
	for _, j := range found {
		byKey[j.IdempotencyKey] = j
	}
	for i, j := range out {
		if j != nil {
			continue
		}
		h := byKey[b.keys[i]]
		if h == nil {
			return nil, fmt.Errorf("key %q: %w", b.keys[i], errHolderGone)
		}
		c := *h
		c.History = slices.Clone(h.History)
		c.Existing = true
		out[i] = &c
	}
	return out, nil
}

// Fetch implements store.Store: the due jobs under a limit first
// (limits.go), then the others with one statement: the due jobs are
// locked with FOR UPDATE SKIP LOCKED, leased and returned in (priority
// descending, run_at, id) order, without their history.
func (s *Store) Fetch(ctx context.Context, p store.FetchParams) ([]*store.Job, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if p.Limit <= 0 {
		return nil, nil
	}
	dueBy := p.DueBy
	if dueBy.IsZero() {
		dueBy = p.Now
	}
	var jobs []*store.Job
	s.group.work.begin()
	defer s.group.work.end()
	var limited []*store.Job
	err := s.retry(ctx, func() error {
		var err error
		limited, err = s.fetchLimited(ctx, p, dueBy) // limits.go
		return err
	})
	if err != nil {
		return nil, s.fail("fetch", err)
	}
	if len(limited) == p.Limit {
		return sortByDue(limited), nil
	}
	// A queue with fair jobs (fairshare.go): each priority's keys by
	// round robin, its jobs without a key taking a turn with them.
	got, fair, err := s.fairFetch(ctx, &p, dueBy, p.Limit-len(limited))
	limited = append(limited, got...)
	if err != nil {
		if len(limited) > 0 {
			s.log.Warn("fetch of fair jobs failed after limited jobs were leased", "queue", p.Queue, "error", err)
			return sortByDue(limited), nil
		}
		return nil, s.fail("fetch", err)
	}
	if fair {
		return sortByDue(limited), nil
	}
	err = s.retry(ctx, func() error {
		rows, err := s.pool.Query(ctx, s.sql.fetch, p.Queue, ts(dueBy), p.Limit-len(limited), ts(p.Now), ts(p.LeaseUntil), cleanText(p.Worker), shard())
		if err != nil {
			return err
		}
		jobs, err = collect(rows, false, s.payloads)
		return err
	})
	if err != nil {
		if len(limited) > 0 {
			// The limited jobs are leased: hand them over rather than
			// leave them to the rescue.
			s.log.Warn("fetch of unlimited jobs failed after limited jobs were leased", "queue", p.Queue, "error", err)
			return sortByDue(limited), nil
		}
		return nil, s.fail("fetch", err)
	}
	jobs = append(jobs, limited...)
	return sortByDue(jobs), nil
}

// sortByDue sorts jobs in (priority descending, run_at, id) order, as
// they were picked.
func sortByDue(jobs []*store.Job) []*store.Job {
	slices.SortFunc(jobs, func(a, b *store.Job) int {
		if c := cmp.Compare(b.Priority, a.Priority); c != 0 {
			return c
		}
		if c := a.RunAt.Compare(b.RunAt); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	return jobs
}

// NextDue implements store.Store.
func (s *Store) NextDue(ctx context.Context, queue string) (time.Time, bool, error) {
	if err := s.check(); err != nil {
		return time.Time{}, false, err
	}
	var t *time.Time
	if err := s.pool.QueryRow(ctx, s.sql.nextDue, queue).Scan(&t); err != nil {
		return time.Time{}, false, s.fail("next due", err)
	}
	if t == nil {
		return time.Time{}, false, nil
	}
	return t.UTC(), true, nil
}

// NextDueAfter implements store.Store.
func (s *Store) NextDueAfter(ctx context.Context, queue string, after time.Time) (time.Time, bool, error) {
	if err := s.check(); err != nil {
		return time.Time{}, false, err
	}
	var t *time.Time
	if err := s.pool.QueryRow(ctx, s.sql.nextDueAfter, queue, ts(after)).Scan(&t); err != nil {
		return time.Time{}, false, s.fail("next due after", err)
	}
	if t == nil {
		return time.Time{}, false, nil
	}
	return t.UTC(), true, nil
}

// Finish implements store.Store: the outcomes are applied by UPDATE
// statements fenced on the running lease and worker, each with the
// counters of its applied outcomes: the plain completions by the
// statement complete, the others by finish, at most finishBatch outcomes
// a statement (all the outcomes of one job in the same one).
func (s *Store) Finish(ctx context.Context, outcomes []store.Outcome) ([]bool, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	applied := make([]bool, len(outcomes))
	if len(outcomes) == 0 {
		return applied, nil
	}
	if err := store.CheckOutcomes(outcomes); err != nil {
		return nil, fmt.Errorf("postgres: finish: %w", err)
	}
	outcomes, err := store.SealResults(s.payloads, outcomes)
	if err != nil {
		return nil, fmt.Errorf("postgres: finish: %w", err)
	}
	s.group.work.begin()
	defer s.group.work.end()
	type fence struct {
		id, lease int64
		worker    string
	}
	var (
		sent  = map[fence]bool{}
		order []int
	)
	for i := range outcomes {
		o := &outcomes[i]
		// Every outcome moves the job out of running: after an outcome
		// that is not a rescue, any other of the same fence in the call
		// is stale, so it is not sent. A rescue may not apply (its lease
		// was renewed) while a later outcome of its fence does: those are
		// all sent, and the statement applies the first of a fence that
		// holds, as applying them one by one in their order would.
		// Outcomes of one job with different fences can all be sent,
		// since at most one of them matches the job.
		f := fence{o.JobID, o.Lease, cleanText(o.Worker)}
		if sent[f] {
			continue
		}
		if o.ExpiredBy.IsZero() {
			sent[f] = true
		}
		order = append(order, i)
	}
	// Rows are locked in id order, as Heartbeat locks them, to keep
	// deadlocks away.
	slices.SortStableFunc(order, func(a, b int) int {
		switch ia, ib := outcomes[a].JobID, outcomes[b].JobID; {
		case ia < ib:
			return -1
		case ia > ib:
			return 1
		}
		return 0
	})
	// The plain completions (the bulk of a busy worker's outcomes) go
	// through the statement complete, the others through finish: sending
	// a whole batch through finish because a few of its outcomes are
	// retries or deaths made it sort and join every row of the batch,
	// tens of seconds for a large one. Each statement takes at most
	// finishBatch outcomes, so one write holds its rows' locks (and the
	// heartbeats behind them) only briefly. Every outcome is still atomic;
	// the outcomes of one job are in one statement, so they apply as if
	// sent one by one.
	if finishWhole {
		return applied, s.finishWhole(ctx, outcomes, order, applied)
	}
	plain, rest := splitPlain(outcomes, order)
	for _, part := range chunks(outcomes, plain) {
		if err := s.finishCompleted(ctx, outcomes, part, applied); err != nil {
			return nil, err
		}
	}
	for _, part := range chunks(outcomes, rest) {
		if err := s.finishGeneral(ctx, outcomes, part, applied); err != nil {
			return nil, err
		}
	}
	return applied, nil
}

// finishWhole makes Finish write a call's outcomes as it did before
// splitting them: by the statement complete when all are plain
// completions, else all by finish, in one statement. Only benchmarks set
// it, to compare.
var finishWhole bool

// finishWhole writes the outcomes order as Finish did before splitting
// them (see the variable finishWhole).
func (s *Store) finishWhole(ctx context.Context, outcomes []store.Outcome, order []int, applied []bool) error {
	if plain, _ := splitPlain(outcomes, order); len(plain) == len(order) {
		return s.finishCompleted(ctx, outcomes, order, applied)
	}
	return s.finishGeneral(ctx, outcomes, order, applied)
}

// finishBatch is the most outcomes one Finish statement takes; a larger
// call is written by several statements.
var finishBatch = 1000

// chunks cuts order (sorted by job id) into parts of at most finishBatch
// outcomes, never parting the outcomes of one job (they must be applied
// by one statement, in their order), so a part may exceed finishBatch
// only by the outcomes of its last job.
func chunks(outcomes []store.Outcome, order []int) [][]int {
	var parts [][]int
	for len(order) > 0 {
		n := min(finishBatch, len(order))
		for n < len(order) && outcomes[order[n]].JobID == outcomes[order[n-1]].JobID {
			n++
		}
		parts = append(parts, order[:n:n])
		order = order[n:]
	}
	return parts
}

// splitPlain parts the outcomes to send (order, sorted by job id) into
// plain completions, which finishCompleted writes with a statement that
// sets only what a completion changes (completions without a history
// event or progress, nor a fence on an expired lease), and the others,
// for finishGeneral. The plain ones are those of the worker of
// the first plain-looking outcome, each of a job with no other outcome
// in the call; both parts stay sorted by job id.
func splitPlain(outcomes []store.Outcome, order []int) (plain, rest []int) {
	worker, found := "", false
	for n, i := range order {
		o := &outcomes[i]
		single := (n == 0 || outcomes[order[n-1]].JobID != o.JobID) &&
			(n == len(order)-1 || outcomes[order[n+1]].JobID != o.JobID)
		if single && plainCompletion(o) {
			if !found {
				worker, found = o.Worker, true
			}
			if o.Worker == worker {
				plain = append(plain, i)
				continue
			}
		}
		rest = append(rest, i)
	}
	return plain, rest
}

// plainCompletion reports whether o is a completion without a history
// event or progress, nor a fence on an expired lease.
func plainCompletion(o *store.Outcome) bool {
	return o.Kind == store.Complete && o.Event == nil && o.Progress == nil && o.Result == nil && o.ExpiredBy.IsZero()
}

// finishGeneral applies the outcomes order (sorted by job id) with the
// statement finish, which takes every kind of outcome, and marks the
// applied ones.
func (s *Store) finishGeneral(ctx context.Context, outcomes []store.Outcome, order []int, applied []bool) error {
	var (
		ids, leases                            []int64
		kinds, ords                            []int32
		workers, states, events, errs, classes []string
		reasons, fps, cancelEvents             []string
		ats, runAts                            []time.Time
		expiredBy                              []*time.Time
		durations, delays, holds               []int64
		cnt                                    outcomeCounters
		pDones, pTotals                        []*int64
		pAts                                   []*time.Time
		follows                                []bool
		results                                [][]byte
	)
	type fence struct {
		id, lease int64
		worker    string
	}
	seen := map[fence]bool{}
	for _, i := range order {
		o := &outcomes[i]
		ev, err := eventJSON(o.Event)
		if err != nil {
			return fmt.Errorf("postgres: finish: %w", err)
		}
		at := ts(o.At)
		runAt := at
		state := store.Pending
		switch o.Kind {
		case store.Complete:
			state = store.Completed
		case store.Retry, store.Snooze:
			if !o.RunAt.IsZero() {
				runAt = ts(o.RunAt)
			}
			state = dueState(runAt, at)
		case store.Bury:
			state = store.Dead
		case store.Cancel:
			state = store.Canceled
		}
		f := fence{o.JobID, o.Lease, cleanText(o.Worker)}
		follows = append(follows, seen[f])
		seen[f] = true
		ids = append(ids, o.JobID)
		leases = append(leases, o.Lease)
		workers = append(workers, cleanText(o.Worker))
		kinds = append(kinds, int32(o.Kind))
		states = append(states, string(state))
		ats = append(ats, at)
		runAts = append(runAts, runAt)
		events = append(events, ev)
		errs = append(errs, cleanText(o.Error))
		classes = append(classes, o.ClassName())
		reasons = append(reasons, storedReason(o.DeadReason))
		fps = append(fps, storedFingerprint(o.Fingerprint))
		ords = append(ords, int32(i))
		durations = append(durations, int64(o.Duration))
		delays = append(delays, int64(o.RetryDelay))
		var hold int64
		if !o.HoldUntil.IsZero() && (o.Kind == store.Retry || o.Kind == store.Bury) {
			hold = o.HoldUntil.UnixMicro()
		}
		holds = append(holds, hold)
		if p := o.Progress; p != nil && o.Kind == store.Complete {
			pAt := ts(p.At)
			pDones = append(pDones, &p.Done)
			pTotals = append(pTotals, &p.Total)
			pAts = append(pAts, &pAt)
		} else {
			pDones, pTotals, pAts = append(pDones, nil), append(pTotals, nil), append(pAts, nil)
		}
		if o.ExpiredBy.IsZero() {
			expiredBy = append(expiredBy, nil)
		} else {
			t := ts(o.ExpiredBy)
			expiredBy = append(expiredBy, &t)
		}
		cnt.add(i, o.Counters)
		cancelEv := ""
		if o.EndsIfCanceled() {
			// Should the job's cancellation have been requested, the
			// outcome ends it canceled: its row is then -1 - i, and these
			// its counters.
			ce := o.CanceledEvent()
			if cancelEv, err = eventJSON(&ce); err != nil {
				return fmt.Errorf("postgres: finish: %w", err)
			}
			cnt.add(-1-i, o.CanceledCounters())
		}
		cancelEvents = append(cancelEvents, cancelEv)
		results = append(results, o.Result)
	}
	byOrd := func(ord int32) (int, bool) {
		if ord < 0 {
			ord = -1 - ord // ended canceled
		}
		return int(ord), ord >= 0 && int(ord) < len(applied)
	}
	err := s.applyOutcomes(ctx, applied, byOrd, outcomeQueues(outcomes, order), s.sql.finish, ids, leases, workers, kinds, states, ats, runAts, events, errs, classes, reasons, fps, ords,
		cnt.ords, cnt.queues, cnt.names, cnt.ns, shard(), durations, delays, pDones, pTotals, pAts, expiredBy, cancelEvents, holds, follows, results)
	if err != nil {
		return err
	}
	for _, i := range order {
		if o := &outcomes[i]; applied[i] && (o.Kind == store.Retry || o.Kind == store.Snooze || o.Kind == store.Release) {
			// The job waits again, maybe under a limit: the queue's next
			// fetch looks at its limited jobs, whatever it found before
			// (as after an enqueue).
			s.limitHints.get(o.Queue).due.Store(true)
		}
	}
	return nil
}

// applyOutcomes runs a Finish statement (finish or complete), whose rows
// each name an applied outcome, and marks them in applied: outcome maps
// a row's number to the index of its outcome (false when out of range).
// queues are the queues of the statement's outcomes (see settles).
func (s *Store) applyOutcomes(ctx context.Context, applied []bool, outcome func(int32) (int, bool), queues []string, sql string, args ...any) error {
	if s.finishStatement != nil {
		s.finishStatement(sql == s.sql.complete, len(args[0].([]int64)))
	}
	var (
		got      []int
		released []string
		settle   = !releaseInCommit && s.settles(queues)
		noted    bool
	)
	row := func(n int32) error {
		i, ok := outcome(n)
		if !ok {
			return fmt.Errorf("postgres: finish: the statement named outcome %d of %d", n, len(applied))
		}
		got = append(got, i)
		return nil
	}
	err := s.retry(ctx, func() error {
		got = got[:0]
		if !settle {
			return readFinishRows(func() (pgx.Rows, error) { return s.pool.Query(ctx, sql, args...) }, row)
		}
		var err error
		released, noted, err = s.finishAndSettle(ctx, sql, args, row)
		return err
	})
	if err != nil {
		return s.fail("finish", err)
	}
	for _, i := range got {
		applied[i] = true
	}
	// Committed: the jobs it released are announced (released.go).
	if settle {
		s.settled(queues, noted)
	}
	s.announce(released)
	return nil
}

// outcomeCounters are the counters of a Finish call's outcomes, as the
// statements take them: one element per counter, with the ord of its
// outcome (applied only when the outcome is).
type outcomeCounters struct {
	ords          []int32
	queues, names []string
	ns            []int64
}

func (c *outcomeCounters) add(ord int, counters []store.Counter) {
	for _, x := range counters {
		c.ords = append(c.ords, int32(ord))
		c.queues = append(c.queues, cleanText(x.Queue))
		c.names = append(c.names, counterName(x))
		c.ns = append(c.ns, x.N)
	}
}

// finishCompleted applies plain completions (see splitPlain) with
// the statement complete, and marks the applied ones.
func (s *Store) finishCompleted(ctx context.Context, outcomes []store.Outcome, order []int, applied []bool) error {
	n := len(order)
	ids, leases, groups := make([]int64, 0, n), make([]int64, 0, n), make([]int32, 0, n)
	ats, durations := make([]time.Time, 0, n), make([]int64, 0, n)
	var cnt counterGroups
	for _, i := range order {
		o := &outcomes[i]
		ids = append(ids, o.JobID)
		leases = append(leases, o.Lease)
		ats = append(ats, ts(o.At))
		durations = append(durations, int64(o.Duration))
		groups = append(groups, cnt.group(o.Counters))
	}
	// Rows are the positions (1-based) of the applied outcomes in order.
	byPosition := func(k int32) (int, bool) {
		if k < 1 || int(k) > n {
			return 0, false
		}
		return order[k-1], true
	}
	return s.applyOutcomes(ctx, applied, byPosition, outcomeQueues(outcomes, order), s.sql.complete, ids, leases, ats, durations, cleanText(outcomes[order[0]].Worker), groups,
		cnt.groups, cnt.queues, cnt.names, cnt.ns, shard())
}

// counterGroups are the distinct counter lists of a call's outcomes, as
// the statement complete takes them: one element per counter, with the
// number of its group. Outcomes of a busy worker carry one of a few lists
// ("succeeded", or "succeeded" and "succeeded_after_retry"), so the
// statement adds each group's counters once, times the applied outcomes
// of the group.
type counterGroups struct {
	lists         [][]store.Counter
	groups        []int32
	queues, names []string
	ns            []int64
}

// group returns the number of the group of counters, adding it if new.
func (c *counterGroups) group(counters []store.Counter) int32 {
	for i, l := range c.lists {
		if slices.Equal(l, counters) {
			return int32(i + 1)
		}
	}
	c.lists = append(c.lists, counters)
	g := int32(len(c.lists))
	for _, x := range counters {
		c.groups = append(c.groups, g)
		c.queues = append(c.queues, cleanText(x.Queue))
		c.names = append(c.names, counterName(x))
		c.ns = append(c.ns, x.N)
	}
	return g
}

// counterName is the name, as stored, of the counter c adds to: its name
// and class ("dead.permanent"), cleaned.
func counterName(c store.Counter) string {
	name := c.Name
	if c.Class != "" {
		name += "." + c.Class
	}
	return cleanText(name)
}

// Heartbeat implements store.Store with one statement. Of two leases of
// one job, only the later can be running (tokens only grow): the earlier
// is lost without asking.
func (s *Store) Heartbeat(ctx context.Context, worker string, leases []store.Lease, until time.Time) (store.HeartbeatResult, error) {
	if err := s.check(); err != nil {
		return store.HeartbeatResult{}, err
	}
	if len(leases) == 0 {
		return store.HeartbeatResult{}, nil
	}
	sorted := slices.Clone(leases)
	sortLeases(sorted)
	sorted = slices.Compact(sorted)
	// One lease a job, the latest, for the statement: its ids sorted and
	// distinct.
	ids := make([]int64, 0, len(sorted))
	tokens := make([]int64, 0, len(sorted))
	for i, l := range sorted {
		if i+1 < len(sorted) && sorted[i+1].JobID == l.JobID {
			continue
		}
		ids = append(ids, l.JobID)
		tokens = append(tokens, l.Token)
	}
	var renewed []int64 // ids, then whether canceled
	canceled := map[int64]bool{}
	err := s.retry(ctx, func() error {
		renewed = renewed[:0]
		clear(canceled)
		rows, err := s.pool.Query(ctx, s.sql.heartbeat, ts(until), cleanText(worker), ids, tokens)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id int64
			var c bool
			if err := rows.Scan(&id, &c); err != nil {
				return err
			}
			renewed = append(renewed, id)
			canceled[id] = c
		}
		return rows.Err()
	})
	if err != nil {
		return store.HeartbeatResult{}, s.fail("heartbeat", err)
	}
	slices.Sort(renewed)
	var res store.HeartbeatResult
	for i, l := range sorted {
		latest := i+1 == len(sorted) || sorted[i+1].JobID != l.JobID
		if _, ok := slices.BinarySearch(renewed, l.JobID); !ok || !latest {
			res.Lost = append(res.Lost, l)
			continue
		}
		if canceled[l.JobID] {
			res.Canceled = append(res.Canceled, l)
		}
	}
	return res, nil
}

// sortLeases sorts leases by job id, then token.
func sortLeases(ls []store.Lease) {
	slices.SortFunc(ls, func(a, b store.Lease) int {
		if c := cmp.Compare(a.JobID, b.JobID); c != 0 {
			return c
		}
		return cmp.Compare(a.Token, b.Token)
	})
}

// Progress implements store.Store.
func (s *Store) Progress(ctx context.Context, worker string, updates []store.ProgressUpdate) error {
	if err := s.check(); err != nil {
		return err
	}
	// One update a job, in id order: of its latest lease (only that one
	// can be running), the last given.
	last := make(map[int64]int, len(updates))
	for i, u := range updates {
		if k, ok := last[u.JobID]; !ok || updates[k].Lease <= u.Lease {
			last[u.JobID] = i
		}
	}
	if len(last) == 0 {
		return nil
	}
	ids := make([]int64, 0, len(last))
	for id := range last {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	leases := make([]int64, len(ids))
	dones := make([]int64, len(ids))
	totals := make([]int64, len(ids))
	ats := make([]time.Time, len(ids))
	for k, id := range ids {
		u := updates[last[id]]
		leases[k], dones[k], totals[k], ats[k] = u.Lease, u.Done, u.Total, ts(u.At)
	}
	err := s.retry(ctx, func() error {
		_, err := s.pool.Exec(ctx, s.sql.progress, ids, leases, dones, totals, ats, cleanText(worker))
		return err
	})
	if err != nil {
		return s.fail("progress", err)
	}
	return nil
}

// Expired implements store.Store.
func (s *Store) Expired(ctx context.Context, now time.Time, limit int) ([]*store.Job, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = 100
	}
	rows, err := s.pool.Query(ctx, s.sql.expired, ts(now), limit)
	if err != nil {
		return nil, s.fail("expired", err)
	}
	jobs, err := collect(rows, false, s.payloads)
	if err != nil {
		return nil, s.fail("expired", err)
	}
	return jobs, nil
}

// Get implements store.Store.
func (s *Store) Get(ctx context.Context, id int64) (*store.Job, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	var result []byte
	j, err := scanJob(alsoScan{s.pool.QueryRow(ctx, s.sql.get, id), &result}, true, s.payloads)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("postgres: job %d: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, s.fail(fmt.Sprintf("get job %d", id), err)
	}
	store.OpenJobResult(s.payloads, j, result)
	if err := s.setBlockedDependents(ctx, s.pool, []*store.Job{j}); err != nil {
		return nil, err
	}
	return j, nil
}

// args collects the arguments of a statement and names their
// placeholders.
type args []any

func (a *args) add(v any) string {
	*a = append(*a, v)
	return "$" + strconv.Itoa(len(*a))
}

// where builds the condition of a filter, adding its arguments to a.
func (s *Store) where(f store.Filter, a *args) (string, error) { return s.whereKeys(f, a, true) }

// errorKey is the key of jobs_dead_error (migration 0041): it must be
// written as the index's expression for the planner to use the index.
// 200 is store.ErrorPrefixKeyLen.
const errorKey = `(left(last_error, 200) COLLATE "C")`

// whereKeys builds the condition of a filter, adding its arguments to a.
// With prefixKeys, an ErrorPrefix is written as a range of
// jobs_dead_error's keys (which the planner may then read); without, as
// a test of each row's error only.
func (s *Store) whereKeys(f store.Filter, a *args, prefixKeys bool) (string, error) {
	var conds []string
	if len(f.States) > 0 {
		states := make([]string, len(f.States))
		for i, st := range f.States {
			if !st.Valid() {
				return "", fmt.Errorf("%w: unknown state %q", store.ErrInvalid, st)
			}
			states[i] = string(st)
		}
		// The states are written in the statement, not bound: a generic
		// plan of a prepared statement then still uses the partial
		// indexes of a state (jobs_dead...), whose condition a parameter
		// would not prove.
		for i := range states {
			states[i] = "'" + states[i] + "'"
		}
		if len(states) == 1 {
			conds = append(conds, "state = "+states[0])
		} else {
			conds = append(conds, "state IN ("+strings.Join(states, ", ")+")")
		}
	}
	if f.Fingerprint != "" {
		conds = append(conds, "fingerprint = "+a.add(storedFingerprint(f.Fingerprint)))
	}
	for _, c := range []struct{ col, v string }{{"queue", f.Queue}, {"kind", f.Kind}, {"dead_reason", f.Reason}} {
		if c.v == "" {
			continue
		}
		if err := checkText(c.col, c.v); err != nil {
			return "", err
		}
		v := c.v
		if c.col == "dead_reason" {
			v = storedReason(v)
		}
		conds = append(conds, c.col+" = "+a.add(v))
	}
	if f.Class != "" {
		c, err := failure.ParseClass(f.Class)
		if err != nil {
			return "", fmt.Errorf("%w: %v", store.ErrInvalid, err)
		}
		conds = append(conds, "last_error_class = "+a.add(c.String()))
	}
	if !f.Since.IsZero() || !f.Until.IsZero() {
		ref := refTime(f)
		if !f.Since.IsZero() {
			conds = append(conds, ref+" >= "+a.add(ts(f.Since)))
		}
		if !f.Until.IsZero() {
			conds = append(conds, ref+" < "+a.add(ts(f.Until)))
		}
	}
	if f.ErrorContains != "" {
		if err := checkText("error text", f.ErrorContains); err != nil {
			return "", err
		}
		p := a.add(f.ErrorContains)
		conds = append(conds, "strpos(lower(last_error"+s.fold+"), lower("+p+"::text"+s.fold+")) > 0")
	}
	if f.ErrorPrefix != "" {
		c, err := errorPrefixConds(f.ErrorPrefix, a, prefixKeys)
		if err != nil {
			return "", err
		}
		conds = append(conds, c...)
	}
	if len(f.IDs) > 0 {
		conds = append(conds, "id = ANY("+a.add(f.IDs)+"::bigint[])")
	}
	if f.PayloadField != "" || len(f.PayloadValue) > 0 {
		c, err := payloadMatch(f, a)
		if err != nil {
			return "", err
		}
		conds = append(conds, c)
	}
	if len(conds) == 0 {
		return "true", nil
	}
	return strings.Join(conds, " AND "), nil
}

// errorPrefixConds are the conditions of Filter.ErrorPrefix p: with keys,
// the range of jobs_dead_error's keys that start with p (exact for a p
// shorter than the key; a longer one is checked whole too); without, a
// test of each row's error.
func errorPrefixConds(p string, a *args, keys bool) ([]string, error) {
	if err := store.CheckErrorPrefix(p); err != nil {
		return nil, err
	}
	whole := func() string { return "starts_with(last_error, " + a.add(p) + "::text)" }
	if !keys {
		return []string{whole()}, nil
	}
	lo, hi, eq := store.ErrorPrefixRange(p)
	switch {
	case eq:
		return []string{errorKey + " = " + a.add(lo) + "::text", whole()}, nil
	case hi == "":
		return []string{errorKey + " >= " + a.add(lo) + "::text", whole()}, nil
	}
	return []string{errorKey + " >= " + a.add(lo) + "::text", errorKey + " < " + a.add(hi) + "::text"}, nil
}

// refTime is the reference time of Filter.Since and Until.
func refTime(f store.Filter) string {
	if f.DeadOnly() {
		return "dead_at"
	}
	return "(CASE state WHEN 'dead' THEN dead_at WHEN 'completed' THEN finished_at WHEN 'canceled' THEN finished_at ELSE created_at END)"
}

// List implements store.Store.
func (s *Store) List(ctx context.Context, f store.Filter, p store.Page) (store.ListResult, error) {
	if err := s.check(); err != nil {
		return store.ListResult{}, err
	}
	dead := f.DeadOnly()
	// A dead-only listing by error prefix reads its page from the
	// prefix's range of jobs_dead_error when the range is short, else
	// walks the newest dead jobs (through the index of another filter,
	// if any) testing each one's error.
	byPrefix := false
	if dead && f.ErrorPrefix != "" {
		var err error
		if byPrefix, err = s.fewWithErrorPrefix(ctx, f, p.Size()); err != nil {
			return store.ListResult{}, err
		}
	}
	var a args
	w, err := s.whereKeys(f, &a, byPrefix)
	if err != nil {
		return store.ListResult{}, fmt.Errorf("postgres: list: %w", err)
	}
	order := "id DESC"
	if dead {
		order = "dead_at DESC, id DESC"
	}
	if p.Cursor != "" {
		t, id, err := store.DecodeCursor(p.Cursor, dead)
		if err != nil {
			return store.ListResult{}, fmt.Errorf("postgres: list: %w", err)
		}
		if dead {
			w += " AND (dead_at, id) < (" + a.add(time.UnixMicro(t).UTC()) + ", " + a.add(id) + ")"
		} else {
			w += " AND id < " + a.add(id)
		}
	}
	limit := p.Size()
	n := a.add(limit + 1)
	q := `SELECT ` + cols("", true) + ` FROM ` + s.sql.jobs + ` WHERE ` + w + ` ORDER BY ` + order + ` LIMIT ` + n
	if byPrefix {
		// The page's ids from the index (its entries hold the key,
		// dead_at and id), then their rows.
		// OFFSET 0 keeps the planner from walking jobs_dead in the
		// page's order instead, which reads the whole DLQ when the
		// range is empty.
		q = `SELECT ` + cols("", true) + ` FROM ` + s.sql.jobs + ` WHERE id IN (SELECT id FROM (SELECT id, dead_at FROM ` + s.sql.jobs +
			` WHERE ` + w + ` OFFSET 0) r ORDER BY ` + order + ` LIMIT ` + n + `) ORDER BY ` + order
	}
	rows, err := s.pool.Query(ctx, q, a...)
	if err != nil {
		return store.ListResult{}, s.fail("list", err)
	}
	jobs, err := collect(rows, true, s.payloads)
	if err != nil {
		return store.ListResult{}, s.fail("list", err)
	}
	if err := s.setBlockedDependents(ctx, s.pool, jobs); err != nil {
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
func (s *Store) fewWithErrorPrefix(ctx context.Context, f store.Filter, size int) (bool, error) {
	few := int64(s.prefixFew)
	if f.PrefixCauseOnly() {
		cs, err := s.causeBounds(ctx, s.pool, f)
		if err != nil {
			return false, fmt.Errorf("postgres: list: %w", err)
		}
		_, matched, total, exact := store.PrefixCounts(cs, f.ErrorPrefix)
		few = min(few, store.ErrorPrefixFew(size, total))
		if exact {
			return matched < few, nil
		}
	}
	var a args
	c, err := errorPrefixConds(f.ErrorPrefix, &a, true)
	if err != nil {
		return false, fmt.Errorf("postgres: list: %w", err)
	}
	// In key order, with bitmap scans off: a bitmap scan (which the
	// planner picks on its default estimate of a range of an expression)
	// reads the whole range before the LIMIT stops it, an index scan
	// only the entries counted.
	q := `SELECT count(*) FROM (SELECT 1 FROM ` + s.sql.jobs + ` WHERE state = 'dead' AND ` +
		strings.Join(c, " AND ") + ` ORDER BY ` + errorKey + ` LIMIT ` + a.add(few) + `) few`
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		return false, s.fail("list", err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SET LOCAL enable_bitmapscan = off`); err != nil {
		return false, s.fail("list", err)
	}
	var n int64
	if err := tx.QueryRow(ctx, q, a...).Scan(&n); err != nil {
		return false, s.fail("list", err)
	}
	return n < few, nil
}

// causeBounds reads the counted causes of dead jobs that f's fields of
// the cause select (its ErrorPrefix aside), with the bounds of their
// errors (migration 0044; none for a cause without a row there).
func (s *Store) causeBounds(ctx context.Context, q querier, f store.Filter) ([]store.CauseBounds, error) {
	if err := store.CheckErrorPrefix(f.ErrorPrefix); err != nil {
		return nil, err
	}
	f.States, f.ErrorPrefix = nil, ""
	var a args
	w, err := s.where(f, &a)
	if err != nil {
		return nil, err
	}
	rows, err := q.Query(ctx, `SELECT g.fingerprint, g.n, b.error_lo, b.error_hi FROM (
	SELECT k, fingerprint, sum(n)::bigint AS n FROM `+s.sql.deadGroups+` WHERE `+w+`
	GROUP BY k, fingerprint HAVING sum(n) <> 0
) g LEFT JOIN `+s.sql.deadBounds+` b USING (k)`, a...)
	if err != nil {
		return nil, s.fail("error bounds", err)
	}
	defer rows.Close()
	var cs []store.CauseBounds
	for rows.Next() {
		var c store.CauseBounds
		var lo, hi *string
		if err := rows.Scan(&c.Fingerprint, &c.N, &lo, &hi); err != nil {
			return nil, s.fail("error bounds", err)
		}
		if lo != nil && hi != nil {
			c.Lo, c.Hi, c.Known = *lo, *hi, true
		}
		cs = append(cs, c)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("error bounds", err)
	}
	return cs, nil
}

// Count implements store.Store.
func (s *Store) Count(ctx context.Context, f store.Filter) (int64, error) {
	if err := s.check(); err != nil {
		return 0, err
	}
	q := `SELECT count(*) FROM ` + s.sql.jobs + ` WHERE `
	if f.DeadOnly() && f.PrefixCauseOnly() {
		// The causes whose errors all start with the prefix, as
		// counted, when no cause straddles its range; else the jobs.
		cs, err := s.causeBounds(ctx, s.pool, f)
		if err != nil {
			return 0, fmt.Errorf("postgres: count: %w", err)
		}
		if _, matched, _, exact := store.PrefixCounts(cs, f.ErrorPrefix); exact {
			return matched, nil
		}
	}
	if f.DeadOnly() && f.CauseOnly() {
		// The dead jobs of the causes the filter selects, as counted.
		f.States = nil
		q = `SELECT coalesce(sum(n), 0)::bigint FROM ` + s.sql.deadGroups + ` WHERE `
	}
	var a args
	w, err := s.where(f, &a)
	if err != nil {
		return 0, fmt.Errorf("postgres: count: %w", err)
	}
	var n int64
	if err := s.pool.QueryRow(ctx, q+w, a...).Scan(&n); err != nil {
		return 0, s.fail("count", err)
	}
	return n, nil
}

// Groups implements store.Store. The sample of a group is its most
// recent dead job (latest dead_at, then largest id).
func (s *Store) Groups(ctx context.Context, f store.Filter, limit int) ([]store.Group, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if !f.SelectsDead() {
		return []store.Group{}, nil
	}
	f.States = []store.State{store.Dead}
	var a args
	w, err := s.where(f, &a)
	if err != nil {
		return nil, fmt.Errorf("postgres: groups: %w", err)
	}
	// The counts by fingerprint: from dead_groups when the filter names
	// only fields of the cause, else from the jobs. Only the groups that
	// can rank among the first limit by count are probed (ties at the
	// limit included): their first and last dead job, and the sample,
	// are the ends of their range of jobs_dead_fingerprint.
	counts := `SELECT fingerprint, count(*) AS n FROM ` + s.sql.jobs + ` WHERE ` + w + ` GROUP BY fingerprint`
	if f.CauseOnly() {
		gf := f
		gf.States = nil
		gw, err := s.where(gf, &a)
		if err != nil {
			return nil, fmt.Errorf("postgres: groups: %w", err)
		}
		counts = `SELECT fingerprint, sum(n)::bigint AS n FROM ` + s.sql.deadGroups + ` WHERE ` + gw + `
	GROUP BY fingerprint HAVING sum(n) > 0`
	}
	var db querier = s.pool
	if f.PrefixCauseOnly() {
		// From the causes whose errors all start with the prefix, when
		// no cause straddles its range: read in one snapshot with the
		// jobs probed, so that they agree.
		tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
		if err != nil {
			return nil, s.fail("groups", err)
		}
		defer tx.Rollback(ctx)
		db = tx
		cs, err := s.causeBounds(ctx, tx, f)
		if err != nil {
			return nil, fmt.Errorf("postgres: groups: %w", err)
		}
		if byFP, _, _, exact := store.PrefixCounts(cs, f.ErrorPrefix); exact {
			fps, ns := make([]string, 0, len(byFP)), make([]int64, 0, len(byFP))
			for fp, n := range byFP {
				fps, ns = append(fps, fp), append(ns, n)
			}
			counts = `SELECT * FROM unnest(` + a.add(fps) + `::text[], ` + a.add(ns) + `::bigint[]) AS c(fingerprint, n)`
		}
	}
	lim := a.add(store.Page{Limit: limit}.Size())
	q := `WITH c AS (` + counts + `),
g AS (
	SELECT * FROM c WHERE n >= coalesce((SELECT n FROM c ORDER BY n DESC OFFSET ` + lim + `::int - 1 LIMIT 1), 0)
)
SELECT g.fingerprint, g.n, f.dead_at, s.dead_at, s.id, s.last_error, s.last_error_class, s.dead_reason, s.queue, s.kind
FROM g CROSS JOIN LATERAL (
	SELECT id, dead_at, last_error, last_error_class, dead_reason, queue, kind FROM ` + s.sql.jobs + `
	WHERE ` + w + ` AND fingerprint = g.fingerprint
	ORDER BY dead_at DESC, id DESC LIMIT 1
) s CROSS JOIN LATERAL (
	SELECT dead_at FROM ` + s.sql.jobs + `
	WHERE ` + w + ` AND fingerprint = g.fingerprint
	ORDER BY dead_at, id LIMIT 1
) f
ORDER BY g.n DESC, s.dead_at DESC, g.fingerprint LIMIT ` + lim
	rows, err := db.Query(ctx, q, a...)
	if err != nil {
		return nil, s.fail("groups", err)
	}
	defer rows.Close()
	out := []store.Group{}
	for rows.Next() {
		var g store.Group
		if err := rows.Scan(&g.Fingerprint, &g.Count, &g.First, &g.Last, &g.SampleID, &g.Sample, &g.Class, &g.Reason, &g.Queue, &g.Kind); err != nil {
			return nil, s.fail("groups", err)
		}
		g.First, g.Last = g.First.UTC(), g.Last.UTC()
		out = append(out, g)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("groups", err)
	}
	return out, nil
}

// Cancel implements store.Store.
func (s *Store) Cancel(ctx context.Context, id int64, now time.Time) (*store.Job, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	ev, err := eventJSON(&store.Event{Kind: store.EventCanceled, At: now})
	if err != nil {
		return nil, fmt.Errorf("postgres: cancel: %w", err)
	}
	var job *store.Job
	err = s.retry(ctx, func() error {
		return s.inTx(ctx, func(tx pgx.Tx) error {
			var state, queue string
			err := tx.QueryRow(ctx, s.sql.cancelLock, id).Scan(&state, &queue)
			if errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("job %d: %w", id, store.ErrNotFound)
			}
			if err != nil {
				return err
			}
			switch store.State(state) {
			case store.Pending, store.Scheduled, store.Blocked, store.Dead:
				if job, err = scanJob(tx.QueryRow(ctx, s.sql.cancelNow, id, ts(now), ev), true, s.payloads); err != nil {
					return err
				}
				_, err = tx.Exec(ctx, s.sql.counterOne, queue, store.StatCanceled, shard(), 1)
				return err
			case store.Running:
				if job, err = scanJob(tx.QueryRow(ctx, s.sql.cancelRunning, id), true, s.payloads); err != nil {
					return err
				}
				_, err = tx.Exec(ctx, s.sql.cancelNotify, store.CancelNotice)
				return err
			}
			return fmt.Errorf("job %d is %s: %w", id, state, store.ErrConflict)
		})
	})
	if err != nil {
		return nil, s.fail("cancel", err)
	}
	return job, nil
}

// Redrive implements store.Store with one statement.
func (s *Store) Redrive(ctx context.Context, p store.RedriveParams) (store.RedriveResult, error) {
	res := store.RedriveResult{Redriven: []int64{}, Refused: []int64{}, Skipped: []int64{}}
	if err := s.check(); err != nil {
		return res, err
	}
	if len(p.Payload) > 0 && !json.Valid(p.Payload) {
		return res, fmt.Errorf("postgres: redrive: %w: payload is not valid JSON", store.ErrInvalid)
	}
	if err := store.CheckRedriveKeys(p.Keys); err != nil {
		return res, fmt.Errorf("postgres: redrive: %w", err)
	}
	if len(p.IDs) == 0 {
		return res, nil
	}
	ev, err := eventJSON(&store.Event{Kind: store.EventRedriven, At: p.Now, Note: p.Note})
	if err != nil {
		return res, fmt.Errorf("postgres: redrive: %w", err)
	}
	var payload []byte
	if len(p.Payload) > 0 {
		payload = p.Payload
	}
	outcome := map[int64]bool{} // true: redriven, false: refused
	err = s.retry(ctx, func() error {
		clear(outcome)
		if payload == nil || s.payloads == nil {
			return s.redriveRows(ctx, s.pool, p.IDs, p.Now, payload, ev, p.Keys, outcome)
		}
		return s.inTx(ctx, func(tx pgx.Tx) error {
			return s.redriveRows(ctx, tx, p.IDs, p.Now, payload, ev, p.Keys, outcome)
		})
	})
	if err != nil {
		return res, s.fail("redrive", err)
	}
	seen := map[int64]bool{}
	for _, id := range p.IDs {
		if seen[id] {
			continue
		}
		seen[id] = true
		ok, found := outcome[id]
		switch {
		case !found:
			res.Skipped = append(res.Skipped, id)
		case ok:
			res.Redriven = append(res.Redriven, id)
		default:
			res.Refused = append(res.Refused, id)
		}
	}
	// Read after the redrive's commit: the count is informational, and a
	// redrive of plain jobs pays one probe of job_deps for each.
	if res.Unblocks, err = s.unblocks(ctx, s.pool, res.Redriven); err != nil {
		return res, err
	}
	return res, nil
}

// redriveRows runs the redrive statement for ids on q, setting outcome[id]
// (true: redriven, false: refused) for each dead job it found. A new
// payload is sealed for each job's queue (the payload codec binds a
// sealed payload to its queue): one statement per queue then, so q should
// be a transaction.
func (s *Store) redriveRows(ctx context.Context, q querier, ids []int64, now time.Time, payload []byte, ev any, keys store.RedriveKeys, outcome map[int64]bool) error {
	groups := map[string][]int64{"": ids}
	if payload != nil && s.payloads != nil {
		rows, err := q.Query(ctx, `SELECT id, queue FROM `+s.sql.jobs+` WHERE id = ANY($1)`, ids)
		if err != nil {
			return err
		}
		groups = map[string][]int64{}
		for rows.Next() {
			var id int64
			var queue string
			if err := rows.Scan(&id, &queue); err != nil {
				rows.Close()
				return err
			}
			groups[queue] = append(groups[queue], id)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
	}
	for queue, ids := range groups {
		pl := payload
		if payload != nil && s.payloads != nil {
			var err error
			if pl, err = s.payloads.Seal(queue, payload); err != nil {
				return fmt.Errorf("seal payload: %w", err)
			}
		}
		rows, err := q.Query(ctx, s.sql.redrive, ids, ts(now), pl, ev, shard(), keysJSON(keys.Limits), keysJSON(keys.Fair))
		if err != nil {
			return err
		}
		for rows.Next() {
			var id int64
			var ok bool
			if err := rows.Scan(&id, &ok); err != nil {
				rows.Close()
				return err
			}
			outcome[id] = ok
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
	}
	return nil
}

// keysJSON returns m as a JSON object for a redrive's new keys ("{}" when
// empty).
func keysJSON(m map[string]string) string {
	if len(m) == 0 {
		return "{}"
	}
	b, _ := json.Marshal(m) // a map of strings always encodes
	return string(b)
}

// Purge implements store.Store: it deletes the dead jobs among those f
// selects.
func (s *Store) Purge(ctx context.Context, f store.Filter, limit int) (int64, error) {
	if err := s.check(); err != nil {
		return 0, err
	}
	if !f.SelectsDead() {
		return 0, nil
	}
	f.States = []store.State{store.Dead}
	var a args
	w, err := s.where(f, &a)
	if err != nil {
		return 0, fmt.Errorf("postgres: purge: %w", err)
	}
	if limit <= 0 {
		return 0, nil
	}
	q := s.purgeSQL(w, a.add(limit), a.add(shard()))
	var n int64
	err = s.retry(ctx, func() error { return s.pool.QueryRow(ctx, q, a...).Scan(&n) })
	if err != nil {
		return 0, s.fail("purge", err)
	}
	return n, nil
}

// DeleteFinished implements store.Store.
func (s *Store) DeleteFinished(ctx context.Context, state store.State, before time.Time, limit int) (int64, error) {
	if err := s.check(); err != nil {
		return 0, err
	}
	switch state {
	case store.Completed, store.Dead, store.Canceled:
	default:
		return 0, fmt.Errorf("postgres: delete finished: %w: state %q is not a finished state", store.ErrInvalid, state)
	}
	if limit <= 0 {
		return 0, nil
	}
	var n int64
	err := s.retry(ctx, func() error {
		return s.pool.QueryRow(ctx, s.sql.deleteFinished, string(state), ts(before), limit, shard()).Scan(&n)
	})
	if err != nil {
		return 0, s.fail("delete finished", err)
	}
	// Retention also deletes the shards of dead_groups whose count is
	// zero (left by redrives, purges and retention): the counts are
	// unchanged, and the table keeps about one row per live cause. A
	// statement adding to a shard deleted meanwhile inserts it again.
	// The shards locked by a writer are skipped (SKIP LOCKED): this
	// statement never waits, so it cannot close a cycle of waits with
	// writers locking shards in their own order; a skipped shard is
	// deleted by a later run.
	if _, err := s.pool.Exec(ctx, `DELETE FROM `+s.sql.deadGroups+` WHERE (k, shard) IN (
SELECT k, shard FROM `+s.sql.deadGroups+` WHERE n = 0 FOR UPDATE SKIP LOCKED) AND n = 0`); err != nil {
		return n, s.fail("delete finished", err)
	}
	if err := s.resetErrorBounds(ctx); err != nil {
		return n, s.fail("delete finished", err)
	}
	return n, nil
}

// resetErrorBounds deletes the bounds of the causes with no dead job
// left (migration 0044), so that a cause dead again starts from its new
// errors. The SHARE ROW EXCLUSIVE lock excludes every transaction that
// wrote to the table (every statement burying a job does), so that the
// counts read include each job whose error the bounds hold; a statement
// burying a job after it inserts its cause's bounds anew. The mode
// conflicts with itself: two runs at once (SHARE would admit both, and
// each one's DELETE would then wait for the other's lock, a deadlock)
// leave one to do the work. The lock is taken only
// if no such transaction is under way (NOWAIT: waiting, it would hold
// back the statements queued behind it, one of which may hold a shard of
// dead_groups that the transaction waited for needs): else the bounds
// stay as they are until the next run, loose but still bounds.
func (s *Store) resetErrorBounds(ctx context.Context) error {
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `LOCK TABLE `+s.sql.deadBounds+` IN SHARE ROW EXCLUSIVE MODE NOWAIT`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `DELETE FROM `+s.sql.deadBounds+` b
WHERE NOT EXISTS (SELECT FROM `+s.sql.deadGroups+` g WHERE g.k = b.k AND g.n <> 0)`)
		return err
	})
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "55P03" { // lock_not_available
		return nil
	}
	return err
}

// Stats implements store.Store, with one statement (one snapshot).
func (s *Store) Stats(ctx context.Context) (store.Stats, error) {
	st := store.Stats{Jobs: map[string]map[store.State]int64{}, Counters: map[string]map[string]int64{}}
	if err := s.check(); err != nil {
		return st, err
	}
	rows, err := s.pool.Query(ctx, s.sql.stats)
	if err != nil {
		return st, s.fail("stats", err)
	}
	defer rows.Close()
	for rows.Next() {
		var isJobs bool
		var q, name string
		var n int64
		if err := rows.Scan(&isJobs, &q, &name, &n); err != nil {
			return st, s.fail("stats", err)
		}
		if isJobs {
			if st.Jobs[q] == nil {
				st.Jobs[q] = map[store.State]int64{}
			}
			st.Jobs[q][store.State(name)] = n
			continue
		}
		if st.Counters[q] == nil {
			st.Counters[q] = map[string]int64{}
		}
		st.Counters[q][name] = n
	}
	if err := rows.Err(); err != nil {
		return st, s.fail("stats", err)
	}
	return st, nil
}

// enqueuePlain inserts a batch without idempotency keys with one plain
// statement (see statements.enqueuePlain).
func (s *Store) enqueuePlain(ctx context.Context, q querier, jobs []store.NewJob, b *enqueueBatch) ([]*store.Job, error) {
	rows, err := q.Query(ctx, s.sql.enqueuePlain, b.queues, b.kinds, b.payloads, b.states, b.maxRetries, b.policies, b.deps,
		b.reproc, b.runAts, b.nows, shard(), b.priorities, b.traces, b.packed)
	if err != nil {
		return nil, err
	}
	return b.inserted(rows, jobs)
}

// inserted reads the ids a batch insert returned (one row each, in any
// order) and answers the batch's jobs in their order, ids ascending as
// the identity column gave them.
func (b *enqueueBatch) inserted(rows pgx.Rows, jobs []store.NewJob) ([]*store.Job, error) {
	ids := make([]int64, 0, len(jobs))
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return nil, err
		}
		ids = append(ids, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(ids) != len(jobs) {
		return nil, fmt.Errorf("inserted %d rows, want %d", len(ids), len(jobs))
	}
	slices.Sort(ids)
	out := make([]*store.Job, len(jobs))
	for i := range jobs {
		out[i] = b.job(i, ids[i], &jobs[i])
	}
	return out, nil
}

// prepareEnqueue checks the store is open and validates and encodes the
// jobs, before any statement runs. A nil batch with a nil error means
// there is nothing to enqueue.
func (s *Store) prepareEnqueue(jobs []store.NewJob, now time.Time) (*enqueueBatch, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	b, err := newBatch(jobs, now, s.payloads)
	if err != nil {
		return nil, fmt.Errorf("postgres: enqueue: %w", err)
	}
	if len(jobs) == 0 {
		return nil, nil
	}
	return b, nil
}
