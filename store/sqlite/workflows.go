package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redrivehq/redrive/store"
)

// Workflows: the tables and the trigger that moves a workflow's jobs are
// in migration 0032; this file inserts workflows and reads them.

type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

const insertMember = `INSERT INTO jobs (queue, kind, payload, state, max_retries, policy, idem_key, dependency, reprocessable,
	created_at, run_at, priority, trace, flow, node) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id`

// EnqueueWorkflow implements store.Workflows.
func (s *Store) EnqueueWorkflow(ctx context.Context, w store.NewWorkflow, now time.Time) (*store.Workflow, error) {
	order, err := store.CheckWorkflow(&w)
	if err != nil {
		return nil, fmt.Errorf("sqlite: enqueue workflow: %w", err)
	}
	p, err := s.prepareWorkflow(&w, order)
	if err != nil {
		return nil, fmt.Errorf("sqlite: enqueue workflow: %w", err)
	}
	var out []*store.Workflow
	err = s.writeEnqueue(ctx, len(w.Jobs), func(tx *sql.Conn) (err error) {
		out, err = s.enqueueFlows(ctx, tx, []*flowPrep{p}, []int{-1}, now)
		return err
	})
	if err != nil {
		var be *store.WorkflowBatchError
		if errors.As(err, &be) {
			err = be.Err // one workflow: no index to give
		}
		return nil, fmt.Errorf("sqlite: enqueue workflow: %w", err)
	}
	return out[0], nil
}

