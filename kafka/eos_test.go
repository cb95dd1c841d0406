package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/internal/testwait"
	"github.com/redrivehq/redrive/kafka"
	"github.com/redrivehq/redrive/retry"
)

// TestExactlyOnce: in ExactlyOnce mode, with transactions aborted on
// purpose (the offset commit inside the transaction fails), every record
// completes, and a read_committed reader sees each retry and each dead
// letter exactly once: the aborted batches' produces never show.
func TestExactlyOnce(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	topic := newTopic(t)
	p := retry.Policy{MaxRetries: 1, Initial: 10 * time.Millisecond, Multiplier: 1, MaxDelay: 10 * time.Millisecond, Jitter: retry.JitterNone}
	cons, err := kafka.NewConsumer(kafka.ConsumerOptions{Brokers: c.brokers, Group: topic + "-g", Mode: kafka.ExactlyOnce,
		Topics: map[string]kafka.TopicOptions{topic: {Partitions: 3}},
		// Aborted batches run their handlers again: beyond 100 retries
		// in 10 s the retry budget would push some retries to a longer
		// tier, which this test does not read.
		Executor: redrive.ExecutorOptions{Policy: &p, Logger: testLogger(t), DisableRetryBudget: true}})
	if err != nil {
		t.Fatal(err)
	}
	const n = 60
	var mu sync.Mutex
	completed := map[string]int{}
	cons.HandleFunc("job", func(ctx context.Context, j *redrive.Job) error {
		r, _ := kafka.RecordOf(ctx)
		k := string(r.Key)
		if j.Attempt == 1 {
			return errors.New("first attempt fails")
		}
		if k[0] == 'd' {
			return redrive.Permanent(errors.New("dead on the retry"))
		}
		mu.Lock()
		completed[k]++
		mu.Unlock()
		return nil
	})
	var aborted atomic.Int64
	if c.fake != nil {
		// Fail the transactional offset commit of a few batches: their
		// transactions abort and the batches are consumed again.
		c.fake.ControlKey(int16(kmsg.TxnOffsetCommit), func(req kmsg.Request) (kmsg.Response, error, bool) {
			if aborted.Load() >= 3 {
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
	stop := running(t, cons)
	cl := c.client(t)
	for i := range n {
		k := fmt.Sprintf("ok-%d", i)
		if i%10 == 0 {
			k = fmt.Sprintf("dead-%d", i)
		}
		r, _ := kafka.NewRecord(topic, "job", i, []byte(k))
		c.produce(t, cl, r)
	}
	eventually(t, "every record settled", 30*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(completed) == n-n/10
	})
	topo, _ := cons.Topology(topic)
	// read_committed: what a downstream reader sees, once the dead
	// letters are there and the consumer stopped (nothing produces any
	// more).
	tier := topo.TierTopic(10 * time.Millisecond)
	c.readCommitted(t, topo.DLT(), n/10)
	stop()
	retries := c.readToEnd(t, tier)
	dead := c.readToEnd(t, topo.DLT())
	seen := map[string]int{}
	for _, r := range retries {
		seen[string(r.Key)]++
	}
	for k, v := range seen {
		if v != 1 {
			t.Errorf("%s: %d retries visible to read_committed, want 1", k, v)
		}
	}
	if len(seen) != n || len(dead) != n/10 {
		t.Errorf("%d records retried, %d dead letters; want %d and %d", len(seen), len(dead), n, n/10)
	}
	if c.fake != nil && aborted.Load() == 0 {
		t.Errorf("no transaction was aborted: the injection did not happen")
	}
	t.Logf("transactions aborted on purpose: %d; handler completions beyond one per record: %d", aborted.Load(), func() int {
		mu.Lock()
		defer mu.Unlock()
		extra := 0
		for _, v := range completed {
			extra += v - 1
		}
		return extra
	}())
}

// readCommitted reads topic from the start with read_committed isolation
// until it has at least n records (n 0: whatever comes within a second).
func (c *testCluster) readCommitted(t testing.TB, topic string, n int) []*kgo.Record {
	t.Helper()
	cl := c.client(t, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	var out []*kgo.Record
	bound := 20 * time.Second
	if n == 0 {
		bound = time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	for n == 0 || len(out) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			if n == 0 {
				return out
			}
			t.Fatalf("read %s: %d records, want %d", topic, len(out), n)
		}
		out = append(out, fs.Records()...)
	}
	return out
}

// eosConsumer returns an exactly-once consumer of topic (one partition),
// whose executor's id is id, and whose handler fails a record's first
// attempt when fail says so and completes it otherwise, counting the
// completions by key.
func eosConsumer(t *testing.T, c *testCluster, topic, id string, fail func(key string) bool) (*kafka.Consumer, *runs) {
	t.Helper()
	p := retry.Policy{MaxRetries: 3, Initial: 10 * time.Millisecond, Multiplier: 1, MaxDelay: 10 * time.Millisecond, Jitter: retry.JitterNone}
	cons, err := kafka.NewConsumer(kafka.ConsumerOptions{Brokers: c.brokers, Group: topic + "-g", Mode: kafka.ExactlyOnce,
		Topics:   map[string]kafka.TopicOptions{topic: {Partitions: 1}},
		Executor: redrive.ExecutorOptions{ID: id, Policy: &p, Logger: testLogger(t), DisableRetryBudget: true}})
	if err != nil {
		t.Fatal(err)
	}
	c.ensure(t, cons, topic)
	rs := newRuns()
	cons.HandleFunc("job", func(ctx context.Context, j *redrive.Job) error {
		r, _ := kafka.RecordOf(ctx)
		k := string(r.Key)
		rs.ran(k, j.Attempt)
		if j.Attempt == 1 && fail(k) {
			return errors.New("first attempt fails")
		}
		rs.complete(k)
		return nil
	})
	return cons, rs
}

// ensure creates the topics of cons's main topic topic, so that records
// can be produced to it before the consumer runs.
func (c *testCluster) ensure(t *testing.T, cons *kafka.Consumer, topic string) {
	t.Helper()
	topo, _ := cons.Topology(topic)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := topo.Ensure(ctx, kadm.NewClient(c.client(t)), true); err != nil {
		t.Fatal(err)
	}
}

// waitCommitted waits until group committed the end offset of every
// partition of topics, or an offset short of it by transaction markers
// only: what was produced to them was settled in a committed
// transaction. (A consumer commits the offset after the last record it
// was given; a marker the broker writes after that record, as it does
// for a transaction whose commit returned before the marker was written,
// is never given to it. On a loaded broker a producer's records can land
// before another producer's marker.)
func (c *testCluster) waitCommitted(t *testing.T, group string, within time.Duration, topics ...string) {
	t.Helper()
	adm := kadm.NewClient(c.client(t))
	var why string
	type gap struct {
		topic     string
		partition int32
		from, to  int64
	}
	testwait.Watch(t, "group "+group+" to commit the end offsets", within, func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ends, err := adm.ListEndOffsets(ctx, topics...)
		if err != nil {
			why = err.Error()
			return false, why
		}
		committed, err := adm.FetchOffsets(ctx, group)
		if err != nil {
			why = err.Error()
			return false, why
		}
		ok := true
		var gaps []gap
		ends.Each(func(o kadm.ListedOffset) {
			at := int64(-1)
			if c, found := committed.Lookup(o.Topic, o.Partition); found && c.Err == nil {
				at = c.At
			}
			switch {
			case o.Offset == 0 || at >= o.Offset:
			case at < 0:
				ok, why = false, fmt.Sprintf("%s/%d committed nothing of %d", o.Topic, o.Partition, o.Offset)
			default:
				gaps = append(gaps, gap{o.Topic, o.Partition, at, o.Offset})
			}
		})
		for _, g := range gaps {
			if !ok {
				break
			}
			if !c.onlyMarkers(ctx, t, g.topic, g.partition, g.from, g.to) {
				ok, why = false, fmt.Sprintf("%s/%d committed %d of %d, records between", g.topic, g.partition, g.from, g.to)
			}
		}
		return ok, why
	})
}

// onlyMarkers reports whether the offsets [from, to) of topic's partition
// hold transaction markers only, as a read_committed reader sees them
// (records of aborted transactions, which it skips, count as markers).
// It reports false when they cannot be read through before ctx ends (an
// open transaction holds a read_committed reader before to).
func (c *testCluster) onlyMarkers(ctx context.Context, t *testing.T, topic string, partition int32, from, to int64) bool {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {partition: kgo.NewOffset().At(from)}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords(), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return false
		}
		only, through := true, false
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset >= to {
				through = true
				return
			}
			if !r.Attrs.IsControl() {
				only = false
			}
			if r.Offset+1 >= to {
				through = true
			}
		})
		if !only {
			return false
		}
		if through {
			return true
		}
	}
}

