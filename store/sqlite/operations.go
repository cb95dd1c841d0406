package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/redrivehq/redrive/store"
)

// operationColumns are an operation's columns in the order scanOperation
// reads them.
const operationColumns = `id, kind, state, params, progress, cursor, max_id, worker, lease_until, error,
	created_at, started_at, updated_at, finished_at`

// scanOperationC is scanOperation, opening a sealed payload of the
// operation's params with c.
func scanOperationC(c store.PayloadCodec, sc scanner) (*store.Operation, error) {
	op, err := scanOperation(sc)
	if err == nil {
		store.OpenOperation(c, op)
	}
	return op, err
}

func scanOperation(sc scanner) (*store.Operation, error) {
	var (
		op                       store.Operation
		kind, state              string
		params, progress         []byte
		worker                   sql.NullString
		lease, started, finished sql.NullInt64
		created, updated         int64
	)
	if err := sc.Scan(&op.ID, &kind, &state, &params, &progress, &op.Cursor, &op.MaxID, &worker, &lease, &op.Error,
		&created, &started, &updated, &finished); err != nil {
		return nil, err
	}
	op.Kind, op.State, op.Worker = store.OperationKind(kind), store.OperationState(state), worker.String
	if err := json.Unmarshal(params, &op.Params); err != nil {
		return nil, fmt.Errorf("operation %s: params: %w", op.ID, err)
	}
	if err := json.Unmarshal(progress, &op.Progress); err != nil {
		return nil, fmt.Errorf("operation %s: progress: %w", op.ID, err)
	}
	if op.Progress.RefusedIDs == nil {
		op.Progress.RefusedIDs = []int64{}
	}
	op.LeaseUntil, op.StartedAt, op.FinishedAt = optTime(lease), optTime(started), optTime(finished)
	op.CreatedAt, op.UpdatedAt = fromMicros(created), fromMicros(updated)
	return &op, nil
}

// payloadMatch is the condition of a filter's payload match.
func payloadMatch(f store.Filter) (string, []any, error) {
	if err := store.CheckPayloadMatch(f); err != nil {
		return "", nil, err
	}
	keys, err := store.PayloadPath(f.PayloadField)
	if err != nil {
		return "", nil, err
	}
	path := `$."` + strings.Join(keys, `"."`) + `"`
	switch v := store.PayloadScalar(f.PayloadValue).(type) {
	case string:
		return `(CASE WHEN json_valid(payload) THEN json_type(payload, ?) = 'text' AND json_extract(payload, ?) = ? ELSE 0 END)`,
			[]any{path, path, v}, nil
	case int64, float64:
		return `(CASE WHEN json_valid(payload) THEN json_type(payload, ?) IN ('integer', 'real') AND json_extract(payload, ?) = ? ELSE 0 END)`,
			[]any{path, path, v}, nil
	case bool:
		return `(CASE WHEN json_valid(payload) THEN json_type(payload, ?) = ? ELSE 0 END)`, []any{path, fmt.Sprint(v)}, nil
	}
	return `(CASE WHEN json_valid(payload) THEN json_type(payload, ?) = 'null' ELSE 0 END)`, []any{path}, nil
}

// CreateOperation implements store.Operations.
func (s *Store) CreateOperation(ctx context.Context, n store.NewOperation, now time.Time) (*store.Operation, error) {
	if err := store.CheckNewOperation(&n); err != nil {
		return nil, fmt.Errorf("sqlite: create operation: %w", err)
	}
	if _, _, err := where(n.Params.Filter); err != nil {
		return nil, fmt.Errorf("sqlite: create operation: %w", err)
	}
	var err error
	n.Params.Payload, err = store.SealPayload(s.payloads, store.OperationQueue, n.Params.Payload)
	if err != nil {
		return nil, fmt.Errorf("sqlite: create operation: %w", err)
	}
	params, err := json.Marshal(n.Params)
	if err != nil {
		return nil, fmt.Errorf("sqlite: create operation: %w", err)
	}
	progress, err := json.Marshal(store.OperationProgress{Matched: -1, RefusedIDs: []int64{}})
	if err != nil {
		return nil, fmt.Errorf("sqlite: create operation: %w", err)
	}
	var op *store.Operation
	err = s.write(ctx, func(tx *sql.Conn) error {
		var err error
		op, err = scanOperationC(s.payloads, tx.QueryRowContext(ctx, `INSERT INTO operations (id, kind, state, params, progress, max_id, created_at, updated_at)
			VALUES (?, ?, 'pending', ?, ?, (SELECT coalesce(max(id), 0) FROM jobs), ?, ?)
			ON CONFLICT (id) DO NOTHING RETURNING `+operationColumns,
			n.ID, string(n.Kind), params, progress, micros(now), micros(now)))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("sqlite: create operation: id %s is taken: %w", n.ID, store.ErrConflict)
		}
		if err != nil {
			return fmt.Errorf("sqlite: create operation: %w", err)
		}
		return nil
	})
	return op, err
}

