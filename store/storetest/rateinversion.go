package storetest

import (
	"time"

	"github.com/redrivehq/redrive/store"
)

// testLimitsPriorityInversion: a fetch takes the due jobs of its queue
// by priority whether they are limited or not: a due job of a higher
// priority without a limit is not left behind lower-priority limited
// jobs that fill the fetch, and a limited job of a higher priority goes
// before unlimited ones.
func testLimitsPriorityInversion(x *h) {
	r := store.LimitRate{N: 1000, Per: time.Second, Burst: 100}
	var nj []store.NewJob
	for range 3 {
		nj = append(nj, rated("pi", "inv", "", 0, r))
	}
	hi := store.NewJob{Queue: "pi", Kind: "k", Priority: 10}
	nj = append(nj, hi)
	mid := rated("pi", "inv", "", 0, r)
	mid.Priority = 5
	nj = append(nj, mid, store.NewJob{Queue: "pi", Kind: "k", Priority: 1})
	jobs := x.enqueue(at(0), nj...)
	p := store.FetchParams{Queue: "pi", Limit: 1, Now: at(time.Second), LeaseUntil: at(time.Hour), Worker: "w"}
	x.fetchWant(p, jobs[3].ID) // unlimited, priority 10
	x.fetchWant(p, jobs[4].ID) // limited, priority 5
	p.Limit = 2
	x.fetchWant(p, jobs[5].ID, jobs[0].ID) // unlimited 1, then limited 0
}
