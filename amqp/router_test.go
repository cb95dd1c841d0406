package amqp_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/amqp"
	"github.com/redrivehq/redrive/internal/testwait"
	"github.com/redrivehq/redrive/retry"
)

// foreignConsumer consumes a managed queue with the broker's plain
// protocol, as a consumer in another language does: decide(id, n) says
// what to do with the n-th delivery of message id: "ack", "reject", or a
// failure class to report through the failure exchange.
func foreignConsumer(t *testing.T, c *amqp.Conn, queue, exchange string, decide func(id string, n int) (string, amqp091.Table)) *attempts {
	t.Helper()
	ch, err := c.Channel(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ch.Close() })
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	confirms := ch.NotifyPublish(make(chan amqp091.Confirmation, 1))
	deliveries, err := ch.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	seen := newAttempts()
	go func() {
		for d := range deliveries {
			n := seen.add(d.MessageId, time.Now())
			what, extra := decide(d.MessageId, n)
			switch what {
			case "ack":
				d.Ack(false)
				seen.decided(true)
			case "reject":
				d.Reject(false)
				seen.decided(false)
			default: // report: copy the headers, add the report, publish, ack
				h := amqp091.Table{}
				for k, v := range d.Headers {
					h[k] = v
				}
				h[amqp.HeaderClass] = what
				for k, v := range extra {
					h[k] = v
				}
				if err := ch.PublishWithContext(context.Background(), exchange, queue, false, false, amqp091.Publishing{
					Headers: h, MessageId: d.MessageId, ContentType: d.ContentType, Body: d.Body, DeliveryMode: 2}); err != nil {
					t.Errorf("report: %v", err)
					return
				}
				if cf := <-confirms; !cf.Ack {
					t.Errorf("report not confirmed")
				}
				d.Ack(false)
				seen.decided(false)
			}
		}
	}()
	return seen
}

// waitRouted waits until nothing more can come to a foreign consumer
// (seen) of r's one queue, after published messages: it decided every
// delivery; each failure reached the router, which decided it (retry or
// dead); each retry came back to the work queue and was delivered; and
// no queue of the topology but the DLQ holds a message.
func waitRouted(t *testing.T, c *amqp.Conn, r *amqp.Router, seen *attempts, published int) {
	t.Helper()
	topo := r.Topologies()[0]
	testwait.Watch(t, "every delivery decided, every failure routed, every retry delivered", 60*time.Second, func() (bool, string) {
		var st amqp.RouterStats
		for _, s := range r.Stats() {
			st = s
		}
		delivered, acks, failures := seen.counts()
		if delivered != acks+failures || st.Failures != int64(failures) || st.Retried+st.Dead != st.Failures ||
			st.Returned != st.Retried || int64(delivered) != int64(published)+st.Returned {
			return false, fmt.Sprintf("%d delivered, %d acked, %d failed; router %+v", delivered, acks, failures, st)
		}
		// And no message waits in a queue but the DLQ.
		depths, err := topo.Depths(context.Background(), c)
		if err != nil {
			return false, err.Error()
		}
		for _, d := range depths {
			if d.Role != "dlq" && d.Messages > 0 {
				return false, fmt.Sprintf("%d messages in %s", d.Messages, d.Name)
			}
		}
		return true, ""
	})
}

