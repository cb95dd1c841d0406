package kafka_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/kafka"
	"github.com/redrivehq/redrive/retry"
)

// attempts records when each job's attempts started, by key.
type attempts struct {
	mu sync.Mutex
	at map[string][]time.Time
}

func (a *attempts) add(k string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.at == nil {
		a.at = map[string][]time.Time{}
	}
	a.at[k] = append(a.at[k], time.Now())
	return len(a.at[k])
}

func (a *attempts) of(k string) []time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]time.Time(nil), a.at[k]...)
}

// TestRetryTiersAndDLT: a failing record is retried through the tiers,
// never early, then dead in the DLT with its history; a permanent error
// goes to the DLT at once; the main partition keeps flowing meanwhile.
func TestRetryTiersAndDLT(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	topic := newTopic(t)
	p := retry.Policy{MaxRetries: 3, Initial: 100 * time.Millisecond, Multiplier: 2, MaxDelay: time.Second, Jitter: retry.JitterNone}
	cons, err := kafka.NewConsumer(kafka.ConsumerOptions{Brokers: c.brokers, Group: topic + "-g",
		Topics:   map[string]kafka.TopicOptions{topic: {Partitions: 1}},
		Executor: redrive.ExecutorOptions{Policy: &p, Logger: testLogger(t)}})
	if err != nil {
		t.Fatal(err)
	}
	seen := &attempts{}
	var done sync.Map
	cons.HandleFunc("scan", func(ctx context.Context, j *redrive.Job) error {
		var doc struct{ ID string }
		if err := json.Unmarshal(j.Payload, &doc); err != nil {
			return err
		}
		n := seen.add(doc.ID)
		if j.Attempt != n {
			t.Errorf("%s: attempt %d is the job's attempt %d", doc.ID, n, j.Attempt)
		}
		switch doc.ID {
		case "always":
			return errors.New("scanner unavailable")
		case "bad":
			return redrive.Permanent(errors.New("not a PDF"))
		}
		done.Store(doc.ID, time.Now())
		return nil
	})
	running(t, cons)
	cl := c.client(t)
	for _, id := range []string{"always", "bad", "ok-1", "ok-2"} {
		r, err := kafka.NewRecord(topic, "scan", map[string]string{"ID": id}, []byte(id))
		if err != nil {
			t.Fatal(err)
		}
		c.produce(t, cl, r)
	}
	topo, _ := cons.Topology(topic)
	dead := c.readAll(t, topo.DLT(), 2)
	at := seen.of("always")
	if len(at) != 4 {
		t.Fatalf("always: %d attempts, want 4", len(at))
	}
	for i, want := range []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond} {
		if gap := at[i+1].Sub(at[i]); gap < want-2*time.Millisecond {
			t.Errorf("retry %d came %v after the attempt before: early for %v", i+1, gap, want)
		}
	}
	if _, ok := done.Load("ok-2"); !ok {
		t.Errorf("ok-2 did not complete")
	}
	byKey := map[string]*kgo.Record{}
	for _, r := range dead {
		byKey[string(r.Key)] = r
	}
	if r := byKey["always"]; r == nil || header(r, kafka.HeaderReason) != "retries_exhausted" || header(r, kafka.HeaderAttempt) != "4" {
		t.Errorf("always's dead letter: %+v", r)
	} else {
		var h []redrive.Event
		if err := json.Unmarshal([]byte(header(r, kafka.HeaderHistory)), &h); err != nil || len(h) != 4 {
			t.Errorf("always's history %v %v, want 3 retries and the death", err, h)
		}
		if header(r, kafka.HeaderOriginTopic) != topic || header(r, kafka.HeaderOriginOffset) != "0" {
			t.Errorf("origin %s/%s", header(r, kafka.HeaderOriginTopic), header(r, kafka.HeaderOriginOffset))
		}
	}
	if r := byKey["bad"]; r == nil || header(r, kafka.HeaderReason) != "permanent" || header(r, kafka.HeaderError) != "not a PDF" {
		t.Errorf("bad's dead letter: %+v", r)
	}
	if n := len(seen.of("bad")); n != 1 {
		t.Errorf("bad: %d attempts, want 1", n)
	}
	s := cons.Stats()[topic]
	if s.Completed != 2 || s.Retried != 3 || s.Dead != 2 {
		t.Errorf("stats %+v", s)
	}
}

