package redrive

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redrivehq/redrive/internal/sqlitetest"
	"github.com/redrivehq/redrive/internal/testwait"
	"github.com/redrivehq/redrive/retry"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/sqlite"
)

// boundCheck reports a violation of the completer's bound, seen from
// inside a Finish call (the completer's lock is free then): the batch
// being written and the outcomes pending together within the bound (but
// at Run's drain, which takes the line whole), the batch being the one
// the completer says it writes.
func boundCheck(c *completer, outs []store.Outcome) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.writing) != len(outs) {
		return fmt.Errorf("Finish of %d outcomes while the completer writes %d", len(outs), len(c.writing))
	}
	if n := len(c.pending) + len(c.writing); n > c.max && !c.stopping.Load() {
		return fmt.Errorf("%d outcomes pending and being written, bound %d", n, c.max)
	}
	return nil
}

// gatedFinish is a store whose Finish calls each wait for a token on
// gate (when not nil), after sending on entered, and check the bound.
type gatedFinish struct {
	store.Store
	c       *completer
	gate    chan struct{}
	entered chan int // the size of each batch, as its Finish begins
	errs    chan error
}

func (s *gatedFinish) Finish(ctx context.Context, outs []store.Outcome) ([]bool, error) {
	if err := boundCheck(s.c, outs); err != nil {
		select {
		case s.errs <- err:
		default:
		}
	}
	if s.entered != nil {
		s.entered <- len(outs)
	}
	if s.gate != nil {
		<-s.gate
	}
	return s.Store.Finish(ctx, outs)
}

// gatedCompleter sets up the completer tests: a worker whose completer
// is bounded at 2, on a gatedFinish store, with n jobs leased and their
// outcomes made, the completer's loop started, and a first batch of one
// outcome (outs[0]) in its gated Finish. The test closes the gate when
// it ends, before the loop stops.
func gatedCompleter(t *testing.T, n int) (w *Worker, c *Client, gs *gatedFinish, jobs []*Job, outs []store.Outcome) {
	t.Helper()
	clk := clockAt(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))
	w, c, st := loopWorker(t, clk, WorkerOptions{})
	w.completer.max = 2
	gs = &gatedFinish{Store: st, c: w.completer, gate: make(chan struct{}), entered: make(chan int, 64), errs: make(chan error, 1)}
	w.store = gs
	w.HandleFunc("k", func(context.Context, *Job) error { return nil })
	ctx := t.Context()
	for range n {
		if _, err := c.Enqueue(ctx, "k", nil, InQueue("q")); err != nil {
			t.Fatal(err)
		}
	}
	jobs = make([]*Job, n)
	outs = make([]store.Outcome, n)
	for i := range jobs {
		jobs[i] = lease(t, st, clk, "q", w.id, time.Minute)
		outs[i] = w.exec.Execute(ctx, jobs[i])
	}
	startLoop(t, &w.completer.loop, w.completer.start)
	t.Cleanup(func() { close(gs.gate) }) // before the loop stops: a failed test's writes go through
	w.completer.submit(w.queues[0], outs[0])
	if got := testwait.Recv(t, "the first batch's Finish", loopLiveness, gs.entered); got != 1 {
		t.Fatalf("first batch of %d outcomes, want 1", got)
	}
	return w, c, gs, jobs, outs
}

