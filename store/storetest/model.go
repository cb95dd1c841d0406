package storetest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/store"
)

// The lease model: an in-memory statement of the fencing contract, which
// testLeaseModel drives a store against with random interleavings of the
// operations of workers, a rescuer and users.

// modelJob is what the contract says of one job.
type modelJob struct {
	id         int64
	state      store.State
	runAt      time.Time
	attempt    int
	lease      int64 // the token of its latest lease (0: never leased)
	worker     string
	leaseUntil time.Time
	cancel     bool
	progress   *store.JobProgress
}

// leaseModel is the model's state: the jobs, the leases each worker
// believes it holds, and every outcome ever sent or decided (to replay).
type leaseModel struct {
	x     *h
	queue string
	r     *rand.Rand
	seed  uint64
	now   time.Time
	jobs  map[int64]*modelJob
	order []int64
	held  map[string][]store.Lease
	sent  []store.Outcome
	steps []string // the operations so far, for a failure's report
	mixed bool     // finish also sends mixed batches (testLeaseModelMixed)
}

var modelWorkers = []string{"w1", "w2"}

// modelLease is how long the model's fetches and heartbeats lease a job.
const modelLease = 30 * time.Second

// testLeaseModel: random interleavings of lease, heartbeat, rescue (read
// then applied, at once or later), snooze, release, retry, bury, cancel by
// a user, completion, progress, and replays of old outcomes, checked step
// by step against the model: which outcomes apply, what heartbeats renew,
// report canceled and lost, what Expired and Fetch return, and every job
// and count after each step. Fixed seeds keep it reproducible.
func testLeaseModel(x *h) {
	for _, seed := range []uint64{1, 2, 3} {
		m := &leaseModel{x: x, queue: fmt.Sprintf("mq%d", seed), seed: seed, r: rand.New(rand.NewPCG(seed, 0x1ea5e)), now: at(time.Duration(seed) * time.Hour),
			jobs: map[int64]*modelJob{}, held: map[string][]store.Lease{}}
		for range 300 {
			m.step()
			if x.t.Failed() {
				x.t.Fatalf("seed %d: failed after steps:\n%s", seed, strings.Join(m.steps, "\n"))
			}
		}
	}
}

func (m *leaseModel) logf(format string, args ...any) {
	m.steps = append(m.steps, fmt.Sprintf("%s: ", m.now.Sub(base))+fmt.Sprintf(format, args...))
}

// step runs one random operation and checks the store against the model.
func (m *leaseModel) step() {
	m.now = m.now.Add(time.Duration(m.r.IntN(12)) * time.Second)
	switch n := m.r.IntN(100); {
	case n < 10 || len(m.jobs) < 3:
		m.enqueue()
	case n < 30:
		m.fetch(modelWorkers[m.r.IntN(2)])
	case n < 40:
		m.heartbeat(modelWorkers[m.r.IntN(2)])
	case n < 50:
		m.rescue()
	case n < 72:
		m.finish()
	case n < 82 && m.mixed && n%2 == 0:
		m.mixedFinish()
	case n < 82:
		m.replay()
	case n < 88:
		m.cancel()
	case n < 94:
		m.progress(modelWorkers[m.r.IntN(2)])
	default:
		m.cancelRequested(modelWorkers[m.r.IntN(2)])
	}
	m.check()
}

func (m *leaseModel) enqueue() {
	runAt := m.now
	if m.r.IntN(3) == 0 {
		runAt = m.now.Add(time.Duration(1+m.r.IntN(20)) * time.Second)
	}
	j := m.x.enqueue(m.now, store.NewJob{Queue: m.queue, Kind: "k", RunAt: runAt, MaxRetries: -1})[0]
	m.logf("enqueue job %d due at %s", j.ID, runAt.Sub(base))
	m.jobs[j.ID] = &modelJob{id: j.ID, state: dueState(runAt, m.now), runAt: runAt}
	m.order = append(m.order, j.ID)
}

