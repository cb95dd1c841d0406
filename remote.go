package redrive

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/redrivehq/redrive/breaker"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/store"
)

// RemoteOptions configure RemoteWorkers. Zero fields take the defaults
// given.
type RemoteOptions struct {
	// LeaseDuration is how long a job handed to a remote worker is leased
	// (default 30s); each heartbeat extends it that much again.
	LeaseDuration time.Duration
	// PollInterval bounds how long a long-poll waits without looking for
	// work another process may have added when the store does not
	// announce it (default 1s). Work enqueued, retried or released in
	// this process, and on a store.Notifier's announcement, ends the wait
	// at once.
	PollInterval time.Duration
	// CancelPoll is how often a cancellations long-poll reads whether a
	// job of its worker was canceled by another process on a store
	// without a Notifier (default 250ms).
	CancelPoll time.Duration
	// Logger receives the logs (default: the client's).
	Logger *slog.Logger
}

// RemoteWorkers runs the worker protocol for workers in other processes
// and languages (the HTTP worker protocol of `redrive serve`, see
// docs/worker-protocol.md): they lease jobs, heartbeat them and report
// their outcomes, and the engine decides exactly as for a Go handler. A
// lease is Fetch with the parameters a Worker's queue uses (limits, fair
// shares, priorities, pauses); an outcome is decided by the Executor (the
// policy of the queue, the retry budget, the breakers, the DLQ) and
// written by Finish, fenced by the job's lease token and the remote
// worker's name, so that a late outcome changes nothing.
//
// It keeps nothing a restart would lose but the circuit breakers' tokens
// of the attempts in flight: the jobs it handed out are kept in memory
// until their outcomes, to decide them without a read, but an outcome is
// written fenced on the stored job, and one for a job not in memory (a
// restart, another serve) is checked against the stored job first. Remote workers are registered in the store's worker registry
// (see RemoteVersion) and their jobs, when they disappear, are rescued at
// lease expiry by the rescue of a Worker on the store.
//
// Create it with NewRemoteWorkers and call Run for the wake-ups it
// listens to; its methods are safe for concurrent use.
type RemoteWorkers struct {
	client *Client
	store  store.Store
	exec   *Executor
	log    *slog.Logger
	opts   RemoteOptions

	mu sync.Mutex
	// waiters are the lease long-polls, by queue. Work of a queue that
	// may have become due wakes one of them, not all (each woken one
	// fetches: a herd of fetches, write transactions on SQLite, for one
	// job); one whose lease came back full wakes two more of each of
	// its queues, and one that ends with a wake it did not act on hands
	// it on (see Lease).
	waiters map[string]map[chan struct{}]struct{}
	// cancelWaiters are the cancellations long-polls.
	cancelWaiters map[chan struct{}]struct{}
	// hooked holds, by queue, the function removing its in-process
	// wake-up hook, while a long-poll waits on the queue.
	hooked map[string]func()
	// unCancel removes the in-process cancel hook; nil before the first
	// cancellations long-poll. unPause removes the in-process hook of
	// every queue's pauses; nil before the first lease.
	unCancel, unPause func()
	// stopped is set once Run returned: no hook is added any more, and
	// done is closed, which ends the long-polls.
	stopped bool
	done    chan struct{}
	// workers are the remote workers registered by this process.
	workers map[string]*remoteWorker
	// inflight are the attempts handed out, by lease, until their
	// outcomes (or two leases without a word: see pruneLocked).
	inflight  map[store.Lease]*remoteAttempt
	lastPrune time.Time
	// paused caches the paused queues, read at most every PollInterval
	// (pausedAt) and kept current by this process's pauses.
	paused   map[string]bool
	pausedAt time.Time
	// next is where the next lease starts its round over its queues.
	next int
	// calls are, by worker, its lease call with a request id under way
	// in this process: a copy of it sent again waits for it to end.
	calls map[string]*leaseCall
}

// leaseCall is a lease call under way, named by its request id.
type leaseCall struct {
	request string
	// cancel ends the call's wait: a copy of it arrived (see beginCall);
	// done is closed once it returned.
	cancel context.CancelFunc
	done   chan struct{}
}

// remoteWorker is a remote worker this process registered.
type remoteWorker struct {
	info store.WorkerInfo
	// beat is when the registry last heard of it from this process.
	beat time.Time
}

// remoteAttempt is one attempt handed out: the job as leased, its
// worker, and its breaker's permission (br nil: no breaker).
type remoteAttempt struct {
	job    *Job
	worker string
	br     *breaker.Breaker
	tok    breaker.Token
	at     time.Time // handed out or last heartbeated

	// mu serializes the decisions of the attempt's outcome; decided is
	// the first one, kept until the attempt leaves memory: an outcome
	// reported again (its write failed, or its answer was lost) is
	// written as decided then, and the retry budget counts the attempt
	// once.
	mu      sync.Mutex
	decided *remoteDecision
}

// remoteDecision is the engine's decision on one reported outcome.
type remoteDecision struct {
	ro RemoteOutcome // as reported
	o  Outcome
	// record tells the attempt's breaker (nil: none), once the outcome
	// is written; report makes its span and tells the observer, once
	// the outcome applied.
	record, report func()
}

// NewRemoteWorkers returns the worker protocol on client's store, whose
// outcomes exec decides (its policies, classifiers, retry budgets and
// breakers; serve passes its Worker's Executor).
func NewRemoteWorkers(client *Client, exec *Executor, opts RemoteOptions) *RemoteWorkers {
	if opts.LeaseDuration <= 0 {
		opts.LeaseDuration = 30 * time.Second
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = time.Second
	}
	if opts.CancelPoll <= 0 {
		opts.CancelPoll = 250 * time.Millisecond
	}
	if opts.Logger == nil {
		opts.Logger = client.log
	}
	return &RemoteWorkers{client: client, store: client.store, exec: exec, log: opts.Logger, opts: opts,
		waiters: map[string]map[chan struct{}]struct{}{}, cancelWaiters: map[chan struct{}]struct{}{},
		hooked: map[string]func(){}, done: make(chan struct{}), workers: map[string]*remoteWorker{}, inflight: map[store.Lease]*remoteAttempt{},
		calls: map[string]*leaseCall{}}
}

// MaxRetries returns how many retries j gets after its first attempt, by
// the policy that applies to it (its own, its kind's, its queue's or the
// default).
func (r *RemoteWorkers) MaxRetries(j *Job) int { return r.exec.PolicyFor(j).MaxRetries }

// writeTimeout bounds a write the client going away does not stop: the
// lease, and at least 30s.
func (r *RemoteWorkers) writeTimeout() time.Duration {
	return max(r.opts.LeaseDuration, 30*time.Second)
}

// LeaseDuration returns how long a job handed out is leased.
func (r *RemoteWorkers) LeaseDuration() time.Duration { return r.opts.LeaseDuration }

// Run listens for the store's announcements (a store.Notifier's) that
// wake the long-polls, until ctx ends; then it answers the long-polls
// under way (with what they have: nothing), removes its in-process hooks
// and returns nil; later long-polls answer at once. Call it once. Without Run, long-polls still wake on this
// process's enqueues and poll every PollInterval.
func (r *RemoteWorkers) Run(ctx context.Context) error {
	defer r.stop()
	n, ok := r.store.(store.Notifier)
	if !ok {
		<-ctx.Done()
		return nil
	}
	err := n.Listen(ctx, func(queue string) {
		switch queue {
		case store.CancelNotice:
			r.wakeCancels()
		case "":
			r.wakeCancels()
			r.wakeAll()
		default:
			r.wakeQueue(queue)
		}
	})
	if err != nil && ctx.Err() == nil {
		r.log.Error("remote workers: listening for new jobs stopped; long-polls poll", "error", err,
			"poll_interval", r.opts.PollInterval)
		<-ctx.Done()
	}
	return nil
}

