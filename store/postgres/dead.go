package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/redrivehq/redrive/store"
)

// validateDead checks a dead job as validateNew checks a new one, and its
// dead fields.
func validateDead(d *store.DeadJob) error {
	nj := store.NewJob{Queue: d.Queue, Kind: d.Kind, Payload: d.Payload, IdempotencyKey: d.IdempotencyKey,
		Dependency: d.Dependency, MaxRetries: d.MaxRetries}
	if err := validateNew(&nj); err != nil {
		return err
	}
	if err := store.CheckDead(d); err != nil {
		return err
	}
	if d.Attempt > 1<<31-1 || d.Redriven > 1<<31-1 {
		return fmt.Errorf("%w: attempt %d or redriven %d out of range", store.ErrInvalid, d.Attempt, d.Redriven)
	}
	return nil
}

// deadChunk is the most jobs one AddDead statement inserts: a larger
// call is inserted by several, in its one transaction. (Tests lower it,
// SetDeadChunk.)
var deadChunk atomic.Int64

func init() { deadChunk.Store(10000) }

// deadBatch is the columns of AddDead's statement (statements.insertDead),
// one element per job of the call.
type deadBatch struct {
	queues, kinds                              []string
	payloads, packed                           [][]byte
	attempts, maxRetries, retryCounts, redrive []int32
	keys, deps                                 []string
	reproc, isNew                              []bool
	created, deadAt                            []time.Time
	errs, classes, reasons, fps                []string
	history, traces, counters                  []string
}

// add appends the columns of d.
func (b *deadBatch) add(d *store.DeadJob) error {
	history := make([]store.Event, len(d.History))
	for i, e := range d.History {
		history[i] = cleanEvent(e)
	}
	h, err := json.Marshal(history)
	if err != nil {
		return fmt.Errorf("encode history: %w", err)
	}
	payload := []byte(d.Payload)
	if len(payload) == 0 {
		payload = []byte("null")
	}
	created := d.CreatedAt
	if created.IsZero() {
		created = d.DeadAt
	}
	b.queues, b.kinds, b.payloads = append(b.queues, d.Queue), append(b.kinds, d.Kind), append(b.payloads, payload)
	b.attempts, b.maxRetries = append(b.attempts, int32(d.Attempt)), append(b.maxRetries, int32(d.MaxRetries))
	b.keys, b.deps, b.reproc = append(b.keys, d.IdempotencyKey), append(b.deps, d.Dependency), append(b.reproc, !d.NotReprocessable)
	b.created, b.deadAt = append(b.created, ts(created)), append(b.deadAt, ts(d.DeadAt))
	b.retryCounts, b.errs = append(b.retryCounts, int32(max(d.Attempt-1, 0))), append(b.errs, cleanText(d.LastError))
	b.classes, b.reasons = append(b.classes, d.ClassName()), append(b.reasons, storedReason(d.DeadReason))
	b.fps, b.redrive, b.history = append(b.fps, storedFingerprint(d.Fingerprint)), append(b.redrive, int32(d.Redriven)), append(b.history, string(h))
	b.traces, b.packed = append(b.traces, d.Trace), append(b.packed, packTrace(d.Trace))
	b.counters = append(b.counters, counterName(store.Counter{Name: store.StatDead, Class: d.ClassName()}))
	b.isNew = append(b.isNew, true)
	return nil
}

// args returns the statement's arguments for jobs [lo, hi) of the batch.
func (b *deadBatch) args(lo, hi int) []any {
	return []any{b.queues[lo:hi], b.kinds[lo:hi], b.payloads[lo:hi], b.attempts[lo:hi], b.maxRetries[lo:hi], b.keys[lo:hi], b.deps[lo:hi],
		b.reproc[lo:hi], b.created[lo:hi], b.deadAt[lo:hi], b.retryCounts[lo:hi], b.errs[lo:hi], b.classes[lo:hi], b.reasons[lo:hi],
		b.fps[lo:hi], b.redrive[lo:hi], b.history[lo:hi], b.traces[lo:hi], b.packed[lo:hi], b.counters[lo:hi], b.isNew[lo:hi], shard()}
}

