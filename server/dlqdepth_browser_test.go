package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/redrivehq/redrive"

	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/store"
)

// TestDLQPageAtDepth measures, in Chromium, how long the dashboard's DLQ
// page takes to show its groups (unfiltered, and filtered by an error
// prefix that one cause in twenty starts with), and a group's page its
// first jobs, with $REDRIVE_DLQ_DEPTH dead jobs in the store (3 queues,
// 20 causes, as `redrive bench dlq` fills it): SQLite, or PostgreSQL
// with REDRIVE_DLQ_DEPTH_STORE=postgres. It is skipped unless
// REDRIVE_DLQ_DEPTH is set, since filling a million dead jobs takes
// minutes. It logs the times and asserts only that the pages show
// (within a generous bound): the machine's load decides the times,
// docs/BENCHMARKS.md records them.
func TestDLQPageAtDepth(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("REDRIVE_DLQ_DEPTH"))
	if n <= 0 {
		t.Skip("set REDRIVE_DLQ_DEPTH=N to measure the DLQ pages with N dead jobs")
	}
	kind := os.Getenv("REDRIVE_DLQ_DEPTH_STORE")
	if kind == "" {
		kind = "sqlite"
	}
	if kind != "sqlite" && kind != "postgres" {
		t.Fatalf("REDRIVE_DLQ_DEPTH_STORE=%q: want sqlite or postgres", kind)
	}
	c := redrive.NewClient(openProtoStore(t, kind), redrive.ClientOptions{Logger: quiet})
	api := New(Options{Client: c, Logger: quiet})
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { _ = api.Close() })
	e := struct {
		srv    *httptest.Server
		client *redrive.Client
	}{srv, c}
	ctx := context.Background()
	base := time.Now().Add(-time.Duration(n) * time.Millisecond).UTC()
	t0 := time.Now()
	var fp string
	batch := make([]store.DeadJob, 0, 1000)
	for i := 0; i < n; {
		batch = batch[:0]
		for ; i < n && len(batch) < 1000; i++ {
			q, c := i%3, (i/3)%20
			at := base.Add(time.Duration(i) * time.Millisecond)
			msg := fmt.Sprintf("cause %02d: upstream answered %d (job %d)", c, 500+c, i)
			d := store.DeadJob{Queue: "dlq-" + strconv.Itoa(q), Kind: "kind-" + strconv.Itoa(c%4),
				Payload: json.RawMessage(`{"n":` + strconv.Itoa(i) + `}`), MaxRetries: -1, DeadAt: at, Attempt: 3,
				DeadReason: "reason_" + strconv.Itoa(c), LastError: msg, LastErrorClass: failure.Classes[c%len(failure.Classes)],
				Fingerprint: fmt.Sprintf("%04x%04x", q, c),
				History:     []store.Event{{Kind: store.EventDead, Attempt: 3, At: at, Error: msg, Reason: "reason_" + strconv.Itoa(c)}}}
			fp = d.Fingerprint
			batch = append(batch, d)
		}
		if _, err := e.client.AddDead(ctx, batch); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("filled %d dead jobs in %s", n, time.Since(t0).Round(time.Millisecond))

	b := newBrowser(t)
	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }
	// The browser's first start and the dashboard's scripts are not the
	// DLQ's: load the overview once, then each page from a blank one.
	b.runWithin(t, time.Minute, "overview", chromedp.Navigate(e.srv.URL+"/"), chromedp.WaitVisible(css(`.tiles`)))
	for i := range 3 {
		b.runWithin(t, time.Minute, "blank", chromedp.Navigate("about:blank"))
		t0 := time.Now()
		b.runWithin(t, time.Minute, "DLQ page", chromedp.Navigate(e.srv.URL+"/#/dlq"), chromedp.WaitVisible(css(`table.groups tr[data-group]`)))
		dlq := time.Since(t0)
		b.runWithin(t, time.Minute, "blank", chromedp.Navigate("about:blank"))
		t0 = time.Now()
		b.runWithin(t, time.Minute, "group page", chromedp.Navigate(e.srv.URL+"/#/dlq/"+fp), chromedp.WaitVisible(css(`input[data-select]`)))
		group := time.Since(t0)
		b.runWithin(t, time.Minute, "blank", chromedp.Navigate("about:blank"))
		t0 = time.Now()
		b.runWithin(t, time.Minute, "DLQ page by error prefix", chromedp.Navigate(e.srv.URL+"/#/dlq?error_prefix=cause+04"),
			chromedp.WaitVisible(css(`table.groups tr[data-group]`)))
		byPrefix := time.Since(t0)
		if got := b.count(t, `table.groups tr[data-group]`); got != 3 {
			t.Errorf("DLQ page by error prefix: %d groups, want 3 (one cause in 3 queues)", got)
		}
		t.Logf("load %d with %d dead jobs on %s: DLQ page %s, group page %s, DLQ page by error prefix %s", i+1, n, kind,
			dlq.Round(time.Millisecond), group.Round(time.Millisecond), byPrefix.Round(time.Millisecond))
	}
}
