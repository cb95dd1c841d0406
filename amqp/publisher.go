package amqp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/trace"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/internal/tracectx"
	"github.com/redrivehq/redrive/retry"
)

// DefaultPublishRetry returns the default retry policy of a publish that
// failed or was not confirmed: 5 retries after 1, 2, 4, 8 and 16 s, then
// the error goes to the caller.
func DefaultPublishRetry() retry.Policy {
	return retry.Policy{MaxRetries: 5, Initial: time.Second, Multiplier: 2, MaxDelay: 16 * time.Second,
		Jitter: retry.JitterNone}
}

// PublisherOptions configure a Publisher. Zero fields take the defaults
// given.
type PublisherOptions struct {
	// Retry is the policy of a publish that failed, was refused (nack),
	// returned as unroutable, or not confirmed within ConfirmTimeout.
	// Default DefaultPublishRetry().
	Retry *retry.Policy
	// ConfirmTimeout bounds the wait for the broker's confirm of one
	// publish (default 30s); past it the publish counts as failed.
	ConfirmTimeout time.Duration
	// Logger receives the publisher's logs (default: the Conn's).
	Logger *slog.Logger
	// TracerProvider, when set, makes a producer span of each Enqueue
	// and EnqueueMany, a child of the caller's span, whose context the
	// messages carry (traceparent, tracestate). Without it they carry the
	// caller's span context, if any.
	TracerProvider trace.TracerProvider
	// Bodies, when it seals a job's queue, makes Enqueue and EnqueueMany
	// seal the message's body with its keys for that queue and mark it
	// with the header redrive.HeaderSealed (the key id). Publish and
	// PublishMany send what they are given. A Consumer with the keys
	// opens the body before its handler sees it; consumers in other
	// languages cannot read it (see docs/security.md, "Broker message
	// bodies").
	Bodies *redrive.SealedBodies
}

// ReturnedError is a mandatory message the broker could not route to any
// queue: a failed publish.
type ReturnedError struct {
	Exchange, RoutingKey string
	Code                 uint16
	Text                 string
}

func (e *ReturnedError) Error() string {
	return fmt.Sprintf("amqp: message returned unroutable (%d %s) by exchange %q with routing key %q", e.Code, e.Text,
		e.Exchange, e.RoutingKey)
}

// ErrNacked is a publish the broker refused (basic.nack).
var ErrNacked = errors.New("amqp: the broker refused the message (nack)")

// Publisher publishes messages with publisher confirms: a publish counts
// only once the broker confirmed it, and a mandatory message it returns
// as unroutable is a failure. Failed publishes are retried by the retry
// policy, each retry logged, and the last error goes to the caller. A
// Publisher is safe for concurrent use; its publishes share one channel
// and are pipelined.
type Publisher struct {
	conn   *Conn
	opts   PublisherOptions
	log    *slog.Logger
	tracer trace.Tracer // nil: no spans

	mu  sync.Mutex
	cur *pubChannel
	// inflight orders publishes of one message id, so that a returned
	// message is matched to its publish without ambiguity.
	inflight map[string]chan struct{}
}

// NewPublisher returns a publisher on conn.
func NewPublisher(conn *Conn, opts PublisherOptions) (*Publisher, error) {
	if opts.Retry == nil {
		p := DefaultPublishRetry()
		opts.Retry = &p
	}
	if err := opts.Retry.Validate(); err != nil {
		return nil, fmt.Errorf("amqp: publish retry policy: %w", err)
	}
	if opts.ConfirmTimeout <= 0 {
		opts.ConfirmTimeout = 30 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = conn.log
	}
	return &Publisher{conn: conn, opts: opts, log: opts.Logger, inflight: map[string]chan struct{}{},
		tracer: newTracer(opts.TracerProvider)}, nil
}

// Publish publishes msg to exchange with routing key key, mandatory, and
// returns once the broker confirmed it. A message without a message-id
// gets a random one. Failures are retried by the publisher's policy; the
// error of the last attempt is returned when all fail, or ctx's when it
// ends first.
func (p *Publisher) Publish(ctx context.Context, exchange, key string, msg amqp091.Publishing) error {
	if msg.MessageId == "" {
		msg.MessageId = newMessageID()
	}
	release, err := p.acquire(ctx, msg.MessageId)
	if err != nil {
		return err
	}
	defer release()
	return p.retrying(ctx, exchange, key, msg, p.publishOnce(ctx, exchange, key, msg), true)
}

