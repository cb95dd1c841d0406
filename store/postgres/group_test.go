package postgres_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/redrivehq/redrive/internal/testwait"
	"sync"
	"testing"
	"time"

	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/postgres"
)

// groupResult is what one Enqueue call of a merged write returned.
type groupResult struct {
	jobs []*store.Job
	err  error
}

// enqueueMerged runs the calls concurrently while the store's writers
// are held, each queued after the previous one (so in this order), then
// releases them: those still waiting are written as one merged batch.
// cancel[i], when set, is canceled once every call is queued, before the
// release.
func enqueueMerged(t *testing.T, s *postgres.Store, calls [][]store.NewJob, nows []time.Time, cancel map[int]bool) []groupResult {
	t.Helper()
	waiting, release := postgres.HoldEnqueues(t, s)
	res := make([]groupResult, len(calls))
	var wg sync.WaitGroup
	var cancels []context.CancelFunc
	for i, jobs := range calls {
		ctx, stop := context.WithCancel(t.Context())
		defer stop()
		if cancel[i] {
			cancels = append(cancels, stop)
		}
		wg.Go(func() {
			res[i].jobs, res[i].err = s.Enqueue(ctx, jobs, nows[i])
		})
		testwait.Until(t, fmt.Sprintf("Enqueue call %d to queue", i+1), 20*time.Second, func() bool { return waiting() == i+1 })
	}
	for _, stop := range cancels {
		stop()
	}
	testwait.Until(t, fmt.Sprintf("%d Enqueue calls queued, the canceled ones gone", len(calls)-len(cancels)), 20*time.Second,
		func() bool { return waiting() == len(calls)-len(cancels) })
	release()
	wg.Wait()
	return res
}

