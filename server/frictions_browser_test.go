package server

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/redrivehq/redrive"
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

// TestRunNowInChromium: a job waiting for its next retry has a "Retry
// now" button, a delayed job a "Run now" one; after the confirmation the
// job is pending and due now, its attempt count kept.
func TestRunNowInChromium(t *testing.T) {
	e := newEnv(t, Options{})
	b := newBrowser(t)
	ctx := context.Background()
	delayed, err := e.client.Enqueue(ctx, "email", map[string]any{"to": "ann@example.com"}, redrive.After(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	retrying, err := e.client.Enqueue(ctx, "charge", map[string]any{"n": 1}, redrive.InQueue("pay"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	got, err := e.st.Fetch(ctx, store.FetchParams{Queue: "pay", Limit: 1, Now: now, LeaseUntil: now.Add(time.Minute), Worker: "w"})
	if err != nil || len(got) != 1 {
		t.Fatalf("fetch: %v %v", got, err)
	}
	if _, err := e.st.Finish(ctx, []store.Outcome{{JobID: retrying.ID, Queue: "pay", Attempt: 1, Lease: got[0].Lease, Worker: "w",
		Kind: store.Retry, At: now, RunAt: now.Add(time.Hour), Class: failure.Transient, Error: "503",
		Event: &store.Event{Kind: store.EventRetry, Attempt: 1, At: now, Class: "transient", Error: "503", Delay: store.Duration(time.Hour)}}}); err != nil {
		t.Fatal(err)
	}
	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }
	for _, c := range []struct {
		id      int64
		label   string
		attempt int
	}{{delayed.ID, "Run now", 0}, {retrying.ID, "Retry now", 1}} {
		b.run(t, "job page", chromedp.Navigate(fmt.Sprintf("%s/#/jobs/%d", e.srv.URL, c.id)), chromedp.WaitVisible(css(`#run-now`)))
		if l := b.textNow(t, `#run-now`); l != c.label {
			t.Errorf("job %d's button reads %q, want %q", c.id, l, c.label)
		}
		b.run(t, "run now", chromedp.Click(css(`#run-now`)), chromedp.WaitVisible(css(`#confirm`)))
		if d := b.text(t, "#dialog"); !strings.Contains(d, "uses no attempt") {
			t.Errorf("dialog: %q", d)
		}
		b.noJunk(t, "run now dialog")
		b.run(t, "confirm", chromedp.Click(css(`#confirm`)), chromedp.WaitVisible(css(`h1 .badge`)))
		b.waitText(t, "h1", "pending")
		j, err := e.client.Get(ctx, c.id)
		if err != nil || j.State != redrive.Pending || j.RunAt.After(time.Now()) || j.Attempt != c.attempt {
			t.Errorf("job %d after run now: %+v, %v; want pending, due, attempt %d", c.id, j, err, c.attempt)
		}
	}
	b.checkClean(t, e.srv.URL)
}
