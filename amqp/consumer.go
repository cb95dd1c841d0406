package amqp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/internal/carry"
	"github.com/redrivehq/redrive/internal/lifecycle"
	"github.com/redrivehq/redrive/internal/limiter"
	"github.com/redrivehq/redrive/retry"
	"github.com/redrivehq/redrive/store"
)

// QueueOptions configure one work queue of a Consumer. Zero fields take
// the defaults given.
type QueueOptions struct {
	// Concurrency is how many handlers run at once for the queue
	// (default 10).
	Concurrency int
	// Prefetch is how many unacknowledged messages the broker hands the
	// consumer at once (default 2 x Concurrency). Messages waiting out
	// the end of a retry delay hold a prefetch slot, not a handler.
	Prefetch int
	// Quorum declares quorum queues (see Topology.Quorum).
	Quorum bool
	// DeliveryLimit is a quorum work queue's x-delivery-limit (default
	// DefaultDeliveryLimit).
	DeliveryLimit int
	// Tiers overrides the delays of the delay queues (default: one per
	// distinct delay of the queue's retry policy).
	Tiers []time.Duration
	// DefaultKind is the kind of messages without a type property or
	// HeaderKind header (default: the queue's name).
	DefaultKind string
}

// ConsumerOptions configure a Consumer.
type ConsumerOptions struct {
	// Queues are the work queues to consume, each with its options.
	// Required.
	Queues map[string]QueueOptions
	// Executor configures how attempts run, exactly as for a
	// redrive.Worker: the retry policy (Policy, and QueuePolicies per
	// queue, which also shape each queue's delay tiers), the classifier,
	// the breakers, the retry budget, the observer, the logger.
	Executor redrive.ExecutorOptions
	// PublishRetry is the retry policy of the consumer's own publishes
	// (retries, deferrals, dead letters). Default DefaultPublishRetry().
	PublishRetry *retry.Policy
	// ShutdownTimeout is how long Run lets running handlers finish after
	// its context ends before canceling them (default 30s); the messages
	// of handlers canceled that way go back to their queue without using
	// an attempt.
	ShutdownTimeout time.Duration
	// MaxHistory and MaxHistoryBytes bound the history a message carries
	// (defaults DefaultMaxHistory events, DefaultMaxHistoryBytes bytes);
	// the oldest events are dropped first, and counted.
	MaxHistory      int
	MaxHistoryBytes int
	// Limits put the messages of the consumer's queues under concurrency
	// and rate limits, as redrive.Client.SetLimits puts jobs (the same
	// limits, checked the same way: a message is under the first limit
	// whose Queue and Kind select it, its group read from its body, its
	// dependency or its url's host). The slots hold in this process (each
	// consumer keeps its own), the rates too unless LimitStore is set (see
	// the package documentation, "Limits"). A message whose group cannot
	// be read goes to the DLQ, its reason naming the field. A limit
	// that may select a queue whose policy has no delay queue (no
	// retries) is refused: held messages need one to be deferred to.
	Limits []redrive.ConcurrencyLimit
	// LimitStore, when set, makes each limit fleet-wide. Its max: a
	// message of a limit with a max runs holding a slot of its group
	// taken from the store (store.Limits.TakeLimitSlot, one call before
	// it runs and one after), leased for LimitLease and renewed while it
	// runs, shared by every consumer of either transport on the store
	// (not with the store's own running jobs), a max set at run time
	// there (redrive limits set) winning. Its rate: every start of a
	// rate-limited message is taken from the store's rate state
	// (store.Limits.TakeLimitStarts, one call per start), which every
	// consumer and worker on the store shares with the store's own
	// limited fetches; a rate set at run time there wins. While the
	// store cannot be reached, limited messages wait (see the package
	// documentation, "Limits").
	LimitStore store.Limits
	// LimitLease is the lease of a slot taken from LimitStore (default
	// 30s): renewed every third of it while its message runs,
	// it is how long the slots of a consumer that died stay taken.
	LimitLease time.Duration
	// LimitHold is how long a message waits in the consumer for its
	// limit before it goes round the queue's shortest delay queue,
	// without using an attempt (default DefaultLimitHold). At most
	// Prefetch - Concurrency messages of a queue wait so at once; the
	// others go round at once.
	LimitHold time.Duration
	// Bodies opens the bodies of messages marked with the header
	// redrive.HeaderSealed before the handler (and the limits) see them,
	// with its keys and for the work queue's name; retries, deferrals and
	// dead letters carry the body as it came, sealed. A marked body that
	// does not open (no keys, an unknown key id, altered bytes, not an
	// envelope) goes to the DLQ at once, class permanent, reason
	// undecryptable, without its handler running. An unmarked body on a
	// queue Bodies seals is accepted as plaintext (bodies published
	// before the queue was sealed) and counted (ConsumerStats.Plaintext).
	Bodies *redrive.SealedBodies
}

