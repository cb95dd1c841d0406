package server

import (
	"context"
	"fmt"
	"github.com/redrivehq/redrive/internal/testwait"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/kafka"
	"github.com/redrivehq/redrive/retry"
)

// TestKafkaTopicInChromium follows a binary record of a Kafka topic
// through the dashboard: a consumer on kfake (exactly-once, so that the
// topics hold transaction markers) fails it until it dies; the
// keeper stores its dead letter as a dead job; the overview shows the
// topic with its retry tiers and DLT; the dead job's page shows the
// value as a hex dump, the key and the headers; redriven by the job
// page's button, the record is produced back to the topic, where the
// consumer completes it, and the timeline tells both lives.
func TestKafkaTopicInChromium(t *testing.T) {
	k := &testKafka{mode: kafka.ExactlyOnce}
	e := newEnv(t, Options{Kafka: k})
	p := retry.Policy{MaxRetries: 2, Initial: 10 * time.Millisecond, Multiplier: 2, MaxDelay: time.Second, Jitter: retry.JitterNone}
	var fail atomic.Bool
	fail.Store(true)
	topo := startKafka(t, k, e.client, p, &fail)
	br := newBrowser(t) // before anything runs: a missing browser skips or fails at once

	// The store's worker of the topic's store queue: running a dead
	// letter redriven there produces it back to the topic.
	w := redrive.NewWorker(e.client, redrive.WorkerOptions{Queues: map[string]int{topo.Topic: 1}, Logger: quiet,
		PollInterval: 20 * time.Millisecond})
	kafka.RegisterKind(w, k.cl, kafka.KindOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("worker: %v", err)
		}
	})

	value := []byte{0x00, 0x01, 0xfe, 0xff, 'A'}
	k.produce(t, topo.Topic, []byte("doc-1"), value)
	dead := waitDead(t, e.client, topo.Topic)
	if dead.Kind != kafka.Kind || dead.Attempt != 3 {
		t.Fatalf("dead job kind %q attempt %d, want kafka after 3 attempts", dead.Kind, dead.Attempt)
	}

	url := e.srv.URL
	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }
	kt := fmt.Sprintf(`#kafka [data-kafka-topic=%q]`, topo.Topic)
	row := func(name string) string { return fmt.Sprintf(`%s tr[data-kafka-row=%q]`, kt, name) }

	// The overview lists the topic: its main topic, each retry tier with
	// its delay, its DLT with the dead letter, which the keeper stored.
	br.runWithin(t, 10*time.Second, "overview",
		chromedp.Navigate(url+"/"),
		chromedp.WaitVisible(css(kt)))
	br.noJunk(t, "overview with a Kafka topic")
	if h := br.textNow(t, `#kafka h2`); h != "Kafka topics" {
		t.Errorf("section title %q", h)
	}
	if n := br.count(t, kt+` tbody tr`); n != 2+len(topo.Tiers) {
		t.Errorf("the topic lists %d Kafka topics, want %d (main, DLT, %d tiers)", n, 2+len(topo.Tiers), len(topo.Tiers))
	}
	order, err := chromedp.Run(br.ctx, chromedp.Evaluate[[]string](fmt.Sprintf(
		`Array.from(document.querySelectorAll(%q), (r) => r.dataset.kafkaRow + ' ' + r.dataset.role)`, kt+` tbody tr`)))
	if err != nil {
		t.Fatal(err)
	}
	wantOrder := []string{topo.Topic + " main"}
	for _, d := range topo.Tiers {
		wantOrder = append(wantOrder, topo.TierTopic(d)+" tier")
	}
	wantOrder = append(wantOrder, topo.DLT()+" dlt")
	if fmt.Sprint(order) != fmt.Sprint(wantOrder) {
		t.Errorf("Kafka topics in the order\n%v\nwant\n%v", order, wantOrder)
	}
	if d := br.textNow(t, row(topo.TierTopic(10*time.Millisecond))+` td.delay`); d != "10ms" {
		t.Errorf("delay of the first tier: %q, want 10ms", d)
	}
	// Exactly-once: each retry and the dead letter came with their
	// transaction's marker, an offset that is no record. The tiers show
	// offsets, named so; the DLT, its dead letters counted too.
	if n := br.textNow(t, row(topo.TierTopic(10*time.Millisecond))+` td[data-offsets]`); n != "2" {
		t.Errorf("offsets of the 10ms tier: %q, want 2 (the first retry, its marker)", n)
	}
	if n := br.textNow(t, row(topo.TierTopic(10*time.Millisecond))+` td[data-records]`); n != "—" {
		t.Errorf("records of the 10ms tier: %q, want — (not counted)", n)
	}
	if n := br.textNow(t, row(topo.DLT())+` td[data-offsets]`); n != "2" {
		t.Errorf("offsets of the DLT: %q, want 2 (the dead letter, its marker)", n)
	}
	if n := br.textNow(t, row(topo.DLT())+` td[data-records]`); n != "1" {
		t.Errorf("dead letters of the DLT: %q, want 1", n)
	}
	if h := strings.ToLower(br.textNow(t, kt+` thead`)); !strings.Contains(h, "offsets") || !strings.Contains(h, "records") {
		t.Errorf("the table's heads: %q, want Offsets and Records", h)
	}
	if g := br.textNow(t, kt+` [data-stat="group"]`); g != k.group {
		t.Errorf("consumer group %q, want %s", g, k.group)
	}
	testwait.Watch(t, "the keeper to store every dead letter (unkept 0)", 10*time.Second, func() (bool, string) {
		u := br.textNow(t, kt+` [data-stat="unkept"]`)
		return u == "0", "unkept " + u
	})
	if kept := br.textNow(t, kt+` [data-kept="store"]`); !strings.Contains(kept, "in the store") || !strings.Contains(kept, "1 stored") {
		t.Errorf("where dead letters are kept: %q", kept)
	}
	if br.count(t, kt+` [data-kafka-error]`) != 0 {
		t.Errorf("an error line is shown: %q", br.textNow(t, kt+` [data-kafka-error]`))
	}

	// Following the link lists the dead letter among the dead jobs.
	br.runWithin(t, 5*time.Second, "dead letters of the topic",
		chromedp.Click(css(kt+` [data-kept="store"] a`)),
		chromedp.WaitVisible(css(`table.groups tbody tr`)))
	if g := br.textNow(t, `table.groups tbody tr`); !strings.Contains(g, topo.Topic+" / kafka") {
		t.Errorf("the dead letters of the topic: %q", g)
	}

	// The dead job's page shows the record: its binary value as a hex
	// dump, its key, its headers, its topic; the raw payload stays.
	br.runWithin(t, 5*time.Second, "dead job page",
		chromedp.Navigate(fmt.Sprintf("%s/#/jobs/%d", url, dead.ID)),
		chromedp.WaitVisible(css(`#record-value`)))
	br.noJunk(t, "dead kafka job page")
	dump := br.textNow(t, `#record-value`)
	if !strings.HasPrefix(dump, "00000000  00 01 fe ff 41 ") || !strings.HasSuffix(dump, " |....A|") || strings.Count(dump, "\n") != 0 {
		t.Errorf("hex dump %q, want one line: offset 00000000, bytes 00 01 fe ff 41, chars |....A|", dump)
	}
	for sel, want := range map[string]string{`#record-value-encoding`: "binary, 5 bytes", `#record-key-encoding`: "text, 5 bytes",
		`#record-key`: "doc-1", `#record-topic`: topo.Topic} {
		if got := br.textNow(t, sel); got != want {
			t.Errorf("%s: %q, want %q", sel, got, want)
		}
	}
	if hd := br.textNow(t, `#record-headers tr[data-header="tenant"]`); !strings.Contains(hd, "acme") {
		t.Errorf("the tenant header shows %q", hd)
	}
	if raw := br.textNow(t, `#payload`); !strings.Contains(raw, `"value_encoding": "base64"`) || !strings.Contains(raw, `"value": "AAH+/0E="`) {
		t.Errorf("raw payload: %q", raw)
	}

	// Redrive by the job page's button: the worker produces the record
	// back, and the consumer, succeeding now, completes it.
	fail.Store(false)
	br.runWithin(t, 10*time.Second, "redrive",
		chromedp.Click(css(`#redrive-job`)),
		chromedp.WaitVisible(css(`#confirm`)),
		chromedp.Click(css(`#confirm`)),
		chromedp.WaitEnabled(css(`#close`)))
	if p := br.text(t, `#progress-text`); !strings.Contains(p, "1 of 1 redriven") {
		t.Errorf("redrive progress says %q", p)
	}
	br.run(t, "close", chromedp.Click(css(`#close`)))
	testwait.Until(t, "the redriven record to reach the consumer", 20*time.Second, func() bool { return k.completed.Load() > 0 })
	testwait.Watch(t, "the redriven job to complete", 10*time.Second, func() (bool, string) {
		j, err := e.client.Get(context.Background(), dead.ID)
		if err != nil {
			t.Fatal(err)
		}
		return j.State == redrive.Completed, string(j.State)
	})

	// The timeline tells both lives: two retries and the death on Kafka,
	// the redrive, and the produce that completed it.
	br.runWithin(t, 10*time.Second, "completed job page",
		chromedp.Navigate(fmt.Sprintf("%s/#/jobs/%d", url, dead.ID)),
		chromedp.WaitVisible(css(`.timeline li[data-event="completed"]`)))
	br.noJunk(t, "redriven kafka job page")
	events, err := chromedp.Run(br.ctx, chromedp.Evaluate[[]string](
		`Array.from(document.querySelectorAll('.timeline li'), (li) => li.dataset.event)`))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"retry", "retry", "dead", "redriven", "completed"}; fmt.Sprint(events) != fmt.Sprint(want) {
		t.Errorf("timeline %v, want %v", events, want)
	}
	if c := br.textNow(t, `.timeline li[data-event="completed"]`); !strings.Contains(c, "produced to topic "+topo.Topic+" at partition 0 offset 1") {
		t.Errorf("the completing attempt shows %q, want the produce recorded", c)
	}
	br.checkClean(t, url)
}
