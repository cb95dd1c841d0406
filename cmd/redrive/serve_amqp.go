package main

import (
	"context"
	"errors"
	"log/slog"
	"sync"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/amqp"
	"github.com/redrivehq/redrive/internal/config"
)

// brokerSide is what `serve --amqp-url` runs beside the store's worker:
// the router of the managed queues, the keeper of their dead letters
// (unless they stay in the broker), and the publisher through which the
// store's worker sends redriven dead letters back to their queue.
type brokerSide struct {
	cfg    config.AMQP
	conn   *amqp.Conn
	pub    *amqp.Publisher
	router *amqp.Router
	keeper *amqp.Keeper
	log    *slog.Logger

	wg   sync.WaitGroup
	errs chan error
}

// newBrokerSide connects (in the background: serve starts whether or not
// RabbitMQ is up yet) and prepares the managed queues of cfg.AMQP, with
// the same policies, retry budget and observer as the store's worker; it
// registers the kind that publishes dead letters back on worker. It
// returns nil when no queue is managed.
func newBrokerSide(cfg *config.Serve, client *redrive.Client, worker *redrive.Worker, exec redrive.ExecutorOptions,
	log *slog.Logger) (*brokerSide, error) {
	if len(cfg.AMQP.Queues) == 0 {
		return nil, nil
	}
	conn, err := amqp.Open(cfg.AMQP.URL, amqp.ConnOptions{Name: "redrive serve", Logger: log})
	if err != nil {
		return nil, err
	}
	b := &brokerSide{cfg: cfg.AMQP, conn: conn, log: log, errs: make(chan error, 2)}
	queues := map[string]amqp.QueueOptions{}
	for _, q := range cfg.AMQP.ManagedNames() {
		queues[q] = amqp.QueueOptions{Quorum: cfg.AMQP.Quorum}
	}
	exec.ID = worker.ID()
	if b.router, err = amqp.NewRouter(conn, amqp.RouterOptions{Queues: queues, FailureExchange: cfg.AMQP.FailureExchange,
		Executor: exec}); err != nil {
		conn.Close()
		return nil, err
	}
	if cfg.AMQP.DeadLetters == "store" {
		if b.keeper, err = amqp.NewKeeper(conn, amqp.KeeperOptions{Topologies: b.router.Topologies(), Add: client.AddDead,
			Logger: log, Bodies: cfg.AMQPBodies, StoreSeals: cfg.Payloads.Seals}); err != nil {
			conn.Close()
			return nil, err
		}
	}
	if b.pub, err = amqp.NewPublisher(conn, amqp.PublisherOptions{Logger: log}); err != nil {
		conn.Close()
		return nil, err
	}
	amqp.RegisterKind(worker, b.pub, amqp.KindOptions{Get: client.Get, Queues: cfg.AMQP.ManagedNames(), Bodies: cfg.AMQPBodies})
	return b, nil
}

// start runs the router and the keeper until ctx ends; an error that
// stops either (a topology conflicting with existing queues, a broker
// that stayed unreachable through every reconnection attempt) arrives on
// done.
func (b *brokerSide) start(ctx context.Context) {
	run := func(what string, fn func(context.Context) error) {
		b.wg.Go(func() {
			if err := fn(ctx); err != nil && ctx.Err() == nil {
				b.log.Error("amqp: "+what+" stopped", "error", err)
				b.errs <- err
			}
		})
	}
	run("router", b.router.Run)
	if b.keeper != nil {
		run("dead-letter keeper", b.keeper.Run)
	}
}

// done reports an error that stopped the router or the keeper.
func (b *brokerSide) done() <-chan error { return b.errs }

// stop waits for the router and the keeper (stopped by their context),
// then closes the publisher and the connection.
func (b *brokerSide) stop() {
	b.wg.Wait()
	b.pub.Close()
	b.conn.Close()
}

// ManagedQueues implements server.Brokers.
// Connections reports serve's RabbitMQ connection, for /readyz.
func (b *brokerSide) Connections() []amqp.ConnState { return []amqp.ConnState{b.conn.State()} }

func (b *brokerSide) ManagedQueues(ctx context.Context) []amqp.ManagedQueue {
	stats := b.router.Stats()
	var kept map[string]amqp.KeeperStats
	if b.keeper != nil {
		kept = b.keeper.Stats()
	}
	var out []amqp.ManagedQueue
	for _, t := range b.router.Topologies() {
		mq := amqp.ManagedQueue{Queue: t.Queue, Broker: amqp.Redact(b.cfg.URL), FailureExchange: t.FailureExchange,
			DeadLetters: b.cfg.DeadLetters, Router: stats[t.Queue]}
		if k, ok := kept[t.Queue]; ok {
			mq.Keeper = &k
		}
		depths, err := t.Depths(ctx, b.conn)
		if err != nil {
			mq.Error = err.Error()
			if errors.Is(err, context.DeadlineExceeded) {
				mq.Error = "RabbitMQ did not answer in time (not connected?)"
			}
		}
		mq.Queues = depths
		out = append(out, mq)
	}
	return out
}
