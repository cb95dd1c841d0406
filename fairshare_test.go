package redrive_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/store"
)

// TestFairShareCheck: a fair share with a bad queue, an empty or unknown
// key, a zero, negative or too large weight, or a queue made fair twice
// is refused with ErrInvalid naming the field, and the client's fair
// shares are unchanged.
func TestFairShareCheck(t *testing.T) {
	c := redrive.NewClient(openStore(t), redrive.ClientOptions{Logger: quietLogger()})
	good := []redrive.FairShare{{Queue: "a", Key: "payload.tenant", Weights: map[string]int{"vip": 3}}}
	if err := c.SetFairShares(good); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		f     redrive.FairShare
		field string
	}{
		{redrive.FairShare{Queue: "", Key: "host"}, "queue"},
		{redrive.FairShare{Queue: "q"}, "key"},
		{redrive.FairShare{Queue: "q", Key: "tenant"}, "key"},
		{redrive.FairShare{Queue: "q", Key: "payload..x"}, "key"},
		{redrive.FairShare{Queue: "q", Key: "host", Weights: map[string]int{"x": 0}}, "weights.x"},
		{redrive.FairShare{Queue: "q", Key: "host", Weights: map[string]int{"x": -2}}, "weights.x"},
		{redrive.FairShare{Queue: "q", Key: "host", Weights: map[string]int{"x": store.MaxFairWeight + 1}}, "weights.x"},
		{redrive.FairShare{Queue: "b", Key: "host"}, "queue"}, // twice
	} {
		err := c.SetFairShares([]redrive.FairShare{{Queue: "b", Key: "dependency"}, tc.f})
		var fe *redrive.FieldError
		if !errors.Is(err, redrive.ErrInvalid) || !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("SetFairShares(%+v) = %v, want ErrInvalid naming %s", tc.f, err, tc.field)
		}
	}
	got := c.FairShares()
	if len(got) != 1 || got[0].Queue != "a" || got[0].Weights["vip"] != 3 {
		t.Errorf("FairShares = %+v after refused lists, want %+v", got, good)
	}
}

// TestFairShareEnqueue: a job of a fair queue whose key cannot be read is
// refused naming the field, and nothing of its batch is stored.
func TestFairShareEnqueue(t *testing.T) {
	st := openStore(t)
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quietLogger()})
	if err := c.SetFairShares([]redrive.FairShare{{Queue: "fq", Key: "payload.tenant"}}); err != nil {
		t.Fatal(err)
	}
	_, err := c.EnqueueMany(t.Context(), []redrive.Request{
		{Kind: "x", Queue: "fq", Payload: map[string]any{"tenant": "a"}},
		{Kind: "x", Queue: "fq", Payload: map[string]any{"other": 1}},
	})
	var fe *redrive.FieldError
	if !errors.Is(err, redrive.ErrInvalid) || !errors.As(err, &fe) || fe.Field != "payload.tenant" {
		t.Fatalf("EnqueueMany with a job lacking its fair key = %v, want ErrInvalid naming payload.tenant", err)
	}
	if n, err := st.Count(t.Context(), store.Filter{Queue: "fq"}); err != nil || n != 0 {
		t.Errorf("Count(fq) = %d, %v after the refused batch, want 0", n, err)
	}
	jobs, err := c.EnqueueMany(t.Context(), []redrive.Request{{Kind: "x", Queue: "fq", Payload: map[string]any{"tenant": 42.0}}})
	if err != nil {
		t.Fatal(err)
	}
	if j, err := c.Get(t.Context(), jobs[0].ID); err != nil || j.FairKey == nil || *j.FairKey != "42" {
		t.Errorf("Get(a fair job).FairKey = %v, %v; want 42", j.FairKey, err)
	}
	qs, err := c.Queues(t.Context())
	if err != nil || len(qs) != 1 || qs[0].Fair == nil || qs[0].Fair.Key != "payload.tenant" {
		t.Errorf("Queues = %+v, %v; want fq with its fair share", qs, err)
	}
	// Another queue is not fair: its jobs need no key.
	other, err := c.EnqueueMany(t.Context(), []redrive.Request{{Kind: "x", Queue: "other"}})
	if err != nil {
		t.Fatalf("Enqueue to a queue that is not fair: %v", err)
	}
	if j, err := c.Get(t.Context(), other[0].ID); err != nil || j.FairKey != nil {
		t.Errorf("Get(a job of a queue that is not fair).FairKey = %v, %v; want nil", j.FairKey, err)
	}
}

