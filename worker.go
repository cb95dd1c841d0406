package redrive

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redrivehq/redrive/breaker"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/retry"
	"github.com/redrivehq/redrive/store"
)

// WorkerOptions configure a Worker. Zero fields take the defaults given.
type WorkerOptions struct {
	// Queues maps each queue to work to its concurrency (handlers running
	// at once). Default: {"default": 10}.
	Queues map[string]int
	// ID names this worker in leases and logs (default host-pid-random).
	ID string
	// Policy is the default retry policy (default retry.DefaultPolicy()).
	Policy *retry.Policy
	// QueuePolicies override Policy per queue.
	QueuePolicies map[string]retry.Policy
	// Classifier classifies handler errors (default: failure.Classify).
	Classifier *failure.Classifier
	// QueueClassifiers override Classifier per queue.
	QueueClassifiers map[string]*failure.Classifier
	// Breakers holds the circuit breakers of dependencies (default: a
	// registry with breaker.DefaultConfig()).
	Breakers *breaker.Registry
	// LocalBreakers keeps the breakers to this process. By default a
	// running worker shares them with every process on its store: their
	// failures add up, a trip stops the whole fleet, one probe is let
	// through fleet-wide (see docs/design.md, "Breakers shared by a
	// fleet").
	LocalBreakers bool
	// RetryBudget configures the per-queue retry budget. By default
	// retries may exceed 20% of the queue's recent attempts only beyond a
	// floor of retry.DefaultBudgetMinRetries (100) retries per 10s, so ordinary
	// bursts of failures keep their policy's delays and only a retry storm
	// is spread out (logged, and counted as budget_deferred). Set
	// DisableRetryBudget to turn it off.
	RetryBudget        retry.BudgetConfig
	DisableRetryBudget bool
	// LeaseDuration is how long a fetched job is leased (default 30s). A
	// worker heartbeats every LeaseDuration/3 while its handlers run; a
	// lease that expires is rescued as a failed attempt (lease_expired).
	// It is also the lease of a durable operation the worker runs
	// (renewed at each batch and every LeaseDuration/3 while it waits):
	// the operation of a worker that died is taken over once it ends.
	LeaseDuration time.Duration
	// RescueInterval is how often expired leases are looked for (default 5s).
	RescueInterval time.Duration
	// PollInterval bounds how long the worker sleeps without looking for
	// work another process may have added (default 1s). Work enqueued or
	// retried in this process (through any Client of its store) wakes it
	// at once, and it always wakes at the next job's due time. It is also how often the worker reads which
	// queues are paused (see Client.PauseQueue); pauses and resumes made
	// in this process through any Client of its store (the same
	// store.Store value) apply at once.
	PollInterval time.Duration
	// FetchBatch bounds how many jobs one fetch leases (default: the
	// queue's concurrency, at most 1000).
	FetchBatch int
	// Lookahead lets the worker lease jobs due within this window and
	// start each at its due time itself, so a retry due at T starts at T
	// rather than a database round trip later (default 20ms, or a third
	// of LeaseDuration if that is less; negative disables). It must be
	// at most a third of LeaseDuration: Run refuses a longer one with
	// ErrInvalid. A job waiting for its due time counts as
	// running: heartbeats extend its lease, and a cancellation or a
	// shutdown ends it without running its handler.
	Lookahead time.Duration
	// FetchCooldown is how long a busy queue waits, once a slot frees up,
	// for more slots before fetching, so that fetches stay batched
	// (default 1ms; negative disables). A queue with most slots free
	// fetches at once, so due jobs are not delayed by it.
	FetchCooldown time.Duration
	// ShutdownTimeout is how long Run lets running handlers finish after
	// its context ends before canceling them (default 30s). A fetch under
	// way when the context ends is let finish first (a fetch that leased
	// jobs must hand them over, not leave them leased until their leases
	// expire), for up to LeaseDuration: a store that hangs holds up Run
	// that long before this timeout starts.
	ShutdownTimeout time.Duration
	// CompletedRetention is how long completed and canceled jobs are kept
	// (default 24h).
	CompletedRetention time.Duration
	// DLQMaxAge is how long dead jobs are kept (default 168h).
	DLQMaxAge time.Duration
	// KeyRetention is how long an idempotency key stays taken, counted
	// from its job's enqueue, even after retention or a purge deleted the
	// job: enqueuing the key again meanwhile answers with what became of
	// that job (Job.Existing and Job.Gone) instead of doing the work
	// twice. A key is also taken as long as its job exists. Default 7
	// days.
	KeyRetention time.Duration
	// CleanupInterval is how often retention runs (default 24h; the first
	// run is one minute after start).
	CleanupInterval time.Duration
	// StatsRetention is how long the per-minute statistics snapshots
	// behind Client.Series are kept (default DefaultStatsRetention, 7
	// days). The worker that runs maintenance records one snapshot a
	// minute and deletes the older ones.
	StatsRetention time.Duration
	// MaxErrorLength bounds the error message kept per attempt (default 4096).
	MaxErrorLength int
	// Logger receives the worker's logs (default: the client's).
	Logger *slog.Logger
	// Rand is the jitter source (default: math/rand/v2's global source).
	Rand retry.Source
	// Observer, when set, is told of every attempt: its outcome, how long
	// the handler ran and how late it started (see Observer). Nil costs
	// nothing.
	Observer Observer
	// Periodic are the schedules of periodic jobs this worker declares
	// and, while it leads, enqueues (see Periodic). Run fails at once on
	// an invalid one.
	Periodic []Periodic
}