// publishNoRoute is Publish, but a message returned as unroutable is not
// retried: its *ReturnedError is returned at once.
func (p *Publisher) publishNoRoute(ctx context.Context, exchange, key string, msg amqp091.Publishing) error {
	if msg.MessageId == "" {
		msg.MessageId = newMessageID()
	}
	release, err := p.acquire(ctx, msg.MessageId)
	if err != nil {
		return err
	}
	defer release()
	return p.retrying(ctx, exchange, key, msg, p.publishOnce(ctx, exchange, key, msg), false)
}

// retrying retries a publish whose first attempt ended with err (nil: it
// succeeded) by the publisher's policy; a returned message only when
// retryReturned. An error that ends it wraps the last attempt's too, so
// that errors.As finds a *ReturnedError however the retries ended.
func (p *Publisher) retrying(ctx context.Context, exchange, key string, msg amqp091.Publishing, err error, retryReturned bool) error {
	pol := *p.opts.Retry
	var prev time.Duration
	for attempt := 1; ; attempt++ {
		if attempt > 1 {
			err = p.publishOnce(ctx, exchange, key, msg)
		}
		if err == nil {
			if attempt > 1 {
				p.log.Info("amqp: publish succeeded after retries", "exchange", exchange, "routing_key", key,
					"message_id", msg.MessageId, "attempt", attempt)
			}
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("amqp: publish to %q/%q: %w (last error: %w)", exchange, key, ctx.Err(), err)
		}
		if errors.Is(err, ErrClosed) {
			return err
		}
		var ret *ReturnedError
		if !retryReturned && errors.As(err, &ret) {
			return fmt.Errorf("amqp: publish to %q/%q: %w", exchange, key, err)
		}
		if attempt > pol.MaxRetries {
			p.log.Error("amqp: publish failed; giving up", "exchange", exchange, "routing_key", key,
				"message_id", msg.MessageId, "attempts", attempt, "error", err)
			return fmt.Errorf("amqp: publish to %q/%q failed %d times: %w", exchange, key, attempt, err)
		}
		d := pol.Delay(attempt-1, prev, nil)
		prev = d
		p.log.Warn("amqp: publish failed; retrying", "exchange", exchange, "routing_key", key, "message_id", msg.MessageId,
			"attempt", attempt, "max_attempts", pol.MaxRetries+1, "delay", d, "error", err)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("amqp: publish to %q/%q: %w (last error: %w)", exchange, key, ctx.Err(), err)
		case <-t.C:
		}
	}
}

// MaxBatch bounds the messages of one PublishMany or EnqueueMany.
const MaxBatch = 10000

// Outgoing is one message of PublishMany.
type Outgoing struct {
	Exchange, Key string
	Msg           amqp091.Publishing
}

// PublishMany publishes the messages pipelined: every one is sent before
// the first confirm is awaited, which is much faster than one Publish
// after another. A message whose first attempt fails is then retried on
// its own by the publisher's policy. It returns once every message was
// confirmed, or with the errors of those that were not (errors.Join, each
// naming its message); the others are published. Messages without a
// message-id get one; two messages with one id are refused (ErrInvalid),
// as the broker's return of one could not be told from the other's.
func (p *Publisher) PublishMany(ctx context.Context, out []Outgoing) error {
	if len(out) > MaxBatch {
		return fmt.Errorf("%w: %d messages, at most %d in one batch", redrive.ErrInvalid, len(out), MaxBatch)
	}
	seen := make(map[string]bool, len(out))
	for i := range out {
		if out[i].Msg.MessageId == "" {
			out[i].Msg.MessageId = newMessageID()
		}
		if seen[out[i].Msg.MessageId] {
			return fmt.Errorf("%w: message id %q twice in one batch", redrive.ErrInvalid, out[i].Msg.MessageId)
		}
		seen[out[i].Msg.MessageId] = true
	}
	for i := range out {
		release, err := p.acquire(ctx, out[i].Msg.MessageId)
		if err != nil {
			return err
		}
		defer release()
	}
	// First attempts, pipelined on one channel.
	waits := make([]<-chan error, len(out))
	firsts := make([]error, len(out))
	pc, err := p.channel(ctx)
	for i := range out {
		if err != nil {
			firsts[i] = err
			continue
		}
		waits[i], firsts[i] = pc.publish(ctx, out[i].Exchange, out[i].Key, out[i].Msg)
	}
	timeout := time.NewTimer(p.opts.ConfirmTimeout)
	defer timeout.Stop()
	for i, w := range waits {
		if w == nil {
			continue
		}
		select {
		case firsts[i] = <-w:
		case <-ctx.Done():
			firsts[i] = ctx.Err()
		case <-timeout.C:
			p.drop(pc, fmt.Errorf("no confirm within %v", p.opts.ConfirmTimeout))
			firsts[i] = fmt.Errorf("amqp: no confirm within %v", p.opts.ConfirmTimeout)
			for j := i + 1; j < len(waits); j++ {
				if waits[j] != nil {
					firsts[j] = <-waits[j] // drop failed them all
					waits[j] = nil
				}
			}
		}
	}
	// Retries, one message at a time.
	var errs []error
	for i := range out {
		if firsts[i] == nil {
			continue
		}
		if err := p.retrying(ctx, out[i].Exchange, out[i].Key, out[i].Msg, firsts[i], true); err != nil {
			errs = append(errs, fmt.Errorf("message %d (%s): %w", i, out[i].Msg.MessageId, err))
		}
	}
	return errors.Join(errs...)
}