// stop removes the in-process hooks.
func (r *RemoteWorkers) stop() {
	r.mu.Lock()
	if !r.stopped {
		close(r.done)
	}
	r.stopped = true
	hooks := make([]func(), 0, len(r.hooked)+2)
	for _, f := range r.hooked {
		hooks = append(hooks, f)
	}
	for _, f := range []func(){r.unCancel, r.unPause} {
		if f != nil {
			hooks = append(hooks, f)
		}
	}
	r.hooked, r.unCancel, r.unPause = map[string]func(){}, nil, nil
	r.mu.Unlock()
	for _, f := range hooks {
		f()
	}
}

// RemoteVersion is the Version a remote worker is registered with in
// the store's worker registry (WorkerInfo.Version): Client.Workers shows
// such a worker with WorkerStatus.Remote set.
const RemoteVersion = "remote"

// RemoteIdentity names a remote worker process.
type RemoteIdentity struct {
	// Worker is the worker's unique name (see CheckRemoteWorker).
	Worker string
	// Host and PID locate its process, for the workers view; Host
	// defaults to the part of Worker after its last '@'. The jobs of a
	// remote worker that died are rescued at lease expiry, whatever its
	// host and pid (serve cannot tell whether the pid is in its own PID
	// namespace).
	Host string
	PID  int
}

// CheckRemoteWorker reports, as an ErrInvalid error, a remote worker name
// that is not 1 to 100 characters of [A-Za-z0-9._:@-].
func CheckRemoteWorker(name string) error {
	if name == "" || len(name) > 100 {
		return fmt.Errorf("%w: a worker name is 1 to 100 characters long, got %d", ErrInvalid, len(name))
	}
	for _, c := range []byte(name) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("._:@-", c) >= 0) {
			return fmt.Errorf("%w: a worker name holds only letters, digits and . _ : @ -, got %q", ErrInvalid, name)
		}
	}
	return nil
}

// LeaseRequest asks for jobs for a remote worker.
type LeaseRequest struct {
	RemoteIdentity
	// Queues are the queues to take jobs from, Kinds the kinds the
	// worker handles (a job of another kind fails as a Go worker without
	// its handler fails it).
	Queues []string
	Kinds  []string
	// Dependencies names, by kind, the circuit breaker each kind calls,
	// as UsesDependency does; a job's own Dependency wins.
	Dependencies map[string]string
	// Timeouts bounds, by kind, each attempt of the kind, as Timeout
	// does for a Go handler (0: none); a kind not named takes its
	// handler's timeout in the Executor, if any. See Deadline.
	Timeouts map[string]time.Duration
	// Max bounds the jobs handed out (1 to MaxRemoteLease).
	Max int
	// Wait is how long to wait for a job to become due when none is
	// (0 to MaxRemoteWait).
	Wait time.Duration
	// Request names the lease call (see CheckLeaseRequestID; "": none):
	// a worker names each call anew, and sends a call whose answer it did
	// not get (its connection cut, a timeout, a proxy's 502) again with
	// the same Request and Resend set.
	Request string
	// Resend marks a call sent again: the jobs the first copy may have
	// leased are the worker's, and it never learned their tokens. Held
	// lists then every lease the worker still has in hand (handlers
	// running, outcomes not yet answered, jobs it dropped unanswered): a
	// job the store says the worker holds that Held does not name was
	// leased for an answer the worker never got, and is answered again,
	// with the same token, its lease renewed (see Lease).
	Resend bool
	Held   []store.Lease
}

// Bounds of the worker protocol.
const (
	// MaxRemoteLease bounds the jobs of one lease, and the items of one
	// heartbeat or one batch of outcomes.
	MaxRemoteLease = 1000
	// MaxRemoteWait bounds a long-poll.
	MaxRemoteWait = time.Minute
	// maxRemoteHeld bounds the jobs of a worker read at once to check
	// its outcomes; beyond, each is read alone.
	maxRemoteHeld = 2000
	// MaxRemoteHeldList bounds the leases a resent lease call lists as
	// held (LeaseRequest.Held).
	MaxRemoteHeldList = 10000
	// maxLeaseRequestID bounds a lease call's id.
	maxLeaseRequestID = 64
)

// CheckLeaseRequestID reports, as an ErrInvalid error, a lease call id
// (LeaseRequest.Request) that is not 1 to 64 characters of
// [A-Za-z0-9._:-].
func CheckLeaseRequestID(id string) error {
	if id == "" || len(id) > maxLeaseRequestID {
		return fmt.Errorf("%w: a lease request id is 1 to %d characters long, got %d", ErrInvalid, maxLeaseRequestID, len(id))
	}
	for _, c := range []byte(id) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("._:-", c) >= 0) {
			return fmt.Errorf("%w: a lease request id holds only letters, digits and . _ : -, got %q", ErrInvalid, id)
		}
	}
	return nil
}

func (q *LeaseRequest) check() error {
	if err := CheckRemoteWorker(q.Worker); err != nil {
		return err
	}
	if len(q.Queues) == 0 || len(q.Kinds) == 0 {
		return fmt.Errorf("%w: a lease names its queues and kinds", ErrInvalid)
	}
	if q.Max < 1 || q.Max > MaxRemoteLease {
		return fmt.Errorf("%w: max is 1 to %d, got %d", ErrInvalid, MaxRemoteLease, q.Max)
	}
	if q.Wait < 0 || q.Wait > MaxRemoteWait {
		return fmt.Errorf("%w: wait is 0 to %s, got %s", ErrInvalid, MaxRemoteWait, q.Wait)
	}
	for k, d := range q.Timeouts {
		if d < 0 {
			return fmt.Errorf("%w: the timeout of kind %q is negative", ErrInvalid, k)
		}
	}
	if q.Request != "" {
		if err := CheckLeaseRequestID(q.Request); err != nil {
			return err
		}
	}
	if (q.Resend || len(q.Held) > 0) && q.Request == "" {
		return fmt.Errorf("%w: a lease sent again names its request", ErrInvalid)
	}
	if len(q.Held) > 0 && !q.Resend {
		return fmt.Errorf("%w: held applies to a lease sent again only", ErrInvalid)
	}
	if len(q.Held) > MaxRemoteHeldList {
		return fmt.Errorf("%w: held lists at most %d leases, got %d", ErrInvalid, MaxRemoteHeldList, len(q.Held))
	}
	return nil
}

// Deadline returns when the attempt of j, handed out for q, must end:
// its start plus its kind's timeout (q.Timeouts, else the Executor's
// handler timeout of the kind); false when the kind has none.
func (r *RemoteWorkers) Deadline(q *LeaseRequest, j *Job) (time.Time, bool) {
	d, ok := q.Timeouts[j.Kind]
	if !ok {
		d = r.exec.KindTimeout(j.Kind)
	}
	if d <= 0 {
		return time.Time{}, false
	}
	return attemptStart(j, r.client.now()).Add(d), true
}

