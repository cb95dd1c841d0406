package server

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/redrivehq/redrive/breaker"
	"github.com/redrivehq/redrive/store"
)

// TestBreakersInChromium: the breakers page lists the fleet's breakers
// with who opened each and when; close and force open work from it, for
// the fleet (the store's record) and this process.
func TestBreakersInChromium(t *testing.T) {
	reg := breaker.NewRegistry(breaker.Config{Failures: 3, CountOnly: true})
	reg.Get("search")
	e := newEnv(t, Options{Breakers: reg})
	b := newBrowser(t) // before anything runs: a missing browser skips or fails at once
	rule := store.BreakerRule{Failures: 3, Window: time.Minute, BreakDuration: time.Hour}
	if _, err := e.st.ReportBreaker(t.Context(), store.BreakerReport{Name: "payments", Process: "worker-b", Now: time.Now(), Failures: 3, Rule: rule}); err != nil {
		t.Fatal(err)
	}
	url := e.srv.URL
	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }
	row := func(name string) string { return `tr[data-breaker="` + name + `"]` }

	b.runWithin(t, 10*time.Second, "breakers page",
		chromedp.Navigate(url+"/#/breakers"),
		chromedp.WaitVisible(css(row("payments"))))
	if a := b.attr(t, `a[data-nav="breakers"]`, "class"); !strings.Contains(a, "active") {
		t.Errorf("the Breakers nav link is not active: %q", a)
	}
	screenshot(t, b, "dashboard-breakers", row("payments"))
	payments := b.textNow(t, row("payments"))
	for _, want := range []string{"open", "worker-b", "ago", "in "} {
		if !strings.Contains(payments, want) {
			t.Errorf("payments row lacks %q: %q", want, payments)
		}
	}
	if search := b.textNow(t, row("search")); !strings.Contains(search, "closed") || !strings.Contains(search, "this process") {
		t.Errorf("search row: %q", search)
	}
	b.noJunk(t, "breakers page")

	// Close payments for the fleet.
	b.clickRow(t, row("payments")+` button[data-action="close"]`)
	b.runWithin(t, 10*time.Second, "close",
		chromedp.WaitVisible(css(`#confirm`)))
	if d := b.text(t, "#dialog"); !strings.Contains(d, "Every worker on the store calls payments again") {
		t.Errorf("close dialog: %q", d)
	}
	b.runWithin(t, 10*time.Second, "confirm close",
		chromedp.Click(css(`#confirm`)),
		chromedp.WaitVisible(css(row("payments")+`[data-state="closed"]`)))
	if st, err := e.st.Breaker(t.Context(), "payments"); err != nil || st.State != store.BreakerClosed {
		t.Errorf("payments after the close: %+v, %v", st, err)
	}

	// Force search open until closed.
	b.runWithin(t, 10*time.Second, "force open",
		chromedp.SetValue(css(row("search")+` select`), ""),
		chromedp.Click(css(row("search")+` button[data-action="open"]`)),
		chromedp.WaitVisible(css(`#confirm`)))
	if d := b.text(t, "#dialog"); !strings.Contains(d, "until the breaker is closed here") {
		t.Errorf("force open dialog: %q", d)
	}
	b.runWithin(t, 10*time.Second, "confirm force open",
		chromedp.Click(css(`#confirm`)),
		chromedp.WaitVisible(css(row("search")+`[data-state="open"]`)))
	if s := b.textNow(t, row("search")); !strings.Contains(s, "forced") || !strings.Contains(s, "operator (api)") || !strings.Contains(s, "when closed") {
		t.Errorf("search row after the force open: %q", s)
	}
	if st, err := e.st.Breaker(t.Context(), "search"); err != nil || st.State != store.BreakerOpen || !st.Forced {
		t.Errorf("search after the force open: %+v, %v", st, err)
	}
	if reg.Get("search").State() != breaker.Open {
		t.Error("this process's search breaker is not open")
	}
	b.noJunk(t, "after the force open")

	// Delete: payments, closed just now, is refused with the server's
	// reason; search, forced open, is deleted (this process keeps its own
	// breaker, listed as this process's only).
	b.clickRow(t, row("payments")+` button[data-action="delete"]`)
	b.runWithin(t, 10*time.Second, "delete payments",
		chromedp.WaitVisible(css(`#confirm`)))
	if d := b.text(t, "#dialog"); !strings.Contains(d, "leaves this page") {
		t.Errorf("delete dialog: %q", d)
	}
	b.runWithin(t, 10*time.Second, "confirm delete payments",
		chromedp.Click(css(`#confirm`)),
		chromedp.WaitVisible(chromedp.Search(`//dialog[@id="dialog"]//h2[text()="Not deleted"]`)))
	if d := b.text(t, "#dialog"); !strings.Contains(d, `breaker "payments" is in use: closed`) {
		t.Errorf("refused delete dialog: %q", d)
	}
	if st, err := e.st.Breaker(t.Context(), "payments"); err != nil || st.State != store.BreakerClosed {
		t.Errorf("payments after a refused delete: %+v, %v", st, err)
	}
	b.expected("409", "/v1/breakers/payments") // the browser logs the refusal as a failed load
	b.runWithin(t, 10*time.Second, "dismiss",
		chromedp.Click(css(`#dialog .actions button`)),
		chromedp.WaitNotPresent(css(`#dialog[open]`)))
	b.clickRow(t, row("search")+` button[data-action="delete"]`)
	b.runWithin(t, 10*time.Second, "delete search",
		chromedp.WaitVisible(css(`#confirm`)))
	if d := b.text(t, "#dialog"); !strings.Contains(d, "calls search again") {
		t.Errorf("delete dialog of a forced breaker: %q", d)
	}
	b.runWithin(t, 10*time.Second, "confirm delete search",
		chromedp.Click(css(`#confirm`)),
		chromedp.WaitNotPresent(css(row("search")+` button[data-action="delete"]`)))
	if _, err := e.st.Breaker(t.Context(), "search"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("search's record after the delete: %v", err)
	}
	if s := b.textNow(t, row("search")); !strings.Contains(s, "this process") {
		t.Errorf("search row after the delete: %q", s)
	}
	b.noJunk(t, "after the deletes")
	b.checkClean(t, url)
}

// expected drops from the problems the browser reported those containing
// every part: a failure the test caused on purpose.
func (b *browser) expected(parts ...string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	kept := b.problems[:0]
	for _, p := range b.problems {
		all := true
		for _, part := range parts {
			all = all && strings.Contains(p, part)
		}
		if !all {
			kept = append(kept, p)
		}
	}
	b.problems = kept
}
