package redrive

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/trace"

	"github.com/redrivehq/redrive/retry"
	"github.com/redrivehq/redrive/store"
)

// ClientOptions configure a Client. The zero value is usable.
type ClientOptions struct {
	// Logger receives the client's logs (default slog.Default()).
	Logger *slog.Logger
	// MaxPayload bounds the encoded payload of one job (default 1 MiB).
	MaxPayload int
	// TracerProvider, when set, makes the client's spans (an enqueue's,
	// a redrive's) and those of the workers created from it (each
	// attempt's), and keeps each job's trace context with it (Job.Trace).
	// Nil turns tracing off, at no cost: pass otel.GetTracerProvider()
	// to use OpenTelemetry's global provider. See docs/design.md,
	// "Tracing".
	TracerProvider trace.TracerProvider
}

// DefaultMaxPayload is the default bound on a job's encoded payload.
const DefaultMaxPayload = 1 << 20

// Client enqueues, reads, cancels and redrives jobs. It is safe for
// concurrent use. The workers running in the same process on the same
// store (the same store.Store value), whichever Client they were created
// from, are woken at once by its enqueues and see its pauses, resumes and
// cancellations at once. (A store value that cannot be compared, such as
// a middleware struct with a func field, is not matched with others: then
// only the workers created from the same Client are.)
type Client struct {
	store      store.Store
	log        *slog.Logger
	maxPayload int
	tp         trace.TracerProvider // as given
	tracer     trace.Tracer         // nil: tracing off

	// hooksKey names the in-process workers' hooks that the client's
	// enqueues, pauses and cancellations call (see hooks): those of its
	// store, shared by every Client of it.
	hooksKey any
	nowFunc  func() time.Time
	clocked  bool // nowFunc is not time.Now: spans take its readings
	// statsClock, when set, is the clock of the statistics history
	// (tests); otherwise nowFunc.
	statsClock func() time.Time
	// validators check the payloads of kinds before they are enqueued.
	validators atomic.Pointer[map[string]Validator]
	validMu    sync.Mutex
	// limits are the concurrency limits of the jobs it enqueues
	// (limits.go).
	limits atomic.Pointer[[]compiledLimit]
	// fair are the fair shares by queue (fairshare.go).
	fair atomic.Pointer[map[string]compiledFair]

	// opsWake tells this process's workers that an operation was started
	// or resumed through this client, so that the leader claims it at
	// once instead of at its next poll.
	opsWake chan struct{}

	// fleet caches the registry read by CheckKinds (kinds.go).
	fleet fleetCache
}

// RequestError is the refusal of one request of a batch: Index is its
// index (from 0), Of the batch's size. Nothing of the batch was enqueued.
type RequestError struct {
	Index, Of int
	Err       error
}

func (e *RequestError) Error() string {
	return fmt.Sprintf("redrive: enqueue job %d of %d: %v", e.Index+1, e.Of, e.Err)
}

// Unwrap returns the cause.
func (e *RequestError) Unwrap() error { return e.Err }

// Validator checks the payload of a job of its kind before it is
// enqueued. An error refuses the enqueue; a *FieldError in it names the
// payload's field at fault.
type Validator func(payload json.RawMessage) error

// FieldError is an invalid value at a field of a request: Field is a path
// such as "payload.url".
type FieldError struct {
	Field string
	Err   error
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Err.Error() }

// Unwrap returns the cause.
func (e *FieldError) Unwrap() error { return e.Err }

// SetValidator makes the client check the payload of every job of kind
// with v before enqueuing it: a job whose payload v refuses is not
// enqueued, and the enqueue fails with an error wrapping ErrInvalid (and
// v's error, whose *FieldError names the field). Built-in kinds register
// theirs (httpjob.Register); nil removes a kind's validator.
func (c *Client) SetValidator(kind string, v Validator) {
	c.validMu.Lock()
	defer c.validMu.Unlock()
	next := map[string]Validator{}
	if old := c.validators.Load(); old != nil {
		for k, f := range *old {
			next[k] = f
		}
	}
	if v == nil {
		delete(next, kind)
	} else {
		next[kind] = v
	}
	c.validators.Store(&next)
}

// NewClient returns a Client on the store s.
func NewClient(s store.Store, opts ClientOptions) *Client {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.MaxPayload <= 0 {
		opts.MaxPayload = DefaultMaxPayload
	}
	c := &Client{store: s, log: opts.Logger, maxPayload: opts.MaxPayload, nowFunc: time.Now, opsWake: make(chan struct{}, 1),
		tp: opts.TracerProvider, tracer: newTracer(opts.TracerProvider)}
	c.hooksKey = hooksKey(c, s)
	return c
}

