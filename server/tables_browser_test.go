package server

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/breaker"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/internal/testwait"
)

// tableLayoutJS lists what breaks the table layout of the page's tables:
// a cell that is not a table-cell (td.actions { display: flex } once took
// the buttons' cell out of the table layout), a row narrower or wider than
// its table (the row lines stopped short, a stray line sat at the right),
// a cell not as high as its row (its bottom line off the row's), a row
// whose last cell does not end where the row ends, or a row with
// another number of cells than the header. It returns "" when all is well.
const tableLayoutJS = `(() => {
  const out = [];
  for (const table of document.querySelectorAll('#app table')) {
    const tw = table.getBoundingClientRect();
    const head = table.tHead && table.tHead.rows[0] ? table.tHead.rows[0].cells.length : -1;
    for (const tr of table.rows) {
      const cells = [...tr.cells];
      const r = tr.getBoundingClientRect();
      for (const c of cells) {
        const d = getComputedStyle(c).display;
        if (d !== 'table-cell') out.push(table.className + ': a ' + c.tagName + '.' + c.className + ' is display ' + d);
        const cr = c.getBoundingClientRect();
        if (Math.abs(cr.height - r.height) > 1.5) out.push(table.className + ': a ' + c.tagName + '.' + c.className + ' ' + cr.height + 'px high in a row ' + r.height + 'px high');
      }
      if (head >= 0 && cells.length !== head) out.push(table.className + ': a row of ' + cells.length + ' cells, the header has ' + head);
      if (Math.abs(r.width - tw.width) > 1.5) out.push(table.className + ': a row ' + r.width + 'px wide in a table ' + tw.width + 'px wide');
      if (cells.length) {
        const last = cells[cells.length - 1].getBoundingClientRect();
        if (Math.abs(last.right - r.right) > 1.5) out.push(table.className + ': the last cell ends at ' + last.right + ', its row at ' + r.right);
      }
    }
  }
  return out.join('\n');
})()`

// TestTablesAlignedInChromium: the tables of the Operations, Breakers and
// Schedules pages keep the table layout (their buttons sit in a wrapper
// inside the cell), at a wide and a narrow window; a job redriven once
// says "once".
func TestTablesAlignedInChromium(t *testing.T) {
	reg := breaker.NewRegistry(breaker.Config{Failures: 3, CountOnly: true})
	reg.Get("payments")
	e := newEnv(t, Options{Breakers: reg})
	b := newBrowser(t) // before anything runs: a missing browser skips or fails at once
	ctx := t.Context()
	stop := runPeriodicWorker(t, e.client,
		redrive.Periodic{Name: "nightly-reindex", Cron: "0 2 * * *", Kind: "reindex"},
		redrive.Periodic{Name: "hourly", Every: time.Hour, Kind: "beat"})
	testwait.Until(t, "the worker to declare its schedules", time.Minute, func() bool {
		ss, err := e.client.Schedules(ctx)
		return err == nil && len(ss) == 2
	})
	stop() // the schedules stay; the operation below stays pending
	// An operation with no worker stays pending, with its buttons.
	pending, err := e.client.StartOperation(ctx, redrive.OperationRequest{Kind: redrive.OperationPurge, Filter: redrive.Filter{Queue: "nothing-here"}})
	if err != nil {
		t.Fatal(err)
	}
	dead := e.makeDead("q", "boom", failure.Permanent)
	if _, err := e.client.Redrive(ctx, redrive.RedriveRequest{IDs: []int64{dead}}); err != nil {
		t.Fatal(err)
	}
	url := e.srv.URL
	for _, size := range [][2]int{{1400, 900}, {760, 900}} {
		b.run(t, "window size", chromedp.EmulateViewport(int64(size[0]), int64(size[1])))
		for _, page := range []struct{ route, row string }{
			{"operations", `tr[data-operation="` + pending.ID + `"]`},
			{"breakers", `tr[data-breaker="payments"]`},
			{"schedules", `tr[data-schedule="hourly"]`},
		} {
			b.runWithin(t, time.Minute, page.route+" page",
				chromedp.Navigate(url+"/#/"+page.route),
				chromedp.WaitVisible(chromedp.CSS(page.row)))
			if n := b.count(t, page.row+` button`); n == 0 {
				t.Fatalf("%s: no button in the row", page.route)
			}
			v, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](tableLayoutJS))
			if err != nil {
				t.Fatal(err)
			}
			if v != "" {
				t.Errorf("%s page at %dx%d, table layout broken:\n%s", page.route, size[0], size[1], v)
			}
		}
	}
	b.runWithin(t, time.Minute, "job page",
		chromedp.Navigate(fmt.Sprintf("%s/#/jobs/%d", url, dead)),
		chromedp.WaitVisible(chromedp.CSS(`dl.kv`)))
	if kv := b.text(t, "dl.kv"); !strings.Contains(kv, "Redriven\nonce") {
		t.Errorf("job redriven once: %q", kv)
	}
}
