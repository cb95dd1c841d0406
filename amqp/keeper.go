package amqp

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"sync"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/internal/fingerprint"
	"github.com/redrivehq/redrive/internal/lifecycle"
	"github.com/redrivehq/redrive/internal/tracectx"
	"github.com/redrivehq/redrive/internal/transport"
	"github.com/redrivehq/redrive/store"
)

// KeeperOptions configure a Keeper.
type KeeperOptions struct {
	// Topologies are the work queues whose dead letters the keeper
	// keeps; it declares them (idempotently) and consumes each DLQ.
	// Required.
	Topologies []Topology
	// Add stores dead jobs, e.g. redrive.Client.AddDead. Required.
	Add func(ctx context.Context, jobs []store.DeadJob) ([]*store.Job, error)
	// Broker names the broker in the jobs' payloads (default: the Conn's
	// URL without credentials).
	Broker string
	// Prefetch bounds the dead letters being stored at once per queue
	// (default 50).
	Prefetch int
	// Logger receives the keeper's logs (default: the Conn's).
	Logger *slog.Logger
	// Bodies are the queues whose bodies travel sealed, and the keys
	// (see ConsumerOptions.Bodies). With StoreSeals, they decide the
	// form a dead letter's body is stored in, sealed once either way: a
	// sealed body of a queue whose store payloads StoreSeals says are
	// sealed is opened (the store seals the whole message, body
	// included), else kept sealed as it came; a plaintext body of a
	// queue Bodies seals, whose store payloads are not sealed, is sealed.
	// RegisterKind with the same Bodies seals a body stored in clear
	// again when it publishes it back.
	Bodies *redrive.SealedBodies
	// StoreSeals reports whether the store seals the payloads of a
	// queue (nil: it seals none).
	StoreSeals func(queue string) bool
}

// Keeper moves the dead letters of work queues from their <queue>-dlq
// into a redrive store as dead jobs, so that every DLQ tool works on them
// (list, filters, groups by cause, export, purge, edit, redrive). Each
// becomes a job of kind Kind in the store queue named like its origin
// work queue, whose payload is the Message (body kept byte-exact, with
// its content type, properties and headers) and whose history, attempt
// count, reason, class and error are the dead letter's. A message is
// acknowledged only once the store has committed its job, so a crash
// loses nothing; a message delivered again is caught by its idempotency
// key (queue, message id, redrive count), so it is kept once.
//
// Redriving such a job in the store runs it, and running a job of Kind
// publishes the message back to its work queue (see RegisterKind).
type Keeper struct {
	conn   *Conn
	opts   KeeperOptions
	log    *slog.Logger
	queues []*keptQueue

	// run guards Run: a keeper runs once.
	run lifecycle.Once
}

// keptQueue is one DLQ a Keeper consumes.
type keptQueue struct {
	k     *Keeper
	topo  Topology
	stats transport.KeeperCounters
}

// KeeperStats are the running totals of one work queue's DLQ since its
// keeper was created.
type KeeperStats struct {
	// Kept counts the dead letters stored as new dead jobs; Duplicates,
	// those already stored (delivered again after a crash).
	Kept       int64 `json:"kept"`
	Duplicates int64 `json:"duplicates"`
	// StoreFailures counts the failed attempts to store a dead letter:
	// it went back to the DLQ, to be stored later.
	StoreFailures int64 `json:"store_failures"`
}

// NewKeeper returns a keeper of the DLQs of opts.Topologies on conn.
func NewKeeper(conn *Conn, opts KeeperOptions) (*Keeper, error) {
	if len(opts.Topologies) == 0 {
		return nil, errors.New("amqp: keeper: no queues")
	}
	if opts.Add == nil {
		return nil, errors.New("amqp: keeper: no store (Add)")
	}
	if opts.Broker == "" {
		opts.Broker = conn.target
	}
	if opts.Prefetch <= 0 {
		opts.Prefetch = 50
	}
	if opts.Logger == nil {
		opts.Logger = conn.log
	}
	k := &Keeper{conn: conn, opts: opts, log: opts.Logger}
	for _, t := range opts.Topologies {
		if err := t.Validate(); err != nil {
			return nil, err
		}
		k.queues = append(k.queues, &keptQueue{k: k, topo: t})
	}
	sort.Slice(k.queues, func(i, j int) bool { return k.queues[i].topo.Queue < k.queues[j].topo.Queue })
	return k, nil
}

// Stats returns each work queue's running totals, by queue name.
func (k *Keeper) Stats() map[string]KeeperStats {
	out := make(map[string]KeeperStats, len(k.queues))
	for _, q := range k.queues {
		out[q.topo.Queue] = KeeperStats(q.stats.Totals())
	}
	return out
}

