package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/redrivehq/redrive/store"
)

// Workflows: the tables and the trigger that moves a workflow's jobs are
// in migrations 0032 to 0034; this file inserts workflows and reads them.

// wq renders a workflow statement for the store's schema.
func (s *Store) wq(sql string) string {
	schema := pgx.Identifier{s.schema}.Sanitize()
	return strings.NewReplacer("{jobs}", schema+".jobs", "{workflows}", schema+".workflows", "{deps}", schema+".job_deps",
		"{waits}", schema+".job_waits", "{gone}", schema+".job_deps_gone", "{counters}", schema+".counters",
		"{wseq}", "'"+schema+".workflows_id_seq'").Replace(sql)
}

type pgQuerier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// flowPrep is a workflow checked and ordered, ready to insert: its
// members in insertion order (dependencies first) then its callbacks.
type flowPrep struct {
	w     *store.NewWorkflow
	order []int
	jobs  []store.NewJob
	// nodes name jobs: a member's name, a callback's column.
	nodes []string
	// blocked: a job waits when it has dependencies; a callback, until
	// it fires.
	blocked []bool
	// keyed: a member has an idempotency key.
	keyed bool
}

// flowCallbacks are w's callbacks by column.
func flowCallbacks(w *store.NewWorkflow) []struct {
	col string
	nj  *store.NewJob
} {
	return []struct {
		col string
		nj  *store.NewJob
	}{{"on_success", w.OnSuccess}, {"on_complete", w.OnComplete}, {"on_death", w.OnDeath}}
}

// prepareFlow orders w's jobs (order is CheckWorkflow's) and refuses a
// callback with an idempotency key.
func prepareFlow(w *store.NewWorkflow, order []int) (*flowPrep, error) {
	// Each job checked here, as Enqueue checks one, so that the error
	// names it (the insert checks them again, as a batch).
	for i := range w.Jobs {
		if err := validateNew(&w.Jobs[i].Job); err != nil {
			return nil, fmt.Errorf("job %q: %w", w.Jobs[i].Name, err)
		}
	}
	f := &flowPrep{w: w, order: order, jobs: make([]store.NewJob, 0, len(w.Jobs)+3), nodes: make([]string, 0, len(w.Jobs)+3)}
	for _, i := range order {
		f.jobs, f.nodes = append(f.jobs, w.Jobs[i].Job), append(f.nodes, w.Jobs[i].Name)
	}
	for _, c := range flowCallbacks(w) {
		if c.nj == nil {
			continue
		}
		if c.nj.IdempotencyKey != "" {
			return nil, fmt.Errorf("%w: callback %s has an idempotency key", store.ErrInvalid, c.col)
		}
		if err := validateNew(c.nj); err != nil {
			return nil, fmt.Errorf("callback %s: %w", c.col, err)
		}
		f.jobs, f.nodes = append(f.jobs, *c.nj), append(f.nodes, c.col)
	}
	f.blocked = make([]bool, len(f.jobs))
	for k := range f.jobs {
		f.blocked[k] = k >= len(w.Jobs) || len(w.Jobs[order[k]].After) > 0
		f.keyed = f.keyed || f.jobs[k].IdempotencyKey != ""
	}
	return f, nil
}

// EnqueueWorkflow implements store.Workflows. Without idempotency keys
// on its jobs, they are inserted once, with their workflow, node and
// state (insertFlows); a job with a key goes through EnqueueTx (which
// answers a key taken), then is updated. Nothing is visible before the
// transaction commits.
func (s *Store) EnqueueWorkflow(ctx context.Context, w store.NewWorkflow, now time.Time) (*store.Workflow, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	order, err := store.CheckWorkflow(&w)
	if err != nil {
		return nil, fmt.Errorf("postgres: enqueue workflow: %w", err)
	}
	f, err := prepareFlow(&w, order)
	if err != nil {
		return nil, fmt.Errorf("postgres: enqueue workflow: %w", err)
	}
	var out *store.Workflow
	err = s.retry(ctx, func() error {
		return s.inTx(ctx, func(tx pgx.Tx) (err error) {
			out, err = s.enqueueFlowTx(ctx, tx, f, now)
			return err
		})
	})
	if err != nil {
		if errors.Is(err, store.ErrInvalid) || errors.Is(err, store.ErrConflict) {
			return nil, fmt.Errorf("postgres: enqueue workflow: %w", err)
		}
		return nil, s.fail("enqueue workflow", err)
	}
	return out, nil
}

