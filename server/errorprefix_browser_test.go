package server

import (
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/redrivehq/redrive/failure"
)

// TestDLQErrorPrefixInChromium: the DLQ page's "Error starts with"
// field filters its groups by the start of the error, case-sensitively
// and with its trailing space kept, and the filter stays in the page's
// address.
func TestDLQErrorPrefixInChromium(t *testing.T) {
	e := newEnv(t, Options{})
	for _, msg := range []string{"bad address a", "bad address b", "badge missing", "Bad gateway"} {
		e.makeDead("mail", msg, failure.Permanent)
	}
	b := newBrowser(t)
	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }
	b.runWithin(t, time.Minute, "DLQ page",
		chromedp.Navigate(e.srv.URL+"/#/dlq"),
		chromedp.WaitVisible(css(`table.groups tr[data-group]`)))
	if n := b.count(t, `table.groups tr[data-group]`); n != 4 {
		t.Fatalf("DLQ page: %d groups, want 4", n)
	}
	b.runWithin(t, time.Minute, "filter",
		chromedp.SendKeys(css(`input[name=error_prefix]`), "bad "),
		chromedp.Click(css(`form.filters button[type=submit]`)),
		chromedp.WaitVisible(css(`table.groups tr[data-group="permanent:bad address b"]`)),
		chromedp.WaitNotPresent(css(`table.groups tr[data-group="permanent:badge missing"]`)))
	if n := b.count(t, `table.groups tr[data-group]`); n != 2 {
		t.Errorf("groups of errors starting with %q: %d, want 2", "bad ", n)
	}
	hash, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`location.hash`))
	if want := "#/dlq?error_prefix=bad+"; err != nil || hash != want {
		t.Errorf("address #%q, %v; want %q", hash, err, want)
	}
	// Case-sensitive: "Bad" is another error.
	b.runWithin(t, time.Minute, "case",
		chromedp.Navigate(e.srv.URL+"/#/dlq?error_prefix=Bad"),
		chromedp.WaitVisible(css(`table.groups tr[data-group="permanent:Bad gateway"]`)))
	if n := b.count(t, `table.groups tr[data-group]`); n != 1 {
		t.Errorf("groups of errors starting with %q: %d, want 1", "Bad", n)
	}
}
