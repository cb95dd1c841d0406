package amqp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/internal/lifecycle"
	"github.com/redrivehq/redrive/retry"
	"github.com/redrivehq/redrive/store"
)

// HeaderRetryAfter is, on a failure a consumer reports through the
// failure exchange, how long the dependency asked to wait, in seconds (a
// number, or decimal text such as "2.5"). It is obeyed, clamped by the
// queue's policy (MaxRetryAfter).
const HeaderRetryAfter = "x-redrive-retry-after"

// RouterOptions configure a Router. Zero fields take the defaults given.
type RouterOptions struct {
	// Queues are the managed work queues, each with its options
	// (Concurrency does not apply: the router runs no handler; Prefetch,
	// default 100, bounds the failures it holds at once). Required.
	Queues map[string]QueueOptions
	// FailureExchange is the exchange consumers report failures to, and
	// the work queues dead-letter to (default DefaultFailureExchange).
	FailureExchange string
	// Executor decides, exactly as for a redrive.Worker: the retry policy
	// (Policy, and QueuePolicies per queue, which also shape each queue's
	// delay tiers), the retry budget, the observer, the logger.
	Executor redrive.ExecutorOptions
	// PublishRetry is the retry policy of the router's own publishes.
	// Default DefaultPublishRetry().
	PublishRetry *retry.Policy
	// MaxHistory and MaxHistoryBytes bound the history a message carries
	// (defaults DefaultMaxHistory, DefaultMaxHistoryBytes).
	MaxHistory      int
	MaxHistoryBytes int
}

// Router gives queues whose consumers are not redrive's, written in any
// language, redrive's retries and dead-letter queue through the broker's
// own protocol (see the package documentation, "Managed queues").
//
// For each managed queue it declares the topology (with
// Topology.FailureExchange set) and consumes the failure queue
// <queue>-failed. A failure there is an attempt that failed: rejected by
// its consumer without requeue (the attempt count then comes from
// HeaderAttempt, or from the broker's x-death), or reported through the
// failure exchange with HeaderClass, HeaderError and HeaderRetryAfter. A
// redrive.Executor decides it, by the queue's retry policy and retry
// budget: a retry is published to the delay queue of its delay with the
// attempt count and history in its headers; a dead message (retries
// exhausted, or Permanent and NeedsAuth at once) to <queue>-dlq with its
// history and reason. A message coming back from a delay queue is handed
// back to the work queue once due, never before. Every publish is
// confirmed before the message it settles is acknowledged.
type Router struct {
	conn *Conn
	exec *redrive.Executor
	pub  *Publisher
	opts RouterOptions
	log  *slog.Logger

	queues []*routedQueue

	// run guards Run: a router runs once.
	run lifecycle.Once
}

// routedQueue is one managed queue of a Router.
type routedQueue struct {
	r     *Router
	name  string
	opts  QueueOptions
	topo  Topology
	stats routerCounters
}

// RouterStats are the running totals of one managed queue since its
// router was created.
type RouterStats struct {
	// Failures counts the failed attempts the router received:
	// rejections and reports; Reported, those reported through the
	// failure exchange with a report redrive could read.
	Failures int64 `json:"failures"`
	Reported int64 `json:"reported"`
	// Retried and Dead count the decisions: retries scheduled, messages
	// moved to the DLQ (Undecodable ones included).
	Retried int64 `json:"retried"`
	Dead    int64 `json:"dead"`
	// Returned counts the messages handed back to the work queue once
	// due; Hops, those that came back early and took another delay
	// queue; Waits, those whose last part of a delay the router waited
	// out itself.
	Returned int64 `json:"returned"`
	Hops     int64 `json:"hops"`
	Waits    int64 `json:"waits"`
	// Undecodable counts the messages dead-lettered because their redrive
	// headers, or the report, could not be read.
	Undecodable int64 `json:"undecodable"`
	// SettleFailures counts the publishes that failed after their
	// retries: the message went back to the failure queue.
	SettleFailures int64 `json:"settle_failures"`
}

type routerCounters struct {
	failures, reported, retried, dead, returned, hops, waits, undecodable, settleFailures atomic.Int64
}