// TestEnqueueGroup: concurrent Enqueue calls written as one merged batch
// get what they would get written one after another: ids in call order,
// their own enqueue time, a key repeated by a later call answered with
// the earlier call's job, a key held by an existing job answered with
// it, the counters of each; a call abandoned while it waited is not
// written.
func TestEnqueueGroup(t *testing.T) {
	s := openFresh(t)
	ctx := t.Context()
	held, err := s.Enqueue(ctx, []store.NewJob{{Queue: "q", Kind: "k", Payload: json.RawMessage(`{"v":0}`), IdempotencyKey: "held"}}, t0)
	if err != nil {
		t.Fatal(err)
	}
	calls := [][]store.NewJob{
		{{Queue: "q", Kind: "k", Payload: json.RawMessage(`{"n":1}`), IdempotencyKey: "dup"}, {Queue: "q", Kind: "k", Payload: json.RawMessage(`{"n":2}`)}},
		{{Queue: "q", Kind: "k", Payload: json.RawMessage(`{"n":3}`), IdempotencyKey: "dup"}},
		{{Queue: "q", Kind: "k", Payload: json.RawMessage(`{"n":4}`)}},
		{{Queue: "r", Kind: "k", Payload: json.RawMessage(`{"n":5}`), IdempotencyKey: "held"}},
		{{Queue: "r", Kind: "k", Payload: json.RawMessage(`{"n":6}`)}, {Queue: "q", Kind: "k", Payload: json.RawMessage(`{"n":7}`), RunAt: t0.Add(time.Hour)}},
		{{Queue: "q", Kind: "k", Payload: json.RawMessage(`{"n":8}`)}}, // abandoned
	}
	nows := make([]time.Time, len(calls))
	for i := range nows {
		nows[i] = t0.Add(time.Duration(i+1) * time.Second)
	}
	res := enqueueMerged(t, s, calls, nows, map[int]bool{5: true})
	for i, r := range res[:5] {
		if r.err != nil {
			t.Fatalf("call %d: %v", i, r.err)
		}
		if len(r.jobs) != len(calls[i]) {
			t.Fatalf("call %d: %d jobs, want %d", i, len(r.jobs), len(calls[i]))
		}
	}
	if !errors.Is(res[5].err, context.Canceled) || res[5].jobs != nil {
		t.Errorf("abandoned call: %v, %v; want context.Canceled", res[5].jobs, res[5].err)
	}
	// Inserted jobs: ids increasing in call order, each call's time.
	var prev int64
	for _, c := range []struct{ call, job int }{{0, 0}, {0, 1}, {2, 0}, {4, 0}, {4, 1}} {
		j := res[c.call].jobs[c.job]
		if j.Existing || j.ID <= prev {
			t.Errorf("call %d job %d: id %d (previous %d), Existing %v; want a new job, ids increasing in call order", c.call, c.job, j.ID, prev, j.Existing)
		}
		prev = j.ID
		got, err := s.Get(ctx, j.ID)
		if err != nil {
			t.Fatal(err)
		}
		if want := calls[c.call][c.job]; string(got.Payload) != string(want.Payload) || got.Queue != want.Queue {
			t.Errorf("job %d: queue %s payload %s, want %s %s", j.ID, got.Queue, got.Payload, want.Queue, want.Payload)
		}
		if !got.CreatedAt.Equal(nows[c.call]) || !j.CreatedAt.Equal(nows[c.call]) {
			t.Errorf("call %d job %d: created at %v (returned %v), want the call's time %v", c.call, c.job, got.CreatedAt, j.CreatedAt, nows[c.call])
		}
	}
	if j := res[4].jobs[1]; j.State != store.Scheduled || !j.RunAt.Equal(t0.Add(time.Hour)) {
		t.Errorf("scheduled job: state %s run at %v", j.State, j.RunAt)
	}
	// A key of an earlier call: its job; a key held before: that job.
	if j := res[1].jobs[0]; !j.Existing || j.ID != res[0].jobs[0].ID || string(j.Payload) != `{"n":1}` {
		t.Errorf("key dup again: id %d Existing %v payload %s; want job %d of the first call, {\"n\":1}", j.ID, j.Existing, j.Payload, res[0].jobs[0].ID)
	}
	if j := res[3].jobs[0]; !j.Existing || j.ID != held[0].ID || j.Queue != "q" || string(j.Payload) != `{"v":0}` {
		t.Errorf("key held: id %d Existing %v queue %s payload %s; want job %d", j.ID, j.Existing, j.Queue, j.Payload, held[0].ID)
	}
	if n, err := s.Count(ctx, store.Filter{}); err != nil || n != 6 {
		t.Errorf("Count = %d, %v; want 6 (1 before, 5 inserted, the abandoned call not written)", n, err)
	}
	st, err := s.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c := st.Counters; c["q"]["enqueued"] != 5 || c["q"]["deduplicated"] != 1 || c["r"]["enqueued"] != 1 || c["r"]["deduplicated"] != 1 {
		t.Errorf("counters %v; want q: enqueued 5 deduplicated 1, r: enqueued 1 deduplicated 1", c)
	}
}

// TestEnqueueGroupKeptKey: a merged write that meets the kept key of a
// deleted job is written again call by call: the call holding the key
// gets the deleted job, the others their new jobs.
func TestEnqueueGroupKeptKey(t *testing.T) {
	s := openFresh(t)
	ctx := t.Context()
	gone, err := s.Enqueue(ctx, []store.NewJob{{Queue: "q", Kind: "k", IdempotencyKey: "kept"}}, t0)
	if err != nil {
		t.Fatal(err)
	}
	leased, err := s.Fetch(ctx, store.FetchParams{Queue: "q", Limit: 1, Now: t0, LeaseUntil: t0.Add(time.Minute), Worker: "w"})
	if err != nil || len(leased) != 1 {
		t.Fatalf("Fetch: %v, %v", leased, err)
	}
	if _, err := s.Finish(ctx, []store.Outcome{{JobID: gone[0].ID, Queue: "q", Attempt: 1, Lease: leased[0].Lease, Worker: "w", Kind: store.Complete, At: t0}}); err != nil {
		t.Fatal(err)
	}
	if n, err := s.DeleteFinished(ctx, store.Completed, t0.Add(time.Hour), 10); err != nil || n != 1 {
		t.Fatalf("DeleteFinished = %d, %v", n, err)
	}
	var calls [][]store.NewJob
	var nows []time.Time
	for i := range 4 {
		jobs := []store.NewJob{{Queue: "q", Kind: "k", IdempotencyKey: fmt.Sprint("fresh-", i)}, {Queue: "q", Kind: "k"}}
		if i == 2 {
			jobs = append(jobs, store.NewJob{Queue: "q", Kind: "k", IdempotencyKey: "kept"})
		}
		calls = append(calls, jobs)
		nows = append(nows, t0.Add(time.Minute))
	}
	res := enqueueMerged(t, s, calls, nows, nil)
	for i, r := range res {
		if r.err != nil {
			t.Fatalf("call %d: %v", i, r.err)
		}
		for k, j := range r.jobs {
			if i == 2 && k == 2 {
				if !j.Existing || !j.Gone || j.ID != gone[0].ID {
					t.Errorf("kept key: id %d Existing %v Gone %v; want deleted job %d", j.ID, j.Existing, j.Gone, gone[0].ID)
				}
				continue
			}
			if j.Existing || j.State != store.Pending {
				t.Errorf("call %d job %d: Existing %v state %s; want a new pending job", i, k, j.Existing, j.State)
			}
		}
	}
	if n, err := s.Count(ctx, store.Filter{}); err != nil || n != 8 {
		t.Errorf("Count = %d, %v; want 8", n, err)
	}
	st, err := s.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c := st.Counters["q"]; c["enqueued"] != 9 || c["deduplicated"] != 1 {
		t.Errorf("counters %v; want enqueued 9 (1 + 8), deduplicated 1", c)
	}
}