// EnqueueWorkflows implements store.Workflows. Without idempotency keys
// on their jobs, the workflows' rows are inserted by one statement
// (ids drawn in the call's order, rows inserted in key order, as
// Enqueue's), then their jobs by one and their edges by one
// (insertFlows): a few round trips for the whole call. With keys, each
// workflow is inserted as EnqueueWorkflow inserts it, one after the
// other in the one transaction.
func (s *Store) EnqueueWorkflows(ctx context.Context, ws []store.NewWorkflow, now time.Time) ([]*store.Workflow, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	ws = slices.Clone(ws)
	orders, firstOf, err := store.CheckWorkflows(ws)
	if err != nil {
		return nil, fmt.Errorf("postgres: enqueue workflows: %w", err)
	}
	fs := make([]*flowPrep, len(ws))
	keyed := false
	for i := range ws {
		if firstOf[i] >= 0 {
			continue
		}
		if fs[i], err = prepareFlow(&ws[i], orders[i]); err != nil {
			return nil, fmt.Errorf("postgres: enqueue workflows: %w", &store.WorkflowBatchError{Index: i, Name: ws[i].Name, Err: err})
		}
		keyed = keyed || fs[i].keyed
	}
	var out []*store.Workflow
	err = s.retry(ctx, func() error {
		return s.inTx(ctx, func(tx pgx.Tx) error {
			out = make([]*store.Workflow, len(ws))
			if keyed {
				for i, f := range fs {
					if f == nil {
						continue
					}
					w, err := s.enqueueFlowTx(ctx, tx, f, now)
					if err != nil {
						if errors.Is(err, store.ErrInvalid) || errors.Is(err, store.ErrConflict) {
							err = &store.WorkflowBatchError{Index: i, Name: f.w.Name, Err: err}
						}
						return err
					}
					out[i] = w
				}
			} else if err := s.enqueueFlowsTx(ctx, tx, fs, out, now); err != nil {
				return err
			}
			for i, f := range firstOf {
				if f >= 0 {
					w := *out[f]
					w.Existing = true
					out[i] = &w
				}
			}
			return nil
		})
	})
	if err != nil {
		if errors.Is(err, store.ErrInvalid) || errors.Is(err, store.ErrConflict) {
			return nil, fmt.Errorf("postgres: enqueue workflows: %w", err)
		}
		return nil, s.fail("enqueue workflows", err)
	}
	return out, nil
}