// TestMainFlowsWhileRetryWaits: while a retry waits for its due time in
// a tier, the records produced after it on the same main partition run.
// The retry is due in a minute, far beyond the liveness bound, so the
// test does not depend on how fast a loaded machine runs the 20 records
// (a 2 s retry raced 20 produce round trips and their handling).
func TestMainFlowsWhileRetryWaits(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	topic := newTopic(t)
	p := retry.Policy{MaxRetries: 1, Initial: time.Minute, Multiplier: 1, MaxDelay: time.Minute, Jitter: retry.JitterNone}
	cons, err := kafka.NewConsumer(kafka.ConsumerOptions{Brokers: c.brokers, Group: topic + "-g",
		Topics:   map[string]kafka.TopicOptions{topic: {Partitions: 1}},
		Executor: redrive.ExecutorOptions{Policy: &p, Logger: testLogger(t)}})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var order []string
	cons.HandleFunc("job", func(ctx context.Context, j *redrive.Job) error {
		mu.Lock()
		order = append(order, string(j.Payload))
		mu.Unlock()
		if string(j.Payload) == `"slow"` && j.Attempt == 1 {
			return errors.New("not yet")
		}
		return nil
	})
	running(t, cons)
	cl := c.client(t)
	r, _ := kafka.NewRecord(topic, "job", "slow", nil)
	c.produce(t, cl, r)
	eventually(t, "slow's retry waits in its tier", 20*time.Second, func() bool { return cons.Stats()[topic].Waits == 1 })
	rs := make([]*kgo.Record, 20)
	for i := range rs {
		rs[i], _ = kafka.NewRecord(topic, "job", i, nil)
	}
	c.produce(t, cl, rs...)
	eventually(t, "the 20 records after slow", 20*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(order) >= 21 })
	mu.Lock()
	defer mu.Unlock()
	if len(order) != 21 || order[0] != `"slow"` {
		t.Errorf("order %v: the 20 records after slow must run while its retry waits", order)
	}
}

// TestLongWaitDoesNotHoldTopTier: a record snoozed for an hour lands in
// the only (top) tier; it goes round the tier instead of waiting there,
// so a record snoozed for 100 ms behind it runs. (It waited out its hour
// with the partition paused, holding every record behind it.)
func TestLongWaitDoesNotHoldTopTier(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	topic := newTopic(t)
	cons, err := kafka.NewConsumer(kafka.ConsumerOptions{Brokers: c.brokers, Group: topic + "-g",
		Topics:   map[string]kafka.TopicOptions{topic: {Partitions: 1, Tiers: []time.Duration{200 * time.Millisecond}}},
		Executor: redrive.ExecutorOptions{Logger: testLogger(t)}})
	if err != nil {
		t.Fatal(err)
	}
	seen := &attempts{}
	cons.HandleFunc("job", func(ctx context.Context, j *redrive.Job) error {
		r, _ := kafka.RecordOf(ctx)
		k := string(r.Key)
		switch n := seen.add(k); {
		case k == "long":
			return redrive.Snooze(time.Hour)
		case n == 1:
			return redrive.Snooze(100 * time.Millisecond)
		}
		return nil
	})
	running(t, cons)
	cl := c.client(t)
	for _, k := range []string{"long", "short"} {
		r, _ := kafka.NewRecord(topic, "job", k, []byte(k))
		c.produce(t, cl, r)
	}
	eventually(t, "the short snooze ran again behind the long one", 30*time.Second, func() bool {
		return len(seen.of("short")) == 2
	})
	if n := len(seen.of("long")); n != 1 {
		t.Errorf("long ran %d times, want once: it is not due for an hour", n)
	}
	if s := cons.Stats()[topic]; s.Hops == 0 {
		t.Errorf("stats %+v: the long wait never went round its tier", s)
	}
}

