package storetest

import (
	"time"

	"github.com/redrivehq/redrive/store"
)

// testLimitsReplayLimited: a replay's copy of a job under a limit is
// under the same limit and group: it waits on the group's rate and
// slots, as its source did, rather than start at once.
func testLimitsReplayLimited(x *h) {
	r := store.LimitRate{N: 1, Per: time.Hour, Burst: 1}
	src := x.enqueue(at(0), rated("rp", "replay", "a", 1, r))[0]
	p := store.FetchParams{Queue: "rp", Limit: 10, Now: at(time.Second), LeaseUntil: at(2 * time.Hour), Worker: "w"}
	j := x.fetchWant(p, src.ID)[0]
	x.finish(completeOf(j, at(2*time.Second)))
	op := x.createOp(store.NewOperation{ID: opID(1), Kind: store.OpReplay, Params: store.OperationParams{
		Filter: store.Filter{Queue: "rp", States: []store.State{store.Completed}}, Batch: 10}}, at(time.Minute))
	op = x.claimOp(op.ID, "w1", at(time.Minute))
	x.runOp(op, "w1", 10, at(time.Minute))
	copies := x.listAll(store.Filter{Queue: "rp", States: []store.State{store.Pending}}, 10)
	if len(copies) != 1 || copies[0].ReplayOf != src.ID {
		x.t.Fatalf("replay made %v, want one copy of %d", jobIDs(copies), src.ID)
	}
	// The group's rate allows its next start at 1h+1s.
	p.Now = at(2 * time.Minute)
	x.fetchWant(p)
	p.Now = at(time.Hour + time.Second)
	x.fetchWant(p, copies[0].ID)
}
