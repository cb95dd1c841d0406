package kafkametrics_test

import (
	"context"
	"github.com/redrivehq/redrive/metrics/internal/metricstest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/redrivehq/redrive/kafka"
	"github.com/redrivehq/redrive/metrics/kafkametrics"
	"github.com/redrivehq/redrive/store"
)

// keptFixture is what serve reports of two kept topics: orders, with a
// retry tier missing on the cluster and the 1s tier consumed by an
// exactly-once tier group; and mail, whose cluster could not be asked.
// orders is listed twice, as a buggy source could. Its DLT holds 7 dead
// letters in 9 offsets (exactly-once mode: transaction markers).
func keptFixture() []kafka.ManagedTopic {
	lag := func(n int64) *int64 { return &n }
	orders := kafka.ManagedTopic{TopologyStats: kafka.TopologyStats{Topic: "orders", Group: "workers",
		Main: kafka.TopicCount{Topic: "orders", Partitions: 3, Offsets: 120, Lag: lag(4), LagGroup: "workers"},
		Tiers: []kafka.TierCount{
			{TopicCount: kafka.TopicCount{Topic: "orders-retry-1s", Partitions: 3, Offsets: 9, Lag: lag(2), LagGroup: "workers-retry-1s"},
				Delay: store.Duration(time.Second)},
			{TopicCount: kafka.TopicCount{Topic: "orders-retry-10s", Missing: true}, Delay: store.Duration(10 * time.Second)},
		},
		DLT: kafka.TopicCount{Topic: "orders-dlt", Partitions: 3, Offsets: 9, Records: lag(7), Lag: lag(0), LagGroup: kafka.DefaultKeeperGroup}},
		Brokers: []string{"kafka:9092"}, Keeper: &kafka.KeeperStats{Kept: 6, Duplicates: 1}}
	mail := kafka.ManagedTopic{TopologyStats: kafka.TopologyStats{Topic: "mail", Main: kafka.TopicCount{Topic: "mail"}},
		Keeper: &kafka.KeeperStats{}, Error: "Kafka did not answer in time (not connected?)"}
	return []kafka.ManagedTopic{mail, orders, orders}
}

func TestCollector(t *testing.T) {
	var deadline bool
	c := kafkametrics.NewCollector(func(ctx context.Context) []kafka.ManagedTopic {
		_, deadline = ctx.Deadline()
		return keptFixture()
	}, kafkametrics.Options{Timeout: time.Second})
	want := `
# HELP redrive_kafka_dead_letters_duplicate_total Dead letters of a kept Kafka main topic that were already stored (read again, or produced twice), not stored again. Since this process started; sum across replicas.
# TYPE redrive_kafka_dead_letters_duplicate_total counter
redrive_kafka_dead_letters_duplicate_total{topic="mail"} 0
redrive_kafka_dead_letters_duplicate_total{topic="orders"} 1
# HELP redrive_kafka_dead_letters_kept_total Dead letters of a kept Kafka main topic stored in the store as new dead jobs. Since this process started; sum across replicas.
# TYPE redrive_kafka_dead_letters_kept_total counter
redrive_kafka_dead_letters_kept_total{topic="mail"} 0
redrive_kafka_dead_letters_kept_total{topic="orders"} 6
# HELP redrive_kafka_lag How far group is behind on a topic of a kept Kafka main topic's topology: the consumers' group on the main topic and the tiers, in offsets (committed to end offsets: an upper bound on the records not consumed yet); the dead-letter keeper's on the DLT, in records (the dead letters not stored yet; offsets until the DLT was read through). The cluster's count: every process keeping the topic reports the same value; aggregate replicas with max, not sum.
# TYPE redrive_kafka_lag gauge
redrive_kafka_lag{group="redrive-dlt-keeper",kafka_topic="orders-dlt",role="dlt",topic="orders"} 0
redrive_kafka_lag{group="workers",kafka_topic="orders",role="main",topic="orders"} 4
redrive_kafka_lag{group="workers-retry-1s",kafka_topic="orders-retry-1s",role="tier",topic="orders"} 2
# HELP redrive_kafka_offsets End offsets minus start offsets of a topic of a kept Kafka main topic's topology, over its partitions: an upper bound on the records it retains, not a count (transaction markers and aborted records take offsets too); role is main, tier (a retry tier: the retries produced to it and still retained) or dlt. The cluster's count: every process keeping the topic reports the same value; aggregate replicas with max, not sum.
# TYPE redrive_kafka_offsets gauge
redrive_kafka_offsets{kafka_topic="orders",role="main",topic="orders"} 120
redrive_kafka_offsets{kafka_topic="orders-dlt",role="dlt",topic="orders"} 9
redrive_kafka_offsets{kafka_topic="orders-retry-1s",role="tier",topic="orders"} 9
# HELP redrive_kafka_records Records of the dead-letter topic (role dlt) of a kept Kafka main topic that a read_committed reader sees: its dead letters, counted by reading it (absent until it was read through). The cluster's count: every process keeping the topic reports the same value; aggregate replicas with max, not sum.
# TYPE redrive_kafka_records gauge
redrive_kafka_records{kafka_topic="orders-dlt",role="dlt",topic="orders"} 7
# HELP redrive_kafka_up 1 when the cluster answered the last scrape's questions about a kept Kafka main topic, else 0.
# TYPE redrive_kafka_up gauge
redrive_kafka_up{topic="mail"} 0
redrive_kafka_up{topic="orders"} 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	if !deadline {
		t.Error("the scrape asked for the topics without a deadline: a hung cluster would hang the scrape")
	}
	if problems, err := testutil.CollectAndLint(c); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %+v", err, problems)
	}
	// Through a registry, as serve exposes it: no duplicate series.
	text := metricstest.Exposition(t, c)
	metricstest.WantSamples(t, text, map[string]float64{
		`redrive_kafka_up{topic="orders"}`:                                                1,
		`redrive_kafka_offsets{kafka_topic="orders-retry-1s",role="tier",topic="orders"}`: 9,
		`redrive_kafka_records{kafka_topic="orders-dlt",role="dlt",topic="orders"}`:       7,
	})
	if strings.Contains(text, "orders-retry-10s") {
		t.Errorf("a missing topic has series:\n%s", metricstest.GrepLines(text, "orders-retry-10s"))
	}
}

func TestCollectorNothing(t *testing.T) {
	for name, c := range map[string]*kafkametrics.Collector{
		"nil function": kafkametrics.NewCollector(nil, kafkametrics.Options{}),
		"no topics":    kafkametrics.NewCollector(func(context.Context) []kafka.ManagedTopic { return nil }, kafkametrics.Options{}),
	} {
		if n := testutil.CollectAndCount(c); n != 0 {
			t.Errorf("%s: %d series, want none", name, n)
		}
		if text := metricstest.Exposition(t, c); strings.Contains(text, "redrive_kafka") {
			t.Errorf("%s: exposition:\n%s", name, text)
		}
	}
}
