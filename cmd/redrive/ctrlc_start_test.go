package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/redrivehq/redrive/apiclient"
	"github.com/redrivehq/redrive/server"
)

// TestCtrlCWhileStartingOperation: Ctrl-C while the request that starts
// a redrive operation is still in flight (the server has it, its answer
// has not come) still cancels the operation on the server, instead of
// leaving it running, unseen, after the CLI stopped. CI saw it: the
// server's operation had redriven a job before the CLI got its answer.
func TestCtrlCWhileStartingOperation(t *testing.T) {
	clearConnEnv(t)
	ts, db := newTestServer(t, "tok")
	for range 3 {
		mustCLI(t, "--db", db, "enqueue", "email", "--queue", "slow")
	}
	bury(t, db, "slow")
	ids := deadIDs(t, db, "slow")

	proxyURL, arrived, release := holdingProxy(t, ts.URL, "/v1/dlq/redrive")
	api, err := apiclient.New(proxyURL, apiclient.WithToken("tok"))
	if err != nil {
		t.Fatal(err)
	}
	b := &remoteBackend{api: api}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		_, err := b.Redrive(ctx, redriveQuery{IDs: ids, Rate: 0.1}, nil)
		errc <- err
	}()
	select {
	case <-arrived:
	case <-time.After(time.Minute): // a liveness bound
		t.Fatal("the redrive request did not reach the server")
	}
	cancel() // Ctrl-C, the server's answer not yet read
	close(release)
	select {
	case err = <-errc:
	case <-time.After(time.Minute):
		t.Fatal("the CLI did not stop after Ctrl-C")
	}
	if err == nil || !strings.Contains(err.Error(), "canceled on the server") {
		t.Fatalf("after Ctrl-C: %v, want the operation canceled on the server", err)
	}
	var l struct {
		Operations []server.Operation `json:"operations"`
	}
	getJSON(t, ts.URL+"/v1/operations", "tok", &l)
	if len(l.Operations) != 1 || l.Operations[0].State != server.OperationCanceled {
		t.Fatalf("server operations after Ctrl-C: %+v, want one, canceled", l.Operations)
	}
}

// TestCtrlCWhileStartingReplayOrCancel: the same for a replay and a bulk
// cancel started against a server: Ctrl-C while the starting request is
// in flight still gets the operation's name from the server's answer,
// so that the command's follow cancels it there rather than leave it
// running unseen.
func TestCtrlCWhileStartingReplayOrCancel(t *testing.T) {
	clearConnEnv(t)
	ts, db := newTestServer(t, "tok")
	mustCLI(t, "--db", db, "enqueue", "email", "--queue", "slow")
	for _, tc := range []struct {
		path  string
		start func(context.Context, *remoteBackend) (apiclient.Operation, error)
	}{
		{"/v1/replay", func(ctx context.Context, b *remoteBackend) (apiclient.Operation, error) {
			return b.StartReplay(ctx, replayQuery{All: true, Rate: 0.1})
		}},
		{"/v1/jobs/cancel", func(ctx context.Context, b *remoteBackend) (apiclient.Operation, error) {
			return b.StartCancel(ctx, cancelQuery{All: true, Rate: 0.1})
		}},
	} {
		t.Run(tc.path, func(t *testing.T) {
			proxyURL, arrived, release := holdingProxy(t, ts.URL, tc.path)
			api, err := apiclient.New(proxyURL, apiclient.WithToken("tok"))
			if err != nil {
				t.Fatal(err)
			}
			b := &remoteBackend{api: api}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			type result struct {
				op  apiclient.Operation
				err error
			}
			done := make(chan result, 1)
			go func() {
				op, err := tc.start(ctx, b)
				done <- result{op, err}
			}()
			select {
			case <-arrived:
			case <-time.After(time.Minute): // a liveness bound
				t.Fatal("the starting request did not reach the server")
			}
			cancel() // Ctrl-C, the server's answer not yet read
			close(release)
			var res result
			select {
			case res = <-done:
			case <-time.After(time.Minute):
				t.Fatal("the start did not return after Ctrl-C")
			}
			if res.err != nil || res.op.ID == "" {
				t.Fatalf("after Ctrl-C: %+v %v, want the operation the server started, to cancel it there", res.op, res.err)
			}
			// What the command does next: follow, canceling on the server.
			if _, err := b.Follow(ctx, res.op, true, nil); err == nil || !strings.Contains(err.Error(), "canceled on the server") {
				t.Fatalf("follow after Ctrl-C: %v, want the operation canceled on the server", err)
			}
		})
	}
}

// holdingProxy is a proxy to the server at target that holds the answer
// to POST path, once the server has handled the request, until release
// is closed; arrived is closed when the server has answered it.
func holdingProxy(t *testing.T, target, path string) (proxyURL string, arrived, release chan struct{}) {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	arrived, release = make(chan struct{}), make(chan struct{})
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == path {
			rec := httptest.NewRecorder()
			rp.ServeHTTP(rec, r)
			close(arrived)
			<-release
			for k, v := range rec.Header() {
				w.Header()[k] = v
			}
			w.WriteHeader(rec.Code)
			w.Write(rec.Body.Bytes())
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(proxy.Close)
	return proxy.URL, arrived, release
}
