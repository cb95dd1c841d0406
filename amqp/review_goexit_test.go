package amqp_test

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/amqp"
	"github.com/redrivehq/redrive/retry"
)

// TestHandlerGoexitRetries: a handler that calls runtime.Goexit (as
// t.FailNow does) fails its attempt as a panic would: the message is
// retried with its attempt counted, not left unacknowledged on the
// channel holding a prefetch slot.
func TestHandlerGoexitRetries(t *testing.T) {
	t.Parallel()
	c := dial(t)
	q := newQueue(t, c)
	p := retry.Policy{MaxRetries: 3, Initial: 10 * time.Millisecond, Multiplier: 2, MaxDelay: 100 * time.Millisecond}
	cons, err := amqp.NewConsumer(c, amqp.ConsumerOptions{Queues: map[string]amqp.QueueOptions{q: {}},
		Executor: redrive.ExecutorOptions{Policy: &p, Logger: testLogger(t)}})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	got := make(chan *redrive.Job, 1)
	cons.HandleFunc("goexit", func(ctx context.Context, j *redrive.Job) error {
		if runs.Add(1) == 1 {
			runtime.Goexit()
		}
		got <- j
		return nil
	})
	running(t, cons)
	publishRaw(t, c, q, amqp091.Publishing{Type: "goexit", Body: []byte(`{}`)})
	select {
	case j := <-got:
		if j.Attempt != 2 {
			t.Errorf("second run is attempt %d, want 2: the Goexit used an attempt", j.Attempt)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("the message never ran again after the handler's Goexit (runs %d, stats %+v)", runs.Load(), cons.Stats())
	}
}
