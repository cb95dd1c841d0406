package redrive

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redrivehq/redrive/breaker"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/internal/fingerprint"
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
	// Breakers holds the circuit breakers of dependencies (default: a
	// registry with breaker.DefaultConfig()).
	Breakers *breaker.Registry
	// RetryBudget configures the per-queue retry budget (default ratio
	// 20%, floor 10 retries per 10s). Set DisableRetryBudget to turn it off.
	RetryBudget        retry.BudgetConfig
	DisableRetryBudget bool
	// LeaseDuration is how long a fetched job is leased (default 30s). A
	// worker heartbeats every LeaseDuration/3 while its handlers run; a
	// lease that expires is rescued as a failed attempt (lease_expired).
	LeaseDuration time.Duration
	// RescueInterval is how often expired leases are looked for (default 5s).
	RescueInterval time.Duration
	// PollInterval bounds how long the worker sleeps without looking for
	// work another process may have added (default 1s). Work enqueued or
	// retried in this process wakes it at once, and it always wakes at the
	// next job's due time. It is also how often the worker reads which
	// queues are paused (see Client.PauseQueue); pauses and resumes made
	// through its own Client apply at once.
	PollInterval time.Duration
	// FetchBatch bounds how many jobs one fetch leases (default: the
	// queue's concurrency, at most 1000).
	FetchBatch int
	// Lookahead lets the worker lease jobs due within this window and
	// start each at its due time itself, so a retry due at T starts at T
	// rather than a database round trip later (default 20ms; negative
	// disables).
	Lookahead time.Duration
	// FetchCooldown is how long a busy queue waits, once a slot frees up,
	// for more slots before fetching, so that fetches stay batched
	// (default 1ms; negative disables). A queue with most slots free
	// fetches at once, so due jobs are not delayed by it.
	FetchCooldown time.Duration
	// ShutdownTimeout is how long Run lets running handlers finish after
	// its context ends before canceling them (default 30s).
	ShutdownTimeout time.Duration
	// CompletedRetention is how long completed and canceled jobs are kept
	// (default 24h).
	CompletedRetention time.Duration
	// DLQMaxAge is how long dead jobs are kept (default 168h).
	DLQMaxAge time.Duration
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
}

// Handler runs one attempt of a job. A nil error completes the job; an
// error is classified (see the failure package) and the job retried or
// moved to the DLQ by its policy. Return Snooze(d) to run again later
// without using an attempt.
type Handler func(ctx context.Context, job *Job) error

// HandlerOption configures a handler.
type HandlerOption func(*handlerConfig)

type handlerConfig struct {
	timeout    time.Duration
	policy     *retry.Policy
	dependency string
}

// Timeout bounds each attempt of the kind: the handler's context ends after
// d and the attempt counts as a transient failure.
func Timeout(d time.Duration) HandlerOption { return func(h *handlerConfig) { h.timeout = d } }

// Policy sets the retry policy of the kind (a job's own policy still wins).
func Policy(p retry.Policy) HandlerOption { return func(h *handlerConfig) { h.policy = &p } }

// UsesDependency declares the dependency (circuit breaker name) the kind
// calls; a job's own Dependency wins.
func UsesDependency(name string) HandlerOption {
	return func(h *handlerConfig) { h.dependency = name }
}

type handler struct {
	fn  Handler
	cfg handlerConfig
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

	mu       sync.RWMutex
	handlers map[string]*handler
	started  bool

	breakers *breaker.Registry
	policy   retry.Policy

	queues []*queueRunner

	runMu   sync.Mutex
	running map[int64]*runningJob

	completer *completer
	active    sync.WaitGroup
	// leading reports whether this worker runs maintenance (rescue,
	// retention): always, unless the store elects one process for it.
	leading func() bool
	// pauseMu orders the paused-queue refreshes with the pauses and
	// resumes of the local Client; pauseGen counts the latter, so that a
	// refresh that read the store before one of them is discarded.
	pauseMu  sync.Mutex
	pauseGen atomic.Uint64
	// hardCtx is the parent of every handler's context; it is canceled
	// when the shutdown deadline passes.
	hardCtx    context.Context
	hardCancel context.CancelCauseFunc
}

type runningJob struct {
	// Context is the attempt's context; runningJob is itself the context
	// handed to the handler, so that Record finds the attempt without an
	// allocation per job.
	context.Context
	job    *Job
	cancel context.CancelCauseFunc
	queue  *queueRunner
	result atomic.Pointer[attemptResult] // set by Record
}

