package redrive

import (
	"context"
	"testing"
	"time"

	"github.com/redrivehq/redrive/store"
)

// notices is a store.Notifier whose notices a test sends.
type notices chan string

func (n notices) Listen(ctx context.Context, notify func(queue string)) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case q := <-n:
			notify(q)
		}
	}
}

// TestListenerWakesAndAsks: a notice of a queue wakes that queue's
// fetcher only; a cancellation notice asks for a heartbeat; a notice
// with no queue does both.
func TestListenerWakesAndAsks(t *testing.T) {
	clk := clockAt(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))
	w, _, _ := loopWorker(t, clk, WorkerOptions{Queues: map[string]int{"a": 1, "b": 1}})
	n := make(notices)
	sig := startLoop(t, &w.listener.loop, func(ctx context.Context) { w.listener.start(ctx, n) })
	woken := func(i int) bool {
		select {
		case <-w.queues[i].wakeC:
			return true
		default:
			return false
		}
	}
	asked := func() bool {
		select {
		case <-w.heartbeater.asked:
			return true
		default:
			return false
		}
	}
	for _, c := range []struct {
		notice     string
		a, b, beat bool
	}{{"a", true, false, false}, {"b", false, true, false}, {store.CancelNotice, false, false, true}, {"", true, true, true}} {
		n <- c.notice
		if !sig.wait(loopLiveness) {
			t.Fatal("notice not handled")
		}
		if a, b, beat := woken(0), woken(1), asked(); a != c.a || b != c.b || beat != c.beat {
			t.Fatalf("notice %q: woke a %v b %v, asked a heartbeat %v; want %v %v %v", c.notice, a, b, beat, c.a, c.b, c.beat)
		}
	}
}