// Worker runs handlers for the jobs of its queues. Create it with
// NewWorker, register handlers, then call Run. It fetches no job of a
// queue paused with Client.PauseQueue until the queue is resumed.
type Worker struct {
	client *Client
	store  store.Store
	log    *slog.Logger
	opts   WorkerOptions
	id     string

	// exec runs the attempts and decides their outcomes.
	exec *Executor
	// gate passes exec's reports to the Observer until Run gives up on
	// its handlers (nil without an Observer).
	gate *observerGate

	mu      sync.Mutex
	started bool

	queues []*queueRunner

	runMu sync.Mutex
	// running holds the attempts whose handlers run, by lease: after a
	// lost lease, a handler of the job's next lease may run beside the
	// one that lost it, until that one stops.
	running map[store.Lease]runningEntry

	completer *completer
	active    sync.WaitGroup
	// leading reports whether this worker runs maintenance (rescue,
	// retention): always, unless the store elects one process for it.
	leading func() bool
	// pauseMu orders the paused-queue refreshes with the pauses and
	// resumes of this process's Clients; pauseGen counts the latter, so that a
	// refresh that read the store before one of them is discarded.
	pauseMu  sync.Mutex
	pauseGen atomic.Uint64
	// hardCtx is the parent of every handler's context; it is canceled
	// when the shutdown deadline passes.
	hardCtx    context.Context
	hardCancel context.CancelCauseFunc
	// heartbeatC asks the heartbeat loop for a heartbeat now: a
	// cancellation of a running job was requested, perhaps of one of
	// this worker's.
	heartbeatC chan struct{}
}

// observerGate passes the worker's reports to its Observer until the
// worker closes it, as Run gives up on handlers that ignore cancellation:
// a report that starts after that is not made. A report under way then is
// not waited for: it may be stuck in the Observer, which is one way an
// attempt does not end, and Run must return all the same.
type observerGate struct {
	closed atomic.Bool
	o      Observer
}

// ObserveAttempt reports a unless the gate is closed.
func (g *observerGate) ObserveAttempt(a AttemptInfo) {
	if !g.closed.Load() {
		g.o.ObserveAttempt(a)
	}
}

// close stops the reports not yet under way.
func (g *observerGate) close() {
	if g != nil {
		g.closed.Store(true)
	}
}

// runningEntry is a job whose attempt runs in this worker: heartbeats
// extend its lease, and a user's cancellation or the loss of the lease
// cancels it.
type runningEntry struct {
	job    *Job
	ctx    context.Context
	cancel context.CancelCauseFunc
	queue  *queueRunner
	// progress is what the handler reported with Progress.
	progress *progressCell
}

// NewWorker returns a worker that takes jobs through client's store.
func NewWorker(client *Client, opts WorkerOptions) *Worker {
	if len(opts.Queues) == 0 {
		opts.Queues = map[string]int{DefaultQueue: 10}
	}
	if opts.ID == "" {
		opts.ID = defaultWorkerID()
	}
	if opts.LeaseDuration <= 0 {
		opts.LeaseDuration = 30 * time.Second
	}
	if opts.RescueInterval <= 0 {
		opts.RescueInterval = 5 * time.Second
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = time.Second
	}
	if opts.Lookahead == 0 {
		// At most a third of the lease (see Run), for very short leases.
		opts.Lookahead = min(20*time.Millisecond, opts.LeaseDuration/3)
	}
	if opts.Lookahead < 0 {
		opts.Lookahead = 0
	}
	if opts.FetchCooldown == 0 {
		opts.FetchCooldown = time.Millisecond
	}
	if opts.ShutdownTimeout <= 0 {
		opts.ShutdownTimeout = 30 * time.Second
	}
	if opts.CompletedRetention <= 0 {
		opts.CompletedRetention = 24 * time.Hour
	}
	if opts.DLQMaxAge <= 0 {
		opts.DLQMaxAge = 168 * time.Hour
	}
	if opts.CleanupInterval <= 0 {
		opts.CleanupInterval = 24 * time.Hour
	}
	if opts.KeyRetention <= 0 {
		opts.KeyRetention = DefaultKeyRetention
	}
	if opts.StatsRetention <= 0 {
		opts.StatsRetention = DefaultStatsRetention
	}
	if opts.Logger == nil {
		opts.Logger = client.log
	}
	var obs Observer
	var gate *observerGate
	if opts.Observer != nil {
		gate = &observerGate{o: opts.Observer}
		obs = gate
	}
	w := &Worker{
		gate:    gate,
		client:  client,
		store:   client.store,
		log:     opts.Logger,
		opts:    opts,
		id:      opts.ID,
		running: map[store.Lease]runningEntry{},
		exec: NewExecutor(ExecutorOptions{ID: opts.ID, Policy: opts.Policy, QueuePolicies: opts.QueuePolicies,
			Classifier: opts.Classifier, QueueClassifiers: opts.QueueClassifiers, Breakers: opts.Breakers, RetryBudget: opts.RetryBudget,
			DisableRetryBudget: opts.DisableRetryBudget, MaxErrorLength: opts.MaxErrorLength, Logger: opts.Logger,
			Rand: opts.Rand, Observer: obs, Now: client.now}),
	}
	names := make([]string, 0, len(opts.Queues))
	for q := range opts.Queues {
		names = append(names, q)
	}
	sort.Strings(names)
	for _, q := range names {
		conc := opts.Queues[q]
		if conc <= 0 {
			conc = 1
		}
		batch := opts.FetchBatch
		if batch <= 0 || batch > conc {
			batch = min(conc, 1000)
		}
		qr := &queueRunner{w: w, name: q, concurrency: conc, batch: batch, wakeC: make(chan struct{}, 1), freeC: make(chan struct{}, 1)}
		w.queues = append(w.queues, qr)
	}
	w.completer = newCompleter(w)
	w.heartbeatC = make(chan struct{}, 1)
	return w
}

// ID returns the worker's id, as recorded in leases.
func (w *Worker) ID() string { return w.id }

// Breakers returns the worker's circuit breaker registry.
func (w *Worker) Breakers() *breaker.Registry { return w.exec.Breakers() }