// Value returns the running job for Record, and defers to the attempt's
// context for any other key.
func (r *runningJob) Value(key any) any {
	if key == (attemptKey{}) {
		return r
	}
	return r.Context.Value(key)
}

// NewWorker returns a worker that takes jobs through client's store.
func NewWorker(client *Client, opts WorkerOptions) *Worker {
	if len(opts.Queues) == 0 {
		opts.Queues = map[string]int{DefaultQueue: 10}
	}
	if opts.ID == "" {
		host, _ := os.Hostname()
		var b [3]byte
		rand.Read(b[:])
		opts.ID = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
	}
	if opts.Policy == nil {
		p := retry.DefaultPolicy()
		opts.Policy = &p
	}
	if opts.Breakers == nil {
		opts.Breakers = breaker.NewRegistry(breaker.DefaultConfig())
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
		opts.Lookahead = 20 * time.Millisecond
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
	if opts.StatsRetention <= 0 {
		opts.StatsRetention = DefaultStatsRetention
	}
	if opts.MaxErrorLength <= 0 {
		opts.MaxErrorLength = 4096
	}
	if opts.Logger == nil {
		opts.Logger = client.log
	}
	w := &Worker{
		client:   client,
		store:    client.store,
		log:      opts.Logger,
		opts:     opts,
		id:       opts.ID,
		handlers: map[string]*handler{},
		breakers: opts.Breakers,
		policy:   *opts.Policy,
		running:  map[int64]*runningJob{},
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
		qr := &queueRunner{w: w, name: q, concurrency: conc, batch: batch, wakeC: make(chan struct{}, 1), freeC: make(chan struct{}, 1),
			jobsC: make(chan *Job, conc)}
		if !opts.DisableRetryBudget {
			qr.budget = retry.NewBudget(opts.RetryBudget)
		}
		if p, ok := opts.QueuePolicies[q]; ok {
			qr.policy = &p
		}
		w.queues = append(w.queues, qr)
	}
	w.completer = newCompleter(w)
	return w
}

// ID returns the worker's id, as recorded in leases.
func (w *Worker) ID() string { return w.id }

// Breakers returns the worker's circuit breaker registry.
func (w *Worker) Breakers() *breaker.Registry { return w.breakers }

// HandleFunc registers the handler of a job kind. Registering after Run
// started, or twice for one kind, panics: both are programming errors.
func (w *Worker) HandleFunc(kind string, fn Handler, opts ...HandlerOption) {
	if kind == "" || fn == nil {
		panic("redrive: HandleFunc needs a kind and a handler")
	}
	h := &handler{fn: fn}
	for _, o := range opts {
		o(&h.cfg)
	}
	if h.cfg.policy != nil {
		if err := h.cfg.policy.Validate(); err != nil {
			panic(fmt.Sprintf("redrive: handler %q: invalid policy: %v", kind, err))
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		panic("redrive: HandleFunc called after Run")
	}
	if _, dup := w.handlers[kind]; dup {
		panic(fmt.Sprintf("redrive: handler for kind %q registered twice", kind))
	}
	w.handlers[kind] = h
}

// Handle registers a typed handler: the job's payload is decoded into a T
// (an undecodable payload is a permanent failure) and passed to fn.
func Handle[T any](w *Worker, kind string, fn func(ctx context.Context, job *Job, args T) error, opts ...HandlerOption) {
	w.HandleFunc(kind, func(ctx context.Context, job *Job) error {
		var args T
		if err := json.Unmarshal(job.Payload, &args); err != nil {
			return failure.Wrap(failure.Permanent, fmt.Errorf("decode payload of kind %q: %w", kind, err))
		}
		return fn(ctx, job, args)
	}, opts...)
}

// Run works until ctx ends, then shuts down gracefully: it stops fetching,
// lets running handlers finish for up to ShutdownTimeout, then cancels
// them (cause ErrShutdown); jobs interrupted that way go back to pending
// without using an attempt. Run returns nil after a clean shutdown.
func (w *Worker) Run(ctx context.Context) error {
	w.mu.Lock()
	if w.started {
		w.mu.Unlock()
		return errors.New("redrive: worker already running")
	}
	w.started = true
	w.mu.Unlock()

	w.hardCtx, w.hardCancel = context.WithCancelCause(context.WithoutCancel(ctx))
	defer w.hardCancel(nil)

	w.log.Info("worker starting", "worker", w.id, "queues", w.opts.Queues)
	// Pauses and resumes through the local Client apply at once; those of
	// other processes are read every PollInterval, and once before the
	// first fetch.
	for _, q := range w.queues {
		unregister := w.client.registerPause(q.name, func(paused bool) { w.applyLocalPause(q, paused) })
		defer unregister()
	}
	w.refreshPaused(ctx)
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
	bg.Go(func() { w.rescueLoop(ctx) })
	bg.Go(func() { w.cleanupLoop(ctx) })
	bg.Go(func() { w.statsLoop(ctx) })
	bg.Go(func() { w.completer.loop(bgCtx) })

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
			w.releaseAll()
		}
	}
	for _, q := range w.queues {
		close(q.jobsC) // every leased job was handled: the handler goroutines exit
	}
	w.completer.drain()
	bgCancel()
	bg.Wait()
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
		w.completer.submit(r.queue, w.releaseOutcome(r.job, now))
	}
}

