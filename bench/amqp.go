package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/amqp"
	"github.com/redrivehq/redrive/retry"
)

// AMQPParams are the parameters of the RabbitMQ workload.
type AMQPParams struct {
	// URL is the broker (its password is not reported).
	URL string `json:"-"`
	// N is the number of messages of each phase.
	N int `json:"n"`
	// Publishers is how many goroutines publish at once.
	Publishers int `json:"publishers"`
	// Batch is how many messages each publisher sends at once with
	// Publisher.EnqueueMany (1: one Enqueue at a time).
	Batch int `json:"batch"`
	// Workers is the consumer's concurrency; its prefetch is twice that.
	Workers int `json:"workers"`
	// Quorum runs on quorum queues.
	Quorum bool `json:"quorum,omitempty"`
}

// AMQPResult is what the RabbitMQ workload measured.
type AMQPResult struct {
	Meta
	Params AMQPParams `json:"params"`
	// Broker is the broker's version.
	Broker string `json:"broker"`
	// Publish is the time N confirmed publishes took from Publishers
	// goroutines; PublishRate is N over it.
	Publish     Duration `json:"publish_ms"`
	PublishRate float64  `json:"publish_per_s"`
	// Consume is the time a consumer took to run and acknowledge N
	// waiting messages with a no-op handler; ConsumeRate is N over it.
	Consume     Duration `json:"consume_ms"`
	ConsumeRate float64  `json:"consume_per_s"`
	// FailOnce is the time the consumer took to complete N waiting
	// messages whose handler fails the first attempt: each one is
	// retried through a 1ms delay queue (a confirmed publish and an ack),
	// then runs again. FailOnceRate is N over it.
	FailOnce     Duration `json:"fail_once_ms"`
	FailOnceRate float64  `json:"fail_once_per_s"`
	// Stats are the consumer's totals at the end.
	Stats amqp.ConsumerStats `json:"consumer"`
	// Managed is the time a managed queue (amqp.Router) took to see N
	// waiting messages through a plain AMQP consumer that rejects each
	// one's first delivery and acks the second: each rejection is
	// dead-lettered to the failure queue, decided by the router, published
	// to a 1ms delay queue, checked due and handed back. ManagedRate is N
	// over it.
	Managed     Duration         `json:"managed_ms"`
	ManagedRate float64          `json:"managed_per_s"`
	Router      amqp.RouterStats `json:"router"`
	// Raw is what amqp091-go alone did in the same run, beside the
	// publish and no-op consume phases, and Ratios redrive's rates over
	// its.
	Raw    AMQPRaw    `json:"raw"`
	Ratios AMQPRatios `json:"redrive_over_raw"`
}

// Info implements Result.
func (r *AMQPResult) Info() *Meta { return &r.Meta }

// Parameters implements Result.
func (r *AMQPResult) Parameters() []Figure {
	q := "classic"
	if r.Params.Quorum {
		q = "quorum"
	}
	return []Figure{{"broker", "RabbitMQ " + r.Broker}, {"messages per phase", strconv.Itoa(r.Params.N)},
		{"publishers", strconv.Itoa(r.Params.Publishers)}, {"publish batch", strconv.Itoa(r.Params.Batch)},
		{"consumer concurrency", strconv.Itoa(r.Params.Workers)},
		{"queues", q},
		{"raw client", "amqp091-go alone, on a durable " + q + " queue of its own: persistent mandatory publishes, the same " +
			"publishers sharing one confirm-mode channel, the same batch; a consumer with the same prefetch acking each message"}}
}

