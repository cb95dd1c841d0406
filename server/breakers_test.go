package server

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redrivehq/redrive/breaker"
	"github.com/redrivehq/redrive/store"
)

// TestBreakersAPI: GET /v1/breakers shows the fleet's breakers from the
// store merged with this process's; force-open and reset change the
// fleet's record and this process's breaker at once.
func TestBreakersAPI(t *testing.T) {
	reg := breaker.NewRegistry(breaker.Config{Failures: 3, CountOnly: true})
	local := reg.Get("payments")
	reg.Get("search")
	e := newEnv(t, Options{Breakers: reg})
	ctx := t.Context()
	now := time.Now()
	// Another process tripped "payments" and reported failures of "mail".
	rule := store.BreakerRule{Failures: 3, Window: time.Minute, BreakDuration: time.Hour}
	if _, err := e.st.ReportBreaker(ctx, store.BreakerReport{Name: "payments", Process: "worker-b", Now: now, Failures: 3, Rule: rule}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.ReportBreaker(ctx, store.BreakerReport{Name: "mail", Process: "worker-c", Now: now, Failures: 2, Requests: 0, Rule: rule}); err != nil {
		t.Fatal(err)
	}
	var bs []BreakerView
	e.want(e.do("GET", "/v1/breakers", ""), 200, &bs)
	if len(bs) != 3 || bs[0].Name != "mail" || bs[1].Name != "payments" || bs[2].Name != "search" {
		t.Fatalf("breakers: %+v", bs)
	}
	if m := bs[0]; m.State != breaker.Closed || m.Failures != 2 || !m.Shared || m.Local != nil {
		t.Errorf("mail: %+v", m)
	}
	if p := bs[1]; p.State != breaker.Open || p.OpenedBy != "worker-b" || p.Trips != 1 || !p.Shared || p.Local == nil ||
		p.ReadyAt.Sub(now) < 59*time.Minute || p.Fallback {
		t.Errorf("payments: %+v", p)
	}
	if s := bs[2]; s.Shared || s.Local == nil || s.State != breaker.Closed {
		t.Errorf("search (this process only): %+v", s)
	}

	// Force open for 10 minutes: this process's breaker follows at once.
	var body BreakerBody
	e.want(e.do("POST", "/v1/breakers/search/open", `{"duration":"10m"}`), 200, &body)
	if v := body.Breaker; v.State != breaker.Open || !v.Forced || v.OpenedBy != "operator (api)" || v.ReadyAt.IsZero() {
		t.Fatalf("forced open: %+v", v)
	}
	if _, err := reg.Get("search").Allow(); !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("this process's breaker after a force-open: %v", err)
	}
	// Without a duration: open until reset.
	body = BreakerBody{}
	e.want(e.do("POST", "/v1/breakers/other/open", ""), 200, &body)
	if v := body.Breaker; v.State != breaker.Open || !v.ReadyAt.IsZero() || !v.Forced {
		t.Fatalf("forced open until reset: %+v", v)
	}
	// Reset closes payments for the fleet and here.
	body = BreakerBody{}
	e.want(e.do("POST", "/v1/breakers/payments/reset", ""), 200, &body)
	if v := body.Breaker; v.State != breaker.Closed || v.Local == nil || v.Local.State != breaker.Closed {
		t.Fatalf("reset: %+v", v)
	}
	if local.State() != breaker.Closed {
		t.Fatalf("this process's breaker after a reset: %v", local.State())
	}
	st, err := e.st.Breaker(ctx, "payments")
	if err != nil || st.State != store.BreakerClosed {
		t.Fatalf("fleet record after a reset: %+v, %v", st, err)
	}

	// Bad input: named fields, nothing changed.
	wantErr(t, e.do("POST", "/v1/breakers/search/open", `{"duration":"soon"}`), 400, "invalid", "duration")
	wantErr(t, e.do("POST", "/v1/breakers/search/open", `{"duration":"-1m"}`), 400, "invalid", "duration")
	wantErr(t, e.do("POST", "/v1/breakers/search/open", `{"until":"1m"}`), 400, "unknown_field", "until")
	wantErr(t, e.do("POST", "/v1/breakers/%01/reset", ""), 400, "invalid", "name")
	wantErr(t, e.do("POST", "/v1/breakers/search/reset", `{"x":1}`), 400, "unknown_field", "x")
	all, err := e.st.ListBreakers(ctx)
	if err != nil || len(all) != 4 {
		t.Fatalf("records after bad requests: %+v, %v", all, err)
	}
}