// TestEnqueueGroupConcurrent: concurrent calls, large and small, with
// and without keys, some repeating keys of others: whatever the writes
// they were merged into, every key has one job and every caller got it,
// every job without a key was inserted once, and the counters add up.
func TestEnqueueGroupConcurrent(t *testing.T) {
	s := openFresh(t)
	ctx := t.Context()
	const (
		goroutines = 8
		rounds     = 20
		keys       = 120
	)
	var (
		mu    sync.Mutex
		byKey = map[string]int64{}
		noKey = map[int64]bool{}
		sent  int64
		wg    sync.WaitGroup
	)
	for g := range goroutines {
		wg.Go(func() {
			for r := range rounds {
				var jobs []store.NewJob
				size := 1
				if g%2 == 0 {
					size = 150 // large calls, which may run beside another write
				}
				for i := range size {
					nj := store.NewJob{Queue: fmt.Sprint("q", i%3), Kind: "k", Payload: json.RawMessage(fmt.Sprintf(`{"g":%d,"r":%d,"i":%d}`, g, r, i))}
					if (g+r+i)%2 == 0 {
						nj.IdempotencyKey = fmt.Sprint("key-", (g*7+r*13+i)%keys)
					}
					jobs = append(jobs, nj)
				}
				got, err := s.Enqueue(ctx, jobs, t0)
				if err == nil && len(got) != len(jobs) {
					err = fmt.Errorf("%d jobs returned for %d", len(got), len(jobs))
				}
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				sent += int64(len(jobs))
				for i, j := range got {
					k := jobs[i].IdempotencyKey
					if k == "" {
						if j.Existing || noKey[j.ID] {
							t.Errorf("job without a key: id %d Existing %v, returned twice %v", j.ID, j.Existing, noKey[j.ID])
						}
						noKey[j.ID] = true
						continue
					}
					if j.IdempotencyKey != k {
						t.Errorf("key %s answered with job %d of key %q", k, j.ID, j.IdempotencyKey)
					}
					if id, ok := byKey[k]; ok && id != j.ID {
						t.Errorf("key %s: jobs %d and %d", k, id, j.ID)
					}
					byKey[k] = j.ID
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	want := int64(len(byKey) + len(noKey))
	if n, err := s.Count(ctx, store.Filter{}); err != nil || n != want {
		t.Errorf("Count = %d, %v; want %d (%d keys, %d jobs without a key)", n, err, want, len(byKey), len(noKey))
	}
	st, err := s.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var enq, dedup int64
	for _, c := range st.Counters {
		enq += c["enqueued"]
		dedup += c["deduplicated"]
	}
	if enq != want || enq+dedup != sent {
		t.Errorf("counters: enqueued %d, deduplicated %d; want %d enqueued and %d in all", enq, dedup, want, sent)
	}
}