// DefaultLimitHold is how long a message waits in a consumer for its
// limit, by default, before it goes round a delay queue.
const DefaultLimitHold = 5 * time.Second

// setup builds what a Consumer and a Router both need, the same way: the
// history bounds' defaults, the executor (its policy checked, the Conn's
// logger by default) and the confirmed publisher of their retries and
// dead letters. who names the caller in errors.
func setup(conn *Conn, who string, eo *redrive.ExecutorOptions, publishRetry *retry.Policy, maxHistory, maxHistoryBytes *int) (*redrive.Executor, *Publisher, error) {
	if *maxHistory <= 0 {
		*maxHistory = DefaultMaxHistory
	}
	if *maxHistoryBytes <= 0 {
		*maxHistoryBytes = DefaultMaxHistoryBytes
	}
	if eo.Logger == nil {
		eo.Logger = conn.log
	}
	if eo.Policy != nil {
		if err := eo.Policy.Validate(); err != nil {
			return nil, nil, fmt.Errorf("amqp: %s: %w", who, err)
		}
	}
	if eo.MessagingSystem == "" {
		eo.MessagingSystem = MessagingSystem
	}
	exec := redrive.NewExecutor(*eo)
	pub, err := NewPublisher(conn, PublisherOptions{Retry: publishRetry, Logger: eo.Logger})
	if err != nil {
		return nil, nil, err
	}
	return exec, pub, nil
}

// topology returns the validated topology of the work queue name with
// these options: its delays from the queue's policy in exec, unless
// Tiers overrides them; managed when failureExchange is set.
func (qo QueueOptions) topology(name string, exec *redrive.Executor, failureExchange string) (Topology, error) {
	topo := NewTopology(name, exec.PolicyFor(&redrive.Job{Queue: name, MaxRetries: -1}))
	if qo.Tiers != nil {
		topo.Tiers = append([]time.Duration(nil), qo.Tiers...)
	}
	topo.Quorum, topo.DeliveryLimit, topo.FailureExchange = qo.Quorum, qo.DeliveryLimit, failureExchange
	return topo, topo.Validate()
}

// Consumer runs the registered handlers for the messages of its work
// queues. Create it with NewConsumer, register handlers (HandleFunc, or
// redrive.Handle with the Consumer), then call Run.
//
// Each message runs through a redrive.Executor, the one a redrive.Worker
// uses, and its outcome becomes broker actions: a completed message is
// acknowledged; a retry is published, confirmed, to the delay queue of
// its delay with the attempt count and history in its headers, then the
// original is acknowledged; a dead message is published to <queue>-dlq
// with its history and the reason in headers, then acknowledged;
// Permanent and NeedsAuth failures go there at once, and so does a
// message whose redrive headers cannot be read (reason undecodable). An
// open circuit breaker and Snooze put the message back through a delay
// queue without using an attempt.
type Consumer struct {
	conn *Conn
	exec *redrive.Executor
	pub  *Publisher
	opts ConsumerOptions
	log  *slog.Logger

	queues []*queueConsumer

	// limits are opts.Limits, checked; limiter holds their groups, and
	// slots, when opts.LimitStore is set, their slots.
	limits  *redrive.LimitSet
	limiter *limiter.Limiter
	slots   *limiter.StoreSlots

	// run guards Run: a consumer runs once.
	run lifecycle.Once

	stats consumerCounters
}

