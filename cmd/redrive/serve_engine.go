package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/trace"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/amqp"
	"github.com/redrivehq/redrive/breaker"
	"github.com/redrivehq/redrive/httpjob"
	"github.com/redrivehq/redrive/internal/config"
	"github.com/redrivehq/redrive/metrics"
	"github.com/redrivehq/redrive/retry"
	"github.com/redrivehq/redrive/server"
	"github.com/redrivehq/redrive/store"
)

// engine is what serve runs on the store: the client, the worker with
// its kinds, and the broker transports (RabbitMQ, Kafka), with the views
// of them the API and /metrics show.
type engine struct {
	client *redrive.Client
	worker *redrive.Worker
	// remote runs the worker protocol for workers in other languages,
	// decided by the worker's executor (its policies and breakers).
	remote *redrive.RemoteWorkers
	// policy is the default retry policy, shared by the worker and the
	// RabbitMQ executor.
	policy *retry.Policy
	// attempts are the histograms of attempt durations and lateness, fed
	// by the worker.
	attempts *metrics.Observer
	// tp traces the client, the worker and the managed queues' router
	// (nil: no tracing).
	tp trace.TracerProvider

	brokers    *brokerSide // nil without --amqp-url
	keptTopics *kafkaSide  // nil without --kafka-brokers
	managed    server.Brokers
	kept       server.KafkaTopics
	brokerDone <-chan error
	kafkaDone  <-chan error
	workerDone chan error
	// remoteDone is closed once the worker protocol's Run returned.
	remoteDone chan struct{}
}

// newEngine builds the client and the worker on st, with the http kind
// and, when --download-dir is set, the download kind.
// tp, when not nil, traces the client's enqueues and redrives and the
// worker's attempts.
func newEngine(cfg *config.Serve, st store.Store, log *slog.Logger, tp trace.TracerProvider) (*engine, error) {
	e := &engine{client: redrive.NewClient(st, redrive.ClientOptions{Logger: log, TracerProvider: tp}), tp: tp}
	limits, err := cfg.EngineLimits()
	if err != nil {
		return nil, err
	}
	if err := e.client.SetLimits(limits); err != nil {
		return nil, fmt.Errorf("concurrency-limits: %w", err)
	}
	if err := e.client.SetFairShares(cfg.FairShares); err != nil {
		return nil, fmt.Errorf("fair-queues: %w", err)
	}
	retryPolicy := cfg.Retry
	e.policy = &retryPolicy
	e.attempts = metrics.NewObserver(cfg.Kinds()...)
	// The breakers: the configured dependencies' and, on first use, one
	// per other dependency or http host with the default configuration.
	breakers := cfg.Breakers.Registry()
	e.worker = redrive.NewWorker(e.client, redrive.WorkerOptions{
		Queues:             cfg.Queues,
		Policy:             e.policy,
		QueuePolicies:      cfg.QueueRetry,
		Classifier:         cfg.Classify.Classifier,
		QueueClassifiers:   cfg.Classify.QueueClassifiers,
		Breakers:           breakers,
		ShutdownTimeout:    cfg.ShutdownTimeout,
		Logger:             log,
		Observer:           e.attempts,
		LeaseDuration:      cfg.Lease,
		CompletedRetention: cfg.CompletedRetention,
		DLQMaxAge:          cfg.DLQMaxAge,
		CleanupInterval:    cfg.CleanupInterval,
		KeyRetention:       cfg.KeyRetention,
		AuditRetention:     cfg.AuditRetention,
		RetryBudget:        cfg.Budget,
		DisableRetryBudget: cfg.NoBudget,
		Periodic:           cfg.Schedules,
	})
	// No policy of its own for the http kind: a kind's policy would beat
	// the queue's, and the configured policies are per queue.
	httpOpts := cfg.HTTPOptions()
	if cfg.Breakers.HTTP {
		httpOpts.Breakers, httpOpts.Dependency = breakers, cfg.Breakers.HTTPDependency
	}
	httpjob.Register(e.worker, httpOpts)
	e.remote = redrive.NewRemoteWorkers(e.client, e.worker.Executor(), redrive.RemoteOptions{LeaseDuration: cfg.Lease, Logger: log})
	// The download kind, with the http kind's guard, when --download-dir
	// is set; otherwise its jobs are refused at enqueue.
	if err := registerDownload(e.worker, cfg); err != nil {
		return nil, fmt.Errorf("download: %w", err)
	}
	return e, nil
}