// Store returns the store the client works on.
func (c *Client) Store() store.Store { return c.store }

func (c *Client) now() time.Time { return c.nowFunc() }

// setClock makes now the client's clock (tests), whose readings its spans
// then take.
func (c *Client) setClock(now func() time.Time) { c.nowFunc, c.clocked = now, true }

// Request describes one job to enqueue. Kind is required; every other
// field has a default.
type Request struct {
	Kind string
	// Payload is encoded as JSON; []byte and json.RawMessage are taken as
	// already-encoded JSON.
	Payload any
	// Queue defaults to DefaultQueue.
	Queue string
	// RunAt schedules the job; zero means now, unless Delay is set.
	RunAt time.Time
	// Delay schedules the job Delay from now (ignored when RunAt is set).
	Delay time.Duration
	// MaxRetries overrides the policy's retry count for this job when not
	// nil.
	MaxRetries *int
	// Policy overrides the whole retry policy for this job when not nil.
	Policy *retry.Policy
	// IdempotencyKey makes the enqueue idempotent: while a job holding the
	// key exists, enqueuing the key again returns that job (Existing set)
	// instead of creating another. See KeyOf.
	IdempotencyKey string
	// Dependency names the circuit breaker of the dependency the job
	// calls; while it is open the job is deferred without using an attempt.
	Dependency string
	// NotReprocessable marks the job as never redrivable from the DLQ.
	NotReprocessable bool
	// Priority orders the job among the waiting jobs of its queue: the
	// due jobs of the highest priority start first, by due time within a
	// priority. From MinPriority (-100) to MaxPriority (100); the zero
	// value is DefaultPriority. Client.SetPriority changes it while the
	// job waits.
	Priority int
	// ReturnExisting answers a key held by a job of another kind, queue
	// or payload with that job (Existing and Conflict set) instead of a
	// *KeyConflictError.
	ReturnExisting bool
}

// Option sets a field of a Request.
type Option func(*Request)

// InQueue puts the job in queue q.
func InQueue(q string) Option { return func(r *Request) { r.Queue = q } }

// At schedules the job at t.
func At(t time.Time) Option { return func(r *Request) { r.RunAt = t } }

// After schedules the job d from now.
func After(d time.Duration) Option { return func(r *Request) { r.Delay = d } }

// MaxRetries gives the job n retries after its first attempt, whatever its
// policy says.
func MaxRetries(n int) Option { return func(r *Request) { r.MaxRetries = &n } }

// WithPolicy gives the job its own retry policy.
func WithPolicy(p retry.Policy) Option { return func(r *Request) { r.Policy = &p } }

// IdempotencyKey makes the enqueue idempotent on key (see KeyOf).
func IdempotencyKey(key string) Option { return func(r *Request) { r.IdempotencyKey = key } }

// Dependency declares the circuit breaker guarding the job's dependency.
func Dependency(name string) Option { return func(r *Request) { r.Dependency = name } }

// NotReprocessable marks the job as never redrivable from the DLQ.
func NotReprocessable() Option { return func(r *Request) { r.NotReprocessable = true } }

// Priority gives the job priority p (see Request.Priority): from
// MinPriority to MaxPriority, higher first, 0 by default.
func Priority(p int) Option { return func(r *Request) { r.Priority = p } }

// ReturnExisting answers an idempotency key held by a different job (of
// another kind, queue or payload) with that job instead of an error.
func ReturnExisting() Option { return func(r *Request) { r.ReturnExisting = true } }

// ErrKeyConflict is wrapped by the error of an enqueue whose idempotency
// key is held by a different job: another kind, queue or payload. The
// same request again is not a conflict: it is answered with the job
// holding the key.
var ErrKeyConflict = errors.New("idempotency key held by a different job")

// KeyConflictError says which requests of an enqueue met a key held by a
// different job. Nothing was created for them; the other requests were
// enqueued.
type KeyConflictError struct {
	// Conflicts lists the requests in conflict, in request order.
	Conflicts []KeyConflict
}

// KeyConflict is one request whose key a different job holds.
type KeyConflict struct {
	// Index is the request's index in the batch.
	Index int
	// Key is the idempotency key.
	Key string
	// Job is the job holding the key.
	Job *Job
	// Field names what differs: "kind", "queue" or "payload".
	Field string
}

