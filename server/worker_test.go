package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/breaker"
	"github.com/redrivehq/redrive/internal/sqlitetest"
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
func openProtoStore(t *testing.T, kind string) store.Store {
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
}

func newProtoEnv(t *testing.T, kind string, o protoOpts) *protoEnv {
	t.Helper()
	st := openProtoStore(t, kind)
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quiet})
	br := breaker.NewRegistry(breaker.DefaultConfig())
	ex := redrive.NewExecutor(redrive.ExecutorOptions{ID: "serve", Policy: o.policy, QueuePolicies: o.queuePolicies,
		Breakers: br, Logger: quiet, DisableRetryBudget: true})
	rw := redrive.NewRemoteWorkers(c, ex, redrive.RemoteOptions{LeaseDuration: o.lease, Logger: quiet})
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
