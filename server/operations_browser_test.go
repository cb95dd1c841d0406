package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redrivehq/redrive/internal/testwait"

	"github.com/chromedp/chromedp"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/store"
)

// TestOperationsPageInChromium lists every operation on the Operations
// page with its progress, counts and state, and pauses, resumes and
// cancels them with its buttons. The store holds the slow redrive's
// second batch until the page has paused it: on the wall clock, a loaded
// machine let the redrive end before the browser clicked pause.
func TestOperationsPageInChromium(t *testing.T) {
	e, gate := newGatedEnv(t, Options{}, 1)
	b := newBrowser(t) // before anything runs: a missing browser skips or fails at once
	ctx := context.Background()
	url := e.srv.URL
	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }
	row := func(id string) string { return fmt.Sprintf(`tr[data-operation="%s"]`, id) }

	// The empty page says so.
	b.runWithin(t, time.Minute, "empty operations page",
		chromedp.Navigate(url+"/#/operations"),
		chromedp.WaitVisible(css(`[data-nav="operations"].active`)))
	b.waitText(t, `#app`, "No operation yet")

	// A purge with no worker stays pending: the page says it waits.
	ids := e.buryMany("pq", "boom", 30)
	purge, err := e.client.StartOperation(ctx, redrive.OperationRequest{Kind: redrive.OperationPurge, Filter: redrive.Filter{Queue: "nothing-here"}})
	if err != nil {
		t.Fatal(err)
	}
	b.waitText(t, row(purge.ID), "waiting for a worker")
	if got := b.textNow(t, row(purge.ID)+" .badge"); got != "pending" {
		t.Errorf("pending operation's badge %q", got)
	}
	// Cancel it with its button, confirming.
	b.run(t, "cancel pending", chromedp.Click(css(row(purge.ID)+` button[data-action="cancel"]`)), chromedp.WaitVisible(css(`#confirm`)))
	b.noJunk(t, "cancel dialog")
	b.run(t, "confirm cancel", chromedp.Click(css(`#confirm`)))
	b.waitText(t, row(purge.ID)+" .badge", "canceled")

	// A slow redrive runs in the worker; the page follows its progress
	// by itself, and pauses and resumes it.
	e.runWorker()
	slow, err := e.client.StartOperation(ctx, redrive.OperationRequest{Kind: redrive.OperationRedrive, IDs: ids, Rate: 10, Note: "after the fix"})
	if err != nil {
		t.Fatal(err)
	}
	testwait.Recv(t, "the slow redrive's second batch", time.Minute, gate.held)
	b.waitText(t, row(slow.ID), "redriven")
	b.waitText(t, row(slow.ID)+" .badge", "running")
	if txt := b.textNow(t, row(slow.ID)); !strings.Contains(txt, "of 30") || !strings.Contains(txt, "30 ids") || !strings.Contains(txt, "after the fix") {
		t.Errorf("running row: %q", txt)
	}
	b.clickNow(t, row(slow.ID)+` button[data-action="pause"]`)
	testwait.Until(t, "the pause button to pause the operation", time.Minute, func() bool {
		op, err := e.client.Operation(ctx, slow.ID)
		return err == nil && op.State == redrive.OperationPaused
	})
	b.waitText(t, row(slow.ID)+" .badge", "paused")
	paused, err := e.client.Operation(ctx, slow.ID)
	if err != nil || paused.State != redrive.OperationPaused {
		t.Fatalf("after the pause button: %+v, %v", paused, err)
	}
	gate.release()
	if err := testwait.Recv(t, "the batch after the pause", time.Minute, gate.after); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("the batch after the pause: %v, want a conflict", err)
	}
	b.clickNow(t, row(slow.ID)+` button[data-action="resume"]`)
	// The remaining jobs (at most 30, 10 a second) finish within a few
	// seconds; the page refreshes every 2.
	testwait.Watch(t, "the resumed redrive to end done", 20*time.Second, func() (bool, string) {
		op, err := e.client.Operation(ctx, slow.ID)
		if err != nil {
			t.Fatal(err)
		}
		return op.State == redrive.OperationDone, fmt.Sprintf("%+v", op)
	})
	b.waitText(t, row(slow.ID)+" .badge", "done")
	b.waitText(t, row(slow.ID)+` [data-outcome="redriven"]`, "30 redriven")
	if n := b.count(t, row(slow.ID)+" button"); n != 0 {
		t.Errorf("a done operation shows %d buttons", n)
	}
	if v := b.attr(t, row(slow.ID)+" progress", "value"); v != "30" {
		t.Errorf("done bar value %q, want 30", v)
	}
	// Newest first.
	if first := b.attr(t, `tbody tr`, "data-operation"); first != slow.ID {
		t.Errorf("first row %s, want the newest operation %s", first, slow.ID)
	}
	b.noJunk(t, "operations page")

	// A replayed job's page names the job it replays, as a link.
	src, err := e.client.Enqueue(ctx, "index", map[string]int{"doc": 7}, redrive.InQueue("replayq"))
	if err != nil {
		t.Fatal(err)
	}
	rp, err := e.client.StartOperation(ctx, redrive.OperationRequest{Kind: redrive.OperationReplay, Filter: redrive.Filter{Queue: "replayq"}, Note: "reindex"})
	if err != nil {
		t.Fatal(err)
	}
	b.waitText(t, row(rp.ID)+" .badge", "done")
	b.waitText(t, row(rp.ID)+` [data-outcome="replayed"]`, "1 replayed")
	// A bulk cancel shows what it canceled.
	if _, err := e.client.Enqueue(ctx, "index", map[string]int{"doc": 8}, redrive.InQueue("cancelq")); err != nil {
		t.Fatal(err)
	}
	cn, err := e.client.StartOperation(ctx, redrive.OperationRequest{Kind: redrive.OperationCancel, Filter: redrive.Filter{Queue: "cancelq"}})
	if err != nil {
		t.Fatal(err)
	}
	b.waitText(t, row(cn.ID)+" .badge", "done")
	b.waitText(t, row(cn.ID)+` [data-outcome="canceled"]`, "1 canceled")
	screenshot(t, b, "dashboard-operations", row(rp.ID))
	res, err := e.client.List(ctx, redrive.Filter{Queue: "replayq"}, redrive.Page{Limit: 10})
	if err != nil || len(res.Jobs) != 2 || res.Jobs[0].ReplayOf != src.ID {
		t.Fatalf("replay: %+v, %v", res.Jobs, err)
	}
	b.runWithin(t, time.Minute, "replayed job page",
		chromedp.Navigate(fmt.Sprintf("%s/#/jobs/%d", url, res.Jobs[0].ID)),
		chromedp.WaitVisible(css(`#replay-of a`)))
	if got, href := b.textNow(t, `#replay-of`), b.attr(t, `#replay-of a`, "href"); got != fmt.Sprintf("job %d", src.ID) || href != fmt.Sprintf("#/jobs/%d", src.ID) {
		t.Errorf("replay-of %q -> %q", got, href)
	}
	b.waitText(t, `[data-event="replayed"]`, "reindex")
	b.noJunk(t, "replayed job page")
	b.checkClean(t, url)
}