func (w *Worker) releaseOutcome(j *Job, now time.Time) store.Outcome {
	return store.Outcome{JobID: j.ID, Queue: j.Queue, Attempt: j.Attempt, Worker: w.id, Kind: store.Release, At: now,
		Event: &store.Event{Kind: store.EventReleased, Attempt: j.Attempt, At: attemptStart(j, now), Worker: w.id,
			Reason: "shutdown", Duration: store.Duration(now.Sub(attemptStart(j, now)))}}
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
	policy      *retry.Policy
	budget      *retry.Budget

	active atomic.Int64
	idle   atomic.Int64 // handler goroutines waiting for a job
	jobsC  chan *Job    // leased jobs handed to idle handler goroutines
	wakeC  chan struct{}
	freeC  chan struct{}
	hint   atomic.Int64 // earliest due time (unix nanos) announced by a wake-up, 0 = none

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

// dispatch hands a leased job to an idle handler goroutine, starting one
// when none is idle. Handler goroutines live as long as the worker, so
// their stacks, once grown, are reused rather than grown again per job.
// A goroutine counts itself idle before it frees its slot, so there are
// never more goroutines than the queue's concurrency.
func (q *queueRunner) dispatch(j *Job) {
	for {
		n := q.idle.Load()
		if n == 0 {
			break
		}
		if q.idle.CompareAndSwap(n, n-1) {
			q.jobsC <- j
			return
		}
	}
	go q.handlerLoop(j)
}

func (q *queueRunner) handlerLoop(j *Job) {
	for {
		q.w.execute(q, j)
		q.idle.Add(1)
		q.release()
		var ok bool
		if j, ok = <-q.jobsC; !ok {
			return
		}
	}
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
		jobs, err := w.store.Fetch(ctx, store.FetchParams{Queue: q.name, Limit: limit, Now: now,
			DueBy: now.Add(w.opts.Lookahead), LeaseUntil: now.Add(w.opts.LeaseDuration), Worker: w.id})
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

// policyFor resolves the retry policy of a job: its own, its kind's, its
// queue's, the worker's default; MaxRetries on the job overrides the count.
func (w *Worker) policyFor(q *queueRunner, j *Job, h *handler) retry.Policy {
	p := w.policy
	switch {
	case len(j.Policy) > 0 && string(j.Policy) != "null":
		var jp retry.Policy
		if err := json.Unmarshal(j.Policy, &jp); err == nil && jp.Validate() == nil {
			p = jp
		} else {
			w.log.Warn("job has an unusable policy; using the default", "job_id", j.ID, "kind", j.Kind)
		}
	case h != nil && h.cfg.policy != nil:
		p = *h.cfg.policy
	case q.policy != nil:
		p = *q.policy
	}
	if j.MaxRetries >= 0 {
		p.MaxRetries = j.MaxRetries
	}
	return p
}

// execute runs one leased attempt and submits its outcome.
// The caller frees the queue slot afterwards.
func (w *Worker) execute(q *queueRunner, j *Job) {
	defer w.active.Done()
	// A job leased within the lookahead starts at its due time.
	if wait := time.Until(j.RunAt); wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-w.hardCtx.Done():
			t.Stop()
		}
	}
	start := w.client.now()
	j.AttemptedAt = &start
	if q.budget != nil {
		q.budget.Attempt()
	}
	w.mu.RLock()
	h := w.handlers[j.Kind]
	w.mu.RUnlock()

	dep := j.Dependency
	if dep == "" && h != nil {
		dep = h.cfg.dependency
	}
	var br *breaker.Breaker
	var tok breaker.Token
	if dep != "" {
		br = w.breakers.Get(dep)
		var err error
		tok, err = br.Allow()
		if err != nil {
			w.finish(q, j, w.deferOutcome(q, j, br, err, start), err, start, start)
			return
		}
	}

	cctx, cancel := context.WithCancelCause(w.hardCtx)
	defer cancel(nil)
	rj := &runningJob{Context: cctx, job: j, cancel: cancel, queue: q}
	var ctx context.Context = rj
	w.runMu.Lock()
	w.running[j.ID] = rj
	w.runMu.Unlock()
	defer func() {
		w.runMu.Lock()
		delete(w.running, j.ID)
		w.runMu.Unlock()
	}()

	var err error
	if h == nil {
		err = fmt.Errorf("no handler registered for kind %q on worker %s", j.Kind, w.id)
	} else {
		hctx := ctx
		if h.cfg.timeout > 0 {
			var c context.CancelFunc
			hctx, c = context.WithTimeout(ctx, h.cfg.timeout)
			defer c()
		}
		err = safeCall(hctx, h.fn, j)
	}
	if br != nil {
		br.Record(tok, err)
	}
	end := w.client.now()
	o := w.decide(q, j, h, err, context.Cause(cctx), start, end)
	if o.Kind == store.Complete {
		if r := rj.result.Load(); r != nil {
			o.Event = &store.Event{Kind: store.EventCompleted, Attempt: j.Attempt, At: start, Duration: o.Duration,
				Worker: w.id, Reason: w.bound(r.reason), Note: w.bound(r.note)}
		}
	}
	w.finish(q, j, o, err, start, end)
}

