package config

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
	"unicode"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/kafka"
)

// Kafka is what `serve --kafka-brokers` does on Kafka: keep the
// dead-letter topics of main topics in the store.
type Kafka struct {
	// Brokers are the seed brokers; none: no Kafka.
	Brokers []string
	// Topics are the main topics whose dead-letter topics serve keeps in
	// the store, each with the concurrency of the store worker that
	// produces its redriven dead letters back.
	Topics map[string]int
	// Group is the consumers' group, whose lag serve shows ("": none).
	Group string

	spec string // the raw topics setting
}

// maxKafkaGroup bounds a consumer group's name.
const maxKafkaGroup = 249

// kafkaSettings are the settings of the Kafka topics serve keeps.
var kafkaSettings = []setting{
	{name: "kafka-brokers", help: "Kafka seed brokers, host:port,..., of the topics --kafka-topics names", apply: func(c *Serve, v string) error {
		c.Kafka.Brokers = nil
		if strings.TrimSpace(v) == "" {
			return nil
		}
		seeds, err := ParseKafkaBrokers(v)
		if err != nil {
			return err
		}
		c.Kafka.Brokers = seeds
		return nil
	}},
	{name: "kafka-topics", help: `Kafka main topics whose dead-letter topics <topic>-dlt serve keeps in the store as dead jobs of the store queue of the same name, e.g. "orders,scans" (a redriven one is produced back to its topic; each topic's retry policy, which names its retry tiers, is the store queue's; =N sets the concurrency of producing its redriven dead letters back). Do not also redrive these DLTs with "redrive dlq redrive --kafka-topic"`, apply: func(c *Serve, v string) error {
		if strings.TrimSpace(v) == "" {
			c.Kafka.spec = ""
			return nil
		}
		ts, err := parseQueues(v, 1)
		if err != nil {
			return err
		}
		for t := range ts {
			if err := checkKafkaTopic(t); err != nil {
				return err
			}
		}
		c.Kafka.spec = v
		return nil
	}},
	{name: "kafka-group", help: "the consumer group of the --kafka-topics consumers, whose lag on each topic and retry tier serve shows (optional)", apply: func(c *Serve, v string) error {
		v = strings.TrimSpace(v)
		switch {
		case len(v) > maxKafkaGroup:
			return fmt.Errorf("%d bytes long, the limit is %d", len(v), maxKafkaGroup)
		case strings.IndexFunc(v, unicode.IsControl) >= 0:
			return fmt.Errorf("%q contains a control character", clipArg(v))
		}
		c.Kafka.Group = v
		return nil
	}},
}

// checkKafkaTopic reports a name that cannot be a main topic whose dead
// letters serve keeps: a Kafka topic name that leaves room for the
// suffixes, and a store queue name.
func checkKafkaTopic(t string) error {
	if err := (kafka.Topology{Topic: t, Tiers: []time.Duration{time.Second}}).Validate(); err != nil {
		return err
	}
	if err := redrive.CheckName("queue", t); err != nil {
		return fmt.Errorf("topic %q names the store queue of its dead letters: %w", clipArg(t), err)
	}
	return nil
}

// resolveKafka checks the Kafka settings together and adds each topic
// to the store queues served (its dead letters live there, and its
// policy is theirs), keeping a concurrency given by --queues.
func resolveKafka(c *Serve) error {
	if c.Kafka.spec == "" {
		c.Kafka.Topics = nil
		return nil
	}
	if len(c.Kafka.Brokers) == 0 {
		return errors.New("kafka-topics: keeping Kafka dead-letter topics needs --kafka-brokers (or $REDRIVE_KAFKA_BROKERS)")
	}
	ts, err := parseQueues(c.Kafka.spec, c.Workers)
	if err != nil {
		return fmt.Errorf("kafka-topics: %w", err) // validated above; cannot happen
	}
	c.Kafka.Topics = ts
	for t, n := range ts {
		if _, ok := c.Queues[t]; !ok {
			c.Queues[t] = n
		}
	}
	return nil
}

// TopicNames returns the topics' names, sorted.
func (k *Kafka) TopicNames() []string {
	names := make([]string, 0, len(k.Topics))
	for t := range k.Topics {
		names = append(names, t)
	}
	sort.Strings(names)
	return names
}