// Figures implements Result.
func (r *AMQPResult) Figures() []Figure {
	n := r.Params.N
	return []Figure{
		{"confirmed publish", fmt.Sprintf("%d in %s = %s", n, r.Publish, fmtRate(r.PublishRate, "msgs"))},
		{"consume, no-op handler", fmt.Sprintf("%d in %s = %s", n, r.Consume, fmtRate(r.ConsumeRate, "msgs"))},
		{"consume, fails once", fmt.Sprintf("%d in %s = %s (2 attempts each)", n, r.FailOnce, fmtRate(r.FailOnceRate, "jobs"))},
		{"consumer", fmt.Sprintf("delivered %d, completed %d, retried %d, dead %d", r.Stats.Delivered, r.Stats.Completed,
			r.Stats.Retried, r.Stats.Dead)},
		{"managed queue, plain consumer rejects once", fmt.Sprintf("%d in %s = %s (2 deliveries each, routed by serve's router)", n,
			r.Managed, fmtRate(r.ManagedRate, "msgs"))},
		{"router", fmt.Sprintf("failures %d, retried %d, returned %d, dead %d", r.Router.Failures, r.Router.Retried,
			r.Router.Returned, r.Router.Dead)},
		{"raw amqp091 confirmed publish", fmt.Sprintf("%d in %s = %s", n, r.Raw.Publish, fmtRate(r.Raw.PublishRate, "msgs"))},
		{"raw amqp091 consume, no-op", fmt.Sprintf("%d in %s = %s (queued %d, acked %d, left %d, returned %d)", n, r.Raw.Consume,
			fmtRate(r.Raw.ConsumeRate, "msgs"), r.Raw.Queued, r.Raw.Consumed, r.Raw.Left, r.Raw.Returned)},
		{"redrive/raw", fmt.Sprintf("publish %.2fx, consume %.2fx (goal: at least 0.8x)", r.Ratios.Publish, r.Ratios.Consume)},
	}
}