// Client returns the client the worker was created with.
func (w *Worker) Client() *Client { return w.client }

// Executor returns the executor that runs the worker's attempts.
func (w *Worker) Executor() *Executor { return w.exec }

// HandleFunc registers the handler of a job kind. Registering after Run
// started, or twice for one kind, panics: both are programming errors.
func (w *Worker) HandleFunc(kind string, fn Handler, opts ...HandlerOption) {
	w.mu.Lock()
	started := w.started
	w.mu.Unlock()
	if started {
		panic("redrive: HandleFunc called after Run")
	}
	w.exec.HandleFunc(kind, fn, opts...)
}

// defaultWorkerID names a worker or executor: host-pid-random.
func defaultWorkerID() string {
	host, _ := os.Hostname()
	var b [3]byte
	rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// ErrWorkerRan is what Run returns when it was called before on the same
// Worker, whether that Run still runs or has returned: a Worker runs
// once. Create another with NewWorker to run again.
var ErrWorkerRan = errors.New("redrive: Run called twice: a Worker runs once (create another with NewWorker)")

// Run works until ctx ends, then shuts down gracefully: it stops fetching,
// lets running handlers finish for up to ShutdownTimeout, then cancels
// them (cause ErrShutdown); jobs interrupted that way go back to pending
// without using an attempt. Run returns nil after a clean shutdown. A
// Worker runs once: a second Run returns ErrWorkerRan.
func (w *Worker) Run(ctx context.Context) error {
	periodic, err := w.compilePeriodic()
	if err != nil {
		return fmt.Errorf("redrive: %w", err)
	}
	if w.opts.Lookahead > w.opts.LeaseDuration/3 {
		return fmt.Errorf("redrive: %w: Lookahead %s is more than a third of LeaseDuration %s "+
			"(a job leased ahead of its due time waits that long under its lease)", ErrInvalid,
			w.opts.Lookahead, w.opts.LeaseDuration)
	}
	w.mu.Lock()
	if w.started {
		w.mu.Unlock()
		return ErrWorkerRan
	}
	w.started = true
	w.mu.Unlock()

	w.hardCtx, w.hardCancel = context.WithCancelCause(context.WithoutCancel(ctx))
	defer w.hardCancel(nil)
	// Handler contexts are not children of hardCtx: its cancellation
	// reaches them through the running list (see execute).
	defer context.AfterFunc(w.hardCtx, w.cancelAllRunning)()

	w.log.Info("worker starting", "worker", w.id, "queues", w.opts.Queues)
	// Pauses and resumes through a Client of this process on the same
	// store apply at once; those of other processes are read every
	// PollInterval, and once before the first fetch.
	for _, q := range w.queues {
		unregister := w.client.registerPause(q.name, func(paused bool) { w.applyLocalPause(q, paused) })
		defer unregister()
	}
	w.refreshPaused(ctx)
	// A cancellation requested through a Client of this process on the
	// same store asks for a heartbeat at once, which tells whether the
	// job is one of ours.
	unregisterCancel := w.client.registerCancel(w.heartbeatNow)
	defer unregisterCancel()
	// Register in the store's worker registry, and rescue at once the jobs
	// of this host's workers whose process is gone (a restart).
	w.register(ctx)
	w.rescueGone(ctx)
	var loops sync.WaitGroup
	for _, q := range w.queues {
		unregister := w.client.register(q.name, q.wake)
		defer unregister()
		loops.Go(func() { q.loop(ctx) })
	}
	var bg sync.WaitGroup
	bg.Go(func() { w.pauseLoop(ctx) })
	bgCtx, bgCancel := context.WithCancel(context.WithoutCancel(ctx))
	// A store shared by several processes tells this worker when another
	// process made jobs due, and elects one process for maintenance.
	if n, ok := w.store.(store.Notifier); ok {
		bg.Go(func() {
			err := n.Listen(ctx, func(queue string) {
				if queue == store.CancelNotice || queue == "" {
					// A cancellation requested by another process (or
					// notices missed by a reconnect).
					w.heartbeatNow()
					if queue != "" {
						return
					}
				}
				now := time.Now()
				for _, q := range w.queues {
					if queue == "" || queue == q.name {
						q.wake(now)
					}
				}
			})
			if err != nil && ctx.Err() == nil {
				w.log.Error("listening for new jobs stopped; falling back to polling", "error", err, "poll_interval", w.opts.PollInterval)
			}
		})
	}
	w.leading = func() bool { return true }
	if el, ok := w.store.(store.Elector); ok {
		leading, err := el.Elect(ctx, "maintenance")
		if err != nil {
			w.log.Error("maintenance election failed; this worker runs maintenance too", "error", err)
		} else {
			w.leading = leading
		}
	}
	bg.Go(func() { w.heartbeatLoop(bgCtx) })
	if cc, ok := w.store.(store.CancelChecker); ok {
		if _, notifies := w.store.(store.Notifier); !notifies {
			bg.Go(func() { w.cancelPollLoop(bgCtx, cc) })
		}
	}
	bg.Go(func() { w.rescueLoop(ctx) })
	bg.Go(func() { w.cleanupLoop(ctx) })
	bg.Go(func() { w.statsLoop(ctx) })
	bg.Go(func() { w.operationsLoop(ctx) })
	bg.Go(func() { w.periodicLoop(ctx, periodic) })
	bg.Go(func() { w.completer.loop(bgCtx) })
	bg.Go(func() { w.shareBreakers(ctx) })

	<-ctx.Done()
	loops.Wait()
	w.log.Info("worker stopping: waiting for running handlers", "worker", w.id, "running", w.runningCount(),
		"timeout", w.opts.ShutdownTimeout)
	done := make(chan struct{})
	go func() { w.active.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(w.opts.ShutdownTimeout):
		w.log.Warn("shutdown timeout: canceling running handlers", "worker", w.id, "running", w.runningCount())
		w.hardCancel(ErrShutdown)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			w.log.Error("handlers ignore cancellation; releasing their jobs", "worker", w.id, "running", w.runningCount())
			// Their attempts, released, are not reported when they end.
			w.gate.close()
			w.releaseAll()
		}
	}
	for _, q := range w.queues {
		q.stopHandlers() // every leased job was handled: the handler goroutines exit
	}
	w.completer.stopping.Store(true)
	w.completer.drain()
	bgCancel()
	bg.Wait()
	w.deregister()
	w.log.Info("worker stopped", "worker", w.id)
	return nil
}

