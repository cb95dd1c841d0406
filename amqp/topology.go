package amqp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/redrivehq/redrive/internal/carry"
	"github.com/redrivehq/redrive/retry"
	"github.com/redrivehq/redrive/store"
)

// MaxTiers bounds the delay queues of one work queue.
const MaxTiers = 32

// DefaultDeliveryLimit is the x-delivery-limit of a quorum work queue:
// a message whose consumers crashed this many times before deciding is
// dead-lettered.
const DefaultDeliveryLimit = 20

// Topology is the set of broker objects of one work queue: the queue, its
// dead-letter queue and its delay queues (see the package documentation).
// It is a plain value: build it with NewTopology, declare it with Declare,
// and declare it again after every reconnect (consumers do).
type Topology struct {
	// Queue is the work queue's name.
	Queue string
	// Quorum makes every queue a quorum queue, with at-least-once
	// dead-lettering (RabbitMQ 3.10 or later). Default: classic queues.
	Quorum bool
	// DeliveryLimit is a quorum work queue's x-delivery-limit (0:
	// DefaultDeliveryLimit). Classic queues ignore it.
	DeliveryLimit int
	// Tiers are the delays of the delay queues, ascending, each a whole
	// number of milliseconds, at least 1ms.
	Tiers []time.Duration
	// FailureExchange, when set, makes the queue a managed queue, whose
	// consumers are not redrive's (see Router): the work queue
	// dead-letters to this direct exchange, with the queue's name as
	// routing key; the failure queue <queue>-failed, bound to the
	// exchange with that key, receives those rejections and the failures
	// consumers publish to the exchange; and the delay queues dead-letter
	// to the failure queue, so that the Router hands a message back to
	// the work queue only once it is due.
	FailureExchange string
}

// DefaultFailureExchange is the failure exchange of managed queues, unless
// RouterOptions say otherwise.
const DefaultFailureExchange = "redrive.failures"

// FailedQueue returns the name of a managed queue's failure queue:
// <queue>-failed.
func (t Topology) FailedQueue() string { return t.Queue + "-failed" }

// NewTopology returns the topology of the work queue named queue whose
// retries follow p: one delay queue per distinct delay of p's schedule
// (without jitter), and, for the longer waits outside the schedule (a
// Retry-After, an open breaker, a retry budget's spreading), a ladder of
// delay queues ten times longer each, up to p's MaxRetryAfter (default
// 1h), so that such a wait takes a few hops rather than hundreds. At most
// MaxTiers in all.
func NewTopology(queue string, p retry.Policy) Topology {
	return Topology{Queue: queue, Tiers: carry.Tiers(p, MaxTiers)}
}

// DLQ returns the name of the dead-letter queue: <queue>-dlq.
func (t Topology) DLQ() string { return t.Queue + "-dlq" }

// TierQueue returns the name of the delay queue of delay d:
// <queue>-retry-<d>, d in seconds when whole (q-retry-4s), else in
// milliseconds (q-retry-1500ms).
func (t Topology) TierQueue(d time.Duration) string {
	if d%time.Second == 0 {
		return fmt.Sprintf("%s-retry-%ds", t.Queue, d/time.Second)
	}
	return fmt.Sprintf("%s-retry-%dms", t.Queue, d/time.Millisecond)
}

