package amqp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/amqp"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/sqlite"
)

// TestKeeperAndRedrive: dead letters become dead jobs in a store, acked
// only once stored (a store that fails loses nothing), kept once when
// delivered twice, bodies byte-exact; redriving one makes the store's
// worker publish it back to its queue, byte-exact, with its history and
// no attempt count.
func TestKeeperAndRedrive(t *testing.T) {
	t.Parallel()
	c := dial(t)
	q := newQueue(t, c)
	topo := amqp.Topology{Queue: q}
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "redrive.db"), sqlite.Options{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	client := redrive.NewClient(st, redrive.ClientOptions{Logger: quiet()})
	var failing atomic.Bool
	failing.Store(true)
	var calls atomic.Int64
	add := func(ctx context.Context, jobs []store.DeadJob) ([]*store.Job, error) {
		calls.Add(1)
		if failing.Load() {
			return nil, errors.New("disk unplugged")
		}
		return client.AddDead(ctx, jobs)
	}
	k, err := amqp.NewKeeper(c, amqp.KeeperOptions{Topologies: []amqp.Topology{topo}, Add: add, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ch, err := c.Channel(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := topo.Declare(ch); err != nil {
		t.Fatal(err)
	}
	ch.Close()
	binary := []byte{0, 0xff, 0x10, 0x80, 'A'}
	hist, _ := json.Marshal([]redrive.Event{{Kind: "retry", Attempt: 1, At: time.UnixMilli(1700000000000), Class: "transient", Error: "boom"},
		{Kind: "dead", Attempt: 2, At: time.UnixMilli(1700000001000), Class: "transient", Error: "boom"}})
	dead := amqp091.Publishing{MessageId: "m-1", ContentType: "application/octet-stream", Body: binary, Type: "scan",
		Headers: amqp091.Table{amqp.HeaderReason: "retries_exhausted", amqp.HeaderClass: "transient", amqp.HeaderError: "boom",
			amqp.HeaderAttempt: int64(2), amqp.HeaderHistory: string(hist), amqp.HeaderDeadAt: int64(1700000001000),
			amqp.HeaderOrigin: q, "tenant": "acme"}}
	publishRaw(t, c, topo.DLQ(), dead)
	publishRaw(t, c, topo.DLQ(), dead) // delivered twice: kept once
	// Rejected straight into the DLQ by the broker: no redrive headers.
	publishRaw(t, c, topo.DLQ(), amqp091.Publishing{MessageId: "m-2", Body: []byte(`{"doc":2}`)})

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- k.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("keeper.Run: %v", err)
		}
	})
	eventually(t, "the keeper tried the store", 10*time.Second, func() bool { return calls.Load() >= 3 })
	if n := depth(t, c, topo.DLQ()); n+int(k.Stats()[q].StoreFailures) < 3 {
		// the messages are back in the DLQ or being retried: none acked
		t.Logf("DLQ depth %d while the store fails", n)
	}
	if s := k.Stats()[q]; s.Kept != 0 {
		t.Fatalf("kept %d while the store fails", s.Kept)
	}
	failing.Store(false)
	eventually(t, "all three handled", 20*time.Second, func() bool {
		s := k.Stats()[q]
		return s.Kept == 2 && s.Duplicates == 1
	})
	eventually(t, "the DLQ empty", 10*time.Second, func() bool { return depth(t, c, topo.DLQ()) == 0 })
	res, err := client.List(context.Background(), redrive.Filter{States: []redrive.State{redrive.Dead}, Queue: q}, redrive.Page{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Jobs) != 2 {
		t.Fatalf("%d dead jobs, want 2", len(res.Jobs))
	}
	var job1 *redrive.Job
	for _, j := range res.Jobs {
		full, err := client.Get(context.Background(), j.ID)
		if err != nil {
			t.Fatal(err)
		}
		var m amqp.Message
		if err := json.Unmarshal(full.Payload, &m); err != nil {
			t.Fatal(err)
		}
		switch m.MessageID {
		case "m-1":
			job1 = full
			if !bytes.Equal(m.Body, binary) || m.BodyEncoding != amqp.BodyBase64 || m.Type != "scan" || m.Headers["tenant"] != "acme" {
				t.Errorf("m-1 stored as %+v", m)
			}
			if full.Kind != amqp.Kind || full.Attempt != 2 || full.DeadReason != "retries_exhausted" || full.LastError != "boom" ||
				len(full.History) != 2 || full.Fingerprint == "" {
				t.Errorf("m-1: kind %s attempt %d reason %s error %s history %d fingerprint %q", full.Kind, full.Attempt, full.DeadReason,
					full.LastError, len(full.History), full.Fingerprint)
			}
		case "m-2":
			if full.DeadReason != "dead_lettered" || len(full.History) != 1 || full.History[0].Kind != "dead" || string(m.Body) != `{"doc":2}` {
				t.Errorf("m-2 (dead-lettered by the broker): reason %q history %+v body %s", full.DeadReason, full.History, m.Body)
			}
		default:
			t.Errorf("unexpected dead job %s", m.MessageID)
		}
	}
	if job1 == nil {
		t.Fatal("m-1 not stored")
	}

	// Redrive m-1: the store's worker publishes it back to q.
	pub, err := amqp.NewPublisher(c, amqp.PublisherOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	w := redrive.NewWorker(client, redrive.WorkerOptions{Queues: map[string]int{q: 2}, Logger: testLogger(t)})
	amqp.RegisterKind(w, pub, amqp.KindOptions{Get: client.Get, Queues: []string{q}})
	// The kind publishes to the allowed queues only: anything else is
	// refused at enqueue, naming the field.
	_, err = client.Enqueue(context.Background(), amqp.Kind, json.RawMessage(`{"queue":"elsewhere","body":"x"}`), redrive.InQueue(q))
	var fe *redrive.FieldError
	if !errors.Is(err, redrive.ErrInvalid) || !errors.As(err, &fe) || fe.Field != "payload.queue" {
		t.Errorf("enqueue to a queue not allowed: %v, want ErrInvalid on payload.queue", err)
	}
	if _, err = client.Enqueue(context.Background(), amqp.Kind, json.RawMessage(`{"body":"x"}`)); !errors.Is(err, redrive.ErrInvalid) {
		t.Errorf("enqueue of a message without a queue: %v, want ErrInvalid", err)
	}
	wctx, wcancel := context.WithCancel(context.Background())
	wdone := make(chan error, 1)
	go func() { wdone <- w.Run(wctx) }()
	defer func() { wcancel(); <-wdone }()
	if _, err := client.Redrive(context.Background(), redrive.RedriveRequest{IDs: []int64{job1.ID}, Note: "scanner fixed"}); err != nil {
		t.Fatal(err)
	}
	ch, err = c.Channel(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	var got amqp091.Delivery
	eventually(t, "the message back in its queue", 10*time.Second, func() bool {
		d, ok, err := ch.Get(q, true)
		if err != nil {
			t.Fatal(err)
		}
		got = d
		return ok
	})
	if !bytes.Equal(got.Body, binary) || got.MessageId != "m-1" || got.Type != "scan" || got.ContentType != "application/octet-stream" ||
		got.Headers["tenant"] != "acme" {
		t.Errorf("published back: body %x id %s type %s content type %s headers %v", got.Body, got.MessageId, got.Type, got.ContentType, got.Headers)
	}
	if _, ok := got.Headers[amqp.HeaderAttempt]; ok {
		t.Errorf("published back with an attempt count: %v", got.Headers[amqp.HeaderAttempt])
	}
	if r, _ := got.Headers[amqp.HeaderRedriven].(int64); r != 1 {
		t.Errorf("x-redrive-redriven %v, want 1", got.Headers[amqp.HeaderRedriven])
	}
	var h []redrive.Event
	if err := json.Unmarshal([]byte(got.Headers[amqp.HeaderHistory].(string)), &h); err != nil || len(h) != 3 || h[2].Kind != "redriven" || h[2].Note != "scanner fixed" {
		t.Errorf("history published back: %v %+v, want the two events and the redrive", err, h)
	}
	eventually(t, "the job completed", 10*time.Second, func() bool {
		j, err := client.Get(context.Background(), job1.ID)
		return err == nil && j.State == redrive.Completed
	})
	j, _ := client.Get(context.Background(), job1.ID)
	if last := j.History[len(j.History)-1]; last.Kind != "completed" || last.Reason != "published" {
		t.Errorf("last event %+v, want completed/published", last)
	}
}

// TestDeadJobOfNoIDStable: a dead message with no message id, no
// x-redrive-dead-at and no x-death gets the same idempotency key however
// late it is read, so a redelivery is kept once. (The key's digest took
// the time of reading.)
func TestDeadJobOfNoIDStable(t *testing.T) {
	d := &amqp091.Delivery{Body: []byte(`{"a":1}`), Timestamp: time.UnixMilli(1700000000000)}
	a, err := amqp.DeadJobOf(d, "q", "local", time.UnixMilli(1700000001000))
	if err != nil {
		t.Fatal(err)
	}
	b, err := amqp.DeadJobOf(d, "q", "local", time.UnixMilli(1700000099000))
	if err != nil {
		t.Fatal(err)
	}
	if a.IdempotencyKey != b.IdempotencyKey {
		t.Errorf("keys %q and %q for one message read twice", a.IdempotencyKey, b.IdempotencyKey)
	}
	d2 := &amqp091.Delivery{Body: []byte(`{"a":2}`), Timestamp: d.Timestamp}
	if c, _ := amqp.DeadJobOf(d2, "q", "local", time.UnixMilli(1700000001000)); c.IdempotencyKey == a.IdempotencyKey {
		t.Errorf("two messages share the key %q", a.IdempotencyKey)
	}
}

// TestRedriveUnroutableIsPermanent: a stored message redriven to a queue
// that does not exist on the broker (allowed, but deleted) is dead at its
// first attempt, permanent, cause amqp_unroutable. (The publisher retried
// the returned message for 31 s, the kind's 30 s timeout ended it first,
// and the attempt ended transient, cause amqp_publish.)
func TestRedriveUnroutableIsPermanent(t *testing.T) {
	t.Parallel()
	c := dial(t)
	gone := newQueue(t, c) // never declared
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "redrive.db"), sqlite.Options{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	client := redrive.NewClient(st, redrive.ClientOptions{Logger: quiet()})
	pub, err := amqp.NewPublisher(c, amqp.PublisherOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	w := redrive.NewWorker(client, redrive.WorkerOptions{Queues: map[string]int{"redrives": 1}, Logger: testLogger(t)})
	amqp.RegisterKind(w, pub, amqp.KindOptions{Get: client.Get, Queues: []string{gone}})
	j, err := client.Enqueue(context.Background(), amqp.Kind, json.RawMessage(`{"queue":"`+gone+`","body":"x"}`),
		redrive.InQueue("redrives"))
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithCancel(context.Background())
	wdone := make(chan error, 1)
	go func() { wdone <- w.Run(wctx) }()
	defer func() { wcancel(); <-wdone }()
	var got *redrive.Job
	eventually(t, "the first attempt ended", 90*time.Second, func() bool {
		got, err = client.Get(context.Background(), j.ID)
		return err == nil && len(got.History) > 0
	})
	last := got.History[len(got.History)-1]
	if got.State != redrive.Dead || last.Class != "permanent" || last.Reason != "amqp_unroutable" {
		t.Errorf("after its first attempt: state %s, last event %+v; want dead, permanent, amqp_unroutable", got.State, last)
	}
}