// TestRouter runs a managed queue with a consumer that is not redrive's:
// rejections are retried by the policy, never early; a permanent report
// is dead at once with its error; a rate-limited report waits its
// Retry-After; a report redrive cannot read is dead as undecodable; and
// every dead letter carries its history.
func TestRouter(t *testing.T) {
	t.Parallel()
	c := dial(t)
	q := newQueue(t, c)
	exchange := "redrive-test-failures-" + q
	t.Cleanup(func() {
		if ch, err := c.Channel(context.Background()); err == nil {
			ch.ExchangeDelete(exchange, false, false)
			ch.Close()
		}
	})
	p := retry.Policy{MaxRetries: 3, Initial: 20 * time.Millisecond, Multiplier: 2, MaxDelay: time.Second, Jitter: retry.JitterNone}
	r, err := amqp.NewRouter(c, amqp.RouterOptions{Queues: map[string]amqp.QueueOptions{q: {}}, FailureExchange: exchange,
		Executor: redrive.ExecutorOptions{Policy: &p, Logger: testLogger(t)}})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Declare(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("router.Run: %v", err)
		}
	})
	var mu sync.Mutex
	seen := foreignConsumer(t, c, q, exchange, func(id string, n int) (string, amqp091.Table) {
		mu.Lock()
		defer mu.Unlock()
		switch id {
		case "always":
			return "reject", nil
		case "once":
			if n == 1 {
				return "reject", nil
			}
		case "permanent":
			return "permanent", amqp091.Table{amqp.HeaderError: "invalid document", amqp.HeaderCause: "bad_input"}
		case "limited":
			if n == 1 {
				return "rate_limited", amqp091.Table{amqp.HeaderRetryAfter: "0.3"}
			}
		case "garbled":
			return "fatal", nil
		}
		return "ack", nil
	})
	for _, id := range []string{"always", "once", "permanent", "limited", "garbled", "fine"} {
		publishRaw(t, c, q, amqp091.Publishing{MessageId: id, ContentType: "text/plain", Body: []byte("body of " + id)})
	}
	topo := r.Topologies()[0]
	eventually(t, "three dead letters", 20*time.Second, func() bool { return depth(t, c, topo.DLQ()) == 3 })
	eventually(t, "the others acked", 20*time.Second, func() bool {
		return len(seen.of("once")) == 2 && len(seen.of("limited")) == 2 && len(seen.of("fine")) == 1
	})
	waitRouted(t, c, r, seen, 6)
	if n := len(seen.of("always")); n != 4 {
		t.Errorf("always rejected: %d deliveries, want 4 (3 retries)", n)
	}
	at := seen.of("always")
	for i, want := range []time.Duration{20 * time.Millisecond, 40 * time.Millisecond, 80 * time.Millisecond} {
		if i+1 < len(at) {
			if gap := at[i+1].Sub(at[i]); gap < want-2*time.Millisecond {
				t.Errorf("retry %d came %v after the delivery before, early for %v", i+1, gap, want)
			}
		}
	}
	if n := len(seen.of("permanent")); n != 1 {
		t.Errorf("permanent: %d deliveries, want 1", n)
	}
	if l := seen.of("limited"); len(l) == 2 && l[1].Sub(l[0]) < 300*time.Millisecond-2*time.Millisecond {
		t.Errorf("rate-limited retry came %v after, before its Retry-After of 300ms", l[1].Sub(l[0]))
	}
	dlq, err := amqp.NewDLQ(c, q)
	if err != nil {
		t.Fatal(err)
	}
	defer dlq.Close()
	dead, err := dlq.Peek(context.Background(), 10)
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]amqp.DeadLetter{}
	for _, d := range dead {
		byID[d.MessageID] = d
	}
	if d := byID["always"]; d.Reason != "retries_exhausted" || d.Attempts != 4 || len(d.History) != 4 || d.Cause != "rejected" {
		t.Errorf("always: reason %q attempts %d history %d cause %q, want retries_exhausted, 4, 4, rejected", d.Reason, d.Attempts, len(d.History), d.Cause)
	}
	if d := byID["permanent"]; d.Reason != "permanent" || d.Class != "permanent" || d.Error != "invalid document" || d.Cause != "bad_input" || d.Attempts != 1 {
		t.Errorf("permanent: %+v", d)
	}
	if d := byID["garbled"]; d.Reason != redrive.ReasonUndecodable {
		t.Errorf("garbled report: reason %q, want %q", d.Reason, redrive.ReasonUndecodable)
	}
	if d := byID["always"]; string(d.Body) != "body of always" || d.ContentType != "text/plain" {
		t.Errorf("dead letter body %q (%s), want the message's", d.Body, d.ContentType)
	}
	st := r.Stats()[q]
	if st.Failures != 8 || st.Reported != 2 || st.Dead != 3 || st.Retried != 5 || st.Undecodable != 1 {
		t.Errorf("stats %+v, want 8 failures (2 readable reports), 5 retried, 3 dead (1 undecodable)", st)
	}
}

// TestRouterClassicProfile is the classic profile on a managed queue:
// the default policy (3 retries, 1 s doubling, +-10% jitter); a message
// its consumer always rejects is delivered 4 times, 1, 2 and 4 s apart
// (+-10%, never early), then lands in <queue>-dlq.
func TestRouterClassicProfile(t *testing.T) {
	t.Parallel()
	c := dial(t)
	q := newQueue(t, c)
	exchange := "redrive-test-failures-" + q
	t.Cleanup(func() {
		if ch, err := c.Channel(context.Background()); err == nil {
			ch.ExchangeDelete(exchange, false, false)
			ch.Close()
		}
	})
	r, err := amqp.NewRouter(c, amqp.RouterOptions{Queues: map[string]amqp.QueueOptions{q: {}}, FailureExchange: exchange,
		Executor: redrive.ExecutorOptions{Logger: testLogger(t)}})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Declare(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("router.Run: %v", err)
		}
	})
	seen := foreignConsumer(t, c, q, exchange, func(string, int) (string, amqp091.Table) { return "reject", nil })
	publishRaw(t, c, q, amqp091.Publishing{MessageId: "scan-1", Body: []byte(`{"file":"a.pdf"}`)})
	topo := r.Topologies()[0]
	eventually(t, "the message in the DLQ", 20*time.Second, func() bool { return depth(t, c, topo.DLQ()) == 1 })
	waitRouted(t, c, r, seen, 1)
	at := seen.of("scan-1")
	if len(at) != 4 {
		t.Fatalf("%d deliveries, want 4", len(at))
	}
	for i, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} {
		gap := at[i+1].Sub(at[i])
		lo, hi := time.Duration(float64(want)*0.9), time.Duration(float64(want)*1.1)
		if gap < lo-2*time.Millisecond || gap > hi+time.Second {
			t.Errorf("retry %d came %v after the delivery before, want %v +-10%%", i+1, gap, want)
		}
	}
}
