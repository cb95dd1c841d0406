package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/redrivehq/redrive/store"
)

// operationColumns are an operation's columns in the order scanOperation
// reads them.
const operationColumns = `id, kind, state, params, progress, cursor, max_id, worker, lease_until, error,
	created_at, started_at, updated_at, finished_at`

// scanOperationC is scanOperation, opening a sealed payload of the
// operation's params with c.
func scanOperationC(c store.PayloadCodec, row pgx.Row) (*store.Operation, error) {
	op, err := scanOperation(row)
	if err == nil {
		store.OpenOperation(c, op)
	}
	return op, err
}

func scanOperation(row pgx.Row) (*store.Operation, error) {
	var (
		op               store.Operation
		kind, state      string
		params, progress []byte
		worker           *string
	)
	if err := row.Scan(&op.ID, &kind, &state, &params, &progress, &op.Cursor, &op.MaxID, &worker, &op.LeaseUntil, &op.Error,
		&op.CreatedAt, &op.StartedAt, &op.UpdatedAt, &op.FinishedAt); err != nil {
		return nil, err
	}
	op.Kind, op.State = store.OperationKind(kind), store.OperationState(state)
	if worker != nil {
		op.Worker = *worker
	}
	if err := json.Unmarshal(params, &op.Params); err != nil {
		return nil, fmt.Errorf("operation %s: params: %w", op.ID, err)
	}
	if err := json.Unmarshal(progress, &op.Progress); err != nil {
		return nil, fmt.Errorf("operation %s: progress: %w", op.ID, err)
	}
	if op.Progress.RefusedIDs == nil {
		op.Progress.RefusedIDs = []int64{}
	}
	op.CreatedAt, op.UpdatedAt = op.CreatedAt.UTC(), op.UpdatedAt.UTC()
	op.LeaseUntil, op.StartedAt, op.FinishedAt = utcPtr(op.LeaseUntil), utcPtr(op.StartedAt), utcPtr(op.FinishedAt)
	return &op, nil
}

// payloadMatch is the condition of a filter's payload match: jsonb
// equality, under which numbers compare by value. jsonb refuses the
// escape \u0000 (valid JSON, which a payload may hold): the payload and
// the value are cast with each \u0000 read as \ufffd, so that one such
// payload does not fail every match (and a value holding it matches it).
func payloadMatch(f store.Filter, a *args) (string, error) {
	if err := store.CheckPayloadMatch(f); err != nil {
		return "", err
	}
	keys, err := store.PayloadPath(f.PayloadField)
	if err != nil {
		return "", err
	}
	value := strings.ReplaceAll(string(f.PayloadValue), `\u0000`, `\ufffd`)
	return `replace(convert_from(payload, 'UTF8'), '\u0000', '\ufffd')::jsonb #> ` + a.add(keys) + "::text[] = " + a.add(value) + "::jsonb", nil
}

// ops is the qualified name of the operations table.
func (s *Store) ops() string { return pgx.Identifier{s.schema}.Sanitize() + ".operations" }

// CreateOperation implements store.Operations.
func (s *Store) CreateOperation(ctx context.Context, n store.NewOperation, now time.Time) (*store.Operation, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if err := store.CheckNewOperation(&n); err != nil {
		return nil, fmt.Errorf("postgres: create operation: %w", err)
	}
	var a args
	if _, err := s.where(n.Params.Filter, &a); err != nil {
		return nil, fmt.Errorf("postgres: create operation: %w", err)
	}
	var err error
	n.Params.Payload, err = store.SealPayload(s.payloads, store.OperationQueue, n.Params.Payload)
	if err != nil {
		return nil, fmt.Errorf("postgres: create operation: %w", err)
	}
	params, err := json.Marshal(n.Params)
	if err != nil {
		return nil, fmt.Errorf("postgres: create operation: %w", err)
	}
	progress, err := json.Marshal(store.OperationProgress{Matched: -1, RefusedIDs: []int64{}})
	if err != nil {
		return nil, fmt.Errorf("postgres: create operation: %w", err)
	}
	op, err := scanOperationC(s.payloads, s.pool.QueryRow(ctx, `INSERT INTO `+s.ops()+` (id, kind, state, params, progress, max_id, created_at, updated_at)
	VALUES ($1, $2, 'pending', $3::jsonb, $4::jsonb, (SELECT coalesce(max(id), 0) FROM `+s.sql.jobs+`), $5, $5)
	ON CONFLICT (id) DO NOTHING RETURNING `+operationColumns, n.ID, string(n.Kind), string(params), string(progress), ts(now)))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("postgres: create operation: id %s is taken: %w", n.ID, store.ErrConflict)
	}
	if err != nil {
		return nil, s.fail("create operation", err)
	}
	return op, nil
}

