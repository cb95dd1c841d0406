package storetest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/store"
)

// The lease contract under real concurrency: workers, a rescuer and a
// user run at once on goroutines, on the real clock with short leases,
// and every call is logged with the ticks of a shared counter taken
// before it started and after it returned. The log is then checked for
// what the contract forbids whatever the interleaving: a token leased
// twice, two outcomes of one lease applied, an outcome applied after a
// later lease of its job was handed out or after a heartbeat reported its
// lease lost, a lease renewed after its outcome applied, a job leased
// after it ended; and the counts against the jobs.

// lcEvent is one logged call about one lease.
type lcEvent struct {
	op         string // fetch, finish, heartbeat
	job, token int64
	worker     string
	kind       store.OutcomeKind
	rescue     bool
	ok         bool // finish: applied; heartbeat: renewed (not lost)
	start, end int64
	read       int64 // a rescue: when the Expired call it was decided from returned
}

type lcLog struct {
	mu     sync.Mutex
	clock  atomic.Int64
	events []lcEvent
}

func (l *lcLog) add(evs ...lcEvent) {
	l.mu.Lock()
	l.events = append(l.events, evs...)
	l.mu.Unlock()
}

// testLeaseConcurrent: see above.
func testLeaseConcurrent(x *h) {
	const (
		queue   = "lcq"
		njobs   = 30
		lease   = 40 * time.Millisecond
		workers = 3
		iters   = 120
	)
	now := time.Now()
	var nj []store.NewJob
	for range njobs {
		nj = append(nj, store.NewJob{Queue: queue, Kind: "k", MaxRetries: -1})
	}
	jobs := x.enqueue(now, nj...)
	ids := make([]int64, len(jobs))
	for i, j := range jobs {
		ids[i] = j.ID
	}
	log := &lcLog{}
	var wg sync.WaitGroup
	var stop atomic.Bool
	fail := func(format string, args ...any) { x.t.Errorf(format, args...) }
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			worker := fmt.Sprintf("cw%d", w)
			r := rand.New(rand.NewPCG(uint64(w), 77))
			var held []*store.Job
			var sent []store.Outcome
			outcomeOf := func(j *store.Job) store.Outcome {
				t := time.Now()
				switch n := r.IntN(16); {
				case n < 5:
					return retryOf(j, t, t.Add(time.Duration(r.IntN(5))*time.Millisecond), failure.Transient, "503")
				case n < 9:
					o := outcome(j, store.Snooze, t)
					o.RunAt = t
					return o
				case n < 13:
					return outcome(j, store.Release, t)
				case n < 14:
					return buryOf(j, t, failure.Permanent, "http_404", "fp", "404")
				default:
					return completeOf(j, t)
				}
			}
			stalled := false
			for range iters {
				if stop.Load() {
					return
				}
				if r.IntN(8) == 0 {
					stalled = !stalled // heartbeats stop, or start again
				}
				switch n := r.IntN(11); {
				case n == 10:
					// A handler runs a while: real time passing is what
					// lets leases expire.
					time.Sleep(time.Duration(r.IntN(int(lease/time.Millisecond))) * time.Millisecond)
				case n < 3:
					start := log.clock.Add(1)
					t := time.Now()
					got, err := x.s.Fetch(x.ctx, store.FetchParams{Queue: queue, Limit: 1 + r.IntN(3), Now: t, LeaseUntil: t.Add(lease), Worker: worker})
					end := log.clock.Add(1)
					if err != nil {
						fail("Fetch: %v", err)
						return
					}
					for _, j := range got {
						log.add(lcEvent{op: "fetch", job: j.ID, token: j.Lease, worker: worker, start: start, end: end})
						held = append(held, j)
					}
				case n < 5:
					if len(held) == 0 || stalled {
						continue
					}
					leases := make([]store.Lease, 0, len(held))
					for _, j := range held {
						leases = append(leases, store.LeaseOf(j))
					}
					start := log.clock.Add(1)
					res, err := x.s.Heartbeat(x.ctx, worker, leases, time.Now().Add(lease))
					end := log.clock.Add(1)
					if err != nil {
						fail("Heartbeat: %v", err)
						return
					}
					lost := map[store.Lease]bool{}
					for _, l := range res.Lost {
						lost[l] = true
					}
					kept := held[:0]
					for _, j := range held {
						l := store.LeaseOf(j)
						log.add(lcEvent{op: "heartbeat", job: l.JobID, token: l.Token, worker: worker, ok: !lost[l], start: start, end: end})
						if !lost[l] {
							kept = append(kept, j)
						}
					}
					held = kept
				case n < 9:
					var outs []store.Outcome
					if len(sent) > 0 && r.IntN(3) == 0 {
						o := sent[len(sent)-1-r.IntN(min(5, len(sent)))]
						o.At = time.Now()
						outs = append(outs, o)
					}
					for range 1 + r.IntN(2) {
						if len(held) == 0 {
							break
						}
						k := r.IntN(len(held))
						outs = append(outs, outcomeOf(held[k]))
						held = append(held[:k], held[k+1:]...)
					}
					if len(outs) == 0 {
						continue
					}
					r.Shuffle(len(outs), func(a, b int) { outs[a], outs[b] = outs[b], outs[a] })
					start := log.clock.Add(1)
					applied, err := x.s.Finish(x.ctx, outs)
					end := log.clock.Add(1)
					if err != nil {
						fail("Finish: %v", err)
						return
					}
					for i, o := range outs {
						log.add(lcEvent{op: "finish", job: o.JobID, token: o.Lease, worker: o.Worker, kind: o.Kind, ok: applied[i], start: start, end: end})
					}
					sent = append(sent, outs...)
				default:
					var ups []store.ProgressUpdate
					for _, j := range held {
						ups = append(ups, store.ProgressUpdate{JobID: j.ID, Lease: j.Lease, JobProgress: store.JobProgress{Done: 1, Total: 2, At: time.Now()}})
					}
					if len(ups) > 0 {
						if err := x.s.Progress(x.ctx, worker, ups); err != nil {
							fail("Progress: %v", err)
							return
						}
					}
				}
			}
		}()
	}
	// The rescuer, and a user canceling jobs, until the workers are done.
	done := make(chan struct{})
	var side sync.WaitGroup
	side.Add(2)
	go func() {
		defer side.Done()
		r := rand.New(rand.NewPCG(99, 77))
		for {
			select {
			case <-done:
				return
			default:
			}
			t := time.Now()
			exp, err := x.s.Expired(x.ctx, t, 100)
			read := log.clock.Add(1)
			if err != nil {
				fail("Expired: %v", err)
				return
			}
			var outs []store.Outcome
			for _, j := range exp {
				if j.Queue == queue {
					outs = append(outs, rescueOf(j, t))
				}
			}
			if len(outs) == 0 {
				time.Sleep(time.Millisecond) // the rescuer's poll: leases expire as real time passes
				continue
			}
			if r.IntN(2) == 0 {
				time.Sleep(time.Duration(r.IntN(20)) * time.Millisecond) // a slow rescuer: heartbeats may land before it writes
			}
			start := log.clock.Add(1)
			applied, err := x.s.Finish(x.ctx, outs)
			end := log.clock.Add(1)
			if err != nil {
				fail("Finish (rescue): %v", err)
				return
			}
			for i, o := range outs {
				log.add(lcEvent{op: "finish", job: o.JobID, token: o.Lease, worker: o.Worker, kind: o.Kind, rescue: true, ok: applied[i], start: start, end: end, read: read})
			}
		}
	}()
	go func() {
		defer side.Done()
		r := rand.New(rand.NewPCG(98, 77))
		for range njobs / 3 {
			select {
			case <-done:
				return
			case <-time.After(time.Duration(r.IntN(30)) * time.Millisecond): // cancels spread over the run
			}
			if _, err := x.s.Cancel(x.ctx, ids[r.IntN(len(ids))], time.Now()); err != nil && !errors.Is(err, store.ErrConflict) {
				fail("Cancel: %v", err)
			}
		}
	}()
	wg.Wait()
	close(done)
	side.Wait()
	if x.t.Failed() {
		return
	}
	checkLeaseLog(x, log.events)
	tally := map[string]int{}
	for _, e := range log.events {
		name := e.op
		if e.rescue {
			name += "(rescue)"
		}
		tally[fmt.Sprintf("%s ok=%v", name, e.ok)]++
	}
	x.t.Logf("calls by outcome: %v", tally)
	x.checkCounts("after concurrent leases")
	st := x.stats().Jobs[queue]
	var total int64
	for _, s := range store.States {
		total += st[s]
	}
	if total != njobs {
		x.t.Errorf("Stats: %d jobs in %s, want %d", total, queue, njobs)
	}
}

