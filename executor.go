package redrive

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sort"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/trace"

	"github.com/redrivehq/redrive/breaker"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/internal/fingerprint"
	"github.com/redrivehq/redrive/internal/tracectx"
	"github.com/redrivehq/redrive/retry"
	"github.com/redrivehq/redrive/store"
)

// Outcome is the decision about one attempt: complete, retry at a time,
// move to the DLQ, snooze, release or cancel, with the history event and
// the statistics it adds. A Worker hands it to its store; a broker
// transport turns it into acks and publishes.
type Outcome = store.Outcome

// ReasonUndecodable is the dead reason of a job whose payload (or, on a
// broker, whose message) cannot be decoded: it needs an edited payload
// before a redrive can succeed.
const ReasonUndecodable = "undecodable"

// ReasonUndecryptable is the dead reason of a job whose payload is sealed
// (encrypted at rest) and could not be opened: its key id is not among
// the store's payload keys, or its tag does not match (Job.PayloadError
// says which). Configure the key and redrive it.
const ReasonUndecryptable = store.ReasonUndecryptable

// ExecutorOptions configure an Executor. Zero fields take the defaults
// given.
type ExecutorOptions struct {
	// ID names who runs the attempts, in history events, logs and (for a
	// Worker) leases. Default: host-pid-random.
	ID string
	// Policy is the default retry policy (default retry.DefaultPolicy()).
	Policy *retry.Policy
	// QueuePolicies override Policy per queue.
	QueuePolicies map[string]retry.Policy
	// Classifier classifies handler errors (default: failure.Classify).
	Classifier *failure.Classifier
	// QueueClassifiers override Classifier per queue, for status
	// overrides or message rules that hold on one queue only ("404 is
	// transient on this queue").
	QueueClassifiers map[string]*failure.Classifier
	// Breakers holds the circuit breakers of dependencies (default: a
	// registry with breaker.DefaultConfig()). A failure the job's
	// classifier finds RateLimited is recorded on the dependency's
	// breaker marked as such (breaker.MarkRateLimited), so that by default
	// it does not count against it (see breaker.Config.CountRateLimited).
	Breakers *breaker.Registry
	// RetryBudget configures the per-queue retry budget (default: retries
	// may exceed 20% of recent attempts only beyond a floor of 100 retries
	// per 10s; see retry.BudgetConfig). A retry it pushes out is logged
	// and counted as budget_deferred. Set DisableRetryBudget to turn it
	// off.
	RetryBudget        retry.BudgetConfig
	DisableRetryBudget bool
	// MaxErrorLength bounds the error message and notes kept per attempt
	// (default 4096 bytes).
	MaxErrorLength int
	// Logger receives the logs of attempts (default slog.Default()).
	Logger *slog.Logger
	// Rand is the jitter source (default: math/rand/v2's global source).
	Rand retry.Source
	// Observer, when set, is told of every attempt (see Observer).
	Observer Observer
	// Now is the clock (default time.Now).
	Now func() time.Time
	// TracerProvider, when set, makes the span of each attempt, a child
	// of the span that enqueued its job (Job.Trace), and gives the
	// handler a context with it. Nil turns tracing off, at no cost.
	TracerProvider trace.TracerProvider
	// MessagingSystem is the messaging.system attribute of the attempt
	// spans (default "redrive"): a broker transport sets its own,
	// "rabbitmq" or "kafka".
	MessagingSystem string
	// KeepProgress makes Execute keep what the handler reports with
	// Progress, as a Worker does: a successful attempt's outcome carries
	// the last progress reported (Outcome.Progress). Off, Progress does
	// nothing on an Executor used alone (a broker transport, which has
	// nowhere to keep it).
	KeepProgress bool
}

