package postgres_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/redrivehq/redrive/internal/testwait"
	"sync"
	"testing"
	"time"

	"github.com/redrivehq/redrive/store"
)

// TestEnqueueCopy: a keyless batch large enough to be written with COPY
// gets what the statement would give: ids increasing in input order,
// every field as given (payload bytes, policy or none, due or scheduled,
// dependency, reprocessable), the enqueued counters per queue and one
// notification per queue.
func TestEnqueueCopy(t *testing.T) {
	s := openFresh(t)
	ctx := t.Context()

	var mu sync.Mutex
	notified := map[string]int{}
	lctx, stopListen := context.WithCancel(ctx)
	listening := make(chan error, 1)
	go func() {
		listening <- s.Listen(lctx, func(queue string) {
			mu.Lock()
			notified[queue]++
			mu.Unlock()
		})
	}()
	defer func() {
		stopListen()
		<-listening
	}()
	// Listen calls its function with "" once it listens.
	testwait.Until(t, "Listen to connect", 10*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return notified[""] > 0
	})

	const n = 1000
	now := time.Now().UTC().Truncate(time.Microsecond)
	later := now.Add(time.Hour)
	jobs := make([]store.NewJob, n)
	for i := range jobs {
		nj := store.NewJob{Queue: "bulk-a", Kind: "k", Payload: []byte(fmt.Sprintf(`{"i": %d}`, i)), MaxRetries: i % 7}
		switch i % 4 {
		case 1:
			nj.Queue, nj.RunAt = "bulk-b", later
		case 2:
			nj.Policy, nj.Dependency = []byte(`{"max_retries":3}`), "dep"
		case 3:
			nj.NotReprocessable, nj.Payload = true, nil
		}
		jobs[i] = nj
	}
	out, err := s.Enqueue(ctx, jobs, now)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != n {
		t.Fatalf("got %d jobs, want %d", len(out), n)
	}
	for i, j := range out {
		if i > 0 && j.ID <= out[i-1].ID {
			t.Fatalf("job %d has id %d after %d: ids must increase in input order", i, j.ID, out[i-1].ID)
		}
		got, err := s.Get(ctx, j.ID)
		if err != nil {
			t.Fatalf("job %d (id %d): %v", i, j.ID, err)
		}
		nj := jobs[i]
		wantPayload, wantState, wantRunAt := nj.Payload, store.Pending, now
		if wantPayload == nil {
			wantPayload = []byte("null")
		}
		if !nj.RunAt.IsZero() {
			wantState, wantRunAt = store.Scheduled, later
		}
		for _, g := range []*store.Job{j, got} {
			if g.Queue != nj.Queue || g.Kind != nj.Kind || !bytes.Equal(g.Payload, wantPayload) || g.State != wantState ||
				!g.RunAt.Equal(wantRunAt) || !g.CreatedAt.Equal(now) || g.MaxRetries != nj.MaxRetries ||
				g.Dependency != nj.Dependency || g.Reprocessable == nj.NotReprocessable || g.IdempotencyKey != "" {
				t.Fatalf("job %d: got %+v, want the fields of %+v (state %s, run at %s)", i, g, nj, wantState, wantRunAt)
			}
			if !bytes.Equal(g.Policy, nj.Policy) && !(len(nj.Policy) > 0 && jsonEqual(g.Policy, nj.Policy)) {
				t.Fatalf("job %d: policy %q, want %q", i, g.Policy, nj.Policy)
			}
		}
	}
	st, err := s.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := st.Counters["bulk-a"][store.StatEnqueued], st.Counters["bulk-b"][store.StatEnqueued]; a != 3*n/4 || b != n/4 {
		t.Errorf("enqueued counters: bulk-a %d, bulk-b %d, want %d and %d", a, b, 3*n/4, n/4)
	}
	if a, b := st.Jobs["bulk-a"][store.Pending], st.Jobs["bulk-b"][store.Scheduled]; a != 3*n/4 || b != n/4 {
		t.Errorf("jobs: bulk-a pending %d, bulk-b scheduled %d, want %d and %d", a, b, 3*n/4, n/4)
	}
	testwait.Watch(t, "one notification each for bulk-a and bulk-b", 10*time.Second, func() (bool, string) {
		mu.Lock()
		a, b := notified["bulk-a"], notified["bulk-b"]
		mu.Unlock()
		if a > 1 || b > 1 {
			t.Fatalf("notifications: bulk-a %d, bulk-b %d, want 1 each", a, b)
		}
		return a == 1 && b == 1, fmt.Sprintf("bulk-a %d, bulk-b %d", a, b)
	})
}

func jsonEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return bytes.Equal(xa, ya)
}

// TestEnqueueCopyConcurrent: concurrent bulk batches (COPY) and keyed
// enqueues of one key: every bulk job is written once, in input order
// within its call, and the key creates exactly one job.
func TestEnqueueCopyConcurrent(t *testing.T) {
	s := openFresh(t)
	ctx := t.Context()
	const calls, per, keyed = 8, 500, 16
	var wg sync.WaitGroup
	ids := make([][]int64, calls)
	keyIDs := make([]int64, keyed)
	errs := make(chan error, calls+keyed)
	for c := range calls {
		wg.Go(func() {
			jobs := make([]store.NewJob, per)
			for i := range jobs {
				jobs[i] = store.NewJob{Queue: "q", Kind: "k"}
			}
			out, err := s.Enqueue(ctx, jobs, time.Now())
			if err != nil {
				errs <- err
				return
			}
			for _, j := range out {
				ids[c] = append(ids[c], j.ID)
			}
		})
	}
	for k := range keyed {
		wg.Go(func() {
			out, err := s.Enqueue(ctx, []store.NewJob{{Queue: "q", Kind: "k", IdempotencyKey: "the-key"}}, time.Now())
			if err != nil {
				errs <- err
				return
			}
			keyIDs[k] = out[0].ID
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	seen := map[int64]bool{}
	for c, list := range ids {
		for i, id := range list {
			if i > 0 && id <= list[i-1] {
				t.Fatalf("call %d: ids not increasing at %d", c, i)
			}
			if seen[id] {
				t.Fatalf("id %d returned twice", id)
			}
			seen[id] = true
		}
	}
	for _, id := range keyIDs {
		if id != keyIDs[0] {
			t.Fatalf("the key was answered with jobs %v, want one job", keyIDs)
		}
	}
	st, err := s.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := st.Jobs["q"][store.Pending], int64(calls*per+1); got != want {
		t.Errorf("%d pending jobs, want %d", got, want)
	}
}