func (w *Worker) runningCount() int {
	w.runMu.Lock()
	defer w.runMu.Unlock()
	return len(w.running)
}

// releaseAll hands back the jobs of handlers that would not stop.
func (w *Worker) releaseAll() {
	w.runMu.Lock()
	defer w.runMu.Unlock()
	now := w.client.now()
	for _, r := range w.running {
		w.completer.submit(r.queue, w.exec.Release(r.job, now))
	}
}

func attemptStart(j *Job, fallback time.Time) time.Time {
	if j.AttemptedAt != nil {
		return *j.AttemptedAt
	}
	return fallback
}

// queueRunner fetches and dispatches the jobs of one queue.
type queueRunner struct {
	w           *Worker
	name        string
	concurrency int
	batch       int

	active atomic.Int64
	// The handler goroutines and the jobs waiting for one (see dispatch),
	// under hmu.
	hmu sync.Mutex
	// ready holds the jobs dispatched that no goroutine took yet, oldest
	// first from readyHead.
	ready     []*Job
	readyHead int
	// parked holds the idle goroutines, each by the channel that wakes
	// it, the most recently idle last.
	parked []chan struct{}
	// searching counts the goroutines woken (or started) to take a job
	// that have not looked yet; handlers counts the goroutines.
	searching, handlers int
	stopped             bool // the goroutines are told to exit
	wakeC               chan struct{}
	freeC               chan struct{}
	hint                atomic.Int64 // earliest due time (unix nanos) announced by a wake-up, 0 = none

	// paused is the queue's cached pause state. The loop holds fetchMu
	// from its check of paused through its Fetch, so that a pause, once
	// applied, knows no fetch is still under way.
	paused  atomic.Bool
	fetchMu sync.Mutex
}

// setPaused applies a pause or a resume to the loop. A pause returns once
// no fetch is under way; a resume wakes the loop, so that due jobs start
// at once. It reports whether the state changed.
func (q *queueRunner) setPaused(paused bool) bool {
	if paused {
		was := q.paused.Swap(true)
		q.fetchMu.Lock()
		//lint:ignore SA2001 the empty critical section waits for a fetch under way
		q.fetchMu.Unlock()
		return !was
	}
	if !q.paused.Swap(false) {
		return false
	}
	q.wake(time.Now())
	return true
}

// wake tells the loop that work due at t was added.
func (q *queueRunner) wake(t time.Time) {
	n := t.UnixNano()
	for {
		old := q.hint.Load()
		if old != 0 && old <= n {
			break
		}
		if q.hint.CompareAndSwap(old, n) {
			break
		}
	}
	select {
	case q.wakeC <- struct{}{}:
	default:
	}
}

// dispatch hands a leased job to the queue's handler goroutines. They
// live as long as the worker, so their stacks, once grown, are reused
// rather than grown again per job, and there are never more of them than
// the queue's concurrency.
//
// The job waits in the ready list for the first goroutine that looks: one
// that just finished a job takes the next waiting one at once. One idle
// goroutine is woken (the one idle last) or started, unless one woken
// before has not looked yet; a goroutine that takes a job and leaves
// others waiting wakes the next. So every job waiting has a goroutine on
// its way, and when jobs are short a few goroutines run them all, one
// after the other, while the others stay parked. Before, each job was
// handed to a goroutine of its own, every goroutine in turn: each waited
// through garbage collections between two jobs, which shrink the stack
// of a waiting goroutine, and grew its stack again on its next job (a
// stack copy per job), and each job cost a switch to a parked goroutine.
func (q *queueRunner) dispatch(j *Job) {
	q.hmu.Lock()
	q.ready = append(q.ready, j)
	q.wakeLocked()
	q.hmu.Unlock()
}

// wakeLocked makes sure a goroutine will look at the ready jobs: one
// woken before and not yet looking, else the idle one parked last, else a
// new one.
func (q *queueRunner) wakeLocked() {
	if q.searching > 0 || q.readyHead == len(q.ready) {
		return
	}
	if n := len(q.parked); n > 0 {
		c := q.parked[n-1]
		q.parked = q.parked[:n-1]
		q.searching++
		c <- struct{}{} // buffered: a parked goroutine's channel is empty
		return
	}
	if q.handlers < q.concurrency {
		// Never more than the concurrency: jobs waiting are counted in
		// q.active, so with every goroutine running a job none waits.
		q.handlers++
		q.searching++
		go q.handlerLoop()
	}
}

// takeLocked returns the oldest ready job, or nil.
func (q *queueRunner) takeLocked() *Job {
	if q.readyHead == len(q.ready) {
		return nil
	}
	j := q.ready[q.readyHead]
	q.ready[q.readyHead] = nil
	q.readyHead++
	if q.readyHead == len(q.ready) {
		q.ready, q.readyHead = q.ready[:0], 0
	}
	return j
}