// GetOperation implements store.Operations.
func (s *Store) GetOperation(ctx context.Context, id string) (*store.Operation, error) {
	db, err := s.readDB()
	if err != nil {
		return nil, err
	}
	op, err := scanOperationC(s.payloads, db.QueryRowContext(ctx, `SELECT `+operationColumns+` FROM operations WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("sqlite: operation %q: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: get operation: %w", err)
	}
	return op, nil
}

// ListOperations implements store.Operations.
func (s *Store) ListOperations(ctx context.Context, before string, limit int) ([]*store.Operation, string, error) {
	db, err := s.readDB()
	if err != nil {
		return nil, "", err
	}
	limit = store.Page{Limit: limit}.Size()
	q := `SELECT ` + operationColumns + ` FROM operations`
	args := []any{}
	if before != "" {
		var created int64
		err := db.QueryRowContext(ctx, `SELECT created_at FROM operations WHERE id = ?`, before).Scan(&created)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, "", fmt.Errorf("sqlite: list operations: %w: no operation %q to list before", store.ErrInvalid, before)
		}
		if err != nil {
			return nil, "", fmt.Errorf("sqlite: list operations: %w", err)
		}
		q += ` WHERE created_at < ? OR (created_at = ? AND id < ?)`
		args = append(args, created, created, before)
	}
	q += ` ORDER BY created_at DESC, id DESC LIMIT ?`
	args = append(args, limit+1)
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, "", fmt.Errorf("sqlite: list operations: %w", err)
	}
	defer rows.Close()
	out := []*store.Operation{}
	for rows.Next() {
		op, err := scanOperationC(s.payloads, rows)
		if err != nil {
			return nil, "", fmt.Errorf("sqlite: list operations: %w", err)
		}
		out = append(out, op)
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("sqlite: list operations: %w", err)
	}
	next := ""
	if len(out) > limit {
		out = out[:limit]
		next = out[limit-1].ID
	}
	return out, next, nil
}

// ClaimOperation implements store.Operations.
func (s *Store) ClaimOperation(ctx context.Context, id, worker string, now, leaseUntil time.Time) (*store.Operation, error) {
	var op *store.Operation
	err := s.write(ctx, func(tx *sql.Conn) error {
		op = nil
		q := `SELECT id FROM operations WHERE (state = 'pending' OR (state = 'running' AND lease_until < ?))`
		args := []any{micros(now)}
		if id != "" {
			q += ` AND id = ?`
			args = append(args, id)
		}
		var pick string
		err := tx.QueryRowContext(ctx, q+` ORDER BY created_at, id LIMIT 1`, args...).Scan(&pick)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("sqlite: claim operation: %w", err)
		}
		op, err = scanOperationC(s.payloads, tx.QueryRowContext(ctx, `UPDATE operations SET state = 'running', worker = ?, lease_until = ?,
			started_at = coalesce(started_at, ?), updated_at = ? WHERE id = ? RETURNING `+operationColumns,
			worker, micros(leaseUntil), micros(now), micros(now), pick))
		if err != nil {
			return fmt.Errorf("sqlite: claim operation: %w", err)
		}
		return nil
	})
	return op, err
}

// lockedOperation reads an operation in the writer's transaction.
func (s *Store) lockedOperation(ctx context.Context, tx *sql.Conn, id string) (*store.Operation, error) {
	op, err := scanOperationC(s.payloads, tx.QueryRowContext(ctx, `SELECT `+operationColumns+` FROM operations WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("operation %q: %w", id, store.ErrNotFound)
	}
	return op, err
}

// RenewOperation implements store.Operations.
func (s *Store) RenewOperation(ctx context.Context, r store.OperationRenewal) (*store.Operation, error) {
	var op *store.Operation
	err := s.write(ctx, func(tx *sql.Conn) error {
		cur, err := s.lockedOperation(ctx, tx, r.ID)
		if err != nil {
			return fmt.Errorf("sqlite: renew operation: %w", err)
		}
		if err := store.CheckStep(cur, r.Worker, cur.Cursor); err != nil {
			return fmt.Errorf("sqlite: renew operation: %w", err)
		}
		matched := cur.Progress.Matched
		if r.Matched >= 0 {
			matched = r.Matched
		}
		op, err = scanOperationC(s.payloads, tx.QueryRowContext(ctx, `UPDATE operations SET lease_until = ?, updated_at = ?,
			progress = json_set(progress, '$.matched', ?) WHERE id = ? RETURNING `+operationColumns,
			micros(r.LeaseUntil), micros(r.Now), matched, r.ID))
		if err != nil {
			return fmt.Errorf("sqlite: renew operation: %w", err)
		}
		return nil
	})
	return op, err
}

// StepOperation implements store.Operations.
func (s *Store) StepOperation(ctx context.Context, st store.OperationStep) (store.StepResult, error) {
	var res store.StepResult
	if st.Limit < 1 || st.Limit > store.MaxPageSize {
		return res, fmt.Errorf("sqlite: step operation: %w: limit %d out of 1..%d", store.ErrInvalid, st.Limit, store.MaxPageSize)
	}
	err := s.write(ctx, func(tx *sql.Conn) error {
		res = store.StepResult{}
		op, err := s.lockedOperation(ctx, tx, st.ID)
		if err != nil {
			return fmt.Errorf("sqlite: step operation: %w", err)
		}
		if err := store.CheckStep(op, st.Worker, st.Cursor); err != nil {
			return fmt.Errorf("sqlite: step operation: %w", err)
		}
		if op.Kind == store.OpExport && st.Exported == nil {
			return fmt.Errorf("sqlite: step operation: %w: an export's step says what it wrote", store.ErrInvalid)
		}
		cursor, n, err := s.applyStep(ctx, tx, op, st, &res)
		if err != nil {
			return fmt.Errorf("sqlite: step operation %s: %w", op.ID, err)
		}
		res.End = n < st.Limit
		res.Handled.Tally()
		store.ApplyStep(op, st, res.Handled, cursor)
		progress, err := json.Marshal(op.Progress)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE operations SET progress = ?, cursor = ?, lease_until = ?, updated_at = ? WHERE id = ?`,
			progress, op.Cursor, micros(st.LeaseUntil), micros(st.Now), op.ID); err != nil {
			return fmt.Errorf("sqlite: step operation: %w", err)
		}
		res.Operation = op
		return nil
	})
	return res, err
}

// applyStep does a step's batch in tx and returns the new cursor and
// how many jobs the batch held.
func (s *Store) applyStep(ctx context.Context, tx *sql.Conn, op *store.Operation, st store.OperationStep, res *store.StepResult) (int64, int, error) {
	if op.Kind == store.OpExport {
		e := st.Exported
		if e.Count < 0 || (e.Count > 0 && (e.Last <= op.Cursor || e.Last > op.MaxID)) {
			return 0, 0, fmt.Errorf("%w: exported %d jobs through id %d after cursor %d", store.ErrInvalid, e.Count, e.Last, op.Cursor)
		}
		res.Handled.Exported = e.Count
		if e.Count == 0 {
			return op.Cursor, 0, nil
		}
		return e.Last, int(e.Count), nil
	}
	if op.Kind == store.OpRekey {
		return s.rekeyStep(ctx, tx, op, st, res)
	}
	f := store.OperationFilter(op)
	if op.Kind == store.OpReplay {
		return s.replayStep(ctx, tx, op, f, st, res)
	}
	var ids []int64
	if store.ByIDs(op) {
		// By ids: every id given, the ids not in a state the operation
		// handles reported skipped.
		ids = store.NextIDs(f.IDs, op.Cursor, math.MaxInt64, st.Limit)
	} else {
		w, args, err := where(f)
		if err != nil {
			return 0, 0, err
		}
		// The batch is the next ids in order: a walk of the primary key
		// from the cursor. A DLQ filter's index (jobs_dead_queue...)
		// would be read whole and sorted at every batch.
		rows, err := tx.QueryContext(ctx, `SELECT id FROM jobs NOT INDEXED WHERE `+w+` AND id > ? AND id <= ? ORDER BY id LIMIT ?`,
			append(args, op.Cursor, op.MaxID, st.Limit)...)
		if err != nil {
			return 0, 0, err
		}
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return 0, 0, err
			}
			ids = append(ids, id)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return 0, 0, err
		}
	}
	if len(ids) == 0 {
		return op.Cursor, 0, nil
	}
	last := ids[len(ids)-1]
	switch op.Kind {
	case store.OpRedrive:
		if err := store.CheckOperationPayload(op); err != nil {
			return 0, 0, err
		}
		ev, err := eventJSON(&store.Event{Kind: store.EventRedriven, At: st.Now, Note: op.Params.Note})
		if err != nil {
			return 0, 0, err
		}
		rr := store.RedriveResult{}
		if err := s.redriveTx(ctx, tx, store.RedriveParams{IDs: ids, Now: st.Now, Payload: op.Params.Payload, Note: op.Params.Note, Keys: op.Params.Keys}, ev, &rr); err != nil {
			return 0, 0, err
		}
		res.Handled.Redriven, res.Handled.Refused, res.Handled.Skipped = int64(len(rr.Redriven)), int64(len(rr.Refused)), int64(len(rr.Skipped))
		res.Handled.RefusedIDs = rr.Refused
		res.Handled.Unblocks = rr.Unblocks
		if len(rr.Redriven) > 0 {
			qs, err := queuesOf(ctx, tx, rr.Redriven)
			if err != nil {
				return 0, 0, err
			}
			res.Queues = qs
		}
	case store.OpPurge:
		b, _ := json.Marshal(ids)
		n, err := s.deleteJobs(ctx, tx, "purge", `DELETE FROM jobs WHERE id IN (SELECT value FROM json_each(?)) AND state = 'dead' RETURNING `+deletedColumns,
			[]any{string(b)}, store.Dead)
		if err != nil {
			return 0, 0, err
		}
		res.Handled.Purged = n
	case store.OpCancel:
		n, err := s.cancelStep(ctx, tx, ids, st.Now, op.Params.Note)
		if err != nil {
			return 0, 0, err
		}
		res.Handled.Canceled = n
		res.Handled.Skipped = int64(len(ids)) - n
	}
	return last, len(ids), nil
}

// queuesOf returns the distinct queues of the jobs ids.
func queuesOf(ctx context.Context, tx *sql.Conn, ids []int64) ([]string, error) {
	b, _ := json.Marshal(ids)
	rows, err := tx.QueryContext(ctx, `SELECT DISTINCT queue FROM jobs WHERE id IN (SELECT value FROM json_each(?)) ORDER BY queue`, string(b))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var q string
		if err := rows.Scan(&q); err != nil {
			return nil, err
		}
		out = append(out, q)
	}
	return out, rows.Err()
}

// replayStep enqueues a copy of each job of the next batch, naming its
// source in replay_of and in a replayed event.
func (s *Store) replayStep(ctx context.Context, tx *sql.Conn, op *store.Operation, f store.Filter, st store.OperationStep, res *store.StepResult) (int64, int, error) {
	w, args, err := where(f)
	if err != nil {
		return 0, 0, err
	}
	type source struct {
		id                int64
		queue, kind, dep  string
		payload, policy   []byte
		maxRetries, reprc int
		priority          int
		climit            sql.NullString
		ckey              string
		fkey              sql.NullString
		trace             any // either form, copied as it is
	}
	rows, err := tx.QueryContext(ctx, `SELECT id, queue, kind, payload, policy, dependency, max_retries, reprocessable, priority, climit, ckey, fkey, trace FROM jobs
		WHERE `+w+` AND id > ? AND id <= ? ORDER BY id LIMIT ?`, append(args, op.Cursor, op.MaxID, st.Limit)...)
	if err != nil {
		return 0, 0, err
	}
	var batch []source
	for rows.Next() {
		var src source
		if err := rows.Scan(&src.id, &src.queue, &src.kind, &src.payload, &src.policy, &src.dep, &src.maxRetries, &src.reprc, &src.priority, &src.climit, &src.ckey, &src.fkey, &src.trace); err != nil {
			rows.Close()
			return 0, 0, err
		}
		batch = append(batch, src)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, 0, err
	}
	if len(batch) == 0 {
		return op.Cursor, 0, nil
	}
	counts := map[[2]string]int64{}
	mv := moves{}
	seen := map[string]bool{}
	limited := false
	for _, src := range batch {
		e := store.ReplayEvent(src.id, st.Now, op.Params.Note)
		ev, err := eventJSON(&e)
		if err != nil {
			return 0, 0, err
		}
		// The copy is under its source's limit and group (climit,
		// ckey): it waits on the group's slots and rate as its source
		// did. It keeps its fair key (fkey) too, and its trace context:
		// its attempts join its source's trace.
		if _, err := s.stmt(tx, "replayInsert").ExecContext(ctx,
			src.queue, src.kind, src.payload, src.maxRetries, nullBytes(src.policy), src.dep, src.reprc, src.priority,
			micros(st.Now), micros(st.Now), src.id, ev, src.climit, src.ckey, src.fkey, src.trace); err != nil {
			return 0, 0, fmt.Errorf("replay job %d: %w", src.id, err)
		}
		limited = limited || src.climit.Valid
		counts[[2]string{src.queue, store.StatEnqueued}]++
		mv.move(src.queue, "", store.Pending)
		if !seen[src.queue] {
			seen[src.queue] = true
			res.Queues = append(res.Queues, src.queue)
		}
	}
	if limited {
		// A limited job came due: the fetches' idle marks must look
		// again (the limit_gen trigger fires on updates, not inserts).
		if _, err := tx.ExecContext(ctx, `UPDATE limit_gen SET n = n + 1 WHERE id = 1`); err != nil {
			return 0, 0, err
		}
	}
	if err := s.addMoves(ctx, tx, mv); err != nil {
		return 0, 0, err
	}
	if err := s.addCounters(ctx, tx, counts); err != nil {
		return 0, 0, err
	}
	res.Handled.Replayed = int64(len(batch))
	return batch[len(batch)-1].id, len(batch), nil
}

// OperationJobs implements store.Operations.
func (s *Store) OperationJobs(ctx context.Context, id string, after int64, limit int) ([]*store.Job, error) {
	op, err := s.GetOperation(ctx, id)
	if err != nil {
		return nil, err
	}
	db, err := s.readDB()
	if err != nil {
		return nil, err
	}
	w, args, err := where(store.OperationFilter(op))
	if err != nil {
		return nil, fmt.Errorf("sqlite: operation jobs: %w", err)
	}
	rows, err := db.QueryContext(ctx, `SELECT `+jobColumns+` FROM jobs NOT INDEXED WHERE `+w+` AND id > ? AND id <= ? ORDER BY id LIMIT ?`,
		append(args, after, op.MaxID, store.Page{Limit: limit}.Size())...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: operation jobs: %w", err)
	}
	return collect(rows, true, s.payloads)
}

// FinishOperation implements store.Operations.
func (s *Store) FinishOperation(ctx context.Context, id, worker string, state store.OperationState, msg string, now time.Time) (*store.Operation, error) {
	if state != store.OpDone && state != store.OpFailed {
		return nil, fmt.Errorf("sqlite: finish operation: %w: an operation finishes done or failed, not %q", store.ErrInvalid, state)
	}
	var op *store.Operation
	err := s.write(ctx, func(tx *sql.Conn) error {
		cur, err := s.lockedOperation(ctx, tx, id)
		if err != nil {
			return fmt.Errorf("sqlite: finish operation: %w", err)
		}
		if err := store.CheckStep(cur, worker, cur.Cursor); err != nil {
			return fmt.Errorf("sqlite: finish operation: %w", err)
		}
		op, err = scanOperationC(s.payloads, tx.QueryRowContext(ctx, `UPDATE operations SET state = ?, error = ?, worker = NULL, lease_until = NULL,
			finished_at = ?, updated_at = ? WHERE id = ? RETURNING `+operationColumns, string(state), msg, micros(now), micros(now), id))
		if err != nil {
			return fmt.Errorf("sqlite: finish operation: %w", err)
		}
		return nil
	})
	return op, err
}

// SetOperationState implements store.Operations.
func (s *Store) SetOperationState(ctx context.Context, id string, to store.OperationState, now time.Time) (*store.Operation, error) {
	var op *store.Operation
	err := s.write(ctx, func(tx *sql.Conn) error {
		cur, err := s.lockedOperation(ctx, tx, id)
		if err != nil {
			return fmt.Errorf("sqlite: set operation state: %w", err)
		}
		next, change, err := store.Transition(id, cur.State, to)
		if err != nil {
			return fmt.Errorf("sqlite: set operation state: %w", err)
		}
		if !change {
			op = cur
			return nil
		}
		var finished any
		if next == store.OpCanceled {
			finished = micros(now)
		}
		op, err = scanOperationC(s.payloads, tx.QueryRowContext(ctx, `UPDATE operations SET state = ?, worker = NULL, lease_until = NULL,
			finished_at = ?, updated_at = ? WHERE id = ? RETURNING `+operationColumns, string(next), finished, micros(now), id))
		if err != nil {
			return fmt.Errorf("sqlite: set operation state: %w", err)
		}
		return nil
	})
	return op, err
}

// DeleteOperations implements store.Operations.
func (s *Store) DeleteOperations(ctx context.Context, before time.Time) (int64, error) {
	var n int64
	err := s.write(ctx, func(tx *sql.Conn) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM operations WHERE state IN ('done', 'failed', 'canceled') AND finished_at < ?`, micros(before))
		if err != nil {
			return fmt.Errorf("sqlite: delete operations: %w", err)
		}
		n, err = res.RowsAffected()
		return err
	})
	return n, err
}