// Lease hands out up to q.Max due jobs of q.Queues to the remote worker,
// leased for LeaseDuration, waiting up to q.Wait for one to become due.
// The jobs are leased as a Worker leases them; a job whose breaker is
// open is deferred, a job of a kind the worker does not handle fails,
// and a job whose payload cannot be opened dies, without being handed
// out. It returns no job, and no error, when the wait ends (or ctx does)
// with nothing due.
//
// A call sent again (q.Resend: its first copy's answer was lost) first
// waits for its first copy, if that still runs in this process (ending
// its wait: what the copy leased then is handed back). It then answers
// the jobs the store says the worker holds that q.Held does not name,
// up to q.Max, with their tokens, their leases renewed (those beyond
// q.Max are handed back): the jobs leased for the lost answer, whichever
// serve process leased them. Only when there are none does it lease as
// usual. A worker sends one lease call at a time, so that the jobs it
// holds but does not know of are the lost answers'.
func (r *RemoteWorkers) Lease(ctx context.Context, q LeaseRequest) ([]*Job, error) {
	return r.LeaseAnswer(ctx, q, nil)
}

// LeaseAnswer is Lease, calling answer (when not nil) with the jobs
// handed out (none included) before the call ends, so that a copy of
// the call sent again (see Lease) waits for the answer to be written
// or given up. When answer fails (the worker went away, the answer
// could not be written) the jobs are handed back, and its error is
// returned.
func (r *RemoteWorkers) LeaseAnswer(ctx context.Context, q LeaseRequest, answer func([]*Job) error) ([]*Job, error) {
	if err := q.check(); err != nil {
		return nil, err
	}
	jobs := []*Job{}
	if q.Request != "" {
		cctx, end, ok := r.beginCall(ctx, q)
		if ok {
			defer end()
			var err error
			if jobs, err = r.lease(cctx, q); err != nil {
				return nil, err
			}
		}
	} else {
		var err error
		if jobs, err = r.lease(ctx, q); err != nil {
			return nil, err
		}
	}
	if answer != nil {
		if err := answer(jobs); err != nil {
			r.HandBack(context.WithoutCancel(ctx), q.Worker, jobs)
			return jobs, err
		}
	}
	return jobs, nil
}

// lease is Lease, within the call's record for a call with a request
// id.
func (r *RemoteWorkers) lease(ctx context.Context, q LeaseRequest) ([]*Job, error) {
	queues := slices.Clone(q.Queues)
	slices.Sort(queues)
	queues = slices.Compact(queues)
	kinds := make(map[string]bool, len(q.Kinds))
	for _, k := range q.Kinds {
		kinds[k] = true
	}
	if err := r.register(ctx, q, queues); err != nil {
		return nil, err
	}
	r.mu.Lock()
	if r.unPause == nil && !r.stopped {
		// Pauses in this process apply to the next lease at once.
		r.unPause = r.client.registerAnyPause(r.setPaused)
	}
	r.mu.Unlock()
	if q.Resend {
		jobs, err := r.reclaim(ctx, q)
		if err != nil || len(jobs) > 0 {
			return jobs, err
		}
	}
	deadline := time.Now().Add(q.Wait)
	wake := make(chan struct{}, 1)
	if q.Wait > 0 {
		r.watch(queues, wake)
		defer func() {
			r.unwatch(queues, wake)
			select {
			case <-wake: // woken but answered without acting on it
				r.wakeQueues(queues, 1)
			default:
			}
		}()
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	recheck := 20 * time.Millisecond
	for {
		jobs, fetched, due, err := r.fetch(ctx, q, queues, kinds)
		if len(jobs) > 0 && ctx.Err() != nil {
			// The worker went away meanwhile: no one would get them.
			r.HandBack(context.WithoutCancel(ctx), q.Worker, jobs)
			r.wakeQueues(queues, 1)
			return []*Job{}, nil
		}
		if fetched >= q.Max {
			// A full lease: more may be due than this long-poll took.
			r.wakeQueues(queues, 2)
		}
		if err != nil || len(jobs) > 0 {
			return jobs, err
		}
		left := time.Until(deadline)
		if left <= 0 || ctx.Err() != nil {
			return []*Job{}, nil
		}
		if fetched > 0 {
			continue // jobs were due but none could be handed out: look again
		}
		wait := min(left, r.opts.PollInterval)
		if !due.IsZero() {
			if d := time.Until(due); d > 0 {
				wait = min(wait, d)
			} else {
				// Due jobs that could not be leased: they wait on a
				// limit's slot, which any process may free.
				wait = min(wait, recheck)
				recheck = min(2*recheck, 160*time.Millisecond)
			}
		}
		timer.Reset(wait)
		select {
		case <-wake:
			timer.Stop()
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return []*Job{}, nil
		case <-r.done:
			timer.Stop()
			return []*Job{}, nil
		}
	}
}

// beginCall records q's call under way in this process, once its first
// copy, if q is sent again and that copy still runs here, has returned
// (its wait ended first: the copy hands back what it leased). It
// returns the call's context, which a later copy ends, and the function
// to call when the call returns; false when ctx or Run ended first.
func (r *RemoteWorkers) beginCall(ctx context.Context, q LeaseRequest) (context.Context, func(), bool) {
	for {
		r.mu.Lock()
		c := r.calls[q.Worker]
		if c == nil || !q.Resend || c.request != q.Request {
			cctx, cancel := context.WithCancel(ctx)
			me := &leaseCall{request: q.Request, cancel: cancel, done: make(chan struct{})}
			r.calls[q.Worker] = me
			r.mu.Unlock()
			return cctx, func() {
				r.mu.Lock()
				if r.calls[q.Worker] == me {
					delete(r.calls, q.Worker)
				}
				r.mu.Unlock()
				cancel()
				close(me.done)
			}, true
		}
		r.mu.Unlock()
		c.cancel()
		select {
		case <-c.done:
		case <-ctx.Done():
			return nil, nil, false
		case <-r.done:
			return nil, nil, false
		}
	}
}

// reclaim answers, for a lease call sent again, the jobs the store says
// q.Worker holds that q.Held does not name (see Lease): up to q.Max,
// with their leases renewed; the others are handed back.
func (r *RemoteWorkers) reclaim(ctx context.Context, q LeaseRequest) ([]*Job, error) {
	held := make(map[store.Lease]bool, len(q.Held))
	for _, l := range q.Held {
		held[l] = true
	}
	stored, err := r.store.Leased(ctx, q.Worker, len(q.Held)+MaxRemoteLease)
	if err != nil {
		return nil, fmt.Errorf("redrive: lease sent again: %w", err)
	}
	var lost []*Job
	for _, j := range stored {
		if !held[store.LeaseOf(j)] {
			lost = append(lost, j)
		}
	}
	if len(lost) == 0 {
		return nil, nil
	}
	if len(lost) > q.Max {
		r.HandBack(context.WithoutCancel(ctx), q.Worker, lost[q.Max:])
		lost = lost[:q.Max]
	}
	now := r.client.now()
	until := now.Add(r.opts.LeaseDuration)
	leases := make([]store.Lease, len(lost))
	for i, j := range lost {
		leases[i] = store.LeaseOf(j)
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.writeTimeout())
	res, err := r.store.Heartbeat(fctx, q.Worker, leases, until)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("redrive: lease sent again: %w", err)
	}
	gone := map[store.Lease]bool{}
	for _, l := range res.Lost {
		gone[l] = true
	}
	canceled := map[store.Lease]bool{}
	for _, l := range res.Canceled {
		canceled[l] = true
	}
	out := make([]*Job, 0, len(lost))
	r.mu.Lock()
	for _, j := range lost {
		l := store.LeaseOf(j)
		if gone[l] {
			continue
		}
		a := r.inflight[l]
		if a == nil || a.worker != q.Worker {
			// Leased by another serve process, or before a restart.
			a = &remoteAttempt{job: j, worker: q.Worker}
			r.inflight[l] = a
		}
		a.at = now
		if canceled[l] {
			a.job.CancelRequested = true
		}
		cp := *a.job
		cp.LeaseUntil = &until
		out = append(out, &cp)
	}
	r.pruneLocked(now)
	r.mu.Unlock()
	return out, nil
}