// Run keeps dead letters until ctx ends; the messages being stored then
// finish, and the others stay in their DLQ. After a lost connection it
// declares the topologies again and resumes. It returns nil after a
// clean shutdown, or the error that stopped it (a topology that conflicts
// with existing queues, a connection that gave up).
func (k *Keeper) Run(ctx context.Context) error {
	ctx, finish, err := k.run.Start(ctx)
	if err != nil {
		return fmt.Errorf("amqp: keeper %w", err)
	}
	defer finish()
	k.log.Info("amqp: dead-letter keeper starting", "broker", k.conn.target, "queues", len(k.queues))
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var loops sync.WaitGroup
	errs := make(chan error, len(k.queues))
	for _, q := range k.queues {
		loops.Go(func() {
			err := consumeLoop(runCtx, runCtx, loopSpec{conn: k.conn, log: k.log, queue: q.topo.DLQ(),
				tag: "redrive-keeper-" + q.topo.Queue, prefetch: k.opts.Prefetch, declare: q.topo.DeclareConn, handle: q.keep})
			if err != nil {
				errs <- fmt.Errorf("amqp: dead-letter queue %q: %w", q.topo.DLQ(), err)
				stop()
			}
		})
	}
	loops.Wait()
	close(errs)
	for e := range errs {
		err = errors.Join(err, e)
	}
	k.log.Info("amqp: dead-letter keeper stopped", "error", err)
	return err
}

// keep stores one dead letter, then acknowledges it.
func (q *keptQueue) keep(ctx, _ context.Context, d *amqp091.Delivery) {
	dj, err := DeadJobOf(d, q.topo.Queue, q.k.opts.Broker, time.Now())
	if err == nil {
		if sd, changed := q.k.storedBody(dj.Queue, d); changed {
			// The job's key is the delivery's, as it came: the same on
			// a delivery again, whatever a new seal's nonce.
			dj.Payload, err = json.Marshal(messageOf(sd, dj.Queue, q.k.opts.Broker))
		}
	}
	if err != nil {
		// Unreachable for a delivery; kept in the DLQ for whoever looks.
		q.k.log.Error("amqp: dead letter cannot be stored; left in the DLQ", "dlq", q.topo.DLQ(), "message_id", d.MessageId,
			"error", err)
		q.stats.StoreFailed()
		requeueLater(ctx, q.k.log, q.topo.DLQ(), d)
		return
	}
	// The message is acked only after the store committed its job.
	jobs, err := q.stats.Store(ctx, q.k.opts.Add, []store.DeadJob{dj})
	if err != nil {
		q.k.log.Warn("amqp: could not store a dead letter; it stays in the DLQ and is tried again", "dlq", q.topo.DLQ(),
			"message_id", d.MessageId, "error", err)
		requeueLater(ctx, q.k.log, q.topo.DLQ(), d)
		return
	}
	if len(jobs) == 1 && jobs[0].Existing {
		q.k.log.Info("amqp: dead letter already stored; dropped from the DLQ", "dlq", q.topo.DLQ(), "message_id", d.MessageId,
			"job_id", jobs[0].ID, tracectx.LogAttr(jobs[0].Trace))
	} else {
		if len(jobs) == 1 {
			q.k.log.Info("amqp: dead letter stored as a dead job", "dlq", q.topo.DLQ(), "message_id", d.MessageId,
				"job_id", jobs[0].ID, tracectx.LogAttr(jobs[0].Trace), "reason", dj.DeadReason)
		}
	}
	ack(q.k.log, q.topo.DLQ(), d)
}

// storedBody returns d, a dead letter of work queue queue, with the body
// the store is to keep (see KeeperOptions.Bodies), and whether it
// differs from d's.
func (k *Keeper) storedBody(queue string, d *amqp091.Delivery) (*amqp091.Delivery, bool) {
	_, marked := d.Headers[redrive.HeaderSealed]
	storeSeals := k.opts.StoreSeals != nil && k.opts.StoreSeals(queue)
	out := *d
	out.Headers = amqp091.Table{}
	for h, v := range d.Headers {
		if h != redrive.HeaderSealed {
			out.Headers[h] = v
		}
	}
	switch {
	case marked && storeSeals && k.opts.Bodies != nil:
		plain, err := k.opts.Bodies.Open(queue, d.Body, true)
		if err != nil {
			return d, false // kept as it came: undecryptable in the store too
		}
		out.Body = plain
		return &out, true
	case !marked && !storeSeals && k.opts.Bodies.Seals(queue):
		sealed, id, err := k.opts.Bodies.Seal(queue, d.Body)
		if err != nil {
			k.log.Error("amqp: could not seal a dead letter's body; stored as it came", "queue", queue,
				"message_id", d.MessageId, "error", err)
			return d, false
		}
		out.Body, out.Headers[redrive.HeaderSealed] = sealed, id
		return &out, true
	}
	return d, false
}