// cancelStep cancels, of the jobs ids, those that are pending or
// scheduled (a canceled event in their history, the job counts and the
// canceled counter kept), and returns how many.
func (s *Store) cancelStep(ctx context.Context, tx *sql.Conn, ids []int64, now time.Time, note string) (int64, error) {
	ev, err := eventJSON(&store.Event{Kind: store.EventCanceled, At: now, Note: note})
	if err != nil {
		return 0, err
	}
	b, _ := json.Marshal(ids)
	rows, err := tx.QueryContext(ctx, `SELECT queue, state FROM jobs WHERE id IN (SELECT value FROM json_each(?)) AND state IN ('pending', 'scheduled')`, string(b))
	if err != nil {
		return 0, err
	}
	mv := moves{}
	counters := map[[2]string]int64{}
	var n int64
	for rows.Next() {
		var queue, state string
		if err := rows.Scan(&queue, &state); err != nil {
			rows.Close()
			return 0, err
		}
		mv.move(queue, store.State(state), store.Canceled)
		counters[[2]string{queue, store.StatCanceled}]++
		n++
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, nil
	}
	if _, err := tx.ExecContext(ctx, `UPDATE jobs SET state = 'canceled', finished_at = ?,
		history = json_insert(coalesce(history, '[]'), '$[#]', json(?))
		WHERE id IN (SELECT value FROM json_each(?)) AND state IN ('pending', 'scheduled')`, micros(now), ev, string(b)); err != nil {
		return 0, err
	}
	if err := s.addMoves(ctx, tx, mv); err != nil {
		return 0, err
	}
	if err := s.addCounters(ctx, tx, counters); err != nil {
		return 0, err
	}
	return n, nil
}