// fetch leases the due jobs of queues for q, screens them (breakers,
// kinds, payloads) and returns those to hand out, how many it leased in
// all, and when the next job of the queues becomes due (zero: unknown).
func (r *RemoteWorkers) fetch(ctx context.Context, q LeaseRequest, queues []string, kinds map[string]bool) ([]*Job, int, time.Time, error) {
	paused, err := r.pausedQueues(ctx)
	if err != nil {
		return nil, 0, time.Time{}, err
	}
	r.mu.Lock()
	first := r.next % len(queues)
	r.next++
	r.mu.Unlock()
	var out []*Job
	var due time.Time
	fetched := 0
	for i := range queues {
		name := queues[(first+i)%len(queues)]
		if paused[name] {
			continue
		}
		need := q.Max - len(out)
		if need <= 0 {
			break
		}
		now := r.client.now()
		var nextStart time.Time
		// Not interrupted by the client going away: a fetch whose commit
		// succeeded would leave its jobs leased to nobody until their
		// leases expired.
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.writeTimeout())
		jobs, err := r.store.Fetch(fctx, store.FetchParams{Queue: name, Limit: need, Now: now, DueBy: now,
			LeaseUntil: now.Add(r.opts.LeaseDuration), Worker: q.Worker, Clock: r.client.now, NextStart: &nextStart,
			FairWeights: r.client.fairWeights(name)})
		cancel()
		if err != nil {
			return out, fetched, due, fmt.Errorf("redrive: lease from queue %q: %w", name, err)
		}
		fetched += len(jobs)
		out = append(out, r.screen(ctx, q, jobs, kinds)...)
		if len(jobs) > 0 {
			continue
		}
		if !nextStart.IsZero() && (due.IsZero() || nextStart.Before(due)) {
			due = nextStart
		}
		if t, ok, err := r.store.NextDue(ctx, name); err == nil && ok && (due.IsZero() || t.Before(due)) {
			due = t
		}
	}
	if out == nil {
		out = []*Job{}
	}
	return out, fetched, due, nil
}

// screen decides, for the jobs just leased, those not to hand out: the
// jobs whose breaker is open (deferred), of a kind the worker does not
// handle (failed), whose payload cannot be opened (dead). It writes
// their outcomes and returns the others, with their breakers' tokens
// kept.
func (r *RemoteWorkers) screen(ctx context.Context, q LeaseRequest, jobs []*Job, kinds map[string]bool) []*Job {
	out := jobs[:0:0]
	var outs []store.Outcome
	now := r.client.now()
	for _, j := range jobs {
		start := attemptStart(j, now)
		var o Outcome
		switch {
		case j.PayloadError != "":
			o = r.exec.Fail(j, failure.Verdict{Class: failure.Permanent, Reason: store.ReasonUndecryptable}, j.PayloadError, start, now)
		case !kinds[j.Kind]:
			err := fmt.Errorf("no handler registered for kind %q on %s", j.Kind, q.Worker)
			o = r.exec.decide(r.exec.lane(j.Queue), j, nil, err, nil, start, now)
		default:
			dep := j.Dependency
			if dep == "" {
				dep = q.Dependencies[j.Kind]
			}
			att := &remoteAttempt{job: j, worker: q.Worker, at: now}
			if dep != "" {
				br := r.exec.breakers.Get(dep)
				tok, err := br.Allow()
				if err != nil {
					o = r.exec.deferOutcome(j, br, err, now)
					break
				}
				att.br, att.tok = br, tok
			}
			r.mu.Lock()
			r.inflight[store.LeaseOf(j)] = att
			r.pruneLocked(now)
			r.mu.Unlock()
			out = append(out, j)
			continue
		}
		outs = append(outs, asRemote(o, q.Worker))
	}
	if len(outs) > 0 {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.writeTimeout())
		applied, err := r.store.Finish(fctx, outs)
		cancel()
		if err != nil {
			r.log.Error("remote workers: recording the jobs not handed out failed; their leases will expire",
				"worker", q.Worker, "jobs", len(outs), "error", err)
		}
		for i, o := range outs {
			if err == nil && applied[i] && o.Kind != store.Bury {
				r.client.wake(o.Queue, o.RunAt)
			}
		}
	}
	return out
}

// HandBack gives back jobs leased for worker that never reached it (its
// request was canceled, or the answer could not be written): each goes
// back to pending at once, without using an attempt, if it still runs
// the lease it was handed out with (a job the worker reported on
// meanwhile is left as it is). Its breaker's permission is returned
// unjudged. A failed write is logged: those jobs are rescued at lease
// expiry.
func (r *RemoteWorkers) HandBack(ctx context.Context, worker string, jobs []*Job) {
	if len(jobs) == 0 {
		return
	}
	now := r.client.now()
	outs := make([]store.Outcome, len(jobs))
	for i, j := range jobs {
		o := r.exec.Release(j, now)
		o.Event.Reason, o.Event.At, o.Event.Duration = "worker_gone", now, 0
		outs[i] = asRemote(o, worker)
	}
	fctx, cancel := context.WithTimeout(ctx, r.writeTimeout())
	applied, err := r.store.Finish(fctx, outs)
	cancel()
	if err != nil {
		r.log.Error("remote workers: handing back the jobs of a worker gone failed; their leases will expire",
			"worker", worker, "jobs", len(jobs), "error", err)
		return
	}
	var tokens []*remoteAttempt
	r.mu.Lock()
	for i, o := range outs {
		l := store.Lease{JobID: o.JobID, Token: o.Lease}
		if a := r.inflight[l]; applied[i] && a != nil && a.worker == worker {
			delete(r.inflight, l)
			if a.br != nil {
				tokens = append(tokens, a)
			}
		}
	}
	r.mu.Unlock()
	for _, a := range tokens {
		a.br.Record(a.tok, context.Canceled)
	}
	for i, o := range outs {
		if applied[i] {
			r.client.wake(o.Queue, now)
		}
	}
}

// asRemote makes o the remote worker's: its fence and its history
// event name the worker.
func asRemote(o Outcome, worker string) Outcome {
	o.Worker = worker
	if o.Event != nil {
		ev := *o.Event
		ev.Worker = worker
		o.Event = &ev
	}
	return o
}