// AMQP measures the RabbitMQ transport on the broker at p.URL, on a fresh
// work queue deleted afterwards: N confirmed publishes from Publishers
// goroutines; a consumer burning down N waiting messages with a no-op
// handler; and N waiting messages whose handler fails once, so that each
// takes the retry path. The consumer must complete exactly N (then 2N)
// messages with none dead, or the result comes with an ErrCheck error.
func AMQP(ctx context.Context, p AMQPParams, log io.Writer) (*AMQPResult, error) {
	if p.Batch == 0 {
		p.Batch = 1
	}
	if p.N < 1 || p.Publishers < 1 || p.Workers < 1 || p.Batch < 1 || p.Batch > amqp.MaxBatch {
		return nil, fmt.Errorf("bench: amqp: messages, publishers and workers must be at least 1, the batch from 1 to %d", amqp.MaxBatch)
	}
	if log == nil {
		log = io.Discard
	}
	logger := slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelWarn}))
	res := &AMQPResult{Meta: Meta{Workload: "amqp", Env: CurrentEnv(), Started: time.Now()}, Params: p}
	conn, err := amqp.Dial(ctx, p.URL, amqp.ConnOptions{Name: "redrive bench", Logger: logger,
		Reconnect: &retry.Policy{MaxRetries: 3, Initial: time.Second, Multiplier: 1, MaxDelay: time.Second}})
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	res.Broker = conn.ServerVersion()
	var b [4]byte
	rand.Read(b[:])
	queue := "redrive-bench-" + hex.EncodeToString(b[:])
	policy := retry.Policy{MaxRetries: 1, Initial: time.Millisecond, Multiplier: 1, MaxDelay: time.Millisecond}
	cons, err := amqp.NewConsumer(conn, amqp.ConsumerOptions{
		Queues:   map[string]amqp.QueueOptions{queue: {Concurrency: p.Workers, Quorum: p.Quorum}},
		Executor: redrive.ExecutorOptions{Policy: &policy, Logger: logger, DisableRetryBudget: true}})
	if err != nil {
		return nil, err
	}
	topo, _ := cons.Topology(queue)
	defer deleteQueues(conn, topo)
	// Declare first, so that the publishes of the first phase are routed.
	ch, err := conn.Channel(ctx)
	if err != nil {
		return nil, err
	}
	if err := topo.Declare(ch); err != nil {
		ch.Close()
		return nil, err
	}
	ch.Close()

	cons.HandleFunc("bench.noop", func(ctx context.Context, j *redrive.Job) error { return nil })
	pub, err := amqp.NewPublisher(conn, amqp.PublisherOptions{Logger: logger})
	if err != nil {
		return nil, err
	}
	defer pub.Close()

	publish := func(kind string) (time.Duration, error) {
		start := time.Now()
		var next atomic.Int64
		var wg sync.WaitGroup
		var firstErr error
		var mu sync.Mutex
		for range p.Publishers {
			wg.Go(func() {
				for {
					end := next.Add(int64(p.Batch))
					n := min(int64(p.Batch), int64(p.N)-(end-int64(p.Batch)))
					if n <= 0 {
						return
					}
					var err error
					if n == 1 {
						_, err = pub.Enqueue(ctx, kind, struct{}{}, redrive.InQueue(queue))
					} else {
						reqs := make([]redrive.Request, n)
						for i := range reqs {
							reqs[i] = redrive.Request{Kind: kind, Payload: struct{}{}, Queue: queue}
						}
						_, err = pub.EnqueueMany(ctx, reqs)
					}
					if err != nil {
						mu.Lock()
						firstErr = errors.Join(firstErr, err)
						mu.Unlock()
						return
					}
				}
			})
		}
		wg.Wait()
		return time.Since(start), firstErr
	}
	burn := func(want int64) (time.Duration, error) {
		start := time.Now()
		for cons.Stats().Completed < want {
			if err := ctx.Err(); err != nil {
				return 0, err
			}
			time.Sleep(time.Millisecond)
		}
		return time.Since(start), nil
	}

	raw, err := newRawAMQP(p)
	if err != nil {
		return nil, err
	}
	defer raw.close()

	d, err := publish("bench.noop")
	if err != nil {
		return nil, err
	}
	res.Publish, res.PublishRate = Duration(d), float64(p.N)/d.Seconds()
	if err := raw.publish(ctx, &res.Raw); err != nil {
		return nil, err
	}

	runCtx, stop := context.WithCancel(ctx)
	runErr := make(chan error, 1)
	go func() { runErr <- cons.Run(runCtx) }()
	d, err = burn(int64(p.N))
	if err != nil {
		stop()
		return nil, err
	}
	res.Consume, res.ConsumeRate = Duration(d), float64(p.N)/d.Seconds()

	// The failing phase: publish while the consumer waits, then time the
	// burn-down from the moment every message is in the queue.
	stop()
	if err := <-runErr; err != nil {
		return nil, err
	}
	if err := raw.consume(ctx, &res.Raw); err != nil {
		return nil, err
	}
	res.Ratios = AMQPRatios{Publish: ratio(res.PublishRate, res.Raw.PublishRate), Consume: ratio(res.ConsumeRate, res.Raw.ConsumeRate)}
	if _, err := publish("bench.fail-once"); err != nil {
		return nil, err
	}
	cons2, err := amqp.NewConsumer(conn, amqp.ConsumerOptions{
		Queues:   map[string]amqp.QueueOptions{queue: {Concurrency: p.Workers, Quorum: p.Quorum}},
		Executor: redrive.ExecutorOptions{Policy: &policy, Logger: logger, DisableRetryBudget: true}})
	if err != nil {
		return nil, err
	}
	cons2.HandleFunc("bench.fail-once", func(ctx context.Context, j *redrive.Job) error {
		if j.Attempt == 1 {
			return errors.New("fails once")
		}
		return nil
	})
	runCtx, stop = context.WithCancel(ctx)
	defer stop()
	go func() { runErr <- cons2.Run(runCtx) }()
	start := time.Now()
	for cons2.Stats().Completed < int64(p.N) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		time.Sleep(time.Millisecond)
	}
	d = time.Since(start)
	res.FailOnce, res.FailOnceRate = Duration(d), float64(p.N)/d.Seconds()
	stop()
	if err := <-runErr; err != nil {
		return nil, err
	}
	s1, s2 := cons.Stats(), cons2.Stats()
	res.Stats = amqp.ConsumerStats{Delivered: s1.Delivered + s2.Delivered, Completed: s1.Completed + s2.Completed,
		Retried: s1.Retried + s2.Retried, Dead: s1.Dead + s2.Dead}
	var c checks
	c.expect("completed", res.Stats.Completed, 2*int64(p.N))
	c.expect("retried", res.Stats.Retried, int64(p.N))
	c.expect("dead", res.Stats.Dead, 0)
	c.expect("raw: queued after the publishes", int64(res.Raw.Queued), int64(p.N))
	c.expect("raw: returned", res.Raw.Returned, 0)
	c.expect("raw: acked", res.Raw.Consumed, int64(p.N))
	c.expect("raw: left after the consumer", int64(res.Raw.Left), 0)
	if err := c.err("amqp"); err != nil {
		res.Elapsed = Duration(time.Since(res.Started))
		return res, err
	}
	if err := managedPhase(ctx, conn, pub, p, policy, logger, res); err != nil {
		return res, err
	}
	res.Elapsed = Duration(time.Since(res.Started))
	return res, nil
}

