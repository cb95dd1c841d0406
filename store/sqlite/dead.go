package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/redrivehq/redrive/store"
)

// insertDeadSQL inserts a job that died elsewhere, unless its idempotency
// key is taken, and returns it as Get does.
const insertDeadSQL = `INSERT INTO jobs (queue, kind, payload, state, attempt, max_retries, idem_key, dependency, reprocessable,
		created_at, run_at, finished_at, retry_count, last_error, last_error_class, last_failed_at, dead_at, dead_reason, fingerprint,
		redriven, history, trace)
	VALUES (?1, ?2, ?3, 'dead', ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?10, ?11, ?12, ?13, ?10, ?10, ?14, ?15, ?16, ?17, ?18)
	ON CONFLICT (idem_key) WHERE idem_key IS NOT NULL DO NOTHING RETURNING ` + jobColumns

// validateDead checks a dead job as validateNew checks a new one, and its
// dead fields.
func validateDead(d *store.DeadJob) error {
	nj := store.NewJob{Queue: d.Queue, Kind: d.Kind, Payload: d.Payload, IdempotencyKey: d.IdempotencyKey,
		Dependency: d.Dependency, MaxRetries: d.MaxRetries}
	if err := validateNew(&nj); err != nil {
		return err
	}
	return store.CheckDead(d)
}

// deadArgs returns the arguments of insertDeadSQL for d.
func deadArgs(d *store.DeadJob) ([]any, error) {
	history := d.History
	if history == nil {
		history = []store.Event{}
	}
	h, err := json.Marshal(history)
	if err != nil {
		return nil, fmt.Errorf("encode history: %w", err)
	}
	payload := []byte(d.Payload)
	if len(payload) == 0 {
		payload = []byte("null")
	}
	reproc := 1
	if d.NotReprocessable {
		reproc = 0
	}
	created := d.CreatedAt
	if created.IsZero() {
		created = d.DeadAt
	}
	return []any{d.Queue, d.Kind, payload, d.Attempt, d.MaxRetries, nullString(d.IdempotencyKey), d.Dependency, reproc,
		micros(created), micros(d.DeadAt), max(d.Attempt-1, 0), d.LastError, d.ClassName(), d.DeadReason, d.Fingerprint,
		d.Redriven, string(h), traceArg(d.Trace)}, nil
}

// AddDead implements store.Store. Like Enqueue, it writes through the
// writer's shared transaction, and a job with an idempotency key is
// inserted unless the key is taken (by a job, or kept after its job was
// deleted).
func (s *Store) AddDead(ctx context.Context, jobs []store.DeadJob, _ time.Time) ([]*store.Job, error) {
	jobs, err := store.SealDead(s.payloads, jobs)
	if err != nil {
		return nil, fmt.Errorf("sqlite: add dead: %w", err)
	}
	args := make([][]any, len(jobs))
	for i := range jobs {
		err := validateDead(&jobs[i])
		if err == nil {
			args[i], err = deadArgs(&jobs[i])
		}
		if err != nil {
			return nil, fmt.Errorf("sqlite: add dead: job %d of %d: %w", i+1, len(jobs), err)
		}
	}
	out := make([]*store.Job, len(jobs))
	err = s.write(ctx, func(tx *sql.Conn) error {
		clear(out)
		counts := map[[2]string]int64{}
		mv := moves{}
		for i := range jobs {
			d := &jobs[i]
			var j *store.Job
			insert := func() (err error) {
				j, err = scanJob(s.stmt(tx, "insertDead").QueryRowContext(ctx, args[i]...), true, s.payloads)
				return err
			}
			var err error
			if d.IdempotencyKey == "" {
				err = insert()
			} else {
				var holder *store.Job
				if holder, err = s.insertKeyed(ctx, tx, d.IdempotencyKey, insert); holder != nil {
					out[i] = holder
					continue
				}
			}
			if err != nil {
				return fmt.Errorf("sqlite: add dead: %w", err)
			}
			out[i] = j
			mv.move(d.Queue, "", store.Dead)
			addCounter(counts, store.Counter{Queue: d.Queue, Name: store.StatDead, Class: d.ClassName(), N: 1})
		}
		if err := s.addMoves(ctx, tx, mv); err != nil {
			return err
		}
		return s.addCounters(ctx, tx, counts)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
