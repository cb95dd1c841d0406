package storetest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/redrivehq/redrive/store"
)

// testWorkflowModel runs random workflows (random DAGs, each failure
// policy) through random interleavings of two workers fetching,
// completing, retrying and burying jobs, stale outcomes (the other
// worker's, or a second one of a lease), cancels of jobs (waiting or
// running), redrives, purges and retention of dead jobs, cancels of
// the whole workflow, and adds of jobs (AddToWorkflow: depending on
// members in any state and on each other; refused once the workflow is
// closed or canceled, or a dependency is deleted or cancels them at
// once), against an in-memory model of the contract (docs/design.md,
// "Workflows"). After every step each job's state must be the model's:
// so a fetch leases only jobs whose dependencies allow it, and each
// callback fires at most once and when the model says; a dead job's
// blocked dependents, and a redrive's count of the jobs it unblocks, are
// the model's too. The job counts
// are checked against the jobs at the end of each run.
func testWorkflowModel(x *h) {
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("REDRIVE_WORKFLOW_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			x.t.Fatalf("REDRIVE_WORKFLOW_SEED=%q: want a number", v)
		}
		seed = n
	}
	x.t.Logf("seed %d (REDRIVE_WORKFLOW_SEED=%d replays it)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed>>7))
	var others int64 // the dead jobs earlier runs left, which retention deletes too
	// A purge or retention carries no time: the cancels it causes are
	// stamped with the database's clock, and so are the callbacks they
	// fire. The model's clock starts an hour ahead of it and moves a
	// second a step, through the runs, so that what the database stamps
	// is due at once.
	now := time.Now().Add(time.Hour).Truncate(time.Second)
	for run := range 12 {
		policy := []store.OnDead{store.WaitOnDead, store.CancelOnDead, store.RunOnDead}[run%3]
		m := newFlowModel(x, rng, fmt.Sprintf("wfm-%d", run), policy, now)
		m.others = &others
		for step := 0; step < 150 && !m.done(); step++ {
			m.step()
			m.check(fmt.Sprintf("run %d (%s), step %d", run, policy, step))
			if x.t.Failed() {
				x.t.Fatalf("run %d (%s) diverged at step %d (seed %d); actions:\n%s", run, policy, step, seed, m.log)
			}
		}
		x.checkAllCounts(fmt.Sprintf("run %d", run))
		now = m.now
		for _, j := range m.jobs {
			if j.state == store.Dead && !j.gone {
				others++
			}
		}
	}
}

// mjob is the model of one job: a member of the workflow or a callback.
type mjob struct {
	id        int64
	name      string
	member    bool
	state     store.State
	lease     int64
	worker    string
	attempt   int
	cancelReq bool
	deps      []int // members it depends on
	done      map[int]bool
	leased    *store.Job // the job as last leased
	gone      bool       // deleted dead (purge, retention): still counted dead by its workflow
}

type flowModel struct {
	x      *h
	rng    *rand.Rand
	queue  string
	policy store.OnDead
	now    time.Time
	jobs   []*mjob // members, then on_success, on_complete, on_death
	n      int     // members
	log    string
	wid    int64
	others *int64 // dead jobs of earlier runs, not yet deleted
	// closed is set once every member finished (the workflow takes no
	// more jobs), canceled once the workflow was canceled; added counts
	// the jobs added.
	closed, canceled bool
	added            int
}

const (
	cbSuccess = iota
	cbComplete
	cbDeath
)

func newFlowModel(x *h, rng *rand.Rand, queue string, policy store.OnDead, now time.Time) *flowModel {
	n := 3 + rng.IntN(8)
	deps := make([][]int, n)
	for i := range n {
		for j := range i {
			if rng.IntN(3) == 0 {
				deps[i] = append(deps[i], j)
			}
		}
	}
	return newFlowModelOf(x, rng, queue, policy, now, deps)
}

