package postgres_test

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/postgres"
)

// TestRawDecode: jobs of every shape read the same decoded from their
// bytes as through pgx's scan, with and without their history, by List,
// Get and Fetch.
func TestRawDecode(t *testing.T) {
	s := openFresh(t)
	ctx := context.Background()
	if fetch, list, err := postgres.RawLayouts(ctx, s); err != nil || !fetch || !list {
		t.Fatalf("rows decoded from their bytes: fetch %v, list %v (%v); want both", fetch, list, err)
	}
	jobs, err := s.Enqueue(ctx, []store.NewJob{
		{Queue: "q", Kind: "plain", Payload: json.RawMessage(`{"n":1}`), MaxRetries: -1},
		{Queue: "q", Kind: "keyed", Payload: json.RawMessage(`{"é":"ü"}`), MaxRetries: 3, Policy: json.RawMessage(`{"max_retries":3}`),
			IdempotencyKey: "key-1", Dependency: "api.example.com"},
		{Queue: "q", Kind: "retried", Payload: json.RawMessage(`[]`), MaxRetries: 5, NotReprocessable: true},
		{Queue: "q", Kind: "completed", Payload: json.RawMessage(`{}`), MaxRetries: -1},
		{Queue: "q", Kind: "dead", Payload: json.RawMessage(`{"x":null}`), MaxRetries: 0},
		{Queue: "q", Kind: "canceling", Payload: json.RawMessage(`{}`), MaxRetries: -1},
		{Queue: "later", Kind: "scheduled", Payload: json.RawMessage(`{}`), MaxRetries: -1, RunAt: t0.Add(time.Hour)},
	}, t0)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Fetch(ctx, store.FetchParams{Queue: "q", Limit: 10, Now: t0, LeaseUntil: t0.Add(time.Minute), Worker: "w"})
	if err != nil || len(got) != 6 {
		t.Fatalf("Fetch: %d jobs, %v", len(got), err)
	}
	byKind := map[string]*store.Job{}
	for _, j := range got {
		byKind[j.Kind] = j
	}
	at := t0.Add(time.Second)
	out := func(kind string, k store.OutcomeKind) store.Outcome {
		j := byKind[kind]
		return store.Outcome{JobID: j.ID, Queue: j.Queue, Attempt: j.Attempt, Lease: j.Lease, Worker: j.Worker, Kind: k, At: at, Duration: store.Duration(1500 * time.Microsecond)}
	}
	retry := out("retried", store.Retry)
	retry.RunAt, retry.Class, retry.Error, retry.RetryDelay = t0.Add(time.Minute), failure.RateLimited, "429 – slow down", store.Duration(time.Second)
	done := out("completed", store.Complete)
	done.Progress = &store.JobProgress{Done: 7, Total: 9, At: at}
	dead := out("dead", store.Bury)
	dead.Class, dead.Error, dead.DeadReason, dead.Fingerprint = failure.Permanent, "404", "permanent", "fp-1"
	dead.Event = &store.Event{Kind: store.EventDead, Attempt: 1, At: at, Error: "404", Class: failure.Permanent.String()}
	if _, err := s.Finish(ctx, []store.Outcome{retry, done, dead}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Cancel(ctx, byKind["canceling"].ID, at); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pool().Exec(ctx, `UPDATE `+s.Schema()+`.jobs SET replay_of = $1 WHERE id = $2`, jobs[0].ID, jobs[1].ID); err != nil {
		t.Fatal(err)
	}

	read := func(raw bool) (listed []*store.Job, one *store.Job) {
		t.Helper()
		defer postgres.SetRawDecode(raw)()
		res, err := s.List(ctx, store.Filter{}, store.Page{Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		if one, err = s.Get(ctx, byKind["dead"].ID); err != nil {
			t.Fatal(err)
		}
		return res.Jobs, one
	}
	rawList, rawOne := read(true)
	scanList, scanOne := read(false)
	if len(rawList) != len(jobs) {
		t.Fatalf("List: %d jobs, want %d", len(rawList), len(jobs))
	}
	for i := range rawList {
		if !reflect.DeepEqual(rawList[i], scanList[i]) {
			t.Errorf("List: job %d decoded from bytes\n%+v\nthrough pgx\n%+v", rawList[i].ID, *rawList[i], *scanList[i])
		}
	}
	if !reflect.DeepEqual(rawOne, scanOne) {
		t.Errorf("Get: decoded from bytes\n%+v\nthrough pgx\n%+v", *rawOne, *scanOne)
	}
	// The retried job, due again, is fetched as it is then stored (without
	// its history).
	rawFetched, err := s.Fetch(ctx, store.FetchParams{Queue: "q", Limit: 10, Now: t0.Add(time.Hour), LeaseUntil: t0.Add(2 * time.Hour), Worker: "w"})
	if err != nil {
		t.Fatal(err)
	}
	if len(rawFetched) != 1 || rawFetched[0].Kind != "retried" {
		t.Fatalf("Fetch after an hour: %v, want the retried job", rawFetched)
	}
	stored := func() *store.Job {
		defer postgres.SetRawDecode(false)()
		j, err := s.Get(ctx, rawFetched[0].ID)
		if err != nil {
			t.Fatal(err)
		}
		j.History = nil
		return j
	}()
	if !reflect.DeepEqual(rawFetched[0], stored) {
		t.Errorf("Fetch: decoded from bytes\n%+v\nstored\n%+v", *rawFetched[0], *stored)
	}
}

// TestRawDecodeFarTimes: times more than ~292 years from 2000 (beyond a
// time.Duration of microseconds) read the same by List and Fetch
// (decoded from their bytes) as by Get (pgx's scan), up to the ends of
// PostgreSQL's range.
func TestRawDecodeFarTimes(t *testing.T) {
	s := openFresh(t)
	ctx := context.Background()
	far := []time.Time{
		time.Date(2400, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(1650, 6, 1, 12, 0, 0, 123456000, time.UTC),
		time.Date(294276, 12, 31, 23, 59, 59, 999999000, time.UTC),
		time.Date(-4713, 11, 24, 0, 0, 0, 0, time.UTC),
	}
	var nj []store.NewJob
	for _, at := range far {
		nj = append(nj, store.NewJob{Queue: "far", Kind: "k", Payload: json.RawMessage(`{}`), MaxRetries: -1, RunAt: at})
	}
	if _, err := s.Enqueue(ctx, nj, t0); err != nil {
		t.Fatal(err)
	}
	res, err := s.List(ctx, store.Filter{Queue: "far"}, store.Page{Limit: 10})
	if err != nil || len(res.Jobs) != len(far) {
		t.Fatalf("List: %d jobs, %v", len(res.Jobs), err)
	}
	listed := map[time.Time]bool{}
	for _, j := range res.Jobs {
		listed[j.RunAt] = true
		got, err := s.Get(ctx, j.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !got.RunAt.Equal(j.RunAt) {
			t.Errorf("job %d: List says run_at %v, Get %v", j.ID, j.RunAt, got.RunAt)
		}
	}
	for _, at := range far {
		if !listed[at] {
			t.Errorf("run_at %v: not listed (listed %v)", at, listed)
		}
	}
	// The ones due (in the past) are fetched with their run_at.
	fetched, err := s.Fetch(ctx, store.FetchParams{Queue: "far", Limit: 10, Now: t0, LeaseUntil: t0.Add(time.Minute), Worker: "w"})
	if err != nil || len(fetched) != 2 {
		t.Fatalf("Fetch: %d jobs, %v; want the 2 due", len(fetched), err)
	}
	for _, j := range fetched {
		if !j.RunAt.Equal(far[1]) && !j.RunAt.Equal(far[3]) {
			t.Errorf("fetched job %d with run_at %v, want %v or %v", j.ID, j.RunAt, far[1], far[3])
		}
	}
}
