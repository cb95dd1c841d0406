package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/breaker"
	"github.com/redrivehq/redrive/internal/sqlitetest"
	"github.com/redrivehq/redrive/internal/testwait"
	"github.com/redrivehq/redrive/retry"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/postgres"
	"github.com/redrivehq/redrive/store/sqlite"
)

// The worker protocol's tests run on both stores, through real HTTP.

var protoSchemaSeq atomic.Int64

// openProtoStore opens a fresh store of the kind: SQLite in a temporary
// folder, or a new schema on REDRIVE_POSTGRES_URL (skipped without it,
// unless CI is set).
func openProtoStore(t testing.TB, kind string) store.Store {
	t.Helper()
	if kind == "sqlite" {
		st, err := sqlite.Open(context.Background(), sqlitetest.Path(t), sqlite.Options{Logger: quiet, Synchronous: "normal"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		return st
	}
	url := os.Getenv("REDRIVE_POSTGRES_URL")
	if url == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("CI is set and REDRIVE_POSTGRES_URL is not: the PostgreSQL tests cannot run")
		}
		t.Skip("REDRIVE_POSTGRES_URL is not set")
	}
	schema := fmt.Sprintf("redrive_proto_%d_%d", os.Getpid(), protoSchemaSeq.Add(1))
	st, err := postgres.Open(context.Background(), url, postgres.Options{Schema: schema, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = st.Pool().Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
		_ = st.Close()
	})
	pgSchemas.Store(st, schema)
	return st
}

// pgSchemas holds the schema of each PostgreSQL store the tests open.
var pgSchemas sync.Map

// reopen opens the PostgreSQL store of e again, as another process would
// (its own connections: the in-process wake-ups of e's store do not
// reach it).
func (e *protoEnv) reopen(t *testing.T) store.Store {
	t.Helper()
	schema, ok := pgSchemas.Load(e.st)
	if !ok {
		t.Fatal("not a PostgreSQL store of the tests")
	}
	st, err := postgres.Open(context.Background(), os.Getenv("REDRIVE_POSTGRES_URL"), postgres.Options{Schema: schema.(string), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// eachStore runs f on SQLite and on PostgreSQL.
func eachStore(t *testing.T, f func(t *testing.T, kind string)) {
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) { f(t, kind) })
	}
}

// protoEnv is the API with the worker protocol on a store.
type protoEnv struct {
	*env
	st       store.Store
	rw       *redrive.RemoteWorkers
	exec     *redrive.Executor
	breakers *breaker.Registry
}

type protoOpts struct {
	policy        *retry.Policy
	queuePolicies map[string]retry.Policy
	lease         time.Duration
	poll          time.Duration
}

func newProtoEnv(t *testing.T, kind string, o protoOpts) *protoEnv {
	t.Helper()
	st := openProtoStore(t, kind)
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quiet})
	br := breaker.NewRegistry(breaker.DefaultConfig())
	ex := redrive.NewExecutor(redrive.ExecutorOptions{ID: "serve", Policy: o.policy, QueuePolicies: o.queuePolicies,
		Breakers: br, Logger: quiet, DisableRetryBudget: true})
	rw := redrive.NewRemoteWorkers(c, ex, redrive.RemoteOptions{LeaseDuration: o.lease, PollInterval: o.poll, Logger: quiet})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = rw.Run(ctx)
	}()
	api := New(Options{Client: c, Logger: quiet, Workers: rw, Breakers: br})
	srv := httptest.NewServer(api)
	t.Cleanup(func() {
		cancel()
		<-done
	})
	t.Cleanup(srv.Close)
	t.Cleanup(func() { _ = api.Close() })
	return &protoEnv{env: &env{t: t, srv: srv, api: api, client: c}, st: st, rw: rw, exec: ex, breakers: br}
}