// TestCompleterBoundHoldsSubmitters: with the bound reached, an outcome
// submitted waits in line, and so does its submitter, until a batch is
// written; the line joins the pending outcomes in order, as far as the
// bound allows. Meanwhile the waiting outcomes' leases are among the
// unsettled ones (the heartbeats extend them).
func TestCompleterBoundHoldsSubmitters(t *testing.T) {
	const n = 5
	w, c, gs, jobs, outs := gatedCompleter(t, n)
	ctx := t.Context()
	// Below the bound, a submit returned at once (gatedCompleter).
	q := w.queues[0]
	w.completer.submit(q, outs[1]) // pending 1, writing 1: the bound
	returned := make([]chan struct{}, n)
	for i := 2; i < n; i++ {
		returned[i] = make(chan struct{})
		go func() {
			w.completer.submit(q, outs[i])
			close(returned[i])
		}()
		// One at a time, so that the line's order is known.
		testwait.Until(t, fmt.Sprint("outcome ", i, " in line"), loopLiveness, func() bool {
			w.completer.mu.Lock()
			defer w.completer.mu.Unlock()
			return len(w.completer.waiting) == i-1
		})
	}
	isDone := func(i int) bool {
		select {
		case <-returned[i]:
			return true
		default:
			return false
		}
	}
	for i := 2; i < n; i++ {
		if isDone(i) {
			t.Fatalf("submit of outcome %d returned with the bound reached", i)
		}
	}
	unsettled := w.completer.unsettled()
	for _, j := range jobs {
		if !slices.Contains(unsettled, store.LeaseOf(j)) {
			t.Fatalf("job %d's lease is not unsettled while its outcome waits: %v", j.ID, unsettled)
		}
	}
	// The first batch written: outcome 2 joins 1 (the bound), 3 and 4
	// wait on.
	gs.gate <- struct{}{}
	if got := testwait.Recv(t, "the second batch's Finish", loopLiveness, gs.entered); got != 2 {
		t.Fatalf("second batch of %d outcomes, want 2", got)
	}
	<-returned[2]
	if isDone(3) || isDone(4) {
		t.Fatal("outcomes 3 or 4 joined past the bound")
	}
	gs.gate <- struct{}{}
	if got := testwait.Recv(t, "the third batch's Finish", loopLiveness, gs.entered); got != 2 {
		t.Fatalf("third batch of %d outcomes, want 2", got)
	}
	<-returned[3]
	<-returned[4]
	gs.gate <- struct{}{}
	w.completer.drain()
	select {
	case err := <-gs.errs:
		t.Fatal(err)
	default:
	}
	for _, j := range jobs {
		got, err := c.Get(ctx, j.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.State != store.Completed {
			t.Fatalf("job %d is %s", j.ID, got.State)
		}
	}
	if u := w.completer.unsettled(); len(u) != 0 {
		t.Fatalf("unsettled %v after the writes", u)
	}
}

// modelFinish is the store of the randomized test: Finish writes
// nothing, it checks the bound and counts each outcome's writes, after a
// random number of yields, sometimes failing first.
type modelFinish struct {
	store.Store
	c        *completer
	mu       sync.Mutex
	rnd      *rand.Rand
	failures int // how many more Finish calls may fail
	written  map[int64]int
	order    []int64
	// queued are, for each Finish call, the outcomes the completer then
	// holds in the order it must write them: the batch, the pending
	// outcomes, the line.
	queued [][]int64
	errs   []error
}

func (s *modelFinish) Finish(ctx context.Context, outs []store.Outcome) ([]bool, error) {
	err := boundCheck(s.c, outs)
	var queued []int64
	s.c.mu.Lock()
	for _, b := range [][]store.Outcome{s.c.writing, s.c.pending} {
		for i := range b {
			queued = append(queued, b[i].JobID)
		}
	}
	for i := range s.c.waiting {
		queued = append(queued, s.c.waiting[i].o.JobID)
	}
	s.c.mu.Unlock()
	s.mu.Lock()
	s.queued = append(s.queued, queued)
	if err != nil {
		s.errs = append(s.errs, err)
	}
	yields, fail := s.rnd.IntN(50), s.failures > 0 && s.rnd.IntN(20) == 0
	if fail {
		s.failures--
	}
	s.mu.Unlock()
	for range yields {
		runtime.Gosched()
	}
	if fail {
		return nil, errors.New("store down")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range outs {
		s.written[outs[i].JobID]++
		s.order = append(s.order, outs[i].JobID)
	}
	return slices.Repeat([]bool{true}, len(outs)), nil
}

// TestCompleterBoundRandomized drives the completer with goroutines that
// submit outcomes one after another, as handler goroutines do, against a
// store that takes its time and sometimes fails, and, in half of the
// runs, lets the submitters go midway (the worker's shutdown). It checks
// the contract against a model: every outcome is written once; the
// outcomes pending and being written never exceed the bound; a submit
// returns only once its outcome has joined the pending ones (or the
// submitters were let go); nothing is left waiting (every submit returns,
// the completer drains); and the outcomes are written in the order they
// were submitted: whenever a batch is written, the batch, the pending
// outcomes and the line, in that order, are in the order of the writes.
func TestCompleterBoundRandomized(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rnd := rand.New(rand.NewPCG(seed, 0))
	for run := range 40 {
		bound := 1 + rnd.IntN(8)
		goroutines := 1 + rnd.IntN(12)
		each := 1 + rnd.IntN(40)
		unholdAt := -1
		if rnd.IntN(2) == 0 {
			unholdAt = rnd.IntN(goroutines * each)
		}
		t.Run(fmt.Sprintf("run%d-bound%d-g%d-each%d-unhold%d", run, bound, goroutines, each, unholdAt), func(t *testing.T) {
			clk := clockAt(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))
			w, _, _ := loopWorker(t, clk, WorkerOptions{})
			c := w.completer
			c.max = bound
			ms := &modelFinish{c: c, rnd: rand.New(rand.NewPCG(rnd.Uint64(), 0)), failures: rnd.IntN(3), written: map[int64]int{}}
			w.store = ms
			startLoop(t, &c.loop, c.start)
			q := w.queues[0]
			var submits atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, goroutines*each)
			for g := range goroutines {
				grnd := rand.New(rand.NewPCG(rnd.Uint64(), uint64(g)))
				wg.Add(1)
				go func() {
					defer wg.Done()
					for k := range each {
						for range grnd.IntN(20) {
							runtime.Gosched()
						}
						id := int64(g*each + k + 1)
						o := store.Outcome{JobID: id, Worker: w.id, Lease: 1000 + id, Kind: store.Complete}
						if submits.Add(1) == int64(unholdAt) {
							c.unhold()
						}
						c.submit(q, o)
						c.mu.Lock()
						waitingNow := slices.ContainsFunc(c.waiting, func(wo waitingOutcome) bool { return wo.o.JobID == id })
						unheld := c.unheld
						c.mu.Unlock()
						if waitingNow && !unheld {
							errs <- fmt.Errorf("submit of %d returned while its outcome waits in line", id)
						}
					}
				}()
			}
			waited := make(chan struct{}, 1)
			go func() { wg.Wait(); waited <- struct{}{} }()
			testwait.Recv(t, "every submit returned", loopLiveness, waited)
			drained := make(chan struct{}, 1)
			go func() { c.drain(); drained <- struct{}{} }()
			testwait.Recv(t, "the completer drained", loopLiveness, drained)
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			ms.mu.Lock()
			defer ms.mu.Unlock()
			for _, err := range ms.errs {
				t.Error(err)
			}
			for id := int64(1); id <= int64(goroutines*each); id++ {
				if n := ms.written[id]; n != 1 {
					t.Errorf("outcome %d written %d times", id, n)
				}
			}
			if len(ms.written) != goroutines*each {
				t.Errorf("%d outcomes written, %d submitted", len(ms.written), goroutines*each)
			}
			pos := map[int64]int{}
			for i, id := range ms.order {
				pos[id] = i
			}
			for _, queued := range ms.queued {
				for i := 1; i < len(queued); i++ {
					if pos[queued[i-1]] > pos[queued[i]] {
						t.Errorf("outcome %d, held ahead of %d, written after it", queued[i-1], queued[i])
					}
				}
			}
			c.mu.Lock()
			defer c.mu.Unlock()
			if len(c.pending)+len(c.waiting)+len(c.writing) != 0 {
				t.Errorf("left: %d pending, %d waiting, %d writing", len(c.pending), len(c.waiting), len(c.writing))
			}
		})
	}
}

