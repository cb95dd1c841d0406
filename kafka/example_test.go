package kafka_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/kafka"
	"github.com/redrivehq/redrive/retry"
)

// A consumer runs handlers for the records of a topic; a record that
// fails is retried through the retry tiers. (The cluster here is
// franz-go's in-process kfake; give your brokers instead.)
func ExampleConsumer() {
	cluster, _ := kfake.NewCluster(kfake.NumBrokers(1))
	defer cluster.Close()
	brokers := cluster.ListenAddrs()

	policy := retry.Policy{MaxRetries: 3, Initial: 10 * time.Millisecond, Multiplier: 2, MaxDelay: time.Second}
	cons, err := kafka.NewConsumer(kafka.ConsumerOptions{
		Brokers:  brokers,
		Group:    "scanners",
		Topics:   map[string]kafka.TopicOptions{"scans": {}},
		Executor: redrive.ExecutorOptions{Policy: &policy, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	done := make(chan struct{})
	type scan struct{ File string }
	redrive.Handle(cons, "scan", func(ctx context.Context, job *redrive.Job, s scan) error {
		if job.Attempt == 1 {
			return fmt.Errorf("scanner busy") // retried through scans-retry-10ms
		}
		fmt.Printf("scanned %s on attempt %d\n", s.File, job.Attempt)
		close(done)
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error)
	go func() { stopped <- cons.Run(ctx) }()

	cl, _ := kgo.NewClient(kgo.SeedBrokers(brokers...))
	defer cl.Close()
	rec, _ := kafka.NewRecord("scans", "scan", scan{File: "a.pdf"}, nil)
	if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		fmt.Println(err)
	}
	<-done
	cancel()
	<-stopped
	// Output: scanned a.pdf on attempt 2
}