// Validate reports a topology that cannot be declared.
func (t Topology) Validate() error {
	var errs []error
	if t.Queue == "" {
		errs = append(errs, errors.New("amqp: topology: empty queue name"))
	}
	if len(t.Queue) > 200 || strings.ContainsFunc(t.Queue, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		errs = append(errs, fmt.Errorf("amqp: topology: queue name %q is too long or has control characters", t.Queue))
	}
	if strings.HasPrefix(t.Queue, "amq.") {
		errs = append(errs, fmt.Errorf("amqp: topology: queue name %q: the amq. prefix is reserved by the broker", t.Queue))
	}
	if len(t.Tiers) > MaxTiers {
		errs = append(errs, fmt.Errorf("amqp: topology: %d delay tiers, at most %d", len(t.Tiers), MaxTiers))
	}
	for i, d := range t.Tiers {
		if d < time.Millisecond || d%time.Millisecond != 0 {
			errs = append(errs, fmt.Errorf("amqp: topology: tier %v: want a whole number of milliseconds, at least 1ms", d))
		}
		if i > 0 && d <= t.Tiers[i-1] {
			errs = append(errs, fmt.Errorf("amqp: topology: tiers must be ascending and distinct, got %v after %v", d, t.Tiers[i-1]))
		}
	}
	if strings.HasPrefix(t.FailureExchange, "amq.") || len(t.FailureExchange) > 200 ||
		strings.ContainsFunc(t.FailureExchange, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		errs = append(errs, fmt.Errorf("amqp: topology: failure exchange %q: too long, control characters, or the reserved amq. prefix", t.FailureExchange))
	}
	if t.DeliveryLimit < 0 {
		errs = append(errs, fmt.Errorf("amqp: topology: negative delivery limit %d", t.DeliveryLimit))
	}
	return errors.Join(errs...)
}

// tierFor returns the longest delay queue not longer than d; ok is false
// when d is shorter than every tier (the consumer waits it out).
func (t Topology) tierFor(d time.Duration) (time.Duration, bool) {
	i, found := slices.BinarySearch(t.Tiers, d)
	if found {
		return t.Tiers[i], true
	}
	if i == 0 {
		return 0, false
	}
	return t.Tiers[i-1], true
}

// queueSpec is one queue to declare.
type queueSpec struct {
	name string
	args amqp091.Table
}

// queues lists the queues of the topology with their arguments, the work
// queue first.
func (t Topology) queues() []queueSpec {
	typed := func(extra amqp091.Table) amqp091.Table {
		args := amqp091.Table{}
		if t.Quorum {
			args["x-queue-type"] = "quorum"
		}
		for k, v := range extra {
			args[k] = v
		}
		return args
	}
	work := amqp091.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": t.DLQ()}
	back := amqp091.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": t.Queue}
	if t.FailureExchange != "" {
		work = amqp091.Table{"x-dead-letter-exchange": t.FailureExchange, "x-dead-letter-routing-key": t.Queue}
		back = amqp091.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": t.FailedQueue()}
	}
	if t.Quorum {
		limit := t.DeliveryLimit
		if limit == 0 {
			limit = DefaultDeliveryLimit
		}
		work["x-dead-letter-strategy"] = "at-least-once"
		work["x-overflow"] = "reject-publish"
		work["x-delivery-limit"] = int64(limit)
	}
	specs := []queueSpec{{t.Queue, typed(work)}, {t.DLQ(), typed(nil)}}
	if t.FailureExchange != "" {
		specs = append(specs, queueSpec{t.FailedQueue(), typed(nil)})
	}
	for _, d := range t.Tiers {
		tier := amqp091.Table{"x-message-ttl": int64(d / time.Millisecond)}
		for k, v := range back {
			tier[k] = v
		}
		if t.Quorum {
			tier["x-dead-letter-strategy"] = "at-least-once"
			tier["x-overflow"] = "reject-publish"
		}
		specs = append(specs, queueSpec{t.TierQueue(d), typed(tier)})
	}
	return specs
}

// Declare declares every queue of the topology on ch, durable, with the
// arguments the topology sets; the work queue last, once every queue its
// rejections reach exists and is bound. Declaring again is harmless. A
// queue that already exists with other arguments is an error naming it,
// the broker's complaint and how to migrate, after which ch is closed
// (the broker closes a channel on such an error). DeclareConn adopts
// such a queue when the difference is compatible.
func (t Topology) Declare(ch *amqp091.Channel) error {
	return t.declare(func() (*amqp091.Channel, error) { return ch, nil }, func() {}, nil)
}

// DeclareConn is Declare on channels of conn, with one difference: an
// existing queue whose extra arguments are ones redrive does not set and
// that lose no message (CompatibleArguments) is adopted as it is, and
// logged, instead of being an error. Any other difference (an argument
// redrive sets, given another value; or an argument that drops, expires
// or rejects messages) is the error Declare returns.
func (t Topology) DeclareConn(ctx context.Context, conn *Conn) error {
	var ch *amqp091.Channel
	defer func() {
		if ch != nil {
			ch.Close()
		}
	}()
	open := func() (*amqp091.Channel, error) {
		if ch == nil {
			c, err := conn.Channel(ctx)
			if err != nil {
				return nil, err
			}
			ch = c
		}
		return ch, nil
	}
	closed := func() { ch = nil } // the broker closed it
	return t.declare(open, closed, conn.log)
}

