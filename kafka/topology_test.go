package kafka_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/kafka"
	"github.com/redrivehq/redrive/retry"
)

// TestTopology: the default policy's tiers and names; a consumer told not
// to create topics names the missing ones; allowed, it creates the tiers
// and the DLT with the main topic's partition count.
func TestTopology(t *testing.T) {
	t.Parallel()
	topo := kafka.NewTopology("scans", retry.DefaultPolicy())
	if got := strings.Join(topo.Topics(), " "); got != "scans scans-retry-1s scans-retry-2s scans-retry-4s scans-retry-40s scans-retry-400s scans-dlt" {
		t.Errorf("topics %s", got)
	}
	if got := topo.TierTopic(1500 * time.Millisecond); got != "scans-retry-1500ms" {
		t.Errorf("tier name %s", got)
	}
	for _, bad := range []string{"", "a b", "ünicode", strings.Repeat("x", 230)} {
		if err := (kafka.Topology{Topic: bad, Tiers: []time.Duration{time.Second}}).Validate(); err == nil {
			t.Errorf("topic %q accepted", bad)
		}
	}

	c := newCluster(t)
	topic := newTopic(t)
	// kadm answers ListTopics from metadata up to MetadataMinAge old (5 s
	// by default): a topic listed as unknown before the consumer created
	// it would stay unknown that long.
	adm := kadm.NewClient(c.client(t, kgo.MetadataMinAge(50*time.Millisecond)))
	if _, err := adm.CreateTopic(context.Background(), 3, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	opts := kafka.ConsumerOptions{Brokers: c.brokers, Group: topic + "-g", NoCreateTopics: true,
		Topics: map[string]kafka.TopicOptions{topic: {}}, Executor: redrive.ExecutorOptions{Logger: testLogger(t)}}
	cons, err := kafka.NewConsumer(opts)
	if err != nil {
		t.Fatal(err)
	}
	err = cons.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), topic+"-retry-1s") || !strings.Contains(err.Error(), topic+"-dlt") ||
		!strings.Contains(err.Error(), "do not exist") {
		t.Fatalf("Run without creating: %v, want the missing topics named", err)
	}
	opts.NoCreateTopics = false
	cons, err = kafka.NewConsumer(opts)
	if err != nil {
		t.Fatal(err)
	}
	stop := running(t, cons)
	ctopo, _ := cons.Topology(topic)
	eventually(t, "the topics created", 60*time.Second, func() bool {
		d, err := adm.ListTopics(context.Background(), ctopo.Topics()...)
		if err != nil {
			return false
		}
		for _, name := range ctopo.Topics() {
			if td, ok := d[name]; !ok || td.Err != nil || len(td.Partitions) != 3 {
				return false
			}
		}
		return true
	})
	stop()
}