// NewConsumer returns a consumer of opts.Queues on conn.
func NewConsumer(conn *Conn, opts ConsumerOptions) (*Consumer, error) {
	if len(opts.Queues) == 0 {
		return nil, errors.New("amqp: consumer: no queues")
	}
	if opts.ShutdownTimeout <= 0 {
		opts.ShutdownTimeout = 30 * time.Second
	}
	exec, pub, err := setup(conn, "consumer", &opts.Executor, opts.PublishRetry, &opts.MaxHistory, &opts.MaxHistoryBytes)
	if err != nil {
		return nil, err
	}
	limits, err := redrive.NewLimitSet(opts.Limits)
	if err != nil {
		pub.Close()
		return nil, fmt.Errorf("amqp: consumer: %w", err)
	}
	if opts.LimitHold <= 0 {
		opts.LimitHold = DefaultLimitHold
	}
	c := &Consumer{conn: conn, exec: exec, pub: pub, opts: opts, log: opts.Executor.Logger, limits: limits,
		limiter: limiter.New(nil)}
	if opts.LimitStore != nil {
		c.limiter.SetRemote(limiter.StoreRemote(opts.LimitStore, c.log))
		c.slots = limiter.NewStoreSlots(opts.LimitStore, "amqp "+exec.ID(), opts.LimitLease, c.log)
		c.limiter.SetSlots(c.slots)
	}
	for _, name := range slices.Sorted(maps.Keys(opts.Queues)) {
		qo := opts.Queues[name]
		if qo.Concurrency <= 0 {
			qo.Concurrency = 10
		}
		if qo.Prefetch <= 0 {
			qo.Prefetch = 2 * qo.Concurrency
		}
		if qo.Prefetch < qo.Concurrency {
			return nil, fmt.Errorf("amqp: queue %q: prefetch %d is below its concurrency %d", name, qo.Prefetch, qo.Concurrency)
		}
		if qo.DefaultKind == "" {
			qo.DefaultKind = name
		}
		topo, err := qo.topology(name, exec, "")
		if err != nil {
			return nil, err
		}
		if len(topo.Tiers) == 0 && limits.SelectsQueue(name) {
			// A message its limit turns away waits in the consumer or
			// goes round a delay queue: without one, the held messages
			// would take the whole prefetch and idle the handlers.
			pub.Close()
			return nil, fmt.Errorf("amqp: queue %q: %w: limits need a delay queue to defer held messages to, and the queue's retry policy has none (give it retries)", name, redrive.ErrInvalid)
		}
		c.queues = append(c.queues, &queueConsumer{c: c, name: name, opts: qo, topo: topo,
			slots: make(chan struct{}, qo.Concurrency)})
	}
	return c, nil
}

// HandleFunc registers the handler of a job kind. Registering after Run
// started, or twice for one kind, panics: both are programming errors.
func (c *Consumer) HandleFunc(kind string, fn redrive.Handler, opts ...redrive.HandlerOption) {
	if c.run.State() != lifecycle.Idle {
		panic("amqp: HandleFunc called after Run")
	}
	c.exec.HandleFunc(kind, fn, opts...)
}

// Executor returns the executor that runs the consumer's attempts.
func (c *Consumer) Executor() *redrive.Executor { return c.exec }

// Topology returns the topology the consumer declares for a queue.
func (c *Consumer) Topology(queue string) (Topology, bool) {
	for _, q := range c.queues {
		if q.name == queue {
			return q.topo, true
		}
	}
	return Topology{}, false
}

