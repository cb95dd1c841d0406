package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/redrivehq/redrive/internal/testtopics"
	"github.com/redrivehq/redrive/internal/testwait"
	"github.com/redrivehq/redrive/kafka"
)

// The suite runs on franz-go's in-process cluster (kfake), or on a real
// cluster when KAFKA_BROKERS names one (comma-separated seed brokers).
const brokersEnv = "KAFKA_BROKERS"

// testCluster is a cluster for one test.
type testCluster struct {
	brokers []string
	fake    *kfake.Cluster // nil on a real cluster
}

var topicSeq atomic.Int64

// newCluster returns a fresh kfake cluster, or the real one of
// KAFKA_BROKERS.
func newCluster(t testing.TB, opts ...kfake.Opt) *testCluster {
	t.Helper()
	if b := os.Getenv(brokersEnv); b != "" {
		return &testCluster{brokers: strings.Split(b, ",")}
	}
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return &testCluster{brokers: c.ListenAddrs(), fake: c}
}

// needFake skips a test that injects failures through kfake's control
// hooks when it runs on a real cluster.
func (c *testCluster) needFake(t testing.TB) {
	if c.fake == nil {
		t.Skip("injects failures with kfake's control hooks: runs on kfake only")
	}
}

func newTopic(t testing.TB) string {
	return fmt.Sprintf("%s%d-%s", testtopics.Prefix(), topicSeq.Add(1),
		strings.NewReplacer("/", "-", " ", "-").Replace(t.Name()))
}

func (c *testCluster) client(t testing.TB, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	// A test's topic is often created by the consumer it starts just
	// before producing: wait for it (until produce's bound) rather than
	// fail after franz-go's default four metadata retries.
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.brokers...), kgo.UnknownTopicRetries(-1)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func (c *testCluster) produce(t testing.TB, cl *kgo.Client, rs ...*kgo.Record) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// waitStable waits until partition 0 of topic has its last stable offset
// at its end: a real broker writes a transaction's marker after EndTxn
// returns, and a read-committed reader stops at the first open one.
func (c *testCluster) waitStable(t testing.TB, topic string) {
	t.Helper()
	adm := kadm.NewClient(c.client(t))
	ctx := context.Background()
	eventually(t, "the transactions' markers on "+topic, 30*time.Second, func() bool {
		lso, err1 := adm.ListCommittedOffsets(ctx, topic)
		hw, err2 := adm.ListEndOffsets(ctx, topic)
		if err1 != nil || err2 != nil {
			return false
		}
		a, _ := lso.Lookup(topic, 0)
		b, _ := hw.Lookup(topic, 0)
		return a.Err == nil && b.Err == nil && a.Offset == b.Offset
	})
}

// waitTopics waits until every topic is listed by the cluster without
// an error: a consumer's Run creates its retry tiers and DLT in the
// background, and a reader that asks before that gets
// UNKNOWN_TOPIC_OR_PARTITION.
func (c *testCluster) waitTopics(t testing.TB, topics ...string) {
	t.Helper()
	adm := kadm.NewClient(c.client(t))
	ctx := context.Background()
	eventually(t, fmt.Sprintf("topics %v listed", topics), 2*time.Minute, func() bool {
		listed, err := adm.ListTopics(ctx, topics...)
		if err != nil {
			return false
		}
		for _, tp := range topics {
			if d, ok := listed[tp]; !ok || d.Err != nil {
				return false
			}
		}
		return true
	})
}

func testLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// running runs a consumer until the end of the test.
func running(t testing.TB, c *kafka.Consumer) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("consumer.Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// eventually polls cond until it holds, failing after a generous bound
// (a liveness guard, not a timing assertion).
func eventually(t testing.TB, what string, within time.Duration, cond func() bool) {
	t.Helper()
	testwait.Until(t, what, within, cond)
}

// readAll reads every record of topic from the start, until it has n or
// the bound passes (a liveness bound: on a loaded machine a record's
// whole life through the retry tiers to the DLT took more than 20 s).
func (c *testCluster) readAll(t testing.TB, topic string, n int) []*kgo.Record {
	t.Helper()
	cl := c.client(t, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	var out []*kgo.Record
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %s: %d records, want %d", topic, len(out), n)
		}
		out = append(out, fs.Records()...)
	}
	return out
}

func header(r *kgo.Record, k string) string {
	for i := len(r.Headers) - 1; i >= 0; i-- {
		if r.Headers[i].Key == k {
			return string(r.Headers[i].Value)
		}
	}
	return ""
}

// readToEnd reads topic from its start offsets to its end offsets with
// read_committed isolation, once no transaction is open in it (its last
// stable offsets reached its end offsets): every record a read_committed
// reader sees, for a topic nothing produces to any more. It waits for
// the end itself (a record or transaction marker at the last offset),
// not for time to pass.
func (c *testCluster) readToEnd(t testing.TB, topic string) []*kgo.Record {
	t.Helper()
	adm := kadm.NewClient(c.client(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	from, to := map[int32]kgo.Offset{}, map[int32]int64{}
	eventually(t, "no transaction open in "+topic, 30*time.Second, func() bool {
		starts, err1 := adm.ListStartOffsets(ctx, topic)
		ends, err2 := adm.ListEndOffsets(ctx, topic)
		lso, err3 := adm.ListCommittedOffsets(ctx, topic)
		if err := errors.Join(err1, err2, err3); err != nil {
			return false
		}
		clear(from)
		clear(to)
		settled := true
		ends.Each(func(e kadm.ListedOffset) {
			s, ok1 := starts.Lookup(topic, e.Partition)
			l, ok2 := lso.Lookup(topic, e.Partition)
			if !ok1 || !ok2 || e.Err != nil || s.Err != nil || l.Err != nil || l.Offset != e.Offset {
				settled = false
				return
			}
			if s.Offset < e.Offset {
				from[e.Partition], to[e.Partition] = kgo.NewOffset().At(s.Offset), e.Offset
			}
		})
		return settled
	})
	if len(from) == 0 {
		return nil
	}
	cl := c.client(t, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: from}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
	var out []*kgo.Record
	done := map[int32]bool{}
	for len(done) < len(to) {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %s to its end offsets %v: %d records, partitions %v read through", topic, to, len(out), done)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if done[r.Partition] {
				return
			}
			if !r.Attrs.IsControl() {
				out = append(out, r)
			}
			if r.Offset+1 >= to[r.Partition] {
				done[r.Partition] = true
			}
		})
	}
	return out
}

// requestHook is a kgo hook that counts what a client did: the fetch
// requests it wrote, and the connections it failed to open. A test waits
// on these instead of on time passing.
type requestHook struct {
	fetches      atomic.Int64
	dialFailures atomic.Int64
}

// OnBrokerWrite counts the fetch requests written.
func (h *requestHook) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if err == nil && key == int16(kmsg.Fetch) {
		h.fetches.Add(1)
	}
}

// OnBrokerConnect counts the connections that failed to open.
func (h *requestHook) OnBrokerConnect(_ kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	if err != nil {
		h.dialFailures.Add(1)
	}
}