// GetOperation implements store.Operations.
func (s *Store) GetOperation(ctx context.Context, id string) (*store.Operation, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	op, err := scanOperationC(s.payloads, s.pool.QueryRow(ctx, `SELECT `+operationColumns+` FROM `+s.ops()+` WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("postgres: operation %q: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, s.fail("get operation", err)
	}
	return op, nil
}

// ListOperations implements store.Operations.
func (s *Store) ListOperations(ctx context.Context, before string, limit int) ([]*store.Operation, string, error) {
	if err := s.check(); err != nil {
		return nil, "", err
	}
	limit = store.Page{Limit: limit}.Size()
	var a args
	q := `SELECT ` + operationColumns + ` FROM ` + s.ops()
	if before != "" {
		var created time.Time
		err := s.pool.QueryRow(ctx, `SELECT created_at FROM `+s.ops()+` WHERE id = $1`, before).Scan(&created)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, "", fmt.Errorf("postgres: list operations: %w: no operation %q to list before", store.ErrInvalid, before)
		}
		if err != nil {
			return nil, "", s.fail("list operations", err)
		}
		q += ` WHERE (created_at, id) < (` + a.add(created) + `, ` + a.add(before) + `)`
	}
	q += ` ORDER BY created_at DESC, id DESC LIMIT ` + a.add(limit+1)
	rows, err := s.pool.Query(ctx, q, a...)
	if err != nil {
		return nil, "", s.fail("list operations", err)
	}
	defer rows.Close()
	out := []*store.Operation{}
	for rows.Next() {
		op, err := scanOperationC(s.payloads, rows)
		if err != nil {
			return nil, "", s.fail("list operations", err)
		}
		out = append(out, op)
	}
	if err := rows.Err(); err != nil {
		return nil, "", s.fail("list operations", err)
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
	if err := s.check(); err != nil {
		return nil, err
	}
	var a args
	pick := `SELECT id FROM ` + s.ops() + ` WHERE (state = 'pending' OR (state = 'running' AND lease_until < ` + a.add(ts(now)) + `))`
	if id != "" {
		pick += ` AND id = ` + a.add(id)
	}
	pick += ` ORDER BY created_at, id LIMIT 1 FOR UPDATE SKIP LOCKED`
	q := `UPDATE ` + s.ops() + ` SET state = 'running', worker = ` + a.add(worker) + `, lease_until = ` + a.add(ts(leaseUntil)) + `,
	started_at = coalesce(started_at, $1), updated_at = $1 WHERE id = (` + pick + `) RETURNING ` + operationColumns
	var op *store.Operation
	err := s.retry(ctx, func() error {
		var err error
		op, err = scanOperationC(s.payloads, s.pool.QueryRow(ctx, q, a...))
		if errors.Is(err, pgx.ErrNoRows) {
			op, err = nil, nil
		}
		return err
	})
	if err != nil {
		return nil, s.fail("claim operation", err)
	}
	return op, nil
}

// inOperation runs fn in a transaction holding the row lock of the
// operation id, read as it stands.
func (s *Store) inOperation(ctx context.Context, what, id string, fn func(tx pgx.Tx, op *store.Operation) error) error {
	if err := s.check(); err != nil {
		return err
	}
	err := s.retry(ctx, func() error {
		return s.inTx(ctx, func(tx pgx.Tx) error {
			op, err := scanOperationC(s.payloads, tx.QueryRow(ctx, `SELECT `+operationColumns+` FROM `+s.ops()+` WHERE id = $1 FOR UPDATE`, id))
			if errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("operation %q: %w", id, store.ErrNotFound)
			}
			if err != nil {
				return err
			}
			return fn(tx, op)
		})
	})
	if err != nil {
		return s.fail(what, err)
	}
	return nil
}

// RenewOperation implements store.Operations.
func (s *Store) RenewOperation(ctx context.Context, r store.OperationRenewal) (*store.Operation, error) {
	var out *store.Operation
	err := s.inOperation(ctx, "renew operation", r.ID, func(tx pgx.Tx, op *store.Operation) error {
		if err := store.CheckStep(op, r.Worker, op.Cursor); err != nil {
			return err
		}
		matched := op.Progress.Matched
		if r.Matched >= 0 {
			matched = r.Matched
		}
		var err error
		out, err = scanOperationC(s.payloads, tx.QueryRow(ctx, `UPDATE `+s.ops()+` SET lease_until = $2, updated_at = $3,
	progress = jsonb_set(progress, '{matched}', to_jsonb($4::bigint)) WHERE id = $1 RETURNING `+operationColumns,
			r.ID, ts(r.LeaseUntil), ts(r.Now), matched))
		return err
	})
	return out, err
}

// StepOperation implements store.Operations.
func (s *Store) StepOperation(ctx context.Context, st store.OperationStep) (store.StepResult, error) {
	var res store.StepResult
	if st.Limit < 1 || st.Limit > store.MaxPageSize {
		return res, fmt.Errorf("postgres: step operation: %w: limit %d out of 1..%d", store.ErrInvalid, st.Limit, store.MaxPageSize)
	}
	err := s.inOperation(ctx, "step operation", st.ID, func(tx pgx.Tx, op *store.Operation) error {
		res = store.StepResult{}
		if err := store.CheckStep(op, st.Worker, st.Cursor); err != nil {
			return err
		}
		if op.Kind == store.OpExport && st.Exported == nil {
			return fmt.Errorf("%w: an export's step says what it wrote", store.ErrInvalid)
		}
		cursor, n, err := s.applyStep(ctx, tx, op, st, &res)
		if err != nil {
			return fmt.Errorf("operation %s: %w", op.ID, err)
		}
		res.End = n < st.Limit
		res.Handled.Tally()
		store.ApplyStep(op, st, res.Handled, cursor)
		progress, err := json.Marshal(op.Progress)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE `+s.ops()+` SET progress = $2::jsonb, cursor = $3, lease_until = $4, updated_at = $5 WHERE id = $1`,
			op.ID, string(progress), op.Cursor, ts(st.LeaseUntil), ts(st.Now)); err != nil {
			return err
		}
		res.Operation = op
		return nil
	})
	return res, err
}