// rekeyStep re-seals, under the current key, the payloads of the next
// st.Limit jobs after the cursor that are sealed under another key, the
// previous payloads their histories keep and their results; its first
// step also
// re-seals the payloads redrive operations keep.
func (s *Store) rekeyStep(ctx context.Context, tx *sql.Conn, op *store.Operation, st store.OperationStep, res *store.StepResult) (int64, int, error) {
	if op.Cursor == 0 {
		if err := s.rekeyOperations(ctx, tx); err != nil {
			return 0, 0, err
		}
	}
	rows, err := tx.QueryContext(ctx, `SELECT id, queue, payload, CASE WHEN instr(history, CAST('rdenc:' AS BLOB)) > 0 THEN history END,
		CASE WHEN substr(result, 1, 7) = CAST('"rdenc:' AS BLOB) THEN result END
		FROM jobs WHERE id > ? AND id <= ? ORDER BY id LIMIT ?`, op.Cursor, op.MaxID, st.Limit)
	if err != nil {
		return 0, 0, err
	}
	var (
		ids       []int64
		queues    []string
		payloads  [][]byte
		histories [][]byte
		results   [][]byte
	)
	for rows.Next() {
		var id int64
		var q string
		var p, hist, result []byte
		if err := rows.Scan(&id, &q, &p, &hist, &result); err != nil {
			rows.Close()
			return 0, 0, err
		}
		ids, queues, payloads, histories = append(ids, id), append(queues, q), append(payloads, p), append(histories, hist)
		results = append(results, result)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, 0, err
	}
	if len(ids) == 0 {
		return op.Cursor, 0, nil
	}
	idx, out, err := store.Rekey(s.payloads, queues, payloads, &res.Handled)
	if err != nil {
		return 0, 0, err
	}
	for k, i := range idx {
		if _, err := s.stmt(tx, "rekeyPayload").ExecContext(ctx, out[k], ids[i]); err != nil {
			return 0, 0, err
		}
	}
	for i, hist := range histories {
		if hist == nil {
			continue
		}
		nh, changed, err := store.RekeyHistory(s.payloads, queues[i], hist)
		if err != nil {
			return 0, 0, fmt.Errorf("job %d: %w", ids[i], err)
		}
		if changed {
			if _, err := s.stmt(tx, "rekeyHistory").ExecContext(ctx, nh, ids[i]); err != nil {
				return 0, 0, err
			}
		}
	}
	for i, result := range results {
		if result == nil {
			continue
		}
		nr, changed, err := store.RekeyResult(s.payloads, queues[i], result)
		if err != nil {
			return 0, 0, fmt.Errorf("job %d: %w", ids[i], err)
		}
		if changed {
			if _, err := s.stmt(tx, "rekeyResult").ExecContext(ctx, nr, ids[i]); err != nil {
				return 0, 0, err
			}
		}
	}
	return ids[len(ids)-1], len(ids), nil
}

