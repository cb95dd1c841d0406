package server

import (
	"github.com/redrivehq/redrive/internal/testwait"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/redrivehq/redrive"
)

// TestSchedulesInChromium: the schedules page lists every schedule with
// its spec, next and last runs; pause, resume and run now work from it.
func TestSchedulesInChromium(t *testing.T) {
	e := newEnv(t, Options{})
	b := newBrowser(t) // before anything runs: a missing browser skips or fails at once
	runPeriodicWorker(t, e.client,
		redrive.Periodic{Name: "nightly-reindex", Cron: "0 2 * * *", TimeZone: "America/New_York", Kind: "reindex",
			Payload: map[string]int{"batch": 100}, Missed: redrive.MissedRunOnce},
		redrive.Periodic{Name: "beat", Every: time.Second, Kind: "beat"})
	url := e.srv.URL
	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }
	row := func(name string) string { return `tr[data-schedule="` + name + `"]` }

	b.runWithin(t, 10*time.Second, "schedules page",
		chromedp.Navigate(url+"/#/schedules"),
		chromedp.WaitVisible(css(row("nightly-reindex"))))
	if a := b.attr(t, `a[data-nav="schedules"]`, "class"); !strings.Contains(a, "active") {
		t.Errorf("the Schedules nav link is not active: %q", a)
	}
	screenshot(t, b, "dashboard-schedules", row("nightly-reindex"))
	nightly := b.textNow(t, row("nightly-reindex"))
	for _, want := range []string{"0 2 * * *", "America/New_York", "reindex", "active", "never", "run once"} {
		if !strings.Contains(nightly, want) {
			t.Errorf("nightly row lacks %q: %q", want, nightly)
		}
	}
	if next := b.textNow(t, row("nightly-reindex")+" .next-run"); !strings.Contains(next, "in ") {
		t.Errorf("nightly next run %q, want a time and how far ahead", next)
	}
	// The every-second schedule runs while the page is open: the page
	// refreshes by itself and shows its last run and job.
	b.waitText(t, row("beat")+" .last-run", "job ")
	if beat := b.textNow(t, row("beat")); !strings.Contains(beat, "every 1s") || !strings.Contains(beat, "skip") {
		t.Errorf("beat row: %q", beat)
	}
	b.noJunk(t, "schedules page")

	// Pause, then resume, the nightly schedule.
	b.runWithin(t, 10*time.Second, "pause",
		chromedp.Click(css(row("nightly-reindex")+` button[data-action="pause"]`)),
		chromedp.WaitVisible(css(`#confirm`)))
	b.noJunk(t, "pause dialog")
	b.runWithin(t, 10*time.Second, "confirm pause",
		chromedp.Click(css(`#confirm`)),
		chromedp.WaitVisible(css(row("nightly-reindex")+`[data-paused="true"]`)))
	if s, err := e.client.Schedule(t.Context(), "nightly-reindex"); err != nil || !s.Paused {
		t.Errorf("after the pause: %+v, %v", s, err)
	}
	if next := b.textNow(t, row("nightly-reindex")+" .next-run"); strings.TrimSpace(next) != "—" {
		t.Errorf("paused schedule's next run %q, want none", next)
	}
	b.runWithin(t, 10*time.Second, "resume",
		chromedp.Click(css(row("nightly-reindex")+` button[data-action="resume"]`)),
		chromedp.WaitVisible(css(`#confirm`)),
		chromedp.Click(css(`#confirm`)),
		chromedp.WaitVisible(css(row("nightly-reindex")+`[data-paused="false"]`)))

	// Run now: one reindex job, with the trigger's key.
	b.runWithin(t, 10*time.Second, "run now",
		chromedp.Click(css(row("nightly-reindex")+` button[data-action="trigger"]`)),
		chromedp.WaitVisible(css(`#confirm`)))
	if d := b.text(t, "#dialog"); !strings.Contains(d, "One reindex job is enqueued now on queue default") {
		t.Errorf("run now dialog: %q", d)
	}
	b.run(t, "confirm run now", chromedp.Click(css(`#confirm`)))
	var triggered *redrive.Job
	testwait.Until(t, "run now to enqueue a reindex job", 10*time.Second, func() bool {
		res, err := e.client.List(t.Context(), redrive.Filter{Kind: "reindex"}, redrive.Page{})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Jobs) > 0 {
			triggered = res.Jobs[0]
		}
		return triggered != nil
	})
	if !strings.HasPrefix(triggered.IdempotencyKey, "periodic:nightly-reindex:trigger:") || string(triggered.Payload) != `{"batch":100}` {
		t.Errorf("triggered job: %+v", triggered)
	}
	b.noJunk(t, "after run now")
	b.checkClean(t, url)
}