// applyStep does a step's batch in tx and returns the new cursor and
// how many jobs the batch held.
func (s *Store) applyStep(ctx context.Context, tx pgx.Tx, op *store.Operation, st store.OperationStep, res *store.StepResult) (int64, int, error) {
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
		var a args
		w, err := s.where(f, &a)
		if err != nil {
			return 0, 0, err
		}
		rows, err := tx.Query(ctx, `SELECT id FROM `+s.sql.jobs+` WHERE `+w+` AND id > `+a.add(op.Cursor)+` AND id <= `+a.add(op.MaxID)+
			` ORDER BY id LIMIT `+a.add(st.Limit), a...)
		if err != nil {
			return 0, 0, err
		}
		ids, err = pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
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
		var payload []byte
		if len(op.Params.Payload) > 0 {
			payload = op.Params.Payload
		}
		outcome := map[int64]bool{}
		if err := s.redriveRows(ctx, tx, ids, st.Now, payload, ev, op.Params.Keys, outcome); err != nil {
			return 0, 0, err
		}
		var redriven []int64
		for _, id := range ids {
			ok, found := outcome[id]
			switch {
			case !found:
				res.Handled.Skipped++
			case ok:
				res.Handled.Redriven++
				redriven = append(redriven, id)
			default:
				res.Handled.Refused++
				res.Handled.RefusedIDs = append(res.Handled.RefusedIDs, id)
			}
		}
		if res.Handled.Unblocks, err = s.unblocks(ctx, tx, redriven); err != nil {
			return 0, 0, err
		}
		if len(redriven) > 0 {
			rows, err := tx.Query(ctx, `SELECT DISTINCT queue FROM `+s.sql.jobs+` WHERE id = ANY($1::bigint[]) ORDER BY queue`, redriven)
			if err != nil {
				return 0, 0, err
			}
			if res.Queues, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
				return 0, 0, err
			}
		}
	case store.OpPurge:
		q := `WITH del AS (
	DELETE FROM ` + s.sql.jobs + ` WHERE id = ANY($1::bigint[]) AND state = 'dead'
	RETURNING queue, state, idem_key, id, kind, created_at, finished_at
), keep AS (
	` + strings.ReplaceAll(keepKeysSQL, "{keys}", s.sql.keys) + `
), cnt AS (
	INSERT INTO ` + s.sql.counters + ` AS c (queue, name, shard, n)
	SELECT queue, 'purged', $2::smallint, count(*) FROM del GROUP BY queue ORDER BY queue
	` + upsertCounters + `
)
SELECT count(*) FROM del`
		if err := tx.QueryRow(ctx, q, ids, shard()).Scan(&res.Handled.Purged); err != nil {
			return 0, 0, err
		}
	case store.OpCancel:
		ev, err := eventJSON(&store.Event{Kind: store.EventCanceled, At: st.Now, Note: op.Params.Note})
		if err != nil {
			return 0, 0, err
		}
		// The job counts follow through the triggers on jobs.
		q := `WITH up AS (
	UPDATE ` + s.sql.jobs + ` SET state = 'canceled', finished_at = $2, history = history || jsonb_build_array($3::jsonb)
	WHERE id = ANY($1::bigint[]) AND state IN ('pending', 'scheduled')
	RETURNING queue
), cnt AS (
	INSERT INTO ` + s.sql.counters + ` AS c (queue, name, shard, n)
	SELECT queue, 'canceled', $4::smallint, count(*) FROM up GROUP BY queue ORDER BY queue
	` + upsertCounters + `
)
SELECT count(*) FROM up`
		if err := tx.QueryRow(ctx, q, ids, ts(st.Now), ev, shard()).Scan(&res.Handled.Canceled); err != nil {
			return 0, 0, err
		}
		res.Handled.Skipped = int64(len(ids)) - res.Handled.Canceled
	}
	return last, len(ids), nil
}

