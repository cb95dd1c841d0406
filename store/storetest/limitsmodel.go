package storetest

import (
	"cmp"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/store"
)

// The limits model: an in-memory statement of the concurrency limit
// contract (store.Limits), which testLimitsModel drives a store against
// with random interleavings of enqueues, fetches by several workers,
// outcomes (fresh and replayed), heartbeats, lease expiry and rescue, and
// limit changes.

// lmJob is what the contract says of one job.
type lmJob struct {
	id         int64
	name, key  string // its limit and group ("" name: none)
	runAt      time.Time
	running    bool
	done       bool
	lease      int64
	worker     string
	leaseUntil time.Time
}

func (j *lmJob) group() string { return j.name + "/" + j.key }

type limitsModel struct {
	x     *h
	r     *rand.Rand
	now   time.Time
	jobs  map[int64]*lmJob
	max   map[string]int
	held  map[string][]*store.Job
	old   []store.Outcome
	queue string
	names [2]string // the limits "a" (per key) and "b" (whole)
	steps []string
}

var lmWorkers = []string{"w1", "w2", "w3"}

const lmLease = 20 * time.Second

// testLimitsModel: random interleavings checked step by step against the
// model: a fetch leases only due waiting jobs, never more running jobs in
// a group than its max (as it is at the fetch), the oldest due of each
// group, and leases something whenever a job can start; outcomes and
// heartbeats are fenced as the lease contract says; every limit's use
// (ListLimits) is the model's after each step; and at the end, once every
// lease has ended, no slot is left taken and every job completes.
func testLimitsModel(x *h) {
	// One fixed seed and one drawn per run (modelSeeds): four fixed seeds
	// cost 350 s of a loaded machine's SQLite run under -race, each run
	// repeating the same interleavings.
	for _, seed := range modelSeeds(x, 1) {
		m := &limitsModel{x: x, r: rand.New(rand.NewPCG(seed, 0x11a175)), now: at(time.Duration(seed) * time.Hour),
			jobs: map[int64]*lmJob{}, max: map[string]int{}, held: map[string][]*store.Job{},
			queue: fmt.Sprint("q", seed), names: [2]string{fmt.Sprint("a", seed), fmt.Sprint("b", seed)}}
		for range 400 {
			m.step()
			if x.t.Failed() {
				x.t.Fatalf("seed %d: failed after steps:\n%s", seed, strings.Join(m.steps, "\n"))
			}
		}
		m.drain()
		if x.t.Failed() {
			x.t.Fatalf("seed %d: failed while draining, after steps:\n%s", seed, strings.Join(m.steps, "\n"))
		}
	}
}

func (m *limitsModel) logf(format string, args ...any) {
	m.steps = append(m.steps, fmt.Sprintf("%s: ", m.now.Sub(base))+fmt.Sprintf(format, args...))
}

func (m *limitsModel) step() {
	m.now = m.now.Add(time.Duration(m.r.IntN(3)) * time.Second)
	switch n := m.r.IntN(100); {
	case n < 18:
		m.enqueue()
	case n < 45:
		m.fetch(lmWorkers[m.r.IntN(len(lmWorkers))], 1+m.r.IntN(5))
	case n < 68:
		m.finishOne()
	case n < 74:
		m.replay()
	case n < 82:
		m.heartbeat(lmWorkers[m.r.IntN(len(lmWorkers))])
	case n < 90:
		m.rescue()
	case n < 95:
		m.setLimit()
	default:
		m.now = m.now.Add(time.Duration(10+m.r.IntN(30)) * time.Second)
		m.logf("time passes")
	}
	m.check()
}

