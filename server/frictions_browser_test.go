package server

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
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