// ConsumerStats are a consumer's running totals since it was created.
type ConsumerStats struct {
	// Delivered counts the messages the broker delivered, hops and
	// redeliveries included.
	Delivered int64 `json:"delivered"`
	// Completed, Retried, Deferred (breaker and Snooze), Dead and
	// Released (shutdown) count the attempts by outcome.
	Completed int64 `json:"completed"`
	Retried   int64 `json:"retried"`
	Deferred  int64 `json:"deferred"`
	Dead      int64 `json:"dead"`
	Released  int64 `json:"released"`
	// Hops counts messages that came back early and took another delay
	// queue; Waits, those whose last part of a delay the consumer waited
	// out itself.
	Hops  int64 `json:"hops"`
	Waits int64 `json:"waits"`
	// Undecodable counts messages dead-lettered because their redrive
	// headers could not be read.
	Undecodable int64 `json:"undecodable"`
	// Undecryptable counts deliveries whose body was marked sealed but
	// did not open (ConsumerOptions.Bodies): each went to the DLQ.
	Undecryptable int64 `json:"undecryptable"`
	// Plaintext counts deliveries of a queue whose bodies are sealed
	// that came unmarked, in clear, and were run as they were.
	Plaintext int64 `json:"plaintext"`
	// SettleFailures counts outcomes whose publish failed after its
	// retries: the message went back to its queue to be tried again.
	SettleFailures int64 `json:"settle_failures"`
	// LimitDeferred counts the messages that went round the shortest
	// delay queue for their limit (the hold passed, or too many were
	// held already), without using an attempt.
	LimitDeferred int64 `json:"limit_deferred"`
	// Limits are the consumer's limits' use now, in this process.
	Limits []LimitStat `json:"limits,omitempty"`
	// LimitSlotsLost counts the fleet-wide slots (LimitStore) whose
	// lease ended before it was renewed: their messages ran on, and
	// another consumer may have taken the slot meanwhile.
	LimitSlotsLost int64 `json:"limit_slots_lost,omitempty"`
}

// LimitStat is one limit's use in a consumer.
type LimitStat = limiter.Stat

type consumerCounters struct {
	delivered, completed, retried, deferred, dead, released, hops, waits, undecodable, settleFailures atomic.Int64
	limitDeferred, undecryptable, plaintext                                                           atomic.Int64
}

// Stats returns the consumer's running totals.
func (c *Consumer) Stats() ConsumerStats {
	s := &c.stats
	out := ConsumerStats{Delivered: s.delivered.Load(), Completed: s.completed.Load(), Retried: s.retried.Load(),
		Deferred: s.deferred.Load(), Dead: s.dead.Load(), Released: s.released.Load(), Hops: s.hops.Load(),
		Waits: s.waits.Load(), Undecodable: s.undecodable.Load(), SettleFailures: s.settleFailures.Load(),
		LimitDeferred: s.limitDeferred.Load(), Undecryptable: s.undecryptable.Load(), Plaintext: s.plaintext.Load(),
		Limits: c.limiter.Stats()}
	if c.slots != nil {
		out.LimitSlotsLost = c.slots.Lost()
	}
	return out
}