// NewRouter returns a router of opts.Queues on conn.
func NewRouter(conn *Conn, opts RouterOptions) (*Router, error) {
	if len(opts.Queues) == 0 {
		return nil, errors.New("amqp: router: no queues")
	}
	if opts.FailureExchange == "" {
		opts.FailureExchange = DefaultFailureExchange
	}
	exec, pub, err := setup(conn, "router", &opts.Executor, opts.PublishRetry, &opts.MaxHistory, &opts.MaxHistoryBytes)
	if err != nil {
		return nil, err
	}
	r := &Router{conn: conn, exec: exec, pub: pub, opts: opts, log: opts.Executor.Logger}
	for _, name := range slices.Sorted(maps.Keys(opts.Queues)) {
		qo := opts.Queues[name]
		if qo.Prefetch <= 0 {
			qo.Prefetch = 100
		}
		if qo.DefaultKind == "" {
			qo.DefaultKind = name
		}
		topo, err := qo.topology(name, exec, opts.FailureExchange)
		if err != nil {
			pub.Close()
			return nil, err
		}
		r.queues = append(r.queues, &routedQueue{r: r, name: name, opts: qo, topo: topo})
	}
	return r, nil
}

// Executor returns the executor that decides the router's failures.
func (r *Router) Executor() *redrive.Executor { return r.exec }

// Topologies returns the topology of every managed queue, by name.
func (r *Router) Topologies() []Topology {
	out := make([]Topology, len(r.queues))
	for i, q := range r.queues {
		out[i] = q.topo
	}
	return out
}

// Stats returns each managed queue's running totals, by queue name.
func (r *Router) Stats() map[string]RouterStats {
	out := make(map[string]RouterStats, len(r.queues))
	for _, q := range r.queues {
		s := &q.stats
		out[q.name] = RouterStats{Failures: s.failures.Load(), Reported: s.reported.Load(), Retried: s.retried.Load(),
			Dead: s.dead.Load(), Returned: s.returned.Load(), Hops: s.hops.Load(), Waits: s.waits.Load(),
			Undecodable: s.undecodable.Load(), SettleFailures: s.settleFailures.Load()}
	}
	return out
}

// Declare declares the topology of every managed queue, as Run does when
// it starts, so that consumers and publishers may use the queues before
// the router runs.
func (r *Router) Declare(ctx context.Context) error {
	for _, q := range r.queues {
		if err := q.topo.supported(r.conn.ServerVersion()); err != nil {
			return err
		}
		if err := q.topo.DeclareConn(ctx, r.conn); err != nil {
			return err
		}
	}
	return nil
}

// Run declares the topology of every managed queue and routes their
// failures until ctx ends; then it stops consuming and puts the messages
// it holds back in the failure queue, unchanged. After a lost connection
// it declares again and resumes. It returns nil after a clean shutdown,
// or the error that stopped it: a topology that conflicts with existing
// queues, or a connection that gave up.
func (r *Router) Run(ctx context.Context) error {
	ctx, finish, err := r.run.Start(ctx)
	if err != nil {
		return fmt.Errorf("amqp: router %w", err)
	}
	defer finish()
	defer r.pub.Close()
	for _, q := range r.queues {
		if err := q.topo.supported(r.conn.ServerVersion()); err != nil {
			return err
		}
	}
	r.log.Info("amqp: router starting", "broker", r.conn.target, "queues", len(r.queues),
		"failure_exchange", r.opts.FailureExchange)
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var loops sync.WaitGroup
	errs := make(chan error, len(r.queues))
	for _, q := range r.queues {
		loops.Go(func() {
			err := consumeLoop(runCtx, runCtx, loopSpec{conn: r.conn, log: r.log, queue: q.topo.FailedQueue(),
				tag: "redrive-router-" + r.exec.ID() + "-" + q.name, prefetch: q.opts.Prefetch, declare: q.topo.DeclareConn,
				handle: q.handle})
			if err != nil {
				errs <- fmt.Errorf("amqp: managed queue %q: %w", q.name, err)
				stop()
			}
		})
	}
	loops.Wait()
	close(errs)
	for e := range errs {
		err = errors.Join(err, e)
	}
	r.log.Info("amqp: router stopped", "error", err)
	return err
}

