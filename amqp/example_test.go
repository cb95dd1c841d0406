package amqp_test

import (
	"context"
	"log"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/amqp"
	"github.com/redrivehq/redrive/retry"
)

// Scan is the payload of a "scan" job.
type Scan struct {
	Bucket, Key, ETag string
}

// A consumer of the RabbitMQ work queue "scans" runs a typed handler with
// the classic retry profile (3 retries, 1 s doubling, 30 s cap, +-10%),
// and a publisher enqueues a job there whose message id is derived from
// the object's identity (RabbitMQ does not deduplicate by it, but every
// retry and dead letter of the job carries it). Not run by go test: it
// needs a broker.
func Example() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	conn, err := amqp.Dial(ctx, "amqp://guest:guest@127.0.0.1:5672/", amqp.ConnOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()

	policy := retry.DefaultPolicy()
	cons, err := amqp.NewConsumer(conn, amqp.ConsumerOptions{
		Queues:   map[string]amqp.QueueOptions{"scans": {Concurrency: 10}},
		Executor: redrive.ExecutorOptions{Policy: &policy},
	})
	if err != nil {
		log.Fatal(err)
	}
	redrive.Handle(cons, "scan", func(ctx context.Context, job *redrive.Job, s Scan) error {
		// A failure is classified and retried through scans-retry-1s,
		// -2s, -4s; redrive.Permanent(err) sends it to scans-dlq at once.
		return nil
	}, redrive.Timeout(time.Minute))
	go cons.Run(ctx) // declares scans, scans-dlq and the delay queues

	pub, err := amqp.NewPublisher(conn, amqp.PublisherOptions{})
	if err != nil {
		log.Fatal(err)
	}
	s := Scan{Bucket: "uploads", Key: "a.pdf", ETag: "9b2cf535f27731c974343645a3985328"}
	if _, err := pub.Enqueue(ctx, "scan", s, redrive.InQueue("scans"),
		redrive.IdempotencyKey(redrive.KeyOf(s.Bucket, s.Key, s.ETag))); err != nil {
		log.Fatal(err)
	}
}