// newFlowModelOf enqueues in queue at now a workflow of len(deps)
// members, member i depending on the members deps[i] (all lower than
// i), with the three callbacks, and returns its model.
func newFlowModelOf(x *h, rng *rand.Rand, queue string, policy store.OnDead, now time.Time, edges [][]int) *flowModel {
	n := len(edges)
	w := store.NewWorkflow{OnDead: policy}
	m := &flowModel{x: x, rng: rng, queue: queue, policy: policy, now: now, n: n}
	for i := range n {
		var after []string
		deps := edges[i]
		for _, j := range deps {
			after = append(after, fmt.Sprint("n", j))
		}
		w.Jobs = append(w.Jobs, store.WorkflowNode{Name: fmt.Sprint("n", i), After: after,
			Job: store.NewJob{Queue: queue, Kind: fmt.Sprint("n", i), MaxRetries: -1}})
		st := store.Pending
		if len(deps) > 0 {
			st = store.Blocked
		}
		m.jobs = append(m.jobs, &mjob{name: fmt.Sprint("n", i), member: true, state: st, deps: deps, done: map[int]bool{}})
	}
	for _, k := range []string{"on_success", "on_complete", "on_death"} {
		nj := store.NewJob{Queue: queue, Kind: k, MaxRetries: -1}
		switch k {
		case "on_success":
			w.OnSuccess = &nj
		case "on_complete":
			w.OnComplete = &nj
		default:
			w.OnDeath = &nj
		}
		m.jobs = append(m.jobs, &mjob{name: k, state: store.Blocked})
	}
	f := x.enqueueFlow(w, m.now)
	m.wid = f.w.ID
	for i := range n {
		m.jobs[i].id = f.ids[fmt.Sprint("n", i)]
	}
	m.jobs[n+cbSuccess].id, m.jobs[n+cbComplete].id, m.jobs[n+cbDeath].id = f.w.OnSuccess, f.w.OnComplete, f.w.OnDeath
	return m
}

func (m *flowModel) logf(format string, args ...any) {
	m.log += fmt.Sprintf(format, args...) + "\n"
}

func final(s store.State) bool {
	return s == store.Completed || s == store.Dead || s == store.Canceled
}

// done reports whether nothing can happen any more but redrives.
func (m *flowModel) done() bool {
	for _, j := range m.jobs {
		if j.state == store.Pending || j.state == store.Running {
			return false
		}
	}
	for _, j := range m.jobs[:m.n] {
		if j.state == store.Dead && !j.gone && m.rng.IntN(2) == 0 {
			return false // a redrive may come
		}
	}
	return true
}

// blockedOn returns the members blocked waiting directly for member i
// (their edge from it not done).
func (m *flowModel) blockedOn(i int) []int {
	var out []int
	for k, d := range m.jobs[:m.n] {
		if d.state == store.Blocked && slices.Contains(d.deps, i) && !d.done[i] {
			out = append(out, k)
		}
	}
	return out
}

// deleted applies the consequences of dead job i's deletion (a purge or
// retention): its blocked dependents are canceled, as its cancel would,
// and so is the success callback, which can never fire any more.
func (m *flowModel) deleted(i int) {
	m.jobs[i].gone = true
	if !m.jobs[i].member {
		return
	}
	for _, k := range m.blockedOn(i) {
		if m.jobs[k].state == store.Blocked { // an earlier cancel of the cascade may have reached it
			m.jobs[k].state = store.Canceled
			m.moved(k, store.Blocked)
		}
	}
	if m.jobs[m.n+cbSuccess].state == store.Blocked {
		m.jobs[m.n+cbSuccess].state = store.Canceled
	}
}

// moved applies the consequences of member i's move from old to its
// state, as the contract says.
func (m *flowModel) moved(i int, old store.State) {
	j := m.jobs[i]
	st := j.state
	if !final(st) && !final(old) {
		return
	}
	if !final(st) {
		return // a redrive: its dependents wait for its completion
	}
	release := st == store.Completed || m.policy == store.RunOnDead
	cascade := !release && (st == store.Canceled || m.policy == store.CancelOnDead)
	for k, d := range m.jobs[:m.n] {
		if !slices.Contains(d.deps, i) {
			continue
		}
		if release {
			d.done[i] = true
			if d.state == store.Blocked && len(d.done) == len(d.deps) {
				d.state = store.Pending
			}
		} else if cascade && d.state == store.Blocked {
			d.state = store.Canceled
			m.moved(k, store.Blocked)
		}
	}
	if st == store.Canceled && m.jobs[m.n+cbSuccess].state == store.Blocked {
		m.jobs[m.n+cbSuccess].state = store.Canceled
	}
	var completed, finished int
	for _, d := range m.jobs[:m.n] {
		if d.state == store.Completed {
			completed++
		}
		if final(d.state) {
			finished++
		}
	}
	fire := func(cb int, cond bool) {
		if c := m.jobs[m.n+cb]; cond && c.state == store.Blocked {
			c.state = store.Pending
		}
	}
	fire(cbDeath, st == store.Dead)
	fire(cbComplete, finished == m.n)
	fire(cbSuccess, completed == m.n)
	if finished == m.n {
		m.closed = true
	}
}

