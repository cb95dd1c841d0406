package server

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/redrivehq/redrive"
)

// TestWorkerLeaseNeedsReveal: the worker protocol hands a job's payload
// over whole, its secrets included (a worker needs them to run it): a
// token whose role may not read secrets (reveal=true is admin's) must
// not get them by leasing the job instead. The protocol is the worker
// role's (and the admin's), which operate does not include.
func TestWorkerLeaseNeedsReveal(t *testing.T) {
	st := openProtoStore(t, "sqlite")
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quiet})
	ex := redrive.NewExecutor(redrive.ExecutorOptions{ID: "serve", Logger: quiet})
	rw := redrive.NewRemoteWorkers(c, ex, redrive.RemoteOptions{Logger: quiet})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = rw.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	opts := roleOptions()
	opts.Client, opts.Logger, opts.Workers = c, quiet, rw
	api := New(opts)
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { _ = api.Close() })
	e := &env{t: t, srv: srv, api: api, client: c}
	operate := "Bearer " + roleTokens[RoleOperate]

	const secret = "Bearer sk-live-SECRET-0123456789"
	if _, err := c.Enqueue(t.Context(), "k", json.RawMessage(`{"url":"https://api.example.com/v1","headers":{"Authorization":"`+secret+`"}}`), redrive.InQueue("q")); err != nil {
		t.Fatal(err)
	}
	wantErr(t, e.do("GET", "/v1/jobs?reveal=true", "", "Authorization", operate), 403, "forbidden", "")
	lease := `{"worker":"spy","queues":["q"],"kinds":["k"],"max":10,"wait":"0s"}`
	r := e.do("POST", "/v1/worker/lease", lease, "Authorization", operate)
	if r.status == http.StatusOK && strings.Contains(string(r.body), "SECRET") {
		t.Fatalf("an operate token, refused reveal=true, leased the job and read its secret: %s", r.body)
	}
	wantErr(t, r, http.StatusForbidden, "forbidden", "")
	if !strings.Contains(string(r.body), "needs the worker (or admin) role") {
		t.Errorf("the refusal does not name the role needed: %s", r.body)
	}
	// A worker token may not enqueue, nor change anything else.
	wantErr(t, e.do("POST", "/v1/jobs", `{"kind":"k","queue":"q"}`, "Authorization", "Bearer "+roleTokens[RoleWorker]), 403, "forbidden", "")
	// It leases the job whole: its handler needs the secret.
	r = e.do("POST", "/v1/worker/lease", strings.Replace(lease, "spy", "w1", 1), "Authorization", "Bearer "+roleTokens[RoleWorker])
	if r.status != http.StatusOK || !strings.Contains(string(r.body), secret) {
		t.Fatalf("a worker token's lease: %d %s", r.status, r.body)
	}
}