// remoteWorkers runs the worker protocol on st until the test ends.
func remoteWorkers(t *testing.T, st store.Store, br *breaker.Registry) *redrive.RemoteWorkers {
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quiet})
	ex := redrive.NewExecutor(redrive.ExecutorOptions{ID: "serve", Breakers: br, Logger: quiet})
	rw := redrive.NewRemoteWorkers(c, ex, redrive.RemoteOptions{Logger: quiet})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = rw.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return rw
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// lease leases for worker from queue "q", kinds "k", waiting up to wait.
func (e *protoEnv) lease(worker string, max int, wait string) LeaseAnswer {
	e.t.Helper()
	var a LeaseAnswer
	e.want(e.do("POST", "/v1/worker/lease", mustJSON(e.t, LeaseBody{Worker: worker, Queues: []string{"q"}, Kinds: []string{"k"},
		Max: max, Wait: wait})), 200, &a)
	return a
}

// outcomes reports outcomes for worker and returns the answer.
func (e *protoEnv) outcomes(worker string, items ...OutcomeItem) []OutcomeStatus {
	e.t.Helper()
	var a OutcomesAnswer
	e.want(e.do("POST", "/v1/worker/outcomes", mustJSON(e.t, OutcomesBody{Worker: worker, Outcomes: items})), 200, &a)
	if len(a.Outcomes) != len(items) {
		e.t.Fatalf("%d answers for %d outcomes", len(a.Outcomes), len(items))
	}
	return a.Outcomes
}

func (e *protoEnv) enqueue(opts ...redrive.Option) *redrive.Job {
	e.t.Helper()
	j, err := e.client.Enqueue(context.Background(), "k", map[string]int{"n": 1}, append([]redrive.Option{redrive.InQueue("q")}, opts...)...)
	if err != nil {
		e.t.Fatal(err)
	}
	return j
}

func (e *protoEnv) get(id int64) *redrive.Job {
	e.t.Helper()
	j, err := e.client.Get(context.Background(), id)
	if err != nil {
		e.t.Fatal(err)
	}
	return j
}

func TestWorkerLeaseComplete(t *testing.T) {
	eachStore(t, func(t *testing.T, kind string) {
		e := newProtoEnv(t, kind, protoOpts{})
		j := e.enqueue()
		a := e.lease("py-1@box-a", 10, "")
		if len(a.Jobs) != 1 || a.Jobs[0].ID != j.ID || a.Jobs[0].Attempt != 1 || a.Jobs[0].Lease == 0 {
			t.Fatalf("lease: %+v", a)
		}
		if string(a.Jobs[0].Payload) != `{"n":1}` || a.Lease != "30s" || a.HeartbeatEvery != "10s" {
			t.Fatalf("lease: %+v", a)
		}
		got := e.outcomes("py-1@box-a", OutcomeItem{ID: j.ID, Lease: a.Jobs[0].Lease, Outcome: "complete", Result: json.RawMessage(`{"pages":3}`)})
		if got[0].Status != 200 || got[0].State != store.Completed {
			t.Fatalf("outcome: %+v", got[0])
		}
		if j := e.get(j.ID); j.State != store.Completed {
			t.Fatalf("job is %s", j.State)
		}
		// The worker shows, remote, in the registry.
		var wl WorkerList
		e.want(e.do("GET", "/v1/workers", ""), 200, &wl)
		if len(wl.Workers) != 1 || !wl.Workers[0].Remote || wl.Workers[0].Host != "box-a" || wl.Workers[0].Queues["q"] != 10 {
			t.Fatalf("workers: %+v", wl.Workers)
		}
		// Again: the pair is no longer current.
		got = e.outcomes("py-1@box-a", OutcomeItem{ID: j.ID, Lease: a.Jobs[0].Lease, Outcome: "complete"})
		if got[0].Status != 409 || got[0].Error.Code != "lease_lost" {
			t.Fatalf("second outcome: %+v", got[0])
		}
	})
}

// fixed is a policy without jitter: 3 retries, 1m, 2m, 4m apart.
var fixed = retry.Policy{MaxRetries: 3, Initial: time.Minute, Multiplier: 2, MaxDelay: time.Hour, Jitter: retry.JitterNone}

