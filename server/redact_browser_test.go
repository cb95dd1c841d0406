package server

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/redrivehq/redrive/internal/redact"
)

// TestDashboardRedactsInChromium: signed in as admin, the dashboard's
// job page, DLQ, group page and schedules never put a secret of the
// fixtures' payloads in the page (its HTML, nor the payload editor's
// text), and an edit of a redacted payload in the editor keeps the
// stored secrets.
func TestDashboardRedactsInChromium(t *testing.T) {
	f := newRedactFixture(t)
	b := newBrowser(t)
	url := f.e.srv.URL
	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }
	b.run(t, "sign in as admin",
		chromedp.Navigate(url+"/"),
		chromedp.WaitVisible(css(`#token`)),
		chromedp.SendKeys(css(`#token`), roleTokens[RoleAdmin]),
		chromedp.Submit(css(`#token`)),
		chromedp.WaitVisible(css(`#queues table`)))
	// page is the page's HTML and the values of its form fields (which
	// the HTML does not hold).
	page := func(where string) string {
		t.Helper()
		js := `document.documentElement.outerHTML + [...document.querySelectorAll('textarea,input')].map((e) => e.value).join('\n')`
		s, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](js))
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		for _, secret := range allSecrets {
			if strings.Contains(s, secret) {
				t.Errorf("%s: the page holds the secret %q", where, secret)
			}
		}
		return s
	}
	fp := "f401abcd"
	for _, step := range []struct {
		where, path, wait string
	}{
		{"dead job page", fmt.Sprintf("/#/jobs/%d", f.dead), `#payload`},
		{"own kind's job page", fmt.Sprintf("/#/jobs/%d", f.own), `#payload`},
		{"dlq page", "/#/dlq", `table.groups`},
		{"group page", "/#/dlq/" + fp, `input[data-select]`},
		{"jobs page", "/#/jobs", `main table`},
		{"schedules page", "/#/schedules", `main h1`},
	} {
		b.run(t, step.where, chromedp.Navigate(url+step.path), chromedp.WaitVisible(css(step.wait)))
		if s := page(step.where); step.wait == `#payload` && !strings.Contains(s, redact.Mask) {
			t.Errorf("%s shows no mask", step.where)
		}
	}
	// The editor shows the mask; an edit elsewhere keeps the secrets.
	b.run(t, "open the editor",
		chromedp.Navigate(fmt.Sprintf("%s/#/jobs/%d", url, f.dead)),
		chromedp.WaitVisible(css(`#edit-redrive-job`)),
		chromedp.Click(css(`#edit-redrive-job`)),
		chromedp.WaitVisible(css(`#payload-editor`)))
	text, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.querySelector('#payload-editor').value`))
	if err != nil || !strings.Contains(text, redact.Mask) {
		t.Fatalf("editor: %q, %v", text, err)
	}
	page("the payload editor")
	edited := strings.Replace(text, `"body": "{}"`, `"body": "{\"fixed\":1}"`, 1)
	if edited == text {
		t.Fatalf("the editor's payload has no body to edit: %s", text)
	}
	b.run(t, "edit and redrive",
		chromedp.SetValue(css(`#payload-editor`), edited),
		chromedp.Click(css(`#next`)),
		chromedp.WaitVisible(css(`#confirm`)),
		chromedp.Click(css(`#confirm`)),
		chromedp.WaitEnabled(css(`#close`)),
		chromedp.Click(css(`#close`)))
	j, err := f.e.client.Get(context.Background(), f.dead)
	if err != nil {
		t.Fatal(err)
	}
	p := string(j.Payload)
	if !strings.Contains(p, secretAuth) || !strings.Contains(p, secretKey) || !strings.Contains(p, secretPass) ||
		!strings.Contains(p, secretQuery) || !strings.Contains(p, `{\"fixed\":1}`) || strings.Contains(p, redact.Mask) {
		t.Errorf("stored payload after the dashboard's edit: %s", p)
	}
	b.run(t, "the redriven job", chromedp.Navigate(fmt.Sprintf("%s/#/jobs/%d", url, f.dead)), chromedp.WaitVisible(css(`#payload`)))
	page("the redriven job's page")
}