// handle routes one message of the failure queue.
func (q *routedQueue) handle(ctx, _ context.Context, d *amqp091.Delivery) {
	st, err := readState(d.Headers, q.name)
	if err != nil {
		q.undecodable(d, err)
		return
	}
	if d.Exchange != q.topo.FailureExchange {
		// Back from a delay queue: to the work queue once due.
		q.release(ctx, d, st.due, true, nil)
		return
	}
	q.stats.failures.Add(1)
	n := st.attempts + 1
	if _, ok := d.Headers[HeaderAttempt]; !ok {
		// No attempt recorded yet: x-death counted this rejection.
		n = max(st.attempts, 1)
	}
	v, msg, reported, err := failureOf(d.Headers, q.name)
	if err != nil {
		q.undecodable(d, err)
		return
	}
	if reported {
		q.stats.reported.Add(1)
	}
	st.attempts = n - 1
	now := time.Now()
	j := jobOf(d, q.name, kindOf(d, q.opts.DefaultKind), st, now)
	o := q.r.exec.Report(j, v, msg, now, now)
	events := j.History
	if o.Event != nil {
		events = append(events, *o.Event)
	}
	hist, dropped := historyJSON(events, st.dropped, q.r.opts.MaxHistory, q.r.opts.MaxHistoryBytes)
	switch o.Kind {
	case store.Retry:
		q.stats.retried.Add(1)
		set := amqp091.Table{HeaderAttempt: int64(n), HeaderDue: ceilMilli(o.RunAt), HeaderHistory: hist,
			HeaderLastDelay: time.Duration(o.RetryDelay).Milliseconds()}
		if dropped > 0 {
			set[HeaderHistoryDropped] = int64(dropped)
		}
		q.release(ctx, d, o.RunAt, false, set, HeaderClass, HeaderError, HeaderCause, HeaderRetryAfter)
	default: // store.Bury: a report decides a retry or a death
		q.stats.dead.Add(1)
		set := deadHeaders(&o, q.name, n)
		set[HeaderHistory] = hist
		if dropped > 0 {
			set[HeaderHistoryDropped] = int64(dropped)
		}
		q.forward(d, q.topo.DLQ(), set, "dead letter", HeaderDue, HeaderRetryAfter)
	}
}

// release sends a message on toward the work queue, due at due: through
// the longest delay queue not longer than what remains, else after
// waiting the rest out (holding the message), then to the work queue.
// returning says the message is back from a delay queue.
func (q *routedQueue) release(ctx context.Context, d *amqp091.Delivery, due time.Time, returning bool, set amqp091.Table,
	drop ...string) {
	if rem := time.Until(due); rem > 0 {
		if tier, ok := q.topo.tierFor(rem); ok {
			if returning {
				q.stats.hops.Add(1)
			}
			q.forward(d, q.topo.TierQueue(tier), set, "retry", drop...)
			return
		}
		q.stats.waits.Add(1)
		t := time.NewTimer(rem)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			requeue(q.r.log, q.topo.FailedQueue(), d)
			return
		}
	}
	q.stats.returned.Add(1)
	q.forward(d, q.name, set, "retry", drop...)
}

func (q *routedQueue) forward(d *amqp091.Delivery, target string, set amqp091.Table, what string, drop ...string) {
	if !forward(q.r.pub, q.r.log, q.topo.FailedQueue(), d, target, set, what, drop...) {
		q.stats.settleFailures.Add(1)
	}
}

// undecodable dead-letters a message whose redrive headers or report
// cannot be read.
func (q *routedQueue) undecodable(d *amqp091.Delivery, err error) {
	q.stats.undecodable.Add(1)
	q.stats.dead.Add(1)
	q.r.log.Warn("amqp: failed message cannot be decoded; moved to the DLQ", "queue", q.name, "message_id", d.MessageId,
		"dlq", q.topo.DLQ(), "error", err)
	q.forward(d, q.topo.DLQ(), undecodableHeaders(q.name, q.r.exec.ID(), err), "dead letter")
}