func TestWorkerFailTransientRetriedOnPolicy(t *testing.T) {
	eachStore(t, func(t *testing.T, kind string) {
		e := newProtoEnv(t, kind, protoOpts{queuePolicies: map[string]retry.Policy{"q": fixed}})
		j := e.enqueue()
		a := e.lease("py-1@box-a", 1, "")
		before := time.Now()
		got := e.outcomes("py-1@box-a", OutcomeItem{ID: j.ID, Lease: a.Jobs[0].Lease, Outcome: "fail", Class: "transient",
			Error: "timeout", Cause: "dial tcp: i/o timeout", Reason: "timeout"})
		if got[0].Status != 200 || got[0].State != store.Scheduled || got[0].RunAt == nil {
			t.Fatalf("outcome: %+v", got[0])
		}
		// The queue's policy: the first retry a minute after the failure.
		if d := got[0].RunAt.Sub(before); d < time.Minute || d > time.Minute+time.Minute/2 {
			t.Fatalf("retry in %s, want 1m by the queue's policy", d)
		}
		job := e.get(j.ID)
		ev := job.History[len(job.History)-1]
		if job.State != store.Scheduled || ev.Kind != store.EventRetry || ev.Class != "transient" || ev.Worker != "py-1@box-a" ||
			ev.Error != "timeout: dial tcp: i/o timeout" || ev.Reason != "timeout" || time.Duration(ev.Delay) != time.Minute {
			t.Fatalf("job %s, event %+v", job.State, ev)
		}
		if a.Jobs[0].MaxRetries != 3 {
			t.Fatalf("max_retries %d, want the policy's 3", a.Jobs[0].MaxRetries)
		}
	})
}

func TestWorkerRateLimitedRetryAfter(t *testing.T) {
	eachStore(t, func(t *testing.T, kind string) {
		e := newProtoEnv(t, kind, protoOpts{queuePolicies: map[string]retry.Policy{"q": fixed}})
		j := e.enqueue()
		a := e.lease("py-1@box-a", 1, "")
		before := time.Now()
		got := e.outcomes("py-1@box-a", OutcomeItem{ID: j.ID, Lease: a.Jobs[0].Lease, Outcome: "fail", Class: "rate_limited",
			Error: "429 from CRM", Reason: "http_429", RetryAfter: "10m"})
		if got[0].Status != 200 || got[0].State != store.Scheduled {
			t.Fatalf("outcome: %+v", got[0])
		}
		// Retry-After beats the policy's minute.
		if d := got[0].RunAt.Sub(before); d < 10*time.Minute {
			t.Fatalf("retry in %s, want at least the 10m Retry-After", d)
		}
		if job := e.get(j.ID); job.LastErrorClass.String() != "rate_limited" {
			t.Fatalf("class %s", job.LastErrorClass)
		}
	})
}

func TestWorkerPermanentDead(t *testing.T) {
	eachStore(t, func(t *testing.T, kind string) {
		e := newProtoEnv(t, kind, protoOpts{})
		j := e.enqueue()
		a := e.lease("py-1@box-a", 1, "")
		var st OutcomeStatus
		e.want(e.do("POST", fmt.Sprintf("/v1/worker/jobs/%d/outcome", j.ID), mustJSON(t, OneOutcomeBody{Worker: "py-1@box-a",
			Lease: a.Jobs[0].Lease, Outcome: "fail", Class: "permanent", Error: "bad document"})), 200, &st)
		if st.State != store.Dead {
			t.Fatalf("outcome: %+v", st)
		}
		job := e.get(j.ID)
		ev := job.History[len(job.History)-1]
		if job.State != store.Dead || ev.Kind != store.EventDead || ev.Class != "permanent" || ev.Worker != "py-1@box-a" {
			t.Fatalf("job %s, event %+v", job.State, ev)
		}
	})
}