// register records the remote worker in the store's registry, or says it
// is alive when it is there already with the same queues and kinds.
func (r *RemoteWorkers) register(ctx context.Context, q LeaseRequest, queues []string) error {
	host := q.Host
	if host == "" {
		if i := strings.LastIndexByte(q.Worker, '@'); i >= 0 {
			host = q.Worker[i+1:]
		}
	}
	conc := map[string]int{}
	for _, name := range queues {
		conc[name] = q.Max
	}
	kinds := slices.Clone(q.Kinds)
	sort.Strings(kinds)
	kinds = slices.Compact(kinds)
	now := r.client.now()
	info := store.WorkerInfo{ID: q.Worker, Host: host, PID: q.PID, Version: RemoteVersion,
		Queues: conc, Kinds: kinds, StartedAt: now, HeartbeatAt: now}
	// No Instance: the process-gone check of this host's workers never
	// applies to a remote worker. Its host name and pid do not say
	// whether it runs in serve's PID namespace (a sidecar in a pod shares
	// the host name, not the namespace): a live worker's pid would name
	// no process here, and its jobs would be rescued while they run, to
	// run twice. A remote worker's jobs are rescued at lease expiry.
	r.mu.Lock()
	known := r.workers[q.Worker]
	r.mu.Unlock()
	// The same queues and kinds: only a heartbeat (the max of each lease
	// varies with the worker's free slots; the first one is shown).
	if known != nil && known.info.Host == info.Host && known.info.PID == info.PID && sameQueues(known.info.Queues, conc) &&
		slices.Equal(known.info.Kinds, kinds) {
		return r.touch(ctx, q.Worker)
	}
	if err := r.store.RegisterWorker(ctx, info); err != nil {
		return fmt.Errorf("redrive: register remote worker %s: %w", q.Worker, err)
	}
	r.mu.Lock()
	r.workers[q.Worker] = &remoteWorker{info: info, beat: now}
	r.mu.Unlock()
	return nil
}

// sameQueues reports whether a and b name the same queues.
func sameQueues(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if _, ok := b[k]; !ok {
			return false
		}
	}
	return true
}

// touch tells the registry the worker is alive, at most once a second.
// A worker this process does not know (after a restart) is told of in
// the store, if it is there; one the registry lost registers again.
func (r *RemoteWorkers) touch(ctx context.Context, worker string) error {
	now := r.client.now()
	r.mu.Lock()
	known := r.workers[worker]
	if known != nil && now.Sub(known.beat) < time.Second {
		r.mu.Unlock()
		return nil
	}
	if known != nil {
		known.beat = now
	}
	r.mu.Unlock()
	err := r.store.HeartbeatWorker(ctx, worker, now)
	if errors.Is(err, store.ErrNotFound) {
		if known == nil {
			return nil // registered by its next lease
		}
		info := known.info
		info.StartedAt, info.HeartbeatAt = now, now
		err = r.store.RegisterWorker(ctx, info)
	}
	if err != nil {
		return fmt.Errorf("redrive: remote worker %s heartbeat: %w", worker, err)
	}
	return nil
}

// pausedQueues returns the paused queues, read at most every
// PollInterval.
func (r *RemoteWorkers) pausedQueues(ctx context.Context) (map[string]bool, error) {
	r.mu.Lock()
	if r.paused != nil && time.Since(r.pausedAt) < r.opts.PollInterval {
		p := r.paused
		r.mu.Unlock()
		return p, nil
	}
	r.mu.Unlock()
	qs, err := r.store.Queues(ctx)
	if err != nil {
		return nil, fmt.Errorf("redrive: read paused queues: %w", err)
	}
	p := map[string]bool{}
	for _, q := range qs {
		if q.Paused {
			p[q.Name] = true
		}
	}
	r.mu.Lock()
	r.paused, r.pausedAt = p, time.Now()
	r.mu.Unlock()
	return p, nil
}

// watch adds wake to the long-polls of queues, with the in-process
// wake-up hooks of those queues.
func (r *RemoteWorkers) watch(queues []string, wake chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, q := range queues {
		ws := r.waiters[q]
		if ws == nil {
			ws = map[chan struct{}]struct{}{}
			r.waiters[q] = ws
		}
		ws[wake] = struct{}{}
		if _, ok := r.hooked[q]; !ok && !r.stopped {
			r.hooked[q] = r.client.register(q, func(time.Time) { r.wakeQueue(q) })
		}
	}
}

// unwatch removes wake from the long-polls of queues, and the hooks of
// a queue with its last long-poll: a worker naming ever new queues does
// not grow them. (The hooks never call back under their own lock, so
// removing one under r.mu cannot deadlock with a wake-up.)
func (r *RemoteWorkers) unwatch(queues []string, wake chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, q := range queues {
		delete(r.waiters[q], wake)
		if len(r.waiters[q]) == 0 {
			delete(r.waiters, q)
			if unhook, ok := r.hooked[q]; ok {
				delete(r.hooked, q)
				unhook()
			}
		}
	}
}

// setPaused applies a pause or resume of this process at once.
func (r *RemoteWorkers) setPaused(queue string, paused bool) {
	r.mu.Lock()
	if r.paused != nil {
		p := make(map[string]bool, len(r.paused)+1)
		for k, v := range r.paused {
			p[k] = v
		}
		p[queue] = paused
		r.paused = p
	}
	r.mu.Unlock()
	if !paused {
		r.wakeQueue(queue)
	}
}

// wakeQueue wakes one long-poll of queue (see waiters).
func (r *RemoteWorkers) wakeQueue(queue string) { r.wakeQueues([]string{queue}, 1) }

// wakeQueues wakes up to n long-polls of each of queues that are not
// woken already; none when every one of them is (each will fetch).
func (r *RemoteWorkers) wakeQueues(queues []string, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, q := range queues {
		woken := 0
		for c := range r.waiters[q] {
			if woken == n {
				break
			}
			select {
			case c <- struct{}{}:
				woken++
			default:
			}
		}
	}
}

func (r *RemoteWorkers) wakeAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ws := range r.waiters {
		for c := range ws {
			select {
			case c <- struct{}{}:
			default:
			}
		}
	}
}