// finish reports the outcome of an attempt to the observer, if any, then
// hands it to the completer to store.
func (w *Worker) finish(q *queueRunner, j *Job, o store.Outcome, err error, start, end time.Time) {
	if w.opts.Observer != nil {
		w.observe(j, &o, err, start, end)
	}
	w.completer.submit(q, o)
}

func safeCall(ctx context.Context, fn Handler, j *Job) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("handler panicked: %v\n%s", p, debug.Stack())
		}
	}()
	return fn(ctx, j)
}

// deferOutcome puts a job back until its open breaker half-opens, without
// using an attempt.
func (w *Worker) deferOutcome(q *queueRunner, j *Job, br *breaker.Breaker, err error, now time.Time) store.Outcome {
	ready := br.ReadyAt()
	var open *breaker.OpenError
	if errors.As(err, &open) && open.ReadyAt.After(ready) {
		ready = open.ReadyAt // half-open with every probe out: when they will be settled
	}
	if ready.Before(now) {
		ready = now.Add(10 * time.Millisecond)
	}
	w.log.Info("dependency breaker open; job deferred", "job_id", j.ID, "kind", j.Kind, "queue", q.name,
		"dependency", br.Name(), "until", ready)
	return store.Outcome{JobID: j.ID, Queue: j.Queue, Attempt: j.Attempt, Worker: w.id, Kind: store.Snooze, At: now, RunAt: ready,
		Event: &store.Event{Kind: store.EventDeferred, Attempt: j.Attempt, At: now, Worker: w.id,
			Reason: "breaker_open:" + br.Name(), Delay: store.Duration(ready.Sub(now))},
		Counters: []store.Counter{{Queue: q.name, Name: store.StatDeferred, N: 1}}}
}