// add adds 1 to 3 jobs, each depending on random members (in any state,
// deleted ones included) and on the jobs of the add before it, and
// checks the store's answer against the model's.
func (m *flowModel) add() {
	x := m.x
	k := 1 + m.rng.IntN(3)
	var nodes []store.WorkflowNode
	var deps [][]int // members, then len(members)+t for the add's job t
	for t := range k {
		var d []int
		for i := range m.n + t {
			if m.rng.IntN(4) == 0 {
				d = append(d, i)
			}
		}
		var after []string
		for _, i := range d {
			if i < m.n {
				after = append(after, m.jobs[i].name)
			} else {
				after = append(after, fmt.Sprint("a", m.added+i-m.n))
			}
		}
		name := fmt.Sprint("a", m.added+t)
		nodes = append(nodes, store.WorkflowNode{Name: name, After: after, Job: store.NewJob{Queue: m.queue, Kind: name, MaxRetries: -1}})
		deps = append(deps, d)
	}
	// What the model expects.
	var want error
	switch {
	case m.canceled || m.closed:
		want = store.ErrConflict
	default:
		for _, d := range deps {
			for _, i := range d {
				if i < m.n && m.jobs[i].gone && want == nil {
					want = store.ErrInvalid
				}
			}
		}
		if want != nil {
			break
		}
		for _, d := range deps {
			for _, i := range d {
				if _, refuse := store.AddEdgeDone(m.policy, m.jobs[i].state); i < m.n && refuse {
					want = store.ErrConflict
				}
			}
		}
	}
	w, err := x.s.AddToWorkflow(x.ctx, m.wid, nodes, m.now)
	m.logf("add %d jobs %v: %v", k, deps, err)
	if want != nil {
		if !errors.Is(err, want) {
			x.t.Errorf("add of %d jobs: error %v, the model says %v (closed %v, canceled %v)", k, err, want, m.closed, m.canceled)
		}
		if ce, ok := errors.AsType[*store.WorkflowConflictError](err); ok && (ce.Closed != "") != (m.closed || m.canceled) {
			x.t.Errorf("add of %d jobs: %v; the model has the workflow closed %v, canceled %v", k, err, m.closed, m.canceled)
		}
		return
	}
	if err != nil {
		x.t.Fatalf("add of %d jobs: %v; the model takes them", k, err)
	}
	ids := map[string]int64{}
	for _, j := range w.Jobs {
		ids[j.Name] = j.JobID
	}
	base := m.n
	var added []*mjob
	for t, n := range nodes {
		j := &mjob{id: ids[n.Name], name: n.Name, member: true, done: map[int]bool{}}
		for _, i := range deps[t] {
			// An added job's index, base+t, is its index once the added
			// jobs follow the members; an edge from one is never done.
			if done, _ := store.AddEdgeDone(m.policy, m.jobs[i].state); i < base && done {
				j.done[i] = true
			}
			j.deps = append(j.deps, i)
		}
		j.state = store.Pending
		if len(j.done) < len(j.deps) {
			j.state = store.Blocked
		}
		if j.id == 0 {
			x.t.Fatalf("added job %s is not in the workflow", n.Name)
		}
		added = append(added, j)
	}
	m.jobs = slices.Insert(m.jobs, m.n, added...)
	m.n += k
	m.added += k
	if w.Total != int64(m.n) {
		x.t.Errorf("after the add: total %d, the model has %d members", w.Total, m.n)
	}
}