// lineStore is a store whose Finish calls check the bound and, while
// gate is not closed, wait for it: the test lets the outcomes pile up.
type lineStore struct {
	store.Store
	w    *Worker
	gate chan struct{}
	mu   sync.Mutex
	errs []error
}

func (s *lineStore) Finish(ctx context.Context, outs []store.Outcome) ([]bool, error) {
	if err := boundCheck(s.w.completer, outs); err != nil {
		s.mu.Lock()
		s.errs = append(s.errs, err)
		s.mu.Unlock()
	}
	<-s.gate
	return s.Store.Finish(ctx, outs)
}

// lineLen returns how many outcomes wait in the completer's line.
func lineLen(c *completer) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiting)
}

// boundWorker is a running worker, on a new SQLite store behind a
// lineStore, whose completer's bound is bound and whose queue "q" has
// slots handler slots; its handler of "k" counts its runs, and calls
// runtime.Goexit for the payload "exit".
func boundWorker(t *testing.T, bound, slots int, opts WorkerOptions) (*Worker, *Client, *lineStore, *sync.Map, context.CancelFunc, chan error) {
	t.Helper()
	sq, err := sqlite.Open(t.Context(), sqlitetest.Path(t), sqlite.Options{Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sq.Close() })
	st := &lineStore{Store: sq, gate: make(chan struct{})}
	c := NewClient(st, ClientOptions{Logger: quietLog()})
	opts.Queues, opts.Logger = map[string]int{"q": slots}, quietLog()
	w := NewWorker(c, opts)
	w.completer.max = bound
	st.w = w
	runs := &sync.Map{}
	w.HandleFunc("k", func(ctx context.Context, j *Job) error {
		n, _ := runs.LoadOrStore(j.ID, new(atomic.Int32))
		n.(*atomic.Int32).Add(1)
		if string(j.Payload) == `"exit"` {
			runtime.Goexit()
		}
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	return w, c, st, runs, cancel, done
}

// TestWorkerBoundHoldsSlots: with the completer's bound reached, the
// handlers' slots are held until their outcomes join the pending ones,
// and the worker goes on once the store takes them: every job runs once
// and ends, handlers that call runtime.Goexit included, no slot is left
// taken, and the bound holds throughout.
func TestWorkerBoundHoldsSlots(t *testing.T) {
	const bound, slots, n = 4, 8, 200
	w, c, st, runs, cancel, done := boundWorker(t, bound, slots, WorkerOptions{})
	ctx := t.Context()
	reqs := make([]Request, n)
	for i := range reqs {
		reqs[i] = Request{Kind: "k", Queue: "q", Payload: "ok"}
		if i%10 == 3 {
			p := retry.Policy{Multiplier: 1} // no retry: the Goexit kills the job
			reqs[i] = Request{Kind: "k", Queue: "q", Payload: "exit", Policy: &p}
		}
	}
	jobs, err := c.EnqueueMany(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	// The first batch's write waits: the outcomes pile up past the
	// bound, their handlers holding their slots.
	testwait.Until(t, "outcomes waiting in line", loopLiveness, func() bool { return lineLen(w.completer) > 0 })
	q := w.queues[0]
	if a := q.active.Load(); a == 0 {
		t.Fatal("no slot taken while outcomes wait in line")
	}
	close(st.gate)
	for _, j := range jobs {
		want := Completed
		if string(j.Payload) == `"exit"` {
			want = Dead
		}
		testwait.Watch(t, fmt.Sprint("job ", j.ID, " ", want), loopLiveness, func() (bool, string) {
			got, err := c.Get(ctx, j.ID)
			if err != nil {
				return false, err.Error()
			}
			return got.State == want, string(got.State)
		})
	}
	testwait.Until(t, "every slot free", loopLiveness, func() bool { return q.active.Load() == 0 })
	cancel()
	if err := testwait.Recv(t, "Run's return", loopLiveness, done); err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		if n, ok := runs.Load(j.ID); !ok || n.(*atomic.Int32).Load() != 1 {
			t.Errorf("job %d did not run once", j.ID)
		}
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, err := range st.errs {
		t.Error(err)
	}
}

// TestWorkerBoundLetsHandlersGoAtShutdown: at shutdown, the handlers
// waiting for the completer to take their outcomes are let go, so that
// the shutdown does not wait (ShutdownTimeout is an hour: only the
// handlers' end lets it go on to write the outcomes), and the outcomes
// are still written, each job once.
func TestWorkerBoundLetsHandlersGoAtShutdown(t *testing.T) {
	const bound, slots, n = 2, 6, 40
	w, c, st, runs, cancel, done := boundWorker(t, bound, slots, WorkerOptions{ShutdownTimeout: time.Hour})
	ctx := t.Context()
	reqs := make([]Request, n)
	for i := range reqs {
		reqs[i] = Request{Kind: "k", Queue: "q", Payload: "ok"}
	}
	jobs, err := c.EnqueueMany(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "outcomes waiting in line", loopLiveness, func() bool { return lineLen(w.completer) > 0 })
	cancel()
	// The handlers ended: Run went on to wait for the outcomes' writes.
	testwait.Until(t, "the handlers' end", loopLiveness, w.completer.stopping.Load)
	close(st.gate)
	if err := testwait.Recv(t, "Run's return", loopLiveness, done); err != nil {
		t.Fatal(err)
	}
	ran := 0
	for _, j := range jobs {
		got, err := c.Get(ctx, j.ID)
		if err != nil {
			t.Fatal(err)
		}
		r, ok := runs.Load(j.ID)
		switch {
		case !ok:
			if got.State != Pending {
				t.Errorf("job %d, never run, is %s", j.ID, got.State)
			}
		case r.(*atomic.Int32).Load() != 1 || got.State != Completed:
			t.Errorf("job %d ran %d times, is %s", j.ID, r.(*atomic.Int32).Load(), got.State)
		default:
			ran++
		}
	}
	if ran == 0 {
		t.Fatal("no job ran")
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, err := range st.errs {
		t.Error(err)
	}
}
