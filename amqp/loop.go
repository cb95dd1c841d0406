package amqp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/store"
)

// loopSpec is what consumeLoop needs to consume one queue.
type loopSpec struct {
	conn     *Conn
	log      *slog.Logger
	queue    string
	tag      string
	prefetch int
	// declare declares the queue's topology before every new channel.
	declare func(ctx context.Context, conn *Conn) error
	// delivered, when set, counts each delivery.
	delivered func()
	// handle settles one delivery; it runs on its own goroutine and
	// must ack or nack it. ctx ends at shutdown; hardCtx when running
	// work must stop.
	handle func(ctx, hardCtx context.Context, d *amqp091.Delivery)
	// release, when set, puts back a delivery that arrived after
	// shutdown began (default: nack with requeue).
	release func(d *amqp091.Delivery)
}

// consumeLoop consumes s.queue until ctx ends, declaring the topology and
// resubscribing after every lost channel, and returns once every delivery
// it took is settled. It returns an error only for what retrying cannot
// mend: a closed Conn, or a topology that conflicts with existing queues.
func consumeLoop(ctx, hardCtx context.Context, s loopSpec) error {
	var inflight sync.WaitGroup
	defer inflight.Wait()
	failures := 0
	for ctx.Err() == nil {
		err := subscribe(ctx, hardCtx, s, &inflight)
		if err == nil || ctx.Err() != nil {
			failures = 0
			continue
		}
		var ae *amqp091.Error
		if errors.Is(err, ErrClosed) || (errors.As(err, &ae) && ae.Code == amqp091.PreconditionFailed) {
			return err
		}
		failures++
		d := min(100*time.Millisecond<<min(failures-1, 5), 3*time.Second)
		s.log.Warn("amqp: consuming failed; retrying", "queue", s.queue, "error", err, "delay", d)
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	}
	return nil
}

// subscribe declares the topology, consumes on a new channel until the
// channel closes (nil: resubscribe) or ctx ends, and leaves the channel
// to the deliveries still being settled.
func subscribe(ctx, hardCtx context.Context, s loopSpec, inflight *sync.WaitGroup) error {
	if err := s.declare(ctx, s.conn); err != nil {
		return err
	}
	ch, err := s.conn.Channel(ctx)
	if err != nil {
		return err
	}
	if err := ch.Qos(s.prefetch, 0, false); err != nil {
		ch.Close()
		return fmt.Errorf("set prefetch: %w", err)
	}
	deliveries, err := ch.Consume(s.queue, s.tag, false, false, false, false, nil)
	if err != nil {
		ch.Close()
		return fmt.Errorf("consume: %w", err)
	}
	var mine sync.WaitGroup
	defer func() {
		// The channel settles its deliveries; close it once they are.
		go func() { mine.Wait(); ch.Close() }()
	}()
	take := func(d *amqp091.Delivery, settle func(d *amqp091.Delivery)) {
		if s.delivered != nil {
			s.delivered()
		}
		inflight.Add(1)
		mine.Add(1)
		go func() {
			defer inflight.Done()
			defer mine.Done()
			settle(d)
		}()
	}
	for {
		select {
		case d, ok := <-deliveries:
			if !ok {
				if ctx.Err() == nil {
					s.log.Warn("amqp: channel closed; resubscribing", "queue", s.queue)
				}
				return nil
			}
			take(&d, func(d *amqp091.Delivery) { s.handle(ctx, hardCtx, d) })
		case <-ctx.Done():
			// Stop deliveries; those already sent still arrive and are
			// put back, unchanged.
			if err := ch.Cancel(s.tag, false); err != nil {
				return nil
			}
			for d := range deliveries {
				take(&d, func(d *amqp091.Delivery) {
					if s.release != nil {
						s.release(d)
						return
					}
					requeue(s.log, s.queue, d)
				})
			}
			return nil
		}
	}
}

// ack acknowledges a delivery of queue.
func ack(log *slog.Logger, queue string, d *amqp091.Delivery) {
	if err := d.Ack(false); err != nil {
		log.Info("amqp: ack failed (channel closed); the broker will deliver the message again", "queue", queue,
			"message_id", d.MessageId, "error", err)
	}
}

// requeue puts a delivery of queue back, unchanged: no attempt used.
func requeue(log *slog.Logger, queue string, d *amqp091.Delivery) {
	if err := d.Nack(false, true); err != nil {
		log.Debug("amqp: nack failed (channel closed); the broker requeues the message by itself", "queue", queue,
			"message_id", d.MessageId, "error", err)
	}
}

// forward publishes a delivered message of queue on to queue target with
// the headers set (and without drop), confirmed, then acknowledges the
// delivery. If the publish fails after its retries, the delivery goes
// back to its queue and forward returns false.
func forward(pub *Publisher, log *slog.Logger, queue string, d *amqp091.Delivery, target string, set amqp091.Table,
	what string, drop ...string) bool {
	msg := republish(d, set, drop...)
	// Publishes are not canceled by shutdown: a message half-settled
	// would be handled again.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := pub.Publish(ctx, "", target, msg); err != nil {
		log.Error("amqp: could not publish a "+what+"; the message goes back to its queue", "queue", queue,
			"message_id", msg.MessageId, "target", target, "error", err)
		requeue(log, queue, d)
		return false
	}
	ack(log, queue, d)
	return true
}

// undecodableHeaders are the dead-letter headers of a message of queue
// whose redrive headers cannot be read, as decided by worker.
func undecodableHeaders(queue, worker string, err error) amqp091.Table {
	now := time.Now()
	o := &redrive.Outcome{Kind: store.Bury, At: now, Class: failure.Permanent, DeadReason: redrive.ReasonUndecodable,
		Error: err.Error(), Event: &store.Event{Kind: store.EventDead, Attempt: 0, At: now, Class: failure.Permanent.String(),
			Error: err.Error(), Reason: redrive.ReasonUndecodable, Worker: worker}}
	return deadHeaders(o, queue, 0)
}
