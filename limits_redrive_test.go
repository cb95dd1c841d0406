package redrive_test

import (
	"errors"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/store"
)

// buryOne leases the job id of queue q in st and buries it, so that it
// is dead.
func buryOne(t *testing.T, st store.Store, q string, id int64, now time.Time) {
	t.Helper()
	jobs, err := st.Fetch(t.Context(), store.FetchParams{Queue: q, Limit: 10, Now: now, LeaseUntil: now.Add(time.Minute), Worker: "w-bury"})
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 1 || jobs[0].ID != id {
		t.Fatalf("fetch leased %d jobs, want only job %d", len(jobs), id)
	}
	j := jobs[0]
	if _, err := st.Finish(t.Context(), []store.Outcome{{JobID: j.ID, Queue: j.Queue, Attempt: j.Attempt, Lease: j.Lease,
		Worker: "w-bury", Kind: store.Bury, At: now, Error: "boom", DeadReason: "test"}}); err != nil {
		t.Fatal(err)
	}
}

// TestRedriveEditRekeysLimit: a job under a limit keyed on a payload
// field, edited and redriven with the field changed, is in the group its
// new payload names, and has the fair key it names. Before, it kept the
// group and fair key of its old payload, so the new group's limit was
// exceeded: with max 1 per customer, customer B had two jobs running at
// once.
func TestRedriveEditRekeysLimit(t *testing.T) {
	st := openStore(t)
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quietLogger()})
	if err := c.SetLimits([]redrive.ConcurrencyLimit{{Name: "crm", Queue: "crm", Key: "payload.customer", Max: 1}}); err != nil {
		t.Fatal(err)
	}
	if err := c.SetFairShares([]redrive.FairShare{{Queue: "crm", Key: "payload.customer"}}); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	a, err := c.Enqueue(ctx, "crm.call", map[string]string{"customer": "A"}, redrive.InQueue("crm"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().Add(time.Second)
	buryOne(t, st, "crm", a.ID, now)
	if _, err := c.Redrive(ctx, redrive.RedriveRequest{IDs: []int64{a.ID}, Payload: map[string]string{"customer": "B"}}); err != nil {
		t.Fatal(err)
	}
	got, err := c.Get(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Limit == nil || got.Limit.Name != "crm" || got.Limit.Key != "B" {
		t.Errorf("redriven job's limit = %+v, want crm group B (its new payload's)", got.Limit)
	}
	if got.FairKey == nil || *got.FairKey != "B" {
		t.Errorf("redriven job's fair key = %q, want B (its new payload's)", derefOr(got.FairKey))
	}
	// Customer B's one slot taken by another job: the redriven job, now
	// B's, must wait.
	b, err := c.Enqueue(ctx, "crm.call", map[string]string{"customer": "B"}, redrive.InQueue("crm"),
		redrive.At(now.Add(-time.Hour)))
	if err != nil {
		t.Fatal(err)
	}
	p := store.FetchParams{Queue: "crm", Limit: 1, Now: now.Add(time.Second), LeaseUntil: now.Add(time.Minute), Worker: "w"}
	first, err := st.Fetch(ctx, p)
	if err != nil || len(first) != 1 || first[0].ID != b.ID {
		t.Fatalf("first fetch = %v, %v; want B's older job %d", first, err, b.ID)
	}
	p.Limit = 10
	more, err := st.Fetch(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range more {
		t.Errorf("job %d (payload %s) leased while customer B's one slot is held by job %d", j.ID, j.Payload, b.ID)
	}
}

func derefOr(p *string) string {
	if p == nil {
		return "<none>"
	}
	return *p
}

// TestRedriveEditKeysOperation: a redrive operation with a replacement
// payload moves its jobs to the groups the payload names too, and a
// payload lacking a limit's key field is refused, naming it, when the
// redrive selects that limit's jobs, with nothing redriven.
func TestRedriveEditKeysOperation(t *testing.T) {
	st := openStore(t)
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quietLogger()})
	if err := c.SetLimits([]redrive.ConcurrencyLimit{
		{Name: "crm", Queue: "crm", Key: "payload.customer", Max: 1},
		{Name: "web", Queue: "web", Key: "host", Max: 1},
	}); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	a, err := c.Enqueue(ctx, "crm.call", map[string]string{"customer": "A"}, redrive.InQueue("crm"))
	if err != nil {
		t.Fatal(err)
	}
	buryOne(t, st, "crm", a.ID, time.Now().Add(time.Second))
	// The payload lacks the customer: refused, naming the field.
	_, err = c.Redrive(ctx, redrive.RedriveRequest{IDs: []int64{a.ID}, Payload: map[string]string{"url": "https://x.example/"}})
	var fe *redrive.FieldError
	if !errors.Is(err, redrive.ErrInvalid) || !errors.As(err, &fe) || fe.Field != "payload.customer" {
		t.Fatalf("Redrive without the key field = %v, want ErrInvalid naming payload.customer", err)
	}
	if _, err := c.StartOperation(ctx, redrive.OperationRequest{Kind: redrive.OperationRedrive, IDs: []int64{a.ID},
		Payload: map[string]string{"url": "https://x.example/"}}); !errors.Is(err, redrive.ErrInvalid) {
		t.Fatalf("StartOperation without the key field = %v, want ErrInvalid", err)
	}
	if got, err := c.Get(ctx, a.ID); err != nil || got.State != redrive.Dead {
		t.Fatalf("job after refused redrives = %+v, %v; want dead", got, err)
	}
	op, err := c.StartOperation(ctx, redrive.OperationRequest{Kind: redrive.OperationRedrive, IDs: []int64{a.ID},
		Payload: map[string]string{"customer": "C"}})
	if err != nil {
		t.Fatal(err)
	}
	if op, err = c.RunOperation(ctx, op.ID, nil); err != nil || op.Progress.Redriven != 1 {
		t.Fatalf("RunOperation = %+v, %v; want one job redriven", op, err)
	}
	got, err := c.Get(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Limit == nil || got.Limit.Key != "C" {
		t.Errorf("job redriven by an operation: limit %+v, want group C", got.Limit)
	}
}