// managedPhase measures a managed queue: N waiting messages, a plain
// AMQP consumer that rejects each first delivery and acks the second,
// and a Router deciding the rejections.
func managedPhase(ctx context.Context, conn *amqp.Conn, pub *amqp.Publisher, p AMQPParams, policy retry.Policy,
	logger *slog.Logger, res *AMQPResult) error {
	var b [4]byte
	rand.Read(b[:])
	queue := "redrive-bench-managed-" + hex.EncodeToString(b[:])
	exchange := queue + "-failures"
	r, err := amqp.NewRouter(conn, amqp.RouterOptions{Queues: map[string]amqp.QueueOptions{queue: {Quorum: p.Quorum,
		Prefetch: 2 * p.Workers}}, FailureExchange: exchange,
		Executor: redrive.ExecutorOptions{Policy: &policy, Logger: logger, DisableRetryBudget: true}})
	if err != nil {
		return err
	}
	topo := r.Topologies()[0]
	defer func() {
		deleteQueues(conn, topo)
		if ch, err := conn.Channel(context.Background()); err == nil {
			ch.QueueDelete(topo.FailedQueue(), false, false, false)
			ch.ExchangeDelete(exchange, false, false)
			ch.Close()
		}
	}()
	if err := r.Declare(ctx); err != nil {
		return err
	}
	reqs := make([]redrive.Request, 0, amqp.MaxBatch)
	for sent := 0; sent < p.N; sent += len(reqs) {
		reqs = reqs[:0]
		for range min(amqp.MaxBatch, p.N-sent) {
			reqs = append(reqs, redrive.Request{Kind: "bench.managed", Payload: struct{}{}, Queue: queue})
		}
		if _, err := pub.EnqueueMany(ctx, reqs); err != nil {
			return err
		}
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	routerErr := make(chan error, 1)
	go func() { routerErr <- r.Run(runCtx) }()
	// The plain consumer: what a consumer in any language does.
	ch, err := conn.Channel(ctx)
	if err != nil {
		return err
	}
	defer ch.Close()
	if err := ch.Qos(2*p.Workers, 0, false); err != nil {
		return err
	}
	deliveries, err := ch.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		return err
	}
	start := time.Now()
	acked := 0
	for acked < p.N {
		select {
		case d, ok := <-deliveries:
			if !ok {
				return errors.New("bench: amqp: the plain consumer's channel closed")
			}
			if _, retried := d.Headers[amqp.HeaderAttempt]; retried {
				d.Ack(false)
				acked++
			} else {
				d.Reject(false)
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	d := time.Since(start)
	res.Managed, res.ManagedRate = Duration(d), float64(p.N)/d.Seconds()
	stop()
	if err := <-routerErr; err != nil {
		return err
	}
	res.Router = r.Stats()[queue]
	if res.Router.Failures != int64(p.N) || res.Router.Retried != int64(p.N) || res.Router.Dead != 0 {
		return fmt.Errorf("%w: amqp: managed queue: router failures %d, retried %d (want %d each), dead %d", ErrCheck,
			res.Router.Failures, res.Router.Retried, p.N, res.Router.Dead)
	}
	return nil
}

// deleteQueues deletes a topology's queues.
func deleteQueues(conn *amqp.Conn, t amqp.Topology) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	names := []string{t.Queue, t.DLQ()}
	for _, d := range t.Tiers {
		names = append(names, t.TierQueue(d))
	}
	for _, n := range names {
		ch, err := conn.Channel(ctx)
		if err != nil {
			return
		}
		ch.QueueDelete(n, false, false, false)
		ch.Close()
	}
}