// TestReadAheadBounded: while a partition's handler is stuck, the
// consumer stops fetching the partition once MaxReadAhead records are
// queued, instead of polling the whole backlog into memory; once the
// handler goes on, every record completes. (Every polled record joined
// an unbounded queue.)
func TestReadAheadBounded(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	topic := newTopic(t)
	const n, limit = 400, 20
	hook := &requestHook{}
	cons, err := kafka.NewConsumer(kafka.ConsumerOptions{Brokers: c.brokers, Group: topic + "-g",
		Topics:       map[string]kafka.TopicOptions{topic: {Partitions: 1}},
		MaxReadAhead: limit,
		Executor:     redrive.ExecutorOptions{Logger: testLogger(t)},
		// Small fetches: the bound is checked between them.
		ClientOptions: []kgo.Opt{kgo.FetchMaxPartitionBytes(64 << 10), kgo.WithHooks(hook)}})
	if err != nil {
		t.Fatal(err)
	}
	c.ensure(t, cons, topic)
	release := make(chan struct{})
	var mu sync.Mutex
	done := map[string]bool{}
	cons.HandleFunc("job", func(ctx context.Context, j *redrive.Job) error {
		<-release
		mu.Lock()
		done[string(j.Payload)] = true
		mu.Unlock()
		return nil
	})
	cl := c.client(t)
	value := make([]byte, 8<<10)
	for i := range n {
		c.produce(t, cl, &kgo.Record{Topic: topic, Value: append([]byte(fmt.Sprint(i, "-")), value...),
			Headers: []kgo.RecordHeader{{Key: kafka.HeaderKind, Value: []byte("job")}}})
	}
	running(t, cons)
	eventually(t, "the first records polled", 30*time.Second, func() bool { return cons.Stats()[topic].Consumed > 0 })
	// The consumer goes on fetching (its tiers, long-polling): 30 fetches
	// that would have brought the partition's records (8 each), were it
	// not paused.
	from := hook.fetches.Load()
	eventually(t, "30 more fetches", 60*time.Second, func() bool { return hook.fetches.Load() >= from+30 })
	// The bound is checked between polls: one poll's records (here about
	// 1 MiB) come whole.
	if got := cons.Stats()[topic].Consumed; got >= n/2 {
		t.Errorf("%d of %d records polled while the handler was stuck, want the read-ahead (%d) and one poll", got, n, limit)
	}
	close(release)
	eventually(t, "every record completed", 60*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(done) == n
	})
}

// TestAbortedUpstreamRecordsNotRun: records an upstream transactional
// producer aborted are not jobs: the at-least-once consumer reads
// read_committed and runs only the committed ones. (It read
// read_uncommitted and ran the aborted record.)
func TestAbortedUpstreamRecordsNotRun(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	topic := newTopic(t)
	cons, err := kafka.NewConsumer(kafka.ConsumerOptions{Brokers: c.brokers, Group: topic + "-g",
		Topics: map[string]kafka.TopicOptions{topic: {Partitions: 1}}, Executor: redrive.ExecutorOptions{Logger: testLogger(t)}})
	if err != nil {
		t.Fatal(err)
	}
	c.ensure(t, cons, topic)
	var mu sync.Mutex
	var ran []string
	cons.HandleFunc("job", func(ctx context.Context, j *redrive.Job) error {
		r, _ := kafka.RecordOf(ctx)
		mu.Lock()
		ran = append(ran, string(r.Key))
		mu.Unlock()
		return nil
	})
	ctx := context.Background()
	up := c.client(t, kgo.TransactionalID(topic+"-upstream"))
	for _, k := range []string{"aborted", "committed"} {
		if err := up.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		r, _ := kafka.NewRecord(topic, "job", k, []byte(k))
		if err := up.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
		end := kgo.TryAbort
		if k == "committed" {
			end = kgo.TryCommit
		}
		if err := up.EndTransaction(ctx, end); err != nil {
			t.Fatal(err)
		}
	}
	running(t, cons)
	eventually(t, "the committed record ran", 30*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Contains(ran, "committed")
	})
	mu.Lock()
	defer mu.Unlock()
	if slices.Contains(ran, "aborted") {
		t.Errorf("ran %v: the aborted record ran", ran)
	}
}