// TestResetUnknownBreaker: closing a breaker that neither the store nor
// this process has is 404 on the field name, and creates no record (it
// once created one for any name); a breaker only this process has is
// closed, its record created.
func TestResetUnknownBreaker(t *testing.T) {
	reg := breaker.NewRegistry(breaker.Config{Failures: 3, CountOnly: true})
	reg.Get("local-only")
	e := newEnv(t, Options{Breakers: reg})
	wantErr(t, e.do("POST", "/v1/breakers/nobody/reset", ""), 404, "not_found", "name")
	if _, err := e.st.Breaker(t.Context(), "nobody"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("record of an unknown breaker after a reset: %v", err)
	}
	var body BreakerBody
	e.want(e.do("POST", "/v1/breakers/local-only/reset", ""), 200, &body)
	if body.Breaker.State != breaker.Closed {
		t.Fatalf("reset of this process's breaker: %+v", body.Breaker)
	}
}

// TestDeleteBreakerAPI: DELETE /v1/breakers/{name} deletes an unused
// record (204) and says why one in use is kept (409), 404 for none;
// force=true deletes one in use, and this process's breaker closes.
func TestDeleteBreakerAPI(t *testing.T) {
	reg := breaker.NewRegistry(breaker.Config{Failures: 3, CountOnly: true, BreakDuration: time.Hour})
	local := reg.Get("payments")
	e := newEnv(t, Options{Breakers: reg})
	ctx := t.Context()
	now := time.Now()
	rule := store.BreakerRule{Failures: 3, Window: time.Minute, BreakDuration: time.Hour}
	if _, err := e.st.ReportBreaker(ctx, store.BreakerReport{Name: "payments", Process: "worker-b", Now: now, Failures: 3, Rule: rule}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.ReportBreaker(ctx, store.BreakerReport{Name: "mail", Process: "worker-c", Now: now, Failures: 1, Rule: rule}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.ReportBreaker(ctx, store.BreakerReport{Name: "old", Process: "worker-c", Now: now.Add(-time.Hour), Failures: 1, Rule: rule}); err != nil {
		t.Fatal(err)
	}
	// This process follows the fleet: payments is open here too.
	st, err := e.st.Breaker(ctx, "payments")
	if err != nil {
		t.Fatal(err)
	}
	local.Apply(breaker.Fleet{State: breaker.Open, OpenedBy: "worker-b", ReadyAt: st.ReadyAt, Version: st.Version})
	if local.State() != breaker.Open {
		t.Fatal("this process's breaker did not open")
	}

	wantErr(t, e.do("DELETE", "/v1/breakers/nobody", ""), 404, "not_found", "name")
	m := errMessage(t, e.do("DELETE", "/v1/breakers/payments", ""), 409, "conflict", "name")
	if !strings.Contains(m, "open") || !strings.Contains(m, "worker-b") || !strings.Contains(m, "force") {
		t.Errorf("409 on a tripped breaker: %q, want why (open, tripped by worker-b) and how (force)", m)
	}
	m = errMessage(t, e.do("DELETE", "/v1/breakers/mail", ""), 409, "conflict", "name")
	if !strings.Contains(m, "worker-c") || !strings.Contains(m, "5m") {
		t.Errorf("409 on a breaker reported on just now: %q, want who reported and the idle period", m)
	}
	wantErr(t, e.do("DELETE", "/v1/breakers/mail?force=yes", ""), 400, "invalid", "force")
	wantErr(t, e.do("DELETE", "/v1/breakers/mail?forced=true", ""), 400, "invalid", "forced")
	wantErr(t, e.do("DELETE", "/v1/breakers/%01", ""), 400, "invalid", "name")

	// Unused: deleted, gone from the list.
	if r := e.do("DELETE", "/v1/breakers/old", ""); r.status != 204 {
		t.Fatalf("delete of an unused breaker: %d %s", r.status, r.body)
	}
	// In use, forced: deleted, and this process's breaker closes at once.
	if r := e.do("DELETE", "/v1/breakers/payments?force=true", ""); r.status != 204 {
		t.Fatalf("forced delete: %d %s", r.status, r.body)
	}
	if local.State() != breaker.Closed {
		t.Fatalf("this process's breaker after a forced delete: %v", local.State())
	}
	var bs []BreakerView
	e.want(e.do("GET", "/v1/breakers", ""), 200, &bs)
	for _, b := range bs {
		if b.Name == "old" || (b.Name == "payments" && b.Shared) {
			t.Errorf("deleted breaker still listed as shared: %+v", b)
		}
	}
	wantErr(t, e.do("DELETE", "/v1/breakers/old", ""), 404, "not_found", "name")
}

// errMessage is wantErr returning the error's message.
func errMessage(t *testing.T, r resp, status int, code, field string) string {
	t.Helper()
	wantErr(t, r, status, code, field)
	var eb errorBody
	if err := json.Unmarshal(r.body, &eb); err != nil {
		t.Fatal(err)
	}
	return eb.Error.Message
}