// handlerLoop is a handler goroutine: it runs ready jobs until none is
// left, then parks until woken.
func (q *queueRunner) handlerLoop() {
	wake := make(chan struct{}, 1)
	searching, finished := true, false
	// running is true while a job runs: if the goroutine exits then, its
	// handler called runtime.Goexit (the job's outcome was submitted by
	// execute's deferred calls). Its slot is freed and another goroutine
	// takes its place for the jobs waiting.
	running := false
	defer func() {
		if running {
			q.hmu.Lock()
			q.handlers--
			q.wakeLocked()
			q.hmu.Unlock()
			q.release()
		}
	}()
	for {
		q.hmu.Lock()
		if searching {
			q.searching--
			searching = false
		}
		j := q.takeLocked()
		if j != nil {
			q.wakeLocked() // for the jobs still waiting, if any
		} else if !q.stopped {
			q.parked = append(q.parked, wake)
		}
		stopped := q.stopped
		q.hmu.Unlock()
		// The slot of the job finished is freed once this goroutine has
		// taken another or counts as idle, so that the loop's next
		// fetch finds it available.
		if finished {
			q.release()
		}
		if j == nil {
			if stopped {
				return
			}
			if _, ok := <-wake; !ok {
				return
			}
			searching, finished = true, false
			continue
		}
		running = true
		q.w.execute(q, j)
		running, finished = false, true
	}
}

// stopHandlers ends the handler goroutines, once no job will be
// dispatched any more.
func (q *queueRunner) stopHandlers() {
	q.hmu.Lock()
	defer q.hmu.Unlock()
	q.stopped = true
	for _, c := range q.parked {
		close(c)
	}
	q.parked = nil
}

func (q *queueRunner) release() {
	q.active.Add(-1)
	select {
	case q.freeC <- struct{}{}:
	default:
	}
}

func (q *queueRunner) loop(ctx context.Context) {
	w := q.w
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	failures := 0
	for ctx.Err() == nil {
		free := q.concurrency - int(q.active.Load())
		if free <= 0 {
			select {
			case <-q.freeC:
			case <-ctx.Done():
			}
			// Slots free up one by one as handlers finish; a fetch per slot
			// would pay a commit per job. Let a few more finish first (an
			// idle queue, with every slot free, fetches at once).
			if free := q.concurrency - int(q.active.Load()); free < q.batch/2 && w.opts.FetchCooldown > 0 {
				timer.Reset(w.opts.FetchCooldown)
				select {
				case <-timer.C:
				case <-ctx.Done():
					timer.Stop()
				}
			}
			continue
		}
		q.fetchMu.Lock()
		if q.paused.Load() {
			// A paused queue fetches nothing: wait for its resume (which
			// wakes the loop) or the end.
			q.fetchMu.Unlock()
			select {
			case <-q.wakeC:
			case <-ctx.Done():
			}
			continue
		}
		q.hint.Store(0)
		now := w.client.now()
		limit := min(free, q.batch)
		// The fetch is not interrupted by the shutdown: a fetch whose
		// commit succeeded but whose call returned the context's error
		// would leave its jobs leased and never run, until their leases
		// expired and were rescued as failed attempts. The jobs of a
		// fetch that ends after the shutdown began are dispatched, and
		// run or are released like the others. It is bounded by the
		// lease, so that a store that hangs does not hold up the
		// shutdown for ever.
		fctx, fcancel := context.WithTimeout(context.WithoutCancel(ctx), w.opts.LeaseDuration)
		jobs, err := w.store.Fetch(fctx, store.FetchParams{Queue: q.name, Limit: limit, Now: now,
			DueBy: now.Add(w.opts.Lookahead), LeaseUntil: now.Add(w.opts.LeaseDuration), Worker: w.id})
		fcancel()
		q.fetchMu.Unlock()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			failures++
			d := storeBackoff(failures)
			w.log.Error("fetch failed; retrying", "queue", q.name, "error", err, "attempt", failures, "delay", d)
			q.sleep(ctx, timer, d)
			continue
		}
		failures = 0
		for _, j := range jobs {
			q.active.Add(1)
			w.active.Add(1)
			q.dispatch(j)
		}
		if len(jobs) == limit {
			continue // there may be more due right now
		}
		// Nothing more is due: sleep until the next due job, a wake-up, or
		// the poll interval.
		wait := w.opts.PollInterval
		if next, ok, err := w.store.NextDue(ctx, q.name); err == nil && ok {
			wait = min(wait, time.Until(next)-w.opts.Lookahead)
		}
		if h := q.hint.Load(); h != 0 {
			wait = min(wait, time.Until(time.Unix(0, h))-w.opts.Lookahead)
		}
		if wait <= 0 {
			continue
		}
		q.sleep(ctx, timer, wait)
	}
}

// sleep waits for d, a wake-up or the end of ctx.
func (q *queueRunner) sleep(ctx context.Context, timer *time.Timer, d time.Duration) {
	timer.Reset(d)
	select {
	case <-timer.C:
	case <-q.wakeC:
		if h := q.hint.Load(); h != 0 {
			if wait := time.Until(time.Unix(0, h)) - q.w.opts.Lookahead; wait > 0 {
				// Work announced for later: keep sleeping until then (or the
				// original deadline, whichever is first).
				q.hint.Store(0)
				if wait < d {
					timer.Stop()
					q.sleepUntilWake(ctx, timer, wait)
					return
				}
				q.sleepUntilWake(ctx, timer, d)
				return
			}
		}
		timer.Stop()
	case <-ctx.Done():
		timer.Stop()
	}
}

func (q *queueRunner) sleepUntilWake(ctx context.Context, timer *time.Timer, d time.Duration) {
	timer.Reset(d)
	select {
	case <-timer.C:
	case <-q.wakeC:
		timer.Stop()
	case <-ctx.Done():
		timer.Stop()
	}
}

// applyLocalPause applies a pause or resume made through the worker's own
// Client, which the store has already recorded.
func (w *Worker) applyLocalPause(q *queueRunner, paused bool) {
	w.pauseMu.Lock()
	defer w.pauseMu.Unlock()
	w.pauseGen.Add(1)
	if q.setPaused(paused) {
		w.logPause(q, paused)
	}
}

