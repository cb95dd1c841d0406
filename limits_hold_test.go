package redrive_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/internal/testwait"
)

// TestLimitHoldOnRetryAfter: a server answers 429 with Retry-After to
// the first call of key a; the limit holds on Retry-After, so key a's
// group is held, fleet-wide, until then: a's next job waits, due,
// without an attempt, while key b's jobs run; the hold is listed with
// its end. Turning the hold off ends it, and a's job runs.
func TestLimitHoldOnRetryAfter(t *testing.T) {
	var mu sync.Mutex
	calls := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k := r.URL.Path[1:]
		mu.Lock()
		calls[k]++
		n := calls[k]
		mu.Unlock()
		if k == "a" && n == 1 {
			w.Header().Set("Retry-After", "600")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	callsOf := func(k string) int {
		mu.Lock()
		defer mu.Unlock()
		return calls[k]
	}

	e := newEnv(t, redrive.WorkerOptions{Queues: map[string]int{redrive.DefaultQueue: 4}})
	if err := e.client.SetLimits([]redrive.ConcurrencyLimit{
		{Name: "api", Kind: "call", Key: "payload.k", Max: 4, HoldOnRetryAfter: true},
	}); err != nil {
		t.Fatal(err)
	}
	redrive.Handle(e.worker, "call", func(ctx context.Context, j *redrive.Job, p struct{ K string }) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/"+p.K, nil)
		if err != nil {
			return err
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return failure.FromResponse(resp)
		}
		return nil
	})
	e.start()
	fj, err := e.client.EnqueueMany(t.Context(), []redrive.Request{{Kind: "call", Payload: map[string]string{"k": "a"}}})
	if err != nil {
		t.Fatal(err)
	}
	first := fj[0]
	failed := e.waitState(first.ID, redrive.Scheduled)
	if failed.LastErrorClass != failure.RateLimited || failed.LastFailedAt == nil {
		t.Fatalf("first job of a: %+v, want a rate_limited failure", failed)
	}
	ls, err := e.client.LimitStates(t.Context())
	if err != nil || len(ls) != 1 || !ls[0].HoldOnRetryAfter || ls[0].HeldGroups != 1 || len(ls[0].Holds) != 1 || ls[0].Holds[0].Key != "a" {
		t.Fatalf("LimitStates = %+v, %v; want group a held", ls, err)
	}
	// Held for the Retry-After (600s) from the failure, clamped by
	// nothing: a generous second either side of the failure's clock.
	if until := ls[0].Holds[0].Until; until.Before(failed.LastFailedAt.Add(599*time.Second)) || until.After(failed.LastFailedAt.Add(601*time.Second)) {
		t.Errorf("hold of a until %s, want 600s after its failure at %s", until, failed.LastFailedAt)
	}
	var reqs []redrive.Request
	reqs = append(reqs, redrive.Request{Kind: "call", Payload: map[string]string{"k": "a"}})
	for range 3 {
		reqs = append(reqs, redrive.Request{Kind: "call", Payload: map[string]string{"k": "b"}})
	}
	jobs, err := e.client.EnqueueMany(t.Context(), reqs)
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs[1:] {
		e.waitState(j.ID, redrive.Completed)
	}
	// b's jobs ran; a's, due as long as they, waits on its hold.
	a2, err := e.client.Get(t.Context(), jobs[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if a2.State != redrive.Pending || a2.Attempt != 0 || callsOf("a") != 1 {
		t.Fatalf("a's second job: state %s, attempt %d, a called %d times; want pending, 0, once (held)", a2.State, a2.Attempt, callsOf("a"))
	}
	ls, err = e.client.LimitStates(t.Context())
	if err != nil || len(ls) != 1 || ls[0].Waiting < 1 {
		t.Errorf("LimitStates = %+v, %v; want a's job waiting", ls, err)
	}
	// Off: the hold ends at once, and a's job runs.
	st, err := e.client.SetLimitHold(t.Context(), "api", false)
	if err != nil || st.HoldOnRetryAfter || st.HeldGroups != 0 {
		t.Fatalf("SetLimitHold(api, false) = %+v, %v", st, err)
	}
	e.waitState(a2.ID, redrive.Completed)
	testwait.Until(t, "a called twice", 10*time.Second, func() bool { return callsOf("a") == 2 })
}