// TestFairShareEngine: with one worker slot, a key with a backlog of 60
// jobs enqueued first does not hold back three keys of 2 jobs each: the
// small keys' jobs all start among the first 12 starts.
func TestFairShareEngine(t *testing.T) {
	e := newEnv(t, redrive.WorkerOptions{Queues: map[string]int{"fq": 1}})
	if err := e.client.SetFairShares([]redrive.FairShare{{Queue: "fq", Key: "payload.tenant"}}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var order []string
	redrive.Handle(e.worker, "t", func(ctx context.Context, j *redrive.Job, p struct{ Tenant string }) error {
		mu.Lock()
		order = append(order, p.Tenant)
		mu.Unlock()
		return nil
	})
	var reqs []redrive.Request
	for range 60 {
		reqs = append(reqs, redrive.Request{Kind: "t", Queue: "fq", Payload: map[string]string{"tenant": "big"}})
	}
	for i := range 6 {
		reqs = append(reqs, redrive.Request{Kind: "t", Queue: "fq", Payload: map[string]string{"tenant": fmt.Sprint("small", i%3)}})
	}
	jobs, err := e.client.EnqueueMany(t.Context(), reqs)
	if err != nil {
		t.Fatal(err)
	}
	e.start()
	for _, j := range jobs {
		e.waitState(j.ID, redrive.Completed)
	}
	mu.Lock()
	defer mu.Unlock()
	last := 0
	for i, k := range order {
		if k != "big" {
			last = i + 1
		}
	}
	if last > 12 {
		t.Errorf("the small keys' last job started %dth of %d, want within the first 12: %v", last, len(order), order[:min(len(order), 20)])
	}
}

// TestFairShareHostWeights: a fair share keyed on the host gives a weight
// to a host however the weight's name writes it: the name is read as a
// job's URL host is (lower case, no trailing dot, IDNA's ASCII form, an
// IP address canonical), so the weight reaches that host's jobs, whose
// key is the canonical name. Two names of one host with different
// weights are refused naming the field.
func TestFairShareHostWeights(t *testing.T) {
	c := redrive.NewClient(openStore(t), redrive.ClientOptions{Logger: quietLogger()})
	err := c.SetFairShares([]redrive.FairShare{{Queue: "fq", Key: "host",
		Weights: map[string]int{"API.Example.COM.": 3, "bücher.example": 2, "[0:0::1]": 4, "::FFFF:127.0.0.1": 5}}})
	if err != nil {
		t.Fatal(err)
	}
	got := c.FairShares()
	want := map[string]int{"api.example.com": 3, "xn--bcher-kva.example": 2, "::1": 4, "127.0.0.1": 5}
	if len(got) != 1 || fmt.Sprint(got[0].Weights) != fmt.Sprint(want) {
		t.Errorf("FairShares = %+v, want the weights %v", got, want)
	}
	// Each weight's name is the key its host's jobs get.
	for _, u := range []string{"https://API.example.com/x", "https://BÜCHER.example./x", "http://[::1]:8080/", "http://127.0.0.1/"} {
		jobs, err := c.EnqueueMany(t.Context(), []redrive.Request{{Kind: "x", Queue: "fq", Payload: map[string]any{"url": u}}})
		if err != nil {
			t.Fatal(err)
		}
		j, err := c.Get(t.Context(), jobs[0].ID)
		if err != nil || j.FairKey == nil {
			t.Fatalf("Get(%s) = %+v, %v", u, j, err)
		}
		if _, ok := want[*j.FairKey]; !ok {
			t.Errorf("the job of %s has the fair key %q, which no weight names", u, *j.FairKey)
		}
	}
	// One host named twice, with two weights: which would it get?
	err = c.SetFairShares([]redrive.FairShare{{Queue: "fq", Key: "host", Weights: map[string]int{"a.example": 2, "A.example.": 3}}})
	var fe *redrive.FieldError
	if !errors.Is(err, redrive.ErrInvalid) || !errors.As(err, &fe) || fe.Field != "weights" {
		t.Errorf("SetFairShares with one host's two weights = %v, want ErrInvalid naming weights", err)
	}
}