// refreshPaused reads the paused queues from the store and applies them.
// On an error the last known states stay.
func (w *Worker) refreshPaused(ctx context.Context) {
	gen := w.pauseGen.Load()
	states, err := w.store.Queues(ctx)
	if err != nil {
		if ctx.Err() == nil {
			w.log.Warn("reading the paused queues failed; keeping the last known", "worker", w.id, "error", err)
		}
		return
	}
	paused := map[string]bool{}
	for _, st := range states {
		if st.Paused {
			paused[st.Name] = true
		}
	}
	w.pauseMu.Lock()
	defer w.pauseMu.Unlock()
	if w.pauseGen.Load() != gen {
		return // a local pause or resume came after this read: it is newer
	}
	for _, q := range w.queues {
		if q.setPaused(paused[q.name]) {
			w.logPause(q, paused[q.name])
		}
	}
}

func (w *Worker) logPause(q *queueRunner, paused bool) {
	if paused {
		w.log.Info("queue paused: fetching none of its jobs until it is resumed", "worker", w.id, "queue", q.name,
			"running", q.active.Load())
		return
	}
	w.log.Info("queue resumed", "worker", w.id, "queue", q.name)
}

// pauseLoop refreshes the paused queues every PollInterval.
func (w *Worker) pauseLoop(ctx context.Context) {
	every(ctx, w.opts.PollInterval, func() { w.refreshPaused(ctx) })
}

// every calls f each time d passes, until ctx ends.
func every(ctx context.Context, d time.Duration, f func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		f()
	}
}

// storeBackoff is the delay before retrying a failed store call: 100ms
// doubling to 1s, so that a worker resumes within a second of its
// database coming back.
func storeBackoff(n int) time.Duration {
	d := 100 * time.Millisecond << min(n-1, 7)
	return min(d, time.Second)
}

// execute runs one leased attempt and submits its outcome.
// The caller frees the queue slot afterwards.
func (w *Worker) execute(q *queueRunner, j *Job) {
	defer w.active.Done()
	// The handler's context carries hardCtx's values, not its
	// cancellation: a child registered with one parent per running job
	// made every start and end of a job take the parent's lock, with
	// thousands of handlers at once. cancelAllRunning cancels the running
	// jobs when hardCtx ends, and a job registered after that is canceled
	// here.
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(w.hardCtx))
	lease := store.LeaseOf(j)
	w.runMu.Lock()
	progress := &progressCell{}
	w.running[lease] = runningEntry{job: j, ctx: ctx, cancel: cancel, queue: q, progress: progress}
	if w.hardCtx.Err() != nil {
		cancel(context.Cause(w.hardCtx))
	}
	w.runMu.Unlock()
	// Deferred, so that it happens even when the handler calls
	// runtime.Goexit (execute has set the outcome by then).
	var o Outcome
	defer func() {
		w.runMu.Lock()
		delete(w.running, lease)
		w.runMu.Unlock()
		cancel(nil)
		w.completer.submit(q, o)
	}()
	// A job leased within the lookahead starts at its due time. It is
	// registered as running meanwhile, so that heartbeats extend its
	// lease and a cancellation or a shutdown reaches it: then it ends
	// without running its handler.
	if wait := time.Until(j.RunAt); wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			o = w.exec.notStarted(j, context.Cause(ctx), w.client.now())
			return
		}
	}
	w.exec.execute(ctx, j, progress, &o)
}

// cancelAllRunning cancels the context of every running handler with the
// cause of hardCtx, when hardCtx ends.
func (w *Worker) cancelAllRunning() {
	cause := context.Cause(w.hardCtx)
	w.runMu.Lock()
	defer w.runMu.Unlock()
	for _, e := range w.running {
		e.cancel(cause)
	}
}

func (w *Worker) heartbeatLoop(ctx context.Context) {
	t := time.NewTicker(w.opts.LeaseDuration / 3)
	defer t.Stop()
	// Progress that changed goes with each heartbeat, and in between
	// about once a second.
	p := time.NewTicker(progressInterval)
	defer p.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			w.heartbeat(ctx)
			w.flushProgress(ctx)
			w.heartbeatRegistry(ctx)
		case <-p.C:
			w.flushProgress(ctx)
		case <-w.heartbeatC:
			w.heartbeat(ctx)
		}
	}
}

// heartbeatNow asks the heartbeat loop for a heartbeat at once (a
// cancellation was requested); it does not block.
func (w *Worker) heartbeatNow() {
	select {
	case w.heartbeatC <- struct{}{}:
	default:
	}
}

// cancelPollInterval is how often a worker on a store that cannot notify
// (a store.CancelChecker) asks whether one of its running jobs was
// canceled by another process.
const cancelPollInterval = 250 * time.Millisecond

// cancelPollLoop polls the store for the cancellation of running jobs,
// while there are some, until ctx ends.
func (w *Worker) cancelPollLoop(ctx context.Context, cc store.CancelChecker) {
	every(ctx, cancelPollInterval, func() {
		leases := w.runningLeases()
		if len(leases) == 0 {
			return
		}
		cancel, err := cc.CancelRequested(ctx, w.id, leases)
		if err != nil {
			if ctx.Err() == nil {
				w.log.Debug("polling for canceled jobs failed", "worker", w.id, "error", err)
			}
			return
		}
		w.cancelRunning(cancel, ErrJobCanceled)
	})
}

// runningLeases returns the leases of the jobs whose handlers run.
func (w *Worker) runningLeases() []store.Lease {
	w.runMu.Lock()
	defer w.runMu.Unlock()
	leases := make([]store.Lease, 0, len(w.running))
	for l := range w.running {
		leases = append(leases, l)
	}
	return leases
}

