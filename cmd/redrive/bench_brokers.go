package main

import (
	"os"
	"strings"
	"time"

	"github.com/redrivehq/redrive/bench"
	"github.com/redrivehq/redrive/internal/config"
	"github.com/spf13/cobra"
)

// newBenchAMQPCmd is `redrive bench amqp`: the RabbitMQ transport.
func newBenchAMQPCmd(g *globalOptions) *cobra.Command {
	p := bench.AMQPParams{N: 20000, Publishers: 8, Workers: bench.DefaultWorkers}
	cmd := &cobra.Command{
		Use:   "amqp",
		Short: "Measure the RabbitMQ transport against raw amqp091-go: confirmed publishes, consumption, the retry path",
		Long: `On a fresh work queue of the broker at --amqp-url (default $` + amqpURLEnv + `),
deleted afterwards: time N confirmed publishes from --publishers goroutines
(one Enqueue at a time, or --batch messages at once with EnqueueMany);
then a consumer (--workers handlers, prefetch twice that) running and
acknowledging N waiting messages with a no-op handler; then N waiting
messages whose handler fails the first attempt, each retried through a 1ms
delay queue before it completes; then a managed queue (what serve
--amqp-queues runs): N waiting messages taken by a plain AMQP consumer
that rejects each first delivery and acks the second, the rejections
decided by the router and handed back through a 1ms delay queue.

Beside the publish and no-op consume phases, in the same run and with the
same N, amqp091-go alone does the same work on a durable queue of its own
of the same type (classic, or quorum with --quorum): N persistent,
mandatory publishes from --publishers goroutines sharing one confirm-mode
channel (as redrive's Publisher shares one), each awaiting its confirm, or
--batch messages then their confirms; then a consumer with the same
prefetch acknowledging the N messages one by one with a no-op. The queue
must hold exactly N messages after the publishes and none after the
consumer, with none returned; the results give redrive's rate over the
raw client's for publish and consume.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if p.URL == "" {
				p.URL = os.Getenv(amqpURLEnv)
			}
			if p.URL == "" {
				return flagErrorf(cmd, "set --amqp-url or $%s", amqpURLEnv)
			}
			if p.N < 1 || p.Publishers < 1 || p.Workers < 1 {
				return flagErrorf(cmd, "-n, --publishers and --workers must be at least 1")
			}
			res, err := bench.AMQP(cmd.Context(), p, cmd.ErrOrStderr())
			if res != nil {
				if g.JSON {
					if werr := writeJSON(cmd.OutOrStdout(), res); werr != nil {
						return werr
					}
				} else if werr := printResult(cmd.OutOrStdout(), res); werr != nil {
					return werr
				}
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&p.URL, "amqp-url", "", "RabbitMQ URL (default $"+amqpURLEnv+")")
	f.IntVarP(&p.N, "messages", "n", p.N, "messages per phase")
	f.IntVar(&p.Publishers, "publishers", p.Publishers, "goroutines publishing at once")
	f.IntVar(&p.Batch, "batch", 1, "messages each publisher sends at once with EnqueueMany (1: Enqueue one at a time)")
	f.IntVar(&p.Workers, "workers", p.Workers, "consumer concurrency")
	f.BoolVar(&p.Quorum, "quorum", false, "quorum queues instead of classic ones")
	return cmd
}

// newBenchKafkaCmd is `redrive bench kafka`: the Kafka transport.
func newBenchKafkaCmd(g *globalOptions, o *benchOptions) *cobra.Command {
	p := bench.KafkaParams{N: 20000, Partitions: 4, LatenessRecords: bench.DefaultKafkaLatenessRecords,
		LatenessDelay: bench.Duration(bench.DefaultKafkaLatenessDelay)}
	var brokers string
	cmd := &cobra.Command{
		Use:   "kafka",
		Short: "Measure the Kafka transport against the raw kgo client: produces, consumption, the retry path, retry lateness",
		Long: `On fresh topics of the cluster at --kafka-brokers (default $` + kafkaBrokersEnv + `),
deleted afterwards, or, when neither is set, of an in-process kfake cluster
(franz-go's fake Kafka, in memory) the command starts: time N asynchronous
produces (acks from every in-sync replica, idempotent, spread round-robin
over --partitions partitions); then a kafka.Consumer completing N waiting
records with a no-op handler (from its start: the group join included);
then N waiting records on a fresh topic whose handler fails the first
attempt, each produced to the 1ms retry tier, consumed from it and run
again. The consumers must count exactly 2N completions, N retries and no
dead letter.

Beside each of these phases, in the same run and with the same N,
partitions, acks and fetch settings, franz-go's kgo client alone does the
same work on topics of its own: N produces (the same payloads, without
redrive's kind header: redrive's producer side is kafka.NewRecord on a kgo
client, so that ratio mostly shows the run-to-run noise); a group consumer
committing marked offsets, handling N waiting records with a no-op; and
the retry path without redrive's decisions: N waiting records each
produced to a retry topic (acks=all, awaited) before its offset is marked,
then consumed from the retry topic. Each raw phase must count exactly N
records. The results give redrive's rate over the raw client's for
produce, consume and the retry path.

Last, the lateness phase: --lateness-records waiting records whose first
attempt fails, each retried once after --lateness-delay through the tier
of that delay; the lateness of a retry is the start of its second attempt
minus (the end of its first + the delay), reported as percentiles. It must
count exactly that many completions and retries (0 records: no lateness
phase).

The parameters say which cluster was measured: kfake does no disk I/O, so
its figures bound the consumer's own overhead, not a real cluster's.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if p.N < 1 || p.Partitions < 1 {
				return flagErrorf(cmd, "-n and --partitions must be at least 1")
			}
			if p.FetchMaxWait < 0 {
				return flagErrorf(cmd, "--fetch-max-wait must not be negative")
			}
			if p.LatenessRecords < 0 {
				return flagErrorf(cmd, "--lateness-records must not be negative, got %d", p.LatenessRecords)
			}
			if p.LatenessDelay <= 0 {
				return flagErrorf(cmd, "--lateness-delay must be positive, got %s", time.Duration(p.LatenessDelay))
			}
			src := "--kafka-brokers"
			if !cmd.Flags().Changed("kafka-brokers") {
				brokers, src = os.Getenv(kafkaBrokersEnv), "$"+kafkaBrokersEnv
			}
			if strings.TrimSpace(brokers) != "" {
				seeds, err := config.ParseKafkaBrokers(brokers)
				if err != nil {
					return flagErrorf(cmd, "%s: %v", src, err)
				}
				p.Brokers = seeds
			}
			var res *bench.KafkaResult
			err := o.profiled(func() error {
				var err error
				res, err = bench.Kafka(cmd.Context(), p, cmd.ErrOrStderr())
				return err
			})
			if res != nil {
				if g.JSON {
					if werr := writeJSON(cmd.OutOrStdout(), res); werr != nil {
						return werr
					}
				} else if werr := printResult(cmd.OutOrStdout(), res); werr != nil {
					return werr
				}
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&brokers, "kafka-brokers", "", "seed brokers, host:port,... (default $"+kafkaBrokersEnv+"; neither: an in-process kfake cluster)")
	f.IntVarP(&p.N, "records", "n", p.N, "records per phase")
	f.Int32Var(&p.Partitions, "partitions", p.Partitions, "partitions of each main topic and its retry tiers")
	f.DurationVar((*time.Duration)(&p.FetchMaxWait), "fetch-max-wait", 0, "the consumers' kgo.FetchMaxWait (0: the consumer's default, 100ms)")
	f.IntVar(&p.LatenessRecords, "lateness-records", p.LatenessRecords, "records of the retry lateness phase (0: none)")
	f.DurationVar((*time.Duration)(&p.LatenessDelay), "lateness-delay", time.Duration(p.LatenessDelay),
		"the lateness phase's retry delay (its tier)")
	return cmd
}