// enqueueFlowsTx inserts the workflows fs (nil: one answered by an
// earlier workflow of the call), none of whose jobs has an idempotency
// key, and sets out[i] to each: their rows by one statement, those
// whose key is held answered by the workflow holding it, then the jobs
// of the others (insertFlows).
func (s *Store) enqueueFlowsTx(ctx context.Context, tx pgx.Tx, fs []*flowPrep, out []*store.Workflow, now time.Time) error {
	var idx []int
	var names, keys, policies []string
	var totals []int64
	for i, f := range fs {
		if f == nil {
			continue
		}
		idx = append(idx, i)
		names, keys = append(names, f.w.Name), append(keys, f.w.IdempotencyKey)
		policies, totals = append(policies, string(f.w.OnDead)), append(totals, int64(len(f.w.Jobs)))
	}
	rows, err := tx.Query(ctx, s.wq(`WITH input AS (
	SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[]) WITH ORDINALITY AS t(name, idem_key, on_dead, total, ord)
), fresh AS MATERIALIZED (
	SELECT nextval({wseq}::regclass) AS id, f.* FROM (SELECT * FROM input ORDER BY ord) f
), ins AS (
	INSERT INTO {workflows} (id, name, idem_key, on_dead, created_at, total)
	SELECT id, name, NULLIF(idem_key, ''), on_dead, $5, total FROM fresh ORDER BY idem_key NULLS FIRST, id
	ON CONFLICT (idem_key) DO NOTHING
	RETURNING id
)
SELECT f.ord, f.id, ins.id IS NOT NULL FROM fresh f LEFT JOIN ins USING (id)`), names, keys, policies, totals, ts(now))
	if err != nil {
		return err
	}
	wids := make([]int64, len(idx))
	fresh := make([]bool, len(idx))
	n := 0
	for rows.Next() {
		var ord, id int64
		var inserted bool
		if err := rows.Scan(&ord, &id, &inserted); err != nil {
			rows.Close()
			return err
		}
		wids[ord-1], fresh[ord-1] = id, inserted
		n++
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if n != len(idx) {
		return fmt.Errorf("inserted %d workflows, want %d", n, len(idx))
	}
	var news []*flowPrep
	var newIDs []int64
	var newIdx []int
	for k, i := range idx {
		if fresh[k] {
			news, newIDs, newIdx = append(news, fs[i]), append(newIDs, wids[k]), append(newIdx, i)
			continue
		}
		// Its key is held: the workflow holding it answers.
		var wid int64
		if err := tx.QueryRow(ctx, s.wq(`SELECT id FROM {workflows} WHERE idem_key = $1`), fs[i].w.IdempotencyKey).Scan(&wid); err != nil {
			return err
		}
		w, err := s.getWorkflow(ctx, tx, wid)
		if err != nil {
			return err
		}
		w.Existing = true
		out[i] = w
	}
	if len(news) == 0 {
		return nil
	}
	got, err := s.insertFlows(ctx, tx, news, newIDs, now)
	if err != nil {
		return err
	}
	for k, i := range newIdx {
		out[i] = got[k]
	}
	return nil
}

// enqueueFlowTx inserts one workflow in tx and returns it, or the
// workflow holding its key (Existing set).
func (s *Store) enqueueFlowTx(ctx context.Context, tx pgx.Tx, f *flowPrep, now time.Time) (*store.Workflow, error) {
	w := f.w
	var wid int64
	err := tx.QueryRow(ctx, s.wq(`INSERT INTO {workflows} (name, idem_key, on_dead, created_at, total) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (idem_key) DO NOTHING RETURNING id`), w.Name, nullText(w.IdempotencyKey), string(w.OnDead), ts(now), len(w.Jobs)).Scan(&wid)
	if errors.Is(err, pgx.ErrNoRows) {
		if err := tx.QueryRow(ctx, s.wq(`SELECT id FROM {workflows} WHERE idem_key = $1`), w.IdempotencyKey).Scan(&wid); err != nil {
			return nil, err
		}
		out, err := s.getWorkflow(ctx, tx, wid)
		if err != nil {
			return nil, err
		}
		out.Existing = true
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	if !f.keyed {
		out, err := s.insertFlows(ctx, tx, []*flowPrep{f}, []int64{wid}, now)
		if err != nil {
			return nil, err
		}
		return out[0], nil
	}
	// A job has an idempotency key: EnqueueTx inserts the jobs as
	// Enqueue does (and answers a key taken), then they are marked the
	// workflow's, and those that wait blocked.
	created, err := s.EnqueueTx(ctx, tx, f.jobs, now)
	if err != nil {
		return nil, err
	}
	if err := keyHeld(created, f.jobs, f.nodes); err != nil {
		return nil, err
	}
	members := len(w.Jobs)
	ids := make([]int64, len(created))
	var blockedIDs []int64
	for k, j := range created {
		ids[k] = j.ID
		if f.blocked[k] {
			blockedIDs = append(blockedIDs, j.ID)
		}
	}
	if _, err := tx.Exec(ctx, s.wq(`UPDATE {jobs} j SET flow = $1, node = n.node
		FROM unnest($2::bigint[], $3::text[]) AS n(id, node) WHERE j.id = n.id`), wid, ids[:members], f.nodes[:members]); err != nil {
		return nil, err
	}
	if _, err := tx.Exec(ctx, s.wq(`UPDATE {jobs} j SET node = n.node
		FROM unnest($1::bigint[], $2::text[]) AS n(id, node) WHERE j.id = n.id`), ids[members:], f.nodes[members:]); err != nil {
		return nil, err
	}
	if _, err := tx.Exec(ctx, s.wq(`UPDATE {jobs} SET state = 'blocked' WHERE id = ANY($1::bigint[])`), blockedIDs); err != nil {
		return nil, err
	}
	out, err := s.flowEdges(ctx, tx, []*flowPrep{f}, []int64{wid}, created, now)
	if err != nil {
		return nil, err
	}
	return out[0], nil
}

// insertFlows inserts the jobs of the workflows fs, whose rows are
// wids, none with an idempotency key: every job of every workflow by one
// statement (enqueueFlow), each once with its state, node and workflow
// (a callback's none), then their edges (flowEdges).
func (s *Store) insertFlows(ctx context.Context, tx pgx.Tx, fs []*flowPrep, wids []int64, now time.Time) ([]*store.Workflow, error) {
	size := 0
	for _, f := range fs {
		size += len(f.jobs)
	}
	jobs := make([]store.NewJob, 0, size)
	blocked := make([]bool, 0, size)
	flows := make([]int64, 0, size)
	nodes := make([]string, 0, size)
	for k, f := range fs {
		jobs, blocked, nodes = append(jobs, f.jobs...), append(blocked, f.blocked...), append(nodes, f.nodes...)
		for j := range f.jobs {
			flow := wids[k]
			if j >= len(f.w.Jobs) {
				flow = 0 // a callback is outside its workflow
			}
			flows = append(flows, flow)
		}
	}
	b, err := s.prepareEnqueue(jobs, now)
	if err != nil {
		return nil, err
	}
	for k := range jobs {
		if blocked[k] {
			b.states[k] = string(store.Blocked)
		}
	}
	rows, err := tx.Query(ctx, s.sql.enqueueFlow, b.queues, b.kinds, b.payloads, b.states, b.maxRetries, b.policies, b.deps,
		b.reproc, b.runAts, b.nows, shard(), b.priorities, b.traces, b.packed, flows, nodes)
	if err != nil {
		return nil, err
	}
	created, err := b.inserted(rows, jobs)
	if err != nil {
		return nil, err
	}
	if err := s.setLimits(ctx, tx, jobs, created, now); err != nil {
		return nil, err
	}
	s.noteEnqueued(len(jobs))
	return s.flowEdges(ctx, tx, fs, wids, created, now)
}

// flowEdges inserts the edges, the wait counts and the callbacks of the
// workflows fs (rows wids) whose jobs are created (each workflow's in
// its flowPrep's order, one workflow after the other), each kind by one
// statement, and returns the workflows as getWorkflow would read them
// back.
func (s *Store) flowEdges(ctx context.Context, tx pgx.Tx, fs []*flowPrep, wids []int64, created []*store.Job, now time.Time) ([]*store.Workflow, error) {
	var deps, dependents []int64
	var cbFlows, cbSuccess, cbComplete, cbDeath []int64
	out := make([]*store.Workflow, len(fs))
	at := 0
	for k, f := range fs {
		w := f.w
		mine := created[at : at+len(f.jobs)]
		at += len(f.jobs)
		byName := make(map[string]int64, len(w.Jobs))
		for j := range w.Jobs {
			byName[f.nodes[j]] = mine[j].ID
		}
		for j, i := range f.order {
			for _, d := range w.Jobs[i].After {
				deps, dependents = append(deps, byName[d]), append(dependents, mine[j].ID)
			}
		}
		o := &store.Workflow{ID: wids[k], Name: w.Name, OnDead: w.OnDead, IdempotencyKey: w.IdempotencyKey,
			CreatedAt: ts(now), Counts: map[store.State]int64{}, Total: int64(len(w.Jobs)),
			Jobs: make([]store.WorkflowJob, len(w.Jobs))}
		if len(f.jobs) > len(w.Jobs) {
			var cb [3]int64
			for j := len(w.Jobs); j < len(f.jobs); j++ {
				for c, col := range []string{"on_success", "on_complete", "on_death"} {
					if f.nodes[j] == col {
						cb[c] = mine[j].ID
					}
				}
			}
			o.OnSuccess, o.OnComplete, o.OnDeath = cb[0], cb[1], cb[2]
			cbFlows = append(cbFlows, wids[k])
			cbSuccess, cbComplete, cbDeath = append(cbSuccess, cb[0]), append(cbComplete, cb[1]), append(cbDeath, cb[2])
		}
		// Its jobs by id (the ids increase in insertion order), each
		// dependency list by id.
		for j, i := range f.order {
			n := &w.Jobs[i]
			after := make([]int64, len(n.After))
			for a, d := range n.After {
				after[a] = byName[d]
			}
			slices.Sort(after)
			st := store.Pending
			if f.blocked[j] {
				st = store.Blocked
			} else if mine[j].State == store.Scheduled {
				st = store.Scheduled
			}
			o.Jobs[j] = store.WorkflowJob{Name: n.Name, JobID: mine[j].ID, Kind: n.Job.Kind, State: st, After: after}
			o.Counts[st]++
		}
		o.State = store.WorkflowStateOf(false, o.Total, 0, 0, 0)
		out[k] = o
	}
	if len(deps) > 0 {
		if _, err := tx.Exec(ctx, s.wq(`INSERT INTO {deps} (dep_id, job_id) SELECT * FROM unnest($1::bigint[], $2::bigint[])`), deps, dependents); err != nil {
			return nil, err
		}
		// Each dependent's count of edges not done (migration 0034).
		if writeWaits {
			if _, err := tx.Exec(ctx, s.wq(`INSERT INTO {waits} (job_id, n) SELECT job_id, count(*) FROM unnest($1::bigint[]) AS d(job_id)
				GROUP BY job_id`), dependents); err != nil {
				return nil, err
			}
		}
	}
	if len(cbFlows) > 0 {
		if _, err := tx.Exec(ctx, s.wq(`UPDATE {workflows} w SET on_success = NULLIF(c.s, 0), on_complete = NULLIF(c.c, 0), on_death = NULLIF(c.d, 0)
			FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bigint[]) AS c(id, s, c, d) WHERE w.id = c.id`),
			cbFlows, cbSuccess, cbComplete, cbDeath); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// keyHeld returns the *store.WorkflowConflictError of the first of the
// jobs EnqueueTx created (for the requests jobs, named names) whose
// idempotency key another job holds: the whole workflow is refused.
func keyHeld(created []*store.Job, jobs []store.NewJob, names []string) error {
	for k, j := range created {
		if j.Existing {
			return &store.WorkflowConflictError{Job: names[k], Field: "idempotency_key", Key: jobs[k].IdempotencyKey, Holder: j.ID, Gone: j.Gone}
		}
	}
	return nil
}

func nullText(s string) any {
	if s == "" {
		return nil
	}
	return s
}

const workflowColumns = `id, name, coalesce(idem_key, ''), on_dead, created_at, canceled_at, total,
	coalesce(on_success, 0), coalesce(on_complete, 0), coalesce(on_death, 0), completed, dead, canceled, {closed}`

// readClosed is false only in the tests that run the store on a schema
// older than workflows.closed_at (MigrateThrough).
var readClosed = true

// workflowCols is workflowColumns for the schema's version.
func workflowCols() string {
	if readClosed {
		return strings.Replace(workflowColumns, "{closed}", "closed_at", 1)
	}
	return strings.Replace(workflowColumns, "{closed}", "NULL::timestamptz", 1)
}

func scanWorkflow(row pgx.Row) (*store.Workflow, error) {
	var w store.Workflow
	var onDead string
	if err := row.Scan(&w.ID, &w.Name, &w.IdempotencyKey, &onDead, &w.CreatedAt, &w.CanceledAt, &w.Total,
		&w.OnSuccess, &w.OnComplete, &w.OnDeath, &w.Completed, &w.Dead, &w.Canceled, &w.ClosedAt); err != nil {
		return nil, err
	}
	w.OnDead = store.OnDead(onDead)
	w.CreatedAt = w.CreatedAt.UTC()
	for _, t := range []**time.Time{&w.CanceledAt, &w.ClosedAt} {
		if *t != nil {
			u := (*t).UTC()
			*t = &u
		}
	}
	return &w, nil
}

// workflowCounts fills w's counts by state, and its state, from its jobs.
func (s *Store) workflowCounts(ctx context.Context, q pgQuerier, w *store.Workflow) error {
	rows, err := q.Query(ctx, s.wq(`SELECT state, count(*) FROM {jobs} WHERE flow = $1 GROUP BY state`), w.ID)
	if err != nil {
		return err
	}
	defer rows.Close()
	w.Counts = map[store.State]int64{}
	for rows.Next() {
		var st string
		var n int64
		if err := rows.Scan(&st, &n); err != nil {
			return err
		}
		w.Counts[store.State(st)] = n
	}
	if err := rows.Err(); err != nil {
		return err
	}
	w.State = store.WorkflowStateOf(w.CanceledAt != nil, w.Total, w.Completed, w.Dead, w.Canceled)
	return nil
}

func (s *Store) getWorkflow(ctx context.Context, q pgQuerier, id int64) (*store.Workflow, error) {
	w, err := scanWorkflow(q.QueryRow(ctx, s.wq(`SELECT `+workflowCols()+` FROM {workflows} WHERE id = $1`), id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("workflow %d: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	if err := s.workflowCounts(ctx, q, w); err != nil {
		return nil, err
	}
	rows, err := q.Query(ctx, s.wq(`SELECT j.id, coalesce(j.node, ''), j.kind, j.state, d.dep_id FROM {jobs} j LEFT JOIN {deps} d ON d.job_id = j.id
		WHERE j.flow = $1 ORDER BY j.id, d.dep_id`), id)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var jid int64
		var node, kind, state string
		var dep *int64
		if err := rows.Scan(&jid, &node, &kind, &state, &dep); err != nil {
			return nil, err
		}
		if n := len(w.Jobs); n == 0 || w.Jobs[n-1].JobID != jid {
			w.Jobs = append(w.Jobs, store.WorkflowJob{Name: node, JobID: jid, Kind: kind, State: store.State(state), After: []int64{}})
		}
		if dep != nil {
			last := &w.Jobs[len(w.Jobs)-1]
			last.After = append(last.After, *dep)
		}
	}
	return w, rows.Err()
}

// GetWorkflow implements store.Workflows.
func (s *Store) GetWorkflow(ctx context.Context, id int64) (*store.Workflow, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	var out *store.Workflow
	err := s.inTx(ctx, func(tx pgx.Tx) (err error) {
		out, err = s.getWorkflow(ctx, tx, id)
		return err
	})
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, fmt.Errorf("postgres: %w", err)
		}
		return nil, s.fail("get workflow", err)
	}
	return out, nil
}

// ListWorkflows implements store.Workflows.
func (s *Store) ListWorkflows(ctx context.Context, before int64, limit int) ([]*store.Workflow, int64, error) {
	if err := s.check(); err != nil {
		return nil, 0, err
	}
	if limit <= 0 || limit > store.MaxPageSize {
		limit = store.DefaultPageSize
	}
	if before <= 0 {
		before = 1 << 62
	}
	var out []*store.Workflow
	var next int64
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		out, next = nil, 0
		rows, err := tx.Query(ctx, s.wq(`SELECT `+workflowCols()+` FROM {workflows} WHERE id < $1 ORDER BY id DESC LIMIT $2`), before, limit+1)
		if err != nil {
			return err
		}
		for rows.Next() {
			w, err := scanWorkflow(rows)
			if err != nil {
				rows.Close()
				return err
			}
			out = append(out, w)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if len(out) > limit {
			out = out[:limit]
			next = out[limit-1].ID
		}
		for _, w := range out {
			if err := s.workflowCounts(ctx, tx, w); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, 0, s.fail("list workflows", err)
	}
	return out, next, nil
}

// CountWorkflows implements store.Workflows.
func (s *Store) CountWorkflows(ctx context.Context) (map[store.WorkflowState]int64, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	out := make(map[store.WorkflowState]int64, len(store.WorkflowStates))
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		for _, st := range store.WorkflowStates {
			out[st] = 0
		}
		rows, err := tx.Query(ctx, s.wq(strings.Replace(store.CountWorkflowsSQL, "workflows", "{workflows}", 1)))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var canceled, completed, finished bool
			var n int64
			if err := rows.Scan(&canceled, &completed, &finished, &n); err != nil {
				return err
			}
			out[store.WorkflowStateFrom(canceled, completed, finished)] += n
		}
		return rows.Err()
	})
	if err != nil {
		return nil, s.fail("count workflows", err)
	}
	return out, nil
}

// AddToWorkflow implements store.Workflows. The jobs are inserted as
// Enqueue inserts them (EnqueueTx) before the workflow's row is locked,
// so that an add takes the locks of the job counts then the workflow's,
// in the order a completion takes them (its row trigger, then the
// statement triggers of the counts); under the lock it checks that the
// workflow is open, reads the members named and their states, and
// makes the jobs the workflow's.
func (s *Store) AddToWorkflow(ctx context.Context, id int64, nodes []store.WorkflowNode, now time.Time) (*store.Workflow, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if _, err := store.CheckWorkflowAdd(nodes, nil); err != nil {
		return nil, fmt.Errorf("postgres: add to workflow %d: %w", id, err)
	}
	var names []string
	for _, n := range nodes {
		names = append(names, n.Name)
		names = append(names, n.After...)
	}
	var out *store.Workflow
	err := s.retry(ctx, func() error {
		return s.inTx(ctx, func(tx pgx.Tx) error {
			out = nil
			jobs := make([]store.NewJob, len(nodes))
			for i := range nodes {
				jobs[i] = nodes[i].Job
			}
			created, err := s.EnqueueTx(ctx, tx, jobs, now)
			if err != nil {
				return err
			}
			nodeNames := make([]string, len(nodes))
			for i, n := range nodes {
				nodeNames[i] = n.Name
			}
			if err := keyHeld(created, jobs, nodeNames); err != nil {
				return err
			}
			var onDead string
			var canceled, closed *time.Time
			var total, completed, dead, nCanceled int64
			err = tx.QueryRow(ctx, s.wq(`SELECT on_dead, canceled_at, closed_at, total, completed, dead, canceled FROM {workflows}
				WHERE id = $1 FOR UPDATE`), id).Scan(&onDead, &canceled, &closed, &total, &completed, &dead, &nCanceled)
			if errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("workflow %d: %w", id, store.ErrNotFound)
			}
			if err != nil {
				return err
			}
			if canceled != nil || closed != nil {
				e := &store.WorkflowConflictError{Workflow: id, Closed: "closed",
					State: store.WorkflowStateOf(canceled != nil, total, completed, dead, nCanceled)}
				if canceled != nil {
					e.Closed = "canceled"
				}
				return e
			}
			// The members named, by a statement of their own under the
			// lock: their states as the last move of each committed.
			type member struct {
				id    int64
				state store.State
			}
			members := map[string]member{}
			rows, err := tx.Query(ctx, s.wq(`SELECT node, id, state FROM {jobs} WHERE flow = $1 AND node = ANY($2::text[])`), id, names)
			if err != nil {
				return err
			}
			for rows.Next() {
				var name, st string
				var m member
				if err := rows.Scan(&name, &m.id, &st); err != nil {
					rows.Close()
					return err
				}
				m.state = store.State(st)
				members[name] = m
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return err
			}
			if _, err := store.CheckWorkflowAdd(nodes, func(name string) (int64, bool) {
				m, ok := members[name]
				return m.id, ok
			}); err != nil {
				return err
			}
			policy := store.OnDead(onDead)
			byName := make(map[string]int64, len(nodes))
			for i, n := range nodes {
				byName[n.Name] = created[i].ID
			}
			var ids, blocked, deps, dependents, waitIDs []int64
			var done []bool
			var waitN []int32
			for i, n := range nodes {
				ids = append(ids, created[i].ID)
				var notDone int32
				for _, d := range n.After {
					dep, isNew := byName[d]
					edgeDone := false
					if !isNew {
						m := members[d]
						var refuse bool
						edgeDone, refuse = store.AddEdgeDone(policy, m.state)
						if refuse {
							return &store.WorkflowConflictError{Workflow: id, State: store.WorkflowActive,
								Job: n.Name, Field: "after", Member: d, MemberState: m.state}
						}
						dep = m.id
					}
					deps, dependents, done = append(deps, dep), append(dependents, created[i].ID), append(done, edgeDone)
					if !edgeDone {
						notDone++
					}
				}
				if len(n.After) > 0 {
					waitIDs, waitN = append(waitIDs, created[i].ID), append(waitN, notDone)
				}
				if notDone > 0 {
					blocked = append(blocked, created[i].ID)
				}
			}
			if _, err := tx.Exec(ctx, s.wq(`UPDATE {jobs} j SET flow = $1, node = n.node
				FROM unnest($2::bigint[], $3::text[]) AS n(id, node) WHERE j.id = n.id`), id, ids, nodeNames); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, s.wq(`UPDATE {jobs} SET state = 'blocked' WHERE id = ANY($1::bigint[])`), blocked); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, s.wq(`INSERT INTO {deps} (dep_id, job_id, done) SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::boolean[])`),
				deps, dependents, done); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, s.wq(`INSERT INTO {waits} (job_id, n) SELECT * FROM unnest($1::bigint[], $2::int[])`), waitIDs, waitN); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, s.wq(`UPDATE {workflows} SET total = total + $2 WHERE id = $1`), id, len(nodes)); err != nil {
				return err
			}
			out, err = s.getWorkflow(ctx, tx, id)
			return err
		})
	})
	if err != nil {
		if errors.Is(err, store.ErrInvalid) || errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrConflict) {
			return nil, fmt.Errorf("postgres: add to workflow %d: %w", id, err)
		}
		return nil, s.fail("add to workflow", err)
	}
	return out, nil
}

