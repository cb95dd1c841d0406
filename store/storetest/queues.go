package storetest

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/store"
)

// setPaused calls SetPaused and fails on an error.
func (x *h) setPaused(queue string, paused bool, now time.Time) store.QueueState {
	x.t.Helper()
	st, err := x.s.SetPaused(x.ctx, queue, paused, now)
	if err != nil {
		x.t.Fatalf("SetPaused(%q, %v): %v", queue, paused, err)
	}
	return st
}

// queues calls Queues and fails on an error.
func (x *h) queues() []store.QueueState {
	x.t.Helper()
	qs, err := x.s.Queues(x.ctx)
	if err != nil {
		x.t.Fatalf("Queues: %v", err)
	}
	if qs == nil {
		x.t.Fatal("Queues returned nil, want a (possibly empty) slice")
	}
	return qs
}

// fmtQueue formats a queue state for comparison and messages.
func fmtQueue(q store.QueueState) string {
	at := "-"
	if !q.PausedAt.IsZero() {
		at = fmtTime(q.PausedAt)
	}
	return fmt.Sprintf("{%q paused=%v at=%s}", q.Name, q.Paused, at)
}

// checkQueue fails unless got is the state want.
func (x *h) checkQueue(what string, got, want store.QueueState) {
	x.t.Helper()
	if fmtQueue(got) != fmtQueue(want) {
		x.t.Errorf("%s: %s, want %s", what, fmtQueue(got), fmtQueue(want))
	}
}

// checkQueues fails unless got lists exactly want, in that order.
func (x *h) checkQueues(what string, got, want []store.QueueState) {
	x.t.Helper()
	g := make([]string, len(got))
	for i, q := range got {
		g[i] = fmtQueue(q)
	}
	w := make([]string, len(want))
	for i, q := range want {
		w[i] = fmtQueue(q)
	}
	if !slices.Equal(g, w) {
		x.t.Errorf("%s:\n got %v\nwant %v", what, g, w)
	}
}

// testQueuesPause: pause and resume, both idempotent; a second pause
// keeps the time of the first; a queue needs no jobs to be paused; a
// resumed queue stays listed; times in other zones are the same instants.
func testQueuesPause(x *h) {
	x.checkQueues("Queues of an empty store", x.queues(), []store.QueueState{})

	paused := store.QueueState{Name: "mail", Paused: true, PausedAt: at(time.Second)}
	east := time.FixedZone("UTC+5", 5*3600)
	x.checkQueue("pause", x.setPaused("mail", true, at(time.Second).In(east)), paused)
	x.checkQueues("Queues after a pause", x.queues(), []store.QueueState{paused})
	x.checkQueue("pause again", x.setPaused("mail", true, at(time.Minute)), paused)
	x.checkQueues("Queues after a second pause", x.queues(), []store.QueueState{paused})

	resumed := store.QueueState{Name: "mail"}
	x.checkQueue("resume", x.setPaused("mail", false, at(2*time.Minute)), resumed)
	x.checkQueue("resume again", x.setPaused("mail", false, at(3*time.Minute)), resumed)
	x.checkQueues("Queues after resume", x.queues(), []store.QueueState{resumed})

	// A fresh pause records its own time.
	x.checkQueue("pause after resume", x.setPaused("mail", true, at(time.Hour)),
		store.QueueState{Name: "mail", Paused: true, PausedAt: at(time.Hour)})
	// Resuming a queue never paused remembers it.
	x.checkQueue("resume a new queue", x.setPaused("other", false, at(time.Hour)), store.QueueState{Name: "other"})
	x.checkQueues("Queues", x.queues(), []store.QueueState{
		{Name: "mail", Paused: true, PausedAt: at(time.Hour)}, {Name: "other"},
	})

	// Pausing changes no job: they stay waiting, and the store still
	// leases them when asked (workers, not stores, honour a pause).
	j := x.enqueue(at(time.Hour), store.NewJob{Queue: "mail", Kind: "k"})[0]
	if got := x.get(j.ID); got.State != store.Pending {
		x.t.Errorf("job of a paused queue is %s, want pending", got.State)
	}
	x.fetchWant(store.FetchParams{Queue: "mail", Limit: 10, Now: at(2 * time.Hour), LeaseUntil: at(3 * time.Hour), Worker: "w"}, j.ID)
}

// testQueuesListing: Queues lists the queues with jobs (in any state) or
// counters as well as the paused ones, sorted by name as Go compares
// strings (bytes), not by a database collation.
func testQueuesListing(x *h) {
	x.enqueue(at(0), store.NewJob{Queue: "b", Kind: "k"}, store.NewJob{Queue: "ä", Kind: "k"}, store.NewJob{Queue: "B", Kind: "k"})
	// A queue whose only job is dead.
	d := x.leaseNew(at(0), "w", store.NewJob{Queue: "a", Kind: "k"})[0]
	x.finish(buryOf(d, at(time.Second), failure.Permanent, "r", "f", "boom"))
	// A queue with no job, paused before its first job exists.
	x.setPaused("c", true, at(2*time.Second))
	x.setPaused("b", false, at(2*time.Second))

	want := []store.QueueState{{Name: "B"}, {Name: "a"}, {Name: "b"}, {Name: "c", Paused: true, PausedAt: at(2 * time.Second)}, {Name: "ä"}}
	x.checkQueues("Queues", x.queues(), want)

	// Queues stay listed when their jobs are gone (their counters remain).
	if n, err := x.s.Purge(x.ctx, store.Filter{Queue: "a"}, 10); err != nil || n != 1 {
		x.t.Fatalf("Purge = %d, %v; want 1, nil", n, err)
	}
	x.checkQueues("Queues after a purge", x.queues(), want)
}