// Executor runs attempts of jobs with their registered handlers and
// decides what becomes of each: it applies the handler's timeout, checks
// the dependency's circuit breaker, recovers panics, classifies errors,
// applies the retry policy and the retry budget, and writes the history
// event, the logs and the observer's report.
//
// A Worker runs its jobs through one. The broker transports (packages
// amqp and kafka) run theirs through one too, so that a handler, its
// options, the policies, the classifier, the breakers and the logs behave
// the same whether a job came from a database or from a broker. Only what
// an Outcome becomes differs: a row update, or acks and publishes.
//
// Register handlers with HandleFunc or Handle before the first Execute.
// An Executor is safe for concurrent use.
type Executor struct {
	opts     ExecutorOptions
	id       string
	log      *slog.Logger
	now      func() time.Time
	clocked  bool // now is not time.Now: spans take its readings
	breakers *breaker.Registry
	policy   retry.Policy
	tracer   trace.Tracer

	mu       sync.RWMutex
	handlers map[string]*handler

	// lanes holds each queue's policy and retry budget, copied on write
	// so that a lookup takes no lock.
	lanesMu sync.Mutex
	lanes   atomic.Pointer[map[string]*lane]
}

// lane is what an Executor keeps per queue.
type lane struct {
	name       string
	policy     *retry.Policy       // nil: the executor's default
	classifier *failure.Classifier // the queue's, or the executor's default
	budget     *retry.Budget       // nil: no budget
	// budgetLogged is the unix second of the last log line about this
	// queue's budget pushing retries out.
	budgetLogged atomic.Int64
}