func (r *RemoteWorkers) wakeCancels() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for c := range r.cancelWaiters {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

// RemoteBeat is one job a heartbeat names, with its progress (nil:
// none).
type RemoteBeat struct {
	ID       int64
	Lease    int64
	Progress *store.JobProgress
}

// RemoteBeatStatus is what a heartbeat says of one job.
type RemoteBeatStatus struct {
	ID    int64
	Lease int64
	// Held is false when the job is no longer the worker's: stop working
	// on it, its outcome will be refused.
	Held bool
	// Canceled is set on a held job whose cancellation was requested.
	Canceled bool
	// LeaseUntil is when the renewed lease ends (zero when not held).
	LeaseUntil time.Time
}

// Heartbeat extends the leases the worker still holds by LeaseDuration
// and records their progress; it says of each job whether it is still
// held and whether its cancellation was requested. With no job, it just
// says the worker is alive.
func (r *RemoteWorkers) Heartbeat(ctx context.Context, worker string, beats []RemoteBeat) ([]RemoteBeatStatus, error) {
	if err := CheckRemoteWorker(worker); err != nil {
		return nil, err
	}
	if len(beats) > MaxRemoteLease {
		return nil, fmt.Errorf("%w: a heartbeat names at most %d jobs, got %d", ErrInvalid, MaxRemoteLease, len(beats))
	}
	if err := r.touch(ctx, worker); err != nil {
		return nil, err
	}
	out := make([]RemoteBeatStatus, len(beats))
	if len(beats) == 0 {
		return out, nil
	}
	now := r.client.now()
	var updates []store.ProgressUpdate
	leases := make([]store.Lease, len(beats))
	for i, b := range beats {
		leases[i] = store.Lease{JobID: b.ID, Token: b.Lease}
		if b.Progress != nil {
			updates = append(updates, store.ProgressUpdate{JobID: b.ID, Lease: b.Lease,
				JobProgress: store.JobProgress{Done: b.Progress.Done, Total: b.Progress.Total, At: now}})
		}
	}
	if len(updates) > 0 {
		if err := r.store.Progress(ctx, worker, updates); err != nil {
			return nil, fmt.Errorf("redrive: progress: %w", err)
		}
	}
	until := now.Add(r.opts.LeaseDuration)
	res, err := r.store.Heartbeat(ctx, worker, leases, until)
	if err != nil {
		return nil, fmt.Errorf("redrive: heartbeat: %w", err)
	}
	lost := map[store.Lease]bool{}
	for _, l := range res.Lost {
		lost[l] = true
	}
	canceled := map[store.Lease]bool{}
	for _, l := range res.Canceled {
		canceled[l] = true
	}
	r.mu.Lock()
	for i, l := range leases {
		s := RemoteBeatStatus{ID: l.JobID, Lease: l.Token, Held: !lost[l], Canceled: canceled[l]}
		if s.Held {
			s.LeaseUntil = until
			if a, ok := r.inflight[l]; ok && a.worker == worker {
				a.at = now
				if s.Canceled {
					a.job.CancelRequested = true
				}
			}
		}
		out[i] = s
	}
	r.pruneLocked(now)
	r.mu.Unlock()
	return out, nil
}

// Cancels waits up to wait for jobs the worker holds to have their
// cancellation requested, and returns their leases (none when the wait
// ends first). A canceled job is returned by every call until it ends.
func (r *RemoteWorkers) Cancels(ctx context.Context, worker string, wait time.Duration) ([]store.Lease, error) {
	if err := CheckRemoteWorker(worker); err != nil {
		return nil, err
	}
	if wait < 0 || wait > MaxRemoteWait {
		return nil, fmt.Errorf("%w: wait is 0 to %s, got %s", ErrInvalid, MaxRemoteWait, wait)
	}
	if err := r.touch(ctx, worker); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(wait)
	wake := make(chan struct{}, 1)
	r.mu.Lock()
	r.cancelWaiters[wake] = struct{}{}
	if r.unCancel == nil && !r.stopped {
		r.unCancel = r.client.registerCancel(r.wakeCancels)
	}
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.cancelWaiters, wake)
		r.mu.Unlock()
	}()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	cc, checks := r.store.(store.CancelChecker)
	_, notifies := r.store.(store.Notifier)
	poll := r.opts.CancelPoll
	if notifies {
		// A Notifier announces every cancellation: the poll only covers
		// a notice lost.
		poll = r.opts.PollInterval
	}
	adopted := false
	for {
		out, err := r.canceled(ctx, worker, cc, checks, !adopted)
		adopted = true
		if err != nil {
			if ctx.Err() != nil {
				return []store.Lease{}, nil
			}
			return nil, fmt.Errorf("redrive: cancellations: %w", err)
		}
		left := time.Until(deadline)
		if len(out) > 0 || left <= 0 {
			return out, nil
		}
		timer.Reset(min(left, poll))
		select {
		case <-wake:
			timer.Stop()
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return []store.Lease{}, nil
		case <-r.done:
			timer.Stop()
			return []store.Lease{}, nil
		}
	}
}

// canceled returns the leases the worker holds whose cancellation was
// requested. It asks a CancelChecker about the attempts in memory; else,
// and when adopt is set (the first look of a long-poll: after a restart
// none is in memory), it reads the worker's running jobs, and keeps
// them in memory.
func (r *RemoteWorkers) canceled(ctx context.Context, worker string, cc store.CancelChecker, checks, adopt bool) ([]store.Lease, error) {
	if checks && !adopt {
		r.mu.Lock()
		var leases []store.Lease
		for l, a := range r.inflight {
			if a.worker == worker {
				leases = append(leases, l)
			}
		}
		r.mu.Unlock()
		if len(leases) == 0 {
			return []store.Lease{}, nil
		}
		sort.Slice(leases, func(i, j int) bool { return leases[i].JobID < leases[j].JobID })
		out, err := cc.CancelRequested(ctx, worker, leases)
		if err != nil {
			return nil, err
		}
		r.mu.Lock()
		for _, l := range out {
			if a, ok := r.inflight[l]; ok {
				a.job.CancelRequested = true
			}
		}
		r.mu.Unlock()
		if out == nil {
			out = []store.Lease{}
		}
		return out, nil
	}
	jobs, err := r.store.Leased(ctx, worker, maxRemoteHeld)
	if err != nil {
		return nil, err
	}
	out := []store.Lease{}
	now := r.client.now()
	r.mu.Lock()
	for _, j := range jobs {
		a, ok := r.inflight[store.LeaseOf(j)]
		if !ok {
			a = &remoteAttempt{job: j, worker: worker, at: now}
			r.inflight[store.LeaseOf(j)] = a
		}
		if j.CancelRequested {
			out = append(out, store.LeaseOf(j))
			a.job.CancelRequested = true
		}
	}
	r.pruneLocked(now)
	r.mu.Unlock()
	return out, nil
}

// RemoteOutcomeKind is what a remote worker reports of an attempt.
type RemoteOutcomeKind string

// The outcomes a remote worker reports.
const (
	// RemoteComplete: the attempt succeeded.
	RemoteComplete RemoteOutcomeKind = "complete"
	// RemoteFail: the attempt failed; the engine decides by its class.
	RemoteFail RemoteOutcomeKind = "fail"
	// RemoteSnooze: run again after a delay, no attempt used.
	RemoteSnooze RemoteOutcomeKind = "snooze"
	// RemoteRelease: hand the job back untried, no attempt used.
	RemoteRelease RemoteOutcomeKind = "release"
)

// RemoteOutcome is the outcome a remote worker reports for one job it
// holds, named by (ID, Lease).
type RemoteOutcome struct {
	ID    int64
	Lease int64
	Kind  RemoteOutcomeKind
	// Result is, for complete, the result to keep (JSON, at most
	// store.MaxResult bytes); nil: none.
	Result json.RawMessage
	// For fail: the class (None: Unknown), the error message (required),
	// its cause and reason, the server's Retry-After, and the breaker the
	// attempt called.
	Class      failure.Class
	Error      string
	Cause      string
	Reason     string
	RetryAfter time.Duration
	Dependency string
	// Delay is, for snooze, how long to wait.
	Delay time.Duration
}

// Check reports, as an ErrInvalid error, an outcome that cannot be
// applied.
func (o *RemoteOutcome) Check() error {
	switch o.Kind {
	case RemoteComplete:
		return store.CheckResult(o.Result)
	case RemoteFail:
		if o.Error == "" {
			return fmt.Errorf("%w: a fail needs its error", ErrInvalid)
		}
		if o.RetryAfter < 0 {
			return fmt.Errorf("%w: retry_after is negative", ErrInvalid)
		}
	case RemoteSnooze:
		if o.Delay <= 0 {
			return fmt.Errorf("%w: a snooze needs a positive delay", ErrInvalid)
		}
	case RemoteRelease:
	default:
		return fmt.Errorf("%w: unknown outcome %q (want complete, fail, snooze or release)", ErrInvalid, o.Kind)
	}
	return nil
}

