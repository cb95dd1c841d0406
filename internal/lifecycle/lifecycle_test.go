package lifecycle

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// liveness bounds every wait of these tests: reaching it is a failure,
// not a timing.
const liveness = 10 * time.Second

// run is one started run of the model test: it ends when told to
// (ret), or when its context ends if it obeys cancellation.
type run struct {
	ret   chan struct{}
	obeys bool
	cause atomic.Value // of its context when it ended by it
	ended chan struct{}
}

func expired() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

func bounded(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), liveness)
	t.Cleanup(cancel)
	return ctx
}

// TestOnceModel drives a Once through random interleavings of Start,
// Stop (with a generous or an expired deadline), the run returning on
// its own, its parent context ending, Wait and Running, and checks every
// answer against a model of the contract: one Start wins, Stop ends a run
// that obeys its context and reports the deadline of one that does not,
// Running is true exactly between Start and the end of the run.
func TestOnceModel(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	for iter := range 300 {
		var o Once
		model := Idle
		var cur *run
		parent, cancelParent := context.WithCancel(context.Background())
		stopped := false        // Stop was called on the current run
		parentCanceled := false // a run started after it ends at once when it obeys
		// waitEnd waits for the run's end as the Once sees it.
		waitEnd := func(why string) {
			t.Helper()
			select {
			case <-o.Done():
			case <-time.After(liveness):
				t.Fatalf("iter %d: %s: the run did not end", iter, why)
			}
			model = Done
		}
		for step := range 12 {
			switch op := rng.IntN(6); op {
			case 0: // Start
				r := &run{ret: make(chan struct{}), obeys: rng.IntN(2) == 0, ended: make(chan struct{})}
				err := o.Go(parent, func(ctx context.Context) {
					defer close(r.ended)
					if r.obeys {
						select {
						case <-r.ret:
						case <-ctx.Done():
							r.cause.Store(context.Cause(ctx))
						}
						return
					}
					<-r.ret
				})
				if model == Idle {
					if err != nil {
						t.Fatalf("iter %d step %d: first Start: %v", iter, step, err)
					}
					model, cur = Running, r
					if parentCanceled && r.obeys {
						waitEnd("started canceled")
					}
				} else if !errors.Is(err, ErrAlreadyRunning) {
					t.Fatalf("iter %d step %d: Start in state %v: got %v, want ErrAlreadyRunning", iter, step, model, err)
				}
			case 1: // Stop, generous deadline: only a run ignoring cancellation outlives it (not tried here)
				if model == Running && !cur.obeys {
					continue
				}
				err := o.Stop(bounded(t))
				if err != nil {
					t.Fatalf("iter %d step %d: Stop in state %v: %v", iter, step, model, err)
				}
				if model == Running {
					stopped = true
					model = Done
					<-cur.ended
					if c, _ := cur.cause.Load().(error); !errors.Is(c, ErrStopped) && !parentCanceled {
						t.Fatalf("iter %d step %d: run ended by Stop with cause %v, want ErrStopped", iter, step, c)
					}
				}
			case 2: // Stop, deadline already passed
				err := o.Stop(expired())
				switch {
				case model == Idle || model == Done:
					if err != nil {
						t.Fatalf("iter %d step %d: Stop in state %v: %v", iter, step, model, err)
					}
				case !cur.obeys:
					if !errors.Is(err, context.Canceled) {
						t.Fatalf("iter %d step %d: Stop of a run ignoring it: got %v, want the deadline's error", iter, step, err)
					}
					stopped = true
				default:
					// The run obeys but may not have seen it yet: either answer.
					stopped = true
					waitEnd("Stop")
				}
			case 3: // the run returns on its own
				if model != Running {
					continue
				}
				close(cur.ret)
				waitEnd("return")
			case 4: // the parent context ends
				cancelParent()
				parentCanceled = true
				if model == Running && cur.obeys {
					waitEnd("parent canceled")
					if c, _ := cur.cause.Load().(error); c != nil && !stopped && !errors.Is(c, context.Canceled) {
						t.Fatalf("iter %d step %d: cause %v, want the parent's", iter, step, c)
					}
				}
			case 5: // Wait with an expired deadline, Running
				err := o.Wait(expired())
				if (err == nil) != (model == Done) {
					t.Fatalf("iter %d step %d: Wait in state %v: %v", iter, step, model, err)
				}
			}
			if got := o.State(); got != model {
				t.Fatalf("iter %d step %d: state %v, model %v", iter, step, got, model)
			}
			if o.Running() != (model == Running) {
				t.Fatalf("iter %d step %d: Running %v in state %v", iter, step, o.Running(), model)
			}
		}
		if cur != nil && model == Running {
			close(cur.ret)
			waitEnd("cleanup")
		}
		cancelParent()
	}
}