// TestExactlyOnceFencedLaneRecovers: another producer takes the main
// lane's transactional id (a zombie fence, made for real), so the lane's
// next transaction is fenced; the lane starts a new session and goes on:
// the records produced after the fence complete and their offsets are
// committed. (It stayed in its broken session for good, handling records
// whose outcomes it could never commit.)
func TestExactlyOnceFencedLaneRecovers(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	topic := newTopic(t)
	const id = "fence-me"
	cons, rs := eosConsumer(t, c, topic, id, func(string) bool { return false })
	running(t, cons)
	cl := c.client(t)
	r, _ := kafka.NewRecord(topic, "job", 0, []byte("before"))
	c.produce(t, cl, r)
	c.waitCommitted(t, topic+"-g", 30*time.Second, topic)

	// The fence: a producer with the lane's transactional id commits a
	// transaction of its own.
	zombie := c.client(t, kgo.TransactionalID(topic+"-g-"+id))
	if err := zombie.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	fr, _ := kafka.NewRecord(topic, "job", 0, []byte("fencer"))
	if err := zombie.ProduceSync(context.Background(), fr).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := zombie.EndTransaction(context.Background(), kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	zombie.Close()

	var ids []string
	for i := range 5 {
		k := fmt.Sprintf("after-%d", i)
		ids = append(ids, k)
		r, _ := kafka.NewRecord(topic, "job", i, []byte(k))
		c.produce(t, cl, r)
	}
	rs.waitCompleted(t, ids, 60*time.Second)
	c.waitCommitted(t, topic+"-g", 60*time.Second, topic)
}

// TestExactlyOnceProduceOutage: the tier refuses the lane's produces
// (retriable errors) for longer than a transaction's end timeout, so the
// transaction cannot even be aborted in time; the lane replaces its
// session and, once the outage is over, every record completes and every
// offset is committed. (The lane stayed in its open transaction for good:
// every later Begin failed.)
func TestExactlyOnceProduceOutage(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.needFake(t)
	topic := newTopic(t)
	cons, rs := eosConsumer(t, c, topic, "outage", func(string) bool { return true })
	kafka.SetEndTimeout(cons, 500*time.Millisecond)
	var sessionsFailed atomic.Int64
	kafka.OnSessionFailed(cons, func(error) { sessionsFailed.Add(1) })
	var outage atomic.Bool
	var refused atomic.Int64
	outage.Store(true)
	c.fake.ControlKey(int16(kmsg.Produce), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		c.fake.KeepControl()
		req := kr.(*kmsg.ProduceRequest)
		if !outage.Load() || req.TransactionID == nil {
			return nil, nil, false
		}
		refused.Add(1)
		resp := req.ResponseKind().(*kmsg.ProduceResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewProduceResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewProduceResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = kerr.NotEnoughReplicas.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	running(t, cons)
	cl := c.client(t)
	var ids []string
	for i := range 5 {
		k := fmt.Sprintf("rec-%d", i)
		ids = append(ids, k)
		r, _ := kafka.NewRecord(topic, "job", i, []byte(k))
		c.produce(t, cl, r)
	}
	eventually(t, "the outage refused produces", 30*time.Second, func() bool { return refused.Load() > 0 })
	// The outage outlasts the transaction's end timeout several times
	// over: three sessions could not end their transaction and were
	// replaced.
	testwait.Watch(t, "three sessions replaced during the outage", 60*time.Second, func() (bool, string) {
		n := sessionsFailed.Load()
		return n >= 3, fmt.Sprintf("%d sessions replaced, %d produces refused", n, refused.Load())
	})
	outage.Store(false)
	rs.waitCompleted(t, ids, 60*time.Second)
	c.waitCommitted(t, topic+"-g", 60*time.Second, topic)
}

// TestExactlyOnceFencedForGood: a lane fenced on every transaction (a
// second live consumer with the same transactional id) stops, and Run
// returns the error instead of spinning silently.
func TestExactlyOnceFencedForGood(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.needFake(t)
	topic := newTopic(t)
	cons, _ := eosConsumer(t, c, topic, "twin", func(string) bool { return false })
	var fenced atomic.Int64
	c.fake.ControlKey(int16(kmsg.TxnOffsetCommit), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		c.fake.KeepControl()
		req := kr.(*kmsg.TxnOffsetCommitRequest)
		if req.TransactionalID != topic+"-g-twin" {
			return nil, nil, false
		}
		fenced.Add(1)
		resp := req.ResponseKind().(*kmsg.TxnOffsetCommitResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewTxnOffsetCommitResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewTxnOffsetCommitResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = kerr.ProducerFenced.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- cons.Run(ctx) }()
	cl := c.client(t)
	r, _ := kafka.NewRecord(topic, "job", 0, []byte("a"))
	c.produce(t, cl, r)
	select {
	case err := <-done:
		if !errors.Is(err, kerr.ProducerFenced) {
			t.Fatalf("Run: %v, want the fence", err)
		}
		t.Logf("Run: %v (fenced %d times)", err, fenced.Load())
	case <-time.After(60 * time.Second):
		t.Fatalf("Run still running after %d fences", fenced.Load())
	}
}

// TestSwitchModeKeepsTierOffsets: a group switched from at-least-once to
// exactly-once, and back, goes on in the tiers where the other mode
// stopped: no retry already run runs again. (Each mode reads the tiers
// in groups of its own, which started at the tiers' start.)
func TestSwitchModeKeepsTierOffsets(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	topic := newTopic(t)
	rs := newRuns()
	consumer := func(mode kafka.Mode) *kafka.Consumer {
		p := retry.Policy{MaxRetries: 3, Initial: 10 * time.Millisecond, Multiplier: 1, MaxDelay: 10 * time.Millisecond, Jitter: retry.JitterNone}
		cons, err := kafka.NewConsumer(kafka.ConsumerOptions{Brokers: c.brokers, Group: topic + "-g", Mode: mode,
			Topics:   map[string]kafka.TopicOptions{topic: {Partitions: 1, Tiers: []time.Duration{10 * time.Millisecond}}},
			Executor: redrive.ExecutorOptions{Policy: &p, Logger: testLogger(t), DisableRetryBudget: true}})
		if err != nil {
			t.Fatal(err)
		}
		cons.HandleFunc("job", func(ctx context.Context, j *redrive.Job) error {
			r, _ := kafka.RecordOf(ctx)
			rs.ran(string(r.Key), j.Attempt)
			if j.Attempt == 1 {
				return errors.New("first attempt fails")
			}
			rs.complete(string(r.Key))
			return nil
		})
		return cons
	}
	cl := c.client(t)
	phase := func(mode kafka.Mode, key string) {
		cons := consumer(mode)
		c.ensure(t, cons, topic)
		stop := running(t, cons)
		r, _ := kafka.NewRecord(topic, "job", 0, []byte(key))
		c.produce(t, cl, r)
		rs.waitCompleted(t, []string{key}, 60*time.Second)
		stop()
	}
	phase(kafka.AtLeastOnce, "a")
	phase(kafka.ExactlyOnce, "b")
	phase(kafka.AtLeastOnce, "c")
	for _, k := range []string{"a", "b", "c"} {
		if n := rs.count(k, 2); n != 1 {
			t.Errorf("%s: its retry ran %d times, want once", k, n)
		}
	}
}

// TestOnlyMarkers checks waitCommitted's view of a committed offset short
// of the end: a transaction's marker after the last record is nothing
// left to consume; the record itself is.
func TestOnlyMarkers(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	topic := newTopic(t)
	adm := kadm.NewClient(c.client(t))
	if _, err := adm.CreateTopic(context.Background(), 1, -1, nil, topic); err != nil {
		t.Fatal(err)
	}
	// A loaded broker answers for a topic a moment after creating it (a
	// transactional produce to it fails meanwhile): wait for its leader.
	testwait.Until(t, "the leader of "+topic, 60*time.Second, func() bool {
		listed, err := adm.ListTopics(context.Background(), topic)
		if err != nil {
			return false
		}
		d, ok := listed[topic]
		return ok && d.Err == nil && len(d.Partitions) == 1 && d.Partitions[0].Err == nil && d.Partitions[0].Leader >= 0
	})
	tx := c.client(t, kgo.TransactionalID(topic+"-tx"), kgo.DefaultProduceTopic(topic))
	if err := tx.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	r := &kgo.Record{Value: []byte("v")}
	if err := tx.ProduceSync(context.Background(), r).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := tx.EndTransaction(context.Background(), kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var end int64
	testwait.Until(t, "the commit marker is written", 20*time.Second, func() bool {
		ends, err := adm.ListEndOffsets(ctx, topic)
		if err != nil {
			return false
		}
		o, _ := ends.Lookup(topic, 0)
		end = o.Offset
		return end > r.Offset+1
	})
	if !c.onlyMarkers(ctx, t, topic, 0, r.Offset+1, end) {
		t.Errorf("[%d, %d) after the record: want markers only", r.Offset+1, end)
	}
	if c.onlyMarkers(ctx, t, topic, 0, r.Offset, end) {
		t.Errorf("[%d, %d) from the record: want a record seen", r.Offset, end)
	}
}