// RemoteResult is what became of one reported outcome.
type RemoteResult struct {
	ID    int64
	Lease int64
	// Err is nil when the outcome applied; else it wraps ErrLeaseLost
	// (the pair is not a lease the worker holds: nothing changed) or
	// ErrNotFound (no such job).
	Err error
	// State is the job's state after the outcome, RunAt when it is due
	// again (scheduled or pending).
	State store.State
	RunAt time.Time
}

// Outcomes applies the outcomes the worker reports, each decided by the
// engine as a Go handler's and written fenced by its (ID, Lease) and the
// worker: an outcome for a job the worker does not hold (rescued and
// leased again, finished, canceled, another worker's) is refused with
// ErrLeaseLost and changes nothing. Every outcome is checked first: one
// invalid makes the call fail with ErrInvalid, applying none.
func (r *RemoteWorkers) Outcomes(ctx context.Context, worker string, outs []RemoteOutcome) ([]RemoteResult, error) {
	if err := CheckRemoteWorker(worker); err != nil {
		return nil, err
	}
	if len(outs) == 0 || len(outs) > MaxRemoteLease {
		return nil, fmt.Errorf("%w: 1 to %d outcomes, got %d", ErrInvalid, MaxRemoteLease, len(outs))
	}
	for i := range outs {
		if err := outs[i].Check(); err != nil {
			return nil, fmt.Errorf("outcome %d: %w", i, err)
		}
	}
	if err := r.touch(ctx, worker); err != nil {
		return nil, err
	}
	res := make([]RemoteResult, len(outs))
	decided := make([]store.Outcome, 0, len(outs))
	slot := make([]int, 0, len(outs))       // decided[k] is for res[slot[k]]
	records := make([]func(), 0, len(outs)) // records[k] tells decided[k]'s breaker
	reports := make([]func(), 0, len(outs)) // reports[k] tells the observer of decided[k]
	held := make([]bool, 0, len(outs))      // decided[k]'s attempt was in memory
	seen := map[store.Lease]bool{}
	now := r.client.now()
	for i := range outs {
		ro := &outs[i]
		res[i] = RemoteResult{ID: ro.ID, Lease: ro.Lease}
		l := store.Lease{JobID: ro.ID, Token: ro.Lease}
		var j *Job
		r.mu.Lock()
		att := r.inflight[l]
		if att != nil && att.worker == worker {
			cp := *att.job // heartbeats may mark it canceled meanwhile
			j = &cp
		}
		r.mu.Unlock()
		if j == nil && att == nil && !seen[l] {
			// Not handed out by this process (a restart, another serve):
			// the stored job says whether the worker holds it.
			got, err := r.store.Get(ctx, ro.ID)
			switch {
			case errors.Is(err, store.ErrNotFound):
				res[i].Err = fmt.Errorf("%w: no job %d", ErrNotFound, ro.ID)
				continue
			case err != nil:
				return nil, fmt.Errorf("redrive: outcomes: %w", err)
			case got.State == store.Running && got.Worker == worker && got.Lease == ro.Lease:
				// Kept in memory from now on, so that the decision is
				// made once if the outcome is reported again.
				r.mu.Lock()
				if att = r.inflight[l]; att == nil {
					att = &remoteAttempt{job: got, worker: worker, at: now}
					r.inflight[l] = att
				}
				r.mu.Unlock()
				if att.worker == worker {
					cp := *att.job
					j = &cp
				}
			case got.State == store.Running && got.Worker == worker:
				j = got
			}
		}
		if j == nil || j.Lease != ro.Lease || seen[l] {
			res[i].Err = r.lost(ctx, ro, worker)
			continue
		}
		seen[l] = true
		d := r.decideOnce(att, j, ro, worker, now)
		decided = append(decided, d.o)
		slot = append(slot, i)
		records = append(records, d.record)
		reports = append(reports, d.report)
		held = append(held, att != nil)
	}
	var written []bool
	applied := func(k int) bool { return k < len(written) && written[k] }
	if len(decided) > 0 {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.writeTimeout())
		var err error
		written, err = r.store.Finish(fctx, decided)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("redrive: outcomes: %w", err)
		}
		for k, o := range decided {
			i := slot[k]
			if !applied(k) {
				res[i].Err = fmt.Errorf("%w: job %d no longer runs lease %d for %s", ErrLeaseLost, o.JobID, o.Lease, worker)
				continue
			}
			res[i].State, res[i].RunAt = stateAfter(o)
			if o.EndsIfCanceled() && r.endedCanceled(ctx, o.JobID) {
				// The job's cancellation was requested meanwhile: the
				// store ended it canceled instead.
				res[i].State, res[i].RunAt = store.Canceled, time.Time{}
			} else if o.EndsIfCanceled() {
				r.client.wake(o.Queue, res[i].RunAt)
			}
			// Once: only one write of the attempt's outcome applies.
			reports[k]()
		}
	}
	// The attempts' breakers hear of them once the outcomes are written:
	// an outcome whose write failed is reported again, and its attempt
	// must count once. The first call to take an attempt out of memory
	// records it; one that was not in memory (a restart, another serve)
	// is recorded by the call that applied it.
	var record []func()
	r.mu.Lock()
	for k, o := range decided {
		l := store.Lease{JobID: o.JobID, Token: o.Lease}
		if a := r.inflight[l]; held[k] && a != nil && a.worker == worker {
			delete(r.inflight, l)
		} else if held[k] || !applied(k) {
			continue
		}
		if records[k] != nil {
			record = append(record, records[k])
		}
	}
	for i := range outs {
		if a := r.inflight[store.Lease{JobID: outs[i].ID, Token: outs[i].Lease}]; a != nil && a.worker == worker {
			delete(r.inflight, store.Lease{JobID: outs[i].ID, Token: outs[i].Lease})
		}
	}
	r.pruneLocked(now)
	r.mu.Unlock()
	for _, f := range record {
		f()
	}
	return res, nil
}

// endedCanceled reports whether job id, for which a retry, snooze or
// release was just applied, is canceled: the store ends such an outcome
// so when the job's cancellation was requested, which the worker may not
// have heard of (the store does not say which it did: one read tells).
// A failed read answers false: the outcome's own state is answered.
func (r *RemoteWorkers) endedCanceled(ctx context.Context, id int64) bool {
	j, err := r.store.Get(ctx, id)
	return err == nil && j.State == store.Canceled
}

// lost explains an outcome for a pair the worker does not hold.
func (r *RemoteWorkers) lost(ctx context.Context, ro *RemoteOutcome, worker string) error {
	j, err := r.store.Get(ctx, ro.ID)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return fmt.Errorf("%w: no job %d", ErrNotFound, ro.ID)
	case err != nil:
		return fmt.Errorf("%w: job %d lease %d is not held by %s", ErrLeaseLost, ro.ID, ro.Lease, worker)
	case j.State != store.Running:
		return fmt.Errorf("%w: job %d is %s, not running lease %d for %s", ErrLeaseLost, ro.ID, j.State, ro.Lease, worker)
	case j.Worker != worker:
		return fmt.Errorf("%w: job %d runs for another worker, not for %s", ErrLeaseLost, ro.ID, worker)
	case j.Lease != ro.Lease:
		return fmt.Errorf("%w: job %d runs lease %d, not lease %d", ErrLeaseLost, ro.ID, j.Lease, ro.Lease)
	}
	return fmt.Errorf("%w: job %d lease %d was reported twice in one call", ErrLeaseLost, ro.ID, ro.Lease)
}