// replayStep enqueues a copy of each job of the next batch, naming its
// source in replay_of and in a replayed event, with one statement.
func (s *Store) replayStep(ctx context.Context, tx pgx.Tx, op *store.Operation, f store.Filter, st store.OperationStep, res *store.StepResult) (int64, int, error) {
	var a args
	w, err := s.where(f, &a)
	if err != nil {
		return 0, 0, err
	}
	ev, err := eventJSON(&store.Event{Kind: store.EventReplayed, At: st.Now, Note: op.Params.Note})
	if err != nil {
		return 0, 0, err
	}
	now := a.add(ts(st.Now))
	q := `WITH src AS (
	SELECT id, queue, kind, payload, policy, dependency, max_retries, reprocessable, priority, climit, ckey, fkey, trace, trace_packed FROM ` + s.sql.jobs + `
	WHERE ` + w + ` AND id > ` + a.add(op.Cursor) + ` AND id <= ` + a.add(op.MaxID) + ` ORDER BY id LIMIT ` + a.add(st.Limit) + `
), ins AS (
	INSERT INTO ` + s.sql.jobs + ` (queue, kind, payload, state, max_retries, policy, dependency, reprocessable, priority, created_at, run_at, replay_of, history,
		climit, ckey, fkey, trace, trace_packed)
	SELECT queue, kind, payload, 'pending', max_retries, policy, dependency, reprocessable, priority, ` + now + `, ` + now + `, id,
		jsonb_build_array(` + a.add(ev) + `::jsonb || jsonb_build_object('replay_of', id)), climit, ckey, fkey, trace, trace_packed
	FROM src ORDER BY id
	RETURNING replay_of, queue, climit
), gen AS (
	UPDATE ` + s.schema + `.limit_gen SET n = n + 1 WHERE id = 1 AND EXISTS (SELECT 1 FROM ins WHERE climit IS NOT NULL)
), cnt AS (
	INSERT INTO ` + s.sql.counters + ` AS c (queue, name, shard, n)
	SELECT queue, 'enqueued', ` + a.add(shard()) + `::smallint, count(*) FROM ins GROUP BY queue ORDER BY queue
	` + upsertCounters + `
), ntf AS (
	SELECT count(pg_notify(` + a.add(s.channel) + `, queue)) AS n FROM (SELECT DISTINCT queue FROM ins) q
)
SELECT coalesce(max(replay_of), 0), count(*), coalesce(array_agg(DISTINCT queue) FILTER (WHERE queue IS NOT NULL), '{}')
FROM ins CROSS JOIN ntf`
	var last, n int64
	if err := tx.QueryRow(ctx, q, a...).Scan(&last, &n, &res.Queues); err != nil {
		return 0, 0, err
	}
	res.Handled.Replayed = n
	for _, q := range res.Queues {
		// A copy may be under a limit: the queue's next fetch looks.
		s.limitHints.get(q).due.Store(true)
	}
	if n == 0 {
		return op.Cursor, 0, nil
	}
	return last, int(n), nil
}