func (e *KeyConflictError) Error() string {
	c := e.Conflicts[0]
	more := ""
	if n := len(e.Conflicts) - 1; n > 0 {
		more = fmt.Sprintf(" (and %d more)", n)
	}
	return fmt.Sprintf("redrive: enqueue: idempotency key %q is held by job %d, whose %s differs from the request's%s; "+
		"use another key, or ask for the existing job", c.Key, c.Job.ID, c.Field, more)
}

// Unwrap lets errors.Is find ErrKeyConflict.
func (e *KeyConflictError) Unwrap() error { return ErrKeyConflict }

// Enqueue creates a job of kind with the payload and returns it. With an
// idempotency key already taken it returns the job holding the key, with
// Existing set, and creates nothing; if that job is of another kind,
// queue or payload, the error is a *KeyConflictError (errors.Is
// ErrKeyConflict) unless the request asked ReturnExisting. A key stays
// taken for WorkerOptions.KeyRetention after its job was deleted (then
// the job returned has Gone set).
func (c *Client) Enqueue(ctx context.Context, kind string, payload any, opts ...Option) (*Job, error) {
	r := Request{Kind: kind, Payload: payload}
	for _, o := range opts {
		o(&r)
	}
	jobs, err := c.EnqueueMany(ctx, []Request{r})
	if len(jobs) == 1 {
		return jobs[0], err // with a *KeyConflictError, the job holding the key
	}
	return nil, err
}

// Prepare checks the request r as Enqueue does (its names, payload,
// validator, size and options) and returns what Enqueue would hand the
// store at now, without storing anything. Package redrivetest builds the
// jobs it runs inline with it. Errors wrap ErrInvalid.
func (c *Client) Prepare(r Request, now time.Time) (store.NewJob, error) {
	nj, err := c.newJob(&r, now, &validNames{})
	if err != nil {
		return store.NewJob{}, fmt.Errorf("redrive: prepare: %w", err)
	}
	return nj, nil
}

// MaxBatch bounds how many jobs one EnqueueMany call may create.
const MaxBatch = 10000

// EnqueueMany creates many jobs in one round trip. Each job is idempotent
// on its own key. Either every request is valid and all are enqueued, or
// an error names the first bad one and none is. Requests whose key is
// held by a different job (see Enqueue) create nothing: EnqueueMany then
// returns every job (those holders with Conflict set) and a
// *KeyConflictError naming them.
func (c *Client) EnqueueMany(ctx context.Context, reqs []Request) ([]*Job, error) {
	return c.enqueueMany(ctx, reqs, false)
}

// EnqueueChecked is EnqueueMany with CheckKinds: once every request is
// valid (names, payloads, validators), a request whose kind the live
// workers of its queue do not run refuses the batch (a *KindError), and
// each job accepted although no live worker serves its queue carries a
// Warning. The API's and the CLI's enqueues use it.
func (c *Client) EnqueueChecked(ctx context.Context, reqs []Request) ([]*Job, error) {
	return c.enqueueMany(ctx, reqs, true)
}

// enqueueMany is EnqueueMany, with CheckKinds when check is set.
func (c *Client) enqueueMany(ctx context.Context, reqs []Request, check bool) ([]*Job, error) {
	if len(reqs) == 0 {
		return []*Job{}, nil
	}
	if len(reqs) > MaxBatch {
		return nil, fmt.Errorf("redrive: enqueue: %w: %d jobs in one batch, the limit is %d", ErrInvalid, len(reqs), MaxBatch)
	}
	now := c.now()
	news := make([]store.NewJob, len(reqs))
	var valid validNames
	for i := range reqs {
		nj, err := c.newJob(&reqs[i], now, &valid)
		if err != nil {
			if len(reqs) > 1 {
				return nil, &RequestError{Index: i, Of: len(reqs), Err: err}
			}
			return nil, fmt.Errorf("redrive: enqueue: %w", err)
		}
		news[i] = nj
	}
	var warnings []string
	if check {
		var err error
		if warnings, err = c.CheckKinds(ctx, reqs); err != nil {
			if len(reqs) == 1 {
				err = fmt.Errorf("redrive: enqueue: %w", err)
			}
			return nil, err
		}
	}
	var span trace.Span
	if c.tracer != nil {
		ctx, span = c.startEnqueue(ctx, news, now)
	}
	jobs, err := c.store.Enqueue(ctx, news, now)
	if span != nil {
		c.endEnqueue(span, jobs, err)
	}
	if err != nil {
		return nil, fmt.Errorf("redrive: enqueue: %w", err)
	}
	c.wakeFor(jobs)
	for i, j := range jobs {
		if warnings != nil && !j.Existing {
			j.Warning = warnings[i]
		}
	}
	var conflicts []KeyConflict
	for i, j := range jobs {
		if !j.Existing {
			continue
		}
		field := differs(&news[i], j)
		if field == "" {
			continue
		}
		c := *j // the same holder may answer several requests
		c.Conflict = true
		jobs[i] = &c
		if !reqs[i].ReturnExisting {
			conflicts = append(conflicts, KeyConflict{Index: i, Key: news[i].IdempotencyKey, Job: &c, Field: field})
		}
	}
	if len(conflicts) > 0 {
		return jobs, &KeyConflictError{Conflicts: conflicts}
	}
	return jobs, nil
}

