package redrive

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/redrivehq/redrive/internal/sqlitetest"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/sqlite"
)

// loopLiveness bounds every wait of the loops' tests for a round of
// work: reaching it is a failure (the round never came), not a timing.
const loopLiveness = 30 * time.Second

// loopWorker is a worker on a new SQLite store whose clock is clk, not
// running: a loop's test starts the loop it tests alone, with a test
// signal, and drives it by the clock and by the store.
func loopWorker(t *testing.T, clk *fakeClock, opts WorkerOptions) (*Worker, *Client, store.Store) {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := sqlite.Open(t.Context(), sqlitetest.Path(t), sqlite.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	c := NewClient(st, ClientOptions{Logger: quiet})
	c.setClock(clk.now)
	if opts.Queues == nil {
		opts.Queues = map[string]int{"q": 1}
	}
	opts.Logger = quiet
	w := NewWorker(c, opts)
	w.leading = func() bool { return true }
	w.hardCtx, w.hardCancel = context.WithCancelCause(context.Background())
	t.Cleanup(func() { w.hardCancel(nil) })
	return w, c, st
}

// startLoop starts l with a test signal by start, and stops it when the
// test ends.
func startLoop(t *testing.T, l *loop, start func(ctx context.Context)) testSignal {
	t.Helper()
	l.signal = newTestSignal()
	start(t.Context())
	if !l.running() {
		t.Fatal("the loop does not run after its start")
	}
	t.Cleanup(l.stop)
	return l.signal
}

// lease leases the due job of queue q for worker, until now+d.
func lease(t *testing.T, st store.Store, clk *fakeClock, q, worker string, d time.Duration) *Job {
	t.Helper()
	now := clk.now()
	jobs, err := st.Fetch(t.Context(), store.FetchParams{Queue: q, Limit: 1, Now: now, LeaseUntil: now.Add(d), Worker: worker})
	if err != nil || len(jobs) != 1 {
		t.Fatalf("fetch: %d jobs, %v", len(jobs), err)
	}
	return jobs[0]
}

// TestLoopStopsOnce: a loop started runs until stopped, is stopped once,
// and starting it again does not run it again (a Worker runs once).
func TestLoopStopsOnce(t *testing.T) {
	var l loop
	rounds := make(chan struct{}, 2)
	body := func(ctx context.Context) {
		rounds <- struct{}{}
		<-ctx.Done()
	}
	l.startWith(t.Context(), body)
	l.startWith(t.Context(), body)
	<-rounds
	l.stop()
	if l.running() {
		t.Fatal("running after stop")
	}
	if len(rounds) != 0 {
		t.Fatal("the loop ran twice")
	}
	l.stop() // again: nothing to do
	var never loop
	never.stop() // not started: returns at once
}

// waitRounds waits, round after round of a loop (its test signal s),
// until cond holds, and fails the test, saying what it waited for, if
// no round comes or cond does not hold within loopLiveness.
func waitRounds(t *testing.T, s testSignal, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(loopLiveness)
	for !cond() {
		if time.Now().After(deadline) || !s.wait(time.Until(deadline)) {
			t.Fatalf("timed out after %v waiting for %s", loopLiveness, what)
		}
	}
}