// AddDead implements store.Store in one transaction of its own (dead jobs
// wake no worker: nothing is notified), with one statement for up to
// deadChunk's jobs (statements.insertDead): the count triggers run once
// per statement, so concurrent calls lock the rows they share in one
// order (calls of more jobs run several statements, and may deadlock
// with each other as calls of one statement per job did: they are
// retried). A job with an idempotency key is inserted unless the key is
// taken, by a job or kept after its job was deleted, as Enqueue decides:
// the unique constraint first, then the kept keys, read after the insert
// (see checkKeptKeys); a call holding kept keys runs again without them.
// A key twice in one call is inserted by its first job, and answered to
// the later ones with the job holding it.
func (s *Store) AddDead(ctx context.Context, jobs []store.DeadJob, _ time.Time) ([]*store.Job, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	jobs, err := store.SealDead(s.payloads, jobs)
	if err != nil {
		return nil, fmt.Errorf("postgres: add dead: %w", err)
	}
	var b deadBatch
	for i := range jobs {
		err := validateDead(&jobs[i])
		if err == nil {
			err = b.add(&jobs[i])
		}
		if err != nil {
			return nil, fmt.Errorf("postgres: add dead: job %d of %d: %w", i+1, len(jobs), err)
		}
	}
	out := make([]*store.Job, len(jobs))
	if len(jobs) == 0 {
		return out, nil
	}
	// first[i] is the job of the call inserting job i's key: i itself for
	// the key's first job (and a job without a key).
	first := make([]int, len(jobs))
	byKey := map[string]int{}
	for i, k := range b.keys {
		first[i] = i
		if k == "" {
			continue
		}
		if f, ok := byKey[k]; ok {
			first[i] = f
			b.isNew[i] = false
		} else {
			byKey[k] = i
		}
	}
	kept := map[string]*store.Job{}
	err = s.retry(ctx, func() error {
		for try := 0; ; try++ {
			clear(out)
			err := s.inTx(ctx, func(tx pgx.Tx) error { return s.addDead(ctx, tx, &b, out) })
			var kk *keptKeysError
			if errors.As(err, &kk) {
				// Each round leaves out at least one more key: it ends.
				for k, j := range kk.jobs {
					kept[k] = j
					b.isNew[byKey[k]] = false
				}
				continue
			}
			if errors.Is(err, errHolderGone) && try < 10 {
				continue
			}
			return err
		}
	})
	if err != nil {
		return nil, s.fail("add dead", err)
	}
	for i := range out {
		if out[i] != nil {
			continue
		}
		var c store.Job
		if j := kept[b.keys[i]]; j != nil {
			c = *j
		} else {
			c = *out[first[i]]
			c.History = slices.Clone(c.History)
		}
		c.Existing = true
		out[i] = &c
	}
	return out, nil
}

// addDead inserts the new jobs of b (isNew) in tx, chunk by chunk, and
// sets out[i] to job i as inserted, or to the job holding its key
// (Existing set). It fails with a *keptKeysError when an inserted key
// is kept for a deleted job (the caller undoes the transaction), and
// with errHolderGone when a job holding a key was deleted before it was
// read (the caller tries again).
func (s *Store) addDead(ctx context.Context, tx pgx.Tx, b *deadBatch, out []*store.Job) error {
	sc := newJobScan(true, s.payloads)
	chunk := int(deadChunk.Load())
	for lo := 0; lo < len(out); lo += chunk {
		hi := min(lo+chunk, len(out))
		rows, err := tx.Query(ctx, s.sql.insertDead, b.args(lo, hi)...)
		if err != nil {
			return err
		}
		for rows.Next() {
			var ord int64
			j, err := sc.scan(alsoScan{row: rows, extra: &ord})
			if err != nil {
				rows.Close()
				return err
			}
			i := lo + int(ord) - 1
			if i < lo || i >= hi || out[i] != nil {
				rows.Close()
				return fmt.Errorf("insert returned row %d of %d", ord, hi-lo)
			}
			out[i] = j
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
	}
	var inserted, missing []string
	for i, j := range out {
		switch {
		case j != nil && b.keys[i] != "":
			inserted = append(inserted, b.keys[i])
		case j == nil && b.isNew[i]:
			missing = append(missing, b.keys[i])
		}
	}
	if err := s.checkKeptKeys(ctx, tx, inserted); err != nil {
		return err
	}
	if len(missing) == 0 {
		return nil
	}
	// The rows not inserted are the ones whose key was taken: a
	// statement of its own sees the jobs committed by concurrent callers
	// the insert waited for.
	slices.Sort(missing)
	rows, err := tx.Query(ctx, s.sql.byKeys, missing)
	if err != nil {
		return err
	}
	found, err := collect(rows, true, s.payloads)
	if err != nil {
		return err
	}
	holders := make(map[string]*store.Job, len(found))
	for _, j := range found {
		holders[j.IdempotencyKey] = j
	}
	for i, j := range out {
		if j != nil || !b.isNew[i] {
			continue
		}
		h := holders[b.keys[i]]
		if h == nil {
			return fmt.Errorf("key %q: %w", b.keys[i], errHolderGone)
		}
		h.Existing = true
		out[i] = h
	}
	return nil
}
