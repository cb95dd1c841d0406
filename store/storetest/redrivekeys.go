package storetest

import (
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/store"
)

// testRedriveKeys: a redrive that replaces payloads moves each job under
// a limit named in Keys.Limits to that group, and each fair job of a
// queue named in Keys.Fair to that fair key; a job of a limit or queue
// not named keeps its own, as does every job of a redrive without a
// payload; a redriven job then waits on its new group's slots. Bad keys
// are refused and nothing is redriven.
func testRedriveKeys(x *h) {
	fair := store.NewJob{Queue: "rkq", Kind: "k", Fair: true, FairKey: "a"}
	lim := limited("rkq", "rk", "a", 1)
	lim.Fair, lim.FairKey = true, "a"
	other := limited("rkq", "rk-other", "a", 1)
	kept := limited("rkq", "rk", "a", 1)
	jobs := x.enqueue(at(0), fair, lim, other, kept)
	p := store.FetchParams{Queue: "rkq", Limit: 10, Now: at(time.Second), LeaseUntil: at(time.Minute), Worker: "w", FairWeights: map[string]int{}}
	leased := x.fetch(p)
	if len(leased) != 3 { // kept waits on lim's slot of group a
		x.t.Fatalf("fetch leased %v, want 3 jobs", jobIDs(leased))
	}
	for _, j := range leased {
		x.finish(buryOf(j, at(2*time.Second), failure.Permanent, "r", "f", "boom"))
	}
	leased = x.fetchWant(store.FetchParams{Queue: "rkq", Limit: 10, Now: at(3 * time.Second), LeaseUntil: at(time.Minute), Worker: "w", FairWeights: map[string]int{}}, jobs[3].ID)
	x.finish(buryOf(leased[0], at(4*time.Second), failure.Permanent, "r", "f", "boom"))

	bad := store.RedriveKeys{Limits: map[string]string{"rk": strings.Repeat("x", store.MaxLimitName+1)}}
	_, err := x.s.Redrive(x.ctx, store.RedriveParams{IDs: []int64{jobs[1].ID}, Now: at(5 * time.Second), Payload: json.RawMessage(`{}`), Keys: bad})
	if !errors.Is(err, store.ErrInvalid) {
		x.t.Fatalf("Redrive with a key too long = %v, want ErrInvalid", err)
	}
	if j := x.get(jobs[1].ID); j.State != store.Dead {
		x.t.Fatalf("job %d is %s after a refused redrive, want dead", j.ID, j.State)
	}

	keys := store.RedriveKeys{Limits: map[string]string{"rk": "b"}, Fair: map[string]string{"rkq": "b"}}
	// Without a payload, the keys are ignored.
	x.redrive(store.RedriveParams{IDs: []int64{jobs[3].ID}, Now: at(5 * time.Second), Keys: keys})
	x.redrive(store.RedriveParams{IDs: []int64{jobs[0].ID, jobs[1].ID, jobs[2].ID}, Now: at(5 * time.Second), Payload: json.RawMessage(`{"c":"b"}`), Keys: keys})
	for _, c := range []struct {
		id             int64
		limit, key, fk string
	}{
		{jobs[0].ID, "", "", "b"},
		{jobs[1].ID, "rk", "b", "b"},
		{jobs[2].ID, "rk-other", "a", ""},
		{jobs[3].ID, "rk", "a", ""},
	} {
		var lname, lkey string
		l, ok, err := x.s.JobLimit(x.ctx, c.id)
		if err != nil {
			x.t.Fatalf("JobLimit(%d): %v", c.id, err)
		}
		if ok {
			lname, lkey = l.Name, l.Key
		}
		fk, _, err := x.s.JobFairKey(x.ctx, c.id)
		if err != nil {
			x.t.Fatalf("JobFairKey(%d): %v", c.id, err)
		}
		if lname != c.limit || lkey != c.key || fk != c.fk {
			x.t.Errorf("redriven job %d: limit %q group %q fair key %q, want %q %q %q", c.id, lname, lkey, fk, c.limit, c.key, c.fk)
		}
	}
	// Group b of rk has one slot: a new job of it, due first, takes it,
	// and the redriven job waits.
	nb := limited("rkq", "rk", "b", 1)
	nb.RunAt = at(time.Second)
	b := x.enqueue(at(time.Second), nb)[0]
	p = store.FetchParams{Queue: "rkq", Limit: 10, Now: at(6 * time.Second), LeaseUntil: at(time.Minute), Worker: "w", FairWeights: map[string]int{}}
	got := x.fetch(p)
	var ids []int64
	for _, j := range got {
		ids = append(ids, j.ID)
	}
	x.checkIDSet("fetch after the redrive", ids, []int64{jobs[0].ID, jobs[2].ID, jobs[3].ID, b.ID})
}