func (m *flowModel) pick(pred func(*mjob) bool) (int, bool) {
	var idx []int
	for i, j := range m.jobs {
		if pred(j) {
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		return 0, false
	}
	return idx[m.rng.IntN(len(idx))], true
}

func (m *flowModel) step() {
	m.now = m.now.Add(time.Second)
	x := m.x
	worker := []string{"w1", "w2"}[m.rng.IntN(2)]
	switch r := m.rng.IntN(110); {
	case r >= 100:
		m.add()
	case r < 30: // fetch
		limit := 1 + m.rng.IntN(3)
		got := x.fetch(store.FetchParams{Queue: m.queue, Limit: limit, Now: m.now, LeaseUntil: m.now.Add(time.Hour), Worker: worker})
		m.logf("%s fetches %d: %d jobs", worker, limit, len(got))
		pending := 0
		for _, j := range m.jobs {
			if j.state == store.Pending {
				pending++
			}
		}
		if len(got) != min(limit, pending) {
			x.t.Errorf("fetch of %d leased %d jobs, the model has %d pending", limit, len(got), pending)
		}
		for _, g := range got {
			i := slices.IndexFunc(m.jobs, func(j *mjob) bool { return j.id == g.ID })
			if i < 0 || m.jobs[i].state != store.Pending {
				x.t.Errorf("fetch leased job %d, which the model has not pending", g.ID)
				continue
			}
			j := m.jobs[i]
			j.state, j.lease, j.worker, j.leased = store.Running, g.Lease, worker, g
			j.attempt++
			m.logf("  leased %s", j.name)
		}
	case r < 72: // an outcome of a running job
		if m.rng.IntN(3) == 0 && m.endMany() {
			return
		}
		i, ok := m.pick(func(j *mjob) bool { return j.state == store.Running })
		if !ok {
			return
		}
		j := m.jobs[i]
		var o store.Outcome
		var to store.State
		switch k := m.rng.IntN(10); {
		case k < 6:
			o, to = completeOf(j.leased, m.now), store.Completed
		case k < 8:
			o, to = buryNow(j.leased, m.now), store.Dead
		default:
			o = outcome(j.leased, store.Retry, m.now)
			o.RunAt, o.Error, to = m.now, "again", store.Pending
			if j.cancelReq {
				to = store.Canceled
			}
		}
		stale := o
		stale.Worker = map[string]string{"w1": "w2", "w2": "w1"}[j.worker]
		outs := []store.Outcome{o}
		if m.rng.IntN(3) == 0 {
			outs = append([]store.Outcome{stale}, outs...) // the other worker's, stale
		}
		if m.rng.IntN(3) == 0 {
			outs = append(outs, o) // a second of the lease, stale
		}
		applied := x.finishApplied(outs...)
		m.logf("%s ends %s: %s (%d outcomes)", j.worker, j.name, to, len(outs))
		for k, a := range applied {
			if want := outs[k].Worker == o.Worker && k == slices.IndexFunc(outs, func(p store.Outcome) bool { return p.Worker == o.Worker }); a != want {
				x.t.Errorf("outcome %d of %d for %s applied %v, want %v", k, len(outs), j.name, a, want)
			}
		}
		old := j.state
		j.state, j.cancelReq, j.worker = to, false, ""
		if to == store.Pending && !j.member {
			return
		}
		if j.member {
			m.moved(i, old)
		}
	case r < 82: // redrive a dead job
		i, ok := m.pick(func(j *mjob) bool { return j.state == store.Dead && !j.gone })
		if !ok {
			return
		}
		j := m.jobs[i]
		var want int64
		if j.member {
			want = int64(len(m.blockedOn(i)))
		}
		res := x.redrive(store.RedriveParams{IDs: []int64{j.id}, Now: m.now})
		m.logf("redrive %s: %+v", j.name, res)
		if res.Unblocks != want {
			x.t.Errorf("redrive of %s unblocks %d, the model says %d", j.name, res.Unblocks, want)
		}
		j.state, j.attempt = store.Pending, 0
		if j.member {
			m.moved(i, store.Dead)
		}
	case r < 87: // purge a dead job
		i, ok := m.pick(func(j *mjob) bool { return j.state == store.Dead && !j.gone })
		if !ok {
			return
		}
		n, err := x.s.Purge(x.ctx, store.Filter{IDs: []int64{m.jobs[i].id}}, 10)
		if err != nil || n != 1 {
			x.t.Fatalf("Purge(%s) = %d, %v; want 1", m.jobs[i].name, n, err)
		}
		m.logf("purge %s", m.jobs[i].name)
		m.deleted(i)
	case r < 90: // retention: every dead job goes
		n, err := x.s.DeleteFinished(x.ctx, store.Dead, m.now, 1000)
		if err != nil {
			x.t.Fatalf("DeleteFinished(dead): %v", err)
		}
		want := *m.others
		*m.others = 0
		for i, j := range m.jobs {
			if j.state == store.Dead && !j.gone {
				want++
				m.deleted(i)
			}
		}
		m.logf("retention of %d dead jobs", n)
		if n != want {
			x.t.Errorf("retention deleted %d dead jobs, the model has %d", n, want)
		}
	case r < 97: // cancel a job
		i, ok := m.pick(func(j *mjob) bool { return !final(j.state) || (j.state == store.Dead && !j.gone) })
		if !ok {
			return
		}
		j := m.jobs[i]
		x.cancel(j.id, m.now)
		m.logf("cancel %s (%s)", j.name, j.state)
		if j.state == store.Running {
			j.cancelReq = true
			return
		}
		old := j.state
		j.state = store.Canceled
		if j.member {
			m.moved(i, old)
		}
	default: // cancel the workflow
		if _, err := m.x.s.CancelWorkflow(x.ctx, m.wid, m.now); err != nil {
			x.t.Fatalf("CancelWorkflow: %v", err)
		}
		m.logf("cancel the workflow")
		m.canceled = true
		for k := len(m.jobs) - 1; k >= 0; k-- {
			j := m.jobs[k]
			if !j.member && j.state != store.Blocked {
				continue // a callback that fired runs
			}
			switch j.state {
			case store.Pending, store.Scheduled, store.Blocked:
				j.state = store.Canceled
				if j.member {
					m.moved(k, store.Blocked)
				}
			case store.Running:
				j.cancelReq = true
			}
		}
	}
}

// endMany ends every running job in one Finish call (two at least, else
// it does nothing and returns false), each with a random outcome
// (completion, death, a retry, or a cancel of the running job, and a
// retry canceled when its cancellation was requested), in a random
// order, with stale outcomes mixed in: a store may apply the call's
// workflow completions together (SQLite at the end of the Finish,
// migration 0039; PostgreSQL at the commit, 0038) while it applies the
// deaths and cancels one by one, meeting counts without the call's
// completions. The model applies the moves one after another, which
// ends in the same states whatever their order.
func (m *flowModel) endMany() bool {
	var running []int
	for i, j := range m.jobs {
		if j.state == store.Running {
			running = append(running, i)
		}
	}
	if len(running) < 2 {
		return false
	}
	type end struct {
		i  int
		to store.State
	}
	var ends []end
	var outs []store.Outcome
	var want []bool
	for _, i := range running {
		j := m.jobs[i]
		var o store.Outcome
		var to store.State
		switch k := m.rng.IntN(10); {
		case k < 5:
			o, to = completeOf(j.leased, m.now), store.Completed
		case k < 7:
			o, to = buryNow(j.leased, m.now), store.Dead
		case k < 8:
			o, to = outcome(j.leased, store.Cancel, m.now), store.Canceled
		default:
			o = outcome(j.leased, store.Retry, m.now)
			o.RunAt, o.Error, to = m.now, "again", store.Pending
			if j.cancelReq {
				to = store.Canceled
			}
		}
		if m.rng.IntN(4) == 0 {
			stale := o
			stale.Lease++
			outs, want = append(outs, stale), append(want, false)
		}
		outs, want = append(outs, o), append(want, true)
		ends = append(ends, end{i, to})
	}
	m.rng.Shuffle(len(outs), func(a, b int) { outs[a], outs[b] = outs[b], outs[a]; want[a], want[b] = want[b], want[a] })
	applied := m.x.finishApplied(outs...)
	for k := range outs {
		if applied[k] != want[k] {
			m.x.t.Errorf("Finish of %d outcomes: outcome %d (job %d, lease %d) applied %v, want %v", len(outs), k, outs[k].JobID, outs[k].Lease, applied[k], want[k])
		}
	}
	var names []string
	for _, e := range ends {
		j := m.jobs[e.i]
		names = append(names, fmt.Sprintf("%s %s", j.name, e.to))
		old := j.state
		j.state, j.cancelReq, j.worker = e.to, false, ""
		if j.member {
			m.moved(e.i, old)
		}
	}
	m.logf("one Finish of %d outcomes ends %v", len(outs), names)
	return true
}

func (m *flowModel) check(what string) {
	var counts [3]int64
	for _, j := range m.jobs[:m.n] {
		switch j.state {
		case store.Completed:
			counts[0]++
		case store.Dead:
			counts[1]++
		case store.Canceled:
			counts[2]++
		}
	}
	if w := m.x.getFlow(m.wid); [3]int64{w.Completed, w.Dead, w.Canceled} != counts {
		m.x.t.Errorf("%s: workflow counts completed, dead, canceled %d, %d, %d; the model says %v", what, w.Completed, w.Dead, w.Canceled, counts)
	}
	for i, j := range m.jobs {
		if j.gone {
			m.x.notFound(j.id)
			continue
		}
		got := m.x.get(j.id)
		var blocked int64
		if j.member && j.state == store.Dead {
			blocked = int64(len(m.blockedOn(i)))
		}
		if got.BlockedDependents != blocked {
			m.x.t.Errorf("%s: job %s (%s) has %d blocked dependents, the model says %d", what, j.name, got.State, got.BlockedDependents, blocked)
		}
		if got.State != j.state {
			m.x.t.Errorf("%s: job %s is %s, the model says %s", what, j.name, got.State, j.state)
		}
		if got.State == store.Running && got.CancelRequested != j.cancelReq {
			m.x.t.Errorf("%s: running job %s: cancel requested %v, the model says %v", what, j.name, got.CancelRequested, j.cancelReq)
		}
	}
}

// testWorkflowConcurrent: the dependencies of jobs complete in
// concurrent calls (four goroutines, one outcome a call, in shuffled
// orders), as workers of a fleet complete them: every fan-in job is
// released exactly once (pending, never left blocked), and each
// workflow's success callback fires once.
func testWorkflowConcurrent(x *h) {
	const q, flows, width, workers = "wf-conc", 8, 12, 4
	var ids []flow
	for range flows {
		w := store.NewWorkflow{OnSuccess: &store.NewJob{Queue: q + "-cb", Kind: "done", MaxRetries: -1}}
		var after []string
		for i := range width {
			name := fmt.Sprint("dep", i)
			after = append(after, name)
			w.Jobs = append(w.Jobs, store.WorkflowNode{Name: name, Job: store.NewJob{Queue: q, Kind: "dep", MaxRetries: -1}})
		}
		w.Jobs = append(w.Jobs, store.WorkflowNode{Name: "fanin", Job: store.NewJob{Queue: q + "-in", Kind: "fanin", MaxRetries: -1}, After: after})
		ids = append(ids, x.enqueueFlow(w, at(0)))
	}
	var leased [workers][]*store.Job
	for k := range workers {
		leased[k] = x.fetch(store.FetchParams{Queue: q, Limit: flows * width / workers, Now: at(time.Second), LeaseUntil: at(time.Hour),
			Worker: fmt.Sprint("w", k)})
		rand.Shuffle(len(leased[k]), func(i, j int) { leased[k][i], leased[k][j] = leased[k][j], leased[k][i] })
	}
	errs := make(chan error, workers)
	for k := range workers {
		go func() {
			for _, j := range leased[k] {
				applied, err := x.s.Finish(x.ctx, []store.Outcome{completeOf(j, at(2*time.Second))})
				if err == nil && !applied[0] {
					err = fmt.Errorf("completion of job %d not applied", j.ID)
				}
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range workers {
		if err := <-errs; err != nil {
			x.t.Fatalf("Finish: %v", err)
		}
	}
	in := x.fetch(store.FetchParams{Queue: q + "-in", Limit: 1000, Now: at(3 * time.Second), LeaseUntil: at(time.Hour), Worker: "w"})
	if len(in) != flows {
		x.t.Errorf("%d fan-in jobs released, want %d", len(in), flows)
	}
	for _, j := range in {
		x.finish(completeOf(j, at(4*time.Second)))
	}
	cbs := x.fetch(store.FetchParams{Queue: q + "-cb", Limit: 1000, Now: at(5 * time.Second), LeaseUntil: at(time.Hour), Worker: "w"})
	if len(cbs) != flows {
		x.t.Errorf("%d success callbacks fired, want %d", len(cbs), flows)
	}
	for _, f := range ids {
		if w := x.getFlow(f.w.ID); w.State != store.WorkflowSucceeded {
			x.t.Errorf("workflow %d is %s, want succeeded", w.ID, w.State)
		}
	}
	x.checkAllCounts("end")
}
