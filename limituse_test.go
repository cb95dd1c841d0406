package redrive_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/store"
)

// TestLimitStatesConfigured: the limits a client is configured with are
// listed before any job used them, with their selector and nothing in
// use; a limit the store keeps shows its stored max.
func TestLimitStatesConfigured(t *testing.T) {
	st := openStore(t)
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quietLogger()})
	if err := c.SetLimits([]redrive.ConcurrencyLimit{
		{Name: "per-customer", Kind: "crm", Key: "payload.customer", Max: 1},
		{Name: "mail", Queue: "mail", Max: 3},
	}); err != nil {
		t.Fatal(err)
	}
	ls, err := c.LimitStates(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	want := []store.LimitState{
		{Name: "mail", Max: 3, Configured: true, Queue: "mail"},
		{Name: "per-customer", Max: 1, Configured: true, Kind: "crm", Key: "payload.customer"},
	}
	if len(ls) != 2 || ls[0].Name != want[0].Name || ls[1].Name != want[1].Name {
		t.Fatalf("LimitStates on a fresh store = %+v, want %+v", ls, want)
	}
	for i := range want {
		if !reflect.DeepEqual(ls[i], want[i]) {
			t.Errorf("limit %d = %+v, want %+v", i, ls[i], want[i])
		}
	}
	// A max set at run time wins, and a limit only the store keeps is
	// listed, unconfigured.
	if _, err := c.SetLimitMax(t.Context(), "mail", 7); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SetLimitMax(t.Context(), "elsewhere", 2); err != nil {
		t.Fatal(err)
	}
	ls, err = c.LimitStates(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(ls) != 3 || ls[0].Name != "elsewhere" || ls[0].Configured || ls[1].Name != "mail" || ls[1].Max != 7 || !ls[1].Configured || ls[1].Queue != "mail" {
		t.Errorf("LimitStates = %+v, want elsewhere (not configured), mail (max 7), per-customer", ls)
	}
}

// TestGetJobLimit: Get says which limit a job is under, its group's use,
// and whether it waits on the limit (due, its group full), which uses no
// attempt.
func TestGetJobLimit(t *testing.T) {
	st := openStore(t)
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quietLogger()})
	if err := c.SetLimits([]redrive.ConcurrencyLimit{{Name: "per-customer", Queue: "crm", Key: "payload.customer", Max: 1}}); err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for range 2 {
		js, err := c.EnqueueMany(t.Context(), []redrive.Request{{Queue: "crm", Kind: "call", Payload: map[string]string{"customer": "c1"}}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, js[0].ID)
	}
	frees, err := c.EnqueueMany(t.Context(), []redrive.Request{{Queue: "other", Kind: "call"}})
	if err != nil {
		t.Fatal(err)
	}
	free := frees[0]
	// Before any runs, the first is due and its group has a free slot.
	j, err := c.Get(t.Context(), ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if j.Limit == nil || *j.Limit != (store.JobLimit{Name: "per-customer", Key: "c1", Max: 1}) {
		t.Errorf("Get(first) limit = %+v, want per-customer, c1, 0 of 1, not waiting", j.Limit)
	}
	now := time.Now()
	got, err := st.Fetch(t.Context(), store.FetchParams{Queue: "crm", Limit: 10, Now: now, LeaseUntil: now.Add(time.Minute), Worker: "w"})
	if err != nil || len(got) != 1 || got[0].ID != ids[0] {
		t.Fatalf("Fetch = %v, %v; want job %d alone", got, err, ids[0])
	}
	j, err = c.Get(t.Context(), ids[1])
	if err != nil {
		t.Fatal(err)
	}
	if j.Limit == nil || *j.Limit != (store.JobLimit{Name: "per-customer", Key: "c1", Max: 1, Running: 1, Waiting: true}) || j.Attempt != 0 {
		t.Errorf("Get(second) = attempt %d, limit %+v; want attempt 0, waiting on per-customer, c1, 1 of 1", j.Attempt, j.Limit)
	}
	j, err = c.Get(t.Context(), ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if j.Limit == nil || j.Limit.Waiting || j.Limit.Running != 1 {
		t.Errorf("Get(running) limit = %+v, want 1 running, not waiting", j.Limit)
	}
	if j, err := c.Get(t.Context(), free.ID); err != nil || j.Limit != nil {
		t.Errorf("Get(unlimited) limit = %+v, %v; want none", j.Limit, err)
	}
}

// TestJobLimitWaitingOnRate: a job's limit says it waits when its
// group's rate holds it, with a free slot or with no max, and says so
// only then: a due job of a rate-only limit whose rate allows a start
// does not wait on it.
func TestJobLimitWaitingOnRate(t *testing.T) {
	st := openStore(t)
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quietLogger()})
	if err := c.SetLimits([]redrive.ConcurrencyLimit{
		{Name: "only", Queue: "q1", Rate: "1/h"},
		{Name: "both", Queue: "q2", Max: 5, Rate: "1/h"},
	}); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"q1", "q2"} {
		js, err := c.EnqueueMany(t.Context(), []redrive.Request{{Queue: q, Kind: "k"}, {Queue: q, Kind: "k"}})
		if err != nil {
			t.Fatal(err)
		}
		j, err := c.Get(t.Context(), js[1].ID)
		if err != nil || j.Limit == nil || j.Limit.Waiting || !j.Limit.NextStart.IsZero() {
			t.Fatalf("%s: job before any start: limit %+v, %v; want not waiting (its rate allows a start)", q, j.Limit, err)
		}
		now := time.Now()
		got, err := st.Fetch(t.Context(), store.FetchParams{Queue: q, Limit: 10, Now: now, LeaseUntil: now.Add(time.Minute), Worker: "w"})
		if err != nil || len(got) != 1 {
			t.Fatalf("%s: Fetch = %d jobs, %v; want 1", q, len(got), err)
		}
		held := js[1].ID
		if got[0].ID == held {
			held = js[0].ID
		}
		j, err = c.Get(t.Context(), held)
		if err != nil || j.Limit == nil || !j.Limit.Waiting || !j.Limit.NextStart.After(now.Add(59*time.Minute)) {
			t.Errorf("%s: job its rate holds: limit %+v, %v; want waiting until about an hour on", q, j.Limit, err)
		}
	}
}