// EnqueueWorkflows implements store.Workflows: every workflow is
// checked, and every key looked up, before the first write, so that a
// refusal leaves the writer's shared transaction as it found it.
func (s *Store) EnqueueWorkflows(ctx context.Context, ws []store.NewWorkflow, now time.Time) ([]*store.Workflow, error) {
	ws = slices.Clone(ws)
	orders, firstOf, err := store.CheckWorkflows(ws)
	if err != nil {
		return nil, fmt.Errorf("sqlite: enqueue workflows: %w", err)
	}
	preps := make([]*flowPrep, len(ws))
	jobs := 0
	for i := range ws {
		if firstOf[i] >= 0 {
			continue
		}
		if preps[i], err = s.prepareWorkflow(&ws[i], orders[i]); err != nil {
			return nil, fmt.Errorf("sqlite: enqueue workflows: %w", &store.WorkflowBatchError{Index: i, Name: ws[i].Name, Err: err})
		}
		jobs += len(ws[i].Jobs)
	}
	var out []*store.Workflow
	err = s.writeEnqueue(ctx, jobs, func(tx *sql.Conn) (err error) {
		out, err = s.enqueueFlows(ctx, tx, preps, firstOf, now)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("sqlite: enqueue workflows: %w", err)
	}
	return out, nil
}

// flowPrep is a workflow checked and sealed, ready to insert.
type flowPrep struct {
	w     *store.NewWorkflow
	order []int
	// sealed are the members in order's order, cbSealed the callbacks
	// present (on_success, on_complete, on_death), sealed.
	sealed, cbSealed []store.NewJob
}

// flowCallbacks are a workflow's callbacks, by column.
func flowCallbacks(w *store.NewWorkflow) []struct {
	col string
	nj  *store.NewJob
} {
	return []struct {
		col string
		nj  *store.NewJob
	}{{"on_success", w.OnSuccess}, {"on_complete", w.OnComplete}, {"on_death", w.OnDeath}}
}

// prepareWorkflow checks w's jobs and callbacks as Enqueue checks a job
// (w itself checked by CheckWorkflow, which gave order) and seals them.
func (s *Store) prepareWorkflow(w *store.NewWorkflow, order []int) (*flowPrep, error) {
	for i := range w.Jobs {
		if err := validateNew(&w.Jobs[i].Job); err != nil {
			return nil, fmt.Errorf("job %q: %w", w.Jobs[i].Name, err)
		}
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
	}
	// Sealed before the first write: an error from here on fails the
	// transaction rather than the request alone.
	p := &flowPrep{w: w, order: order}
	members := make([]store.NewJob, len(order))
	for k, i := range order {
		members[k] = w.Jobs[i].Job
	}
	var err error
	if p.sealed, err = store.SealNew(s.payloads, members); err != nil {
		return nil, err
	}
	for _, c := range flowCallbacks(w) {
		if c.nj == nil {
			continue
		}
		one, err := store.SealNew(s.payloads, []store.NewJob{*c.nj})
		if err != nil {
			return nil, fmt.Errorf("callback %s: %w", c.col, err)
		}
		p.cbSealed = append(p.cbSealed, one[0])
	}
	return p, nil
}

// enqueueFlows inserts the workflows preps in tx, in order, and returns
// them; preps[i] is nil, and the workflow answered by workflow
// firstOf[i], for one whose key an earlier one takes. The workflows'
// keys and their jobs' are looked up before the first write: a key a
// job holds refuses them all (a *store.WorkflowBatchError), writing
// nothing.
func (s *Store) enqueueFlows(ctx context.Context, tx *sql.Conn, preps []*flowPrep, firstOf []int, now time.Time) ([]*store.Workflow, error) {
	out := make([]*store.Workflow, len(preps))
	for i, p := range preps {
		if p == nil || p.w.IdempotencyKey == "" {
			continue
		}
		var id int64
		err := tx.QueryRowContext(ctx, `SELECT id FROM workflows WHERE idem_key = ?`, p.w.IdempotencyKey).Scan(&id)
		if err == nil {
			if out[i], err = getWorkflow(ctx, tx, id); err != nil {
				return nil, err
			}
			out[i].Existing = true
			continue
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return nil, err
		}
	}
	for i, p := range preps {
		if p == nil || out[i] != nil {
			continue
		}
		if err := memberKeyHeld(ctx, tx, p.w.Jobs); err != nil {
			return nil, &store.WorkflowBatchError{Index: i, Name: p.w.Name, Err: err}
		}
	}
	counts := map[[2]string]int64{}
	mv := moves{}
	var news []store.NewJob
	var outs []*store.Job
	note := func(nj *store.NewJob, r *row, id int64) {
		counts[[2]string{nj.Queue, store.StatEnqueued}]++
		mv.move(nj.Queue, "", r.state)
		j := r.job(id, nj)
		if s.payloads != nil {
			j.Payload = nj.Payload // the plaintext, as Enqueue returns it
		}
		news, outs = append(news, *nj), append(outs, j)
	}
	for i, p := range preps {
		if p == nil || out[i] != nil {
			continue
		}
		var err error
		if out[i], err = s.insertFlow(ctx, tx, p, now, note); err != nil {
			return nil, err
		}
	}
	if err := s.setLimits(ctx, tx, news, outs, now); err != nil {
		return nil, err
	}
	if err := s.setFair(ctx, tx, news, outs); err != nil {
		return nil, err
	}
	if err := s.addMoves(ctx, tx, mv); err != nil {
		return nil, err
	}
	if err := s.addCounters(ctx, tx, counts); err != nil {
		return nil, err
	}
	for i, f := range firstOf {
		if f >= 0 {
			w := *out[f]
			w.Existing = true
			out[i] = &w
		}
	}
	return out, nil
}

// insertFlow inserts one workflow, its members, edges and callbacks,
// calling note for every job inserted, and returns the workflow as
// getWorkflow would read it back.
func (s *Store) insertFlow(ctx context.Context, tx *sql.Conn, p *flowPrep, now time.Time, note func(*store.NewJob, *row, int64)) (*store.Workflow, error) {
	w, order := p.w, p.order
	var wid int64
	if err := s.stmt(tx, "insertWorkflow").QueryRowContext(ctx,
		w.Name, nullString(w.IdempotencyKey), string(w.OnDead), micros(now), len(w.Jobs)).Scan(&wid); err != nil {
		return nil, err
	}
	// The members, each inserted once with its workflow, its name and
	// its state (blocked when it has dependencies), in multi-row
	// statements, in topological order.
	rows := make([]row, len(order))
	names := make([]string, len(order))
	for k, i := range order {
		n := &w.Jobs[i]
		rows[k] = newRow(&p.sealed[k], now)
		if len(n.After) > 0 {
			rows[k].state = store.Blocked
		}
		names[k] = n.Name
	}
	idv, err := s.insertMembers(ctx, tx, rows, wid, names)
	if err != nil {
		return nil, err
	}
	ids := make(map[string]int64, len(w.Jobs))
	for k, i := range order {
		ids[w.Jobs[i].Name] = idv[k]
		note(&w.Jobs[i].Job, &rows[k], idv[k])
	}
	// The edges, in one statement.
	edges := make([]byte, 0, 32*len(w.Jobs))
	edges = append(edges, '[')
	for _, i := range order {
		for _, d := range w.Jobs[i].After {
			if len(edges) > 1 {
				edges = append(edges, ',')
			}
			edges = append(edges, '[')
			edges = strconv.AppendInt(edges, ids[d], 10)
			edges = append(edges, ',')
			edges = strconv.AppendInt(edges, ids[w.Jobs[i].Name], 10)
			edges = append(edges, ']')
		}
	}
	edges = append(edges, ']')
	if len(edges) > 2 {
		if _, err := s.stmt(tx, "insertEdges").ExecContext(ctx, string(edges)); err != nil {
			return nil, err
		}
	}
	// The callbacks: blocked jobs outside the workflow (flow NULL), named
	// by their column.
	var cbIDs [3]any
	k := 0
	for c, cb := range flowCallbacks(w) {
		if cb.nj == nil {
			continue
		}
		r := newRow(&p.cbSealed[k], now)
		k++
		r.state = store.Blocked
		var id int64
		if err := s.stmt(tx, "insertMember").QueryRowContext(ctx, append(r.args(), nil, cb.col)...).Scan(&id); err != nil {
			return nil, fmt.Errorf("callback %s: %w", cb.col, err)
		}
		cbIDs[c] = id
		note(cb.nj, &r, id)
	}
	if k > 0 {
		if _, err := s.stmt(tx, "setCallbacks").ExecContext(ctx, cbIDs[0], cbIDs[1], cbIDs[2], wid); err != nil {
			return nil, fmt.Errorf("callbacks: %w", err)
		}
	}
	// The workflow as getWorkflow would read it back: its jobs by id (the
	// ids increase in topological order), each dependency list by id.
	out := &store.Workflow{ID: wid, Name: w.Name, OnDead: w.OnDead, IdempotencyKey: w.IdempotencyKey,
		CreatedAt: fromMicros(micros(now)), Counts: map[store.State]int64{}, Total: int64(len(w.Jobs)),
		Jobs: make([]store.WorkflowJob, len(order))}
	out.OnSuccess, _ = cbIDs[0].(int64)
	out.OnComplete, _ = cbIDs[1].(int64)
	out.OnDeath, _ = cbIDs[2].(int64)
	for k, i := range order {
		n := &w.Jobs[i]
		after := make([]int64, len(n.After))
		for a, d := range n.After {
			after[a] = ids[d]
		}
		slices.Sort(after)
		out.Jobs[k] = store.WorkflowJob{Name: n.Name, JobID: idv[k], Kind: n.Job.Kind, State: rows[k].state, After: after}
		out.Counts[rows[k].state]++
	}
	out.State = store.WorkflowStateOf(false, out.Total, 0, 0, 0)
	return out, nil
}

// insertMembers inserts a workflow's members (rows, named names) in
// multi-row statements, and returns their ids in rows' order.
// AUTOINCREMENT hands out increasing ids in VALUES order, so the
// returned ids, sorted, are the rows' ids in order.
func (s *Store) insertMembers(ctx context.Context, tx *sql.Conn, rows []row, flow int64, names []string) ([]int64, error) {
	ids := make([]int64, 0, len(rows))
	for len(rows) > 0 {
		n := min(len(rows), multiInsertRows)
		q := `INSERT INTO jobs (queue, kind, payload, state, max_retries, policy, idem_key, dependency, reprocessable,
	created_at, run_at, priority, trace, flow, node) VALUES ` +
			strings.Repeat("(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?), ", n-1) + "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id"
		args := make([]any, 0, 15*n)
		for k := range n {
			args = append(append(args, rows[k].args()...), flow, names[k])
		}
		st, err := s.multiInsert(ctx, tx, -n, q)
		if err != nil {
			return nil, err
		}
		res, err := st.QueryContext(ctx, args...)
		if err != nil {
			return nil, err
		}
		got := len(ids)
		for res.Next() {
			var id int64
			if err := res.Scan(&id); err != nil {
				res.Close()
				return nil, err
			}
			ids = append(ids, id)
		}
		res.Close()
		if err := res.Err(); err != nil {
			return nil, err
		}
		if len(ids)-got != n {
			return nil, fmt.Errorf("inserted %d rows, want %d", len(ids)-got, n)
		}
		slices.Sort(ids[got:])
		rows, names = rows[n:], names[n:]
	}
	return ids, nil
}

func init() {
	writeSQL["insertMember"] = insertMember
	writeSQL["insertWorkflow"] = `INSERT INTO workflows (name, idem_key, on_dead, created_at, total) VALUES (?, ?, ?, ?, ?) RETURNING id`
	writeSQL["insertEdges"] = `INSERT INTO job_deps (dep_id, job_id)
	SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(?)`
	writeSQL["setCallbacks"] = `UPDATE workflows SET on_success = ?, on_complete = ?, on_death = ? WHERE id = ?`
}

// AddToWorkflow implements store.Workflows. Everything is checked
// before the first write (the writer's shared transaction keeps the
// other requests' writes when this one is refused); the one writer
// serializes the add with every move of the workflow's jobs.
func (s *Store) AddToWorkflow(ctx context.Context, id int64, nodes []store.WorkflowNode, now time.Time) (*store.Workflow, error) {
	if _, err := store.CheckWorkflowAdd(nodes, nil); err != nil {
		return nil, fmt.Errorf("sqlite: add to workflow %d: %w", id, err)
	}
	for i := range nodes {
		if err := validateNew(&nodes[i].Job); err != nil {
			return nil, fmt.Errorf("sqlite: add to workflow %d: job %q: %w", id, nodes[i].Name, err)
		}
	}
	names := map[string]bool{}
	for _, n := range nodes {
		names[n.Name] = true
		for _, d := range n.After {
			names[d] = true
		}
	}
	list := make([]string, 0, len(names))
	for n := range names {
		list = append(list, n)
	}
	namesJSON, err := json.Marshal(list)
	if err != nil {
		return nil, err
	}
	var out *store.Workflow
	err = s.writeEnqueue(ctx, len(nodes), func(tx *sql.Conn) error {
		out = nil
		var onDead string
		var canceled, closed sql.NullInt64
		var total, completed, dead, nCanceled int64
		err := tx.QueryRowContext(ctx, `SELECT on_dead, canceled_at, closed_at, total, completed, dead, canceled FROM workflows WHERE id = ?`, id).
			Scan(&onDead, &canceled, &closed, &total, &completed, &dead, &nCanceled)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("sqlite: add to workflow %d: %w", id, store.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("sqlite: add to workflow %d: %w", id, err)
		}
		if canceled.Valid || closed.Valid {
			e := &store.WorkflowConflictError{Workflow: id, Closed: "closed",
				State: store.WorkflowStateOf(canceled.Valid, total, completed, dead, nCanceled)}
			if canceled.Valid {
				e.Closed = "canceled"
			}
			return fmt.Errorf("sqlite: add to workflow %d: %w", id, e)
		}
		type member struct {
			id    int64
			state store.State
		}
		members := map[string]member{}
		rows, err := tx.QueryContext(ctx, `SELECT node, id, state FROM jobs WHERE flow = ? AND node IN (SELECT value FROM json_each(?))`, id, string(namesJSON))
		if err != nil {
			return fmt.Errorf("sqlite: add to workflow %d: %w", id, err)
		}
		for rows.Next() {
			var name, st string
			var m member
			if err := rows.Scan(&name, &m.id, &st); err != nil {
				rows.Close()
				return fmt.Errorf("sqlite: add to workflow %d: %w", id, err)
			}
			m.state = store.State(st)
			members[name] = m
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("sqlite: add to workflow %d: %w", id, err)
		}
		order, err := store.CheckWorkflowAdd(nodes, func(name string) (int64, bool) {
			m, ok := members[name]
			return m.id, ok
		})
		if err != nil {
			return fmt.Errorf("sqlite: add to workflow %d: %w", id, err)
		}
		if err := memberKeyHeld(ctx, tx, nodes); err != nil {
			return fmt.Errorf("sqlite: add to workflow %d: %w", id, err)
		}
		// Each job's edges from members: done at once or not, or the add
		// refused.
		policy := store.OnDead(onDead)
		notDone := make([]int, len(nodes))
		memberDone := make([]map[string]bool, len(nodes))
		for i, n := range nodes {
			memberDone[i] = map[string]bool{}
			for _, d := range n.After {
				m, ok := members[d]
				if !ok {
					notDone[i]++ // a job of the request
					continue
				}
				done, refuse := store.AddEdgeDone(policy, m.state)
				if refuse {
					return fmt.Errorf("sqlite: add to workflow %d: %w", id, &store.WorkflowConflictError{Workflow: id, State: store.WorkflowActive,
						Job: n.Name, Field: "after", Member: d, MemberState: m.state})
				}
				memberDone[i][d] = done
				if !done {
					notDone[i]++
				}
			}
		}
		// Sealed before the first write: an error from here on fails the
		// transaction rather than the request alone.
		sealed := make([]store.NewJob, len(nodes))
		for i := range nodes {
			one, err := store.SealNew(s.payloads, []store.NewJob{nodes[i].Job})
			if err != nil {
				return fmt.Errorf("sqlite: add to workflow %d: job %q: %w", id, nodes[i].Name, err)
			}
			sealed[i] = one[0]
		}
		ins, err := tx.PrepareContext(ctx, insertMember)
		if err != nil {
			return fmt.Errorf("sqlite: add to workflow %d: %w", id, err)
		}
		defer ins.Close()
		counts := map[[2]string]int64{}
		mv := moves{}
		ids := make(map[string]int64, len(nodes))
		news := make([]store.NewJob, 0, len(nodes))
		outs := make([]*store.Job, 0, len(nodes))
		for _, i := range order {
			n := &nodes[i]
			nj := &n.Job
			r := newRow(&sealed[i], now)
			if notDone[i] > 0 {
				r.state = store.Blocked
			}
			var jid int64
			if err := ins.QueryRowContext(ctx, append(r.args(), id, n.Name)...).Scan(&jid); err != nil {
				return fmt.Errorf("sqlite: add to workflow %d: job %q: %w", id, n.Name, err)
			}
			counts[[2]string{nj.Queue, store.StatEnqueued}]++
			mv.move(nj.Queue, "", r.state)
			j := r.job(jid, nj)
			if s.payloads != nil {
				j.Payload = nj.Payload
			}
			news, outs = append(news, *nj), append(outs, j)
			ids[n.Name] = jid
			for _, d := range n.After {
				dep, done := ids[d], 0
				if m, ok := members[d]; ok {
					dep = m.id
					if memberDone[i][d] {
						done = 1
					}
				}
				if _, err := tx.ExecContext(ctx, `INSERT INTO job_deps (dep_id, job_id, done) VALUES (?, ?, ?)`, dep, jid, done); err != nil {
					return fmt.Errorf("sqlite: add to workflow %d: job %q: %w", id, n.Name, err)
				}
			}
		}
		if _, err := tx.ExecContext(ctx, `UPDATE workflows SET total = total + ? WHERE id = ?`, len(nodes), id); err != nil {
			return fmt.Errorf("sqlite: add to workflow %d: %w", id, err)
		}
		if err := s.setLimits(ctx, tx, news, outs, now); err != nil {
			return err
		}
		if err := s.setFair(ctx, tx, news, outs); err != nil {
			return err
		}
		if err := s.addMoves(ctx, tx, mv); err != nil {
			return err
		}
		if err := s.addCounters(ctx, tx, counts); err != nil {
			return err
		}
		out, err = getWorkflow(ctx, tx, id)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// memberKeyHeld returns the *store.WorkflowConflictError of the first
// of nodes whose idempotency key a job holds, or held (deleted, its key
// kept): the whole enqueue is refused, before anything is written.
func memberKeyHeld(ctx context.Context, tx *sql.Conn, nodes []store.WorkflowNode) error {
	for _, n := range nodes {
		k := n.Job.IdempotencyKey
		if k == "" {
			continue
		}
		var id int64
		err := tx.QueryRowContext(ctx, `SELECT id FROM jobs WHERE idem_key = ?`, k).Scan(&id)
		if err == nil {
			return &store.WorkflowConflictError{Job: n.Name, Field: "idempotency_key", Key: k, Holder: id}
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		kept, err := keptKey(ctx, tx, k)
		if err != nil {
			return err
		}
		if kept != nil {
			return &store.WorkflowConflictError{Job: n.Name, Field: "idempotency_key", Key: k, Holder: kept.ID, Gone: true}
		}
	}
	return nil
}

const workflowColumns = `id, name, coalesce(idem_key, ''), on_dead, created_at, canceled_at, total,
	coalesce(on_success, 0), coalesce(on_complete, 0), coalesce(on_death, 0), completed, dead, canceled, closed_at`

func scanWorkflow(sc scanner) (*store.Workflow, error) {
	var w store.Workflow
	var onDead string
	var created int64
	var canceled, closed sql.NullInt64
	if err := sc.Scan(&w.ID, &w.Name, &w.IdempotencyKey, &onDead, &created, &canceled, &w.Total,
		&w.OnSuccess, &w.OnComplete, &w.OnDeath, &w.Completed, &w.Dead, &w.Canceled, &closed); err != nil {
		return nil, err
	}
	w.OnDead = store.OnDead(onDead)
	w.CreatedAt = fromMicros(created)
	w.CanceledAt = optTime(canceled)
	w.ClosedAt = optTime(closed)
	return &w, nil
}

// workflowCounts fills w's counts by state, and its state, from its jobs
// (one range of the jobs_flow index).
func workflowCounts(ctx context.Context, q querier, w *store.Workflow) error {
	rows, err := q.QueryContext(ctx, `SELECT state, count(*) FROM jobs WHERE flow = ? GROUP BY state`, w.ID)
	if err != nil {
		return fmt.Errorf("sqlite: workflow %d: %w", w.ID, err)
	}
	defer rows.Close()
	w.Counts = map[store.State]int64{}
	for rows.Next() {
		var st string
		var n int64
		if err := rows.Scan(&st, &n); err != nil {
			return fmt.Errorf("sqlite: workflow %d: %w", w.ID, err)
		}
		w.Counts[store.State(st)] = n
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("sqlite: workflow %d: %w", w.ID, err)
	}
	w.State = store.WorkflowStateOf(w.CanceledAt != nil, w.Total, w.Completed, w.Dead, w.Canceled)
	return nil
}

// workflowJobsSQL reads a workflow's jobs, workflowEdgesSQL their
// dependencies: by the edges' primary key (dep_id first), through the
// ids of the workflow's jobs.
const (
	workflowJobsSQL  = `SELECT id, node, kind, state FROM jobs WHERE flow = ? ORDER BY id`
	workflowEdgesSQL = `SELECT d.job_id, d.dep_id FROM jobs j JOIN job_deps d ON d.dep_id = j.id
	WHERE j.flow = ? ORDER BY d.dep_id`
)

// workflowSQL are the statements that read a workflow's jobs.
var workflowSQL = []string{workflowJobsSQL, workflowEdgesSQL}

func getWorkflow(ctx context.Context, q querier, id int64) (*store.Workflow, error) {
	w, err := scanWorkflow(q.QueryRowContext(ctx, `SELECT `+workflowColumns+` FROM workflows WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("sqlite: workflow %d: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: workflow %d: %w", id, err)
	}
	if err := workflowCounts(ctx, q, w); err != nil {
		return nil, err
	}
	// The jobs, then their edges found by their dependencies' ids (the
	// primary key of job_deps): a join on job_deps.job_id would scan
	// job_deps once per job (only the edges not done are indexed by
	// job_id), quadratic in the workflow's size.
	rows, err := q.QueryContext(ctx, workflowJobsSQL, id)
	if err != nil {
		return nil, fmt.Errorf("sqlite: workflow %d: %w", id, err)
	}
	defer rows.Close()
	at := map[int64]int{}
	for rows.Next() {
		var jid int64
		var node, kind, state string
		if err := rows.Scan(&jid, &node, &kind, &state); err != nil {
			return nil, fmt.Errorf("sqlite: workflow %d: %w", id, err)
		}
		at[jid] = len(w.Jobs)
		w.Jobs = append(w.Jobs, store.WorkflowJob{Name: node, JobID: jid, Kind: kind, State: store.State(state), After: []int64{}})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: workflow %d: %w", id, err)
	}
	rows.Close()
	edges, err := q.QueryContext(ctx, workflowEdgesSQL, id)
	if err != nil {
		return nil, fmt.Errorf("sqlite: workflow %d: %w", id, err)
	}
	defer edges.Close()
	for edges.Next() {
		var jid, dep int64
		if err := edges.Scan(&jid, &dep); err != nil {
			return nil, fmt.Errorf("sqlite: workflow %d: %w", id, err)
		}
		if k, ok := at[jid]; ok {
			w.Jobs[k].After = append(w.Jobs[k].After, dep)
		}
	}
	if err := edges.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: workflow %d: %w", id, err)
	}
	return w, nil
}

// GetWorkflow implements store.Workflows.
func (s *Store) GetWorkflow(ctx context.Context, id int64) (*store.Workflow, error) {
	db, err := s.readDB()
	if err != nil {
		return nil, err
	}
	tx, err := db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("sqlite: workflow %d: %w", id, err)
	}
	defer tx.Rollback()
	return getWorkflow(ctx, tx, id)
}

// ListWorkflows implements store.Workflows.
func (s *Store) ListWorkflows(ctx context.Context, before int64, limit int) ([]*store.Workflow, int64, error) {
	if limit <= 0 || limit > store.MaxPageSize {
		limit = store.DefaultPageSize
	}
	if before <= 0 {
		before = 1 << 62
	}
	db, err := s.readDB()
	if err != nil {
		return nil, 0, err
	}
	tx, err := db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, 0, fmt.Errorf("sqlite: workflows: %w", err)
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, `SELECT `+workflowColumns+` FROM workflows WHERE id < ? ORDER BY id DESC LIMIT ?`, before, limit+1)
	if err != nil {
		return nil, 0, fmt.Errorf("sqlite: workflows: %w", err)
	}
	var out []*store.Workflow
	for rows.Next() {
		w, err := scanWorkflow(rows)
		if err != nil {
			rows.Close()
			return nil, 0, fmt.Errorf("sqlite: workflows: %w", err)
		}
		out = append(out, w)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("sqlite: workflows: %w", err)
	}
	var next int64
	if len(out) > limit {
		out = out[:limit]
		next = out[limit-1].ID
	}
	for _, w := range out {
		if err := workflowCounts(ctx, tx, w); err != nil {
			return nil, 0, err
		}
	}
	return out, next, nil
}

// CountWorkflows implements store.Workflows.
func (s *Store) CountWorkflows(ctx context.Context) (map[store.WorkflowState]int64, error) {
	db, err := s.readDB()
	if err != nil {
		return nil, err
	}
	rows, err := db.QueryContext(ctx, store.CountWorkflowsSQL)
	if err != nil {
		return nil, fmt.Errorf("sqlite: count workflows: %w", err)
	}
	defer rows.Close()
	out := make(map[store.WorkflowState]int64, len(store.WorkflowStates))
	for _, st := range store.WorkflowStates {
		out[st] = 0
	}
	for rows.Next() {
		var canceled, completed, finished bool
		var n int64
		if err := rows.Scan(&canceled, &completed, &finished, &n); err != nil {
			return nil, fmt.Errorf("sqlite: count workflows: %w", err)
		}
		out[store.WorkflowStateFrom(canceled, completed, finished)] += n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: count workflows: %w", err)
	}
	return out, nil
}

// CancelWorkflow implements store.Workflows.
func (s *Store) CancelWorkflow(ctx context.Context, id int64, now time.Time) (*store.Workflow, error) {
	ev, err := eventJSON(&store.Event{Kind: store.EventCanceled, At: now, Reason: "workflow_canceled"})
	if err != nil {
		return nil, err
	}
	var out *store.Workflow
	err = s.write(ctx, func(tx *sql.Conn) error {
		var canceled sql.NullInt64
		err := tx.QueryRowContext(ctx, `SELECT canceled_at FROM workflows WHERE id = ?`, id).Scan(&canceled)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("sqlite: cancel workflow %d: %w", id, store.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("sqlite: cancel workflow %d: %w", id, err)
		}
		// A workflow canceled before is canceled again: a job of it
		// redriven since then is waiting or running again.
		{
			if !canceled.Valid {
				if _, err := tx.ExecContext(ctx, `UPDATE workflows SET canceled_at = ? WHERE id = ?`, micros(now), id); err != nil {
					return fmt.Errorf("sqlite: cancel workflow %d: %w", id, err)
				}
			}
			// A callback that fired (made due) is a job of its own by
			// then: only those still blocked are canceled.
			// One by one: the callbacks first (so that the cancel of the
			// last jobs fires none; jobs added to the workflow after its
			// enqueue have newer ids than its callbacks), then the jobs
			// newest first, each before its dependencies (ids follow the
			// graph's order, added jobs' too), so that no cancel
			// cascades and each job is counted by this code.
			rows, err := tx.QueryContext(ctx, `WITH cb(id) AS (SELECT on_success FROM workflows WHERE id = ?1 UNION ALL
					SELECT on_complete FROM workflows WHERE id = ?1 UNION ALL SELECT on_death FROM workflows WHERE id = ?1)
				SELECT id, queue, state FROM jobs WHERE (flow = ?1 AND state IN ('pending', 'scheduled', 'blocked'))
				OR (id IN (SELECT id FROM cb) AND state = 'blocked')
				ORDER BY id IN (SELECT id FROM cb) DESC, id DESC`, id)
			if err != nil {
				return fmt.Errorf("sqlite: cancel workflow %d: %w", id, err)
			}
			type waitingJob struct {
				id           int64
				queue, state string
			}
			var jobs []waitingJob
			for rows.Next() {
				var j waitingJob
				if err := rows.Scan(&j.id, &j.queue, &j.state); err != nil {
					rows.Close()
					return fmt.Errorf("sqlite: cancel workflow %d: %w", id, err)
				}
				jobs = append(jobs, j)
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return fmt.Errorf("sqlite: cancel workflow %d: %w", id, err)
			}
			mv := moves{}
			counts := map[[2]string]int64{}
			for _, j := range jobs {
				res, err := tx.ExecContext(ctx, `UPDATE jobs SET state = 'canceled', finished_at = ?,
					history = json_insert(coalesce(history, '[]'), '$[#]', json(?)) WHERE id = ? AND state = ?`, micros(now), ev, j.id, j.state)
				n, err := rowsChanged(res, err)
				if err != nil {
					return fmt.Errorf("sqlite: cancel workflow %d: job %d: %w", id, j.id, err)
				}
				if n == 1 && j.state != string(store.Blocked) { // the trigger jobs_unblocked counts those
					mv.move(j.queue, store.State(j.state), store.Canceled)
					counts[[2]string{j.queue, store.StatCanceled}]++
				}
			}
			if err := s.addMoves(ctx, tx, mv); err != nil {
				return err
			}
			if err := s.addCounters(ctx, tx, counts); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `UPDATE jobs SET cancel_requested = 1 WHERE flow = ? AND state = 'running'`, id); err != nil {
				return fmt.Errorf("sqlite: cancel workflow %d: %w", id, err)
			}
		}
		out, err = getWorkflow(ctx, tx, id)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// DependencyResults implements store.Workflows.
func (s *Store) DependencyResults(ctx context.Context, jobID int64) ([]store.DependencyResult, error) {
	db, err := s.readDB()
	if err != nil {
		return nil, err
	}
	tx, err := db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("sqlite: dependency results of job %d: %w", jobID, err)
	}
	defer tx.Rollback()
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM jobs WHERE id = ?`, jobID).Scan(&n); err != nil {
		return nil, fmt.Errorf("sqlite: dependency results of job %d: %w", jobID, err)
	}
	if n == 0 {
		return nil, fmt.Errorf("sqlite: dependency results of job %d: %w", jobID, store.ErrNotFound)
	}
	rows, err := tx.QueryContext(ctx, `SELECT j.id, coalesce(j.node, ''), j.state, j.result, j.queue FROM job_deps d JOIN jobs j ON j.id = d.dep_id
		WHERE d.job_id = ? ORDER BY j.id`, jobID)
	if err != nil {
		return nil, fmt.Errorf("sqlite: dependency results of job %d: %w", jobID, err)
	}
	defer rows.Close()
	out := []store.DependencyResult{}
	for rows.Next() {
		var r store.DependencyResult
		var st string
		var res []byte
		var queue string
		if err := rows.Scan(&r.JobID, &r.Name, &st, &res, &queue); err != nil {
			return nil, fmt.Errorf("sqlite: dependency results of job %d: %w", jobID, err)
		}
		r.State = store.State(st)
		if len(res) > 0 {
			r.Result = res
			store.OpenResult(s.payloads, queue, &r)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: dependency results of job %d: %w", jobID, err)
	}
	// The dependencies deleted since (migration 0045).
	gone, err := tx.QueryContext(ctx, `SELECT dep_id, node, state, had_result FROM job_deps_gone WHERE job_id = ?`, jobID)
	if err != nil {
		return nil, fmt.Errorf("sqlite: dependency results of job %d: %w", jobID, err)
	}
	defer gone.Close()
	for gone.Next() {
		var id int64
		var name, st string
		var had bool
		if err := gone.Scan(&id, &name, &st, &had); err != nil {
			return nil, fmt.Errorf("sqlite: dependency results of job %d: %w", jobID, err)
		}
		out = append(out, store.GoneDependency(id, name, store.State(st), had))
	}
	if err := gone.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: dependency results of job %d: %w", jobID, err)
	}
	slices.SortFunc(out, func(a, b store.DependencyResult) int { return cmp.Compare(a.JobID, b.JobID) })
	return out, nil
}

// blockedDependentsSQL counts, for each of a set of jobs (a JSON array
// of ids), the blocked jobs waiting directly for it: the edges from it
// not done (job_deps' primary key, dep_id first) whose dependent is
// blocked. A job outside a workflow costs one probe of that key, which
// finds nothing.
const blockedDependentsSQL = `SELECT d.dep_id, count(*) FROM job_deps d JOIN jobs j ON j.id = d.job_id
	WHERE d.dep_id IN (SELECT value FROM json_each(?)) AND d.done = 0 AND j.state = 'blocked' GROUP BY d.dep_id`

// setBlockedDependents sets BlockedDependents on the dead jobs among
// jobs (store.Job.BlockedDependents), with one statement on q.
func setBlockedDependents(ctx context.Context, q querier, jobs []*store.Job) error {
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
	b, err := json.Marshal(ids)
	if err != nil {
		return err
	}
	rows, err := q.QueryContext(ctx, blockedDependentsSQL, string(b))
	if err != nil {
		return fmt.Errorf("sqlite: blocked dependents: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, n int64
		if err := rows.Scan(&id, &n); err != nil {
			return fmt.Errorf("sqlite: blocked dependents: %w", err)
		}
		byID[id].BlockedDependents = n
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("sqlite: blocked dependents: %w", err)
	}
	return nil
}

// unblocksSQL counts the blocked jobs waiting directly for any of a set
// of jobs (a JSON array of ids), each once (store.RedriveResult.Unblocks).
const unblocksSQL = `SELECT count(DISTINCT d.job_id) FROM job_deps d JOIN jobs j ON j.id = d.job_id
	WHERE d.dep_id IN (SELECT value FROM json_each(?)) AND d.done = 0 AND j.state = 'blocked'`

// unblocks returns the number of blocked jobs waiting directly for any
// of ids, read on q.
func unblocks(ctx context.Context, q querier, ids []int64) (int64, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	b, err := json.Marshal(ids)
	if err != nil {
		return 0, err
	}
	var n int64
	if err := q.QueryRowContext(ctx, unblocksSQL, string(b)).Scan(&n); err != nil {
		return 0, fmt.Errorf("sqlite: unblocked dependents: %w", err)
	}
	return n, nil
}