// decide turns a handler's result into the outcome to store.
func (w *Worker) decide(q *queueRunner, j *Job, h *handler, err, cause error, start, end time.Time) store.Outcome {
	o := store.Outcome{JobID: j.ID, Queue: j.Queue, Attempt: j.Attempt, Worker: w.id, At: end}
	dur := store.Duration(end.Sub(start))
	if err == nil {
		o.Kind = store.Complete
		o.Duration = dur
		o.Counters = []store.Counter{{Queue: q.name, Name: store.StatSucceeded, N: 1}}
		if j.Attempt > 1 {
			o.Counters = append(o.Counters, store.Counter{Queue: q.name, Name: store.StatSucceededAfterRetry, N: 1})
		}
		return o
	}
	// A breaker the handler consulted itself (breaker.Do, rhttp) is open:
	// defer until it half-opens, without using an attempt.
	var open *breaker.OpenError
	if errors.As(err, &open) {
		ready := open.ReadyAt
		if !ready.After(end) {
			ready = end.Add(10 * time.Millisecond)
		}
		o.Kind = store.Snooze
		o.RunAt = ready
		o.Event = &store.Event{Kind: store.EventDeferred, Attempt: j.Attempt, At: start, Duration: dur, Worker: w.id,
			Reason: "breaker_open:" + open.Name, Delay: store.Duration(ready.Sub(end)), Error: w.bound(err.Error())}
		o.Counters = []store.Counter{{Queue: q.name, Name: store.StatDeferred, N: 1}}
		return o
	}
	var sn *SnoozeError
	if errors.As(err, &sn) {
		o.Kind = store.Snooze
		o.RunAt = end.Add(sn.Delay)
		o.Event = &store.Event{Kind: store.EventSnoozed, Attempt: j.Attempt, At: start, Duration: dur, Worker: w.id,
			Delay: store.Duration(sn.Delay)}
		o.Counters = []store.Counter{{Queue: q.name, Name: store.StatSnoozed, N: 1}}
		return o
	}
	switch {
	case errors.Is(cause, ErrShutdown):
		w.log.Info("job interrupted by shutdown; back to pending", "job_id", j.ID, "kind", j.Kind, "attempt", j.Attempt)
		return w.releaseOutcome(j, end)
	case errors.Is(cause, ErrJobCanceled):
		w.log.Info("job canceled while running", "job_id", j.ID, "kind", j.Kind, "attempt", j.Attempt)
		o.Kind = store.Cancel
		o.Event = &store.Event{Kind: store.EventCanceled, Attempt: j.Attempt, At: start, Duration: dur, Worker: w.id,
			Error: w.bound(err.Error())}
		o.Counters = []store.Counter{{Queue: q.name, Name: store.StatCanceled, N: 1}}
		return o
	}
	v := w.opts.Classifier.Classify(err)
	return w.failOutcome(q, j, h, o, v, err.Error(), start, dur)
}

// failOutcome applies the retry policy to a failed attempt.
func (w *Worker) failOutcome(q *queueRunner, j *Job, h *handler, o store.Outcome, v failure.Verdict, msg string, start time.Time, dur store.Duration) store.Outcome {
	p := w.policyFor(q, j, h)
	var prev time.Duration
	if j.Attempt >= 2 {
		np := p
		np.Jitter = retry.JitterNone
		prev = np.Delay(j.Attempt-2, 0, nil)
	}
	d := p.Decide(retry.Input{Class: v.Class, Attempt: j.Attempt, RetryAfter: v.RetryAfter, PrevDelay: prev}, w.opts.Rand)
	msg = w.bound(msg)
	class := v.Class.String()
	o.Error, o.Class = msg, v.Class
	o.Counters = []store.Counter{{Queue: q.name, Name: store.StatFailed, Class: class, N: 1}}
	ev := &store.Event{Attempt: j.Attempt, At: start, Duration: dur, Class: class, Error: msg, Reason: v.Reason, Worker: w.id}
	o.Duration = dur
	o.Event = ev
	if d.Retry {
		delay := d.Delay
		if q.budget != nil {
			delay = q.budget.Retry(delay)
		}
		o.Kind = store.Retry
		o.RunAt = o.At.Add(delay)
		ev.Kind, ev.Delay = store.EventRetry, store.Duration(delay)
		o.Counters = append(o.Counters, store.Counter{Queue: q.name, Name: store.StatRetried, N: 1})
		w.log.Info("job failed; retry scheduled", "job_id", j.ID, "kind", j.Kind, "queue", q.name, "attempt", j.Attempt,
			"max_retries", p.MaxRetries, "class", class, "reason", v.Reason, "delay", delay, "error", msg)
		return o
	}
	reason := d.Reason
	o.Kind = store.Bury
	o.DeadReason = reason
	o.Fingerprint = fingerprint.Of(class, v.Reason, msg)
	ev.Kind = store.EventDead
	if v.Reason != "" && reason == retry.ReasonExhausted {
		ev.Reason = v.Reason
	}
	o.Counters = append(o.Counters, store.Counter{Queue: q.name, Name: store.StatDead, Class: class, N: 1})
	w.log.Warn("job moved to the DLQ", "job_id", j.ID, "kind", j.Kind, "queue", q.name, "attempt", j.Attempt,
		"class", class, "reason", reason, "error", msg)
	return o
}

func (w *Worker) bound(s string) string {
	if len(s) > w.opts.MaxErrorLength {
		return s[:w.opts.MaxErrorLength] + "…"
	}
	return s
}

func (w *Worker) heartbeatLoop(ctx context.Context) {
	every(ctx, w.opts.LeaseDuration/3, func() { w.heartbeat(ctx) })
}

