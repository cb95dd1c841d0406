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
	"github.com/redrivehq/redrive/internal/lifecycle"
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
	// AuditRetention is how long audit log entries (store.Audit) are
	// kept; maintenance deletes older ones (default
	// store.DefaultAuditRetention, 90 days).
	AuditRetention time.Duration
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

	// run guards Run: a Worker runs once.
	run lifecycle.Once

	// queues are the fetchers, one per queue (fetcher.go).
	queues []*queueRunner
	// The background loops, each in its own file, started by Run.
	pauser       pauser       // pauser.go
	listener     listener     // listener.go
	heartbeater  heartbeater  // heartbeater.go
	cancelPoller cancelPoller // cancelpoller.go
	rescuer      rescuer      // rescuer.go
	cleaner      cleaner      // cleaner.go
	// The duties of the worker that leads maintenance (the breakers are
	// shared by every worker), each in its own file too.
	seriesWriter  seriesWriter  // serieswriter.go
	operator      operator      // operator.go
	scheduler     scheduler     // scheduler.go
	breakerSharer breakerSharer // breakersharer.go

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

	// outcomeGen counts the batches of outcomes the completer recorded:
	// a fetch that reads it before and after sees whether an outcome
	// (which may free a slot of a limit) landed while it ran
	// (fetcher.go).
	outcomeGen atomic.Uint64
	// recheck and maxRecheck are limitRecheck and maxLimitRecheck; tests
	// in the package change them before Run.
	recheck, maxRecheck time.Duration
	// afterOutcomes, when not nil, is called by the completer once it has
	// recorded a batch of outcomes and woken the queues waiting on slots
	// (a hook for tests in the package).
	afterOutcomes func()
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
	// leaseEnd is when the lease ends as last written (the fetch, the
	// last heartbeat that succeeded); zero if unknown.
	leaseEnd time.Time
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
	if opts.AuditRetention <= 0 {
		opts.AuditRetention = store.DefaultAuditRetention
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
		recheck: limitRecheck, maxRecheck: maxLimitRecheck,
		exec: NewExecutor(ExecutorOptions{ID: opts.ID, Policy: opts.Policy, QueuePolicies: opts.QueuePolicies,
			Classifier: opts.Classifier, QueueClassifiers: opts.QueueClassifiers, Breakers: opts.Breakers, RetryBudget: opts.RetryBudget,
			DisableRetryBudget: opts.DisableRetryBudget, MaxErrorLength: opts.MaxErrorLength, Logger: opts.Logger,
			Rand: opts.Rand, Observer: obs, Now: client.now, TracerProvider: client.tp}),
	}
	// The executor reads the client's clock; its spans take the SDK's own
	// reading of the same moment (no timestamp option to allocate) unless
	// that clock was injected.
	w.exec.clocked = client.clocked
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
	slots := 0
	for _, q := range w.queues {
		slots += q.concurrency
	}
	w.completer = newCompleter(w, defaultMaxPending(slots))
	w.pauser.w, w.listener.w, w.cancelPoller.w, w.rescuer.w = w, w, w, w
	w.seriesWriter.w, w.operator.w, w.scheduler.w, w.breakerSharer.w = w, w, w, w
	w.heartbeater = heartbeater{w: w, asked: make(chan struct{}, 1)}
	w.cleaner = cleaner{w: w, first: cleanerFirst}
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
	if w.run.State() != lifecycle.Idle {
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
	ctx, finish, err := w.run.Start(ctx)
	if err != nil {
		return ErrWorkerRan
	}
	defer finish()
	w.warnPeriodic(periodic)

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
	for _, q := range w.queues {
		unregister := w.client.register(q.name, q.wake)
		defer unregister()
		q.start(ctx)
	}
	w.pauser.start(ctx)
	// The loops that outlive ctx, until every outcome is written, are
	// stopped after the handlers.
	bgCtx := context.WithoutCancel(ctx)
	// A store shared by several processes tells this worker when another
	// process made jobs due, and elects one process for maintenance.
	if n, ok := w.store.(store.Notifier); ok {
		w.listener.start(ctx, n)
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
	w.heartbeater.start(bgCtx)
	if cc, ok := w.store.(store.CancelChecker); ok {
		if _, notifies := w.store.(store.Notifier); !notifies {
			w.cancelPoller.start(bgCtx, cc)
		}
	}
	w.rescuer.start(ctx)
	w.cleaner.start(ctx)
	w.seriesWriter.start(ctx)
	w.operator.start(ctx)
	w.scheduler.start(ctx, periodic)
	w.completer.start(bgCtx)
	w.breakerSharer.start(ctx)

	<-ctx.Done()
	for _, q := range w.queues {
		q.stop()
	}
	// The handlers must end: those that wait for the completer to take
	// their outcomes no longer do (the outcomes are still written).
	w.completer.unhold()
	w.log.Info("worker stopping: waiting for running handlers", "worker", w.id, "running", w.runningCount(),
		"timeout", w.opts.ShutdownTimeout)
	ended := lifecycle.Drain(lifecycle.WaitGroupDone(&w.active), w.opts.ShutdownTimeout, func() {
		w.log.Warn("shutdown timeout: canceling running handlers", "worker", w.id, "running", w.runningCount())
		w.hardCancel(ErrShutdown)
	}, 5*time.Second)
	if !ended {
		w.log.Error("handlers ignore cancellation; releasing their jobs", "worker", w.id, "running", w.runningCount())
		// Their attempts, released, are not reported when they end.
		w.gate.close()
		w.releaseAll()
	}
	for _, q := range w.queues {
		q.stopHandlers() // every leased job was handled: the handler goroutines exit
	}
	w.completer.stopping.Store(true)
	w.completer.drain()
	for _, l := range w.loops() {
		l.stop()
	}
	w.deregister()
	w.log.Info("worker stopped", "worker", w.id)
	return nil
}

// loops returns the worker's background loops but its fetchers, in the
// order Run stops them.
func (w *Worker) loops() []*loop {
	return []*loop{&w.pauser.loop, &w.listener.loop, &w.heartbeater.loop, &w.cancelPoller.loop, &w.rescuer.loop,
		&w.cleaner.loop, &w.seriesWriter.loop, &w.operator.loop, &w.scheduler.loop, &w.completer.loop, &w.breakerSharer.loop}
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
		w.completer.submitNoWait(r.queue, w.exec.Release(r.job, now))
	}
}

func attemptStart(j *Job, fallback time.Time) time.Time {
	if j.AttemptedAt != nil {
		return *j.AttemptedAt
	}
	return fallback
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
	re := runningEntry{job: j, ctx: ctx, cancel: cancel, queue: q, progress: progress}
	if j.LeaseUntil != nil {
		re.leaseEnd = *j.LeaseUntil
	}
	w.running[lease] = re
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
