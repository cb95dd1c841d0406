package main

import (
	"context"
	"log/slog"
	"sync"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/internal/config"
	"github.com/redrivehq/redrive/kafka"
)

// kafkaSide is what `serve --kafka-brokers --kafka-topics` runs beside
// the store's worker: the keeper that moves the topics' dead letters into
// the store, and the client through which the store's worker produces
// redriven dead letters back to their topic (and asks the cluster for
// the topics' statistics).
type kafkaSide struct {
	cfg    config.Kafka
	keeper *kafka.Keeper
	cl     *kgo.Client
	adm    *kadm.Client
	log    *slog.Logger

	wg   sync.WaitGroup
	errs chan error
}

// newKafkaSide prepares the keeper of cfg.Kafka's topics (it connects in
// the background: serve starts whether or not Kafka is up yet), each
// topic's topology built from the policy of the store queue of its name,
// and registers on worker the kind that produces dead letters back. It
// returns nil when no topic is kept.
func newKafkaSide(cfg *config.Serve, client *redrive.Client, worker *redrive.Worker, log *slog.Logger) (*kafkaSide, error) {
	if len(cfg.Kafka.Topics) == 0 {
		return nil, nil
	}
	s := &kafkaSide{cfg: cfg.Kafka, log: log, errs: make(chan error, 1)}
	var topos []kafka.Topology
	for _, t := range cfg.Kafka.TopicNames() {
		p := cfg.Retry
		if qp, ok := cfg.QueueRetry[t]; ok {
			p = qp
		}
		topos = append(topos, kafka.NewTopology(t, p))
	}
	logger := kgo.WithLogger(kgoSlog{log})
	var err error
	if s.cl, err = kgo.NewClient(kgo.SeedBrokers(cfg.Kafka.Brokers...), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(0), kgo.ClientID("redrive-serve"), logger); err != nil {
		return nil, err
	}
	s.adm = kadm.NewClient(s.cl)
	if s.keeper, err = kafka.NewKeeper(kafka.KeeperOptions{Brokers: cfg.Kafka.Brokers, Topologies: topos, Add: client.AddDead,
		Logger: log, ClientOptions: []kgo.Opt{kgo.ClientID("redrive-serve-keeper")}, Bodies: cfg.KafkaBodies,
		StoreSeals: cfg.Payloads.Seals}); err != nil {
		s.cl.Close()
		return nil, err
	}
	kafka.RegisterKind(worker, s.cl, kafka.KindOptions{Get: client.Get, Topics: cfg.Kafka.TopicNames(), Bodies: cfg.KafkaBodies})
	return s, nil
}

// start runs the keeper until ctx ends; an error that stops it (a
// dead-letter topic the cluster refuses to create) arrives on done.
func (s *kafkaSide) start(ctx context.Context) {
	s.wg.Go(func() {
		if err := s.keeper.Run(ctx); err != nil && ctx.Err() == nil {
			s.log.Error("kafka: dead-letter keeper stopped", "error", err)
			s.errs <- err
		}
	})
}

// done reports an error that stopped the keeper.
func (s *kafkaSide) done() <-chan error { return s.errs }

// stop waits for the keeper (stopped by its context), then closes the
// client.
func (s *kafkaSide) stop() {
	s.wg.Wait()
	s.cl.Close()
}

// KafkaTopics implements server.KafkaTopics.
func (s *kafkaSide) KafkaTopics(ctx context.Context) []kafka.ManagedTopic {
	return s.keeper.Status(ctx, s.adm, s.cfg.Group)
}
