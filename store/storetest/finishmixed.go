package storetest

import (
	"math/rand/v2"
	"time"

	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/store"
)

// testFinishMixedBatch: one Finish call with a large batch that mixes
// plain completions (of two workers), completions with an event, retries,
// deaths, stale outcomes (wrong lease) and two outcomes of one lease, in
// a random order, applies each as if sent one by one: the fresh ones take
// effect with their counters, the stale ones are refused and change
// nothing.
func testFinishMixedBatch(x *h) {
	const n = 1200
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 28))
	jobsOf := func(queue, worker string, k int) []*store.Job {
		nj := make([]store.NewJob, k)
		for i := range nj {
			nj[i] = store.NewJob{Queue: queue, Kind: "k"}
		}
		return x.leaseNew(at(0), worker, nj...)
	}
	jobs := append(jobsOf("mix", "w1", n), jobsOf("mix", "w2", n/10)...)
	when := at(time.Second)
	type want struct {
		applied bool
		state   store.State
	}
	var (
		outs  []store.Outcome
		wants []want
		final = map[int64]store.State{}
		succ  int64
	)
	add := func(o store.Outcome, w want) {
		outs = append(outs, o)
		wants = append(wants, w)
	}
	for _, j := range jobs {
		switch r := rng.IntN(100); {
		case r < 80:
			o := completeOf(j, when)
			o.Counters = []store.Counter{{Queue: "mix", Name: store.StatSucceeded, N: 1}}
			add(o, want{true, store.Completed})
			final[j.ID] = store.Completed
			succ++
		case r < 85:
			add(retryOf(j, when, at(time.Hour), failure.Transient, "again"), want{true, store.Scheduled})
			final[j.ID] = store.Scheduled
		case r < 88:
			add(buryOf(j, when, failure.Permanent, "poison", "fp", "dead"), want{true, store.Dead})
			final[j.ID] = store.Dead
		case r < 93:
			// Stale: a lease the job does not hold.
			o := completeOf(j, when)
			o.Lease++
			o.Counters = []store.Counter{{Queue: "mix", Name: store.StatSucceeded, N: 1}}
			add(o, want{false, store.Running})
			final[j.ID] = store.Running
		default:
			// Two outcomes of one lease: the first holds, the second is
			// stale.
			o := completeOf(j, when)
			o.Counters = []store.Counter{{Queue: "mix", Name: store.StatSucceeded, N: 1}}
			add(o, want{true, store.Completed})
			add(retryOf(j, when, at(time.Hour), failure.Transient, "late"), want{false, store.Completed})
			final[j.ID] = store.Completed
			succ++
		}
	}
	// Shuffle, keeping the outcomes of one job in their order.
	perm := rng.Perm(len(outs))
	seen := map[int64][]int{}
	for i, o := range outs {
		seen[o.JobID] = append(seen[o.JobID], i)
	}
	shuffled := make([]store.Outcome, 0, len(outs))
	sw := make([]want, 0, len(outs))
	next := map[int64]int{}
	for _, p := range perm {
		id := outs[p].JobID
		k := seen[id][next[id]]
		next[id]++
		shuffled = append(shuffled, outs[k])
		sw = append(sw, wants[k])
	}
	before := x.counter("mix", store.StatSucceeded)
	applied := x.finishApplied(shuffled...)
	for i, ok := range applied {
		if ok != sw[i].applied {
			o := shuffled[i]
			x.t.Fatalf("Finish: outcome %d (job %d, lease %d, worker %q, kind %d) applied = %v, want %v", i, o.JobID, o.Lease, o.Worker, o.Kind, ok, sw[i].applied)
		}
	}
	for _, j := range jobs {
		got := x.get(j.ID)
		if got.State != final[j.ID] {
			x.t.Fatalf("job %d is %s after Finish, want %s", j.ID, got.State, final[j.ID])
		}
		if got.State == store.Running && (got.Lease != j.Lease || got.Worker != j.Worker) {
			x.t.Fatalf("job %d refused an outcome but its lease changed: %d %q, want %d %q", j.ID, got.Lease, got.Worker, j.Lease, j.Worker)
		}
	}
	if got := x.counter("mix", store.StatSucceeded) - before; got != succ {
		x.t.Fatalf("succeeded counter rose by %d, want %d (one per applied completion)", got, succ)
	}
}