// sameRemote reports whether a and b report the same outcome.
func sameRemote(a, b *RemoteOutcome) bool {
	return a.ID == b.ID && a.Lease == b.Lease && a.Kind == b.Kind && bytes.Equal(a.Result, b.Result) &&
		a.Class == b.Class && a.Error == b.Error && a.Cause == b.Cause && a.Reason == b.Reason &&
		a.RetryAfter == b.RetryAfter && a.Dependency == b.Dependency && a.Delay == b.Delay
}

// decideOnce returns the decision on ro for j, held in att: the one
// made already when ro was reported before (its write failed, or its
// answer was lost: the worker reports it again), else a new one, which
// counts in the retry budget only if none was made before.
func (r *RemoteWorkers) decideOnce(att *remoteAttempt, j *Job, ro *RemoteOutcome, worker string, now time.Time) *remoteDecision {
	if att == nil {
		return r.decide(nil, j, ro, worker, now, true)
	}
	att.mu.Lock()
	defer att.mu.Unlock()
	if d := att.decided; d != nil && sameRemote(&d.ro, ro) {
		return d
	}
	d := r.decide(att, j, ro, worker, now, att.decided == nil)
	if att.decided == nil {
		att.decided = d
	}
	return d
}

// decide turns a remote worker's outcome for j, which it holds (in att,
// nil when not in memory), into the engine's, counted in the retry
// budget of its queue if count is set, with the function recording the
// attempt on its breaker (nil: none), to call once the outcome is
// written, and the one telling the observer of it, to call once it
// applied.
func (r *RemoteWorkers) decide(att *remoteAttempt, j *Job, ro *RemoteOutcome, worker string, now time.Time, count bool) *remoteDecision {
	e := r.exec
	ln := e.lane(j.Queue)
	bl := ln // the lane whose budget counts the attempt; nil: none
	if !count {
		bl = nil
	}
	start := attemptStart(j, now)
	var err error // what the attempt's breaker records
	var o Outcome
	var tell error // the observer's Err
	switch {
	case ro.Kind == RemoteFail && !j.CancelRequested:
		class := ro.Class
		if class == failure.None {
			class = failure.Unknown
		}
		v := failure.Verdict{Class: class, Reason: ro.Reason, RetryAfter: ro.RetryAfter}
		msg := failMessage(ro)
		err = breakerOutcome(ln.classifier, &failure.Error{Class: class, Reason: ro.Reason, Err: errors.New(msg)})
		o = e.reportDecide(bl, j, v, msg, start, now)
		d := &remoteDecision{ro: *ro}
		d.report = func() { e.reportTell(j, &d.o, msg, start, now) }
		d.o, d.record = asRemote(o, worker), r.breakerRecord(att, ro, err)
		return d
	case ro.Kind == RemoteRelease:
		// Handed back untried: no attempt to count.
		err, tell = context.Canceled, ErrShutdown
		o = e.Release(j, now)
	case ro.Kind == RemoteComplete:
		o = e.decide(ln, j, nil, nil, nil, start, now)
		o.Result = ro.Result
	case j.CancelRequested:
		msg := "canceled while running"
		if ro.Kind == RemoteFail {
			msg = failMessage(ro)
		}
		err, tell = context.Canceled, ErrJobCanceled
		o = e.cancelOutcome(j, errors.New(msg), start, now)
	default: // snooze
		sn := &SnoozeError{Delay: ro.Delay}
		err, tell = breakerOutcome(ln.classifier, sn), sn
		o = e.decide(ln, j, nil, sn, nil, start, now)
	}
	if ro.Kind != RemoteRelease && bl != nil && bl.budget != nil {
		bl.budget.Attempt()
	}
	d := &remoteDecision{ro: *ro}
	d.report = func() { e.report(context.Background(), j, &d.o, tell, start, now) }
	d.o, d.record = asRemote(o, worker), r.breakerRecord(att, ro, err)
	return d
}

// breakerRecord returns the function recording the attempt held in att
// (nil: not in memory), which ended with err, on its breaker (nil:
// none): the one the worker names, else the one whose permission the
// lease took.
func (r *RemoteWorkers) breakerRecord(att *remoteAttempt, ro *RemoteOutcome, err error) func() {
	e := r.exec
	hasTok := att != nil && att.br != nil
	var record func()
	if ro.Dependency != "" && (!hasTok || att.br.Name() != ro.Dependency) {
		// The worker names the breaker it called: record the attempt on
		// it, with a permission taken then (an open breaker has refused
		// it, and needs no more failures).
		br := e.breakers.Get(ro.Dependency)
		record = func() {
			if t, aerr := br.Allow(); aerr == nil {
				br.Record(t, err)
			}
		}
		if hasTok {
			// The permission taken at the lease is returned unjudged:
			// the failure was another breaker's. Kept, a half-open
			// breaker's probe would stay out a whole break.
			held, tok, rec := att.br, att.tok, record
			record = func() {
				held.Record(tok, context.Canceled)
				rec()
			}
		}
	} else if hasTok {
		br, tok := att.br, att.tok
		record = func() { br.Record(tok, err) }
	}
	return record
}

// failMessage is the error a fail records: the error and its cause.
func failMessage(ro *RemoteOutcome) string {
	if ro.Cause != "" {
		return ro.Error + ": " + ro.Cause
	}
	return ro.Error
}

// stateAfter is the state an applied outcome leaves its job in, and when
// it is due again.
func stateAfter(o Outcome) (store.State, time.Time) {
	switch o.Kind {
	case store.Complete:
		return store.Completed, time.Time{}
	case store.Retry, store.Snooze:
		return store.Scheduled, o.RunAt
	case store.Release:
		return store.Pending, o.At
	case store.Bury:
		return store.Dead, time.Time{}
	}
	return store.Canceled, time.Time{}
}

// pruneLocked forgets, every LeaseDuration, the attempts neither
// heartbeated nor reported for two lease durations: their leases
// expired, and their jobs were rescued. It runs wherever attempts are
// added or heard of (leases, heartbeats, cancellations, outcomes), so
// that the attempts of workers that vanish without reporting are
// forgotten even when no outcome comes. It forgets as well the remote
// workers not heard of for two lease durations or two long-polls,
// whichever is longer: those gone without a stop.
func (r *RemoteWorkers) pruneLocked(now time.Time) {
	if now.Sub(r.lastPrune) < r.opts.LeaseDuration {
		return
	}
	r.lastPrune = now
	for l, a := range r.inflight {
		if now.Sub(a.at) > 2*r.opts.LeaseDuration {
			delete(r.inflight, l)
		}
	}
	// A live worker is heard of at least every long-poll or heartbeat;
	// one forgotten registers again with its next lease.
	forget := 2 * max(r.opts.LeaseDuration, MaxRemoteWait)
	for name, w := range r.workers {
		if now.Sub(w.beat) > forget {
			delete(r.workers, name)
		}
	}
}

// StopRemote marks the remote worker stopped: it shows stopped in the
// registry. Jobs it still holds are rescued at lease expiry.
func (r *RemoteWorkers) StopRemote(ctx context.Context, worker string) error {
	if err := CheckRemoteWorker(worker); err != nil {
		return err
	}
	r.mu.Lock()
	delete(r.workers, worker)
	r.mu.Unlock()
	if err := r.store.StopWorker(ctx, worker, r.client.now(), WorkerStopped); err != nil {
		return fmt.Errorf("redrive: stop remote worker %s: %w", worker, err)
	}
	return nil
}
