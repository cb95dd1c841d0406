package amqp_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/amqp"
	"github.com/redrivehq/redrive/store"
)

// TestDLQOperations: count; peek without losing or reordering any
// message; redrive some back to the work queue with the attempt count
// reset and the history kept; refuse the ones marked not reprocessable;
// purge.
func TestDLQOperations(t *testing.T) {
	t.Parallel()
	c := dial(t)
	q := newQueue(t, c)
	topo := amqp.Topology{Queue: q, Tiers: []time.Duration{10 * time.Millisecond}}
	ch, err := c.Channel(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := topo.Declare(ch); err != nil {
		t.Fatal(err)
	}
	ch.Close()
	hist := `[{"kind":"retry","attempt":1,"at":"2026-01-01T00:00:00Z","class":"transient","error":"503"},` +
		`{"kind":"dead","attempt":2,"at":"2026-01-01T00:00:01Z","class":"transient","error":"503"}]`
	const total = 20
	for i := range total {
		h := amqp091.Table{amqp.HeaderAttempt: int64(2), amqp.HeaderHistory: hist, amqp.HeaderReason: "retries_exhausted",
			amqp.HeaderClass: "transient", amqp.HeaderError: "503", amqp.HeaderOrigin: q, amqp.HeaderDeadAt: int64(1767225601000),
			"x-app": "kept"}
		if i == 3 {
			h[amqp.HeaderNotReprocessable] = true
		}
		publishRaw(t, c, topo.DLQ(), amqp091.Publishing{Type: "scan", MessageId: strconv.Itoa(i), Body: []byte(fmt.Sprint(i)), Headers: h})
	}
	dlq, err := amqp.NewDLQ(c, q)
	if err != nil {
		t.Fatal(err)
	}
	defer dlq.Close()
	ctx := context.Background()
	if n, err := dlq.Count(ctx); err != nil || n != total {
		t.Fatalf("Count = %d, %v; want %d", n, err, total)
	}
	ids := func(dl []amqp.DeadLetter) string {
		s := ""
		for _, d := range dl {
			s += d.MessageID + ","
		}
		return s
	}
	first, err := dlq.Peek(ctx, 5)
	if err != nil || ids(first) != "0,1,2,3,4," {
		t.Fatalf("Peek(5) = %s, %v", ids(first), err)
	}
	d := first[0]
	if d.Reason != "retries_exhausted" || d.Class != "transient" || d.Attempts != 2 || len(d.History) != 2 || d.Origin != q ||
		d.Kind != "scan" || d.DeadAt.UnixMilli() != 1767225601000 {
		t.Errorf("dead letter %+v", d)
	}
	all, err := dlq.Peek(ctx, 100)
	want := ""
	for i := range total {
		want += strconv.Itoa(i) + ","
	}
	if err != nil || ids(all) != want {
		t.Fatalf("Peek(100) after Peek(5) = %s, %v; want every message in order", ids(all), err)
	}
	if n, _ := dlq.Count(ctx); n != total {
		t.Fatalf("Count after peeks = %d, want %d", n, total)
	}
	// Redrive 5: 0..4 except 3, refused, which stays, in place.
	var progress []int
	res, err := dlq.Redrive(ctx, amqp.RedriveOptions{Max: 6, Note: "fixed", Progress: func(n int) { progress = append(progress, n) }})
	if err != nil || res.Redriven != 5 || res.Refused != 1 || len(progress) != 5 {
		t.Fatalf("Redrive = %+v, %v (progress %v)", res, err, progress)
	}
	if n := depth(t, c, q); n != 5 {
		t.Fatalf("%d messages in the work queue, want 5", n)
	}
	rest, _ := dlq.Peek(ctx, 100)
	if got := ids(rest); got[:2] != "3," || len(rest) != total-5 {
		t.Errorf("after the redrive the DLQ holds %s", got)
	}
	ch, _ = c.Channel(ctx)
	defer ch.Close()
	m, ok, err := ch.Get(q, true)
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	if _, has := m.Headers[amqp.HeaderAttempt]; has {
		t.Errorf("a redriven message keeps its attempt count: %v", m.Headers)
	}
	for _, k := range []string{amqp.HeaderReason, amqp.HeaderClass, amqp.HeaderError, amqp.HeaderDeadAt, amqp.HeaderOrigin} {
		if _, has := m.Headers[k]; has {
			t.Errorf("a redriven message keeps %s", k)
		}
	}
	if m.Headers["x-app"] != "kept" || m.MessageId != "0" || string(m.Body) != "0" || m.Type != "scan" {
		t.Errorf("redriven message changed: %+v", m)
	}
	if m.Headers[amqp.HeaderRedriven] != int64(1) {
		t.Errorf("redriven count %v", m.Headers[amqp.HeaderRedriven])
	}
	var events []redrive.Event
	if s, ok := m.Headers[amqp.HeaderHistory].(string); !ok || jsonUnmarshal(s, &events) != nil || len(events) != 3 ||
		events[2].Kind != store.EventRedriven || events[2].Note != "fixed" {
		t.Errorf("history of the redriven message: %v", m.Headers[amqp.HeaderHistory])
	}
	// Redrive all: the remaining 14 go back, 3 is refused again.
	res, err = dlq.Redrive(ctx, amqp.RedriveOptions{Rate: -1})
	if err != nil || res.Redriven != total-6 || res.Refused != 1 {
		t.Fatalf("Redrive all = %+v, %v", res, err)
	}
	if n, _ := dlq.Count(ctx); n != 1 {
		t.Errorf("Count = %d after redriving all, want the refused one", n)
	}
	if n, err := dlq.Purge(ctx); err != nil || n != 1 {
		t.Errorf("Purge = %d, %v", n, err)
	}
	if n, _ := dlq.Count(ctx); n != 0 {
		t.Errorf("Count after purge = %d", n)
	}
	if _, err := dlq.Peek(ctx, 0); err == nil {
		t.Error("Peek(0) accepted")
	}
	missing, _ := amqp.NewDLQ(c, q+"-missing")
	defer missing.Close()
	if _, err := missing.Count(ctx); err == nil {
		t.Error("Count of a missing DLQ: no error")
	}
}

// TestRedrivenMessageRunsAgain: a message that died, once redriven, runs
// again from attempt 1 and its history shows both lives.
func TestRedrivenMessageRunsAgain(t *testing.T) {
	t.Parallel()
	c := dial(t)
	q := newQueue(t, c)
	cons, err := amqp.NewConsumer(c, amqp.ConsumerOptions{Queues: map[string]amqp.QueueOptions{q: {}},
		Executor: redrive.ExecutorOptions{Logger: testLogger(t)}})
	if err != nil {
		t.Fatal(err)
	}
	var fixed = make(chan struct{})
	done := make(chan *redrive.Job, 1)
	cons.HandleFunc("hook", func(ctx context.Context, j *redrive.Job) error {
		select {
		case <-fixed:
			done <- j
			return nil
		default:
			return redrive.Permanent(fmt.Errorf("404"))
		}
	})
	running(t, cons)
	pub, _ := amqp.NewPublisher(c, amqp.PublisherOptions{})
	if _, err := pub.Enqueue(context.Background(), "hook", map[string]int{"n": 1}, redrive.InQueue(q)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the message is dead", 10*time.Second, func() bool { return depth(t, c, q+"-dlq") == 1 })
	close(fixed)
	dlq, _ := amqp.NewDLQ(c, q)
	defer dlq.Close()
	if res, err := dlq.Redrive(context.Background(), amqp.RedriveOptions{Note: "endpoint fixed"}); err != nil || res.Redriven != 1 {
		t.Fatalf("Redrive = %+v, %v", res, err)
	}
	select {
	case j := <-done:
		if j.Attempt != 1 || j.Redriven != 1 || len(j.History) != 2 || j.History[0].Kind != store.EventDead ||
			j.History[1].Kind != store.EventRedriven {
			t.Errorf("redriven job: attempt %d, redriven %d, history %+v", j.Attempt, j.Redriven, j.History)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the redriven message never ran")
	}
}