func dueState(runAt, now time.Time) store.State {
	if runAt.After(now) {
		return store.Scheduled
	}
	return store.Pending
}

func (m *leaseModel) fetch(worker string) {
	limit := 1 + m.r.IntN(3)
	var due []*modelJob
	for _, id := range m.order {
		if j := m.jobs[id]; (j.state == store.Pending || j.state == store.Scheduled) && !j.runAt.After(m.now) {
			due = append(due, j)
		}
	}
	sort.SliceStable(due, func(a, b int) bool {
		if !due[a].runAt.Equal(due[b].runAt) {
			return due[a].runAt.Before(due[b].runAt)
		}
		return due[a].id < due[b].id
	})
	due = due[:min(limit, len(due))]
	got := m.x.fetch(store.FetchParams{Queue: m.queue, Limit: limit, Now: m.now, LeaseUntil: m.now.Add(modelLease), Worker: worker})
	m.logf("fetch by %s, limit %d: %v", worker, limit, jobIDs(got))
	if !slices.Equal(sortedIDs(got), sorted(idsOf(due))) {
		m.x.t.Errorf("Fetch by %s leased %v, want %v", worker, sortedIDs(got), sorted(idsOf(due)))
		return
	}
	for _, g := range got {
		j := m.jobs[g.ID]
		if g.Attempt != j.attempt+1 || g.Lease <= j.lease || g.Worker != worker || g.State != store.Running {
			m.x.t.Errorf("Fetch by %s: job %d %s with attempt %d, lease %d, worker %q; want running, attempt %d, a lease after %d, %s",
				worker, g.ID, g.State, g.Attempt, g.Lease, g.Worker, j.attempt+1, j.lease, worker)
		}
		j.state, j.attempt, j.lease, j.worker, j.leaseUntil, j.progress = store.Running, g.Attempt, g.Lease, worker, m.now.Add(modelLease), nil
		m.held[worker] = append(m.held[worker], store.LeaseOf(g))
	}
}

func idsOf(js []*modelJob) []int64 {
	out := make([]int64, len(js))
	for i, j := range js {
		out[i] = j.id
	}
	return out
}

// holds reports whether the store must take the lease as worker's: the
// job runs that lease for worker.
func (m *leaseModel) holds(l store.Lease, worker string) bool {
	j := m.jobs[l.JobID]
	return j != nil && j.state == store.Running && j.lease == l.Token && j.worker == worker
}

// pick returns a random subset of ls (each kept with probability 2/3).
func (m *leaseModel) pick(ls []store.Lease) []store.Lease {
	var out []store.Lease
	for _, l := range ls {
		if m.r.IntN(3) > 0 {
			out = append(out, l)
		}
	}
	return out
}

func (m *leaseModel) heartbeat(worker string) {
	leases := m.pick(m.held[worker])
	until := m.now.Add(modelLease)
	var want store.HeartbeatResult
	for _, l := range leases {
		if !m.holds(l, worker) {
			want.Lost = append(want.Lost, l)
		} else if m.jobs[l.JobID].cancel {
			want.Canceled = append(want.Canceled, l)
		}
	}
	slices.SortFunc(want.Canceled, compareLeases)
	slices.SortFunc(want.Lost, compareLeases)
	want.Lost = slices.Compact(want.Lost)
	want.Canceled = slices.Compact(want.Canceled)
	res := m.x.heartbeatLeases(worker, leases, until)
	m.logf("heartbeat by %s of %v: %+v", worker, leases, res)
	if !slices.Equal(res.Canceled, want.Canceled) || !slices.Equal(res.Lost, want.Lost) {
		m.x.t.Errorf("Heartbeat by %s of %v = %+v, want %+v", worker, leases, res, want)
	}
	for _, l := range leases {
		if m.holds(l, worker) {
			m.jobs[l.JobID].leaseUntil = until
		}
	}
	// The worker stops the handlers of the leases lost.
	m.held[worker] = slices.DeleteFunc(m.held[worker], func(l store.Lease) bool { return slices.Contains(want.Lost, l) })
}

