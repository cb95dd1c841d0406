package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/kafka"
	"github.com/redrivehq/redrive/retry"
)

// TestDLTCountRecords: in both modes, 10 records that succeed, 10 that
// fail twice then succeed and 10 that fail for good; with aborted
// transactions in the DLT (a dead letter produced and aborted, and on
// kfake, in exactly-once mode, failed offset commits inside the
// consumer's transactions), DLT.Count counts the dead letters Peek and a
// read_committed reader see, before and after a redrive (the 10 redriven
// die again): 10/10, then 20 in all and 10 pending. (It added up offsets:
// in exactly-once mode it said 15/15, then 35/23; transaction markers
// and aborted records take offsets.)
func TestDLTCountRecords(t *testing.T) {
	t.Parallel()
	for _, mode := range []kafka.Mode{kafka.AtLeastOnce, kafka.ExactlyOnce} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			dltCountRecords(t, mode)
		})
	}
}

func dltCountRecords(t *testing.T, mode kafka.Mode) {
	c := newCluster(t)
	topic := newTopic(t)
	c.cleanup(t, topic)
	ctx := context.Background()
	p := retry.Policy{MaxRetries: 2, Initial: 10 * time.Millisecond, Multiplier: 1, MaxDelay: 10 * time.Millisecond, Jitter: retry.JitterNone}
	cons, err := kafka.NewConsumer(kafka.ConsumerOptions{Brokers: c.brokers, Group: topic + "-g", Mode: mode,
		Topics:   map[string]kafka.TopicOptions{topic: {Partitions: 2}},
		Executor: redrive.ExecutorOptions{Policy: &p, Logger: testLogger(t), DisableRetryBudget: true}})
	if err != nil {
		t.Fatal(err)
	}
	c.ensure(t, cons, topic)
	var mu sync.Mutex
	completed := map[string]bool{}
	cons.HandleFunc("job", func(ctx context.Context, j *redrive.Job) error {
		r, _ := kafka.RecordOf(ctx)
		k := string(r.Key)
		switch {
		case strings.HasPrefix(k, "dead"):
			return redrive.Permanent(errors.New("bad input"))
		case strings.HasPrefix(k, "flaky") && j.Attempt <= 2:
			return errors.New("dependency down")
		}
		mu.Lock()
		completed[k] = true
		mu.Unlock()
		return nil
	})
	var aborted atomic.Int64
	if c.fake != nil && mode == kafka.ExactlyOnce {
		// Fail the transactional offset commit of a few batches: their
		// transactions abort, with the dead letters they produced.
		c.fake.ControlKey(int16(kmsg.TxnOffsetCommit), func(req kmsg.Request) (kmsg.Response, error, bool) {
			if aborted.Load() >= 4 {
				return nil, nil, false
			}
			c.fake.KeepControl()
			aborted.Add(1)
			r := req.(*kmsg.TxnOffsetCommitRequest)
			resp := r.ResponseKind().(*kmsg.TxnOffsetCommitResponse)
			for _, rt := range r.Topics {
				st := kmsg.NewTxnOffsetCommitResponseTopic()
				st.Topic = rt.Topic
				for _, rp := range rt.Partitions {
					sp := kmsg.NewTxnOffsetCommitResponseTopicPartition()
					sp.Partition = rp.Partition
					sp.ErrorCode = kerr.UnknownServerError.Code
					st.Partitions = append(st.Partitions, sp)
				}
				resp.Topics = append(resp.Topics, st)
			}
			return resp, nil, true
		})
	}
	topo, _ := cons.Topology(topic)
	// A dead letter in an aborted transaction, in each mode: never dead.
	abortDeadLetters(t, c, topic, "aborted-before")
	running(t, cons)
	cl := c.client(t)
	for i := range 30 {
		k := []string{"ok", "flaky", "dead"}[i/10] + fmt.Sprint(i%10)
		r, _ := kafka.NewRecord(topic, "job", i, []byte(k))
		c.produce(t, cl, r)
	}
	eventually(t, "the 20 records completed", 60*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(completed) == 20
	})
	dlt, err := kafka.NewDLT(c.brokers, topic, kafka.DLTOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dlt.Close)
	c.readCommitted(t, topo.DLT(), 10)
	checkCount(t, c, dlt, topo, kafka.DLTCount{Total: 10, Pending: 10})

	res, err := dlt.Redrive(ctx, kafka.RedriveOptions{Rate: -1})
	if err != nil || res.Redriven != 10 {
		t.Fatalf("redrive: %+v %v, want 10 redriven", res, err)
	}
	abortDeadLetters(t, c, topic, "aborted-after")
	c.readCommitted(t, topo.DLT(), 20) // the 10 redriven died again
	checkCount(t, c, dlt, topo, kafka.DLTCount{Total: 20, Pending: 10})
	if c.fake != nil && mode == kafka.ExactlyOnce && aborted.Load() == 0 {
		t.Errorf("no transaction was aborted: the injection did not happen")
	}
	// A DLT of its own reads the DLT afresh: the same count.
	fresh, err := kafka.NewDLT(c.brokers, topic, kafka.DLTOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	if got, err := fresh.Count(ctx); err != nil || got != (kafka.DLTCount{Total: 20, Pending: 10}) {
		t.Errorf("count of a fresh DLT: %+v %v, want 20 in all, 10 pending", got, err)
	}
}