// EnqueueMany publishes many jobs as Enqueue does, pipelined like
// PublishMany, and returns their message ids in order.
func (p *Publisher) EnqueueMany(ctx context.Context, reqs []redrive.Request) ([]string, error) {
	now := time.Now()
	out := make([]Outgoing, len(reqs))
	ids := make([]string, len(reqs))
	msgs := make([]*amqp091.Publishing, len(reqs))
	for i, r := range reqs {
		msg, queue, err := newJobMessage(r.Kind, r.Payload, now, requestOption(r))
		if err == nil {
			err = sealBody(p.opts.Bodies, queue, &msg)
		}
		if err != nil {
			return nil, fmt.Errorf("job %d: %w", i, err)
		}
		out[i] = Outgoing{Key: queue, Msg: msg}
		ids[i] = msg.MessageId
		msgs[i] = &out[i].Msg
	}
	if len(out) == 0 {
		return ids, nil
	}
	queue := out[0].Key
	for i := range out {
		if out[i].Key != queue {
			queue = ""
			break
		}
	}
	ctx, span := startSend(ctx, p.tracer, queue, msgs...)
	for i := range out {
		InjectTrace(ctx, out[i].Msg.Headers)
	}
	err := p.PublishMany(ctx, out)
	tracectx.EndSpan(span, err)
	return ids, err
}

// requestOption sets a Request's fields other than Kind and Payload.
func requestOption(r redrive.Request) redrive.Option {
	return func(to *redrive.Request) {
		kind, payload := to.Kind, to.Payload
		*to = r
		to.Kind, to.Payload = kind, payload
	}
}