func TestWorkerSnoozeAndRelease(t *testing.T) {
	eachStore(t, func(t *testing.T, kind string) {
		e := newProtoEnv(t, kind, protoOpts{})
		snoozed, released := e.enqueue(), e.enqueue()
		a := e.lease("py-1@box-a", 2, "")
		if len(a.Jobs) != 2 {
			t.Fatalf("lease: %+v", a)
		}
		leaseOf := map[int64]int64{a.Jobs[0].ID: a.Jobs[0].Lease, a.Jobs[1].ID: a.Jobs[1].Lease}
		got := e.outcomes("py-1@box-a",
			OutcomeItem{ID: snoozed.ID, Lease: leaseOf[snoozed.ID], Outcome: "snooze", Delay: "1h"},
			OutcomeItem{ID: released.ID, Lease: leaseOf[released.ID], Outcome: "release"})
		if got[0].State != store.Scheduled || got[0].RunAt.Before(time.Now().Add(59*time.Minute)) || got[1].State != store.Pending {
			t.Fatalf("outcomes: %+v", got)
		}
		// Neither used an attempt: the released job's next lease is its
		// first attempt again.
		b := e.lease("py-1@box-a", 2, "")
		if len(b.Jobs) != 1 || b.Jobs[0].ID != released.ID || b.Jobs[0].Attempt != 1 || b.Jobs[0].Lease == leaseOf[released.ID] {
			t.Fatalf("lease after release: %+v", b)
		}
		if j := e.get(snoozed.ID); j.Attempt != 0 || j.History[len(j.History)-1].Kind != store.EventSnoozed {
			t.Fatalf("snoozed job: attempt %d, history %+v", j.Attempt, j.History)
		}
	})
}

func TestWorkerCancelReachesLongPoll(t *testing.T) {
	eachStore(t, func(t *testing.T, kind string) {
		e := newProtoEnv(t, kind, protoOpts{})
		j := e.enqueue()
		a := e.lease("py-1@box-a", 1, "")
		polled := make(chan CancelsAnswer, 1)
		go func() {
			var c CancelsAnswer
			r := e.do("POST", "/v1/worker/cancels", `{"worker":"py-1@box-a","wait":"60s"}`)
			_ = json.Unmarshal(r.body, &c)
			polled <- c
		}()
		// Another process on the store cancels it (a client of its own).
		other := redrive.NewClient(e.st, redrive.ClientOptions{Logger: quiet})
		if _, err := other.Cancel(context.Background(), j.ID); err != nil {
			t.Fatal(err)
		}
		c := <-polled
		if len(c.Canceled) != 1 || c.Canceled[0].ID != j.ID || c.Canceled[0].Lease != a.Jobs[0].Lease {
			t.Fatalf("cancels: %+v", c)
		}
		// The heartbeat says so too, and any outcome but complete ends
		// the job canceled.
		var hb HeartbeatAnswer
		e.want(e.do("POST", "/v1/worker/heartbeat", mustJSON(t, HeartbeatBody{Worker: "py-1@box-a",
			Jobs: []HeartbeatItem{{ID: j.ID, Lease: a.Jobs[0].Lease}}})), 200, &hb)
		if !hb.Jobs[0].Held || !hb.Jobs[0].Canceled {
			t.Fatalf("heartbeat: %+v", hb)
		}
		got := e.outcomes("py-1@box-a", OutcomeItem{ID: j.ID, Lease: a.Jobs[0].Lease, Outcome: "fail", Class: "transient", Error: "aborted"})
		if got[0].State != store.Canceled {
			t.Fatalf("outcome: %+v", got[0])
		}
		if job := e.get(j.ID); job.State != store.Canceled {
			t.Fatalf("job is %s", job.State)
		}
	})
}