func (m *limitsModel) enqueue() {
	var nj []store.NewJob
	for range 1 + m.r.IntN(3) {
		j := store.NewJob{Queue: m.queue, Kind: "k", RunAt: m.now.Add(time.Duration(m.r.IntN(3)) * time.Second)}
		switch m.r.IntN(4) {
		case 0: // no limit
		case 1, 2:
			j.Limit, j.LimitKey, j.LimitMax = m.names[0], fmt.Sprint("k", m.r.IntN(3)), 1+m.r.IntN(3)
		default:
			j.Limit, j.LimitMax = m.names[1], 1+m.r.IntN(2)
		}
		nj = append(nj, j)
	}
	got := m.x.enqueue(m.now, nj...)
	for i, j := range got {
		m.jobs[j.ID] = &lmJob{id: j.ID, name: nj[i].Limit, key: nj[i].LimitKey, runAt: nj[i].RunAt}
		if nj[i].Limit != "" {
			if _, ok := m.max[nj[i].Limit]; !ok {
				m.max[nj[i].Limit] = nj[i].LimitMax
			}
		}
		m.logf("enqueue job %d limit %q key %q max %d due %s", j.ID, nj[i].Limit, nj[i].LimitKey, nj[i].LimitMax, nj[i].RunAt.Sub(base))
	}
}

// due returns the model's due waiting jobs, oldest first.
func (m *limitsModel) due() []*lmJob {
	var out []*lmJob
	for _, j := range m.jobs {
		if !j.running && !j.done && !j.runAt.After(m.now) {
			out = append(out, j)
		}
	}
	slices.SortFunc(out, func(a, b *lmJob) int {
		if c := a.runAt.Compare(b.runAt); c != 0 {
			return c
		}
		return cmp.Compare(a.id, b.id)
	})
	return out
}

// runningIn counts the model's running jobs per group.
func (m *limitsModel) runningIn() map[string]int {
	out := map[string]int{}
	for _, j := range m.jobs {
		if j.running && j.name != "" {
			out[j.group()]++
		}
	}
	return out
}

func (m *limitsModel) fetch(worker string, limit int) {
	due := m.due()
	running := m.runningIn()
	got := m.x.fetch(store.FetchParams{Queue: m.queue, Limit: limit, Now: m.now, LeaseUntil: m.now.Add(lmLease), Worker: worker})
	m.logf("fetch %s limit %d: %v", worker, limit, jobIDs(got))
	if len(got) > limit {
		m.x.t.Errorf("Fetch limit %d leased %d jobs", limit, len(got))
	}
	taken := map[int64]bool{}
	for _, j := range got {
		mj := m.jobs[j.ID]
		if mj == nil || mj.running || mj.done || mj.runAt.After(m.now) {
			m.x.t.Errorf("Fetch leased job %d, which is not due and waiting", j.ID)
			continue
		}
		taken[j.ID] = true
	}
	// Per group: never above the max; the oldest due first.
	startable := false
	for _, grp := range groupsOf(due) {
		n := 0
		for _, j := range grp {
			if taken[j.id] {
				n++
			}
		}
		first := grp[0]
		free := 1 << 30
		if first.name != "" {
			free = m.max[first.name] - running[first.group()]
			if n > 0 && running[first.group()]+n > m.max[first.name] {
				m.x.t.Errorf("Fetch leased %d jobs of group %s, which ran %d of max %d", n, first.group(), running[first.group()], m.max[first.name])
			}
		}
		if free > 0 {
			startable = true
		}
		for i, j := range grp {
			if taken[j.id] != (i < n) {
				m.x.t.Errorf("Fetch leased jobs of group %s out of due order: %v of %v", first.group(), jobIDs(got), lmIDs(grp))
				break
			}
		}
	}
	if len(got) == 0 && startable {
		m.x.t.Errorf("Fetch leased nothing while a due job could start")
	}
	for _, j := range got {
		mj := m.jobs[j.ID]
		if mj == nil {
			continue
		}
		mj.running, mj.lease, mj.worker, mj.leaseUntil = true, j.Lease, worker, m.now.Add(lmLease)
		m.held[worker] = append(m.held[worker], j)
	}
}

// groupsOf splits due jobs by group (unlimited jobs are one group), each
// in due order.
func groupsOf(due []*lmJob) [][]*lmJob {
	idx := map[string]int{}
	var out [][]*lmJob
	for _, j := range due {
		g := j.group()
		i, ok := idx[g]
		if !ok {
			i = len(out)
			idx[g] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], j)
	}
	return out
}