// differs names what of the job holding a key differs from the request:
// "kind", "queue" or "payload" (compared as JSON values), or "".
func differs(nj *store.NewJob, j *Job) string {
	switch {
	case nj.Kind != j.Kind:
		return "kind"
	case nj.Queue != j.Queue:
		return "queue"
	case j.Gone: // the payload of a deleted job is not kept
		return ""
	case bytes.Equal(nj.Payload, j.Payload):
		return ""
	}
	var a, b any
	da, db := json.NewDecoder(bytes.NewReader(nj.Payload)), json.NewDecoder(bytes.NewReader(j.Payload))
	da.UseNumber()
	db.UseNumber()
	if da.Decode(&a) != nil || db.Decode(&b) != nil || !reflect.DeepEqual(a, b) {
		return "payload"
	}
	return ""
}

func (c *Client) newJob(r *Request, now time.Time, valid *validNames) (store.NewJob, error) {
	if valid.kind == "" || r.Kind != valid.kind {
		if err := CheckName("kind", r.Kind); err != nil {
			return store.NewJob{}, err
		}
		valid.kind = r.Kind
	}
	q := r.Queue
	if q == "" {
		q = DefaultQueue
	}
	if valid.queue == "" || q != valid.queue {
		if err := CheckName("queue", q); err != nil {
			return store.NewJob{}, err
		}
		valid.queue = q
	}
	if r.Dependency != "" {
		if err := CheckName("dependency", r.Dependency); err != nil {
			return store.NewJob{}, err
		}
	}
	if len(r.IdempotencyKey) > 512 {
		return store.NewJob{}, fmt.Errorf("%w: idempotency key is %d bytes long, the limit is 512", ErrInvalid, len(r.IdempotencyKey))
	}
	payload, err := encodePayload(r.Payload)
	if err != nil {
		return store.NewJob{}, err
	}
	if vs := c.validators.Load(); vs != nil {
		if v := (*vs)[r.Kind]; v != nil {
			if err := v(payload); err != nil {
				return store.NewJob{}, fmt.Errorf("%w: payload of kind %q: %w", ErrInvalid, r.Kind, err)
			}
		}
	}
	if len(payload) > c.maxPayload {
		return store.NewJob{}, fmt.Errorf("%w: payload is %d bytes, the limit is %d", ErrInvalid, len(payload), c.maxPayload)
	}
	if err := checkPriority(r.Priority); err != nil {
		return store.NewJob{}, err
	}
	nj := store.NewJob{Queue: q, Kind: r.Kind, Payload: payload, RunAt: r.RunAt, MaxRetries: -1,
		IdempotencyKey: r.IdempotencyKey, Dependency: r.Dependency, NotReprocessable: r.NotReprocessable, Priority: r.Priority}
	if err := c.applyLimit(&nj); err != nil {
		return store.NewJob{}, err
	}
	if err := c.applyFair(&nj); err != nil {
		return store.NewJob{}, err
	}
	if nj.RunAt.IsZero() && r.Delay > 0 {
		nj.RunAt = now.Add(r.Delay)
	}
	if r.MaxRetries != nil {
		if *r.MaxRetries < 0 {
			return store.NewJob{}, fmt.Errorf("%w: max retries must not be negative, got %d", ErrInvalid, *r.MaxRetries)
		}
		nj.MaxRetries = *r.MaxRetries
	}
	if r.Policy != nil {
		if err := r.Policy.Validate(); err != nil {
			return store.NewJob{}, fmt.Errorf("%w: policy: %v", ErrInvalid, err)
		}
		b, err := json.Marshal(r.Policy)
		if err != nil {
			return store.NewJob{}, fmt.Errorf("%w: policy: %v", ErrInvalid, err)
		}
		nj.Policy = b
	}
	return nj, nil
}