func checkLeaseLog(x *h, evs []lcEvent) {
	type key struct{ job, token int64 }
	fetched := map[key]lcEvent{}
	appliedOf := map[key]lcEvent{}
	for _, e := range evs {
		k := key{e.job, e.token}
		switch {
		case e.op == "fetch":
			if p, ok := fetched[k]; ok {
				x.t.Errorf("job %d lease %d leased twice: to %s and %s", e.job, e.token, p.worker, e.worker)
			}
			fetched[k] = e
		case e.op == "finish" && e.ok:
			if p, ok := appliedOf[k]; ok {
				x.t.Errorf("job %d lease %d: two outcomes applied (kinds %d and %d)", e.job, e.token, p.kind, e.kind)
			}
			appliedOf[k] = e
		}
	}
	for _, e := range evs {
		k := key{e.job, e.token}
		switch e.op {
		case "fetch":
			for _, f := range evs {
				if f.op == "fetch" && f.job == e.job && f.end < e.start && f.token >= e.token {
					x.t.Errorf("job %d: lease %d handed out after lease %d", e.job, e.token, f.token)
				}
				if f.op == "finish" && f.ok && f.job == e.job && f.end < e.start && (f.kind == store.Complete || f.kind == store.Bury || f.kind == store.Cancel) {
					x.t.Errorf("job %d leased (lease %d) after it ended (lease %d, kind %d)", e.job, e.token, f.token, f.kind)
				}
			}
		case "finish":
			if !e.ok {
				continue
			}
			if f, ok := fetched[k]; !ok || f.worker != e.worker {
				x.t.Errorf("job %d lease %d: outcome of %s applied, leased to %q", e.job, e.token, e.worker, f.worker)
			}
			for _, f := range evs {
				if f.job != e.job || f.end >= e.start {
					continue
				}
				if f.op == "fetch" && f.token > e.token {
					x.t.Errorf("job %d: outcome of lease %d (kind %d, rescue %v) applied after lease %d was handed out", e.job, e.token, e.kind, e.rescue, f.token)
				}
				if f.op == "heartbeat" && !f.ok && f.token == e.token {
					x.t.Errorf("job %d: outcome of lease %d (kind %d, rescue %v) applied after a heartbeat reported it lost", e.job, e.token, e.kind, e.rescue)
				}
				if f.op == "heartbeat" && f.ok && f.token == e.token && e.rescue && f.start > e.read {
					x.t.Errorf("job %d: rescue of lease %d applied after a heartbeat renewed it since it was read expired", e.job, e.token)
				}
			}
		case "heartbeat":
			if a, ok := appliedOf[k]; ok && e.ok && a.end < e.start {
				x.t.Errorf("job %d: lease %d renewed after its outcome (kind %d) applied", e.job, e.token, a.kind)
			}
		}
	}
}

