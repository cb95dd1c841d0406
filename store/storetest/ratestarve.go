package storetest

import (
	"slices"

	"time"

	"github.com/redrivehq/redrive/store"
)

// testLimitsRateWindowStarve: a group its rate holds does not hold back
// the other groups of its limit behind its backlog: with one customer's
// flood of more jobs than the fetch's window waiting on its rate, another
// customer's job starts at the next fetch, and a fetch that leases none
// says when the flood's group can start next.
func testLimitsRateWindowStarve(x *h) {
	const flood = 1100
	r := store.LimitRate{N: 1, Per: time.Hour, Burst: 1}
	nj := make([]store.NewJob, flood)
	for i := range nj {
		nj[i] = rated("q", "cust", "big", 0, r)
	}
	x.enqueueMany(at(0), nj)
	small := x.enqueue(at(time.Second), rated("q", "cust", "small", 0, r), rated("q", "cust", "small", 0, r))
	late := small[0]
	var next time.Time
	p := store.FetchParams{Queue: "q", Limit: 10, Now: at(2 * time.Second), LeaseUntil: at(2 * time.Hour), Worker: "w", NextStart: &next}
	// The first fetch sees big's oldest jobs only and starts one; the
	// next, with big held by its rate, must start small's.
	ids := jobIDs(x.fetch(p))
	ids = append(ids, jobIDs(x.fetch(p))...)
	if len(ids) != 2 || !slices.Contains(ids, late.ID) {
		x.t.Fatalf("two fetches with group big held by its rate behind its %d waiting jobs leased %v, want one of big and group small's job %d",
			flood, ids, late.ID)
	}
	p.Now = at(3 * time.Second)
	x.fetchWant(p)
	if want := at(2*time.Second + time.Hour); !sameTime(next, want) {
		x.t.Errorf("NextStart with big held = %s, want %s", fmtTime(next), fmtTime(want))
	}
	p.Now = at(2*time.Second + time.Hour)
	ids = jobIDs(x.fetch(p))
	ids = append(ids, jobIDs(x.fetch(p))...)
	if len(ids) != 2 || !slices.Contains(ids, small[1].ID) {
		x.t.Errorf("two fetches at the groups' next start leased %v, want one of big and small's job %d", ids, small[1].ID)
	}
}