func lmIDs(js []*lmJob) []int64 {
	var out []int64
	for _, j := range js {
		out = append(out, j.id)
	}
	return out
}

// holds reports whether the model's job runs o's lease for o's worker
// (and, for a rescue, that lease ended before o.ExpiredBy).
func (m *limitsModel) holds(o store.Outcome) bool {
	j := m.jobs[o.JobID]
	return j != nil && j.running && j.lease == o.Lease && j.worker == o.Worker &&
		(o.ExpiredBy.IsZero() || j.leaseUntil.Before(o.ExpiredBy))
}

// apply sends o and checks it applied exactly when the model says.
func (m *limitsModel) apply(o store.Outcome) {
	want := m.holds(o)
	got := m.x.finishApplied(o)[0]
	m.logf("outcome %d of job %d lease %d by %s (rescue %v): applied %v", o.Kind, o.JobID, o.Lease, o.Worker, !o.ExpiredBy.IsZero(), got)
	if got != want {
		m.x.t.Errorf("outcome %d of job %d lease %d by %s applied = %v, want %v", o.Kind, o.JobID, o.Lease, o.Worker, got, want)
	}
	m.old = append(m.old, o)
	if !want {
		return
	}
	j := m.jobs[o.JobID]
	j.running, j.worker = false, ""
	switch o.Kind {
	case store.Retry, store.Snooze:
		j.runAt = o.RunAt
	default:
		j.done = true
	}
}

func (m *limitsModel) finishOne() {
	w := lmWorkers[m.r.IntN(len(lmWorkers))]
	held := m.held[w]
	if len(held) == 0 {
		return
	}
	i := m.r.IntN(len(held))
	j := held[i]
	m.held[w] = slices.Delete(held, i, i+1)
	var o store.Outcome
	switch m.r.IntN(4) {
	case 0:
		o = retryOf(j, m.now, m.now.Add(time.Duration(m.r.IntN(3))*time.Second), failure.Transient, "boom")
	case 1:
		o = outcome(j, store.Snooze, m.now)
		o.RunAt = m.now.Add(time.Duration(m.r.IntN(3)) * time.Second)
	default:
		o = completeOf(j, m.now)
	}
	m.apply(o)
}

func (m *limitsModel) replay() {
	if len(m.old) == 0 {
		return
	}
	m.apply(m.old[m.r.IntN(len(m.old))])
}

func (m *limitsModel) heartbeat(w string) {
	held := m.held[w]
	if len(held) == 0 {
		return
	}
	until := m.now.Add(lmLease)
	res := m.x.heartbeatLeases(w, leasesOf(held...), until)
	lost := map[store.Lease]bool{}
	for _, l := range res.Lost {
		lost[l] = true
	}
	var keep []*store.Job
	for _, j := range held {
		mj := m.jobs[j.ID]
		holds := mj.running && mj.lease == j.Lease && mj.worker == w
		if holds == lost[store.LeaseOf(j)] {
			m.x.t.Errorf("heartbeat of job %d lease %d by %s: lost %v, want %v", j.ID, j.Lease, w, !holds, holds)
		}
		if holds {
			mj.leaseUntil = until
			keep = append(keep, j)
		}
	}
	m.held[w] = keep
	m.logf("heartbeat %s: lost %v", w, res.Lost)
}

// rescue reads the expired leases and rescues some of them, at once or
// after other steps (an old rescue, replayed, meets a renewed lease).
func (m *limitsModel) rescue() {
	exp := m.x.expired(m.now, 100)
	var want []int64
	for _, j := range m.jobs {
		if j.running && j.leaseUntil.Before(m.now) {
			want = append(want, j.id)
		}
	}
	m.x.checkIDSet("Expired", jobIDs(exp), want)
	m.logf("expired: %v", jobIDs(exp))
	for _, j := range exp {
		o := rescueOf(j, m.now)
		if m.r.IntN(3) == 0 {
			m.old = append(m.old, o) // replayed later, maybe
			continue
		}
		m.apply(o)
	}
}

