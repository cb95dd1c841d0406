package main

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/breaker"
	"github.com/redrivehq/redrive/metrics"
	"github.com/redrivehq/redrive/metrics/amqpmetrics"
	"github.com/redrivehq/redrive/metrics/kafkametrics"
	"github.com/redrivehq/redrive/server"
)

// serveRegistry returns the registry of serve's /metrics: the Go runtime
// and the process, the store-wide metrics and the breakers (read at each
// scrape), and the attempt histograms fed by the worker's observer. The
// collectors are package metrics', which library users register on their
// own registries. The managed RabbitMQ queues are added by
// registerBrokers, the kept Kafka topics by registerKafka.
func serveRegistry(client *redrive.Client, breakers *breaker.Registry, attempts *metrics.Observer, log *slog.Logger) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		metrics.NewCollector(client, metrics.CollectorOptions{Breakers: breakers, Logger: log}),
		attempts,
	)
	return reg
}

// registerBrokers adds to reg the metrics of the RabbitMQ queues b
// manages (redrive_amqp_*, see amqpmetrics.Collector), asked of b at
// each scrape. A nil b (serve manages no queue) adds nothing.
func registerBrokers(reg prometheus.Registerer, b server.Brokers) {
	if b == nil {
		return
	}
	reg.MustRegister(amqpmetrics.NewCollector(b.ManagedQueues, amqpmetrics.Options{}))
}

// registerKafka adds to reg the metrics of the Kafka topics whose dead
// letters serve keeps (redrive_kafka_*, see kafkametrics.Collector),
// asked of k at each scrape. A nil k (serve keeps no topic) adds
// nothing.
func registerKafka(reg prometheus.Registerer, k server.KafkaTopics) {
	if k == nil {
		return
	}
	reg.MustRegister(kafkametrics.NewCollector(k.KafkaTopics, kafkametrics.Options{}))
}