func (m *leaseModel) cancelRequested(worker string) {
	cc, ok := m.x.s.(store.CancelChecker)
	if !ok {
		return
	}
	leases := m.pick(m.held[worker])
	var want []store.Lease
	for _, l := range leases {
		if m.holds(l, worker) && m.jobs[l.JobID].cancel {
			want = append(want, l)
		}
	}
	slices.SortFunc(want, compareLeases)
	want = slices.Compact(want)
	got, err := cc.CancelRequested(m.x.ctx, worker, leases)
	if err != nil {
		m.x.t.Fatalf("CancelRequested: %v", err)
	}
	m.logf("cancel requested of %s's %v: %v", worker, leases, got)
	if !slices.Equal(got, want) {
		m.x.t.Errorf("CancelRequested(%s, %v) = %v, want %v", worker, leases, got, want)
	}
}

func (m *leaseModel) rescue() {
	var got []*store.Job
	for _, j := range m.x.expired(m.now, 1000) {
		if j.Queue == m.queue {
			got = append(got, j)
		}
	}
	var want []int64
	for _, id := range m.order {
		if j := m.jobs[id]; j.state == store.Running && j.leaseUntil.Before(m.now) {
			want = append(want, id)
		}
	}
	m.logf("expired at %s: %v", m.now.Sub(base), jobIDs(got))
	if !slices.Equal(sortedIDs(got), want) {
		m.x.t.Errorf("Expired(%s) = %v, want %v", m.now.Sub(base), sortedIDs(got), want)
		return
	}
	for _, j := range got {
		mj := m.jobs[j.ID]
		if j.Lease != mj.lease || j.Worker != mj.worker || j.LeaseUntil == nil || !sameTime(*j.LeaseUntil, mj.leaseUntil) {
			m.x.t.Errorf("Expired: job %d with lease %d, worker %q, until %s; want %d, %q, %s", j.ID, j.Lease, j.Worker,
				fmtTimePtr(j.LeaseUntil), mj.lease, mj.worker, fmtTime(mj.leaseUntil))
		}
		o := rescueOf(j, m.now)
		o.Event = &store.Event{Kind: store.EventRetry, Attempt: j.Attempt, At: m.now, Reason: "lease_expired"}
		if m.r.IntN(2) == 0 {
			m.apply(o) // now
		} else {
			m.sent = append(m.sent, o) // later, perhaps after a heartbeat or another lease
		}
	}
}

// finish sends an outcome of a lease a worker holds (or held), or a
// batch of outcomes of distinct jobs.
func (m *leaseModel) finish() {
	worker := modelWorkers[m.r.IntN(2)]
	held := m.held[worker]
	if len(held) == 0 {
		return
	}
	var outs []store.Outcome
	seen := map[int64]bool{}
	for range 1 + m.r.IntN(min(3, len(held))) {
		k := m.r.IntN(len(held))
		l := held[k]
		if seen[l.JobID] {
			continue
		}
		seen[l.JobID] = true
		outs = append(outs, m.outcomeOf(l, worker))
		held = slices.Delete(held, k, k+1)
	}
	m.held[worker] = held
	m.apply(outs...)
}