// Run declares the topology of every queue and consumes them until ctx
// ends, then shuts down: it stops consuming, lets running handlers finish
// for up to ShutdownTimeout, then cancels them (cause
// redrive.ErrShutdown), and puts every message not settled back in its
// queue (nack with requeue) without using an attempt. After a lost
// connection it declares the topology again and resumes. It returns nil
// after a clean shutdown, or the error that stopped it: a topology that
// conflicts with existing queues, or a connection that gave up.
func (c *Consumer) Run(ctx context.Context) error {
	ctx, finish, err := c.run.Start(ctx)
	if err != nil {
		return fmt.Errorf("amqp: consumer %w", err)
	}
	defer finish()
	defer c.pub.Close()

	if v := c.conn.ServerVersion(); v != "" {
		c.log.Info("amqp: consumer starting", "broker", c.conn.target, "broker_version", v, "queues", len(c.queues),
			"kinds", c.exec.Kinds())
	}
	for _, q := range c.queues {
		if err := q.topo.supported(c.conn.ServerVersion()); err != nil {
			return err
		}
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	hardCtx, hardCancel := context.WithCancelCause(context.WithoutCancel(ctx))
	defer hardCancel(nil)

	var loops sync.WaitGroup
	errs := make(chan error, len(c.queues))
	for _, q := range c.queues {
		loops.Go(func() {
			if err := q.run(runCtx, hardCtx); err != nil {
				errs <- fmt.Errorf("amqp: queue %q: %w", q.name, err)
				stop()
			}
		})
	}
	allDone := lifecycle.WaitGroupDone(&loops)
	select {
	case <-allDone:
	case <-runCtx.Done():
		lifecycle.Drain(allDone, c.opts.ShutdownTimeout, func() {
			c.log.Warn("amqp: shutdown timeout: canceling running handlers")
			hardCancel(redrive.ErrShutdown)
		}, 0)
	}
	close(errs)
	for e := range errs {
		err = errors.Join(err, e)
	}
	c.log.Info("amqp: consumer stopped", "error", err)
	return err
}

// queueConsumer consumes one work queue.
type queueConsumer struct {
	c     *Consumer
	name  string
	opts  QueueOptions
	topo  Topology
	slots chan struct{} // one per running handler
	// held counts the deliveries waiting for their limit.
	held atomic.Int64
}

// run consumes the queue until ctx ends (see consumeLoop).
func (q *queueConsumer) run(ctx, hardCtx context.Context) error {
	return consumeLoop(ctx, hardCtx, loopSpec{conn: q.c.conn, log: q.c.log, queue: q.name,
		tag: "redrive-" + q.c.exec.ID() + "-" + q.name, prefetch: q.opts.Prefetch, declare: q.topo.DeclareConn,
		delivered: func() { q.c.stats.delivered.Add(1) }, handle: q.handle, release: q.requeue})
}

// handle decides what becomes of one delivery.
func (q *queueConsumer) handle(ctx, hardCtx context.Context, d *amqp091.Delivery) {
	st, err := readState(d.Headers, q.name)
	if err != nil {
		q.undecodable(d, err)
		return
	}
	// Never early: a message that came back before its due time takes
	// another delay queue, or the consumer waits out the rest.
	if rem := time.Until(st.due); rem > 0 {
		if tier, ok := q.topo.tierFor(rem); ok {
			q.c.stats.hops.Add(1)
			q.forward(d, q.topo.TierQueue(tier), amqp091.Table{}, "hop")
			return
		}
		q.c.stats.waits.Add(1)
		t := time.NewTimer(rem)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			q.requeue(d)
			return
		}
	}
	kind := kindOf(d, q.opts.DefaultKind)
	body, openErr := q.open(d)
	var (
		sel     redrive.SelectedLimit
		limited bool
	)
	if openErr == nil {
		// An undecryptable body runs no handler: no limit holds it.
		sel, limited, err = q.c.limits.Select(q.name, kind, body, st.dependency)
		if err != nil {
			q.undecodable(d, err)
			return
		}
	}
	if limited {
		release, ok := q.admit(ctx, d, sel)
		if !ok {
			return
		}
		defer q.c.limiter.Release(sel)
		defer release()
	} else {
		select {
		case q.slots <- struct{}{}:
		case <-ctx.Done():
			q.requeue(d)
			return
		}
		defer func() { <-q.slots }()
	}
	if ctx.Err() != nil {
		q.requeue(d)
		return
	}
	j := jobOf(d, q.name, kind, st, time.Now())
	j.Payload = body
	if openErr != nil {
		// The executor makes it dead at once, permanent, undecryptable,
		// without calling its handler; its dead letter carries the body
		// as it came.
		j.Payload, j.PayloadError = nil, store.ReasonUndecryptable+": "+openErr.Error()
	}
	actx, cancel := context.WithCancelCause(hardCtx)
	defer cancel(nil)
	start := time.Now()
	returned := false
	defer func() {
		if !returned {
			// The handler called runtime.Goexit: Execute finished and
			// reported its attempt but this goroutine exits without its
			// outcome. Settle the message as that failed attempt, so that
			// it is retried instead of held unsettled on the channel.
			o := q.c.exec.Fail(j, failure.Verdict{Class: failure.Unknown, Reason: "goexit"},
				"handler did not return: it called runtime.Goexit", start, time.Now())
			q.settle(d, st, j, &o)
		}
	}()
	o := q.c.exec.Execute(actx, j)
	returned = true
	cancel(nil)
	q.settle(d, st, j, &o)
}

