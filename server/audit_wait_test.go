package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/internal/testwait"
	"github.com/redrivehq/redrive/store"
)

// TestAuditWaitedChange: a change that starts an operation and waits for
// its end (wait=true) is recorded once the operation is started, not
// once the wait is answered: a client that goes away during the wait
// (the operation goes on, in the workers) leaves its entry, as does a
// wait still under way; and a wait answered records no second entry.
func TestAuditWaitedChange(t *testing.T) {
	st := openStore(t)
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quiet})
	opts := roleOptions()
	opts.Client, opts.Logger = c, quiet
	api := New(opts)
	handled := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		api.ServeHTTP(w, r)
		if r.Method == http.MethodDelete {
			handled <- struct{}{}
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { _ = api.Close() })

	// No worker runs the store's operations: the purge stays pending and
	// the wait lasts until the client gives up.
	ctx, cancel := context.WithCancel(t.Context())
	req, err := http.NewRequestWithContext(ctx, "DELETE", srv.URL+"/v1/dlq?queue=mail&wait=true", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+roleTokens[RoleAdmin])
	done := make(chan error, 1)
	go func() {
		res, err := srv.Client().Do(req)
		if err == nil {
			res.Body.Close()
		}
		done <- err
	}()
	var ops []*redrive.Operation
	testwait.Until(t, "the purge to be started", time.Minute, func() bool {
		ops, _, err = c.Operations(t.Context(), "", 10)
		return err == nil && len(ops) == 1
	})
	cancel()
	<-done
	select {
	case <-handled:
	case <-time.After(time.Minute):
		t.Fatal("the purge's request is still handled a minute after its client went away")
	}
	entries, _, err := st.ListAudit(t.Context(), store.AuditFilter{}, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Fatalf("%d audit entries for a purge started and waited on by a client that went away, want 1: %+v", len(entries), entries)
	}
	en := entries[0]
	if en.Action != "DELETE /v1/dlq" || en.Actor != "admin-user" || en.OperationID != ops[0].ID || !strings.Contains(en.Target, "queue=mail") ||
		en.Status != http.StatusAccepted {
		t.Errorf("entry %+v, want the purge by admin-user, its operation %s, status 202", en, ops[0].ID)
	}

	// A wait that is answered (the server closes: the wait gets the
	// operation as it stands, 200) is recorded once.
	req, err = http.NewRequestWithContext(t.Context(), "DELETE", srv.URL+"/v1/dlq?queue=sms&wait=true", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+roleTokens[RoleAdmin])
	status := make(chan int, 1)
	go func() {
		res, err := srv.Client().Do(req)
		if err != nil {
			status <- 0
			return
		}
		res.Body.Close()
		status <- res.StatusCode
	}()
	testwait.Until(t, "the second purge to be started", time.Minute, func() bool {
		ops, _, err = c.Operations(t.Context(), "", 10)
		return err == nil && len(ops) == 2
	})
	_ = api.Close()
	if s := <-status; s != http.StatusOK {
		t.Fatalf("the wait answered %d when the server closed, want 200", s)
	}
	<-handled
	entries, _, err = st.ListAudit(t.Context(), store.AuditFilter{}, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 || !strings.Contains(entries[0].Target, "queue=sms") || entries[0].Status != http.StatusAccepted {
		t.Errorf("after an answered wait: %+v, want one more entry, the second purge's", entries)
	}
}