// outcomeOf is a random outcome of lease l of worker.
func (m *leaseModel) outcomeOf(l store.Lease, worker string) store.Outcome {
	attempt := m.jobs[l.JobID].attempt
	o := store.Outcome{JobID: l.JobID, Queue: m.queue, Attempt: attempt, Lease: l.Token, Worker: worker, At: m.now}
	switch m.r.IntN(6) {
	case 0:
		o.Kind = store.Complete
		if m.r.IntN(2) == 0 {
			o.Event = &store.Event{Kind: store.EventCompleted, Attempt: attempt, At: m.now, Note: "done"}
		}
	case 1:
		o.Kind, o.RunAt, o.Class, o.Error = store.Retry, m.now.Add(time.Duration(m.r.IntN(10))*time.Second), failure.Transient, "503"
		o.Event = &store.Event{Kind: store.EventRetry, Attempt: attempt, At: m.now, Error: "503"}
		o.Counters = []store.Counter{{Queue: m.queue, Name: store.StatRetried, N: 1}}
	case 2:
		o.Kind, o.Class, o.Error, o.DeadReason, o.Fingerprint = store.Bury, failure.Permanent, "404", "http_404", "fp"
	case 3:
		o.Kind, o.RunAt = store.Snooze, m.now.Add(time.Duration(m.r.IntN(10))*time.Second)
		o.Event = &store.Event{Kind: store.EventSnoozed, Attempt: attempt, At: m.now}
	case 4:
		o.Kind = store.Release
	default:
		o.Kind = store.Cancel
	}
	return o
}

func (m *leaseModel) replay() {
	if len(m.sent) == 0 {
		return
	}
	// Mostly a recent outcome: a rescue read before a heartbeat or a
	// snooze, an outcome sent again after an error.
	k := m.r.IntN(len(m.sent))
	if m.r.IntN(3) > 0 {
		k = len(m.sent) - 1 - m.r.IntN(min(6, len(m.sent)))
	}
	o := m.sent[k]
	o.At = m.now
	if o.Kind == store.Retry || o.Kind == store.Snooze {
		o.RunAt = m.now
	}
	m.apply(o)
}

// apply sends outcomes (of distinct jobs) in one call and checks which
// applied against the model.
func (m *leaseModel) apply(outs ...store.Outcome) {
	want := make([]bool, len(outs))
	for i := range outs {
		want[i] = m.applies(&outs[i])
	}
	got := m.x.finishApplied(outs...)
	var desc []string
	for i, o := range outs {
		desc = append(desc, fmt.Sprintf("job %d lease %d %s kind %d expiredBy %s: %v", o.JobID, o.Lease, o.Worker, o.Kind,
			fmtTime(o.ExpiredBy), got[i]))
	}
	m.logf("finish %s", strings.Join(desc, "; "))
	if !slices.Equal(got, want) {
		m.x.t.Errorf("Finish applied %v, want %v", got, want)
		return
	}
	for i := range outs {
		if want[i] {
			m.effect(&outs[i])
		}
		m.sent = append(m.sent, outs[i])
	}
}

// applies reports whether the contract applies o now.
func (m *leaseModel) applies(o *store.Outcome) bool {
	j := m.jobs[o.JobID]
	return m.holds(store.Lease{JobID: o.JobID, Token: o.Lease}, o.Worker) && (o.ExpiredBy.IsZero() || j.leaseUntil.Before(o.ExpiredBy))
}

// effect changes the model as the applied outcome o does.
func (m *leaseModel) effect(o *store.Outcome) {
	j := m.jobs[o.JobID]
	canceled := j.cancel && o.EndsIfCanceled()
	j.worker, j.cancel = "", false
	switch {
	case canceled || o.Kind == store.Cancel:
		j.state, j.progress = store.Canceled, nil
	case o.Kind == store.Complete:
		j.state = store.Completed
		if o.Progress != nil {
			j.progress = o.Progress
		}
	case o.Kind == store.Bury:
		j.state, j.progress = store.Dead, nil
	case o.Kind == store.Retry:
		j.state, j.runAt, j.progress = dueState(o.RunAt, o.At), o.RunAt, nil
	case o.Kind == store.Snooze:
		j.state, j.runAt, j.attempt, j.progress = dueState(o.RunAt, o.At), o.RunAt, j.attempt-1, nil
	case o.Kind == store.Release:
		// Due again at once; a store may keep the run_at it had (not
		// after now): check reads it back.
		j.state, j.runAt, j.attempt, j.progress = store.Pending, time.Time{}, j.attempt-1, nil
	}
}