// open returns the body the handler sees: d's body opened when it is
// marked sealed (redrive.HeaderSealed), else as it came.
func (q *queueConsumer) open(d *amqp091.Delivery) ([]byte, error) {
	_, marked := d.Headers[redrive.HeaderSealed]
	bodies := q.c.opts.Bodies
	if !marked && bodies.Seals(q.name) {
		q.c.stats.plaintext.Add(1)
	}
	body, err := bodies.Open(q.name, d.Body, marked)
	if err != nil {
		q.c.stats.undecryptable.Add(1)
		q.c.log.Warn("amqp: message body cannot be opened; it goes to the DLQ", "queue", q.name,
			"message_id", d.MessageId, "error", err)
	}
	return body, err
}

// admit waits for a handler slot and a start of sel's group, and takes
// both (ok), holding the delivery meanwhile without a handler slot: for
// up to LimitHold, and only while fewer than Prefetch - Concurrency
// deliveries of the queue are held, so that held deliveries never keep
// the handlers from the prefetch's other messages. Past either bound the
// delivery goes round the shortest delay queue, its attempt count and
// due time unchanged (it uses no attempt); at shutdown it goes back to
// the queue. Not ok, the delivery is settled.
func (q *queueConsumer) admit(ctx context.Context, d *amqp091.Delivery, sel redrive.SelectedLimit) (release func(), ok bool) {
	slot := func() (func(), bool) {
		select {
		case q.slots <- struct{}{}:
			return func() { <-q.slots }, true
		case <-ctx.Done():
			return nil, false
		}
	}
	now := q.c.limiter.Now()
	deadline := now.Add(q.c.opts.LimitHold)
	spare := int64(q.opts.Prefetch - q.opts.Concurrency)
	if n := q.held.Add(1); n > spare {
		deadline = now // no room to hold it: one try
	}
	outcome, release := q.c.limiter.Acquire(ctx, sel, deadline, slot)
	q.held.Add(-1)
	switch outcome {
	case limiter.Granted:
		return release, true
	case limiter.Held:
		q.c.stats.limitDeferred.Add(1)
		q.forward(d, q.topo.TierQueue(q.topo.Tiers[0]), q.keptAttempts(d), "limit deferral")
	default:
		q.requeue(d)
	}
	return nil, false
}

