package kafka

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
)

// TestReadAheadWaitsBeforePausing: a partition whose read-ahead reaches
// its bound is not paused when its handlers drain it to half within the
// grace (kgo would drop what it holds for it and refetch it after the
// fetch in flight), and is paused when they do not.
func TestReadAheadWaitsBeforePausing(t *testing.T) {
	for _, drains := range []bool{true, false} {
		t.Run(map[bool]string{true: "drains", false: "slow"}[drains], func(t *testing.T) {
			gate, started := make(chan struct{}), make(chan struct{}, 100)
			p, rs := benchPartition(t, func(ctx context.Context, _ *redrive.Job) error {
				started <- struct{}{}
				select {
				case <-gate:
				case <-ctx.Done():
				}
				return nil
			})
			p.c.opts.MaxReadAhead = 4
			if drains {
				p.c.readAheadGrace = time.Hour // the drain, not the grace, ends the wait
			} else {
				p.c.readAheadGrace = time.Millisecond
			}
			var open sync.Once
			release := func() { open.Do(func() { close(gate) }) }
			go p.run()
			defer func() { p.stop(); release(); <-p.done }()
			pushed := make(chan struct{})
			go func() { p.push(context.Background(), rs[:8]); close(pushed) }()
			<-started // the first record runs: 7 left, over the bound
			if drains {
				release()
			}
			select {
			case <-pushed:
			case <-time.After(time.Minute): // liveness bound only
				t.Fatal("push still waiting")
			}
			p.mu.Lock()
			pauses, paused := p.pauses, p.paused
			p.mu.Unlock()
			switch {
			case drains && pauses != 0:
				t.Errorf("a partition that drained within the grace was paused %d times", pauses)
			case !drains && (pauses != 1 || !paused):
				t.Errorf("a partition that did not drain: paused %d times, paused now %v; want paused once", pauses, paused)
			}
		})
	}
}

// TestReadAheadWaitingTierNotAwaited: a partition whose head record waits
// for its due time (fetching paused) cannot drain: a push over its bound
// does not hold the poll loop for the grace.
func TestReadAheadWaitingTierNotAwaited(t *testing.T) {
	p, rs := benchPartition(t, func(context.Context, *redrive.Job) error { return nil })
	p.c.opts.MaxReadAhead = 4
	p.c.readAheadGrace = time.Hour
	p.mu.Lock()
	p.waiting = true // as wait sets it
	p.pauseLocked()
	p.mu.Unlock()
	pushed := make(chan struct{})
	go func() { p.push(context.Background(), rs[:8]); close(pushed) }()
	select {
	case <-pushed:
	case <-time.After(time.Minute): // liveness bound only
		t.Fatal("push waited for a partition that cannot drain")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.full || !p.paused {
		t.Errorf("full %v, paused %v; want both", p.full, p.paused)
	}
}