func TestWorkerLongPollWokenByEnqueue(t *testing.T) {
	eachStore(t, func(t *testing.T, kind string) {
		e := newProtoEnv(t, kind, protoOpts{poll: time.Hour})
		// The long-poll does not poll within its wait: only a wake-up
		// (or a fetch after the enqueue) can hand it the job.
		leased := make(chan LeaseAnswer, 1)
		go func() {
			var a LeaseAnswer
			r := e.do("POST", "/v1/worker/lease", `{"worker":"py-1@box-a","queues":["q"],"kinds":["k"],"wait":"60s"}`)
			_ = json.Unmarshal(r.body, &a)
			leased <- a
		}()
		// Enqueued by another process on the store: on PostgreSQL only
		// its notification wakes the long-poll.
		st := e.st
		if kind == "postgres" {
			st = e.reopen(t)
		}
		c := redrive.NewClient(st, redrive.ClientOptions{Logger: quiet})
		j, err := c.Enqueue(context.Background(), "k", nil, redrive.InQueue("q"))
		if err != nil {
			t.Fatal(err)
		}
		a := <-leased
		if len(a.Jobs) != 1 || a.Jobs[0].ID != j.ID {
			t.Fatalf("lease: %+v", a)
		}
	})
}

// rescuer runs a Go worker on e's store (on a queue of its own), whose
// maintenance rescues expired leases every 10ms, until the test ends.
func (e *protoEnv) rescuer(t *testing.T) {
	w := redrive.NewWorker(redrive.NewClient(e.st, redrive.ClientOptions{Logger: quiet}), redrive.WorkerOptions{
		Queues: map[string]int{"rescuer-only": 1}, RescueInterval: 10 * time.Millisecond, Logger: quiet,
		Policy: &fixed})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = w.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

func TestWorkerLateOutcomeAfterRescue(t *testing.T) {
	eachStore(t, func(t *testing.T, kind string) {
		e := newProtoEnv(t, kind, protoOpts{lease: 200 * time.Millisecond})
		j := e.enqueue()
		a := e.lease("py-1@box-a", 1, "")
		e.rescuer(t)
		// The worker disappears: its lease expires and the rescue makes
		// the attempt a failure, retried.
		testwait.Until(t, "the expired lease rescued", 30*time.Second, func() bool { return e.get(j.ID).State != store.Running })
		before := e.get(j.ID)
		if before.State != store.Scheduled || before.History[len(before.History)-1].Reason != "lease_expired" {
			t.Fatalf("rescued job: %s %+v", before.State, before.History)
		}
		// Its late outcome is refused and changes nothing.
		got := e.outcomes("py-1@box-a", OutcomeItem{ID: j.ID, Lease: a.Jobs[0].Lease, Outcome: "complete"})
		if got[0].Status != 409 || got[0].Error.Code != "lease_lost" {
			t.Fatalf("late outcome: %+v", got[0])
		}
		r := e.do("POST", fmt.Sprintf("/v1/worker/jobs/%d/outcome", j.ID), mustJSON(t, OneOutcomeBody{Worker: "py-1@box-a",
			Lease: a.Jobs[0].Lease, Outcome: "fail", Error: "late"}))
		wantErr(t, r, 409, "lease_lost", "")
		var hb HeartbeatAnswer
		e.want(e.do("POST", "/v1/worker/heartbeat", mustJSON(t, HeartbeatBody{Worker: "py-1@box-a",
			Jobs: []HeartbeatItem{{ID: j.ID, Lease: a.Jobs[0].Lease}}})), 200, &hb)
		if hb.Jobs[0].Held {
			t.Fatalf("heartbeat of a rescued lease: %+v", hb)
		}
		after := e.get(j.ID)
		if after.State != before.State || len(after.History) != len(before.History) || after.Lease != before.Lease || !after.RunAt.Equal(before.RunAt) {
			t.Fatalf("the late outcome changed the job: %+v, was %+v", after, before)
		}
	})
}

func TestWorkerBadInput(t *testing.T) {
	eachStore(t, func(t *testing.T, kind string) {
		e := newProtoEnv(t, kind, protoOpts{})
		j, other := e.enqueue(), e.enqueue()
		a := e.lease("py-1@box-a", 1, "")
		b := e.lease("node-2@box-b", 1, "")
		if len(a.Jobs) != 1 || len(b.Jobs) != 1 || a.Jobs[0].ID != j.ID || b.Jobs[0].ID != other.ID {
			t.Fatalf("leases: %+v %+v", a, b)
		}
		lease := a.Jobs[0].Lease
		// An unknown lease token, another worker's job, an unknown job.
		got := e.outcomes("py-1@box-a",
			OutcomeItem{ID: j.ID, Lease: lease + 5, Outcome: "complete"},
			OutcomeItem{ID: other.ID, Lease: b.Jobs[0].Lease, Outcome: "complete"},
			OutcomeItem{ID: 999999, Lease: 1, Outcome: "complete"})
		if got[0].Status != 409 || got[0].Error.Code != "lease_lost" || got[1].Status != 409 || got[1].Error.Code != "lease_lost" ||
			got[2].Status != 404 || got[2].Error.Code != "not_found" {
			t.Fatalf("outcomes: %+v", got)
		}
		for _, x := range got[:2] {
			if x.Error.Message == "" {
				t.Fatalf("no message: %+v", x)
			}
		}
		r := e.do("POST", "/v1/worker/jobs/999999/outcome", `{"worker":"py-1@box-a","lease":1,"outcome":"complete"}`)
		wantErr(t, r, 404, "not_found", "")
		// Malformed bodies: 400 naming the item, nothing applied (the
		// good first item included).
		for _, c := range []struct{ body, field string }{
			{`{"worker":"py-1@box-a","outcomes":[{"id":%d,"lease":%d,"outcome":"complete"},{"id":1,"lease":1,"outcome":"fail","class":"flaky","error":"x"}]}`, "outcomes[1].class"},
			{`{"worker":"py-1@box-a","outcomes":[{"id":%d,"lease":%d,"outcome":"complete"},{"id":1,"lease":1,"outcome":"fail"}]}`, "outcomes[1].error"},
			{`{"worker":"py-1@box-a","outcomes":[{"id":%d,"lease":%d,"outcome":"complete"},{"id":1,"lease":1,"outcome":"done"}]}`, "outcomes[1].outcome"},
			{`{"worker":"py-1@box-a","outcomes":[{"id":%d,"lease":%d,"outcome":"complete"},{"id":1,"lease":1,"outcome":"snooze","delay":"soon"}]}`, "outcomes[1].delay"},
			{`{"worker":"py-1@box-a","outcomes":[{"id":%d,"lease":%d,"outcome":"complete"},{"id":1,"lease":1,"outcome":"fail","error":"x","retry_after":"-1s"}]}`, "outcomes[1].retry_after"},
			{`{"worker":"py 1","outcomes":[{"id":%d,"lease":%d,"outcome":"complete"}]}`, "worker"},
		} {
			r := e.do("POST", "/v1/worker/outcomes", fmt.Sprintf(c.body, j.ID, lease))
			wantErr(t, r, 400, "invalid", c.field)
		}
		if job := e.get(j.ID); job.State != store.Running {
			t.Fatalf("a refused batch changed the job: %s", job.State)
		}
		for _, c := range []struct{ body, field string }{
			{`{"worker":"py-1@box-a","queues":[],"kinds":["k"]}`, "queues"},
			{`{"worker":"py-1@box-a","queues":["q"],"kinds":[]}`, "kinds"},
			{`{"worker":"py-1@box-a","queues":["q"],"kinds":["k"],"max":1001}`, "max"},
			{`{"worker":"py-1@box-a","queues":["q"],"kinds":["k"],"wait":"2m"}`, "wait"},
			{`{"worker":"","queues":["q"],"kinds":["k"]}`, "worker"},
			{`{"worker":"py-1@box-a","queues":["q"],"kinds":["k"],"request":"a/b"}`, "request"},
			{`{"worker":"py-1@box-a","queues":["q"],"kinds":["k"],"resend":true}`, "request"},
			{`{"worker":"py-1@box-a","queues":["q"],"kinds":["k"],"request":"r1","held":[{"id":1,"lease":1}]}`, "held"},
			{`{"worker":"py-1@box-a","queues":["q"],"kinds":["k"],"request":"r1","resend":true,"held":[{"id":1,"lease":0}]}`, "held[0]"},
		} {
			wantErr(t, e.do("POST", "/v1/worker/lease", c.body), 400, "invalid", c.field)
		}
		wantErr(t, e.do("POST", "/v1/worker/cancels", `{"worker":"py-1@box-a","wait":"61s"}`), 400, "invalid", "wait")
	})
}

func TestWorkerBreakerOpenDeferred(t *testing.T) {
	eachStore(t, func(t *testing.T, kind string) {
		e := newProtoEnv(t, kind, protoOpts{})
		br := e.breakers.Configure("ocr-api", breaker.Config{Failures: 1, Window: time.Minute, BreakDuration: time.Hour})
		j := e.enqueue()
		a := e.lease("py-1@box-a", 1, "")
		// The attempt fails on the kind's dependency: the breaker opens.
		got := e.outcomes("py-1@box-a", OutcomeItem{ID: j.ID, Lease: a.Jobs[0].Lease, Outcome: "fail", Class: "transient",
			Error: "503 from OCR", Dependency: "ocr-api"})
		if got[0].Status != 200 || br.State() != breaker.Open {
			t.Fatalf("outcome %+v, breaker %s", got[0], br.State())
		}
		// A job of a kind that calls it is deferred, not handed out.
		k := e.enqueue()
		var la LeaseAnswer
		e.want(e.do("POST", "/v1/worker/lease", `{"worker":"py-1@box-a","queues":["q"],"kinds":["k"],"dependencies":{"k":"ocr-api"},"max":10}`), 200, &la)
		if len(la.Jobs) != 0 {
			t.Fatalf("handed out with the breaker open: %+v", la)
		}
		job := e.get(k.ID)
		ev := job.History[len(job.History)-1]
		if job.State != store.Scheduled || job.Attempt != 0 || ev.Kind != store.EventDeferred || ev.Worker != "py-1@box-a" {
			t.Fatalf("job %s attempt %d, event %+v", job.State, job.Attempt, ev)
		}
	})
}

func TestWorkerLimitRespected(t *testing.T) {
	eachStore(t, func(t *testing.T, kind string) {
		e := newProtoEnv(t, kind, protoOpts{})
		if err := e.client.SetLimits([]redrive.ConcurrencyLimit{{Name: "per-customer", Kind: "k", Key: "payload.customer", Max: 1}}); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if _, err := e.client.Enqueue(context.Background(), "k", map[string]string{"customer": "acme"}, redrive.InQueue("q")); err != nil {
				t.Fatal(err)
			}
		}
		a := e.lease("py-1@box-a", 10, "")
		if len(a.Jobs) != 1 {
			t.Fatalf("%d jobs of a group limited to 1 handed out", len(a.Jobs))
		}
		if b := e.lease("node-2@box-b", 10, ""); len(b.Jobs) != 0 {
			t.Fatalf("another worker got %d jobs of the full group", len(b.Jobs))
		}
		// Its outcome frees the slot.
		e.outcomes("py-1@box-a", OutcomeItem{ID: a.Jobs[0].ID, Lease: a.Jobs[0].Lease, Outcome: "complete"})
		if b := e.lease("node-2@box-b", 10, "5s"); len(b.Jobs) != 1 {
			t.Fatalf("after the outcome: %d jobs", len(b.Jobs))
		}
	})
}