// CancelWorkflow implements store.Workflows. Its jobs that may move
// (not finished) are locked first, in id order, then the workflow's
// row, the order in which the moves of its jobs take them (a Finish
// locks its jobs by id, and the workflow at its commit; a purge the
// dead job, its dependents, then the workflow), so that no completion
// or purge interleaves with the cancel, and none deadlocks with it: the
// workflow first, then its jobs, made a purge of a dead job with
// blocked dependents deadlock with the cancel nearly every time.
func (s *Store) CancelWorkflow(ctx context.Context, id int64, now time.Time) (*store.Workflow, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	ev, err := eventJSON(&store.Event{Kind: store.EventCanceled, At: now, Reason: "workflow_canceled"})
	if err != nil {
		return nil, fmt.Errorf("postgres: cancel workflow: %w", err)
	}
	var out *store.Workflow
	err = s.retry(ctx, func() error {
		return s.inTx(ctx, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, s.wq(`SELECT count(*) FROM (SELECT 1 FROM {jobs}
				WHERE flow = $1 AND state IN ('pending', 'scheduled', 'blocked', 'running') ORDER BY id FOR UPDATE) AS l`), id); err != nil {
				return err
			}
			var canceled *time.Time
			err := tx.QueryRow(ctx, s.wq(`SELECT canceled_at FROM {workflows} WHERE id = $1 FOR UPDATE`), id).Scan(&canceled)
			if errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("workflow %d: %w", id, store.ErrNotFound)
			}
			if err != nil {
				return err
			}
			// A workflow canceled before is canceled again: a job of it
			// redriven since then is waiting or running again.
			{
				if canceled == nil {
					if _, err := tx.Exec(ctx, s.wq(`UPDATE {workflows} SET canceled_at = $2 WHERE id = $1`), id, ts(now)); err != nil {
						return err
					}
				}
				// The callbacks first, so that the cancel of the last
				// jobs fires none; the jobs with the callbacks in one
				// statement would let the trigger see a callback still
				// blocked. No cascade counts twice: the trigger cancels
				// only blocked jobs, and this statement's rows are
				// counted by the job_counts triggers whoever moves them.
				// A callback that fired (made due) is a job of its own
				// by then: only those still blocked are canceled.
				// The counts go to a shard of the counter chosen at
				// random but never shard 0, which the triggers' cancels
				// take (a purge's cascade counts its members' queue,
				// then the success callback's; this, the callbacks'
				// queue first): two workflows sharing their queues
				// deadlocked on the two rows otherwise.
				sh := int16(1 + rand.IntN(counterShards-1))
				for _, sel := range []struct{ ids, states string }{
					{`SELECT unnest(ARRAY[on_success, on_complete, on_death]) FROM {workflows} WHERE id = $1`, `'blocked'`},
					{`SELECT id FROM {jobs} WHERE flow = $1`, `'pending', 'scheduled', 'blocked'`},
				} {
					if _, err := tx.Exec(ctx, s.wq(`WITH c AS (
						UPDATE {jobs} SET state = 'canceled', finished_at = $2, history = history || jsonb_build_array($3::jsonb)
						WHERE id IN (`+sel.ids+`) AND state IN (`+sel.states+`)
						RETURNING queue)
					INSERT INTO {counters} AS x (queue, name, shard, n)
					SELECT queue, 'canceled', $4::smallint, count(*) FROM c GROUP BY queue ORDER BY queue
					ON CONFLICT (queue, name, shard) DO UPDATE SET n = x.n + excluded.n`), id, ts(now), ev, sh); err != nil {
						return err
					}
				}
				if _, err := tx.Exec(ctx, s.wq(`UPDATE {jobs} SET cancel_requested = true WHERE flow = $1 AND state = 'running'`), id); err != nil {
					return err
				}
				if _, err := tx.Exec(ctx, s.sql.cancelNotify, store.CancelNotice); err != nil {
					return err
				}
			}
			out, err = s.getWorkflow(ctx, tx, id)
			return err
		})
	})
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, fmt.Errorf("postgres: cancel %w", err)
		}
		return nil, s.fail("cancel workflow", err)
	}
	return out, nil
}