func (m *limitsModel) setLimit() {
	name := m.names[m.r.IntN(2)]
	max := 1 + m.r.IntN(3)
	st, err := m.x.s.SetLimit(m.x.ctx, name, max, m.now)
	if err != nil {
		m.x.t.Fatalf("SetLimit(%q, %d): %v", name, max, err)
	}
	m.max[name] = max
	m.logf("set limit %s to %d", name, max)
	if st.Max != max {
		m.x.t.Errorf("SetLimit(%q, %d) = %+v", name, max, st)
	}
}

// check compares every limit's state with the model's.
func (m *limitsModel) check() {
	var ls []store.LimitState
	for _, l := range m.x.limitStates(m.now) {
		if slices.Contains(m.names[:], l.Name) {
			ls = append(ls, l)
		}
	}
	want := map[string]*store.LimitState{}
	for name, max := range m.max {
		want[name] = &store.LimitState{Name: name, Max: max}
	}
	for g, n := range m.runningIn() {
		name, _, _ := strings.Cut(g, "/")
		l := want[name]
		l.InUse += int64(n)
		l.Groups++
		l.Busiest = max(l.Busiest, int64(n))
	}
	for _, j := range m.due() {
		if j.name != "" {
			want[j.name].Waiting++
		}
	}
	if len(ls) != len(want) {
		m.x.t.Errorf("ListLimits = %+v, want %d limits", ls, len(want))
	}
	for _, l := range ls {
		w := want[l.Name]
		if w == nil {
			m.x.t.Errorf("ListLimits has %q, not in the model", l.Name)
			continue
		}
		if l.Max != w.Max || l.InUse != w.InUse || l.Busiest != w.Busiest || l.Groups != w.Groups || l.Waiting != w.Waiting {
			m.x.t.Errorf("limit %s = max %d in use %d busiest %d groups %d waiting %d, want %d %d %d %d %d",
				l.Name, l.Max, l.InUse, l.Busiest, l.Groups, l.Waiting, w.Max, w.InUse, w.Busiest, w.Groups, w.Waiting)
		}
	}
}

// drain lets every lease expire and be rescued, then completes every job:
// no slot is left taken, and no job is left behind.
func (m *limitsModel) drain() {
	m.now = m.now.Add(time.Hour)
	m.rescueAll()
	for range 10_000 {
		m.held["w1"] = nil
		m.fetch("w1", 5)
		got := m.held["w1"]
		m.held["w1"] = nil
		for _, j := range got {
			m.apply(completeOf(j, m.now))
		}
		m.check()
		if m.x.t.Failed() {
			return
		}
		if len(got) == 0 {
			if !slices.ContainsFunc(slices.Collect(maps.Values(m.jobs)), func(j *lmJob) bool { return !j.done }) {
				break
			}
			m.now = m.now.Add(10 * time.Second)
		}
	}
	for _, j := range m.jobs {
		if !j.done {
			m.x.t.Errorf("job %d (limit %q key %q) not done after the drain", j.id, j.name, j.key)
		}
	}
	for _, l := range m.x.limitStates(m.now) {
		if slices.Contains(m.names[:], l.Name) && (l.InUse != 0 || l.Waiting != 0) {
			m.x.t.Errorf("limit %+v after the drain: want nothing in use or waiting", l)
		}
	}
}

func (m *limitsModel) rescueAll() {
	for _, j := range m.x.expired(m.now, 1000) {
		m.apply(rescueOf(j, m.now))
	}
	m.held = map[string][]*store.Job{}
}

// limitStates returns every limit's state.
func (x *h) limitStates(now time.Time) []store.LimitState {
	x.t.Helper()
	ls, err := x.s.ListLimits(x.ctx, now)
	if err != nil {
		x.t.Fatalf("ListLimits: %v", err)
	}
	return ls
}
