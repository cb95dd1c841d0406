package server

import (
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
	b.runWithin(t, 10*time.Second, "close",
		chromedp.Click(css(row("payments")+` button[data-action="close"]`)),
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
	b.checkClean(t, url)
}