// validNames are the last kind and queue an EnqueueMany call found
// valid: a bulk import repeats a few of each thousands of times, and each
// is checked once per run of equal names.
type validNames struct{ kind, queue string }

// EncodePayload encodes a job's payload as Enqueue does: []byte and
// json.RawMessage are taken as JSON (and must be valid JSON in UTF-8), anything else is
// marshalled; nil is null. Errors wrap ErrInvalid.
func EncodePayload(p any) (json.RawMessage, error) { return encodePayload(p) }

func encodePayload(p any) (json.RawMessage, error) {
	switch v := p.(type) {
	case nil:
		return json.RawMessage("null"), nil
	case json.RawMessage:
		return rawPayload(v)
	case []byte:
		return rawPayload(v)
	}
	b, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("%w: payload cannot be encoded as JSON: %v", ErrInvalid, err)
	}
	return b, nil
}

// rawPayload checks a payload given as JSON bytes: valid JSON, in UTF-8
// (json.Valid does not check it; a store reads payloads as UTF-8 text,
// PostgreSQL's payload match among others).
func rawPayload(b []byte) (json.RawMessage, error) {
	if !json.Valid(b) {
		return nil, fmt.Errorf("%w: payload is not valid JSON", ErrInvalid)
	}
	if !utf8.Valid(b) {
		return nil, fmt.Errorf("%w: payload is not valid UTF-8 (JSON must be)", ErrInvalid)
	}
	return json.RawMessage(b), nil
}

func (c *Client) wakeFor(jobs []*Job) {
	seen := map[string]time.Time{}
	for _, j := range jobs {
		if j.Existing {
			continue
		}
		if t, ok := seen[j.Queue]; !ok || j.RunAt.Before(t) {
			seen[j.Queue] = j.RunAt
		}
	}
	for q, t := range seen {
		c.wake(q, t)
	}
}

// AddDead keeps jobs that died elsewhere, e.g. messages dead-lettered on
// a broker, as dead jobs, so that the DLQ tools work on them as on any
// dead job: list, groups, export, purge, edit and redrive. Each job keeps
// the fields given and counts as one death of its class in its queue's
// statistics. A job whose idempotency key is already taken (by a job, or
// kept after its job was deleted) is not added: the job holding the key
// is returned in its place with Existing set (and Gone when that job was
// deleted), so a dead letter delivered twice is kept once. Either every
// job is valid and each is added or answered, or an error wrapping
// ErrInvalid names the first bad one and none is added.
func (c *Client) AddDead(ctx context.Context, jobs []store.DeadJob) ([]*Job, error) {
	return c.store.AddDead(ctx, jobs, c.now())
}

// Get returns the job with its whole history, its fair key (Job.FairKey)
// for a job of a fair queue, and, for a job under a concurrency limit
// that has not ended, the limit's use (Job.Limit).
func (c *Client) Get(ctx context.Context, id int64) (*Job, error) {
	j, err := c.store.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if k, ok, err := c.store.JobFairKey(ctx, id); err != nil {
		return nil, fmt.Errorf("redrive: get job %d: its fair key: %w", id, err)
	} else if ok {
		j.FairKey = &k
	}
	return c.withLimit(ctx, j)
}

// List returns one page of the jobs matching f, newest first.
func (c *Client) List(ctx context.Context, f Filter, p Page) (ListResult, error) {
	return c.store.List(ctx, f, p)
}

// Cancel cancels a waiting or dead job at once; a running job's handler
// sees its context canceled (cause ErrJobCanceled) and the job ends
// canceled. The worker running it learns of it at once: a worker of this
// Client by a wake-up, a worker of another process through the store (a
// PostgreSQL notification, or a poll of SQLite a few times a second), and
// at the latest at its next heartbeat.
func (c *Client) Cancel(ctx context.Context, id int64) (*Job, error) {
	j, err := c.store.Cancel(ctx, id, c.now())
	if err == nil && j != nil && j.State == store.Running && j.CancelRequested {
		c.wakeCancel()
	}
	return j, err
}

// Stats returns real counts per queue: jobs per state and the running
// totals of attempts, successes, retries, dead jobs and redrives.
func (c *Client) Stats(ctx context.Context) (Stats, error) {
	return c.store.Stats(ctx)
}