// requeueLater puts a delivery back after a pause, so that a store that
// is down is not asked again in a tight loop.
func requeueLater(ctx context.Context, log *slog.Logger, queue string, d *amqp091.Delivery) {
	transport.Pause(ctx, time.Second)
	requeue(log, queue, d)
}

// DeadJobOf returns the dead job that keeps a delivery from the DLQ of
// work queue queue (the origin in its HeaderOrigin wins), as a Keeper
// stores it: kind Kind, its payload the Message (bound back to its
// origin queue), its history, attempts, reason, class, error and
// fingerprint from redrive's headers, else from the broker's x-death
// (a message rejected by a consumer that is not redrive's). broker names
// the broker in the payload; now stands in for a death time the message
// does not carry.
func DeadJobOf(d *amqp091.Delivery, queue, broker string, now time.Time) (store.DeadJob, error) {
	dlq := &DLQ{topo: Topology{Queue: queue}}
	dl := dlq.deadLetterOf(d)
	payload, err := json.Marshal(messageOf(d, dl.Origin, broker))
	if err != nil {
		return store.DeadJob{}, err
	}
	dj := store.DeadJob{Queue: dl.Origin, Kind: Kind, Payload: payload, MaxRetries: -1, DeadAt: dl.DeadAt,
		Attempt: dl.Attempts, Redriven: dl.Redriven, DeadReason: dl.Reason, LastError: dl.Error, History: dl.History,
		CreatedAt: d.Timestamp, Trace: traceOf(d.Headers)}
	if dj.DeadAt.IsZero() {
		dj.DeadAt = now
	}
	if dj.CreatedAt.IsZero() || dj.CreatedAt.After(dj.DeadAt) {
		dj.CreatedAt = dj.DeadAt
	}
	if b, _ := d.Headers[HeaderNotReprocessable].(bool); b {
		dj.NotReprocessable = true
	}
	if s, ok := d.Headers[HeaderDependency].(string); ok {
		dj.Dependency = s
	}
	if dl.Class != "" {
		if c, err := failure.ParseClass(dl.Class); err == nil {
			dj.LastErrorClass = c
		}
	}
	if dl.Problem != "" {
		// Unreadable redrive headers: keep what can be said.
		dj.DeadReason, dj.LastErrorClass = redrive.ReasonUndecodable, failure.Permanent
		if dj.LastError == "" {
			dj.LastError = dl.Problem
		}
	}
	if dj.DeadReason == "" {
		dj.DeadReason = "dead_lettered"
	}
	if dj.LastError == "" {
		// Dead-lettered by the broker itself, not by redrive.
		dj.LastError = "dead-lettered by the broker: " + dj.DeadReason
		if dj.LastErrorClass == failure.None {
			dj.LastErrorClass = failure.Unknown
		}
	}
	if dj.LastErrorClass == failure.None {
		dj.LastErrorClass = failure.Unknown
	}
	if n := len(dj.History); n == 0 || dj.History[n-1].Kind != store.EventDead {
		dj.History = append(dj.History, store.Event{Kind: store.EventDead, Attempt: dj.Attempt, At: dj.DeadAt,
			Class: dj.LastErrorClass.String(), Error: dj.LastError, Reason: dj.DeadReason})
	}
	dj.Fingerprint = fingerprint.Of(dj.Queue, Kind, dj.LastErrorClass.String(), dl.Cause, dj.LastError)
	id := d.MessageId
	if id == "" {
		// No message id: the content and the death stand in for it,
		// as the message says them (not the time it is read: a message
		// delivered again must give the same key).
		var deadAt int64
		if !dl.DeadAt.IsZero() {
			deadAt = dl.DeadAt.UnixMilli()
		}
		h := sha256.New()
		h.Write(d.Body)
		fmt.Fprint(h, d.Timestamp.UnixNano(), deadAt, dj.LastError)
		id = "sha256:" + hex.EncodeToString(h.Sum(nil))
	}
	dj.IdempotencyKey = "amqp:" + dj.Queue + ":" + id + ":" + strconv.Itoa(dj.Redriven)
	return dj, nil
}