// CompatibleArguments are the queue arguments redrive adopts on an
// existing queue (DeclareConn) though it does not set them: they change
// how the broker stores, orders or hands out messages, never whether a
// message is kept. x-max-length, x-max-length-bytes, x-message-ttl,
// x-expires and x-overflow are not among them (they drop, expire or
// refuse messages), nor are the arguments redrive sets itself.
var CompatibleArguments = []string{
	"x-max-priority", "x-queue-mode", "x-queue-version", "x-single-active-consumer",
	"x-queue-leader-locator", "x-queue-master-locator", "x-initial-cluster-size",
	"x-quorum-initial-group-size", "x-max-in-memory-length", "x-max-in-memory-bytes",
}

// maxAdopted bounds the arguments adopted on one queue.
const maxAdopted = 16

// extraArgRE matches the broker's complaint about an argument the
// existing queue has and the declaration lacks.
var extraArgRE = regexp.MustCompile(`inequivalent arg '([^']+)' for queue '.*' in vhost '.*': received none but current is the value '(.*)' of type '([a-z]+)'$`)

// compatibleExtra reads the broker's complaint reason: when it is about
// an argument of CompatibleArguments that the existing queue has and
// args lack, it returns the argument and its value.
func compatibleExtra(reason string, args amqp091.Table) (string, any, bool) {
	m := extraArgRE.FindStringSubmatch(reason)
	if m == nil || !slices.Contains(CompatibleArguments, m[1]) {
		return "", nil, false
	}
	if _, set := args[m[1]]; set {
		return "", nil, false
	}
	switch m[3] {
	case "long", "signedint", "short", "byte":
		n, err := strconv.ParseInt(m[2], 10, 64)
		if err != nil {
			return "", nil, false
		}
		return m[1], n, true
	case "longstr":
		return m[1], m[2], true
	case "bool":
		b, err := strconv.ParseBool(m[2])
		if err != nil {
			return "", nil, false
		}
		return m[1], b, true
	}
	return "", nil, false
}

// conflict is the error of a queue that exists with arguments redrive
// cannot adopt: it says how to move to redrive's topology without losing
// the queue's messages (docs/rabbitmq.md has the steps).
func (t Topology) conflict(name, reason string, err error) error {
	return fmt.Errorf("amqp: queue %q exists with other arguments than redrive declares (%s), and redrive does not adopt that difference; "+
		"deleting the queue would lose its messages: instead give redrive a new queue name and move the messages over with a shovel "+
		"(or let the old queue drain), or set such settings with a RabbitMQ policy instead of queue arguments "+
		"(redrive declares quorum %v, tiers %v; see docs/rabbitmq.md, \"An existing queue\"): %w", name, reason, t.Quorum, t.Tiers, err)
}