// cancelRunning cancels with cause the handlers of the given leases,
// those that still run.
func (w *Worker) cancelRunning(leases []store.Lease, cause error) {
	if len(leases) == 0 {
		return
	}
	w.runMu.Lock()
	defer w.runMu.Unlock()
	for _, l := range leases {
		if r, ok := w.running[l]; ok {
			if cause == ErrLeaseLost && r.ctx.Err() == nil {
				w.log.Warn("lease lost: stopping the handler (the job may run elsewhere; its outcome will be discarded)",
					"worker", w.id, "job_id", l.JobID, "lease", l.Token, "attempt", r.job.Attempt)
			}
			r.cancel(cause)
		}
	}
}

// heartbeat extends the leases of the running jobs, cancels those whose
// cancellation was requested, and stops the handlers whose leases are
// lost (their jobs may run elsewhere).
func (w *Worker) heartbeat(ctx context.Context) {
	leases := append(w.runningLeases(), w.completer.unsettled()...)
	if len(leases) == 0 {
		return
	}
	res, err := w.store.Heartbeat(ctx, w.id, leases, w.client.now().Add(w.opts.LeaseDuration))
	if err != nil {
		if ctx.Err() == nil {
			w.log.Error("heartbeat failed", "worker", w.id, "jobs", len(leases), "error", err)
		}
		return
	}
	w.cancelRunning(res.Canceled, ErrJobCanceled)
	w.cancelRunning(res.Lost, ErrLeaseLost)
}

// rescueLoop turns expired leases into failed attempts (Transient,
// lease_expired): a killed process loses no job.
func (w *Worker) rescueLoop(ctx context.Context) {
	w.rescue(ctx)
	every(ctx, w.opts.RescueInterval, func() {
		w.rescueGone(ctx)
		w.rescue(ctx)
	})
}

func (w *Worker) rescue(ctx context.Context) {
	if !w.leading() {
		return
	}
	for ctx.Err() == nil {
		now := w.client.now()
		jobs, err := w.store.Expired(ctx, now, 500)
		if err != nil {
			if ctx.Err() == nil {
				w.log.Error("rescue: listing expired leases failed", "error", err)
			}
			return
		}
		if len(jobs) == 0 {
			return
		}
		// Jobs this worker still holds (running, or finished with an
		// outcome not written yet, as during a full disk) are not lost:
		// their leases lapsed only because the store refused writes.
		mine := w.holding()
		outs := make([]store.Outcome, 0, len(jobs))
		kept := jobs[:0]
		for _, j := range jobs {
			if j.Worker == w.id && mine[store.LeaseOf(j)] {
				continue
			}
			kept = append(kept, j)
		}
		jobs = kept
		if len(jobs) == 0 {
			return
		}
		for _, j := range jobs {
			// The rescue is decided as a failed attempt, by the job's
			// policy and without the retry budget, fenced on the lease
			// read and on its being still expired: a heartbeat that
			// renewed it since wins.
			msg := fmt.Sprintf("lease expired: worker %s stopped heartbeating", j.Worker)
			v := failure.Verdict{Class: failure.Transient, Reason: "lease_expired"}
			o := w.exec.Fail(j, v, msg, attemptStart(j, now), now)
			o.Worker = j.Worker
			o.ExpiredBy = now
			o.Counters = append(o.Counters, store.Counter{Queue: j.Queue, Name: store.StatRescued, N: 1})
			outs = append(outs, o)
		}
		applied, err := w.store.Finish(ctx, outs)
		if err != nil {
			if ctx.Err() == nil {
				w.log.Error("rescue: recording expired leases failed", "error", err)
			}
			return
		}
		for i, o := range outs {
			if applied[i] {
				w.log.Warn("expired lease rescued", "job_id", o.JobID, "attempt", o.Attempt, "lease_worker", o.Worker)
				if o.Kind == store.Retry {
					w.client.wake(jobs[i].Queue, o.RunAt)
				}
			}
		}
		if len(jobs) < 500 {
			return
		}
	}
}

// holding returns the leases this worker holds: running, or finished
// with an outcome not yet written.
func (w *Worker) holding() map[store.Lease]bool {
	held := map[store.Lease]bool{}
	w.runMu.Lock()
	for l := range w.running {
		held[l] = true
	}
	w.runMu.Unlock()
	for _, l := range w.completer.unsettled() {
		held[l] = true
	}
	return held
}

func (w *Worker) cleanupLoop(ctx context.Context) {
	first := time.NewTimer(time.Minute)
	defer first.Stop()
	select {
	case <-ctx.Done():
		return
	case <-first.C:
	}
	cleanup := func() {
		if w.leading() {
			w.Cleanup(ctx)
		}
	}
	cleanup()
	every(ctx, w.opts.CleanupInterval, cleanup)
}

// Cleanup applies retention once: completed and canceled jobs older than
// CompletedRetention and dead jobs older than DLQMaxAge are deleted (their
// idempotency keys stay taken), the kept keys of jobs enqueued more than
// KeyRetention ago are released, workers stopped or silent for a day
// leave the registry, and operations finished more than
// OperationRetention ago are deleted. The worker runs it every CleanupInterval; it is
// exported for tools and tests.
func (w *Worker) Cleanup(ctx context.Context) (deleted int64, err error) {
	now := w.client.now()
	for _, r := range []struct {
		state store.State
		age   time.Duration
	}{{store.Completed, w.opts.CompletedRetention}, {store.Canceled, w.opts.CompletedRetention}, {store.Dead, w.opts.DLQMaxAge}} {
		for {
			n, err := w.store.DeleteFinished(ctx, r.state, now.Add(-r.age), 1000)
			deleted += n
			if err != nil {
				w.log.Error("retention cleanup failed", "state", r.state, "error", err)
				return deleted, err
			}
			if n < 1000 {
				break
			}
		}
	}
	keys, err := w.store.DeleteKeys(ctx, now.Add(-w.opts.KeyRetention))
	if err != nil {
		w.log.Error("retention cleanup of idempotency keys failed", "error", err)
		return deleted, err
	}
	workers, err := w.store.DeleteWorkers(ctx, now.Add(-workerRetention))
	if err != nil {
		w.log.Error("retention cleanup of the worker registry failed", "error", err)
		return deleted, err
	}
	if _, err := w.store.DeleteOperations(ctx, now.Add(-OperationRetention)); err != nil {
		w.log.Error("retention cleanup of finished operations failed", "error", err)
		return deleted, err
	}
	if deleted > 0 || keys > 0 || workers > 0 {
		w.log.Info("retention cleanup", "deleted", deleted, "keys_released", keys, "workers_pruned", workers)
	}
	return deleted, nil
}

