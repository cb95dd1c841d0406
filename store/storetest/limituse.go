package storetest

import (
	"errors"
	"reflect"
	"time"

	"github.com/redrivehq/redrive/store"
)

// testLimitUse: LimitGroups lists a limit's groups with running jobs,
// busiest first and bounded; JobLimit says which limit and group a job
// is under and the group's use; a statistics snapshot records the use of
// each limit with a running job, and no counter of a queue "".
func testLimitUse(x *h) {
	var nj []store.NewJob
	for _, k := range []string{"a", "a", "a", "b", "c", "c", "a"} {
		nj = append(nj, limited("q", "use", k, 3))
	}
	nj = append(nj, store.NewJob{Queue: "q", Kind: "k"}, limited("q", "other", "", 4))
	jobs := x.enqueue(at(0), nj...)
	ids := jobIDs(jobs)
	p := store.FetchParams{Queue: "q", Limit: 20, Now: at(time.Second), LeaseUntil: at(time.Minute), Worker: "w1"}
	leased := map[int64]*store.Job{}
	for _, j := range x.fetchWant(p, ids[0], ids[1], ids[2], ids[3], ids[4], ids[5], ids[7], ids[8]) {
		leased[j.ID] = j
	}

	groups := func(name string, n int) []store.LimitGroup {
		x.t.Helper()
		g, err := x.s.LimitGroups(x.ctx, name, n)
		if err != nil {
			x.t.Fatalf("LimitGroups(%q, %d): %v", name, n, err)
		}
		return g
	}
	if g, want := groups("use", 10), []store.LimitGroup{{Key: "a", Running: 3}, {Key: "c", Running: 2}, {Key: "b", Running: 1}}; !reflect.DeepEqual(g, want) {
		x.t.Errorf("LimitGroups(use, 10) = %+v, want %+v", g, want)
	}
	if g, want := groups("use", 2), []store.LimitGroup{{Key: "a", Running: 3}, {Key: "c", Running: 2}}; !reflect.DeepEqual(g, want) {
		x.t.Errorf("LimitGroups(use, 2) = %+v, want %+v", g, want)
	}
	if g := groups("none", 10); g == nil || len(g) != 0 {
		x.t.Errorf("LimitGroups of an unknown limit = %#v, want an empty list", g)
	}
	for _, n := range []int{0, -1, store.MaxLimitGroups + 1} {
		if _, err := x.s.LimitGroups(x.ctx, "use", n); !errors.Is(err, store.ErrInvalid) {
			x.t.Errorf("LimitGroups(use, %d) = %v, want ErrInvalid", n, err)
		}
	}

	jobLimit := func(id int64) (store.JobLimit, bool) {
		x.t.Helper()
		l, ok, err := x.s.JobLimit(x.ctx, id)
		if err != nil {
			x.t.Fatalf("JobLimit(%d): %v", id, err)
		}
		return l, ok
	}
	// The fourth job of group a waits on its full group.
	if l, ok := jobLimit(ids[6]); !ok || l != (store.JobLimit{Name: "use", Key: "a", Max: 3, Running: 3}) {
		x.t.Errorf("JobLimit(waiting job) = %+v, %v; want use, a, max 3, 3 running", l, ok)
	}
	if l, ok := jobLimit(ids[4]); !ok || l != (store.JobLimit{Name: "use", Key: "c", Max: 3, Running: 2}) {
		x.t.Errorf("JobLimit(running job) = %+v, %v; want use, c, max 3, 2 running", l, ok)
	}
	if l, ok := jobLimit(ids[8]); !ok || l != (store.JobLimit{Name: "other", Key: "", Max: 4, Running: 1}) {
		x.t.Errorf("JobLimit(job of a limit without key) = %+v, %v; want other, \"\", max 4, 1 running", l, ok)
	}
	if l, ok := jobLimit(ids[7]); ok {
		x.t.Errorf("JobLimit(unlimited job) = %+v, true; want none", l)
	}
	if l, ok := jobLimit(ids[8] + 1000); ok {
		x.t.Errorf("JobLimit(no such job) = %+v, true; want none", l)
	}
	// A max set at run time is the one JobLimit reports.
	if _, err := x.s.SetLimit(x.ctx, "use", 5, at(time.Second)); err != nil {
		x.t.Fatal(err)
	}
	if l, _ := jobLimit(ids[6]); l.Max != 5 {
		x.t.Errorf("JobLimit after SetLimit(use, 5) = %+v, want max 5", l)
	}

	// Snapshots record the use of the limits with running jobs.
	m0 := base.Truncate(time.Minute).Add(time.Hour)
	if err := x.s.Snapshot(x.ctx, m0); err != nil {
		x.t.Fatalf("Snapshot: %v", err)
	}
	x.finish(completeOf(leased[ids[8]], at(2*time.Second)))
	var outs []store.Outcome
	for _, id := range ids[:6] {
		outs = append(outs, completeOf(leased[id], at(2*time.Second)))
	}
	x.finish(outs[:3]...) // group a ends: use has b and c left
	if err := x.s.Snapshot(x.ctx, m0.Add(time.Minute)); err != nil {
		x.t.Fatalf("Snapshot: %v", err)
	}
	x.finish(outs[3:]...)
	if err := x.s.Snapshot(x.ctx, m0.Add(2*time.Minute)); err != nil {
		x.t.Fatalf("Snapshot: %v", err)
	}
	snaps, err := x.s.Snapshots(x.ctx, m0)
	if err != nil {
		x.t.Fatalf("Snapshots: %v", err)
	}
	want := []map[string]store.LimitSample{
		{"use": {InUse: 6, Busiest: 3}, "other": {InUse: 1, Busiest: 1}},
		{"use": {InUse: 3, Busiest: 2}},
		nil,
	}
	if len(snaps) != len(want) {
		x.t.Fatalf("Snapshots = %d minutes, want %d", len(snaps), len(want))
	}
	for i, sn := range snaps {
		if len(sn.Limits) != 0 || len(want[i]) != 0 {
			if !reflect.DeepEqual(sn.Limits, want[i]) {
				x.t.Errorf("snapshot %d: Limits = %+v, want %+v", i, sn.Limits, want[i])
			}
		}
		if _, ok := sn.Counters[""]; ok {
			x.t.Errorf("snapshot %d: counters of a queue \"\": %+v", i, sn.Counters[""])
		}
	}
}
