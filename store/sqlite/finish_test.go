package sqlite

import (
	"log/slog"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/store"
)

func openTest(t *testing.T) *Store {
	t.Helper()
	s, err := Open(t.Context(), migratedPath(t, filepath.Join(t.TempDir(), "redrive.db")),
		Options{Synchronous: "normal", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func enqueueN(t *testing.T, s *Store, n int, now time.Time) {
	t.Helper()
	jobs := make([]store.NewJob, n)
	for i := range jobs {
		jobs[i] = store.NewJob{Queue: "q", Kind: "k", Payload: []byte(`{"n":1}`), MaxRetries: -1}
	}
	if _, err := s.Enqueue(t.Context(), jobs, now); err != nil {
		t.Fatal(err)
	}
}

func fetch(t *testing.T, s *Store, worker string, limit int, now time.Time) []*store.Job {
	t.Helper()
	jobs, err := s.Fetch(t.Context(), store.FetchParams{Queue: "q", Limit: limit, Now: now, LeaseUntil: now.Add(time.Minute), Worker: worker})
	if err != nil {
		t.Fatal(err)
	}
	return jobs
}

// TestFetchReadsBackTheLeasedJob checks that the jobs Fetch returns, read
// back without the columns the lease itself set or that a waiting job
// never has, are what Get reads of them (but their history): a first
// attempt, a retried job, a redriven one that keeps its fingerprint, a job
// with every optional field, one released by a shutdown (its lease token
// kept), and one that was scheduled (the counts move it out of scheduled).
func TestFetchReadsBackTheLeasedJob(t *testing.T) {
	ctx := t.Context()
	s := openTest(t)
	t0 := time.Now().Add(-time.Hour).Truncate(time.Microsecond)
	lease := func(now time.Time, n int) []*store.Job {
		return fetch(t, s, "w1", n, now)
	}
	finish := func(o store.Outcome) {
		t.Helper()
		applied, err := s.Finish(ctx, []store.Outcome{o})
		if err != nil || !applied[0] {
			t.Fatalf("finish %+v: %v, %v", o, applied, err)
		}
	}
	full := store.NewJob{Queue: "q", Kind: "full", Payload: []byte(`{"a":[1,2]}`), MaxRetries: 7,
		Policy: []byte(`{"max_retries":3}`), IdempotencyKey: "key-1", Dependency: "dep", NotReprocessable: true}
	plain := store.NewJob{Queue: "q", Kind: "plain", MaxRetries: -1}
	if _, err := s.Enqueue(ctx, []store.NewJob{plain, plain, plain, plain}, t0); err != nil {
		t.Fatal(err)
	}
	// Job 1 fails once: retried, due again.
	// Job 2 dies, then is redriven.
	// Job 3 is released by a shutdown: it waits again, its attempt given
	// back, its lease token kept.
	// Job 4 stays a first attempt.
	jobs := lease(t0, 3)
	at := t0.Add(time.Second)
	finish(store.Outcome{JobID: jobs[0].ID, Queue: "q", Attempt: 1, Lease: jobs[0].Lease, Worker: "w1", Kind: store.Retry, At: at, Duration: store.Duration(time.Second),
		RunAt: at, RetryDelay: store.Duration(time.Millisecond), Error: "boom", Class: failure.Transient,
		Event: &store.Event{Kind: store.EventRetry, Attempt: 1, At: t0}})
	finish(store.Outcome{JobID: jobs[1].ID, Queue: "q", Attempt: 1, Lease: jobs[1].Lease, Worker: "w1", Kind: store.Bury, At: at, Duration: store.Duration(time.Second),
		Error: "bad", Class: failure.Permanent, DeadReason: "permanent", Fingerprint: "fp-1"})
	if _, err := s.Redrive(ctx, store.RedriveParams{IDs: []int64{jobs[1].ID}, Now: at}); err != nil {
		t.Fatal(err)
	}
	finish(store.Outcome{JobID: jobs[2].ID, Queue: "q", Attempt: 1, Lease: jobs[2].Lease, Worker: "w1", Kind: store.Release, At: at})
	if _, err := s.Enqueue(ctx, []store.NewJob{full}, at); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Enqueue(ctx, []store.NewJob{{Queue: "q", Kind: "later", MaxRetries: -1, RunAt: at.Add(time.Second)}}, at); err != nil {
		t.Fatal(err)
	}

	now := at.Add(time.Minute)
	got := lease(now, 100)
	if len(got) != 6 {
		t.Fatalf("fetched %d jobs, want 6", len(got))
	}
	for _, j := range got {
		want, err := s.Get(ctx, j.ID)
		if err != nil {
			t.Fatal(err)
		}
		want.History = nil
		if !reflect.DeepEqual(j, want) {
			t.Errorf("job %d (%s):\nfetched %+v\nstored  %+v", j.ID, j.Kind, *j, *want)
		}
	}
	st, err := s.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c := st.Jobs["q"]; c[store.Running] != 6 || c[store.Pending] != 0 || c[store.Scheduled] != 0 {
		t.Errorf("job counts %v, want 6 running and none waiting", c)
	}
}

// TestFinishBulkCompletionsFence checks the completions applied many to a
// statement: in a batch large enough for every statement size, a stale
// completion (wrong lease, another worker, a job already completed) and
// a job with two outcomes are told apart exactly, and only the outcomes
// applied move the counts and add their counters.
func TestFinishBulkCompletionsFence(t *testing.T) {
	ctx := t.Context()
	s := openTest(t)
	now := time.Now().Truncate(time.Microsecond)
	const n = 400 // 256 + 64 + 4*16 + 16 one by one
	enqueueN(t, s, n, now)
	jobs := fetch(t, s, "w1", n, now)
	if len(jobs) != n {
		t.Fatalf("fetched %d jobs, want %d", len(jobs), n)
	}
	var outs []store.Outcome
	stale := map[int]bool{}
	for i, j := range jobs {
		o := store.Outcome{JobID: j.ID, Queue: "q", Attempt: j.Attempt, Lease: j.Lease, Worker: "w1", Kind: store.Complete,
			At: now.Add(time.Duration(i) * time.Microsecond), Duration: store.Duration(i),
			Counters: []store.Counter{{Queue: "q", Name: store.StatSucceeded, N: 1}}}
		switch i {
		case 3, 300: // in the first and a later bulk statement
			o.Lease++
			stale[len(outs)] = true
		case 100:
			o.Worker = "w2"
			stale[len(outs)] = true
		case 200: // a second outcome for the same job, after the first
			outs = append(outs, o)
			stale[len(outs)] = true
		}
		outs = append(outs, o)
	}
	applied, err := s.Finish(ctx, outs)
	if err != nil {
		t.Fatal(err)
	}
	want := 0
	for i, o := range outs {
		if applied[i] == stale[i] {
			t.Errorf("outcome %d (job %d): applied %v, want %v", i, o.JobID, applied[i], !stale[i])
		}
		if !stale[i] {
			want++
		}
	}
	for i, o := range outs {
		j, err := s.Get(ctx, o.JobID)
		if err != nil {
			t.Fatal(err)
		}
		if applied[i] && (j.State != store.Completed || !j.FinishedAt.Equal(o.At) || j.LastDuration != o.Duration || j.Worker != "" || j.LeaseUntil != nil) {
			t.Errorf("job %d: %+v, want completed at %v after %v", o.JobID, *j, o.At, o.Duration)
		}
	}
	for _, i := range []int{3, 100, 300} {
		if j, _ := s.Get(ctx, jobs[i].ID); j.State != store.Running {
			t.Errorf("job %d, fenced out: state %s, want running", j.ID, j.State)
		}
	}
	st, err := s.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c := st.Jobs["q"]; c[store.Completed] != int64(want) || c[store.Running] != int64(n-want) {
		t.Errorf("job counts %v, want %d completed and %d running", c, want, n-want)
	}
	if got := st.Counters["q"][store.StatSucceeded]; got != int64(want) {
		t.Errorf("succeeded %d, want %d", got, want)
	}

	// Again, all stale now: nothing applies, nothing moves.
	applied, err = s.Finish(ctx, outs)
	if err != nil {
		t.Fatal(err)
	}
	for i := range outs {
		if applied[i] && !stale[i] {
			t.Errorf("outcome %d applied twice", i)
		}
	}
	st2, err := s.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(st2.Jobs, st.Jobs) {
		t.Errorf("job counts moved: %v, then %v", st.Jobs, st2.Jobs)
	}
}