// heartbeat extends the leases of the running jobs and cancels those
// whose cancellation was requested.
func (w *Worker) heartbeat(ctx context.Context) {
	w.runMu.Lock()
	ids := make([]int64, 0, len(w.running))
	for id := range w.running {
		ids = append(ids, id)
	}
	w.runMu.Unlock()
	if len(ids) == 0 {
		return
	}
	cancel, err := w.store.Heartbeat(ctx, w.id, ids, w.client.now().Add(w.opts.LeaseDuration))
	if err != nil {
		if ctx.Err() == nil {
			w.log.Error("heartbeat failed", "worker", w.id, "jobs", len(ids), "error", err)
		}
		return
	}
	if len(cancel) > 0 {
		w.runMu.Lock()
		for _, id := range cancel {
			if r, ok := w.running[id]; ok {
				r.cancel(ErrJobCanceled)
			}
		}
		w.runMu.Unlock()
	}
}

// rescueLoop turns expired leases into failed attempts (Transient,
// lease_expired): a killed process loses no job.
func (w *Worker) rescueLoop(ctx context.Context) {
	w.rescue(ctx)
	every(ctx, w.opts.RescueInterval, func() { w.rescue(ctx) })
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
		outs := make([]store.Outcome, 0, len(jobs))
		for _, j := range jobs {
			q := w.queueOrAdhoc(j.Queue)
			w.mu.RLock()
			h := w.handlers[j.Kind]
			w.mu.RUnlock()
			o := store.Outcome{JobID: j.ID, Queue: j.Queue, Attempt: j.Attempt, Worker: j.Worker, At: now}
			msg := fmt.Sprintf("lease expired: worker %s stopped heartbeating", j.Worker)
			v := failure.Verdict{Class: failure.Transient, Reason: "lease_expired"}
			start := attemptStart(j, now)
			o = w.failOutcome(q, j, h, o, v, msg, start, store.Duration(now.Sub(start)))
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

// queueOrAdhoc returns the runner of a queue this worker serves, or a
// runner carrying only the default policy for another queue's job.
func (w *Worker) queueOrAdhoc(name string) *queueRunner {
	for _, q := range w.queues {
		if q.name == name {
			return q
		}
	}
	return &queueRunner{w: w, name: name}
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
// CompletedRetention and dead jobs older than DLQMaxAge are deleted. The
// worker runs it every CleanupInterval; it is exported for tools and tests.
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
	if deleted > 0 {
		w.log.Info("retention cleanup", "deleted", deleted)
	}
	return deleted, nil
}

// completer records outcomes in batches: every outcome submitted while a
// batch is being written joins the next one.
type completer struct {
	w       *Worker
	mu      sync.Mutex
	pending []pendingOutcome
	signal  chan struct{}
	idle    sync.Cond
	busy    bool
}

type pendingOutcome struct {
	q *queueRunner
	o store.Outcome
}

func newCompleter(w *Worker) *completer {
	c := &completer{w: w, signal: make(chan struct{}, 1)}
	c.idle.L = &c.mu
	return c
}

func (c *completer) submit(q *queueRunner, o store.Outcome) {
	c.mu.Lock()
	c.pending = append(c.pending, pendingOutcome{q, o})
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
		batch := c.pending
		c.pending = nil
		c.busy = len(batch) > 0
		c.mu.Unlock()
		if len(batch) == 0 {
			return
		}
		outs := make([]store.Outcome, len(batch))
		for i := range batch {
			outs[i] = batch[i].o
		}
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
			c.w.log.Error("recording job outcomes failed; retrying", "jobs", len(outs), "attempt", attempt, "delay", d, "error", err)
			if attempt >= 120 {
				c.w.log.Error("giving up recording job outcomes after two minutes; their leases will expire and be rescued", "jobs", len(outs))
				applied = make([]bool, len(outs))
				break
			}
			time.Sleep(d)
		}
		for i, b := range batch {
			if !applied[i] {
				c.w.log.Warn("outcome discarded: the job is no longer leased by this worker", "job_id", b.o.JobID,
					"attempt", b.o.Attempt, "worker", b.o.Worker)
				continue
			}
			switch b.o.Kind {
			case store.Retry, store.Snooze, store.Release:
				at := b.o.RunAt
				if b.o.Kind == store.Release {
					at = b.o.At
				}
				c.w.client.wake(b.q.name, at)
			}
		}
		c.mu.Lock()
		c.busy = false
		c.mu.Unlock()
	}
}