// rekeyOperations re-seals under the current key the new payloads the
// operations keep sealed under another key.
func (s *Store) rekeyOperations(ctx context.Context, tx *sql.Conn) error {
	rows, err := tx.QueryContext(ctx, `SELECT id, params FROM operations WHERE instr(params, CAST('rdenc:' AS BLOB)) > 0`)
	if err != nil {
		return err
	}
	type upd struct {
		id     string
		params []byte
	}
	var ups []upd
	for rows.Next() {
		var id string
		var params []byte
		if err := rows.Scan(&id, &params); err != nil {
			rows.Close()
			return err
		}
		np, changed, err := store.RekeyOperationParams(s.payloads, params)
		if err != nil {
			rows.Close()
			return fmt.Errorf("operation %s: %w", id, err)
		}
		if changed {
			ups = append(ups, upd{id, np})
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, u := range ups {
		if _, err := tx.ExecContext(ctx, `UPDATE operations SET params = ? WHERE id = ?`, u.params, u.id); err != nil {
			return err
		}
	}
	return nil
}

// Payloads implements store.PayloadCodecStore: the codec of
// Options.Payloads, nil without one.
func (s *Store) Payloads() store.PayloadCodec { return s.payloads }

// PayloadKeyCounts implements store.PayloadKeyCounter.
func (s *Store) PayloadKeyCounts(ctx context.Context) (map[string]int64, error) {
	db, err := s.readDB()
	if err != nil {
		return nil, err
	}
	rows, err := db.QueryContext(ctx, `SELECT CASE WHEN substr(payload, 1, 7) = CAST('"rdenc:' AS BLOB)
		THEN CAST(substr(payload, 8, instr(substr(payload, 8), CAST(':' AS BLOB)) - 1) AS TEXT) ELSE '' END AS k, count(*)
		FROM jobs GROUP BY k`)
	if err != nil {
		return nil, fmt.Errorf("sqlite: payload key counts: %w", err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var k string
		var n int64
		if err := rows.Scan(&k, &n); err != nil {
			return nil, fmt.Errorf("sqlite: payload key counts: %w", err)
		}
		out[k] += n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: payload key counts: %w", err)
	}
	return out, nil
}