// clickRow clicks, with the mouse, the element matching sel in a table
// the page renders again every 2 s: a render between finding the node
// and clicking it fails the click ("Could not find node with given id"),
// and the click is tried again on the new node. Any other error fails the
// test.
func (b *browser) clickRow(t *testing.T, sel string) {
	t.Helper()
	for try := 1; ; try++ {
		ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
		_, err := chromedp.Run(ctx, chromedp.Click(chromedp.CSS(sel)))
		cancel()
		if err == nil {
			return
		}
		if !strings.Contains(err.Error(), "Could not find node") || try == 10 {
			t.Fatalf("click %s (try %d): %v\nbrowser problems: %v", sel, try, err, b.problemList())
		}
	}
}

// clickNow clicks the element matching sel in one step of the page's own
// script, once it is there: the page renders its table again every 2 s,
// and on a loaded machine a click that found the node first could come
// after the node was replaced ("Could not find node with given id").
func (b *browser) clickNow(t *testing.T, sel string) {
	t.Helper()
	js := fmt.Sprintf(`(() => { const el = document.querySelector(%q); if (!el) return false; el.click(); return true; })()`, sel)
	if _, err := chromedp.Run(b.ctx, chromedp.Poll[bool](js,
		chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(time.Minute))); err != nil {
		t.Fatalf("click %s: %v\nbrowser problems: %v", sel, err, b.problemList())
	}
}