// openTransports builds the RabbitMQ queues managed for consumers in any
// language, decided by the same policies as the store's queues, and the
// Kafka topics whose dead letters are kept in the store, their
// topologies named by the same policies.
func (e *engine) openTransports(cfg *config.Serve, log *slog.Logger) error {
	brokers, err := newBrokerSide(cfg, e.client, e.worker, redrive.ExecutorOptions{Policy: e.policy,
		QueuePolicies: cfg.QueueRetry, Classifier: cfg.Classify.Classifier, QueueClassifiers: cfg.Classify.QueueClassifiers,
		Logger: log, Observer: e.attempts, RetryBudget: cfg.Budget,
		DisableRetryBudget: cfg.NoBudget, TracerProvider: e.tp}, log)
	if err != nil {
		return fmt.Errorf("amqp: %w", err)
	}
	if brokers != nil {
		e.brokers, e.managed, e.brokerDone = brokers, brokers, brokers.done()
	}
	keptTopics, err := newKafkaSide(cfg, e.client, e.worker, log)
	if err != nil {
		if brokers != nil {
			brokers.stop()
		}
		return fmt.Errorf("kafka: %w", err)
	}
	if keptTopics != nil {
		e.keptTopics, e.kept, e.kafkaDone = keptTopics, keptTopics, keptTopics.done()
	}
	return nil
}

// start runs the worker and the transports on ctx.
func (e *engine) start(ctx context.Context, cfg *config.Serve, log *slog.Logger) {
	e.workerDone = make(chan error, 1)
	go func() { e.workerDone <- e.worker.Run(ctx) }()
	e.remoteDone = make(chan struct{})
	go func() {
		defer close(e.remoteDone)
		_ = e.remote.Run(ctx)
	}()
	if e.brokers != nil {
		e.brokers.start(ctx)
		log.Info("managing RabbitMQ queues", "broker", amqp.Redact(cfg.AMQP.URL), "queues", cfg.AMQP.ManagedNames(),
			"failure_exchange", cfg.AMQP.FailureExchange, "dead_letters", cfg.AMQP.DeadLetters, "quorum", cfg.AMQP.Quorum)
	}
	if e.keptTopics != nil {
		e.keptTopics.start(ctx)
		log.Info("keeping Kafka dead-letter topics in the store", "brokers", cfg.Kafka.Brokers, "topics", cfg.Kafka.TopicNames(),
			"group", cfg.Kafka.Group, "keeper_group", e.keptTopics.keeper.Group())
	}
}

// stopTransports stops the RabbitMQ and Kafka sides.
func (e *engine) stopTransports() {
	if e.brokers != nil {
		e.brokers.stop()
	}
	if e.keptTopics != nil {
		e.keptTopics.stop()
	}
}

// serveMux routes /metrics to Prometheus and everything else to the API.
// The metrics are the store's statistics, the breakers, the attempt
// histograms of the worker's observer, and the managed RabbitMQ queues'
// and kept Kafka topics' metrics.
func serveMux(api *server.Server, client *redrive.Client, breakers *breaker.Registry, attempts *metrics.Observer,
	managed server.Brokers, kept server.KafkaTopics, log *slog.Logger) http.Handler {
	reg := serveRegistry(client, breakers, attempts, log)
	registerBrokers(reg, managed)
	registerKafka(reg, kept)
	mux := http.NewServeMux()
	// The API's bearer token, through the API's throttle of wrong guesses.
	// A scraper that asks for OpenMetrics gets the attempt histogram's
	// exemplars (trace ids), the text format otherwise.
	mux.Handle("/metrics", api.RequireToken(promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn), ErrorHandling: promhttp.ContinueOnError,
		EnableOpenMetrics: true})))
	mux.Handle("/", api)
	return mux
}

// describeBudget words the retry budget for the start-up log.
func describeBudget(cfg *config.Serve) string {
	if cfg.NoBudget {
		return "off"
	}
	return fmt.Sprintf("%g of recent attempts, at least %d per %s", cfg.Budget.Ratio, cfg.Budget.MinRetries, cfg.Budget.Window)
}