// DefaultKeyRetention is how long an idempotency key stays taken by
// default (see WorkerOptions.KeyRetention).
const DefaultKeyRetention = 7 * 24 * time.Hour

// workerRetention is how long stopped and silent workers stay in the
// registry.
const workerRetention = 24 * time.Hour

// completer records outcomes in batches: every outcome submitted while a
// batch is being written joins the next one.
type completer struct {
	w  *Worker
	mu sync.Mutex
	// pending are the outcomes submitted, pendingQ their queues.
	pending  []store.Outcome
	pendingQ []*queueRunner
	// writing is the batch being written (its jobs' leases are still
	// extended by heartbeats until it is).
	writing []store.Outcome
	// spare and spareQ are the buffers of the batch written before, kept
	// for the next pending ones: a batch's buffers are allocated once,
	// not grown again outcome by outcome for every batch.
	spare    []store.Outcome
	spareQ   []*queueRunner
	signal   chan struct{}
	idle     sync.Cond
	busy     bool
	stopping atomic.Bool // set once the worker is shutting down
}

// unsettled returns the leases of the jobs whose outcomes are not
// written yet: they must not expire meanwhile.
func (c *completer) unsettled() []store.Lease {
	c.mu.Lock()
	defer c.mu.Unlock()
	leases := make([]store.Lease, 0, len(c.pending)+len(c.writing))
	for _, b := range [][]store.Outcome{c.pending, c.writing} {
		for i := range b {
			if b[i].Worker == c.w.id {
				leases = append(leases, store.Lease{JobID: b[i].JobID, Token: b[i].Lease})
			}
		}
	}
	return leases
}

// maxSpareOutcomes bounds the outcomes the completer's spare buffer holds.
const maxSpareOutcomes = 4096

func newCompleter(w *Worker) *completer {
	c := &completer{w: w, signal: make(chan struct{}, 1)}
	c.idle.L = &c.mu
	return c
}

func (c *completer) submit(q *queueRunner, o store.Outcome) {
	c.mu.Lock()
	c.pending = append(c.pending, o)
	c.pendingQ = append(c.pendingQ, q)
	c.mu.Unlock()
	select {
	case c.signal <- struct{}{}:
	default:
	}
}

func (c *completer) loop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			c.flush(context.Background())
			return
		case <-c.signal:
		}
		c.flush(ctx)
	}
}

// drain waits until every submitted outcome is written.
func (c *completer) drain() {
	c.mu.Lock()
	for len(c.pending) > 0 || c.busy {
		c.mu.Unlock()
		select {
		case c.signal <- struct{}{}:
		default:
		}
		time.Sleep(time.Millisecond)
		c.mu.Lock()
	}
	c.mu.Unlock()
}

func (c *completer) flush(ctx context.Context) {
	for {
		c.mu.Lock()
		if len(c.pending) == 0 {
			c.mu.Unlock()
			return
		}
		outs, queues := c.pending, c.pendingQ
		c.pending, c.pendingQ = c.spare[:0], c.spareQ[:0]
		c.spare, c.spareQ = nil, nil
		c.writing = outs
		c.busy = true
		c.mu.Unlock()
		var applied []bool
		for attempt := 1; ; attempt++ {
			var err error
			applied, err = c.w.store.Finish(ctx, outs)
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				ctx = context.Background() // shutting down: the outcomes must still be written
			}
			d := storeBackoff(attempt)
			if attempt <= 3 || attempt%30 == 0 {
				c.w.log.Error("recording job outcomes failed; retrying (their leases are kept meanwhile)", "jobs", len(outs),
					"attempt", attempt, "delay", d, "error", err)
			}
			// While the worker runs, outcomes are retried until the store
			// takes them (a full disk, an outage), their jobs' leases
			// extended by the heartbeats: a rescue would run them again.
			// Only a shutdown gives up, after two minutes.
			if attempt >= 120 && c.stopping.Load() {
				c.w.log.Error("giving up recording job outcomes at shutdown; their leases will expire and be rescued", "jobs", len(outs))
				applied = make([]bool, len(outs))
				break
			}
			time.Sleep(d)
		}
		for i := range outs {
			o := &outs[i]
			if !applied[i] {
				c.w.log.Warn("outcome discarded: the job is no longer leased by this worker", "job_id", o.JobID,
					"attempt", o.Attempt, "worker", o.Worker)
				continue
			}
			switch o.Kind {
			case store.Retry, store.Snooze, store.Release:
				at := o.RunAt
				if o.Kind == store.Release {
					at = o.At
				}
				c.w.client.wake(queues[i].name, at)
			}
		}
		c.mu.Lock()
		c.busy = false
		c.writing = nil
		// The buffers are kept for the next batch (unless a backlog made
		// them large), cleared so as not to hold the outcomes' events and
		// counters.
		if cap(outs) <= maxSpareOutcomes {
			clear(outs)
			clear(queues)
			c.spare, c.spareQ = outs[:0], queues[:0]
		}
		c.mu.Unlock()
	}
}