// checkCount checks that dlt counts want, and that Peek and a
// read_committed reader see as many dead letters.
func checkCount(t *testing.T, c *testCluster, dlt *kafka.DLT, topo kafka.Topology, want kafka.DLTCount) {
	t.Helper()
	ctx := context.Background()
	got, err := dlt.Count(ctx)
	if err != nil || got != want {
		t.Errorf("count: %+v %v, want %+v", got, err, want)
	}
	pending, err := dlt.Peek(ctx, kafka.MaxPeek, nil)
	if err != nil || len(pending) != int(want.Pending) {
		t.Errorf("peek of the pending ones: %d %v, want %d", len(pending), err, want.Pending)
	}
	all, err := dlt.Peek(ctx, kafka.MaxPeek, map[int32]int64{0: 0, 1: 0})
	if err != nil || len(all) != int(want.Total) {
		t.Errorf("peek from the start: %d %v, want %d", len(all), err, want.Total)
	}
	if n, err := dlt.CountRange(ctx, map[int32]int64{0: 0, 1: 0}, nil); err != nil || n != want.Total {
		t.Errorf("count from the start: %d %v, want %d", n, err, want.Total)
	}
	// Real time passing: a read_committed reader sees nothing more in a
	// second.
	if rs := c.readCommitted(t, topo.DLT(), 0); len(rs) != int(want.Total) {
		t.Errorf("a read_committed reader sees %d dead letters, want %d", len(rs), want.Total)
	}
}

// abortDeadLetters produces a dead letter to topic's DLT in a
// transaction, and aborts it.
func abortDeadLetters(t *testing.T, c *testCluster, topic, key string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := c.client(t, kgo.TransactionalID(topic+"-"+key), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for p := range int32(2) {
		r := deadLetter(topic, key, "permanent")
		r.Partition = p
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if err := cl.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
}

// cleanup deletes, at the end of the test, the topics whose names start
// with topic and the consumer groups whose names hold it: a test's
// topology, its consumers' and its redrive cursor's groups.
func (c *testCluster) cleanup(t testing.TB, topic string) {
	if c.fake != nil {
		return // the cluster goes with the test
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.brokers...))
		if err != nil {
			t.Errorf("clean up: %v", err)
			return
		}
		defer cl.Close()
		adm := kadm.NewClient(cl)
		if groups, err := adm.ListGroups(ctx); err == nil {
			var mine []string
			for _, g := range groups.Groups() {
				if strings.Contains(g, topic) {
					mine = append(mine, g)
				}
			}
			if len(mine) > 0 {
				_, _ = adm.DeleteGroups(ctx, mine...)
			}
		}
		topics, err := adm.ListTopics(ctx)
		if err != nil {
			t.Errorf("clean up: %v", err)
			return
		}
		var mine []string
		for _, name := range topics.Names() {
			if strings.HasPrefix(name, topic) {
				mine = append(mine, name)
			}
		}
		if len(mine) > 0 {
			if _, err := adm.DeleteTopics(ctx, mine...); err != nil {
				t.Errorf("clean up: delete %v: %v", mine, err)
			}
		}
	})
}

