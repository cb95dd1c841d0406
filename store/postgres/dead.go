package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
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

// deadArgs returns the arguments of statements.insertDead for d.
func deadArgs(d *store.DeadJob) ([]any, error) {
	history := make([]store.Event, len(d.History))
	for i, e := range d.History {
		history[i] = cleanEvent(e)
	}
	h, err := json.Marshal(history)
	if err != nil {
		return nil, fmt.Errorf("encode history: %w", err)
	}
	payload := []byte(d.Payload)
	if len(payload) == 0 {
		payload = []byte("null")
	}
	created := d.CreatedAt
	if created.IsZero() {
		created = d.DeadAt
	}
	return []any{d.Queue, d.Kind, payload, int32(d.Attempt), int32(d.MaxRetries), d.IdempotencyKey, d.Dependency, !d.NotReprocessable,
		ts(created), ts(d.DeadAt), int32(max(d.Attempt-1, 0)), cleanText(d.LastError), d.ClassName(), storedReason(d.DeadReason),
		storedFingerprint(d.Fingerprint), int32(d.Redriven), string(h), d.Trace, packTrace(d.Trace)}, nil
}

// AddDead implements store.Store in one transaction of its own (dead jobs
// wake no worker: nothing is notified). A job with an idempotency key is
// inserted unless the key is taken, by a job or kept after its job was
// deleted, as Enqueue decides: the unique constraint first, then the kept
// keys, read after the insert (see checkKeptKeys).
func (s *Store) AddDead(ctx context.Context, jobs []store.DeadJob, _ time.Time) ([]*store.Job, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	jobs, err := store.SealDead(s.payloads, jobs)
	if err != nil {
		return nil, fmt.Errorf("postgres: add dead: %w", err)
	}
	args := make([][]any, len(jobs))
	for i := range jobs {
		err := validateDead(&jobs[i])
		if err == nil {
			args[i], err = deadArgs(&jobs[i])
		}
		if err != nil {
			return nil, fmt.Errorf("postgres: add dead: job %d of %d: %w", i+1, len(jobs), err)
		}
	}
	out := make([]*store.Job, len(jobs))
	if len(jobs) == 0 {
		return out, nil
	}
	err = s.retry(ctx, func() error {
		clear(out)
		return s.inTx(ctx, func(tx pgx.Tx) error {
			counts := map[[2]string]int64{}
			for i := range jobs {
				d := &jobs[i]
				j, inserted, err := s.addDead(ctx, tx, d.IdempotencyKey, args[i])
				if err != nil {
					return err
				}
				out[i] = j
				if inserted {
					c := store.Counter{Queue: d.Queue, Name: store.StatDead, Class: d.ClassName(), N: 1}
					counts[[2]string{cleanText(c.Queue), counterName(c)}] += c.N
				}
			}
			// Counter rows are updated in one order, to keep deadlocks away.
			keys := make([][2]string, 0, len(counts))
			for k := range counts {
				keys = append(keys, k)
			}
			slices.SortFunc(keys, func(a, b [2]string) int {
				if c := strings.Compare(a[0], b[0]); c != 0 {
					return c
				}
				return strings.Compare(a[1], b[1])
			})
			for _, k := range keys {
				if _, err := tx.Exec(ctx, s.sql.counterOne, k[0], k[1], shard(), counts[k]); err != nil {
					return err
				}
			}
			return nil
		})
	})
	if err != nil {
		return nil, s.fail("add dead", err)
	}
	return out, nil
}

// addDead inserts one dead job in tx and returns it with inserted true,
// or returns the job holding its key (Existing set, and Gone for a kept
// key of a deleted job).
func (s *Store) addDead(ctx context.Context, tx pgx.Tx, key string, args []any) (j *store.Job, inserted bool, err error) {
	if key == "" {
		j, err = scanJob(tx.QueryRow(ctx, s.sql.insertDead, args...), true, s.payloads)
		return j, err == nil, err
	}
	// With a key, a savepoint undoes the insert when the key turns out to
	// be kept for a deleted job.
	for try := 0; ; try++ {
		sp, err := tx.Begin(ctx)
		if err != nil {
			return nil, false, err
		}
		j, inserted, err := s.addDeadKeyed(ctx, sp, key, args)
		if err != nil {
			sp.Rollback(ctx)
			var kk *keptKeysError
			if errors.As(err, &kk) && kk.jobs[key] != nil {
				return kk.jobs[key], false, nil
			}
			if errors.Is(err, errHolderGone) && try < 10 {
				continue
			}
			return nil, false, err
		}
		if err := sp.Commit(ctx); err != nil {
			return nil, false, err
		}
		return j, inserted, nil
	}
}

// addDeadKeyed inserts a dead job whose idempotency key is key with q, or
// reads the job holding the key. It fails with a *keptKeysError when the
// key is kept for a deleted job (the caller undoes the insert), and with
// errHolderGone when the job holding the key was deleted before it was
// read (the caller tries again).
func (s *Store) addDeadKeyed(ctx context.Context, q pgx.Tx, key string, args []any) (*store.Job, bool, error) {
	j, err := scanJob(q.QueryRow(ctx, s.sql.insertDead, args...), true, s.payloads)
	if err == nil {
		if err := s.checkKeptKeys(ctx, q, []string{key}); err != nil {
			return nil, false, err
		}
		return j, true, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return nil, false, err
	}
	rows, err := q.Query(ctx, s.sql.byKeys, []string{key})
	if err != nil {
		return nil, false, err
	}
	found, err := collect(rows, true, s.payloads)
	if err != nil {
		return nil, false, err
	}
	if len(found) == 0 {
		return nil, false, fmt.Errorf("key %q: %w", key, errHolderGone)
	}
	found[0].Existing = true
	return found[0], false, nil
}
