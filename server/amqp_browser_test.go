package server

import (
	"bytes"
	"context"
	"fmt"
	"github.com/redrivehq/redrive/internal/testwait"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/amqp"
	"github.com/redrivehq/redrive/retry"
)

// TestManagedQueueInChromium follows a binary message of a managed
// RabbitMQ queue through the dashboard: a plain consumer rejects it until
// it dies; the keeper stores it as a dead job; the overview shows the
// managed queue with its delay queues and DLQ; the dead job's page shows
// the body as a hex dump; redriven by the job page's button, the message
// is published back to the queue, byte-exact, and its timeline tells both
// lives.
func TestManagedQueueInChromium(t *testing.T) {
	b := &testBrokers{}
	e := newEnv(t, Options{Brokers: b})
	p := retry.Policy{MaxRetries: 2, Initial: 10 * time.Millisecond, Multiplier: 2, MaxDelay: time.Second, Jitter: retry.JitterNone}
	topo := startManaged(t, b, e.client, p)
	br := newBrowser(t) // before anything runs: a missing browser skips or fails at once

	// The store's worker of the managed queue's store queue: running a
	// dead letter redriven there publishes it back to the broker.
	pub, err := amqp.NewPublisher(b.conn, amqp.PublisherOptions{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pub.Close() })
	w := redrive.NewWorker(e.client, redrive.WorkerOptions{Queues: map[string]int{topo.Queue: 1}, Logger: quiet,
		PollInterval: 20 * time.Millisecond})
	amqp.RegisterKind(w, pub, amqp.KindOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("worker: %v", err)
		}
	})

	var accept atomic.Bool
	acked := plainConsumer(t, b.conn, topo.Queue, &accept)
	body := []byte{0x00, 0x01, 0xfe, 0xff, 'A'}
	publish(t, b.conn, topo.Queue, amqp091.Publishing{MessageId: "binary-1", ContentType: "application/octet-stream", Body: body})
	dead := waitDead(t, e.client, topo.Queue)
	if dead.Kind != amqp.Kind || dead.Attempt != 3 {
		t.Fatalf("dead job kind %q attempt %d, want amqp after 3 attempts", dead.Kind, dead.Attempt)
	}

	url := e.srv.URL
	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }
	mq := fmt.Sprintf(`#amqp [data-amqp-queue=%q]`, topo.Queue)
	row := func(name string) string { return fmt.Sprintf(`%s tr[data-broker-queue=%q]`, mq, name) }

	// The overview lists the managed queue: its work queue with its
	// consumer, its failure queue, each delay queue with its delay, its
	// DLQ; where dead letters are kept; rates once two polls exist.
	br.runWithin(t, 10*time.Second, "overview",
		chromedp.Navigate(url+"/"),
		chromedp.WaitVisible(css(mq)))
	br.noJunk(t, "overview with a managed queue")
	screenshot(t, br, "dashboard-rabbitmq", mq)
	if h := br.textNow(t, `#amqp h2`); h != "RabbitMQ queues" {
		t.Errorf("section title %q", h)
	}
	if n := br.count(t, mq+` tbody tr`); n != 3+len(topo.Tiers) {
		t.Errorf("the managed queue lists %d broker queues, want %d (work, failed, DLQ, %d delay queues)", n, 3+len(topo.Tiers), len(topo.Tiers))
	}
	for _, c := range []struct{ name, role string }{{topo.Queue, "work"}, {topo.FailedQueue(), "failed"}, {topo.DLQ(), "dlq"}} {
		if got := br.attr(t, row(c.name), "data-role"); got != c.role {
			t.Errorf("row of %s: role %q, want %q", c.name, got, c.role)
		}
	}
	for _, d := range []time.Duration{10 * time.Millisecond, 20 * time.Millisecond, 200 * time.Millisecond, 2 * time.Second} {
		sel := row(topo.TierQueue(d))
		if br.count(t, sel) != 1 {
			t.Errorf("no row for the delay queue %s", topo.TierQueue(d))
			continue
		}
		if got, want := br.textNow(t, sel+` td.delay`), strings.TrimSuffix(d.String(), "0s"); got != d.String() && got != want {
			t.Errorf("delay of %s: %q, want %s", topo.TierQueue(d), got, d)
		}
	}
	// The delay queues in order of their delay, after the failure queue,
	// before the DLQ.
	order, err := chromedp.Run(br.ctx, chromedp.Evaluate[[]string](fmt.Sprintf(
		`Array.from(document.querySelectorAll(%q), (r) => r.dataset.brokerQueue)`, mq+` tbody tr`)))
	if err != nil {
		t.Fatal(err)
	}
	wantOrder := []string{topo.Queue, topo.FailedQueue()}
	for _, d := range topo.Tiers {
		wantOrder = append(wantOrder, topo.TierQueue(d))
	}
	wantOrder = append(wantOrder, topo.DLQ())
	if fmt.Sprint(order) != fmt.Sprint(wantOrder) {
		t.Errorf("broker queues in the order\n%v\nwant\n%v", order, wantOrder)
	}
	if c := br.textNow(t, row(topo.Queue)+` td:last-child`); c != "1" {
		t.Errorf("consumers of the work queue in its row: %q, want 1", c)
	}
	if c := br.textNow(t, mq+` [data-stat="consumers"]`); c != "1" {
		t.Errorf("consumers: %q, want 1", c)
	}
	if n := br.textNow(t, row(topo.DLQ())+` td[data-messages]`); n != "0" {
		t.Errorf("DLQ depth %q, want 0: the keeper moved the dead letter to the store", n)
	}
	if kept := br.textNow(t, mq+` [data-kept="store"]`); !strings.Contains(kept, "in the store") || !strings.Contains(kept, "1 stored") {
		t.Errorf("where dead letters are kept: %q", kept)
	}
	if href := br.attr(t, mq+` [data-kept="store"] a`, "href"); href != "#/dlq?queue="+strings.ReplaceAll(topo.Queue, "/", "%2F") {
		t.Errorf("link to the kept dead letters: %q", href)
	}
	for _, r := range []string{"retried", "dead"} {
		if v := br.textNow(t, fmt.Sprintf(`%s [data-rate=%q]`, mq, r)); v != "—" {
			t.Errorf("%s rate after one poll: %q, want —", r, v)
		}
	}
	if br.count(t, mq+` [data-amqp-error]`) != 0 {
		t.Errorf("an error line is shown: %q", br.textNow(t, mq+` [data-amqp-error]`))
	}
	// The overview polls every 5s: the second poll gives rates (nothing
	// moved in between).
	testwait.Until(t, "the overview's second poll to show a dead rate", 10*time.Second, func() bool {
		return br.textNow(t, mq+` [data-rate="dead"]`) != "—"
	})
	for _, r := range []string{"retried", "dead"} {
		if v := br.textNow(t, fmt.Sprintf(`%s [data-rate=%q]`, mq, r)); v != "0/min" {
			t.Errorf("%s rate after two polls: %q, want 0/min", r, v)
		}
	}

	// Following the link lists the dead letter among the dead jobs.
	br.runWithin(t, 5*time.Second, "dead letters of the queue",
		chromedp.Click(css(mq+` [data-kept="store"] a`)),
		chromedp.WaitVisible(css(`table.groups tbody tr`)))
	if g := br.textNow(t, `table.groups tbody tr`); !strings.Contains(g, topo.Queue+" / amqp") {
		t.Errorf("the dead letters of the queue: %q", g)
	}

	// The dead job's page shows the message: its binary body as a hex
	// dump, its content type, its origin queue; the raw payload stays.
	br.runWithin(t, 5*time.Second, "dead job page",
		chromedp.Navigate(fmt.Sprintf("%s/#/jobs/%d", url, dead.ID)),
		chromedp.WaitVisible(css(`#message-body`)))
	br.noJunk(t, "dead amqp job page")
	screenshot(t, br, "dashboard-amqp-job", `#message-body`)
	dump := br.textNow(t, `#message-body`)
	if !strings.HasPrefix(dump, "00000000  00 01 fe ff 41 ") || !strings.HasSuffix(dump, " |....A|") || strings.Count(dump, "\n") != 0 {
		t.Errorf("hex dump %q, want one line: offset 00000000, bytes 00 01 fe ff 41, chars |....A|", dump)
	}
	if ct := br.textNow(t, `#message-content-type`); ct != "application/octet-stream" {
		t.Errorf("content type %q", ct)
	}
	if q := br.textNow(t, `#message-queue`); q != topo.Queue {
		t.Errorf("origin queue %q, want %s", q, topo.Queue)
	}
	if enc := br.textNow(t, `#message-encoding`); enc != "binary, 5 bytes" {
		t.Errorf("body %q, want binary, 5 bytes", enc)
	}
	if raw := br.textNow(t, `#payload`); !strings.Contains(raw, `"body_encoding": "base64"`) || !strings.Contains(raw, `"body": "AAH+/0E="`) {
		t.Errorf("raw payload: %q", raw)
	}

	// Redrive by the job page's button: the worker publishes the message
	// back, and the consumer, accepting now, gets the same bytes.
	accept.Store(true)
	br.runWithin(t, 10*time.Second, "redrive",
		chromedp.Click(css(`#redrive-job`)),
		chromedp.WaitVisible(css(`#confirm`)),
		chromedp.Click(css(`#confirm`)),
		chromedp.WaitEnabled(css(`#close`)))
	if p := br.text(t, `#progress-text`); !strings.Contains(p, "1 of 1 redriven") {
		t.Errorf("redrive progress says %q", p)
	}
	br.run(t, "close", chromedp.Click(css(`#close`)))
	select {
	case got := <-acked:
		if !bytes.Equal(got, body) {
			t.Errorf("the consumer got % x, want % x", got, body)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the redriven message never reached the consumer")
	}
	var j *redrive.Job
	testwait.Watch(t, "the redriven job to complete", 10*time.Second, func() (bool, string) {
		if j, err = e.client.Get(context.Background(), dead.ID); err != nil {
			t.Fatal(err)
		}
		return j.State == redrive.Completed, string(j.State)
	})

	// The timeline tells both lives: two retries and the death on the
	// broker, the redrive, and the publish that completed it.
	br.runWithin(t, 10*time.Second, "completed job page",
		chromedp.Navigate(fmt.Sprintf("%s/#/jobs/%d", url, dead.ID)),
		chromedp.WaitVisible(css(`.timeline li[data-event="completed"]`)))
	br.noJunk(t, "redriven amqp job page")
	events, err := chromedp.Run(br.ctx, chromedp.Evaluate[[]string](
		`Array.from(document.querySelectorAll('.timeline li'), (li) => li.dataset.event)`))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"retry", "retry", "dead", "redriven", "completed"}; fmt.Sprint(events) != fmt.Sprint(want) {
		t.Errorf("timeline %v, want %v", events, want)
	}
	if c := br.textNow(t, `.timeline li[data-event="completed"]`); !strings.Contains(c, "published") ||
		!strings.Contains(c, "published to queue "+topo.Queue+" (5 bytes, base64)") {
		t.Errorf("the completing attempt shows %q, want the publish recorded", c)
	}
	if d := br.textNow(t, `.timeline li[data-event="dead"]`); !strings.Contains(d, "Attempt 3") || !strings.Contains(d, "rejected by the consumer") {
		t.Errorf("the death shows %q", d)
	}
	if dump := br.textNow(t, `#message-body`); !strings.HasPrefix(dump, "00000000  00 01 fe ff 41 ") {
		t.Errorf("the completed job's hex dump: %q", dump)
	}
	br.checkClean(t, url)
}

// screenshot writes a PNG of the page, tall enough to show the element
// sel, to the folder named by REDRIVE_SCREENSHOTS (docs/images in the
// repository), when it is set.
func screenshot(t *testing.T, br *browser, name, sel string) {
	t.Helper()
	dir := os.Getenv("REDRIVE_SCREENSHOTS")
	if dir == "" {
		return
	}
	br.run(t, name, chromedp.EmulateViewport(1280, 1300), chromedp.WaitVisible(chromedp.CSS(sel)),
		chromedp.Sleep(300*time.Millisecond))
	png, err := chromedp.Run(br.ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}
