package amqp_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/amqp"
)

// BenchmarkSealedBodies is the burn-down of b.N jobs through a real
// RabbitMQ (REDRIVE_AMQP_URL), bodies in clear ("off") and sealed ("on")
// in the same run: EnqueueMany publishes them (sealing each body when
// on), then a consumer (concurrency 16) opens each and runs a no-op
// handler. One op is one job, published, delivered, handled and acked.
// The payload is about 1 KiB of JSON.
func BenchmarkSealedBodies(b *testing.B) {
	c := dial(b)
	payload := map[string]string{"token": "tok-4111111111111111", "blob": strings.Repeat("x", 1000)}
	for _, mode := range []string{"off", "on"} {
		b.Run(mode, func(b *testing.B) {
			q := newQueue(b, c)
			var bodies *redrive.SealedBodies
			if mode == "on" {
				bodies = &redrive.SealedBodies{Keys: sealKeys(b, "k1"), Names: map[string]bool{q: true}}
			}
			cons, err := amqp.NewConsumer(c, amqp.ConsumerOptions{Queues: map[string]amqp.QueueOptions{q: {Concurrency: 16}},
				Bodies: bodies, Executor: redrive.ExecutorOptions{Logger: quiet()}})
			if err != nil {
				b.Fatal(err)
			}
			var handled atomic.Int64
			done := make(chan struct{})
			n := int64(b.N)
			cons.HandleFunc("bench", func(ctx context.Context, j *redrive.Job) error {
				if len(j.Payload) < 1000 {
					b.Errorf("payload %d bytes", len(j.Payload))
				}
				if handled.Add(1) == n {
					close(done)
				}
				return nil
			})
			pub, err := amqp.NewPublisher(c, amqp.PublisherOptions{Bodies: bodies})
			if err != nil {
				b.Fatal(err)
			}
			defer pub.Close()
			topo, _ := cons.Topology(q)
			if err := topo.DeclareConn(context.Background(), c); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			stop := running(b, cons)
			for left := b.N; left > 0; {
				k := min(left, 1000)
				reqs := make([]redrive.Request, k)
				for i := range reqs {
					reqs[i] = redrive.Request{Kind: "bench", Payload: payload, Queue: q}
				}
				if _, err := pub.EnqueueMany(context.Background(), reqs); err != nil {
					b.Fatal(err)
				}
				left -= k
			}
			<-done
			b.StopTimer()
			stop()
		})
	}
}