// OperationJobs implements store.Operations.
func (s *Store) OperationJobs(ctx context.Context, id string, after int64, limit int) ([]*store.Job, error) {
	op, err := s.GetOperation(ctx, id)
	if err != nil {
		return nil, err
	}
	var a args
	w, err := s.where(store.OperationFilter(op), &a)
	if err != nil {
		return nil, fmt.Errorf("postgres: operation jobs: %w", err)
	}
	rows, err := s.pool.Query(ctx, `SELECT `+cols("", true)+` FROM `+s.sql.jobs+` WHERE `+w+` AND id > `+a.add(after)+
		` AND id <= `+a.add(op.MaxID)+` ORDER BY id LIMIT `+a.add(store.Page{Limit: limit}.Size()), a...)
	if err != nil {
		return nil, s.fail("operation jobs", err)
	}
	jobs, err := collect(rows, true, s.payloads)
	if err != nil {
		return nil, s.fail("operation jobs", err)
	}
	return jobs, nil
}

// FinishOperation implements store.Operations.
func (s *Store) FinishOperation(ctx context.Context, id, worker string, state store.OperationState, msg string, now time.Time) (*store.Operation, error) {
	if state != store.OpDone && state != store.OpFailed {
		return nil, fmt.Errorf("postgres: finish operation: %w: an operation finishes done or failed, not %q", store.ErrInvalid, state)
	}
	var out *store.Operation
	err := s.inOperation(ctx, "finish operation", id, func(tx pgx.Tx, op *store.Operation) error {
		if err := store.CheckStep(op, worker, op.Cursor); err != nil {
			return err
		}
		var err error
		out, err = scanOperationC(s.payloads, tx.QueryRow(ctx, `UPDATE `+s.ops()+` SET state = $2, error = $3, worker = NULL, lease_until = NULL,
	finished_at = $4, updated_at = $4 WHERE id = $1 RETURNING `+operationColumns, id, string(state), cleanText(msg), ts(now)))
		return err
	})
	return out, err
}

// SetOperationState implements store.Operations.
func (s *Store) SetOperationState(ctx context.Context, id string, to store.OperationState, now time.Time) (*store.Operation, error) {
	var out *store.Operation
	err := s.inOperation(ctx, "set operation state", id, func(tx pgx.Tx, op *store.Operation) error {
		next, change, err := store.Transition(id, op.State, to)
		if err != nil {
			return err
		}
		if !change {
			out = op
			return nil
		}
		var finished *time.Time
		if next == store.OpCanceled {
			t := ts(now)
			finished = &t
		}
		out, err = scanOperationC(s.payloads, tx.QueryRow(ctx, `UPDATE `+s.ops()+` SET state = $2, worker = NULL, lease_until = NULL,
	finished_at = $3, updated_at = $4 WHERE id = $1 RETURNING `+operationColumns, id, string(next), finished, ts(now)))
		return err
	})
	return out, err
}

// DeleteOperations implements store.Operations.
func (s *Store) DeleteOperations(ctx context.Context, before time.Time) (int64, error) {
	if err := s.check(); err != nil {
		return 0, err
	}
	tag, err := s.pool.Exec(ctx, `DELETE FROM `+s.ops()+` WHERE state IN ('done', 'failed', 'canceled') AND finished_at < $1`, ts(before))
	if err != nil {
		return 0, s.fail("delete operations", err)
	}
	return tag.RowsAffected(), nil
}

