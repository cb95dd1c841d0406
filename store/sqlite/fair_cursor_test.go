package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/redrivehq/redrive/store"
)

// fairCursorSetup opens a store with three fair keys of three due jobs
// each in queue "fq", and leases the first (key a) with one fetch.
func fairCursorSetup(t *testing.T) (*Store, time.Time) {
	t.Helper()
	s := openTest(t)
	now := time.Now()
	var nj []store.NewJob
	for range 3 {
		for _, k := range []string{"a", "b", "c"} {
			nj = append(nj, store.NewJob{Queue: "fq", Kind: "k", Fair: true, FairKey: k, Payload: []byte(`{}`), RunAt: now.Add(-time.Minute)})
		}
	}
	if _, err := s.Enqueue(t.Context(), nj, now); err != nil {
		t.Fatal(err)
	}
	if got := fairFetchKey(t, s, now); got != "a" {
		t.Fatalf("first fetch leased key %q, want a", got)
	}
	return s, now
}

// fairFetchKey fetches one job of "fq" and returns its fair key.
func fairFetchKey(t *testing.T, s *Store, now time.Time) string {
	t.Helper()
	jobs, err := s.Fetch(t.Context(), fairFetchParams(now))
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 1 {
		t.Fatalf("fetch leased %d jobs, want 1", len(jobs))
	}
	k, _, err := s.JobFairKey(t.Context(), jobs[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func fairFetchParams(now time.Time) store.FetchParams {
	return store.FetchParams{Queue: "fq", Limit: 1, Now: now, LeaseUntil: now.Add(time.Minute), Worker: "w",
		FairWeights: map[string]int{}}
}

// running counts the running jobs of "fq".
func running(t *testing.T, s *Store) int {
	t.Helper()
	res, err := s.List(t.Context(), store.Filter{Queue: "fq", States: []store.State{store.Running}}, store.Page{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	return len(res.Jobs)
}

// TestFairCursorRollback: a fetch whose transaction rolls back after it
// moved its round robin's cursor (a failure injected after the leases)
// leases nothing and costs no key its turn: the next fetch serves the key
// the rolled-back one served (b), not the one after it.
func TestFairCursorRollback(t *testing.T) {
	s, now := fairCursorSetup(t)
	fetchFailHook = func() error { return errors.New("injected failure") }
	_, err := s.Fetch(t.Context(), fairFetchParams(now))
	fetchFailHook = nil
	if err == nil {
		t.Fatal("fetch with a failure injected succeeded")
	}
	if n := running(t, s); n != 1 {
		t.Fatalf("%d jobs running after the failed fetch, want 1", n)
	}
	if got := fairFetchKey(t, s, now); got != "b" {
		t.Fatalf("after a fetch rolled back, the next leased key %q, want b", got)
	}
}

// TestFairCursorBatchRollback: a fetch in the same writer transaction as
// a request that fails is run again alone; the run that was rolled back
// moved no cursor, so the fetch serves the key that was next (b).
func TestFairCursorBatchRollback(t *testing.T) {
	s, now := fairCursorSetup(t)
	entered, gate := make(chan struct{}), make(chan struct{})
	var once sync.Once
	s.onBegin = func() { once.Do(func() { close(entered); <-gate }) }
	defer func() { s.onBegin = nil }()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute) // liveness bound only
	defer cancel()
	// A first request holds the writer in onBegin while the fetch, then
	// the failing request, queue behind it: they form the next batch, in
	// that order.
	go func() { _ = s.write(ctx, func(*sql.Conn) error { return nil }) }()
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("the writer never began")
	}
	waitQueued := func(n int) {
		for len(s.ops) < n {
			if ctx.Err() != nil {
				t.Fatalf("%d requests queued, want %d", len(s.ops), n)
			}
			runtime.Gosched()
		}
	}
	type result struct {
		jobs []*store.Job
		err  error
	}
	fetched := make(chan result, 1)
	go func() {
		jobs, err := s.Fetch(ctx, fairFetchParams(now))
		fetched <- result{jobs, err}
	}()
	waitQueued(1)
	failed := make(chan error, 1)
	go func() { failed <- s.write(ctx, func(*sql.Conn) error { return errors.New("injected failure") }) }()
	waitQueued(2)
	close(gate)
	if err := <-failed; err == nil {
		t.Fatal("the failing request succeeded")
	}
	r := <-fetched
	if r.err != nil || len(r.jobs) != 1 {
		t.Fatalf("fetch beside a failing request: %d jobs, %v; want 1", len(r.jobs), r.err)
	}
	k, _, err := s.JobFairKey(t.Context(), r.jobs[0].ID)
	if err != nil || k != "b" {
		t.Fatalf("fetch beside a failing request leased key %q (%v), want b", k, err)
	}
	if got := fairFetchKey(t, s, now); got != "c" {
		t.Fatalf("the fetch after it leased key %q, want c", got)
	}
}
