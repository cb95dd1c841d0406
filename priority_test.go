package redrive_test

import (
	"context"
	"errors"
	"testing"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/store"
)

// TestEnqueuePriority: the Priority option and Request.Priority reach the
// store, for one job and a batch; a priority out of range is refused with
// a *FieldError naming "priority", and nothing of the batch is stored.
func TestEnqueuePriority(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quietLogger()})
	j, err := c.Enqueue(ctx, "k", nil, redrive.Priority(9))
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := c.Get(ctx, j.ID); j.Priority != 9 || got.Priority != 9 {
		t.Errorf("Enqueue with Priority(9): priority %d, stored %d", j.Priority, got.Priority)
	}
	jobs, err := c.EnqueueMany(ctx, []redrive.Request{{Kind: "k", Priority: redrive.MinPriority}, {Kind: "k"}, {Kind: "k", Priority: redrive.MaxPriority}})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []int{redrive.MinPriority, redrive.DefaultPriority, redrive.MaxPriority} {
		if jobs[i].Priority != want {
			t.Errorf("batch job %d: priority %d, want %d", i, jobs[i].Priority, want)
		}
	}
	before, _ := c.Stats(ctx)
	for _, p := range []int{redrive.MaxPriority + 1, redrive.MinPriority - 1, 1 << 40} {
		_, err := c.EnqueueMany(ctx, []redrive.Request{{Kind: "k"}, {Kind: "k", Priority: p}})
		var fe *redrive.FieldError
		if !errors.Is(err, redrive.ErrInvalid) || !errors.As(err, &fe) || fe.Field != "priority" {
			t.Errorf("EnqueueMany with priority %d: %v, want ErrInvalid with a FieldError on priority", p, err)
		}
	}
	after, _ := c.Stats(ctx)
	if n, m := before.Jobs[redrive.DefaultQueue][store.Pending], after.Jobs[redrive.DefaultQueue][store.Pending]; n != m {
		t.Errorf("refused batches stored jobs: %d pending before, %d after", n, m)
	}
}

// TestSetPriority: a waiting job's priority changes; a running job's is
// refused with ErrConflict, an unknown job's with ErrNotFound, a priority
// out of range with ErrInvalid naming the field.
func TestSetPriority(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quietLogger()})
	j, err := c.Enqueue(ctx, "k", nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.SetPriority(ctx, j.ID, 50)
	if err != nil || got.Priority != 50 {
		t.Fatalf("SetPriority(50) = %v, %v", got, err)
	}
	var fe *redrive.FieldError
	if _, err := c.SetPriority(ctx, j.ID, 101); !errors.Is(err, redrive.ErrInvalid) || !errors.As(err, &fe) || fe.Field != "priority" {
		t.Errorf("SetPriority(101): %v, want ErrInvalid on priority", err)
	}
	if _, err := c.SetPriority(ctx, 1<<40, 1); !errors.Is(err, redrive.ErrNotFound) {
		t.Errorf("SetPriority of an unknown job: %v, want ErrNotFound", err)
	}
	leased, err := st.Fetch(ctx, store.FetchParams{Queue: redrive.DefaultQueue, Limit: 1, Now: j.CreatedAt, LeaseUntil: j.CreatedAt.Add(60e9), Worker: "w"})
	if err != nil || len(leased) != 1 {
		t.Fatalf("Fetch: %v, %v", leased, err)
	}
	if _, err := c.SetPriority(ctx, j.ID, 1); !errors.Is(err, redrive.ErrConflict) {
		t.Errorf("SetPriority of a running job: %v, want ErrConflict", err)
	}
	if got, _ := c.Get(ctx, j.ID); got.Priority != 50 {
		t.Errorf("after the refusals: priority %d, want 50", got.Priority)
	}
}
