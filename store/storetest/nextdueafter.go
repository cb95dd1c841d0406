package storetest

import (
	"time"

	"github.com/redrivehq/redrive/store"
)

// testNextDueAfter: NextDueAfter reads the earliest run_at strictly
// after its time among a queue's waiting jobs, limited, fair or neither, of any
// priority; not running, finished or other queues' jobs; none is ok
// false.
func testNextDueAfter(x *h) {
	want := func(after time.Time, w time.Time, wok bool) {
		x.t.Helper()
		got, ok, err := x.s.NextDueAfter(x.ctx, "nda", after)
		if err != nil || ok != wok || (ok && !got.Equal(w)) {
			x.t.Fatalf("NextDueAfter(%v) = %v, %v, %v; want %v, %v", after, got, ok, err, w, wok)
		}
	}
	want(at(0), time.Time{}, false)
	now := rated("nda", "ndl", "a", 1, store.LimitRate{})
	lim := rated("nda", "ndl", "b", 1, store.LimitRate{})
	lim.RunAt = at(3 * time.Second)
	hi := store.NewJob{Queue: "nda", Kind: "k", Priority: 5, RunAt: at(5 * time.Second)}
	lo := store.NewJob{Queue: "nda", Kind: "k", RunAt: at(2 * time.Second)}
	other := store.NewJob{Queue: "nda-other", Kind: "k", RunAt: at(time.Second)}
	fair := store.NewJob{Queue: "nda", Kind: "k", Fair: true, FairKey: "t", RunAt: at(4 * time.Second)}
	x.enqueue(at(0), now, lim, hi, lo, other, fair)
	want(at(0), at(2*time.Second), true)
	want(at(2*time.Second), at(3*time.Second), true) // strictly after
	want(at(3*time.Second), at(4*time.Second), true) // a fair job's
	want(at(4*time.Second), at(5*time.Second), true)
	want(at(5*time.Second), time.Time{}, false)
	// A leased job is not waiting.
	p := store.FetchParams{Queue: "nda", Limit: 10, Now: at(2 * time.Second), LeaseUntil: at(time.Hour), Worker: "w1"}
	if got, err := x.s.Fetch(x.ctx, p); err != nil || len(got) != 2 {
		x.t.Fatalf("Fetch at 2s = %d jobs, %v; want 2 (the limited job due now and the one due at 2s)", len(got), err)
	}
	want(at(0), at(3*time.Second), true)
}
