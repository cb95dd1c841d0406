package storetest

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/redrivehq/redrive/store"
)

// testWorkflowReleaseHook checks store.Releaser, for the stores that
// implement it: when Finish calls complete workflow jobs in random
// batches, the hook hears, by the time each call returns, exactly the
// queues of the jobs that call released (a final job whose last
// dependency it completed, a success callback of a workflow it ended),
// and each job heard of is due; a call that releases nothing is not
// heard of, and nothing is heard once the hook is removed.
func testWorkflowReleaseHook(x *h) {
	r, ok := x.s.(store.Releaser)
	if !ok {
		x.t.Skip("the store does not implement store.Releaser")
	}
	seed := uint64(time.Now().UnixNano())
	x.t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed>>3))
	var (
		mu    sync.Mutex
		heard = map[string]bool{}
	)
	remove := r.OnRelease(func(queue string) {
		mu.Lock()
		heard[queue] = true
		mu.Unlock()
	})
	took := func() map[string]bool {
		mu.Lock()
		defer mu.Unlock()
		got := heard
		heard = map[string]bool{}
		return got
	}
	now := at(0)
	const flows = 8
	left := map[int64]int{}       // a dependency's workflow
	waiting := make([]int, flows) // per workflow: its dependencies not completed
	for f := range flows {
		w := store.NewWorkflow{OnSuccess: &store.NewJob{Queue: fmt.Sprintf("rh-cb-%d", f), Kind: "cb"}}
		var after []string
		for d := range 1 + rng.IntN(4) {
			name := fmt.Sprint("d", d)
			after = append(after, name)
			w.Jobs = append(w.Jobs, store.WorkflowNode{Name: name, Job: store.NewJob{Queue: "rh-deps", Kind: fmt.Sprint("dep-", f)}})
		}
		w.Jobs = append(w.Jobs, store.WorkflowNode{Name: "final", Job: store.NewJob{Queue: fmt.Sprintf("rh-final-%d", f), Kind: "final"}, After: after})
		if _, err := x.s.EnqueueWorkflow(x.ctx, w, now); err != nil {
			x.t.Fatalf("EnqueueWorkflow: %v", err)
		}
		waiting[f] = len(after)
	}
	if got := took(); len(got) != 0 {
		x.t.Fatalf("the enqueue released nothing, heard %v", slices.Sorted(maps.Keys(got)))
	}
	deps := x.fetch(store.FetchParams{Queue: "rh-deps", Limit: 100, Now: now, LeaseUntil: now.Add(time.Hour), Worker: "w"})
	total := 0
	for _, n := range waiting {
		total += n
	}
	if len(deps) != total {
		x.t.Fatalf("fetched %d dependencies, want %d", len(deps), total)
	}
	for _, j := range deps {
		var f int
		if _, err := fmt.Sscanf(j.Kind, "dep-%d", &f); err != nil || f < 0 || f >= flows {
			x.t.Fatalf("fetched job %d of kind %q", j.ID, j.Kind)
		}
		left[j.ID] = f
	}
	complete := func(jobs []*store.Job) {
		outs := make([]store.Outcome, len(jobs))
		for i, j := range jobs {
			outs[i] = store.Outcome{JobID: j.ID, Queue: j.Queue, Attempt: j.Attempt, Lease: j.Lease, Worker: j.Worker, Kind: store.Complete, At: now}
		}
		x.finish(outs...)
	}
	check := func(what string, want map[string]bool) {
		x.t.Helper()
		got := took()
		if !maps.Equal(got, want) {
			x.t.Fatalf("%s: heard %v, want %v", what, slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)))
		}
	}
	rng.Shuffle(len(deps), func(i, j int) { deps[i], deps[j] = deps[j], deps[i] })
	var finals []*store.Job
	for call := 0; len(deps) > 0; call++ {
		n := min(1+rng.IntN(5), len(deps))
		batch := deps[:n]
		deps = deps[n:]
		want := map[string]bool{}
		for _, j := range batch {
			f := left[j.ID]
			if waiting[f]--; waiting[f] == 0 {
				want[fmt.Sprintf("rh-final-%d", f)] = true
			}
		}
		complete(batch)
		check(fmt.Sprintf("call %d (%d dependencies)", call, n), want)
		for q := range want {
			got := x.fetch(store.FetchParams{Queue: q, Limit: 10, Now: now, LeaseUntil: now.Add(time.Hour), Worker: "w"})
			if len(got) != 1 {
				x.t.Fatalf("heard of %s: fetched %d jobs there, want its final job", q, len(got))
			}
			finals = append(finals, got...)
		}
	}
	if len(finals) != flows {
		x.t.Fatalf("released %d final jobs, want %d", len(finals), flows)
	}
	rng.Shuffle(len(finals), func(i, j int) { finals[i], finals[j] = finals[j], finals[i] })
	for len(finals) > 0 {
		n := min(1+rng.IntN(3), len(finals))
		want := map[string]bool{}
		for _, j := range finals[:n] {
			var f int
			fmt.Sscanf(j.Queue, "rh-final-%d", &f)
			want[fmt.Sprintf("rh-cb-%d", f)] = true
		}
		complete(finals[:n])
		check("the final jobs' completion", want)
		for q := range want {
			if got := x.fetch(store.FetchParams{Queue: q, Limit: 10, Now: now, LeaseUntil: now.Add(time.Hour), Worker: "w"}); len(got) != 1 {
				x.t.Fatalf("heard of %s: fetched %d jobs there, want its callback", q, len(got))
			}
		}
		finals = finals[n:]
	}
	// Removed, the hook hears no more.
	remove()
	w := store.NewWorkflow{Jobs: []store.WorkflowNode{
		{Name: "a", Job: store.NewJob{Queue: "rh-deps", Kind: "dep"}},
		{Name: "b", Job: store.NewJob{Queue: "rh-after", Kind: "final"}, After: []string{"a"}}}}
	if _, err := x.s.EnqueueWorkflow(x.ctx, w, now); err != nil {
		x.t.Fatalf("EnqueueWorkflow: %v", err)
	}
	last := x.fetch(store.FetchParams{Queue: "rh-deps", Limit: 10, Now: now, LeaseUntil: now.Add(time.Hour), Worker: "w"})
	if len(last) != 1 {
		x.t.Fatalf("fetched %d dependencies, want 1", len(last))
	}
	complete(last)
	check("after the hook's removal", map[string]bool{})
}