func (m *leaseModel) cancel() {
	id := m.order[m.r.IntN(len(m.order))]
	j := m.jobs[id]
	got, err := m.x.s.Cancel(m.x.ctx, id, m.now)
	m.logf("cancel job %d (%s): %v", id, j.state, err)
	switch j.state {
	case store.Completed, store.Canceled:
		if !errors.Is(err, store.ErrConflict) {
			m.x.t.Errorf("Cancel of a %s job = %v, want ErrConflict", j.state, err)
		}
		return
	}
	if err != nil {
		m.x.t.Fatalf("Cancel(%d): %v", id, err)
	}
	if j.state == store.Running {
		j.cancel = true
	} else {
		j.state = store.Canceled
	}
	if got.State != j.state || got.CancelRequested != j.cancel {
		m.x.t.Errorf("Cancel(%d) = %s, cancel requested %v; want %s, %v", id, got.State, got.CancelRequested, j.state, j.cancel)
	}
}

func (m *leaseModel) progress(worker string) {
	leases := m.pick(m.held[worker])
	if len(leases) == 0 {
		return
	}
	var updates []store.ProgressUpdate
	for _, l := range leases {
		p := store.JobProgress{Done: int64(m.r.IntN(100)), Total: 100, At: m.now}
		updates = append(updates, store.ProgressUpdate{JobID: l.JobID, Lease: l.Token, JobProgress: p})
		if m.holds(l, worker) {
			m.jobs[l.JobID].progress = &p
		}
	}
	m.logf("progress by %s of %v", worker, leases)
	m.x.progress(worker, updates...)
}

// check compares every job, and the job counts, with the model.
func (m *leaseModel) check() {
	got := m.x.listAll(store.Filter{Queue: m.queue}, 100)
	if len(got) != len(m.jobs) {
		m.x.t.Errorf("List: %d jobs, want %d", len(got), len(m.jobs))
	}
	counts := map[store.State]int64{}
	for _, g := range got {
		j := m.jobs[g.ID]
		if j == nil {
			m.x.t.Errorf("List: job %d, unknown", g.ID)
			continue
		}
		counts[j.state]++
		if j.state == store.Pending && j.runAt.IsZero() {
			// Released: due again, at or before now.
			if g.RunAt.After(m.now) {
				m.x.t.Errorf("released job %d due at %s, after now %s", g.ID, fmtTime(g.RunAt), fmtTime(m.now))
			}
			j.runAt = g.RunAt
		}
		var problems []string
		if g.State != j.state {
			problems = append(problems, fmt.Sprintf("state %s, want %s", g.State, j.state))
		}
		if g.Attempt != j.attempt || g.Lease != j.lease || g.Worker != j.worker || g.CancelRequested != j.cancel {
			problems = append(problems, fmt.Sprintf("attempt %d, lease %d, worker %q, cancel %v; want %d, %d, %q, %v",
				g.Attempt, g.Lease, g.Worker, g.CancelRequested, j.attempt, j.lease, j.worker, j.cancel))
		}
		if j.state == store.Running && (g.LeaseUntil == nil || !sameTime(*g.LeaseUntil, j.leaseUntil)) {
			problems = append(problems, fmt.Sprintf("lease until %s, want %s", fmtTimePtr(g.LeaseUntil), fmtTime(j.leaseUntil)))
		}
		if j.state != store.Running && g.LeaseUntil != nil {
			problems = append(problems, fmt.Sprintf("lease until %s, want none", fmtTimePtr(g.LeaseUntil)))
		}
		if (j.state == store.Pending || j.state == store.Scheduled) && !sameTime(g.RunAt, j.runAt) {
			problems = append(problems, fmt.Sprintf("run at %s, want %s", fmtTime(g.RunAt), fmtTime(j.runAt)))
		}
		if fmtProgress(g.Progress) != fmtProgress(j.progress) {
			problems = append(problems, fmt.Sprintf("progress %s, want %s", fmtProgress(g.Progress), fmtProgress(j.progress)))
		}
		if len(problems) > 0 {
			m.x.t.Errorf("job %d: %s", g.ID, strings.Join(problems, "; "))
		}
	}
	st := m.x.stats().Jobs[m.queue]
	for _, s := range store.States {
		if st[s] != counts[s] {
			m.x.t.Errorf("Stats: %d %s jobs, want %d", st[s], s, counts[s])
		}
	}
}