// BenchmarkDLTCount measures what a Count costs on a DLT of 50,000 dead
// letters: read through by a new DLT (first), and again by one that
// counted it before (warm: it reads nothing new). Plain: produced
// without transactions; transactional: 100 per transaction.
func BenchmarkDLTCount(b *testing.B) {
	for _, txn := range []bool{false, true} {
		name := map[bool]string{false: "plain", true: "transactional"}[txn]
		b.Run(name, func(b *testing.B) {
			c := newCluster(b)
			topic := newTopic(b)
			c.cleanup(b, topic)
			ctx := context.Background()
			topo := kafka.Topology{Topic: topic, Tiers: []time.Duration{time.Second}, Partitions: 1, Replication: -1}
			if err := topo.Ensure(ctx, kadm.NewClient(c.client(b)), true); err != nil {
				b.Fatal(err)
			}
			const n, batch = 50000, 100
			var opts []kgo.Opt
			if txn {
				opts = append(opts, kgo.TransactionalID(topic+"-txn"))
			}
			cl := c.client(b, opts...)
			for i := 0; i < n; i += batch {
				if txn {
					if err := cl.BeginTransaction(); err != nil {
						b.Fatal(err)
					}
				}
				rs := make([]*kgo.Record, batch)
				for j := range rs {
					rs[j] = deadLetter(topic, fmt.Sprint(i+j), "permanent")
				}
				c.produce(b, cl, rs...)
				if txn {
					if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
						b.Fatal(err)
					}
				}
			}
			count := func(dlt *kafka.DLT) {
				got, err := dlt.Count(ctx)
				if err != nil || got.Total != n {
					b.Fatalf("count %+v %v, want %d", got, err, n)
				}
			}
			newDLT := func() *kafka.DLT {
				dlt, err := kafka.NewDLT(c.brokers, topic, kafka.DLTOptions{})
				if err != nil {
					b.Fatal(err)
				}
				return dlt
			}
			// A real broker writes the last marker after EndTxn returns.
			warm := newDLT()
			defer warm.Close()
			eventually(b, "the last marker", 30*time.Second, func() bool {
				got, err := warm.Count(ctx)
				return err == nil && got.Total == n
			})
			b.Run("first", func(b *testing.B) {
				for b.Loop() {
					dlt := newDLT()
					count(dlt)
					dlt.Close()
				}
			})
			b.Run("warm", func(b *testing.B) {
				for b.Loop() {
					count(warm)
				}
			})
		})
	}
}

// TestKeeperStatusCountsRecords: a DLT written in transactions, some
// aborted: the keeper's Status counts its dead letters (Records) and
// the keeper's lag on it in records, as a read_committed reader sees
// them; Offsets says what the offsets say. (Status gave the offsets as
// records, and a lag of one marker per transaction the keeper had kept
// everything before.)
func TestKeeperStatusCountsRecords(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	topic := newTopic(t)
	c.cleanup(t, topic)
	dlt := newDLT(t, c, topic)
	ctx := context.Background()
	topo := kafka.Topology{Topic: topic, Tiers: []time.Duration{time.Second}, Partitions: 1, Replication: -1}
	txn := c.client(t, kgo.TransactionalID(topic+"-txn"))
	adm := kadm.NewClient(c.client(t))
	seq := 0
	produce := func(commit bool, n int) {
		t.Helper()
		if err := txn.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for range n {
			seq++
			c.produce(t, txn, deadLetter(topic, fmt.Sprint(seq), "permanent"))
		}
		end := kgo.TryAbort
		if commit {
			end = kgo.TryCommit
		}
		if err := txn.EndTransaction(ctx, end); err != nil {
			t.Fatal(err)
		}
	}
	produce(true, 3)
	produce(false, 2)
	produce(true, 1)
	produce(true, 2)
	const kept = 6
	client := openStore(t)
	k, err := kafka.NewKeeper(kafka.KeeperOptions{Brokers: c.brokers, Group: topic + "-keeper", Topologies: []kafka.Topology{topo},
		Add: client.AddDead, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	stop := runKeeper(t, k)
	eventually(t, "the dead letters kept", 30*time.Second, func() bool { return k.Stats()[topic].Kept == kept })
	status := func() kafka.TopicCount {
		t.Helper()
		s := k.Status(ctx, adm, "")
		if len(s) != 1 || s[0].Error != "" {
			t.Fatalf("status: %+v", s)
		}
		return s[0].DLT
	}
	value := func(p *int64) string {
		if p == nil {
			return "absent"
		}
		return fmt.Sprint(*p)
	}
	// The keeper commits its offsets every second, and after each batch.
	eventually(t, "the keeper's lag in records is 0", 30*time.Second, func() bool {
		d := status()
		return d.Lag != nil && *d.Lag == 0
	})
	d := status()
	if value(d.Records) != fmt.Sprint(kept) || d.Offsets < kept+2+4 {
		t.Errorf("DLT: records %s, offsets %d; want %d records, at least %d offsets", value(d.Records), d.Offsets, kept, kept+2+4)
	}
	if n, err := dlt.Count(ctx); err != nil || n.Total != kept {
		t.Errorf("DLT.Count: %+v %v, want %d", n, err, kept)
	}

	// Stopped, the keeper lags by the dead letters produced since.
	stop()
	produce(false, 3)
	produce(true, 2)
	eventually(t, "the new dead letters counted", 30*time.Second, func() bool {
		d := status()
		return value(d.Records) == fmt.Sprint(kept+2)
	})
	if d := status(); value(d.Lag) != "2" {
		t.Errorf("the stopped keeper's lag: %s, want 2", value(d.Lag))
	}
}
