package kafkametrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/redrivehq/redrive/kafka"
	"github.com/redrivehq/redrive/metrics/internal/label"
)

// Options configure NewCollector. The zero value is
// usable.
type Options struct {
	// Timeout bounds how long one scrape waits for the cluster's
	// statistics (default 10s).
	Timeout time.Duration
}

// Collector is a prometheus.Collector of the Kafka topics whose
// dead letters `redrive serve --kafka-topics` keeps in the store (see
// package kafka, Keeper and ReadStats), read at every scrape:
//
//	redrive_kafka_offsets{topic,kafka_topic,role}         end minus start offsets of each topic of the topology
//	redrive_kafka_records{topic,kafka_topic,role}         records of the DLT (role dlt only): its dead letters
//	redrive_kafka_lag{topic,kafka_topic,role,group}       how far a consumer group is behind (offsets; records on the DLT)
//	redrive_kafka_dead_letters_kept_total{topic}          dead letters stored as dead jobs
//	redrive_kafka_dead_letters_duplicate_total{topic}     dead letters already stored
//	redrive_kafka_up{topic}                               1 when the cluster answered
//
// topic is the main topic; kafka_topic is one topic of its topology, and
// role what it is to it: main, tier (a retry tier: its offsets hold the
// retries produced to it and still retained) or dlt. Offsets are an
// upper bound on records, not a count: in a topic written in
// transactions (an exactly-once consumer's tiers and DLT), transaction
// markers and aborted records take offsets too. The DLT's records are
// counted (the keeper reads it), so its dead letters and the keeper's
// lag on it are records. group is the
// consumers' group (an exactly-once consumer's tier group on a tier it
// consumes in one), or the keeper's on the DLT: the dead letters not
// stored yet. A topic that does not exist has no series; a topic a group
// does not consume, no lag.
//
// The records and lags are the cluster's: every process keeping the same
// topics reports the same values (aggregate replicas with max). The
// counters are this process's own since it started (sum them). Create it
// with NewCollector.
type Collector struct {
	topics  func(ctx context.Context) []kafka.ManagedTopic
	timeout time.Duration
}

var _ prometheus.Collector = (*Collector)(nil)

// NewCollector returns the collector of the topics that topics
// returns at each scrape, typically the KafkaTopics method of the
// server.KafkaTopics given to the API (server.Options.Kafka). A nil
// topics collects nothing. Register it on a prometheus.Registerer.
func NewCollector(topics func(ctx context.Context) []kafka.ManagedTopic, opts Options) *Collector {
	c := &Collector{topics: topics, timeout: opts.Timeout}
	if c.timeout <= 0 {
		c.timeout = 10 * time.Second
	}
	return c
}

// perCluster ends the help of the cluster's gauges.
// perCluster ends the help of the cluster's counts; perProcess, that of
// the counters.
const (
	perCluster = " The cluster's count: every process keeping the topic reports the same value; aggregate replicas with max, not sum."
	perProcess = " Since this process started; sum across replicas."
)

var (
	kafkaOffsetsDesc = prometheus.NewDesc("redrive_kafka_offsets",
		"End offsets minus start offsets of a topic of a kept Kafka main topic's topology, over its partitions: an upper bound "+
			"on the records it retains, not a count (transaction markers and aborted records take offsets too); role is main, "+
			"tier (a retry tier: the retries produced to it and still retained) or dlt."+perCluster,
		[]string{"topic", "kafka_topic", "role"}, nil)
	kafkaRecordsDesc = prometheus.NewDesc("redrive_kafka_records",
		"Records of the dead-letter topic (role dlt) of a kept Kafka main topic that a read_committed reader sees: its dead "+
			"letters, counted by reading it (absent until it was read through)."+perCluster,
		[]string{"topic", "kafka_topic", "role"}, nil)
	kafkaLagDesc = prometheus.NewDesc("redrive_kafka_lag",
		"How far group is behind on a topic of a kept Kafka main topic's topology: the consumers' group on the main topic and "+
			"the tiers, in offsets (committed to end offsets: an upper bound on the records not consumed yet); the dead-letter "+
			"keeper's on the DLT, in records (the dead letters not stored yet; offsets until the DLT was read through)."+perCluster,
		[]string{"topic", "kafka_topic", "role", "group"}, nil)
	kafkaKeptDesc = prometheus.NewDesc("redrive_kafka_dead_letters_kept_total",
		"Dead letters of a kept Kafka main topic stored in the store as new dead jobs."+perProcess,
		[]string{"topic"}, nil)
	kafkaDuplicateDesc = prometheus.NewDesc("redrive_kafka_dead_letters_duplicate_total",
		"Dead letters of a kept Kafka main topic that were already stored (read again, or produced twice), not stored again."+perProcess,
		[]string{"topic"}, nil)
	kafkaUpDesc = prometheus.NewDesc("redrive_kafka_up",
		"1 when the cluster answered the last scrape's questions about a kept Kafka main topic, else 0.",
		[]string{"topic"}, nil)
)

// Describe sends the collector's fixed descriptions.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{kafkaOffsetsDesc, kafkaRecordsDesc, kafkaLagDesc, kafkaKeptDesc, kafkaDuplicateDesc, kafkaUpDesc} {
		ch <- d
	}
}

// Collect asks for the kept topics and exports them.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	if c.topics == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	// A registry refuses a scrape with a series twice: a topic listed
	// twice is exported once.
	seen := map[string]bool{}
	for _, t := range c.topics(ctx) {
		name := label.NonEmpty(t.Topic)
		if seen[name] {
			continue
		}
		seen[name] = true
		gauge := func(d *prometheus.Desc, v float64, labels ...string) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
		}
		gauge(kafkaUpDesc, label.Bool(t.Error == ""), name)
		counted := map[string]bool{}
		count := func(tc kafka.TopicCount, role string) {
			kt := label.NonEmpty(tc.Topic)
			if tc.Missing || counted[kt] {
				return
			}
			counted[kt] = true
			gauge(kafkaOffsetsDesc, float64(tc.Offsets), name, kt, role)
			if tc.Records != nil {
				gauge(kafkaRecordsDesc, float64(*tc.Records), name, kt, role)
			}
			if tc.Lag != nil {
				gauge(kafkaLagDesc, float64(*tc.Lag), name, kt, role, label.NonEmpty(tc.LagGroup))
			}
		}
		if t.Error == "" {
			count(t.Main, "main")
			for _, tier := range t.Tiers {
				count(tier.TopicCount, "tier")
			}
			count(t.DLT, "dlt")
		}
		if t.Keeper != nil {
			ch <- prometheus.MustNewConstMetric(kafkaKeptDesc, prometheus.CounterValue, float64(t.Keeper.Kept), name)
			ch <- prometheus.MustNewConstMetric(kafkaDuplicateDesc, prometheus.CounterValue, float64(t.Keeper.Duplicates), name)
		}
	}
}