// testLeaseModelMixed is testLeaseModel with Finish calls that mix, in
// random order, outcomes of several leases of the same jobs: fresh ones,
// replays of stale ones, rescues of expired and of renewed leases, a
// rescue and a worker's outcome of the same lease, the same outcome
// twice. The outcomes of a call apply as if sent one by one in their
// order: each applies if its lease is still held (and, for a rescue,
// still expired) once the earlier ones of the call took effect, so a
// stale outcome never hides a fresh one of the same lease.
func testLeaseModelMixed(x *h) {
	for _, seed := range []uint64{11, 12, 13} {
		m := &leaseModel{x: x, queue: fmt.Sprintf("mx%d", seed), seed: seed, r: rand.New(rand.NewPCG(seed, 0x1ea5e)), now: at(time.Duration(seed) * time.Hour),
			jobs: map[int64]*modelJob{}, held: map[string][]store.Lease{}, mixed: true}
		for range 300 {
			m.step()
			if x.t.Failed() {
				x.t.Fatalf("seed %d: failed after steps:\n%s", seed, strings.Join(m.steps, "\n"))
			}
		}
	}
}

// mixedFinish sends one Finish call of 2 to 6 outcomes drawn from the
// leases the workers hold, the outcomes sent before, and rescues of the
// running jobs (expired or not), and checks it against the model applied
// in order.
func (m *leaseModel) mixedFinish() {
	var outs []store.Outcome
	for range 2 + m.r.IntN(5) {
		switch k := m.r.IntN(4); {
		case k == 0 && len(m.sent) > 0:
			o := m.sent[len(m.sent)-1-m.r.IntN(min(8, len(m.sent)))]
			o.At = m.now
			if o.Kind == store.Retry || o.Kind == store.Snooze {
				o.RunAt = m.now
			}
			outs = append(outs, o)
		case k == 1:
			var running []int64
			for _, id := range m.order {
				if m.jobs[id].state == store.Running {
					running = append(running, id)
				}
			}
			if len(running) == 0 {
				continue
			}
			j := m.x.get(running[m.r.IntN(len(running))])
			o := rescueOf(j, m.now)
			o.Event = &store.Event{Kind: store.EventRetry, Attempt: j.Attempt, At: m.now, Reason: "lease_expired"}
			outs = append(outs, o)
		case k == 2 && len(outs) > 0:
			outs = append(outs, outs[m.r.IntN(len(outs))])
		default:
			worker := modelWorkers[m.r.IntN(2)]
			if held := m.held[worker]; len(held) > 0 {
				outs = append(outs, m.outcomeOf(held[m.r.IntN(len(held))], worker))
			}
		}
	}
	if len(outs) == 0 {
		return
	}
	want := make([]bool, len(outs))
	for i := range outs {
		if want[i] = m.applies(&outs[i]); want[i] {
			m.effect(&outs[i])
		}
	}
	got := m.x.finishApplied(outs...)
	var desc []string
	for i, o := range outs {
		desc = append(desc, fmt.Sprintf("job %d lease %d %s kind %d expiredBy %s: %v", o.JobID, o.Lease, o.Worker, o.Kind,
			fmtTime(o.ExpiredBy), got[i]))
	}
	m.logf("mixed finish %s", strings.Join(desc, "; "))
	if !slices.Equal(got, want) {
		m.x.t.Errorf("Finish applied %v, want %v", got, want)
		return
	}
	m.sent = append(m.sent, outs...)
}