// declare declares the topology on the channel open returns; closed says
// the broker closed it (after a refused declaration). With a logger,
// compatible extra arguments of an existing queue are adopted.
func (t Topology) declare(open func() (*amqp091.Channel, error), closed func(), log *slog.Logger) error {
	if err := t.Validate(); err != nil {
		return err
	}
	if t.FailureExchange != "" {
		ch, err := open()
		if err != nil {
			return err
		}
		if err := ch.ExchangeDeclare(t.FailureExchange, "direct", true, false, false, false, nil); err != nil {
			return fmt.Errorf("amqp: declare exchange %q: %w", t.FailureExchange, err)
		}
	}
	declare := func(q queueSpec) error {
		args := maps.Clone(q.args)
		var adopted []string
		for {
			ch, err := open()
			if err != nil {
				return err
			}
			_, err = ch.QueueDeclare(q.name, true, false, false, false, args)
			if err == nil {
				if len(adopted) > 0 {
					log.Info("amqp: adopted an existing queue with arguments redrive does not set",
						"queue", q.name, "arguments", strings.Join(adopted, ", "))
				}
				return nil
			}
			var ae *amqp091.Error
			if !errors.As(err, &ae) || ae.Code != amqp091.PreconditionFailed {
				return fmt.Errorf("amqp: declare queue %q: %w", q.name, err)
			}
			closed()
			arg, v, ok := compatibleExtra(ae.Reason, args)
			if log == nil || !ok || len(adopted) >= maxAdopted {
				return t.conflict(q.name, ae.Reason, err)
			}
			args[arg] = v
			adopted = append(adopted, fmt.Sprintf("%s=%v", arg, v))
		}
	}
	// The work queue last: a consumer may reject a message as soon as it
	// exists, and the broker drops a message dead-lettered to an exchange
	// that routes it nowhere. So every queue a rejection goes to, and the
	// failure exchange's binding, come first.
	specs := t.queues()
	for _, q := range specs[1:] {
		if err := declare(q); err != nil {
			return err
		}
	}
	if t.FailureExchange != "" {
		ch, err := open()
		if err != nil {
			return err
		}
		if err := ch.QueueBind(t.FailedQueue(), t.Queue, t.FailureExchange, false, nil); err != nil {
			return fmt.Errorf("amqp: bind queue %q to exchange %q: %w", t.FailedQueue(), t.FailureExchange, err)
		}
	}
	return declare(specs[0])
}

// QueueDepth is what the broker says of one queue of a topology.
type QueueDepth struct {
	// Name is the queue's name; Role is what it is to the topology:
	// work, failed, tier or dlq.
	Name string `json:"name"`
	Role string `json:"role"`
	// Delay is a delay queue's delay (in JSON, milliseconds).
	Delay store.Duration `json:"delay,omitempty"`
	// Messages are the messages ready in the queue (not those consumers
	// hold unacknowledged); Consumers, the consumers subscribed.
	Messages  int `json:"messages"`
	Consumers int `json:"consumers"`
	// Missing is set when the queue does not exist.
	Missing bool `json:"missing,omitempty"`
}

// Depths asks the broker for the depth and consumers of every queue of
// the topology, the work queue first, without declaring anything.
func (t Topology) Depths(ctx context.Context, conn *Conn) ([]QueueDepth, error) {
	var out []QueueDepth
	var ch *amqp091.Channel
	defer func() {
		if ch != nil {
			ch.Close()
		}
	}()
	for _, q := range t.queues() {
		if ch == nil {
			var err error
			if ch, err = conn.Channel(ctx); err != nil {
				return nil, err
			}
		}
		qd := QueueDepth{Name: q.name, Role: "work"}
		switch {
		case q.name == t.DLQ():
			qd.Role = "dlq"
		case t.FailureExchange != "" && q.name == t.FailedQueue():
			qd.Role = "failed"
		case q.name != t.Queue:
			qd.Role = "tier"
			ms, _ := q.args["x-message-ttl"].(int64)
			qd.Delay = store.Duration(time.Duration(ms) * time.Millisecond)
		}
		st, err := ch.QueueDeclarePassive(q.name, true, false, false, false, nil)
		if err != nil {
			var ae *amqp091.Error
			if errors.As(err, &ae) && ae.Code == amqp091.NotFound {
				// The broker closed the channel; the next queue takes a
				// new one.
				qd.Missing, ch = true, nil
				out = append(out, qd)
				continue
			}
			return nil, fmt.Errorf("amqp: inspect queue %q: %w", q.name, err)
		}
		qd.Messages, qd.Consumers = st.Messages, st.Consumers
		out = append(out, qd)
	}
	return out, nil
}

// supported reports what t needs that a broker of version v lacks.
// Quorum queues with at-least-once dead-lettering need RabbitMQ 3.10.
func (t Topology) supported(v string) error {
	if !t.Quorum {
		return nil
	}
	ver, ok := parseVersion(v)
	if ok && !ver.atLeast(3, 10) {
		return fmt.Errorf("amqp: queue %q: quorum queues with at-least-once dead-lettering need RabbitMQ 3.10 or later; "+
			"the broker is %s (use classic queues, or upgrade)", t.Queue, v)
	}
	return nil
}
