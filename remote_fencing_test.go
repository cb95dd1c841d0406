package redrive_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/retry"
	"github.com/redrivehq/redrive/store"
)

// fencingClock is a clock the test moves.
type fencingClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fencingClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fencingClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// modelJob is what the model knows of a job: whether it runs, and the
// pair (lease, worker) that holds it.
type modelJob struct {
	running bool
	done    bool // completed
	lease   int64
	worker  string
}

// TestRemoteFencingRandomized plays leases, heartbeats, outcomes (with
// current and stale pairs), rescues and the passing of time in a random
// order against a model of the fencing contract: a pair that is not the
// job's current one never changes the job (its outcome is refused with
// ErrLeaseLost, its heartbeat says not held), and a current pair's
// outcome applies exactly once.
func TestRemoteFencingRandomized(t *testing.T) {
	for seed := range uint64(3) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { playFencing(t, seed) })
	}
}

func playFencing(t *testing.T, seed uint64) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 33))
	clock := &fencingClock{t: time.Date(2026, 11, 29, 1, 0, 0, 0, time.UTC)}
	st := openStore(t)
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quietLogger()})
	redrive.SetClock(c, clock.now)
	p := retry.Policy{MaxRetries: 1000, Initial: time.Second, Multiplier: 1, MaxDelay: time.Second, Jitter: retry.JitterNone}
	ex := redrive.NewExecutor(redrive.ExecutorOptions{ID: "serve", Policy: &p, Logger: quietLogger(), Now: clock.now, DisableRetryBudget: true})
	const lease = 10 * time.Second
	rw := redrive.NewRemoteWorkers(c, ex, redrive.RemoteOptions{LeaseDuration: lease, Logger: quietLogger()})

	const jobs = 20
	model := map[int64]*modelJob{}
	for range jobs {
		j, err := c.Enqueue(ctx, "k", nil, redrive.InQueue("q"))
		if err != nil {
			t.Fatal(err)
		}
		model[j.ID] = &modelJob{}
	}
	workers := []string{"py-1@a", "node-2@b"}
	// pairs are every (job, lease, worker) ever handed out.
	type pair struct {
		id, lease int64
		worker    string
	}
	var pairs []pair
	snapshot := func(id int64) *redrive.Job {
		j, err := st.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	current := func(p pair) bool {
		m := model[p.id]
		return m.running && m.lease == p.lease && m.worker == p.worker
	}
	leaseSome := func(step int, w string, max int) {
		got, err := rw.Lease(ctx, redrive.LeaseRequest{RemoteIdentity: redrive.RemoteIdentity{Worker: w}, Queues: []string{"q"},
			Kinds: []string{"k"}, Max: max})
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range got {
			m := model[j.ID]
			if m.running || m.done {
				t.Fatalf("step %d: job %d handed out while the model has it running %v, done %v", step, j.ID, m.running, m.done)
			}
			if j.Lease <= m.lease {
				t.Fatalf("step %d: job %d lease %d after lease %d", step, j.ID, j.Lease, m.lease)
			}
			m.running, m.lease, m.worker = true, j.Lease, w
			pairs = append(pairs, pair{j.ID, j.Lease, w})
		}
	}
	applied := 0
	for step := range 250 {
		switch op := rng.IntN(12); {
		case op < 3: // lease
			leaseSome(step, workers[rng.IntN(len(workers))], 1+rng.IntN(3))
		case op < 5: // heartbeat of a pair, current or stale, as its worker or the other
			if len(pairs) == 0 {
				continue
			}
			p := pairs[rng.IntN(len(pairs))]
			if rng.IntN(4) == 0 {
				p.worker = workers[rng.IntN(len(workers))]
			}
			before := snapshot(p.id)
			st, err := rw.Heartbeat(ctx, p.worker, []redrive.RemoteBeat{{ID: p.id, Lease: p.lease}})
			if err != nil {
				t.Fatal(err)
			}
			if st[0].Held != current(p) {
				t.Fatalf("step %d: heartbeat of %+v held=%v, model says %v", step, p, st[0].Held, current(p))
			}
			if !st[0].Held {
				after := snapshot(p.id)
				if after.State != before.State || after.Lease != before.Lease || !sameTime(after.LeaseUntil, before.LeaseUntil) {
					t.Fatalf("step %d: a stale heartbeat changed job %d", step, p.id)
				}
			}
		case op < 8: // an outcome of a pair, current or stale
			if len(pairs) == 0 {
				continue
			}
			p := pairs[rng.IntN(len(pairs))]
			if rng.IntN(4) == 0 {
				p.worker = workers[rng.IntN(len(workers))]
			}
			kinds := []redrive.RemoteOutcomeKind{redrive.RemoteComplete, redrive.RemoteFail, redrive.RemoteSnooze, redrive.RemoteRelease}
			o := redrive.RemoteOutcome{ID: p.id, Lease: p.lease, Kind: kinds[rng.IntN(len(kinds))]}
			switch o.Kind {
			case redrive.RemoteFail:
				o.Class, o.Error = failure.Transient, "boom"
			case redrive.RemoteSnooze:
				o.Delay = time.Second
			}
			was := current(p)
			before := snapshot(p.id)
			// Sometimes twice in one call: only the first may apply.
			outs := []redrive.RemoteOutcome{o}
			if rng.IntN(5) == 0 {
				outs = append(outs, o)
			}
			res, err := rw.Outcomes(ctx, p.worker, outs)
			if err != nil {
				t.Fatal(err)
			}
			if (res[0].Err == nil) != was {
				t.Fatalf("step %d: outcome %s of %+v: %v, model says current=%v", step, o.Kind, p, res[0].Err, was)
			}
			for _, r := range res[1:] {
				if !errors.Is(r.Err, redrive.ErrLeaseLost) {
					t.Fatalf("step %d: the same pair's second outcome in a call: %v", step, r.Err)
				}
			}
			after := snapshot(p.id)
			if !was {
				if !errors.Is(res[0].Err, redrive.ErrLeaseLost) {
					t.Fatalf("step %d: stale outcome refused with %v", step, res[0].Err)
				}
				if after.State != before.State || after.Lease != before.Lease || len(after.History) != len(before.History) ||
					after.Attempt != before.Attempt {
					t.Fatalf("step %d: a stale outcome changed job %d: %s -> %s", step, p.id, before.State, after.State)
				}
				continue
			}
			applied++
			m := model[p.id]
			m.running = false
			if after.State != res[0].State {
				t.Fatalf("step %d: outcome says %s, the job is %s", step, res[0].State, after.State)
			}
			if o.Kind == redrive.RemoteComplete {
				m.done = true
				if after.State != store.Completed {
					t.Fatalf("step %d: completed job is %s", step, after.State)
				}
			} else if after.State != store.Scheduled && after.State != store.Pending {
				t.Fatalf("step %d: outcome %s left job %s", step, o.Kind, after.State)
			}
		case op < 10: // concurrent calls' outcomes, a pair in several
			// Jobs due are leased first: calls on several current pairs.
			leaseSome(step, workers[rng.IntN(len(workers))], 2)
			leaseSome(step, workers[rng.IntN(len(workers))], 2)
			if len(pairs) == 0 {
				continue
			}
			var live []pair // mostly current pairs: calls that reach a write
			for _, p := range pairs {
				if current(p) {
					live = append(live, p)
				}
			}
			n := 3 + rng.IntN(3)
			calls := make([]fencingCall, n)
			rng.Shuffle(len(live), func(i, j int) { live[i], live[j] = live[j], live[i] })
			for k := range calls {
				p := pairs[rng.IntN(len(pairs))]
				if k < len(live) && rng.IntN(4) > 0 {
					p = live[k]
				}
				if k > 0 && rng.IntN(4) == 0 {
					p = calls[rng.IntN(k)].p // the same pair resent by another call
				}
				if rng.IntN(4) == 0 {
					p.worker = workers[rng.IntN(len(workers))]
				}
				calls[k] = fencingCall{p: p, o: randomOutcome(rng, p.id, p.lease)}
			}
			type jobKey = int64
			before := map[jobKey]*redrive.Job{}
			for _, cl := range calls {
				before[cl.p.id] = snapshot(cl.p.id)
			}
			var wg sync.WaitGroup
			for k := range calls {
				wg.Go(func() {
					cl := &calls[k]
					cl.res, cl.err = rw.Outcomes(ctx, cl.p.worker, []redrive.RemoteOutcome{cl.o})
				})
			}
			wg.Wait()
			// Of the calls reporting a current pair, exactly one applies;
			// every other is refused and changes nothing.
			appliedBy := map[jobKey]*fencingCall{}
			for k := range calls {
				cl := &calls[k]
				if cl.err != nil {
					t.Fatalf("step %d: concurrent outcome of %+v: %v", step, cl.p, cl.err)
				}
				if cl.res[0].Err == nil {
					if !current(cl.p) {
						t.Fatalf("step %d: concurrent outcome of stale %+v applied", step, cl.p)
					}
					if appliedBy[cl.p.id] != nil {
						t.Fatalf("step %d: two concurrent outcomes of job %d applied", step, cl.p.id)
					}
					appliedBy[cl.p.id] = cl
				} else if !errors.Is(cl.res[0].Err, redrive.ErrLeaseLost) {
					t.Fatalf("step %d: concurrent outcome of %+v refused with %v", step, cl.p, cl.res[0].Err)
				}
			}
			for _, cl := range calls {
				if current(cl.p) && appliedBy[cl.p.id] == nil {
					t.Fatalf("step %d: no concurrent outcome of current %+v applied", step, cl.p)
				}
			}
			for id, b := range before {
				after := snapshot(id)
				cl := appliedBy[id]
				if cl == nil {
					if after.State != b.State || after.Lease != b.Lease || len(after.History) != len(b.History) || after.Attempt != b.Attempt {
						t.Fatalf("step %d: refused outcomes changed job %d: %s -> %s", step, id, b.State, after.State)
					}
					continue
				}
				applied++
				m := model[id]
				m.running = false
				if after.State != cl.res[0].State {
					t.Fatalf("step %d: outcome says %s, the job is %s", step, cl.res[0].State, after.State)
				}
				if cl.o.Kind == redrive.RemoteComplete {
					m.done = true
				}
			}
		case op < 11: // time passes beyond the leases: the rescue
			clock.add(lease + time.Second)
			now := clock.now()
			expired, err := st.Expired(ctx, now, 100)
			if err != nil {
				t.Fatal(err)
			}
			var outs []store.Outcome
			for _, j := range expired {
				o := ex.Fail(j, failure.Verdict{Class: failure.Transient, Reason: "lease_expired"}, "lease expired", now, now)
				o.Worker, o.ExpiredBy = j.Worker, now
				outs = append(outs, o)
			}
			if len(outs) > 0 {
				ok, err := st.Finish(ctx, outs)
				if err != nil {
					t.Fatal(err)
				}
				for i, o := range outs {
					if !ok[i] {
						t.Fatalf("step %d: rescue of job %d not applied", step, o.JobID)
					}
					model[o.JobID].running = false
				}
			}
			for id, m := range model {
				if m.running {
					t.Fatalf("step %d: job %d still running after the rescue", step, id)
				}
			}
		default: // time passes: retries become due
			clock.add(time.Duration(rng.IntN(3)) * time.Second)
		}
	}
	if applied == 0 {
		t.Fatal("no outcome applied: the play tested nothing")
	}
}

// fencingCall is one of a step's concurrent outcome calls.
type fencingCall struct {
	p struct {
		id, lease int64
		worker    string
	}
	o   redrive.RemoteOutcome
	res []redrive.RemoteResult
	err error
}

// randomOutcome is an outcome of a random kind for (id, lease).
func randomOutcome(rng *rand.Rand, id, lease int64) redrive.RemoteOutcome {
	kinds := []redrive.RemoteOutcomeKind{redrive.RemoteComplete, redrive.RemoteFail, redrive.RemoteSnooze, redrive.RemoteRelease}
	o := redrive.RemoteOutcome{ID: id, Lease: lease, Kind: kinds[rng.IntN(len(kinds))]}
	switch o.Kind {
	case redrive.RemoteFail:
		o.Class, o.Error = failure.Transient, "boom"
	case redrive.RemoteSnooze:
		o.Delay = time.Second
	}
	return o
}

func sameTime(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Equal(*b)
}
