package storetest

import (
	"time"

	"github.com/redrivehq/redrive/store"
)

// testLimitsSlotWaitDeep: SlotWait sees a due job waiting on a full
// group's slot however many due limited jobs come before it. With more
// than 1,000 waiting jobs of a full group ahead of one free group, the
// fetch leases the free group's job and says jobs wait on a slot; with
// more than 1,000 waiting jobs of a group its rate holds ahead of one
// job of a full group, it leases none and says a job waits on a slot
// (before, SlotWait read only the first 1,000 due limited jobs, and the
// worker slept until the rate's next start, blind to the slot another
// process may free).
func testLimitsSlotWaitDeep(x *h) {
	const flood = 1100
	var next time.Time
	slotWait := false
	p := store.FetchParams{Limit: 10, Now: at(time.Second), LeaseUntil: at(time.Hour), Worker: "w1", NextStart: &next, SlotWait: &slotWait}

	// Full groups ahead of a free one.
	first := x.enqueue(at(0), rated("fq", "one", "full", 1, store.LimitRate{}))
	p.Queue = "fq"
	x.fetchWant(p, first[0].ID)
	nj := make([]store.NewJob, flood)
	for i := range nj {
		nj[i] = rated("fq", "one", "full", 1, store.LimitRate{})
	}
	x.enqueueMany(at(0), nj)
	free := x.enqueue(at(0), rated("fq", "one", "free", 1, store.LimitRate{}))
	p.Now = at(2 * time.Second)
	x.fetchWant(p, free[0].ID)
	if !slotWait {
		x.t.Errorf("full groups' jobs ahead of a free group: SlotWait false, want true")
	}

	// A rate-held flood ahead of a job waiting on a full group.
	slow := store.LimitRate{N: 1, Per: time.Hour, Burst: 1}
	first = x.enqueue(at(0), rated("rq", "slow", "h", 0, slow), rated("rq", "cap", "c", 1, store.LimitRate{}))
	p.Queue, p.Now = "rq", at(time.Second)
	x.fetchWant(p, first[0].ID, first[1].ID)
	nj = make([]store.NewJob, flood)
	for i := range nj {
		nj[i] = rated("rq", "slow", "h", 0, slow)
	}
	x.enqueueMany(at(0), nj)
	x.enqueue(at(0), rated("rq", "cap", "c", 1, store.LimitRate{}))
	for i := range 2 { // the selection, then the fetch that skips it
		slotWait = false
		p.Now = at(2*time.Second + time.Duration(i)*time.Millisecond)
		x.fetchWant(p)
		if !slotWait {
			x.t.Errorf("fetch %d: a job waits on a full group behind %d jobs a rate holds: SlotWait false, want true", i, flood)
		}
	}
}
