package storetest

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/redrivehq/redrive/store"
)

// testWorkflowFanInModel runs workflows with wide fan-ins (random DAGs
// where some jobs wait for most of the jobs before them, each failure
// policy) through rounds of concurrent calls against the model of
// testWorkflowModel (docs/design.md, "Workflows"): the release contract
// says a dependent is released exactly when the last of its
// dependencies completes (or, under run, finishes), never twice, never
// early, and the store must keep it when the moves of its dependencies
// come from concurrent transactions, as a fleet's workers make them.
//
// A round is one kind of action, made by four goroutines at once on
// distinct jobs, in random orders and batches:
//   - fetches of the queue by four workers (each leased job must be
//     pending in the model: released, never early; none leased twice);
//   - outcomes of running jobs (completions, deaths, retries) in Finish
//     calls of one to four outcomes, with cancels of waiting jobs and
//     purges of dead ones in between;
//   - redrives of dead jobs, one to three a call;
//   - retention of every dead job (one call, alone).
//
// The actions of a round commute in the contract (the moves into final
// states, the cancels of waiting jobs and the deletions of dead ones
// give the same states in any order; a redrive, which does not commute
// with them, has rounds of its own), so the model applies them in any
// order; after each round every job's state, each dead job's blocked
// dependents and the workflows' counts must be the model's, and the job
// counts the jobs'.
func testWorkflowFanInModel(x *h) {
	seed := uint64(time.Now().UnixNano())
	x.t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed>>11))
	// As in testWorkflowModel: what a purge or retention causes is
	// stamped with the database's clock; the model's runs an hour ahead.
	now := time.Now().Add(time.Hour).Truncate(time.Second)
	var all []*flowModel // every run's, for retention
	for run := range 6 {
		policy := []store.OnDead{store.WaitOnDead, store.CancelOnDead, store.RunOnDead}[run%3]
		queue := fmt.Sprintf("wff-%d", run)
		var flows []*flowModel
		type ref struct {
			m *flowModel
			i int
		}
		byID := map[int64]ref{}
		for range 2 + rng.IntN(2) {
			m := newFlowModelOf(x, rng, queue, policy, now, fanInEdges(rng))
			flows, all = append(flows, m), append(all, m)
			for i, j := range m.jobs {
				byID[j.id] = ref{m, i}
			}
		}
		var log string
		logf := func(format string, args ...any) { log += fmt.Sprintf(format, args...) + "\n" }
		jobsWhere := func(pred func(*mjob) bool) []ref {
			var out []ref
			for _, m := range flows {
				for i, j := range m.jobs {
					if pred(j) {
						out = append(out, ref{m, i})
					}
				}
			}
			rng.Shuffle(len(out), func(a, b int) { out[a], out[b] = out[b], out[a] })
			return out
		}
		for round := range 40 {
			if len(jobsWhere(func(j *mjob) bool {
				return j.state == store.Pending || j.state == store.Running || (j.state == store.Dead && !j.gone)
			})) == 0 {
				break // nothing can happen any more
			}
			now = now.Add(time.Second)
			for _, m := range flows {
				m.now = now
			}
			var errs []error
			var mu sync.Mutex
			fail := func(err error) {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
			// parallel runs each goroutine's share of work at once.
			parallel := func(work [][]func()) {
				var wg sync.WaitGroup
				for _, w := range work {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for _, f := range w {
							f()
						}
					}()
				}
				wg.Wait()
			}
			switch r := rng.IntN(100); {
			case r < 35: // fetches
				pending := jobsWhere(func(j *mjob) bool { return j.state == store.Pending })
				got := make([][]*store.Job, 4)
				var work [][]func()
				for k := range 4 {
					limit := 1 + rng.IntN(4)
					work = append(work, []func(){func() {
						js, err := x.s.Fetch(x.ctx, store.FetchParams{Queue: queue, Limit: limit, Now: now, LeaseUntil: now.Add(time.Hour),
							Worker: fmt.Sprint("w", k)})
						if err != nil {
							fail(fmt.Errorf("fetch: %w", err))
						}
						got[k] = js
					}})
				}
				parallel(work)
				var n int
				for _, js := range got {
					for _, g := range js {
						n++
						r, ok := byID[g.ID]
						if !ok || r.m.jobs[r.i].state != store.Pending {
							x.t.Errorf("round %d: fetch leased job %d, which the model has not pending (leased early or twice)", round, g.ID)
							continue
						}
						j := r.m.jobs[r.i]
						j.state, j.lease, j.worker, j.leased = store.Running, g.Lease, g.Worker, g
						j.attempt++
						logf("round %d: %s leases %s of workflow %d", round, g.Worker, j.name, r.m.wid)
					}
				}
				if n > len(pending) {
					x.t.Errorf("round %d: fetches leased %d jobs, the model has %d pending", round, n, len(pending))
				}
			case r < 80: // outcomes, cancels and purges
				type act struct {
					r    ref
					what string // complete, bury, retry, cancel, purge
					o    store.Outcome
				}
				var acts []act
				for _, r := range jobsWhere(func(j *mjob) bool { return j.state == store.Running }) {
					if rng.IntN(3) == 0 {
						continue // still running
					}
					j := r.m.jobs[r.i]
					switch k := rng.IntN(10); {
					case k < 6:
						acts = append(acts, act{r, "complete", completeOf(j.leased, now)})
					case k < 8:
						acts = append(acts, act{r, "bury", buryNow(j.leased, now)})
					default:
						o := outcome(j.leased, store.Retry, now)
						o.RunAt, o.Error = now, "again"
						acts = append(acts, act{r, "retry", o})
					}
				}
				for _, r := range jobsWhere(func(j *mjob) bool { return j.state == store.Pending || j.state == store.Blocked }) {
					if rng.IntN(12) == 0 {
						acts = append(acts, act{r: r, what: "cancel"})
					}
				}
				for _, r := range jobsWhere(func(j *mjob) bool { return j.state == store.Dead && !j.gone }) {
					if rng.IntN(4) == 0 {
						acts = append(acts, act{r: r, what: "purge"})
					}
				}
				rng.Shuffle(len(acts), func(a, b int) { acts[a], acts[b] = acts[b], acts[a] })
				// The model takes the round's actions in this order; the
				// store in any, since they commute.
				for _, a := range acts {
					m, i := a.r.m, a.r.i
					j := m.jobs[i]
					old := j.state
					switch a.what {
					case "complete":
						j.state = store.Completed
					case "bury":
						j.state = store.Dead
					case "retry":
						j.state = store.Pending
					case "cancel":
						if j.state != store.Pending && j.state != store.Blocked {
							continue // canceled by a cascade of the round
						}
						j.state = store.Canceled
					case "purge":
						logf("round %d: purge %s of workflow %d", round, j.name, m.wid)
						m.deleted(i)
						continue
					}
					logf("round %d: %s %s (%s) of workflow %d", round, a.what, j.name, old, m.wid)
					j.worker = ""
					if j.member {
						m.moved(i, old)
					}
				}
				work := make([][]func(), 4)
				for len(acts) > 0 {
					k := rng.IntN(4)
					if a := acts[0]; a.what == "cancel" || a.what == "purge" {
						acts = acts[1:]
						id := a.r.m.jobs[a.r.i].id
						work[k] = append(work[k], func() {
							var err error
							if a.what == "cancel" {
								// A cascade of the round may cancel it first.
								if _, err = x.s.Cancel(x.ctx, id, now); errors.Is(err, store.ErrConflict) {
									err = nil
								}
							} else if n, perr := x.s.Purge(x.ctx, store.Filter{IDs: []int64{id}}, 10); perr != nil || n != 1 {
								err = fmt.Errorf("purge of job %d: %d, %v; want 1", id, n, perr)
							}
							if err != nil {
								fail(err)
							}
						})
						continue
					}
					var outs []store.Outcome
					for len(acts) > 0 && len(outs) < 1+rng.IntN(4) && acts[0].what != "cancel" && acts[0].what != "purge" {
						outs, acts = append(outs, acts[0].o), acts[1:]
					}
					work[k] = append(work[k], func() {
						applied, err := x.s.Finish(x.ctx, outs)
						if err != nil {
							fail(fmt.Errorf("Finish(%d outcomes): %w", len(outs), err))
							return
						}
						for i, a := range applied {
							if !a {
								fail(fmt.Errorf("outcome for job %d not applied", outs[i].JobID))
							}
						}
					})
				}
				parallel(work)
			case r < 92: // redrives
				var work [][]func()
				dead := jobsWhere(func(j *mjob) bool { return j.state == store.Dead && !j.gone && rng.IntN(2) == 0 })
				for len(dead) > 0 {
					n := min(len(dead), 1+rng.IntN(3))
					var ids []int64
					for _, r := range dead[:n] {
						ids = append(ids, r.m.jobs[r.i].id)
						j := r.m.jobs[r.i]
						logf("round %d: redrive %s of workflow %d", round, j.name, r.m.wid)
						j.state, j.attempt = store.Pending, 0
						if j.member {
							r.m.moved(r.i, store.Dead)
						}
					}
					dead = dead[n:]
					work = append(work, []func(){func() {
						res, err := x.s.Redrive(x.ctx, store.RedriveParams{IDs: ids, Now: now})
						if err == nil && len(res.Redriven) != len(ids) {
							err = fmt.Errorf("redrove %d of %d jobs", len(res.Redriven), len(ids))
						}
						if err != nil {
							fail(fmt.Errorf("Redrive(%v): %w", ids, err))
						}
					}})
				}
				parallel(work)
			default: // retention: every dead job goes
				n, err := x.s.DeleteFinished(x.ctx, store.Dead, now, 1000)
				if err != nil {
					x.t.Fatalf("DeleteFinished(dead): %v", err)
				}
				var want int64
				for _, m := range all {
					for i, j := range m.jobs {
						if j.state == store.Dead && !j.gone {
							want++
							m.deleted(i)
						}
					}
				}
				logf("round %d: retention of %d dead jobs", round, n)
				if n != want {
					x.t.Errorf("round %d: retention deleted %d dead jobs, the model has %d", round, n, want)
				}
			}
			for _, err := range errs {
				x.t.Errorf("round %d: %v", round, err)
			}
			for _, m := range flows {
				m.check(fmt.Sprintf("run %d (%s), round %d, workflow %d", run, policy, round, m.wid))
			}
			if x.t.Failed() {
				x.t.Fatalf("run %d (%s) diverged at round %d (seed %d); actions:\n%s", run, policy, round, seed, log)
			}
		}
		x.checkAllCounts(fmt.Sprintf("run %d", run))
		// CountWorkflows agrees with each workflow's state.
		want := map[store.WorkflowState]int64{}
		for _, st := range store.WorkflowStates {
			want[st] = 0
		}
		for _, m := range all {
			want[x.getFlow(m.wid).State]++
		}
		got, err := x.s.CountWorkflows(x.ctx)
		if err != nil {
			x.t.Fatalf("CountWorkflows: %v", err)
		}
		if !maps.Equal(got, want) {
			x.t.Errorf("run %d: CountWorkflows = %v, the workflows' states %v", run, got, want)
		}
	}
}

// fanInEdges returns the edges of a random DAG of 6 to 20 members where
// about one job in four waits for most of the jobs before it, a few
// for one or two of them, and the others for none.
func fanInEdges(rng *rand.Rand) [][]int {
	n := 6 + rng.IntN(15)
	edges := make([][]int, n)
	for i := 1; i < n; i++ {
		switch rng.IntN(4) {
		case 0: // a fan-in
			for j := range i {
				if rng.IntN(5) != 0 {
					edges[i] = append(edges[i], j)
				}
			}
		case 1:
			for range 1 + rng.IntN(2) {
				if j := rng.IntN(i); !slices.Contains(edges[i], j) {
					edges[i] = append(edges[i], j)
				}
			}
			slices.Sort(edges[i])
		}
	}
	return edges
}