// acquire waits until no other publish of the message id is under way.
func (p *Publisher) acquire(ctx context.Context, id string) (func(), error) {
	for {
		p.mu.Lock()
		wait, busy := p.inflight[id]
		if !busy {
			done := make(chan struct{})
			p.inflight[id] = done
			p.mu.Unlock()
			return func() {
				p.mu.Lock()
				delete(p.inflight, id)
				p.mu.Unlock()
				close(done)
			}, nil
		}
		p.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// publishOnce makes one attempt: publish, then wait for the confirm.
func (p *Publisher) publishOnce(ctx context.Context, exchange, key string, msg amqp091.Publishing) error {
	pc, err := p.channel(ctx)
	if err != nil {
		return err
	}
	w, err := pc.publish(ctx, exchange, key, msg)
	if err != nil {
		return err
	}
	t := time.NewTimer(p.opts.ConfirmTimeout)
	defer t.Stop()
	select {
	case err := <-w:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		// The channel may be wedged: the next attempt takes a new one.
		p.drop(pc, fmt.Errorf("no confirm within %v", p.opts.ConfirmTimeout))
		return fmt.Errorf("amqp: no confirm within %v", p.opts.ConfirmTimeout)
	}
}

// channel returns the publisher's confirm-mode channel, opening one when
// there is none or the last one closed.
func (p *Publisher) channel(ctx context.Context) (*pubChannel, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cur != nil && !p.cur.isDead() {
		return p.cur, nil
	}
	ch, err := p.conn.Channel(ctx)
	if err != nil {
		return nil, err
	}
	if err := ch.Confirm(false); err != nil {
		ch.Close()
		return nil, fmt.Errorf("amqp: put the channel in confirm mode: %w", err)
	}
	p.cur = newPubChannel(ch)
	return p.cur, nil
}

// drop abandons a channel that seems wedged.
func (p *Publisher) drop(pc *pubChannel, cause error) {
	p.mu.Lock()
	if p.cur == pc {
		p.cur = nil
	}
	p.mu.Unlock()
	pc.fail(cause)
	pc.ch.Close()
}

// Close closes the publisher's channel. Publishes under way fail.
func (p *Publisher) Close() error {
	p.mu.Lock()
	pc := p.cur
	p.cur = nil
	p.mu.Unlock()
	if pc != nil {
		return pc.ch.Close()
	}
	return nil
}

// pubChannel is one confirm-mode channel and the bookkeeping of its
// unconfirmed publishes. The broker sends a message's basic.return before
// its basic.ack, and the library hands both over in that order on
// unbuffered Go channels to one dispatcher goroutine, so a confirm finds
// its return already recorded.
type pubChannel struct {
	ch     *amqp091.Channel
	sendMu sync.Mutex // orders sequence numbers and publishes

	mu       sync.Mutex
	pending  map[uint64]*waiter
	returned map[string]*ReturnedError // by message id, until its confirm
	dead     chan struct{}
	deadErr  error
}

type waiter struct {
	id   string
	done chan error // buffered: the dispatcher never blocks on it
}

func newPubChannel(ch *amqp091.Channel) *pubChannel {
	pc := &pubChannel{ch: ch, pending: map[uint64]*waiter{}, returned: map[string]*ReturnedError{},
		dead: make(chan struct{})}
	confirms := ch.NotifyPublish(make(chan amqp091.Confirmation))
	returns := ch.NotifyReturn(make(chan amqp091.Return))
	closes := ch.NotifyClose(make(chan *amqp091.Error, 1))
	go pc.dispatch(confirms, returns, closes)
	return pc
}

func (pc *pubChannel) isDead() bool {
	select {
	case <-pc.dead:
		return true
	default:
		return pc.ch.IsClosed()
	}
}

// publish sends msg and returns where its outcome will be delivered.
func (pc *pubChannel) publish(ctx context.Context, exchange, key string, msg amqp091.Publishing) (<-chan error, error) {
	w := &waiter{id: msg.MessageId, done: make(chan error, 1)}
	pc.sendMu.Lock()
	defer pc.sendMu.Unlock()
	if pc.isDead() {
		return nil, errors.New("amqp: publish: channel closed")
	}
	seq := pc.ch.GetNextPublishSeqNo()
	pc.mu.Lock()
	pc.pending[seq] = w
	pc.mu.Unlock()
	if err := pc.ch.PublishWithContext(ctx, exchange, key, true, false, msg); err != nil {
		pc.mu.Lock()
		delete(pc.pending, seq)
		pc.mu.Unlock()
		return nil, fmt.Errorf("amqp: publish: %w", err)
	}
	return w.done, nil
}

// dispatch resolves confirms and records returns until the channel closes.
func (pc *pubChannel) dispatch(confirms <-chan amqp091.Confirmation, returns <-chan amqp091.Return, closes <-chan *amqp091.Error) {
	for confirms != nil || returns != nil {
		select {
		case r, ok := <-returns:
			if !ok {
				returns = nil
				continue
			}
			pc.mu.Lock()
			pc.returned[r.MessageId] = &ReturnedError{Exchange: r.Exchange, RoutingKey: r.RoutingKey, Code: r.ReplyCode, Text: r.ReplyText}
			pc.mu.Unlock()
		case c, ok := <-confirms:
			if !ok {
				confirms = nil
				continue
			}
			pc.mu.Lock()
			w := pc.pending[c.DeliveryTag]
			delete(pc.pending, c.DeliveryTag)
			var err error
			if w != nil {
				if ret := pc.returned[w.id]; ret != nil {
					delete(pc.returned, w.id)
					err = ret
				}
			}
			pc.mu.Unlock()
			if w == nil {
				continue
			}
			if !c.Ack && err == nil {
				err = ErrNacked
			}
			w.done <- err
		case e, ok := <-closes:
			if !ok {
				closes = nil
				continue
			}
			pc.fail(fmt.Errorf("amqp: channel closed: %s", errText(e)))
			closes = nil
		}
	}
	pc.fail(errors.New("amqp: channel closed"))
}

// fail marks the channel dead and fails every unconfirmed publish.
func (pc *pubChannel) fail(cause error) {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if pc.deadErr == nil {
		pc.deadErr = cause
		close(pc.dead)
	}
	for seq, w := range pc.pending {
		delete(pc.pending, seq)
		w.done <- fmt.Errorf("amqp: not confirmed: %w", cause)
	}
}

// Enqueue publishes a job for a Consumer of the queue named by
// redrive.InQueue (default "default"): the payload is encoded as JSON as
// redrive.Client.Enqueue does, the kind is the message's type, the
// message is persistent, and Enqueue returns its message id once the
// broker confirmed it. redrive.IdempotencyKey sets the message id;
// redrive.MaxRetries, redrive.WithPolicy, redrive.Dependency,
// redrive.NotReprocessable, redrive.After and redrive.At are carried in
// headers that the consumer honours. The message carries the trace
// context of its send span (PublisherOptions.TracerProvider), else of
// ctx's span, so that its attempts, retries, dead letter and redrive
// join that trace.
func (p *Publisher) Enqueue(ctx context.Context, kind string, payload any, opts ...redrive.Option) (string, error) {
	msg, queue, err := newJobMessage(kind, payload, time.Now(), opts...)
	if err == nil {
		err = sealBody(p.opts.Bodies, queue, &msg)
	}
	if err != nil {
		return "", err
	}
	ctx, span := startSend(ctx, p.tracer, queue, &msg)
	InjectTrace(ctx, msg.Headers)
	err = p.Publish(ctx, "", queue, msg)
	tracectx.EndSpan(span, err)
	if err != nil {
		return "", err
	}
	return msg.MessageId, nil
}

// sealBody seals the body of msg, a job's message for queue, when bodies
// seals the queue's, and marks it with redrive.HeaderSealed.
func sealBody(bodies *redrive.SealedBodies, queue string, msg *amqp091.Publishing) error {
	out, id, err := bodies.Seal(queue, msg.Body)
	if err != nil {
		return fmt.Errorf("amqp: seal the body: %w", err)
	}
	if id != "" {
		msg.Body = out
		if msg.Headers == nil {
			msg.Headers = amqp091.Table{}
		}
		msg.Headers[redrive.HeaderSealed] = id
	}
	return nil
}

// HeaderPolicy carries a job's own retry policy (JSON of retry.Policy).
const HeaderPolicy = "x-redrive-policy"

// HeaderNotReprocessable marks a message that a DLQ redrive must refuse.
const HeaderNotReprocessable = "x-redrive-not-reprocessable"

// newJobMessage builds the message of a job.
func newJobMessage(kind string, payload any, now time.Time, opts ...redrive.Option) (amqp091.Publishing, string, error) {
	r := redrive.Request{Kind: kind, Payload: payload}
	for _, o := range opts {
		o(&r)
	}
	if r.Kind == "" {
		return amqp091.Publishing{}, "", fmt.Errorf("%w: kind is required", redrive.ErrInvalid)
	}
	body, err := redrive.EncodePayload(r.Payload)
	if err != nil {
		return amqp091.Publishing{}, "", err
	}
	queue := r.Queue
	if queue == "" {
		queue = redrive.DefaultQueue
	}
	h := amqp091.Table{}
	if r.MaxRetries != nil {
		if *r.MaxRetries < 0 {
			return amqp091.Publishing{}, "", fmt.Errorf("%w: max retries must not be negative, got %d", redrive.ErrInvalid, *r.MaxRetries)
		}
		h[HeaderMaxRetries] = int64(*r.MaxRetries)
	}
	if r.Policy != nil {
		if err := r.Policy.Validate(); err != nil {
			return amqp091.Publishing{}, "", fmt.Errorf("%w: policy: %v", redrive.ErrInvalid, err)
		}
		b, _ := json.Marshal(r.Policy)
		h[HeaderPolicy] = string(b)
	}
	if r.Dependency != "" {
		h[HeaderDependency] = r.Dependency
	}
	if r.NotReprocessable {
		h[HeaderNotReprocessable] = true
	}
	due := r.RunAt
	if due.IsZero() && r.Delay > 0 {
		due = now.Add(r.Delay)
	}
	if due.After(now) {
		h[HeaderDue] = ceilMilli(due)
	}
	id := r.IdempotencyKey
	if id == "" {
		id = newMessageID()
	}
	return amqp091.Publishing{Headers: h, ContentType: "application/json", DeliveryMode: amqp091.Persistent,
		MessageId: id, Timestamp: now, Type: kind, Body: body}, queue, nil
}