// NewExecutor returns an Executor with opts' defaults filled in.
func NewExecutor(opts ExecutorOptions) *Executor {
	if opts.ID == "" {
		opts.ID = defaultWorkerID()
	}
	if opts.Policy == nil {
		p := retry.DefaultPolicy()
		opts.Policy = &p
	}
	if opts.Breakers == nil {
		opts.Breakers = breaker.NewRegistry(breaker.DefaultConfig())
	}
	if opts.MaxErrorLength <= 0 {
		opts.MaxErrorLength = 4096
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	clocked := opts.Now != nil
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.MessagingSystem == "" {
		opts.MessagingSystem = messagingSystem
	}
	e := &Executor{opts: opts, id: opts.ID, log: opts.Logger, now: opts.Now, clocked: clocked, breakers: opts.Breakers,
		policy: *opts.Policy, handlers: map[string]*handler{}, tracer: newTracer(opts.TracerProvider)}
	lanes := map[string]*lane{}
	e.lanes.Store(&lanes)
	return e
}

// ID returns the executor's id, as recorded in history events.
func (e *Executor) ID() string { return e.id }

// Breakers returns the executor's circuit breaker registry.
func (e *Executor) Breakers() *breaker.Registry { return e.breakers }

// Logger returns the executor's logger.
func (e *Executor) Logger() *slog.Logger { return e.log }

// Now returns the executor's clock reading.
func (e *Executor) Now() time.Time { return e.now() }

// Registrar is what handlers are registered with: a Worker, an Executor,
// or a broker transport's consumer.
type Registrar interface {
	HandleFunc(kind string, fn Handler, opts ...HandlerOption)
}

// HandleFunc registers the handler of a job kind. Registering twice for
// one kind, an empty kind, a nil handler or an invalid policy panic: all
// are programming errors.
func (e *Executor) HandleFunc(kind string, fn Handler, opts ...HandlerOption) {
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
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, dup := e.handlers[kind]; dup {
		panic(fmt.Sprintf("redrive: handler for kind %q registered twice", kind))
	}
	e.handlers[kind] = h
}

// KindTimeout returns the timeout of each attempt of kind's handler
// (Timeout), 0 when it has none or no handler is registered.
func (e *Executor) KindTimeout(kind string) time.Duration {
	if h := e.handler(kind); h != nil {
		return h.cfg.timeout
	}
	return 0
}

// Kinds returns the registered kinds, sorted.
func (e *Executor) Kinds() []string {
	e.mu.RLock()
	defer e.mu.RUnlock()
	kinds := make([]string, 0, len(e.handlers))
	for k := range e.handlers {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	return kinds
}

func (e *Executor) handler(kind string) *handler {
	e.mu.RLock()
	h := e.handlers[kind]
	e.mu.RUnlock()
	return h
}

// lane returns the queue's lane, creating it on first use.
func (e *Executor) lane(queue string) *lane {
	if l, ok := (*e.lanes.Load())[queue]; ok {
		return l
	}
	e.lanesMu.Lock()
	defer e.lanesMu.Unlock()
	old := *e.lanes.Load()
	if l, ok := old[queue]; ok {
		return l
	}
	l := &lane{name: queue, classifier: e.opts.Classifier}
	if p, ok := e.opts.QueuePolicies[queue]; ok {
		l.policy = &p
	}
	if c, ok := e.opts.QueueClassifiers[queue]; ok && c != nil {
		l.classifier = c
	}
	if !e.opts.DisableRetryBudget {
		l.budget = retry.NewBudget(e.opts.RetryBudget)
	}
	next := make(map[string]*lane, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	next[queue] = l
	e.lanes.Store(&next)
	return l
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

// Handle registers a typed handler with r (a Worker, an Executor or a
// transport's consumer): the job's payload is decoded from JSON into a T
// (an undecodable payload is a permanent failure) and passed to fn.
func Handle[T any](r Registrar, kind string, fn func(ctx context.Context, job *Job, args T) error, opts ...HandlerOption) {
	r.HandleFunc(kind, func(ctx context.Context, job *Job) error {
		var args T
		if err := json.Unmarshal(job.Payload, &args); err != nil {
			return &failure.Error{Class: failure.Permanent, Reason: failure.ReasonUndecodablePayload,
				Err: fmt.Errorf("decode payload of kind %q: %w", kind, err)}
		}
		return fn(ctx, job, args)
	}, opts...)
}

// runningJob is the context handed to a handler: the attempt's context,
// plus what Record noted, found without an allocation per job.
type runningJob struct {
	context.Context
	result   atomic.Pointer[attemptResult]   // set by Record
	output   atomic.Pointer[json.RawMessage] // set by SetResult
	attrs    atomic.Pointer[[]any]           // set by LogWith
	progress *progressCell                   // set by Progress; nil outside a Worker
}

// Value returns the running job for Record, and defers to the attempt's
// context for any other key.
func (r *runningJob) Value(key any) any {
	if key == (attemptKey{}) {
		return r
	}
	return r.Context.Value(key)
}

// Execute runs one attempt of j and returns its outcome, already
// reported to the Observer. j.Attempt must be the number of this attempt
// (1 for the first since the job was created or redriven); Execute sets
// j.AttemptedAt.
//
// ctx is the attempt's context. Cancel it with cause ErrShutdown to
// interrupt the attempt for a shutdown (the outcome is Release: no
// attempt used) or with ErrJobCanceled when a user canceled the job (the
// outcome is Cancel).
//
// Execute never panics because of a handler: a panic is a failed attempt
// (Unknown class, retried) with the stack in its error. A handler that
// does not return at all because it called runtime.Goexit (as
// testing.T.FailNow does) fails its attempt the same way: the outcome is
// decided and reported, but the goroutine that called Execute then exits
// too, and Execute does not return it. A caller that settles the job
// itself (a broker consumer) must notice that in a deferred call and
// settle it as a failed attempt (see Fail), or call Execute on a
// goroutine of its own; otherwise the job is never settled.
func (e *Executor) Execute(ctx context.Context, j *Job) Outcome {
	var o Outcome
	var progress *progressCell
	if e.opts.KeepProgress {
		progress = &progressCell{}
	}
	e.execute(ctx, j, progress, &o)
	return o
}

// errGoexit is the failure of a handler that called runtime.Goexit.
var errGoexit = errors.New("handler did not return: it called runtime.Goexit (as testing.T.FailNow does)")

// execute is Execute, with the cell in which the handler's Progress
// calls keep the attempt's progress (nil: they do nothing). It sets *out
// to the outcome even when the handler calls runtime.Goexit, before the
// caller's deferred calls run.
func (e *Executor) execute(ctx context.Context, j *Job, progress *progressCell, out *Outcome) {
	start := e.now()
	j.AttemptedAt = &start
	var br *breaker.Breaker
	if e.tracer != nil {
		var span trace.Span
		ctx, span = e.startAttempt(ctx, j, start, e.clocked)
		defer func() { e.endAttempt(span, j, out, br) }()
	}
	ln := e.lane(j.Queue)
	if ln.budget != nil {
		ln.budget.Attempt()
	}
	h := e.handler(j.Kind)
	if j.PayloadError != "" {
		// The store could not open the sealed payload (an unknown key, a
		// tag that does not match): no attempt can succeed, and the
		// handler must not see a null payload. The breaker is not told.
		err := &failure.Error{Class: failure.Permanent, Reason: store.ReasonUndecryptable, Err: errors.New(j.PayloadError)}
		e.finish(ctx, ln, j, h, nil, breaker.Token{}, &runningJob{Context: ctx, progress: progress}, progress, err, start, out)
		return
	}
	dep := j.Dependency
	if dep == "" && h != nil {
		dep = h.cfg.dependency
	}
	var tok breaker.Token
	if dep != "" {
		br = e.breakers.Get(dep)
		var err error
		tok, err = br.Allow()
		if err != nil {
			*out = e.deferOutcome(j, br, err, start)
			e.report(ctx, j, out, err, start, start)
			return
		}
	}

	rj := &runningJob{Context: ctx, progress: progress}
	var err error
	if h == nil {
		err = fmt.Errorf("no handler registered for kind %q on %s", j.Kind, e.id)
	} else {
		var hctx context.Context = rj
		if h.cfg.timeout > 0 {
			var c context.CancelFunc
			hctx, c = context.WithTimeout(rj, h.cfg.timeout)
			defer c()
		}
		// safeCall recovers panics; a handler that did not return at all
		// called runtime.Goexit, which nothing stops: its attempt is
		// finished here, as the goroutine unwinds, as a panic would be.
		returned := false
		defer func() {
			if !returned {
				e.finish(ctx, ln, j, h, br, tok, rj, progress, fmt.Errorf("%w\n%s", errGoexit, debug.Stack()), start, out)
			}
		}()
		err = safeCall(hctx, h.fn, j)
		returned = true
	}
	e.finish(ctx, ln, j, h, br, tok, rj, progress, err, start, out)
}

// finish records the handler's result err on the breaker, decides the
// attempt's outcome into *out and reports it.
func (e *Executor) finish(ctx context.Context, ln *lane, j *Job, h *handler, br *breaker.Breaker, tok breaker.Token,
	rj *runningJob, progress *progressCell, err error, start time.Time, out *Outcome) {
	if br != nil {
		br.Record(tok, breakerOutcome(ln.classifier, err))
	}
	end := e.now()
	var extra []any
	if a := rj.attrs.Load(); a != nil {
		extra = *a
	}
	o := e.decide(ln, j, h, err, context.Cause(ctx), start, end, extra...)
	if o.Kind == store.Complete {
		o.Progress = progress.final(end)
		if out := rj.output.Load(); out != nil {
			o.Result = *out
		}
		if r := rj.result.Load(); r != nil {
			o.Event = &store.Event{Kind: store.EventCompleted, Attempt: j.Attempt, At: start, Duration: o.Duration,
				Worker: e.id, Reason: e.bound(r.reason), Note: e.bound(r.note)}
		}
	}
	*out = o
	e.report(ctx, j, out, err, start, end)
}

// report tells the observer, if any, of an attempt's outcome.
func (e *Executor) report(ctx context.Context, j *Job, o *Outcome, err error, start, end time.Time) {
	if e.opts.Observer != nil {
		e.observe(ctx, j, o, err, start, end)
	}
}

func safeCall(ctx context.Context, fn Handler, j *Job) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("handler panicked: %v\n%s", p, debug.Stack())
		}
	}()
	return fn(ctx, j)
}

// Fail decides the outcome of an attempt of j that failed for a reason
// found outside its handler (an expired lease, a message that cannot be
// decoded), with the verdict v and the message msg, as if the handler had
// failed that way: by the job's retry policy, with a history event. The
// retry budget does not apply (no dependency was called), and the
// observer is not told (the attempt did not run here).
func (e *Executor) Fail(j *Job, v failure.Verdict, msg string, start, end time.Time) Outcome {
	o := Outcome{JobID: j.ID, Queue: j.Queue, Attempt: j.Attempt, Lease: j.Lease, Worker: e.id, At: end}
	return e.failOutcome(nil, j, e.handler(j.Kind), o, v, msg, start, store.Duration(end.Sub(start)))
}

// Report decides the outcome of an attempt of j that ran outside redrive
// and failed as its runner reported (a consumer in another language that
// rejected a broker message, or said why with a verdict v and a message
// msg), exactly as for a handler that failed that way: by the job's retry
// policy and its queue's retry budget, with a history event, logs, and
// the observer's report. No circuit breaker applies: the dependency was
// called, or not, by the runner. With a TracerProvider, the attempt gets
// its span (from start to end) in the job's trace, as a handler's would.
func (e *Executor) Report(j *Job, v failure.Verdict, msg string, start, end time.Time) Outcome {
	o := e.reportDecide(e.lane(j.Queue), j, v, msg, start, end)
	e.reportTell(j, &o, msg, start, end)
	return o
}

// reportDecide is Report's decision, counted in ln's retry budget (ln
// nil: in none), without its span and the observer's report
// (reportTell).
func (e *Executor) reportDecide(ln *lane, j *Job, v failure.Verdict, msg string, start, end time.Time) Outcome {
	if ln != nil && ln.budget != nil {
		ln.budget.Attempt()
	}
	j.AttemptedAt = &start
	o := Outcome{JobID: j.ID, Queue: j.Queue, Attempt: j.Attempt, Lease: j.Lease, Worker: e.id, At: end}
	return e.failOutcome(ln, j, e.handler(j.Kind), o, v, msg, start, store.Duration(end.Sub(start)))
}

// reportTell makes the span of an attempt decided by reportDecide and
// tells the observer of it.
func (e *Executor) reportTell(j *Job, o *Outcome, msg string, start, end time.Time) {
	if e.tracer != nil {
		// The attempt that ran elsewhere, in the job's trace.
		_, span := e.startAttempt(context.Background(), j, start, true)
		e.endAttempt(span, j, o, nil)
	}
	e.report(context.Background(), j, o, errors.New(msg), start, end)
}

// Release returns the outcome of an attempt of j interrupted at now
// before it could finish (a shutdown): back to pending without using an
// attempt.
func (e *Executor) Release(j *Job, now time.Time) Outcome {
	start := now
	if j.AttemptedAt != nil {
		start = *j.AttemptedAt
	}
	return Outcome{JobID: j.ID, Queue: j.Queue, Attempt: j.Attempt, Lease: j.Lease, Worker: e.id, Kind: store.Release, At: now,
		Event: &store.Event{Kind: store.EventReleased, Attempt: j.Attempt, At: start, Worker: e.id,
			Reason: "shutdown", Duration: store.Duration(now.Sub(start))}}
}

// notStarted returns the outcome of an attempt of j that ended before its
// handler ran, at now, because its context ended with cause: canceled by
// a user (ErrJobCanceled), else released, without using an attempt. It
// is reported as such an attempt of the handler would be.
func (e *Executor) notStarted(j *Job, cause error, now time.Time) Outcome {
	j.AttemptedAt = &now
	var o Outcome
	if errors.Is(cause, ErrJobCanceled) {
		e.log.Info("job canceled before it started", jobAttr(j), "kind", j.Kind, "attempt", j.Attempt)
		o = e.cancelOutcome(j, cause, now, now)
	} else {
		o = e.Release(j, now)
	}
	e.report(context.Background(), j, &o, cause, now, now)
	return o
}

// cancelOutcome is the outcome of an attempt of j canceled by a user,
// which ended with err.
func (e *Executor) cancelOutcome(j *Job, err error, start, end time.Time) Outcome {
	dur := store.Duration(end.Sub(start))
	return Outcome{JobID: j.ID, Queue: j.Queue, Attempt: j.Attempt, Lease: j.Lease, Worker: e.id, At: end, Kind: store.Cancel,
		Event: &store.Event{Kind: store.EventCanceled, Attempt: j.Attempt, At: start, Duration: dur, Worker: e.id,
			Error: e.bound(err.Error())},
		Counters: []store.Counter{{Queue: j.Queue, Name: store.StatCanceled, N: 1}}}
}

// policyFor resolves the retry policy of a job: its own, its kind's, its
// queue's, the executor's default; MaxRetries on the job overrides the
// count.
func (e *Executor) policyFor(ln *lane, j *Job, h *handler) retry.Policy {
	p := e.policy
	switch {
	case len(j.Policy) > 0 && string(j.Policy) != "null":
		var jp retry.Policy
		if err := json.Unmarshal(j.Policy, &jp); err == nil && jp.Validate() == nil {
			p = jp
		} else {
			e.log.Warn("job has an unusable policy; using the default", jobAttr(j), "kind", j.Kind)
		}
	case h != nil && h.cfg.policy != nil:
		p = *h.cfg.policy
	case ln.policy != nil:
		p = *ln.policy
	}
	if j.MaxRetries >= 0 {
		p.MaxRetries = j.MaxRetries
	}
	return p
}

// PolicyFor returns the retry policy that applies to j: its own, its
// kind's, its queue's or the default, with the job's MaxRetries.
func (e *Executor) PolicyFor(j *Job) retry.Policy {
	return e.policyFor(e.lane(j.Queue), j, e.handler(j.Kind))
}

// jobAttr names a job in a log line: by id when it has one (a stored
// job), else by its idempotency key (a broker message's id); and, when
// the job has a trace context, its trace_id and span_id (the span that
// enqueued it, the parent of every attempt's span), so that every line
// about the job leads to its trace.
func jobAttr(j *Job) slog.Attr {
	id := slog.String("message_id", j.IdempotencyKey)
	if j.ID != 0 || j.IdempotencyKey == "" {
		id = slog.Int64("job_id", j.ID)
	}
	traceID, spanID := tracectx.IDs(j.Trace)
	if traceID == "" {
		return id
	}
	// A group without a key: handlers inline its attributes.
	return slog.Attr{Value: slog.GroupValue(id, slog.String("trace_id", traceID), slog.String("span_id", spanID))}
}

// deferOutcome puts a job back until its open breaker half-opens, without
// using an attempt.
func (e *Executor) deferOutcome(j *Job, br *breaker.Breaker, err error, now time.Time) Outcome {
	ready := br.ReadyAt()
	var open *breaker.OpenError
	if errors.As(err, &open) && open.ReadyAt.After(ready) {
		ready = open.ReadyAt // half-open with every probe out: when they will be settled
	}
	if ready.Before(now) {
		ready = now.Add(10 * time.Millisecond)
	}
	e.log.Info("dependency breaker open; job deferred", jobAttr(j), "kind", j.Kind, "queue", j.Queue,
		"dependency", br.Name(), "until", ready)
	return Outcome{JobID: j.ID, Queue: j.Queue, Attempt: j.Attempt, Lease: j.Lease, Worker: e.id, Kind: store.Snooze, At: now, RunAt: ready,
		Event: &store.Event{Kind: store.EventDeferred, Attempt: j.Attempt, At: now, Worker: e.id,
			Reason: "breaker_open:" + br.Name(), Delay: store.Duration(ready.Sub(now))},
		Counters: []store.Counter{{Queue: j.Queue, Name: store.StatDeferred, N: 1}}}
}

// decide turns a handler's result into the outcome.
func (e *Executor) decide(ln *lane, j *Job, h *handler, err, cause error, start, end time.Time, extra ...any) Outcome {
	o := Outcome{JobID: j.ID, Queue: j.Queue, Attempt: j.Attempt, Lease: j.Lease, Worker: e.id, At: end}
	dur := store.Duration(end.Sub(start))
	if errors.Is(cause, ErrLeaseLost) {
		// Whatever the handler returned, success included, its job is no
		// longer this worker's: the outcome is stale, and a release, which
		// uses no attempt, is the least a store could make of it.
		e.log.Warn("job's lease lost while running; its outcome is discarded", jobAttr(j), "kind", j.Kind, "attempt", j.Attempt)
		return e.Release(j, end)
	}
	if err == nil {
		o.Kind = store.Complete
		o.Duration = dur
		o.Counters = []store.Counter{{Queue: j.Queue, Name: store.StatSucceeded, N: 1}}
		if j.Attempt > 1 {
			o.Counters = append(o.Counters, store.Counter{Queue: j.Queue, Name: store.StatSucceededAfterRetry, N: 1})
		}
		return o
	}
	// A job canceled while it ran ends canceled whatever its handler
	// returned when it failed: a snooze or an open breaker would put it
	// back to run again.
	if errors.Is(cause, ErrJobCanceled) {
		e.log.Info("job canceled while running", jobAttr(j), "kind", j.Kind, "attempt", j.Attempt)
		return e.cancelOutcome(j, err, start, end)
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
		o.Event = &store.Event{Kind: store.EventDeferred, Attempt: j.Attempt, At: start, Duration: dur, Worker: e.id,
			Reason: "breaker_open:" + open.Name, Delay: store.Duration(ready.Sub(end)), Error: e.bound(err.Error())}
		o.Counters = []store.Counter{{Queue: j.Queue, Name: store.StatDeferred, N: 1}}
		return o
	}
	var sn *SnoozeError
	if errors.As(err, &sn) {
		o.Kind = store.Snooze
		o.RunAt = end.Add(sn.Delay)
		o.Event = &store.Event{Kind: store.EventSnoozed, Attempt: j.Attempt, At: start, Duration: dur, Worker: e.id,
			Delay: store.Duration(sn.Delay)}
		o.Counters = []store.Counter{{Queue: j.Queue, Name: store.StatSnoozed, N: 1}}
		return o
	}
	if errors.Is(cause, ErrShutdown) {
		e.log.Info("job interrupted by shutdown; back to pending", jobAttr(j), "kind", j.Kind, "attempt", j.Attempt)
		return e.Release(j, end)
	}
	v := ln.classifier.Classify(err)
	return e.failOutcome(ln, j, h, o, v, err.Error(), start, dur, extra...)
}

// failOutcome applies the retry policy to a failed attempt; ln's retry
// budget, when ln is not nil, may push the retry out.
// extra are attributes the handler gave its attempt's log lines (LogWith).
func (e *Executor) failOutcome(ln *lane, j *Job, h *handler, o Outcome, v failure.Verdict, msg string, start time.Time, dur store.Duration, extra ...any) Outcome {
	pl := ln
	if pl == nil {
		pl = e.lane(j.Queue)
	}
	p := e.policyFor(pl, j, h)
	var prev time.Duration
	if j.Attempt >= 2 {
		prev = time.Duration(j.LastDelay)
	}
	d := p.Decide(retry.Input{Class: v.Class, Attempt: j.Attempt, RetryAfter: v.RetryAfter, PrevDelay: prev}, e.opts.Rand)
	msg = e.bound(msg)
	class := v.Class.String()
	o.Error, o.Class = msg, v.Class
	if v.Class == failure.RateLimited && v.RetryAfter > 0 {
		// The server asked to wait: a limit that holds on Retry-After
		// holds the job's group that long (clamped as the retry's wait
		// is), fleet-wide; the store ignores it for other jobs.
		ra, most := v.RetryAfter, p.MaxRetryAfter
		if most <= 0 {
			most = retry.DefaultMaxRetryAfter
		}
		o.HoldUntil = o.At.Add(min(ra, most))
	}
	o.Counters = []store.Counter{{Queue: j.Queue, Name: store.StatFailed, Class: class, N: 1}}
	ev := &store.Event{Attempt: j.Attempt, At: start, Duration: dur, Class: class, Error: msg, Reason: v.Reason, Worker: e.id}
	o.Duration = dur
	o.Event = ev
	if d.Retry {
		delay := d.Delay
		if ln != nil && ln.budget != nil {
			if pushed := ln.budget.Retry(delay); pushed > delay {
				o.Counters = append(o.Counters, store.Counter{Queue: j.Queue, Name: store.StatBudgetDeferred, N: 1})
				e.logBudget(ln, j, delay, pushed)
				delay = pushed
			}
		}
		o.Kind = store.Retry
		o.RunAt = o.At.Add(delay)
		o.RetryDelay = store.Duration(d.Delay)
		ev.Kind, ev.Delay = store.EventRetry, store.Duration(delay)
		o.Counters = append(o.Counters, store.Counter{Queue: j.Queue, Name: store.StatRetried, N: 1})
		e.log.Info("job failed; retry scheduled", append([]any{jobAttr(j), "kind", j.Kind, "queue", j.Queue, "attempt", j.Attempt,
			"max_retries", p.MaxRetries, "class", class, "reason", v.Reason, "delay", delay, "error", msg}, extra...)...)
		return o
	}
	reason := d.Reason
	if v.Reason == failure.ReasonUndecodablePayload && v.Class == failure.Permanent {
		// Fixing it needs an edited payload, not a fixed dependency.
		reason = ReasonUndecodable
	}
	if v.Reason == store.ReasonUndecryptable && v.Class == failure.Permanent {
		// Fixing it needs the payload's key configured, then a redrive.
		reason = ReasonUndecryptable
	}
	o.Kind = store.Bury
	o.DeadReason = reason
	o.Fingerprint = fingerprint.Of(j.Queue, j.Kind, class, v.Reason, msg)
	ev.Kind = store.EventDead
	if v.Reason != "" && reason == retry.ReasonExhausted {
		ev.Reason = v.Reason
	}
	o.Counters = append(o.Counters, store.Counter{Queue: j.Queue, Name: store.StatDead, Class: class, N: 1})
	e.log.Warn("job moved to the DLQ", append([]any{jobAttr(j), "kind", j.Kind, "queue", j.Queue, "attempt", j.Attempt,
		"class", class, "reason", reason, "error", msg}, extra...)...)
	return o
}

// logBudget says, at most once a second per queue, that the retry budget
// pushed retries out: a retry storm is being spread.
func (e *Executor) logBudget(ln *lane, j *Job, delay, pushed time.Duration) {
	now := e.now().Unix()
	last := ln.budgetLogged.Load()
	if now <= last || !ln.budgetLogged.CompareAndSwap(last, now) {
		return
	}
	st := ln.budget.Snapshot()
	e.log.Warn("retry budget exceeded: retries are pushed out to spread a retry storm", "queue", ln.name,
		jobAttr(j), "delay", delay, "pushed_to", pushed, "retries_in_window", st.Retries, "allowed", st.Allowed,
		"attempts_in_window", st.Attempts, "backlog", st.Backlog)
}

// bound cuts s to MaxErrorLength bytes at a character boundary.
func (e *Executor) bound(s string) string {
	if len(s) <= e.opts.MaxErrorLength {
		return s
	}
	cut := e.opts.MaxErrorLength
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
