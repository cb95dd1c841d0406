package server

import (
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestDashboardReadRoleInChromium signs in with a read token: the page
// shows the token's name and role, and no control that changes anything
// (pause, cancel, run now, redrive, edit, purge, breaker and limit
// changes, schedule and operation controls); a request crafted in the
// page, with the session cookie and the header a change needs, is refused
// 403 forbidden, and the dead jobs are still there.
func TestDashboardReadRoleInChromium(t *testing.T) {
	d := startDemoWith(t, roleOptions())
	b := newBrowser(t)
	url := d.srv.URL
	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }
	b.run(t, "sign in as read",
		chromedp.Navigate(url+"/"),
		chromedp.WaitVisible(css(`#token`)),
		chromedp.SendKeys(css(`#token`), roleTokens[RoleRead]),
		chromedp.Submit(css(`#token`)),
		chromedp.WaitVisible(css(`#queues table`)))
	if who := b.text(t, `#whoami`); who != "read-user · read" {
		t.Errorf("signed in as %q, want read-user · read", who)
	}
	// visible counts the buttons matching sel that are shown.
	visible := func(sel string) int {
		t.Helper()
		js := fmt.Sprintf(`[...document.querySelectorAll(%q)].filter((el) => el.offsetParent !== null).length`, sel)
		n, err := chromedp.Run(b.ctx, chromedp.Evaluate[int](js))
		if err != nil {
			t.Fatalf("%s: %v", sel, err)
		}
		return n
	}
	if n := b.count(t, `tr[data-queue] button[data-action="pause"]`); n == 0 {
		t.Fatal("the overview renders no queue controls at all: the check below would prove nothing")
	}
	if n := visible(`tr[data-queue] button`); n != 0 {
		t.Errorf("overview: %d queue controls shown to a read token", n)
	}
	var fp string
	for _, id := range d.dead["charge"][:1] {
		fp = d.job(t, id).Fingerprint
		b.run(t, "dead job page",
			chromedp.Navigate(fmt.Sprintf("%s/#/jobs/%d", url, id)),
			chromedp.WaitVisible(css(`#payload`)))
		for _, sel := range []string{`#redrive-job`, `#edit-redrive-job`} {
			if b.count(t, sel) == 0 {
				t.Errorf("job page: %s not rendered at all", sel)
			}
			if visible(sel) != 0 {
				t.Errorf("job page: %s shown to a read token", sel)
			}
		}
	}
	b.run(t, "dlq page",
		chromedp.Navigate(url+"/#/dlq"),
		chromedp.WaitVisible(css(`table.groups`)))
	if n := visible(`table.groups button`); n != 0 {
		t.Errorf("dlq page: %d redrive or purge buttons shown to a read token", n)
	}
	b.run(t, "dlq group page",
		chromedp.Navigate(url+"/#/dlq/"+fp),
		chromedp.WaitVisible(css(`input[data-select]`)))
	for _, sel := range []string{`#redrive-group`, `#edit-redrive-group`, `#purge-group`, `#redrive-selected`, `#edit-selected`} {
		if visible(sel) != 0 {
			t.Errorf("group page: %s shown to a read token", sel)
		}
	}
	for _, page := range []string{"breakers", "limits", "schedules", "operations"} {
		b.run(t, page+" page",
			chromedp.Navigate(url+"/#/"+page),
			chromedp.WaitVisible(css(`main h1`)))
		if n := visible(`main button[data-needs]`); n != 0 {
			t.Errorf("%s page: %d controls shown to a read token", page, n)
		}
	}

	// A crafted request, from the page, with the cookie and the header.
	const crafted = `fetch('/v1/dlq?all=true', {method: 'DELETE', headers: {'X-Redrive-Request': '1'}})
		.then(async (r) => r.status + ' ' + await r.text())`
	got, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](crafted, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(got, "403 ") || !strings.Contains(got, `"forbidden"`) || !strings.Contains(got, "needs the admin role") {
		t.Errorf("crafted purge: %s, want 403 forbidden naming the admin role", got)
	}
	for _, id := range d.dead["charge"] {
		if s := d.job(t, id).State; s != "dead" {
			t.Errorf("job %d is %s after a refused purge", id, s)
		}
	}

	// The audit log page shows a change an admin made, and not the
	// refused purge.
	if r := d.do("POST", "/v1/queues/payments/pause", "", "Authorization", "Bearer "+roleTokens[RoleAdmin]); r.status != 200 {
		t.Fatalf("pause: %d %s", r.status, r.body)
	}
	b.run(t, "audit page",
		chromedp.Navigate(url+"/#/audit"),
		chromedp.WaitVisible(css(`tr[data-actor="admin-user"]`)))
	b.noJunk(t, "audit")
	if row := b.text(t, `tr[data-actor="admin-user"]`); !strings.Contains(row, "POST /v1/queues/{name}/pause") || !strings.Contains(row, "payments") {
		t.Errorf("audit row: %q", row)
	}
	if n := b.count(t, `table.audit tbody tr`); n != 1 {
		t.Errorf("audit rows: %d, want 1 (the refused purge is not a change)", n)
	}
}