// testQueuesInvalid: an empty queue name is ErrInvalid, and calls after
// Close wrap ErrClosed.
func testQueuesInvalid(x *h) {
	_, err := x.s.SetPaused(x.ctx, "", true, at(0))
	x.checkErr(`SetPaused("")`, err, store.ErrInvalid)
	x.checkQueues("Queues after a refused pause", x.queues(), []store.QueueState{})
	if err := x.s.Close(); err != nil {
		x.t.Fatalf("Close: %v", err)
	}
	_, err = x.s.Queues(x.ctx)
	x.checkErr("Queues after Close", err, store.ErrClosed)
	_, err = x.s.SetPaused(x.ctx, "q", true, at(0))
	x.checkErr("SetPaused after Close", err, store.ErrClosed)
}

// testQueuesConcurrent: concurrent pauses of one queue all succeed and
// all report the time of the one that won.
func testQueuesConcurrent(x *h) {
	const n = 8
	states := make([]store.QueueState, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			states[i], errs[i] = x.s.SetPaused(x.ctx, "q", true, at(time.Duration(i+1)*time.Second))
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		x.t.Fatalf("concurrent SetPaused: %v", err)
	}
	first := states[0].PausedAt
	winner := false
	for i := range n {
		if sameTime(first, at(time.Duration(i+1)*time.Second)) {
			winner = true
		}
	}
	if !winner {
		x.t.Fatalf("PausedAt %s is none of the pauses' times", fmtTime(first))
	}
	want := store.QueueState{Name: "q", Paused: true, PausedAt: first}
	for i, st := range states {
		x.checkQueue(fmt.Sprintf("pause %d", i), st, want)
	}
	x.checkQueues("Queues", x.queues(), []store.QueueState{want})
}

// testOldestDue: OldestDue reports, per queue asked for, the run_at of
// the oldest pending or scheduled job due at now; running, finished and
// future jobs, and queues not asked for, do not count.
func testOldestDue(x *h) {
	oldest := func(what string, queues []string, now time.Time, want map[string]time.Time) {
		x.t.Helper()
		got, err := x.s.OldestDue(x.ctx, queues, now)
		if err != nil {
			x.t.Fatalf("%s: OldestDue: %v", what, err)
		}
		if got == nil {
			x.t.Fatalf("%s: OldestDue returned nil, want a (possibly empty) map", what)
		}
		fmtMap := func(m map[string]time.Time) string {
			keys := slices.Sorted(maps.Keys(m))
			parts := make([]string, len(keys))
			for i, k := range keys {
				parts[i] = k + "=" + fmtTime(m[k])
			}
			return fmt.Sprint(parts)
		}
		if fmtMap(got) != fmtMap(want) {
			x.t.Errorf("%s: OldestDue(%q) = %s, want %s", what, queues, fmtMap(got), fmtMap(want))
		}
	}
	oldest("empty store", []string{"la", "lb"}, at(0), map[string]time.Time{})
	oldest("no queue", nil, at(0), map[string]time.Time{})
	jobs := x.enqueue(at(-time.Hour),
		store.NewJob{Queue: "la", Kind: "k", RunAt: at(-time.Hour)},        // pending, oldest of la
		store.NewJob{Queue: "la", Kind: "k", RunAt: at(-30 * time.Minute)}, // scheduled when enqueued, due now
		store.NewJob{Queue: "la", Kind: "k", RunAt: at(time.Hour)},         // scheduled, not due
		store.NewJob{Queue: "lb", Kind: "k", RunAt: at(time.Minute)},       // scheduled, not due at 0
		store.NewJob{Queue: "lc", Kind: "k", RunAt: at(-2 * time.Hour)},    // due, not asked for
	)
	oldest("due jobs", []string{"la", "lb", "unknown"}, at(0), map[string]time.Time{"la": at(-time.Hour)})
	oldest("a scheduled job comes due", []string{"lb"}, at(time.Minute), map[string]time.Time{"lb": at(time.Minute)})
	oldest("a time zone", []string{"la"}, at(0).In(time.FixedZone("x", -5*3600)), map[string]time.Time{"la": at(-time.Hour)})
	// Running jobs are not waiting: the oldest due job is the next one.
	x.fetchWant(store.FetchParams{Queue: "la", Limit: 1, Now: at(0), LeaseUntil: at(time.Minute), Worker: "w"}, jobs[0].ID)
	oldest("after a fetch", []string{"la", "lc"}, at(0), map[string]time.Time{"la": at(-30 * time.Minute), "lc": at(-2 * time.Hour)})
	j := x.fetchWant(store.FetchParams{Queue: "la", Limit: 1, Now: at(0), LeaseUntil: at(time.Minute), Worker: "w"}, jobs[1].ID)[0]
	x.finish(completeOf(j, at(time.Second)))
	oldest("after a completion", []string{"la"}, at(0), map[string]time.Time{})
	oldest("later", []string{"la"}, at(2*time.Hour), map[string]time.Time{"la": at(time.Hour)})
	x.cancel(jobs[2].ID, at(time.Second))
	oldest("after a cancel", []string{"la"}, at(2*time.Hour), map[string]time.Time{})
}