// TestOnceConcurrentStart has many goroutines start, stop, wait and ask
// at once: exactly one Start wins, and every Stop returns once the run
// ended.
func TestOnceConcurrentStart(t *testing.T) {
	for range 50 {
		var o Once
		var wins atomic.Int32
		var runs atomic.Int32
		var wg sync.WaitGroup
		for i := range 16 {
			wg.Go(func() {
				switch i % 4 {
				case 0, 1:
					err := o.Go(context.Background(), func(ctx context.Context) {
						runs.Add(1)
						<-ctx.Done()
					})
					if err == nil {
						wins.Add(1)
					} else if !errors.Is(err, ErrAlreadyRunning) {
						t.Errorf("Start: %v", err)
					}
				case 2:
					if err := o.Stop(bounded(t)); err != nil {
						t.Errorf("Stop: %v", err)
					}
				case 3:
					_ = o.Running()
				}
			})
		}
		wg.Wait()
		if wins.Load() != 1 {
			t.Fatalf("%d Starts won, want 1", wins.Load())
		}
		if err := o.Stop(bounded(t)); err != nil {
			t.Fatal(err)
		}
		if err := o.Wait(bounded(t)); err != nil {
			t.Fatal(err)
		}
		if runs.Load() != 1 || o.Running() {
			t.Fatalf("runs %d, running %v", runs.Load(), o.Running())
		}
	}
}

// TestDrain: a run that ends within the grace is not told to stop; one
// that does not is, and is waited for (within a bound when given).
func TestDrain(t *testing.T) {
	done := make(chan struct{})
	close(done)
	if !Drain(done, liveness, func() { t.Fatal("expired a drained run") }, 0) {
		t.Fatal("drained run not reported")
	}
	// A grace of zero passes at once: expire runs, and the run ends.
	done = make(chan struct{})
	if !Drain(done, 0, func() { close(done) }, 0) {
		t.Fatal("a run ended by expire not reported")
	}
	// A run that ignores expire: the bound ends the wait.
	var expiredN atomic.Int32
	if Drain(make(chan struct{}), 0, func() { expiredN.Add(1) }, time.Nanosecond) {
		t.Fatal("a run that never ends reported as drained")
	}
	if expiredN.Load() != 1 {
		t.Fatalf("expire called %d times", expiredN.Load())
	}
}

func TestWaitGroupDone(t *testing.T) {
	var wg sync.WaitGroup
	release := make(chan struct{})
	wg.Go(func() { <-release })
	c := WaitGroupDone(&wg)
	select {
	case <-c:
		t.Fatal("closed while the group runs")
	default:
	}
	close(release)
	select {
	case <-c:
	case <-time.After(liveness):
		t.Fatal("not closed")
	}
}

// TestDrainEndedRunWins: a run that has already ended is never told to
// stop, even with no grace (a ShutdownTimeout of zero): which of two
// ready select cases is taken is random, and expire canceled the
// handlers of a run that had ended about half the time.
func TestDrainEndedRunWins(t *testing.T) {
	done := make(chan struct{})
	close(done)
	for range 200 {
		if !Drain(done, 0, func() { t.Fatal("expired a run that had ended") }, 0) {
			t.Fatal("an ended run not reported as drained")
		}
	}
}
