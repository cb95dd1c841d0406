package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rabbitmq/amqp091-go"
)

// AMQPRaw is what the raw-client phases of the RabbitMQ workload
// measured: amqp091-go used directly, no redrive code, on a queue of its
// own of the same type, with the settings of the redrive phase each one
// is compared with.
type AMQPRaw struct {
	// Publish is the time N persistent, mandatory publishes took to be
	// confirmed from Publishers goroutines sharing one confirm-mode
	// channel (as redrive's Publisher shares one), each publishing one
	// message and awaiting its confirm, or Batch messages then awaiting
	// their confirms; PublishRate is N over it.
	Publish     Duration `json:"publish_ms"`
	PublishRate float64  `json:"publish_per_s"`
	// Consume is the time a consumer on a channel of its own, with the
	// redrive consumer's prefetch (twice Workers), took from opening
	// that channel to acknowledge, one by one, N waiting messages with a
	// no-op; ConsumeRate is N over it.
	Consume     Duration `json:"consume_ms"`
	ConsumeRate float64  `json:"consume_per_s"`
	// Queued is the queue's depth after the publish phase, Consumed the
	// messages the consumer acknowledged and Left the depth after it;
	// Returned counts the publishes the broker returned as unroutable.
	// Queued and Consumed must be N, Left and Returned 0.
	Queued   int   `json:"queued"`
	Consumed int64 `json:"consumed"`
	Left     int   `json:"left"`
	Returned int64 `json:"returned"`
}

// AMQPRatios are redrive's rates over the raw client's, in the same run
// (1: as fast; the documented goal is at least 0.8).
type AMQPRatios struct {
	Publish float64 `json:"publish"`
	Consume float64 `json:"consume"`
}

// rawAMQP is the raw client's connection and queue.
type rawAMQP struct {
	p     AMQPParams
	conn  *amqp091.Connection
	queue string
}

// newRawAMQP dials the broker with amqp091-go and declares a fresh
// durable queue of the workload's type (classic or quorum).
func newRawAMQP(p AMQPParams) (*rawAMQP, error) {
	conn, err := amqp091.DialConfig(p.URL, amqp091.Config{Properties: amqp091.Table{"connection_name": "redrive bench raw"}})
	if err != nil {
		return nil, fmt.Errorf("bench: amqp: raw client: dial: %w", err)
	}
	var b [4]byte
	rand.Read(b[:])
	r := &rawAMQP{p: p, conn: conn, queue: "redrive-bench-raw-" + hex.EncodeToString(b[:])}
	args := amqp091.Table{}
	if p.Quorum {
		args["x-queue-type"] = "quorum"
	}
	ch, err := conn.Channel()
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("bench: amqp: raw client: %w", err)
	}
	defer ch.Close()
	if _, err := ch.QueueDeclare(r.queue, true, false, false, false, args); err != nil {
		conn.Close()
		return nil, fmt.Errorf("bench: amqp: raw client: declare %s: %w", r.queue, err)
	}
	return r, nil
}

// close deletes the queue and closes the connection.
func (r *rawAMQP) close() {
	if ch, err := r.conn.Channel(); err == nil {
		ch.QueueDelete(r.queue, false, false, false)
		ch.Close()
	}
	r.conn.Close()
}

// depth returns the messages ready in the queue.
func (r *rawAMQP) depth() (int, error) {
	ch, err := r.conn.Channel()
	if err != nil {
		return 0, fmt.Errorf("bench: amqp: raw client: %w", err)
	}
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(r.queue, true, false, false, false, nil)
	if err != nil {
		return 0, fmt.Errorf("bench: amqp: raw client: queue %s: %w", r.queue, err)
	}
	return q.Messages, nil
}

// publish runs the raw publish phase and records it in raw.
func (r *rawAMQP) publish(ctx context.Context, raw *AMQPRaw) error {
	ch, err := r.conn.Channel()
	if err != nil {
		return fmt.Errorf("bench: amqp: raw client: %w", err)
	}
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		return fmt.Errorf("bench: amqp: raw client: confirm mode: %w", err)
	}
	var returned atomic.Int64
	returns := ch.NotifyReturn(make(chan amqp091.Return, 1))
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		for range returns {
			returned.Add(1)
		}
	}()
	p := r.p
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs error
	for range p.Publishers {
		wg.Go(func() {
			dcs := make([]*amqp091.DeferredConfirmation, 0, p.Batch)
			for {
				end := next.Add(int64(p.Batch))
				n := min(int64(p.Batch), int64(p.N)-(end-int64(p.Batch)))
				if n <= 0 {
					return
				}
				dcs = dcs[:0]
				err := func() error {
					for range n {
						msg := amqp091.Publishing{ContentType: "application/json", DeliveryMode: amqp091.Persistent,
							Timestamp: time.Now(), Body: []byte("{}")}
						dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", r.queue, true, false, msg)
						if err != nil {
							return fmt.Errorf("bench: amqp: raw client: publish: %w", err)
						}
						dcs = append(dcs, dc)
					}
					for _, dc := range dcs {
						acked, err := dc.WaitContext(ctx)
						if err != nil {
							return fmt.Errorf("bench: amqp: raw client: confirm: %w", err)
						}
						if !acked {
							return errors.New("bench: amqp: raw client: the broker nacked a publish")
						}
					}
					return nil
				}()
				if err != nil {
					mu.Lock()
					errs = errors.Join(errs, err)
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	d := time.Since(start)
	ch.Close()
	<-drained
	if errs != nil {
		return errs
	}
	raw.Publish, raw.PublishRate, raw.Returned = Duration(d), rate(int64(p.N), d), returned.Load()
	raw.Queued, err = r.depth()
	return err
}

// consume runs the raw consume phase and records it in raw.
func (r *rawAMQP) consume(ctx context.Context, raw *AMQPRaw) error {
	start := time.Now()
	ch, err := r.conn.Channel()
	if err != nil {
		return fmt.Errorf("bench: amqp: raw client: %w", err)
	}
	defer ch.Close()
	if err := ch.Qos(2*r.p.Workers, 0, false); err != nil {
		return fmt.Errorf("bench: amqp: raw client: prefetch: %w", err)
	}
	deliveries, err := ch.Consume(r.queue, "redrive-bench-raw", false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("bench: amqp: raw client: consume: %w", err)
	}
	stall := time.NewTimer(DefaultStallTimeout)
	defer stall.Stop()
	var acked int64
	for acked < int64(r.p.N) {
		select {
		case d, ok := <-deliveries:
			if !ok {
				return errors.New("bench: amqp: raw client: the consumer's channel closed")
			}
			if err := d.Ack(false); err != nil {
				return fmt.Errorf("bench: amqp: raw client: ack: %w", err)
			}
			acked++
			stall.Reset(DefaultStallTimeout)
		case <-stall.C:
			return fmt.Errorf("bench: amqp: raw client: no message for %s (%d of %d)", DefaultStallTimeout, acked, r.p.N)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	d := time.Since(start)
	if err := ch.Cancel("redrive-bench-raw", false); err != nil {
		return fmt.Errorf("bench: amqp: raw client: cancel: %w", err)
	}
	raw.Consume, raw.ConsumeRate, raw.Consumed = Duration(d), rate(acked, d), acked
	raw.Left, err = r.depth()
	return err
}