// failureOf reads why an attempt of a message of queue failed: a report
// (HeaderClass, HeaderError, HeaderCause, HeaderRetryAfter), else the
// broker's reason for dead-lettering it from the work queue (x-death).
// A report that cannot be read is an error wrapping errUndecodable.
func failureOf(h amqp091.Table, queue string) (v failure.Verdict, msg string, reported bool, err error) {
	bad := func(name string, e error) error {
		return fmt.Errorf("%w: header %s: %v", errUndecodable, name, e)
	}
	text := func(name string) (string, error) {
		switch x := h[name].(type) {
		case nil:
			return "", nil
		case string:
			return x, nil
		case []byte:
			return validText(string(x)), nil
		default:
			return "", bad(name, fmt.Errorf("want text, got %T", x))
		}
	}
	cls, err := text(HeaderClass)
	if err != nil {
		return v, "", false, err
	}
	if cls == "" {
		reason, count := lastDeath(h, queue)
		switch reason {
		case "", "rejected":
			return failure.Verdict{Class: failure.Transient, Reason: "rejected"},
				"rejected by the consumer (reject or nack without requeue)", false, nil
		case "delivery_limit":
			return failure.Verdict{Class: failure.Transient, Reason: reason},
				fmt.Sprintf("delivered over the queue's delivery limit without a decision (consumers crashed or requeued it; x-death count %d)", count), false, nil
		default: // expired, maxlen
			return failure.Verdict{Class: failure.Transient, Reason: reason},
				"dead-lettered by the broker from the work queue: " + reason, false, nil
		}
	}
	c, err := failure.ParseClass(cls)
	if err != nil || c == failure.None {
		return v, "", false, bad(HeaderClass, fmt.Errorf("%q is not one of transient, rate_limited, permanent, needs_auth, unknown", cls))
	}
	v.Class = c
	if msg, err = text(HeaderError); err != nil {
		return v, "", false, err
	}
	if msg == "" {
		msg = "reported by the consumer as " + c.String()
	}
	if v.Reason, err = text(HeaderCause); err != nil {
		return v, "", false, err
	}
	if len(v.Reason) > 100 {
		return v, "", false, bad(HeaderCause, errors.New("longer than 100 bytes"))
	}
	if raw, ok := h[HeaderRetryAfter]; ok {
		d, err := secondsHeader(raw)
		if err != nil {
			return v, "", false, bad(HeaderRetryAfter, err)
		}
		v.RetryAfter = d
	}
	return v, msg, true, nil
}

// secondsHeader reads a number of seconds sent as any AMQP number, or as
// decimal text: not negative, at most a day (a policy clamps it further).
func secondsHeader(v any) (time.Duration, error) {
	var f float64
	switch x := v.(type) {
	case float32:
		f = float64(x)
	case float64:
		f = x
	case string:
		p, err := strconv.ParseFloat(strings.TrimSpace(x), 64)
		if err != nil {
			return 0, fmt.Errorf("want seconds as a number, got %q", x)
		}
		f = p
	default:
		n, err := intHeader(v, 0, math.MaxInt32)
		if err != nil {
			return 0, fmt.Errorf("want seconds as a number: %v", err)
		}
		f = float64(n)
	}
	if math.IsNaN(f) || f < 0 || f > 86400 {
		return 0, fmt.Errorf("%v seconds: want 0 to 86400", f)
	}
	return time.Duration(f * float64(time.Second)), nil
}

// lastDeath returns the broker's reason for the latest dead-lettering of
// the message from queue, and its count, from x-death.
func lastDeath(h amqp091.Table, queue string) (string, int) {
	deaths, _ := h["x-death"].([]any)
	for _, d := range deaths {
		t, ok := d.(amqp091.Table)
		if !ok {
			continue
		}
		if q, _ := t["queue"].(string); q == queue {
			r, _ := t["reason"].(string)
			n, _ := intHeader(t["count"], 0, 1<<30)
			return r, n
		}
	}
	return "", 0
}