// testFencingCompletionsRandom: large batches of plain completions (the
// stores' bulk paths: SQLite's multi-row statements, PostgreSQL's binary
// search over the ids) in random order, mixing fresh completions with a
// stale token (the lease before a snooze and a new lease by the same
// worker), a token not yet given, and the token of a lease now another
// worker's; each applies exactly when its lease is held, with its
// counters only.
func testFencingCompletionsRandom(x *h) {
	for seed := uint64(1); seed <= 3; seed++ {
		r := rand.New(rand.NewPCG(seed, 5))
		queue := fmt.Sprintf("fcr%d", seed)
		now := at(time.Duration(seed) * time.Hour)
		var nj []store.NewJob
		for range 90 {
			nj = append(nj, store.NewJob{Queue: queue, Kind: "k", MaxRetries: -1})
		}
		x.enqueue(now, nj...)
		leased := x.fetch(store.FetchParams{Queue: queue, Limit: 100, Now: now, LeaseUntil: now.Add(time.Hour), Worker: "w1"})
		cur := map[int64]*store.Job{}
		var snoozes []store.Outcome
		for _, j := range leased {
			cur[j.ID] = j
			if r.IntN(3) == 0 {
				o := outcome(j, store.Snooze, now)
				o.RunAt = now
				snoozes = append(snoozes, o)
			}
		}
		x.finish(snoozes...)
		if len(snoozes) > 0 {
			now = now.Add(time.Second)
			for _, w := range []string{"w1", "w2"} {
				for _, j := range x.fetch(store.FetchParams{Queue: queue, Limit: 1 + len(snoozes)/2, Now: now, LeaseUntil: now.Add(time.Hour), Worker: w}) {
					cur[j.ID] = j
				}
			}
		}
		var outs []store.Outcome
		var want []bool
		for _, j := range leased {
			c := cur[j.ID]
			o := completeOf(c, now.Add(time.Second))
			o.Worker = "w1"
			o.Counters = []store.Counter{{Queue: queue, Name: store.StatSucceeded, N: 1}}
			fresh := c.Worker == "w1" && c.State == store.Running
			switch r.IntN(5) {
			case 0:
				continue
			case 1:
				o.Lease = c.Lease - 1 // the lease before the snooze, or none
				fresh = false
			case 2:
				if r.IntN(2) == 0 {
					o.Lease = c.Lease + 1 // a token not given yet
					fresh = false
				}
			}
			outs = append(outs, o)
			want = append(want, fresh)
		}
		perm := r.Perm(len(outs))
		so, sw := make([]store.Outcome, len(outs)), make([]bool, len(outs))
		for i, p := range perm {
			so[i], sw[i] = outs[p], want[p]
		}
		before := x.counter(queue, store.StatSucceeded)
		got := x.finishApplied(so...)
		n := int64(0)
		for i := range so {
			if got[i] != sw[i] {
				x.t.Errorf("seed %d: completion of job %d lease %d by %s applied %v, want %v", seed, so[i].JobID, so[i].Lease, so[i].Worker, got[i], sw[i])
			}
			st := x.get(so[i].JobID).State
			if sw[i] {
				n++
				if st != store.Completed {
					x.t.Errorf("seed %d: job %d %s, want completed", seed, so[i].JobID, st)
				}
			} else if st == store.Completed {
				x.t.Errorf("seed %d: job %d completed by a stale completion", seed, so[i].JobID)
			}
		}
		if d := x.counter(queue, store.StatSucceeded) - before; d != n {
			x.t.Errorf("seed %d: succeeded counter moved by %d, want %d", seed, d, n)
		}
		x.checkCounts(fmt.Sprintf("seed %d", seed))
	}
}