// DependencyResults implements store.Workflows.
func (s *Store) DependencyResults(ctx context.Context, jobID int64) ([]store.DependencyResult, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	var out []store.DependencyResult
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		out = []store.DependencyResult{}
		var n int
		if err := tx.QueryRow(ctx, s.wq(`SELECT count(*) FROM {jobs} WHERE id = $1`), jobID).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("job %d: %w", jobID, store.ErrNotFound)
		}
		rows, err := tx.Query(ctx, s.wq(`SELECT j.id, coalesce(j.node, ''), j.state, j.result, j.queue FROM {deps} d JOIN {jobs} j ON j.id = d.dep_id
			WHERE d.job_id = $1 ORDER BY j.id`), jobID)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var r store.DependencyResult
			var st string
			var res []byte
			var queue string
			if err := rows.Scan(&r.JobID, &r.Name, &st, &res, &queue); err != nil {
				return err
			}
			r.State = store.State(st)
			if len(res) > 0 {
				r.Result = res
				store.OpenResult(s.payloads, queue, &r)
			}
			out = append(out, r)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		rows.Close()
		// The dependencies deleted since (migration 0045).
		gone, err := tx.Query(ctx, s.wq(`SELECT dep_id, node, state, had_result FROM {gone} WHERE job_id = $1`), jobID)
		if err != nil {
			return err
		}
		defer gone.Close()
		for gone.Next() {
			var id int64
			var name, st string
			var had bool
			if err := gone.Scan(&id, &name, &st, &had); err != nil {
				return err
			}
			out = append(out, store.GoneDependency(id, name, store.State(st), had))
		}
		if err := gone.Err(); err != nil {
			return err
		}
		slices.SortFunc(out, func(a, b store.DependencyResult) int { return cmp.Compare(a.JobID, b.JobID) })
		return nil
	})
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, fmt.Errorf("postgres: dependency results: %w", err)
		}
		return nil, s.fail("dependency results", err)
	}
	return out, nil
}