func TestWorkerRegistryAndStop(t *testing.T) {
	eachStore(t, func(t *testing.T, kind string) {
		e := newProtoEnv(t, kind, protoOpts{})
		e.lease("py-7@box-c", 10, "")
		var first WorkerList
		e.want(e.do("GET", "/v1/workers", ""), 200, &first)
		// A lease with another max (the worker's free slots) is no new
		// registration.
		e.lease("py-7@box-c", 3, "")
		var again WorkerList
		e.want(e.do("GET", "/v1/workers", ""), 200, &again)
		if len(again.Workers) != 1 || !again.Workers[0].StartedAt.Equal(first.Workers[0].StartedAt) || again.Workers[0].Queues["q"] != 10 {
			t.Fatalf("registry after a second lease: %+v, was %+v", again.Workers, first.Workers)
		}
		e.want(e.do("POST", "/v1/worker/stop", `{"worker":"py-7@box-c"}`), 200, nil)
		var stopped WorkerList
		e.want(e.do("GET", "/v1/workers", ""), 200, &stopped)
		if len(stopped.Workers) != 1 || stopped.Workers[0].State != redrive.WorkerStopped || !stopped.Workers[0].Remote {
			t.Fatalf("after stop: %+v", stopped.Workers)
		}
	})
}

// TestWorkerLeaseSentAgain: a lease call whose answer was lost, sent
// again with its request id and the leases the worker holds, answers the
// jobs leased for it, with their tokens and renewed leases, and leases
// no others; sent again once answered, it leases anew.
func TestWorkerLeaseSentAgain(t *testing.T) {
	eachStore(t, func(t *testing.T, kind string) {
		e := newProtoEnv(t, kind, protoOpts{})
		held, lost, waiting := e.enqueue(), e.enqueue(), e.enqueue()
		body := func(max int, request string, resend bool, held ...JobLease) string {
			return mustJSON(t, LeaseBody{Worker: "py-1@box-a", Queues: []string{"q"}, Kinds: []string{"k"}, Max: max,
				Request: request, Resend: resend, Held: held})
		}
		var a LeaseAnswer
		e.want(e.do("POST", "/v1/worker/lease", body(1, "call-1", false)), 200, &a)
		if len(a.Jobs) != 1 || a.Jobs[0].ID != held.ID {
			t.Fatalf("first lease: %+v", a.Jobs)
		}
		first := JobLease{ID: a.Jobs[0].ID, Lease: a.Jobs[0].Lease}
		// This answer is lost on its way.
		e.want(e.do("POST", "/v1/worker/lease", body(1, "call-2", false)), 200, &a)
		if len(a.Jobs) != 1 || a.Jobs[0].ID != lost.ID {
			t.Fatalf("second lease: %+v", a.Jobs)
		}
		cut := a.Jobs[0]
		var again LeaseAnswer
		e.want(e.do("POST", "/v1/worker/lease", body(5, "call-2", true, first)), 200, &again)
		if len(again.Jobs) != 1 || again.Jobs[0].ID != cut.ID || again.Jobs[0].Lease != cut.Lease || !again.Jobs[0].LeaseUntil.After(cut.LeaseUntil) ||
			again.Jobs[0].Attempt != 1 || string(again.Jobs[0].Payload) != `{"n":1}` {
			t.Fatalf("sent again: %+v, the lost answer had %+v", again.Jobs, cut)
		}
		if j := e.get(waiting.ID); j.State != store.Pending {
			t.Fatalf("the call sent again leased another job: %s", j.State)
		}
		// Once its answer came, the worker holds both; sent again, the
		// call finds none unknown and leases the job waiting.
		e.want(e.do("POST", "/v1/worker/lease", body(5, "call-2", true, first, JobLease{ID: cut.ID, Lease: cut.Lease})), 200, &again)
		if len(again.Jobs) != 1 || again.Jobs[0].ID != waiting.ID {
			t.Fatalf("sent again with nothing lost: %+v", again.Jobs)
		}
		got := e.outcomes("py-1@box-a", OutcomeItem{ID: cut.ID, Lease: cut.Lease, Outcome: "complete"})
		if got[0].Status != 200 {
			t.Fatalf("outcome of the job answered again: %+v", got[0])
		}
	})
}
