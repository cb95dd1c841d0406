package kafka_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrivehq/redrive/kafka"
	"github.com/redrivehq/redrive/store"
)

// TestReadStats: the records each topic of a topology retains, the
// tiers the cluster has beyond the topology's, the missing ones, and the
// lag of the consumers' group (a tier's own group in exactly-once mode)
// and of the keeper's group on the DLT.
func TestReadStats(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	topic := newTopic(t)
	cl := c.client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	adm := kadm.NewClient(cl)
	ctx := context.Background()
	made := kafka.Topology{Topic: topic, Tiers: []time.Duration{time.Second, 40 * time.Second}, Partitions: 2, Replication: 1}
	if err := made.Ensure(ctx, adm, true); err != nil {
		t.Fatal(err)
	}
	fill := func(topic string, n int) {
		for i := range n {
			c.produce(t, cl, &kgo.Record{Topic: topic, Partition: int32(i % 2), Value: []byte("x")})
		}
	}
	fill(topic, 5)
	fill(made.TierTopic(time.Second), 2)
	fill(made.TierTopic(40*time.Second), 1)
	fill(made.DLT(), 3)

	// The consumers' group committed 1 record of each partition of the
	// main topic; the 1s tier's exactly-once group, one of it; the keeper,
	// all of the DLT.
	commit := func(group string, offs map[string]map[int32]int64) {
		o := kadm.Offsets{}
		for topic, ps := range offs {
			for p, at := range ps {
				o.AddOffset(topic, p, at, -1)
			}
		}
		resp, err := adm.CommitOffsets(ctx, group, o)
		if err == nil {
			err = resp.Error()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	commit("g", map[string]map[int32]int64{topic: {0: 1, 1: 1}})
	commit("g-retry-1s", map[string]map[int32]int64{made.TierTopic(time.Second): {0: 1}})
	commit("keeper", map[string]map[int32]int64{made.DLT(): {0: 2, 1: 1}})

	// The topology serve built from its policy: tiers 1s and 4s; the
	// consumers' have 1s and 40s.
	topo := kafka.Topology{Topic: topic, Tiers: []time.Duration{time.Second, 4 * time.Second}}
	stats, err := kafka.ReadStats(ctx, adm, []kafka.Topology{topo}, kafka.StatsOptions{Group: "g", KeeperGroup: "keeper"})
	if err != nil {
		t.Fatal(err)
	}
	if len(stats) != 1 {
		t.Fatalf("stats %+v", stats)
	}
	s := stats[0]
	lag := func(c kafka.TopicCount) string {
		if c.Lag == nil {
			return "none"
		}
		return fmt.Sprintf("%d by %s", *c.Lag, c.LagGroup)
	}
	if s.Topic != topic || s.Group != "g" || s.Main.Topic != topic || s.Main.Partitions != 2 || s.Main.Offsets != 5 || lag(s.Main) != "3 by g" {
		t.Errorf("main: %+v lag %s", s.Main, lag(s.Main))
	}
	if s.DLT.Topic != made.DLT() || s.DLT.Offsets != 3 || lag(s.DLT) != "0 by keeper" {
		t.Errorf("dlt: %+v lag %s", s.DLT, lag(s.DLT))
	}
	want := []struct {
		delay   time.Duration
		records int64
		missing bool
		lag     string
	}{{time.Second, 2, false, "1 by g-retry-1s"}, {4 * time.Second, 0, true, "none"}, {40 * time.Second, 1, false, "none"}}
	if len(s.Tiers) != len(want) {
		t.Fatalf("tiers %+v", s.Tiers)
	}
	for i, w := range want {
		tc := s.Tiers[i]
		if tc.Delay != store.Duration(w.delay) || tc.Topic != topo.TierTopic(w.delay) || tc.Offsets != w.records || tc.Missing != w.missing ||
			lag(tc.TopicCount) != w.lag {
			t.Errorf("tier %d: %+v lag %s, want %v: %d records, missing %v, lag %s", i, tc, lag(tc.TopicCount), w.delay, w.records, w.missing, w.lag)
		}
	}

	// Without groups, no lag; a topology whose topics do not exist is all
	// missing.
	none := kafka.Topology{Topic: topic + "-none", Tiers: []time.Duration{time.Second}}
	stats, err = kafka.ReadStats(ctx, adm, []kafka.Topology{topo, none}, kafka.StatsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if stats[0].Main.Lag != nil || stats[0].DLT.Lag != nil || stats[0].Main.Offsets != 5 {
		t.Errorf("without groups: %+v", stats[0])
	}
	if n := stats[1]; !n.Main.Missing || !n.DLT.Missing || len(n.Tiers) != 1 || !n.Tiers[0].Missing {
		t.Errorf("a topology that does not exist: %+v", n)
	}
}
