package server

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/store"
)

// TestJobsSummaryInChromium: the jobs page says what each job is (an
// http job's method and URL without its query, a payload excerpt without
// secrets) and searches payloads with the CLI's payload.FIELD=VALUE.
func TestJobsSummaryInChromium(t *testing.T) {
	e := newEnv(t, Options{})
	b := newBrowser(t)
	ctx := context.Background()
	hook, err := e.client.Enqueue(ctx, "http", map[string]any{"method": "POST", "url": "https://example.com/hook?sig=zz",
		"headers": map[string]string{"Authorization": "Bearer zz"}})
	if err != nil {
		t.Fatal(err)
	}
	ann, err := e.client.Enqueue(ctx, "email", map[string]any{"to": "ann@example.com", "customer_id": 42, "token": "zz"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.Enqueue(ctx, "email", map[string]any{"to": "bob@example.com", "customer_id": 7}); err != nil {
		t.Fatal(err)
	}
	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }
	b.run(t, "jobs page", chromedp.Navigate(e.srv.URL+"/#/jobs"), chromedp.WaitVisible(css(`table.jobs tbody tr`)))
	b.waitText(t, fmt.Sprintf(`tr[data-job="%d"]`, hook.ID), "POST https://example.com/hook?***")
	row := b.waitText(t, fmt.Sprintf(`tr[data-job="%d"]`, ann.ID), `"to":"ann@example.com"`)
	if body := b.text(t, "table.jobs"); strings.Contains(body, "zz") {
		t.Errorf("the jobs table shows a secret:\n%s", body)
	}
	t.Logf("row: %s", row)
	b.noJunk(t, "jobs page")

	b.run(t, "payload search",
		chromedp.SendKeys(css(`input[name="match"]`), "payload.customer_id=42"),
		chromedp.Click(css(`form.filters button[type="submit"]`)),
		chromedp.WaitReady(css(`input[name="match"][value="payload.customer_id=42"]`)))
	b.waitText(t, "table.jobs tbody", "ann@example.com")
	if n := b.count(t, `table.jobs tbody tr`); n != 1 {
		t.Errorf("payload search: %d rows, want 1 (job %d)", n, ann.ID)
	}
	b.checkClean(t, e.srv.URL)
}

// TestDeferralWordingInChromium: a deferral reads as what it is, not as
// an attempt: the timeline says the breaker was open and no attempt was
// used, and an open breaker's page does not show a failure count of 0
// (the count restarts when it trips).
func TestDeferralWordingInChromium(t *testing.T) {
	e := newEnv(t, Options{})
	b := newBrowser(t)
	now := time.Now().UTC()
	rule := store.BreakerRule{Failures: 3, Window: time.Minute, BreakDuration: time.Hour}
	if _, err := e.st.ReportBreaker(t.Context(), store.BreakerReport{Name: "payments", Process: "worker-b", Now: now, Failures: 3, Rule: rule}); err != nil {
		t.Fatal(err)
	}
	jobs, err := e.client.AddDead(t.Context(), []store.DeadJob{{Queue: "default", Kind: "charge", Payload: json.RawMessage(`{"n":1}`),
		MaxRetries: -1, DeadAt: now, Attempt: 2, DeadReason: "retries_exhausted", LastError: "boom", LastErrorClass: failure.Transient,
		History: []store.Event{
			{Kind: store.EventRetry, Attempt: 1, At: now.Add(-3 * time.Minute), Class: "transient", Error: "boom", Delay: store.Duration(time.Second)},
			{Kind: store.EventDeferred, Attempt: 2, At: now.Add(-2 * time.Minute), Reason: "breaker_open:payments", Delay: store.Duration(30 * time.Second)},
			{Kind: store.EventDead, Attempt: 2, At: now, Class: "transient", Error: "boom"},
		}}})
	if err != nil {
		t.Fatal(err)
	}
	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }
	b.run(t, "job page", chromedp.Navigate(fmt.Sprintf("%s/#/jobs/%d", e.srv.URL, jobs[0].ID)),
		chromedp.WaitVisible(css(`.timeline li[data-event="deferred"]`)))
	deferred := b.textNow(t, `.timeline li[data-event="deferred"]`)
	if strings.Contains(deferred, "Attempt") || !strings.Contains(deferred, "no attempt used") || !strings.Contains(deferred, "payments") {
		t.Errorf("the deferral reads %q: want it to name the open breaker and say no attempt was used", deferred)
	}
	if dead := b.textNow(t, `.timeline li[data-event="dead"]`); !strings.Contains(dead, "Attempt 2") {
		t.Errorf("the dead event reads %q, want Attempt 2", dead)
	}
	b.noJunk(t, "job page")

	b.run(t, "breakers page", chromedp.Navigate(e.srv.URL+"/#/breakers"),
		chromedp.WaitVisible(css(`tr[data-breaker="payments"][data-state="open"]`)))
	if f := b.textNow(t, `tr[data-breaker="payments"] td.failures`); !strings.Contains(f, "not counted while open") {
		t.Errorf("an open breaker's failures read %q, want \"not counted while open\"", f)
	}
	b.checkClean(t, e.srv.URL)
}