// rekeyStep re-seals, under the current key, the payloads of the next
// st.Limit jobs after the cursor that are sealed under another key, and
// the previous payloads their histories keep; its first step also
// re-seals the payloads redrive operations keep. The update of a
// payload applies only to a payload still as read, so a payload a
// concurrent redrive replaced (sealed under the current key) is kept.
func (s *Store) rekeyStep(ctx context.Context, tx pgx.Tx, op *store.Operation, st store.OperationStep, res *store.StepResult) (int64, int, error) {
	if op.Cursor == 0 {
		if err := s.rekeyOperations(ctx, tx); err != nil {
			return 0, 0, err
		}
	}
	rows, err := tx.Query(ctx, `SELECT id, queue, payload, position('rdenc:' in history::text) > 0,
		CASE WHEN substring(result from 1 for 7) = convert_to('"rdenc:', 'UTF8') THEN result END FROM `+s.sql.jobs+`
	WHERE id > $1 AND id <= $2 ORDER BY id LIMIT $3`, op.Cursor, op.MaxID, st.Limit)
	if err != nil {
		return 0, 0, err
	}
	var (
		ids      []int64
		queues   []string
		payloads [][]byte
		sealed   []int // indexes of the jobs whose history holds a sealed payload
		results  [][]byte
	)
	for rows.Next() {
		var id int64
		var q string
		var p, result []byte
		var hist bool
		if err := rows.Scan(&id, &q, &p, &hist, &result); err != nil {
			rows.Close()
			return 0, 0, err
		}
		if hist {
			sealed = append(sealed, len(ids))
		}
		results = append(results, result)
		ids, queues, payloads = append(ids, id), append(queues, q), append(payloads, p)
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
	if len(idx) > 0 {
		uids, olds := make([]int64, len(idx)), make([][]byte, len(idx))
		for k, i := range idx {
			uids[k], olds[k] = ids[i], payloads[i]
		}
		tag, err := tx.Exec(ctx, `UPDATE `+s.sql.jobs+` AS j SET payload = u.p FROM unnest($1::bigint[], $2::bytea[], $3::bytea[]) AS u(id, p, old)
	WHERE j.id = u.id AND j.payload = u.old`, uids, out, olds)
		if err != nil {
			return 0, 0, err
		}
		if lost := int64(len(idx)) - tag.RowsAffected(); lost > 0 {
			res.Handled.Rekeyed -= lost
			res.Handled.Skipped += lost
		}
	}
	for _, i := range sealed {
		// Locked, so that an event appended meanwhile is not lost.
		var hist []byte
		if err := tx.QueryRow(ctx, `SELECT history::text FROM `+s.sql.jobs+` WHERE id = $1 FOR UPDATE`, ids[i]).Scan(&hist); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				continue
			}
			return 0, 0, err
		}
		nh, changed, err := store.RekeyHistory(s.payloads, queues[i], hist)
		if err != nil {
			return 0, 0, fmt.Errorf("job %d: %w", ids[i], err)
		}
		if changed {
			if _, err := tx.Exec(ctx, `UPDATE `+s.sql.jobs+` SET history = $2::jsonb WHERE id = $1`, ids[i], string(nh)); err != nil {
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
			// Only a result still as read: a job's result changes only
			// when it completes, which a rekey must not undo.
			if _, err := tx.Exec(ctx, `UPDATE `+s.sql.jobs+` SET result = $2 WHERE id = $1 AND result = $3`, ids[i], nr, result); err != nil {
				return 0, 0, err
			}
		}
	}
	return ids[len(ids)-1], len(ids), nil
}

// rekeyOperations re-seals under the current key the new payloads the
// operations keep sealed under another key.
func (s *Store) rekeyOperations(ctx context.Context, tx pgx.Tx) error {
	rows, err := tx.Query(ctx, `SELECT id, params::text FROM `+s.ops()+` WHERE position('rdenc:' in params::text) > 0 ORDER BY id FOR UPDATE`)
	if err != nil {
		return err
	}
	var ids, params []string
	for rows.Next() {
		var id string
		var p []byte
		if err := rows.Scan(&id, &p); err != nil {
			rows.Close()
			return err
		}
		np, changed, err := store.RekeyOperationParams(s.payloads, p)
		if err != nil {
			rows.Close()
			return fmt.Errorf("operation %s: %w", id, err)
		}
		if changed {
			ids, params = append(ids, id), append(params, string(np))
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for i, id := range ids {
		if _, err := tx.Exec(ctx, `UPDATE `+s.ops()+` SET params = $2::jsonb WHERE id = $1`, id, params[i]); err != nil {
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
	if err := s.check(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT CASE WHEN substring(payload FROM 1 FOR 7) = convert_to('"rdenc:', 'UTF8')
		THEN split_part(convert_from(substring(payload FROM 8 FOR 40), 'SQL_ASCII'), ':', 1) ELSE '' END AS k, count(*)
		FROM `+s.sql.jobs+` GROUP BY k`)
	if err != nil {
		return nil, fmt.Errorf("postgres: payload key counts: %w", err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var k string
		var n int64
		if err := rows.Scan(&k, &n); err != nil {
			return nil, fmt.Errorf("postgres: payload key counts: %w", err)
		}
		out[k] += n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: payload key counts: %w", err)
	}
	return out, nil
}
