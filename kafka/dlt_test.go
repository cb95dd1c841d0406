package kafka_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/kafka"
	"github.com/redrivehq/redrive/retry"
)

// TestDLTCountPeekRedrive: dead letters are counted and peeked with
// their history; a redrive filtered by reason republishes only those,
// byte-exact, with the attempt count reset; they run again and a record
// that dies again carries both lives; the cursor makes a second redrive
// take only what is new.
func TestDLTCountPeekRedrive(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	topic := newTopic(t)
	p := retry.Policy{MaxRetries: 1, Initial: 10 * time.Millisecond, Multiplier: 1, MaxDelay: 10 * time.Millisecond, Jitter: retry.JitterNone}
	cons, err := kafka.NewConsumer(kafka.ConsumerOptions{Brokers: c.brokers, Group: topic + "-g",
		Topics:   map[string]kafka.TopicOptions{topic: {Partitions: 2}},
		Executor: redrive.ExecutorOptions{Policy: &p, Logger: testLogger(t)}})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	fixed := false
	runs := map[string]int{}
	var lastHistory []redrive.Event
	cons.HandleFunc("job", func(ctx context.Context, j *redrive.Job) error {
		r, _ := kafka.RecordOf(ctx)
		mu.Lock()
		defer mu.Unlock()
		runs[string(r.Key)]++
		switch {
		case bytes.HasPrefix(r.Key, []byte("perm")):
			return redrive.Permanent(errors.New("bad input"))
		case bytes.HasPrefix(r.Key, []byte("flaky")) && !fixed:
			return errors.New("dependency down")
		case bytes.HasPrefix(r.Key, []byte("flaky")):
			lastHistory = j.History
		}
		return nil
	})
	running(t, cons)
	cl := c.client(t)
	binary := []byte{0, 0xff, 'x'}
	for _, k := range []string{"flaky-1", "flaky-2", "perm-1"} {
		c.produce(t, cl, &kgo.Record{Topic: topic, Key: []byte(k), Value: binary,
			Headers: []kgo.RecordHeader{{Key: kafka.HeaderKind, Value: []byte("job")}, {Key: "trace", Value: []byte{1, 2}}}})
	}
	dlt, err := kafka.NewDLT(c.brokers, topic, kafka.DLTOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer dlt.Close()
	ctx := context.Background()
	c.waitTopics(t, topic+"-dlt")
	eventually(t, "three dead letters", 20*time.Second, func() bool {
		n, err := dlt.Count(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return n.Total == 3
	})
	dead, err := dlt.Peek(ctx, 10, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(dead) != 3 {
		t.Fatalf("peeked %d, want 3", len(dead))
	}
	for _, d := range dead {
		if !bytes.Equal(d.Value, binary) {
			t.Errorf("%s: value %x", d.Key, d.Value)
		}
		switch {
		case bytes.HasPrefix(d.Key, []byte("flaky")):
			if d.Reason != "retries_exhausted" || d.Attempts != 2 || len(d.History) != 2 || d.Class != "unknown" {
				t.Errorf("%s: %+v", d.Key, d)
			}
		default:
			if d.Reason != "permanent" || d.Attempts != 1 || d.Error != "bad input" {
				t.Errorf("%s: %+v", d.Key, d)
			}
		}
	}
	// Redrive the exhausted ones only.
	mu.Lock()
	fixed = true
	mu.Unlock()
	res, err := dlt.Redrive(ctx, kafka.RedriveOptions{Reason: "retries_exhausted", Rate: -1, Note: "dependency back"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Redriven != 2 || res.Skipped != 1 {
		t.Fatalf("redrive: %+v, want 2 redriven, 1 skipped", res)
	}
	eventually(t, "the redriven records ran", 20*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return runs["flaky-1"] == 3 && runs["flaky-2"] == 3
	})
	mu.Lock()
	if len(lastHistory) != 3 || lastHistory[2].Kind != "redriven" || lastHistory[2].Note != "dependency back" {
		t.Errorf("a redriven record's history: %+v, want its first life and the redrive", lastHistory)
	}
	mu.Unlock()
	// The dead letter the filter skipped stays pending: counted, peeked,
	// and left for the next redrive; those redriven past it are not.
	n, err := dlt.Count(ctx)
	if err != nil || n.Total != 3 || n.Pending != 1 {
		t.Errorf("count after the redrive: %+v %v, want 3 in all, perm-1 pending", n, err)
	}
	if left, err := dlt.Peek(ctx, 10, nil); err != nil || len(left) != 1 || string(left[0].Key) != "perm-1" {
		t.Errorf("peek after the redrive: %v %v, want perm-1 only", left, err)
	}
	// Nothing new to that filter: a second redrive takes nothing.
	if res, err := dlt.Redrive(ctx, kafka.RedriveOptions{Reason: "retries_exhausted", Rate: -1}); err != nil || res.Redriven != 0 || res.Skipped != 1 {
		t.Errorf("second redrive: %+v %v, want nothing, perm-1 skipped", res, err)
	}
	// An explicit range reads again: perm-1 can be redriven by offset.
	var permPart int32
	var permOff int64
	for _, d := range dead {
		if string(d.Key) == "perm-1" {
			permPart, permOff = d.Partition, d.Offset
		}
	}
	res, err = dlt.Redrive(ctx, kafka.RedriveOptions{From: map[int32]int64{permPart: permOff}, To: map[int32]int64{permPart: permOff + 1}, Rate: -1})
	if err != nil || res.Redriven != 1 {
		t.Fatalf("redrive by offset: %+v %v", res, err)
	}
	eventually(t, "perm-1 ran again and died again", 20*time.Second, func() bool {
		n, err := dlt.Count(ctx)
		mu.Lock()
		defer mu.Unlock()
		return runs["perm-1"] == 2 && err == nil && n.Total == 4
	})
	// Pending: the first perm-1 (a redrive by offset does not move the
	// cursor) and the new one.
	pending, err := dlt.Peek(ctx, 10, nil)
	if err != nil || len(pending) != 2 {
		t.Fatalf("the pending dead letters: %v %v", pending, err)
	}
	var again *kafka.DeadLetter
	for i := range pending {
		if pending[i].Redriven == 1 {
			again = &pending[i]
		}
	}
	if again == nil {
		t.Fatalf("the new dead letter is not pending: %+v", pending)
	}
	if d := again; d.Redriven != 1 || len(d.History) != 3 || d.History[1].Kind != "redriven" {
		t.Errorf("dead again: redriven %d history %+v, want both lives", d.Redriven, d.History)
	}
	trace := false
	for _, h := range again.Headers {
		if h.Key == "trace" {
			trace = bytes.Equal(h.Value, []byte{1, 2})
		}
	}
	if !trace {
		t.Errorf("the record's own header was not kept byte-exact: %v", again.Headers)
	}
	// An operator discards them: nothing pending, nothing to redrive.
	if res, err := dlt.Redrive(ctx, kafka.RedriveOptions{Discard: true}); err != nil || res.Discarded != 2 || res.Redriven != 0 {
		t.Errorf("discard: %+v %v, want both discarded", res, err)
	}
	if n, err := dlt.Count(ctx); err != nil || n.Total != 4 || n.Pending != 0 {
		t.Errorf("count after the discard: %+v %v, want 4 in all, none pending", n, err)
	}
	if res, err := dlt.Redrive(ctx, kafka.RedriveOptions{Rate: -1}); err != nil || res.Redriven != 0 {
		t.Errorf("redrive after the discard: %+v %v, want nothing", res, err)
	}
}

// deadLetter returns a dead letter of topic's DLT, as the consumer
// produces it, with key k and reason reason.
func deadLetter(topic, k, reason string) *kgo.Record {
	return &kgo.Record{Topic: topic + "-dlt", Key: []byte(k), Value: []byte(k), Headers: []kgo.RecordHeader{
		{Key: kafka.HeaderKind, Value: []byte("job")}, {Key: kafka.HeaderAttempt, Value: []byte("1")},
		{Key: kafka.HeaderReason, Value: []byte(reason)}, {Key: kafka.HeaderClass, Value: []byte("unknown")},
		{Key: kafka.HeaderError, Value: []byte("boom")}, {Key: kafka.HeaderDeadAt, Value: []byte("1700000000000")}}}
}

// newDLT creates topic's topology (one partition) and returns its DLT.
func newDLT(t *testing.T, c *testCluster, topic string) *kafka.DLT {
	t.Helper()
	topo := kafka.Topology{Topic: topic, Tiers: []time.Duration{time.Second}, Partitions: 1, Replication: -1}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	adm := kadm.NewClient(c.client(t))
	if err := topo.Ensure(ctx, adm, true); err != nil {
		t.Fatal(err)
	}
	// A loaded broker may answer for a topic just created a moment after
	// (a transactional produce to it fails meanwhile): wait for its
	// partitions' leaders.
	eventually(t, "the leaders of "+topo.DLT(), 20*time.Second, func() bool {
		listed, err := adm.ListTopics(ctx, topo.Topics()...)
		if err != nil {
			return false
		}
		for _, name := range topo.Topics() {
			d, ok := listed[name]
			if !ok || d.Err != nil || len(d.Partitions) == 0 {
				return false
			}
			for _, p := range d.Partitions {
				if p.Err != nil || p.Leader < 0 {
					return false
				}
			}
		}
		return true
	})
	dlt, err := kafka.NewDLT(c.brokers, topic, kafka.DLTOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dlt.Close)
	return dlt
}

// keys returns the keys of dead letters.
func keys(dls []kafka.DeadLetter) []string {
	var out []string
	for _, d := range dls {
		out = append(out, string(d.Key))
	}
	return out
}

// TestDLTReadCommitted: dead letters of an aborted transaction, and of
// one still open, are neither peeked nor redriven (exactly-once mode
// produces dead letters in transactions): only the committed one is.
// (Peek and Redrive read uncommitted records and took all three.)
func TestDLTReadCommitted(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	topic := newTopic(t)
	dlt := newDLT(t, c, topic)
	ctx := context.Background()
	c.produce(t, c.client(t), deadLetter(topic, "committed", "permanent"))
	txn := func(k string, commit kgo.TransactionEndTry) *kgo.Client {
		cl := c.client(t, kgo.TransactionalID(topic+"-"+k))
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := cl.ProduceSync(ctx, deadLetter(topic, k, "permanent")).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if k != "open" {
			if err := cl.EndTransaction(ctx, commit); err != nil {
				t.Fatal(err)
			}
		}
		return cl
	}
	txn("aborted", kgo.TryAbort)
	open := txn("open", kgo.TryAbort)
	defer func() {
		if err := open.EndTransaction(ctx, kgo.TryAbort); err != nil {
			t.Error(err)
		}
	}()
	dead, err := dlt.Peek(ctx, 10, nil)
	if err != nil || !slices.Equal(keys(dead), []string{"committed"}) {
		t.Fatalf("peek: %v %v, want the committed dead letter only", keys(dead), err)
	}
	res, err := dlt.Redrive(ctx, kafka.RedriveOptions{Rate: -1})
	if err != nil || res.Redriven != 1 {
		t.Fatalf("redrive: %+v %v, want the committed dead letter only", res, err)
	}
	if back := c.readCommitted(t, topic, 0); len(back) != 1 || string(back[0].Key) != "committed" {
		t.Errorf("the main topic got %d records, want the committed dead letter", len(back))
	}
}

// TestDLTFilteredRedriveKeepsSkipped: a redrive filtered by reason leaves
// the dead letters it skips pending (counted, peeked, redriven by the
// next redrive), and the ones it redrove after them are not redriven
// again. (The cursor moved past the skipped ones: they were lost to
// Count, Peek and every later redrive.)
func TestDLTFilteredRedriveKeepsSkipped(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	topic := newTopic(t)
	dlt := newDLT(t, c, topic)
	ctx := context.Background()
	cl := c.client(t)
	for _, k := range []string{"a", "B", "c", "D", "e"} {
		reason := "retries_exhausted"
		if k == strings.ToUpper(k) {
			reason = "permanent"
		}
		c.produce(t, cl, deadLetter(topic, k, reason))
	}
	res, err := dlt.Redrive(ctx, kafka.RedriveOptions{Reason: "retries_exhausted", Rate: -1})
	if err != nil || res.Redriven != 3 || res.Skipped != 2 {
		t.Fatalf("filtered redrive: %+v %v, want 3 redriven, 2 skipped", res, err)
	}
	if n, err := dlt.Count(ctx); err != nil || n.Total != 5 || n.Pending != 2 {
		t.Errorf("count: %+v %v, want 5, 2 pending", n, err)
	}
	if dead, err := dlt.Peek(ctx, 10, nil); err != nil || !slices.Equal(keys(dead), []string{"B", "D"}) {
		t.Errorf("peek: %v %v, want B and D", keys(dead), err)
	}
	res, err = dlt.Redrive(ctx, kafka.RedriveOptions{Rate: -1})
	if err != nil || res.Redriven != 2 || res.Skipped != 0 {
		t.Fatalf("unfiltered redrive: %+v %v, want B and D", res, err)
	}
	if n, err := dlt.Count(ctx); err != nil || n.Pending != 0 {
		t.Errorf("count: %+v %v, want none pending", n, err)
	}
	// The redrives produced synchronously, and nothing else produces to
	// the main topic: it is read to its end.
	back := c.readToEnd(t, topic)
	if len(back) != 5 {
		t.Errorf("the main topic holds %d records, want each dead letter once", len(back))
	}
	seen := map[string]int{}
	for _, r := range back {
		seen[string(r.Key)]++
	}
	if len(seen) != 5 {
		t.Errorf("redriven: %v, want each once", seen)
	}
}

// TestDLTCursorTooScattered: a filtered redrive that would leave more
// redriven ranges between skipped dead letters than the cursor holds
// stops with an error before producing, and what it did stays counted.
func TestDLTCursorTooScattered(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	topic := newTopic(t)
	dlt := newDLT(t, c, topic)
	ctx := context.Background()
	var rs []*kgo.Record
	for i := range 250 {
		reason := "retries_exhausted"
		if i%2 == 0 {
			reason = "permanent"
		}
		rs = append(rs, deadLetter(topic, fmt.Sprint(i), reason))
	}
	c.produce(t, c.client(t), rs...)
	res, err := dlt.Redrive(ctx, kafka.RedriveOptions{Reason: "retries_exhausted", Rate: -1})
	if err == nil || !strings.Contains(err.Error(), "too scattered") || res.Redriven != 100 {
		t.Fatalf("redrive: %+v %v, want 100 redriven then a clear error", res, err)
	}
	if n, err := dlt.Count(ctx); err != nil || n.Pending != 150 {
		t.Errorf("count: %+v %v, want 150 pending", n, err)
	}
	// Unfiltered, the rest goes, none twice.
	res, err = dlt.Redrive(ctx, kafka.RedriveOptions{Rate: -1})
	if err != nil || res.Redriven != 150 {
		t.Fatalf("unfiltered redrive: %+v %v, want the 150 left", res, err)
	}
}

// TestDLTSlowBroker: a broker that takes longer than two seconds to
// answer a fetch slows Peek and Redrive down, but they read to the end.
// (They took two silent seconds for the end and reported success having
// read nothing.)
func TestDLTSlowBroker(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.needFake(t)
	topic := newTopic(t)
	dlt := newDLT(t, c, topic)
	ctx := context.Background()
	c.produce(t, c.client(t), deadLetter(topic, "a", "permanent"), deadLetter(topic, "b", "permanent"))
	var slowed atomic.Int64
	c.fake.ControlKey(int16(kmsg.Fetch), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.fake.KeepControl()
		slowed.Add(1)
		// Real time passing is what is tested: a slow broker.
		c.fake.SleepControl(func() { time.Sleep(2500 * time.Millisecond) })
		return nil, nil, false
	})
	dead, err := dlt.Peek(ctx, 10, nil)
	if err != nil || !slices.Equal(keys(dead), []string{"a", "b"}) {
		t.Fatalf("peek: %v %v, want a and b", keys(dead), err)
	}
	res, err := dlt.Redrive(ctx, kafka.RedriveOptions{Rate: -1})
	if err != nil || res.Redriven != 2 {
		t.Fatalf("redrive: %+v %v, want a and b", res, err)
	}
	if slowed.Load() == 0 {
		t.Fatal("no fetch was slowed")
	}
}