// blockedDependentsSQL counts, for each of a set of jobs, the blocked
// jobs waiting directly for it: the edges from it not done (job_deps'
// primary key, dep_id first) whose dependent is blocked. A job outside a
// workflow costs one probe of that key, which finds nothing.
const blockedDependentsSQL = `SELECT d.dep_id, count(*) FROM {deps} d JOIN {jobs} j ON j.id = d.job_id
	WHERE d.dep_id = ANY($1::bigint[]) AND NOT d.done AND j.state = 'blocked' GROUP BY d.dep_id`

// writeWaits is false only in the tests that enqueue workflows on a
// schema older than job_waits (MigrateThrough).
var writeWaits = true

// readDeps is false only in the tests that run the store on a schema
// older than job_deps (MigrateThrough).
var readDeps = true

// setBlockedDependents sets BlockedDependents on the dead jobs among
// jobs (store.Job.BlockedDependents), with one statement on q.
func (s *Store) setBlockedDependents(ctx context.Context, q pgQuerier, jobs []*store.Job) error {
	if !readDeps {
		return nil
	}
	var ids []int64
	byID := map[int64]*store.Job{}
	for _, j := range jobs {
		if j.State == store.Dead {
			ids = append(ids, j.ID)
			byID[j.ID] = j
		}
	}
	if len(ids) == 0 {
		return nil
	}
	rows, err := q.Query(ctx, s.wq(blockedDependentsSQL), ids)
	if err != nil {
		return s.fail("blocked dependents", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, n int64
		if err := rows.Scan(&id, &n); err != nil {
			return s.fail("blocked dependents", err)
		}
		byID[id].BlockedDependents = n
	}
	if err := rows.Err(); err != nil {
		return s.fail("blocked dependents", err)
	}
	return nil
}

// unblocks returns the number of blocked jobs waiting directly for any
// of ids, each counted once (store.RedriveResult.Unblocks).
func (s *Store) unblocks(ctx context.Context, q pgQuerier, ids []int64) (int64, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	var n int64
	err := q.QueryRow(ctx, s.wq(`SELECT count(DISTINCT d.job_id) FROM {deps} d JOIN {jobs} j ON j.id = d.job_id
	WHERE d.dep_id = ANY($1::bigint[]) AND NOT d.done AND j.state = 'blocked'`), ids).Scan(&n)
	if err != nil {
		return 0, s.fail("unblocked dependents", err)
	}
	return n, nil
}
