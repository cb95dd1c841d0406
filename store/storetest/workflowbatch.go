package storetest

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"time"

	"github.com/redrivehq/redrive/store"
)

// testWorkflowBatch finishes a workflow's jobs in large Finish calls
// (two workers' completions mixed with deaths and stale outcomes, as a
// worker's outcome batcher sends them), which a store may apply in bulk
// (SQLite applies a batch's workflow completions together, migration
// 0039; PostgreSQL at commit, migration 0038), and checks after each
// call that what the store keeps agrees with the jobs' states: each
// workflow's counts with its jobs', each member blocked exactly while a
// dependency holds it back (and released pending, or scheduled when it
// was enqueued for later), each callback fired exactly when its
// workflow's counts say so, the workflow closed once every job
// finished, and the job counts with the jobs. It also checks that
// EnqueueWorkflow returns the workflow as GetWorkflow reads it.
func testWorkflowBatch(x *h) {
	seed := uint64(time.Now().UnixNano())
	x.t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed>>9))
	now := time.Now().Truncate(time.Second)
	queue, cbQueue := "wfb", "wfb-cb"
	type flow struct {
		w     *store.Workflow
		run   bool              // on_dead run: a dead dependency releases too
		later map[int64]bool    // members enqueued for later
		after map[int64][]int64 // member -> its dependencies
	}
	var flows []*flow
	for f := range 3 {
		nw := store.NewWorkflow{Name: fmt.Sprint("batch-", f), OnDead: store.WaitOnDead,
			OnSuccess:  &store.NewJob{Queue: cbQueue, Kind: "success"},
			OnComplete: &store.NewJob{Queue: cbQueue, Kind: "complete"},
			OnDeath:    &store.NewJob{Queue: cbQueue, Kind: "death"}}
		switch f {
		case 0:
			nw.OnDeath = nil // not every callback
		case 1:
			nw.OnDead = store.RunOnDead
		}
		// Layers of 10 to 25 jobs, each job depending on one to three of
		// the layer before; the third layer's first job fans in most of
		// the layer before it.
		later := map[string]bool{}
		var prev []string
		for l := range 4 {
			var layer []string
			width := 10 + rng.IntN(16)
			for k := range width {
				name := fmt.Sprintf("l%d-%d", l, k)
				node := store.WorkflowNode{Name: name, Job: store.NewJob{Queue: queue, Kind: "step"}}
				switch {
				case len(prev) == 0:
				case l == 2 && k == 0:
					for _, d := range prev {
						if rng.IntN(5) > 0 {
							node.After = append(node.After, d)
						}
					}
				default:
					for range 1 + rng.IntN(3) {
						if d := prev[rng.IntN(len(prev))]; !slices.Contains(node.After, d) {
							node.After = append(node.After, d)
						}
					}
				}
				if f == 2 && rng.IntN(6) == 0 {
					node.Job.RunAt = now.Add(24 * time.Hour)
					later[node.Name] = true
				}
				nw.Jobs = append(nw.Jobs, node)
				layer = append(layer, name)
			}
			prev = layer
		}
		w, err := x.s.EnqueueWorkflow(x.ctx, nw, now)
		if err != nil {
			x.t.Fatalf("EnqueueWorkflow: %v", err)
		}
		got, err := x.s.GetWorkflow(x.ctx, w.ID)
		if err != nil {
			x.t.Fatalf("GetWorkflow(%d): %v", w.ID, err)
		}
		if !sameWorkflow(w, got) {
			x.t.Fatalf("EnqueueWorkflow returned\n%+v\nGetWorkflow reads\n%+v", *w, *got)
		}
		fl := &flow{w: w, run: nw.OnDead == store.RunOnDead, later: map[int64]bool{}, after: map[int64][]int64{}}
		for _, j := range w.Jobs {
			fl.after[j.JobID] = j.After
			if later[j.Name] {
				fl.later[j.JobID] = true
			}
		}
		flows = append(flows, fl)
	}
	check := func(what string) {
		x.t.Helper()
		for _, fl := range flows {
			w, err := x.s.GetWorkflow(x.ctx, fl.w.ID)
			if err != nil {
				x.t.Fatalf("%s: GetWorkflow(%d): %v", what, fl.w.ID, err)
			}
			if w.Completed != w.Counts[store.Completed] || w.Dead != w.Counts[store.Dead] || w.Canceled != w.Counts[store.Canceled] {
				x.t.Fatalf("%s: workflow %d counts completed %d, dead %d, canceled %d; its jobs: %v", what, w.ID, w.Completed, w.Dead, w.Canceled, w.Counts)
			}
			state := map[int64]store.State{}
			for _, j := range w.Jobs {
				state[j.JobID] = j.State
			}
			for _, j := range w.Jobs {
				held := false
				for _, d := range j.After {
					if s := state[d]; s != store.Completed && !(fl.run && (s == store.Dead || s == store.Canceled)) {
						held = true
					}
				}
				switch {
				case held && j.State != store.Blocked:
					x.t.Fatalf("%s: workflow %d: job %s (%d) is %s, a dependency holds it back", what, w.ID, j.Name, j.JobID, j.State)
				case !held && j.State == store.Blocked:
					x.t.Fatalf("%s: workflow %d: job %s (%d) is blocked, no dependency holds it back", what, w.ID, j.Name, j.JobID)
				case !held && fl.later[j.JobID] && j.State != store.Scheduled:
					x.t.Fatalf("%s: workflow %d: job %s (%d), enqueued for later, is %s, want scheduled", what, w.ID, j.Name, j.JobID, j.State)
				}
			}
			finished := w.Completed+w.Dead+w.Canceled == w.Total
			if (w.ClosedAt != nil) != finished {
				x.t.Fatalf("%s: workflow %d: closed at %v with %d of %d jobs finished", what, w.ID, w.ClosedAt, w.Completed+w.Dead+w.Canceled, w.Total)
			}
			for _, cb := range []struct {
				name string
				id   int64
				due  bool
			}{{"success", w.OnSuccess, w.Completed == w.Total}, {"complete", w.OnComplete, finished}, {"death", w.OnDeath, w.Dead > 0}} {
				if cb.id == 0 {
					continue
				}
				got := x.get(cb.id).State
				if want := map[bool]store.State{true: store.Pending, false: store.Blocked}[cb.due]; got != want {
					x.t.Fatalf("%s: workflow %d: %s callback is %s, want %s (completed %d, dead %d of %d)", what, w.ID, cb.name, got, want, w.Completed, w.Dead, w.Total)
				}
			}
		}
		x.checkAllCounts(what)
	}
	check("enqueued")
	for round := 0; round < 100; round++ {
		now = now.Add(time.Second)
		// A clean round completes 16 jobs a worker (a size a store may
		// apply in bulk, with nothing left over to apply one by one, so
		// that a workflow's last completions may all go in bulk); the
		// others take random numbers, with deaths and stale outcomes.
		clean := rng.IntN(2) == 0
		var leased []*store.Job
		for k := range 2 {
			limit := 10 + rng.IntN(40)
			if clean {
				limit = 16
			}
			leased = append(leased, x.fetch(store.FetchParams{Queue: queue, Limit: limit, Now: now,
				LeaseUntil: now.Add(time.Hour), Worker: fmt.Sprint("w", k)})...)
		}
		if len(leased) == 0 {
			break
		}
		var outcomes []store.Outcome
		var stale []bool
		for _, j := range leased {
			r := rng.IntN(100)
			if clean {
				r = 50
			}
			switch {
			case r < 4: // stale: another lease's outcome, which applies nothing
				o := completeOf(j, now)
				o.Lease++
				outcomes, stale = append(outcomes, o), append(stale, true)
				fallthrough // and the job's own, later in the call
			case r < 97:
				outcomes, stale = append(outcomes, completeOf(j, now)), append(stale, false)
			default:
				outcomes, stale = append(outcomes, buryNow(j, now)), append(stale, false)
			}
		}
		rng.Shuffle(len(outcomes), func(a, b int) {
			outcomes[a], outcomes[b] = outcomes[b], outcomes[a]
			stale[a], stale[b] = stale[b], stale[a]
		})
		applied, err := x.s.Finish(x.ctx, outcomes)
		if err != nil {
			x.t.Fatalf("round %d: Finish(%d outcomes): %v", round, len(outcomes), err)
		}
		for i := range outcomes {
			if applied[i] == stale[i] {
				x.t.Fatalf("round %d: outcome %d (job %d, lease %d): applied %v, stale %v", round, i, outcomes[i].JobID, outcomes[i].Lease, applied[i], stale[i])
			}
		}
		check(fmt.Sprintf("round %d (seed %d)", round, seed))
	}
	// Every member that could run did: each workflow without a job
	// enqueued for later has finished.
	for _, fl := range flows {
		w, err := x.s.GetWorkflow(x.ctx, fl.w.ID)
		if err != nil {
			x.t.Fatal(err)
		}
		if len(fl.later) == 0 && w.ClosedAt == nil && (fl.run || w.Dead == 0) {
			x.t.Fatalf("workflow %d did not finish: %v", w.ID, w.Counts)
		}
	}
}

// sameWorkflow reports whether a and b are the same workflow (their
// times equal as instants).
func sameWorkflow(a, b *store.Workflow) bool {
	ac, bc := *a, *b
	if !ac.CreatedAt.Equal(bc.CreatedAt) {
		return false
	}
	ac.CreatedAt, bc.CreatedAt = time.Time{}, time.Time{}
	return reflect.DeepEqual(ac, bc)
}
