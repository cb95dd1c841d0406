package server

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/store"
)

// TestLimitsInChromium: the limits page lists each limit with what it
// applies to, its use (the busiest groups first), the jobs waiting and a
// chart of its use; its max is changed from the page. A job's page says
// when it waits on a limit and which, and, refreshed while the job
// waits, stops saying so once a raised max gives its group a free slot.
func TestLimitsInChromium(t *testing.T) {
	e := newEnv(t, Options{})
	b := newBrowser(t) // before anything runs: a missing browser skips or fails at once
	if err := e.client.SetLimits([]redrive.ConcurrencyLimit{
		{Name: "per-host", Queue: "crawl", Key: "payload.host", Max: 2},
		{Name: "mail", Kind: "mail", Max: 3},
	}); err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for _, host := range []string{"example.com", "example.com", "other.org", "example.com"} {
		js, err := e.client.EnqueueMany(t.Context(), []redrive.Request{{Queue: "crawl", Kind: "fetch", Payload: map[string]string{"host": host}}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, js[0].ID)
	}
	now := time.Now()
	if got, err := e.st.Fetch(t.Context(), store.FetchParams{Queue: "crawl", Limit: 10, Now: now, LeaseUntil: now.Add(time.Hour), Worker: "w"}); err != nil || len(got) != 3 {
		t.Fatalf("Fetch = %d jobs, %v; want 3 (example.com full)", len(got), err)
	}
	// A snapshot records the use, for the chart.
	if err := e.st.Snapshot(t.Context(), now.Truncate(time.Minute)); err != nil {
		t.Fatal(err)
	}
	url := e.srv.URL
	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }
	card := func(name string) string { return `section[data-limit="` + name + `"]` }

	b.runWithin(t, 20*time.Second, "limits page",
		chromedp.Navigate(url+"/#/limits"),
		chromedp.WaitVisible(css(card("per-host"))))
	if a := b.attr(t, `a[data-nav="limits"]`, "class"); !strings.Contains(a, "active") {
		t.Errorf("the Limits nav link is not active: %q", a)
	}
	screenshot(t, b, "dashboard-limits", card("per-host"))
	ph := b.textNow(t, card("per-host"))
	for _, want := range []string{"queue crawl", "one group per payload.host", "2 per group", "3 in 2 groups, at most 2 in one", "full"} {
		if !strings.Contains(ph, want) {
			t.Errorf("per-host card lacks %q: %q", want, ph)
		}
	}
	if w := b.attr(t, card("per-host")+` [data-waiting]`, "data-waiting"); w != "1" {
		t.Errorf("per-host waiting = %q, want 1", w)
	}
	// The busiest group first.
	if g := b.attr(t, card("per-host")+` tr[data-group]`, "data-group"); g != "example.com" {
		t.Errorf("first group = %q, want example.com", g)
	}
	if g := b.textNow(t, card("per-host")+` tr[data-group="example.com"]`); !strings.Contains(g, "2 of 2") {
		t.Errorf("example.com row: %q", g)
	}
	if n := b.count(t, card("per-host")+` rect[data-series="in_use"]`); n < 1 {
		t.Errorf("the per-host chart has %d bars, want the sampled use", n)
	}
	if l := b.textNow(t, card("per-host")+` [data-total="in_use"]`); !strings.Contains(l, "peak 3") {
		t.Errorf("per-host chart legend: %q, want peak 3", l)
	}
	if hold := b.attr(t, card("per-host")+` [data-hold]`, "data-hold"); hold != "off" {
		t.Errorf("per-host hold = %q, want off", hold)
	}
	// A limit holding a group on a Retry-After says which, until when.
	if err := e.client.SetLimits([]redrive.ConcurrencyLimit{
		{Name: "per-host", Queue: "crawl", Key: "payload.host", Max: 2},
		{Name: "mail", Kind: "mail", Max: 3},
		{Name: "api", Queue: "api", Key: "payload.host", Max: 1, HoldOnRetryAfter: true},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.EnqueueMany(t.Context(), []redrive.Request{{Queue: "api", Kind: "call", Payload: map[string]string{"host": "slow.example"}}}); err != nil {
		t.Fatal(err)
	}
	now2 := time.Now()
	got, err := e.st.Fetch(t.Context(), store.FetchParams{Queue: "api", Limit: 10, Now: now2, LeaseUntil: now2.Add(time.Hour), Worker: "w"})
	if err != nil || len(got) != 1 {
		t.Fatalf("Fetch api = %d jobs, %v", len(got), err)
	}
	o := store.Outcome{JobID: got[0].ID, Queue: "api", Attempt: got[0].Attempt, Lease: got[0].Lease, Worker: "w", Kind: store.Retry, At: now2,
		RunAt: now2.Add(time.Hour), Class: failure.RateLimited, Error: "429", HoldUntil: now2.Add(time.Hour)}
	if applied, err := e.st.Finish(t.Context(), []store.Outcome{o}); err != nil || !applied[0] {
		t.Fatalf("Finish = %v, %v", applied, err)
	}
	b.runWithin(t, 20*time.Second, "limits page with a hold",
		chromedp.Navigate(url+"/#/limits"),
		chromedp.WaitVisible(css(card("api")+` [data-held="slow.example"]`)))
	if s := b.textNow(t, card("api")+` [data-hold]`); !strings.Contains(s, "on: 1 group held: slow.example until") {
		t.Errorf("api hold: %q", s)
	}
	// A configured limit no job used yet is listed, with nothing in use.
	if m := b.textNow(t, card("mail")); !strings.Contains(m, "kind mail") || !strings.Contains(m, "Running\nnone") || !strings.Contains(m, "No job of this limit runs now") {
		t.Errorf("mail card: %q", m)
	}
	b.noJunk(t, "limits page")

	// The job page of the job waiting on the full group says so.
	waitingJob := fmt.Sprintf("/#/jobs/%d", ids[3])
	b.runWithin(t, 20*time.Second, "waiting job page",
		chromedp.Navigate(url+waitingJob),
		chromedp.WaitVisible(css(fmt.Sprintf(`[data-job-page="%d"] #job-limit [data-limit-waiting="true"]`, ids[3]))))
	screenshot(t, b, "dashboard-job-limit", "#job-limit")
	if s := b.textNow(t, "#job-limit"); !strings.Contains(s, "waiting on limit per-host (group example.com: 2 of 2 running)") || !strings.Contains(s, "uses no attempt") {
		t.Errorf("job page limit line: %q", s)
	}
	// The page refreshes while the job waits: a max raised elsewhere shows.
	if _, err := e.client.SetLimitMax(t.Context(), "per-host", 3); err != nil {
		t.Fatal(err)
	}
	b.runWithin(t, 20*time.Second, "job page refreshed",
		chromedp.WaitVisible(css(`#job-limit [data-limit-waiting="false"]`)))
	if s := b.textNow(t, "#job-limit"); !strings.Contains(s, "under limit per-host (group example.com: 2 of 3 running)") {
		t.Errorf("job page limit line after the max was raised: %q", s)
	}
	b.runWithin(t, 20*time.Second, "running job page",
		chromedp.Navigate(url+fmt.Sprintf("/#/jobs/%d", ids[2])),
		chromedp.WaitVisible(css(fmt.Sprintf(`[data-job-page="%d"] #job-limit [data-limit-waiting="false"]`, ids[2]))))
	if s := b.textNow(t, "#job-limit"); !strings.Contains(s, "under limit per-host (group other.org: 1 of 3 running)") {
		t.Errorf("running job page limit line: %q", s)
	}
	b.noJunk(t, "job page")

	// Raise per-host's max from the page.
	b.runWithin(t, 20*time.Second, "change max",
		chromedp.Navigate(url+"/#/limits"),
		chromedp.WaitVisible(css(card("per-host"))),
		chromedp.Click(css(card("per-host")+` button[data-action="set-max"]`)),
		chromedp.WaitVisible(css(`#limit-max`)))
	if d := b.text(t, "#dialog"); !strings.Contains(d, "Every process on the store applies it") {
		t.Errorf("change max dialog: %q", d)
	}
	b.runWithin(t, 20*time.Second, "a bad max",
		chromedp.SetValue(css(`#limit-max`), "0"),
		chromedp.Click(css(`#confirm`)),
		chromedp.WaitVisible(css(`#dialog .error`)))
	if s := b.textNow(t, "#dialog .error"); !strings.Contains(s, "whole number from 1") {
		t.Errorf("error of a max 0: %q", s)
	}
	b.runWithin(t, 20*time.Second, "confirm max 5",
		chromedp.SetValue(css(`#limit-max`), "5"),
		chromedp.Click(css(`#confirm`)),
		chromedp.WaitVisible(css(card("per-host")+` [data-max="5"]`)))
	ls, err := e.st.ListLimits(t.Context(), time.Now())
	if err != nil || len(ls) == 0 || ls[len(ls)-1].Name != "per-host" || ls[len(ls)-1].Max != 5 {
		t.Errorf("limits after the change: %+v, %v; want per-host max 5", ls, err)
	}
	b.noJunk(t, "after the change")
	b.checkClean(t, url)
}
