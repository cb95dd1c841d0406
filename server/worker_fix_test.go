package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/breaker"
	"github.com/redrivehq/redrive/internal/testwait"
	"github.com/redrivehq/redrive/store"
)

// gateStore holds a Fetch that leased jobs until the test lets it
// return, once armed.
type gateStore struct {
	store.Store
	armed   chan struct{} // closed: gate the next Fetch that leases
	fetched chan struct{} // a gated Fetch has leased its jobs
	release chan struct{} // closed: the gated Fetch returns
}

func (s *gateStore) Fetch(ctx context.Context, p store.FetchParams) ([]*store.Job, error) {
	jobs, err := s.Store.Fetch(ctx, p)
	if len(jobs) > 0 {
		select {
		case <-s.armed:
			s.fetched <- struct{}{}
			<-s.release
		default:
		}
	}
	return jobs, err
}

// TestWorkerLeaseClientGoneHandsBack: a worker long-polls; a job becomes
// due and is leased for it just as the worker's request is canceled (a
// client's timeout, a worker shutting down). The answer reaches nobody:
// the job must be handed back at once, untried, not left leased to
// nobody until its lease expires.
func TestWorkerLeaseClientGoneHandsBack(t *testing.T) {
	eachStore(t, func(t *testing.T, kind string) {
		gs := &gateStore{Store: openProtoStore(t, kind), armed: make(chan struct{}), fetched: make(chan struct{}, 1),
			release: make(chan struct{})}
		c := redrive.NewClient(gs, redrive.ClientOptions{Logger: quiet})
		ex := redrive.NewExecutor(redrive.ExecutorOptions{ID: "serve", Breakers: breaker.NewRegistry(breaker.DefaultConfig()),
			Logger: quiet, DisableRetryBudget: true})
		rw := redrive.NewRemoteWorkers(c, ex, redrive.RemoteOptions{LeaseDuration: time.Hour, PollInterval: time.Hour, Logger: quiet})
		api := New(Options{Client: c, Logger: quiet, Workers: rw})
		reqs := make(chan context.Context, 1)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/v1/worker/lease" {
				reqs <- r.Context()
			}
			api.ServeHTTP(w, r)
		}))
		t.Cleanup(srv.Close)
		t.Cleanup(func() { _ = api.Close() })
		var once sync.Once
		open := func() { once.Do(func() { close(gs.release) }) }
		t.Cleanup(open) // first: a test failed leaves no handler blocked
		close(gs.armed)

		ctx, cancel := context.WithCancel(context.Background())
		req, err := http.NewRequestWithContext(ctx, "POST", srv.URL+"/v1/worker/lease",
			strings.NewReader(`{"worker":"py-1@box-a","queues":["q"],"kinds":["k"],"wait":"60s"}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		done := make(chan error, 1)
		go func() {
			res, err := srv.Client().Do(req)
			if err == nil {
				res.Body.Close()
			}
			done <- err
		}()
		serverCtx := testwait.Recv(t, "the lease request", 10*time.Second, reqs)
		// The job becomes due while the worker long-polls, and is leased
		// for it; then the worker goes away before the answer is written.
		j, err := c.Enqueue(context.Background(), "k", nil, redrive.InQueue("q"))
		if err != nil {
			t.Fatal(err)
		}
		testwait.Recv(t, "the job leased", 10*time.Second, gs.fetched)
		cancel()
		if err := testwait.Recv(t, "the client's answer", 10*time.Second, done); err == nil {
			t.Fatal("the canceled request got an answer")
		}
		testwait.Until(t, "serve to see the client gone", 10*time.Second, func() bool { return serverCtx.Err() != nil })
		open()
		var got *redrive.Job
		testwait.Until(t, "FINDING: the job leased for a client that went away is handed back", 10*time.Second, func() bool {
			got, err = c.Get(context.Background(), j.ID)
			return err == nil && got.State == store.Pending
		})
		if got.Attempt != 0 {
			t.Fatalf("the job handed back used an attempt: attempt %d", got.Attempt)
		}
		// Another worker takes it at once, as its first attempt.
		jobs, err := rw.Lease(context.Background(), redrive.LeaseRequest{RemoteIdentity: redrive.RemoteIdentity{Worker: "py-2@box-b"},
			Queues: []string{"q"}, Kinds: []string{"k"}, Max: 1})
		if err != nil || len(jobs) != 1 || jobs[0].ID != j.ID || jobs[0].Attempt != 1 {
			t.Fatalf("lease after the hand-back: %v %+v", err, jobs)
		}
	})
}

// TestWorkerLeaseDeadline: a job of a kind with a timeout (declared by
// the worker in its lease, or the kind's handler timeout in serve, as a
// Go handler's redrive.Timeout) is handed out with its deadline: its
// attempt's start plus the timeout. A kind without one has none.
func TestWorkerLeaseDeadline(t *testing.T) {
	eachStore(t, func(t *testing.T, kind string) {
		e := newProtoEnv(t, kind, protoOpts{})
		e.exec.HandleFunc("k-go", func(context.Context, *redrive.Job) error { return nil }, redrive.Timeout(7*time.Second))
		ids := map[string]int64{}
		for _, k := range []string{"k", "k-go", "k-none"} {
			j, err := e.client.Enqueue(context.Background(), k, nil, redrive.InQueue("q"))
			if err != nil {
				t.Fatal(err)
			}
			ids[k] = j.ID
		}
		before := time.Now()
		var a LeaseAnswer
		e.want(e.do("POST", "/v1/worker/lease", `{"worker":"py-1@box-a","queues":["q"],"kinds":["k","k-go","k-none"],
			"timeouts":{"k":"5s","k-none":"0s"},"max":10}`), 200, &a)
		after := time.Now()
		if len(a.Jobs) != 3 {
			t.Fatalf("lease: %+v", a)
		}
		want := map[int64]time.Duration{ids["k"]: 5 * time.Second, ids["k-go"]: 7 * time.Second}
		for _, j := range a.Jobs {
			d, ok := want[j.ID]
			switch {
			case !ok && j.Deadline != nil:
				t.Errorf("job %d of kind %s: deadline %v, want none", j.ID, j.Kind, j.Deadline)
			case ok && j.Deadline == nil:
				t.Errorf("FINDING: job %d of kind %s with a %s timeout is handed out without its deadline", j.ID, j.Kind, d)
			case ok && (j.Deadline.Before(before.Add(d)) || j.Deadline.After(after.Add(d))):
				t.Errorf("job %d of kind %s: deadline %v, want %s after the lease (%v to %v)", j.ID, j.Kind, j.Deadline, d,
					before.Add(d), after.Add(d))
			}
		}
		// A bad timeout is refused, naming it.
		r := e.do("POST", "/v1/worker/lease", `{"worker":"py-1@box-a","queues":["q"],"kinds":["k"],"timeouts":{"k":"soon"}}`)
		if r.status != 400 || !strings.Contains(string(r.body), "timeouts.k") {
			t.Fatalf("bad timeout: %d %s", r.status, r.body)
		}
	})
}