// settle turns an outcome into broker actions.
func (q *queueConsumer) settle(d *amqp091.Delivery, st state, j *redrive.Job, o *redrive.Outcome) {
	s := &q.c.stats
	switch o.Kind {
	case store.Complete, store.Cancel:
		s.completed.Add(1)
		q.ack(d)
	case store.Retry, store.Snooze:
		attempts := j.Attempt // a retry used the attempt
		if o.Kind == store.Snooze {
			attempts = st.attempts // a deferral or snooze did not
			s.deferred.Add(1)
		} else {
			s.retried.Add(1)
		}
		hist, dropped := historyJSON(append(j.History, *o.Event), st.dropped, q.c.opts.MaxHistory, q.c.opts.MaxHistoryBytes)
		set := amqp091.Table{HeaderAttempt: int64(attempts), HeaderDue: ceilMilli(o.RunAt), HeaderHistory: hist}
		if dropped > 0 {
			set[HeaderHistoryDropped] = int64(dropped)
		}
		if o.Kind == store.Retry {
			set[HeaderLastDelay] = time.Duration(o.RetryDelay).Milliseconds()
		}
		target := q.name
		if tier, ok := q.topo.tierFor(o.RunAt.Sub(o.At)); ok {
			target = q.topo.TierQueue(tier)
		}
		q.forward(d, target, set, "retry")
	case store.Bury:
		s.dead.Add(1)
		events := j.History
		if o.Event != nil {
			events = append(events, *o.Event)
		}
		hist, dropped := historyJSON(events, st.dropped, q.c.opts.MaxHistory, q.c.opts.MaxHistoryBytes)
		set := deadHeaders(o, q.name, j.Attempt)
		set[HeaderHistory] = hist
		if dropped > 0 {
			set[HeaderHistoryDropped] = int64(dropped)
		}
		q.forward(d, q.topo.DLQ(), set, "dead letter", HeaderDue)
	case store.Release:
		s.released.Add(1)
		q.requeue(d)
	}
}

// forward publishes the message on to queue target with the headers set
// (and without drop), confirmed, then acknowledges the delivery. If the
// publish fails after its retries, the delivery goes back to its queue.
func (q *queueConsumer) forward(d *amqp091.Delivery, target string, set amqp091.Table, what string, drop ...string) {
	if !forward(q.c.pub, q.c.log, q.name, d, target, set, what, drop...) {
		q.c.stats.settleFailures.Add(1)
	}
}

// undecodable dead-letters a message whose redrive headers cannot be read.
func (q *queueConsumer) undecodable(d *amqp091.Delivery, err error) {
	q.c.stats.undecodable.Add(1)
	q.c.stats.dead.Add(1)
	q.c.log.Warn("amqp: message cannot be decoded; moved to the DLQ", "queue", q.name, "message_id", d.MessageId,
		"dlq", q.topo.DLQ(), "error", err)
	// The broken headers stay as they came, for whoever inspects it.
	q.forward(d, q.topo.DLQ(), undecodableHeaders(q.name, q.c.exec.ID(), err), "dead letter")
}

func (q *queueConsumer) ack(d *amqp091.Delivery) { ack(q.c.log, q.name, d) }

// requeue puts a delivery back in its queue, unchanged: no attempt used.
// On a quorum queue it is published again (confirmed) and then acked,
// instead of nacked with requeue: the broker counts a nack toward the
// queue's delivery limit (x-delivery-limit), and a message released by
// shutdowns would be dead-lettered as delivery_limit. It goes to the
// back of the queue; a crash between the publish and the ack leaves it
// twice, as any forward.
func (q *queueConsumer) requeue(d *amqp091.Delivery) {
	if !q.opts.Quorum {
		requeue(q.c.log, q.name, d)
		return
	}
	forward(q.c.pub, q.c.log, q.name, d, q.name, q.keptAttempts(d), "released message", "x-delivery-count")
}

// keptAttempts are the headers that keep a republished message's attempt
// count: republish drops x-death, so a message whose attempts only the
// broker counted there (no HeaderAttempt) gets them as HeaderAttempt, or
// it would come back as new, its retry budget refilled.
func (q *queueConsumer) keptAttempts(d *amqp091.Delivery) amqp091.Table {
	if _, ok := d.Headers[HeaderAttempt]; ok {
		return amqp091.Table{}
	}
	if n := deathCount(d.Headers, q.name); n > 0 {
		return amqp091.Table{HeaderAttempt: int64(n)}
	}
	return amqp091.Table{}
}

// ceilMilli is t in Unix milliseconds, rounded up (see carry.CeilMilli).
func ceilMilli(t time.Time) int64 { return carry.CeilMilli(t) }
