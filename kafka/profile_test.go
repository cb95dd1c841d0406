package kafka_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/kafka"
	"github.com/redrivehq/redrive/retry"
	"github.com/redrivehq/redrive/store"
)

// TestClassicRetryProfile proves the real profile, retry.DefaultPolicy (3
// retries, 1 s doubling, ±10% jitter), end to end: a record that always
// fails runs 4 times, 1, 2 and 4 s apart (each gap never shorter than the
// delay its history records, and at most 1 s longer), each retry through
// the tier of its delay, then lands in the DLT with reason
// retries_exhausted and its 4-event history. Nothing else runs.
func TestClassicRetryProfile(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	topic := newTopic(t)
	p := retry.DefaultPolicy()
	cons, err := kafka.NewConsumer(kafka.ConsumerOptions{Brokers: c.brokers, Group: topic + "-g",
		Topics:   map[string]kafka.TopicOptions{topic: {Partitions: 1}},
		Executor: redrive.ExecutorOptions{Policy: &p, Logger: testLogger(t)}})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var starts []time.Time
	var payloads []string
	cons.HandleFunc("charge", func(ctx context.Context, j *redrive.Job) error {
		mu.Lock()
		starts = append(starts, time.Now())
		payloads = append(payloads, string(j.Payload))
		n := len(starts)
		mu.Unlock()
		if j.Attempt != n {
			t.Errorf("run %d is the job's attempt %d", n, j.Attempt)
		}
		return errors.New("card processor unavailable")
	})
	stop := running(t, cons)
	cl := c.client(t)
	r, err := kafka.NewRecord(topic, "charge", map[string]string{"order": "A-1"}, []byte("A-1"))
	if err != nil {
		t.Fatal(err)
	}
	c.produce(t, cl, r)

	topo, _ := cons.Topology(topic)
	c.readAll(t, topo.DLT(), 1)
	// Once the group committed the end of the main topic and the tiers,
	// nothing is left to run: a fifth run, or a second dead letter, would
	// have come by then. Stopped, the consumer produces nothing more.
	topics := []string{topic}
	for _, d := range topo.Tiers {
		topics = append(topics, topo.TierTopic(d))
	}
	c.waitCommitted(t, topic+"-g", 30*time.Second, topics...)
	stop()
	dead := c.readToEnd(t, topo.DLT())

	mu.Lock()
	at := append([]time.Time(nil), starts...)
	ran := append([]string(nil), payloads...)
	mu.Unlock()
	if len(at) != 4 {
		t.Fatalf("the record ran %d times, want 4 (1 + 3 retries)", len(at))
	}
	for i, pl := range ran {
		if pl != `{"order":"A-1"}` {
			t.Errorf("run %d had payload %s", i+1, pl)
		}
	}
	if len(dead) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dead))
	}
	d := dead[0]
	if string(d.Key) != "A-1" || string(d.Value) != `{"order":"A-1"}` {
		t.Errorf("dead letter %q=%q, want the record's key and value", d.Key, d.Value)
	}
	if got := header(d, kafka.HeaderReason); got != "retries_exhausted" {
		t.Errorf("reason %q, want retries_exhausted", got)
	}
	if got := header(d, kafka.HeaderAttempt); got != "4" {
		t.Errorf("attempt header %q, want 4", got)
	}
	if got := header(d, kafka.HeaderError); got != "card processor unavailable" {
		t.Errorf("error header %q", got)
	}
	if header(d, kafka.HeaderOriginTopic) != topic || header(d, kafka.HeaderOriginPartition) != "0" ||
		header(d, kafka.HeaderOriginOffset) != "0" {
		t.Errorf("origin %s/%s/%s, want %s/0/0", header(d, kafka.HeaderOriginTopic), header(d, kafka.HeaderOriginPartition),
			header(d, kafka.HeaderOriginOffset), topic)
	}
	var hist []redrive.Event
	if err := json.Unmarshal([]byte(header(d, kafka.HeaderHistory)), &hist); err != nil {
		t.Fatalf("history: %v", err)
	}
	if len(hist) != 4 {
		t.Fatalf("history has %d events, want 4: %+v", len(hist), hist)
	}
	for i, ev := range hist {
		want := store.EventRetry
		if i == 3 {
			want = store.EventDead
		}
		if ev.Kind != want || ev.Attempt != i+1 {
			t.Errorf("history event %d: %s of attempt %d, want %s of attempt %d", i, ev.Kind, ev.Attempt, want, i+1)
		}
		if ev.Error != "card processor unavailable" {
			t.Errorf("history event %d: error %q", i, ev.Error)
		}
		// The event is stamped when the attempt starts, just before
		// the handler runs.
		if d := at[i].Sub(ev.At); d < 0 || d > 250*time.Millisecond {
			t.Errorf("history event %d starts at %v, the run at %v", i, ev.At, at[i])
		}
	}

	// The gaps: the delay the policy chose (the one the history records)
	// is 1, 2, 4 s ±10%; no retry runs before it; none runs more than 1 s
	// after it.
	for i, base := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} {
		chosen := time.Duration(hist[i].Delay)
		lo, hi := base-base/10, base+base/10
		if chosen < lo || chosen > hi {
			t.Errorf("retry %d: chosen delay %v, want %v ±10%% (%v..%v)", i+1, chosen, base, lo, hi)
		}
		gap := at[i+1].Sub(at[i])
		t.Logf("retry %d: chosen delay %v, ran %v after the attempt before (%+v late)", i+1, chosen, gap, gap-chosen)
		if gap < chosen-2*time.Millisecond {
			t.Errorf("retry %d ran %v after the attempt before: early for its delay %v", i+1, gap, chosen)
		}
		if gap < lo-2*time.Millisecond || gap > hi+time.Second {
			t.Errorf("retry %d ran %v after the attempt before, want %v..%v", i+1, gap, lo, hi+time.Second)
		}
		if gap > chosen+time.Second {
			t.Errorf("retry %d ran %v after the attempt before: %v late for its delay %v", i+1, gap, gap-chosen, chosen)
		}
	}

	// Each retry went once through the tier of its delay: the longest
	// tier not longer than the delay (a delay jittered under 2 s waits in
	// the 1 s tier), the shortest for a shorter one; one dead letter.
	if got := topo.Tiers; len(got) < 3 || got[0] != time.Second || got[1] != 2*time.Second || got[2] != 4*time.Second {
		t.Fatalf("tiers %v, want 1s, 2s, 4s first", got)
	}
	want := map[string]int64{topic: 1, topo.DLT(): 1}
	for _, d := range topo.Tiers {
		want[topo.TierTopic(d)] = 0
	}
	for _, ev := range hist[:3] {
		tier := topo.Tiers[0]
		for _, d := range topo.Tiers {
			if d <= time.Duration(ev.Delay) {
				tier = d
			}
		}
		want[topo.TierTopic(tier)]++
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topo.Topics()...)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			t.Errorf("end offset of %s/%d: %v", o.Topic, o.Partition, o.Err)
		}
		got[o.Topic] += o.Offset
	})
	for name, n := range want {
		if got[name] != n {
			t.Errorf("%s holds %d records, want %d", name, got[name], n)
		}
	}

	s := cons.Stats()[topic]
	if s.Consumed != 4 || s.Completed != 0 || s.Retried != 3 || s.Dead != 1 || s.Hops != 0 || s.ProduceRetries != 0 {
		t.Errorf("stats %+v, want 4 consumed, 3 retried, 1 dead, nothing else", s)
	}
}

// TestRetryPromptAfterWait: a retry produced to a tier partition the
// consumer has just waited on (paused, then resumed) runs on time. The
// record fails twice, both retries through the one 1 s tier partition;
// while the first waits, another record is consumed, so the fetch in
// flight when the wait ends was built with the tier partition paused.
// The second retry must still run within 1 s of its due time.
func TestRetryPromptAfterWait(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	topic := newTopic(t)
	p := retry.Policy{MaxRetries: 2, Initial: time.Second, Multiplier: 1, MaxDelay: time.Second, Jitter: retry.JitterNone}
	hook := &requestHook{}
	cons, err := kafka.NewConsumer(kafka.ConsumerOptions{Brokers: c.brokers, Group: topic + "-g",
		Topics:        map[string]kafka.TopicOptions{topic: {Partitions: 1}},
		Executor:      redrive.ExecutorOptions{Policy: &p, Logger: testLogger(t)},
		ClientOptions: []kgo.Opt{kgo.WithHooks(hook)}})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var starts []time.Time
	var pokes int
	cons.HandleFunc("job", func(ctx context.Context, j *redrive.Job) error {
		mu.Lock()
		defer mu.Unlock()
		if string(j.Payload) == "poke" {
			pokes++
			return nil
		}
		starts = append(starts, time.Now())
		if j.Attempt < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	running(t, cons)
	cl := c.client(t)
	r, _ := kafka.NewRecord(topic, "job", []byte("slow"), nil)
	c.produce(t, cl, r)
	eventually(t, "the first retry waiting", 20*time.Second, func() bool { return cons.Stats()[topic].Waits >= 1 })
	// The poke comes while the retry waits, after a fetch with the tier
	// paused was built: two fetches written since the wait began (the
	// first may have been built before).
	fetched := hook.fetches.Load()
	eventually(t, "two fetches while the retry waits", 20*time.Second, func() bool { return hook.fetches.Load() >= fetched+2 })
	poke, _ := kafka.NewRecord(topic, "job", []byte("poke"), nil)
	c.produce(t, cl, poke)
	eventually(t, "the third attempt", 30*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(starts) == 3 })

	mu.Lock()
	defer mu.Unlock()
	if pokes != 1 {
		t.Errorf("the poke ran %d times, want 1", pokes)
	}
	for i := range 2 {
		gap := starts[i+1].Sub(starts[i])
		t.Logf("retry %d ran %v after the attempt before", i+1, gap)
		if gap < time.Second-2*time.Millisecond || gap > 2*time.Second {
			t.Errorf("retry %d ran %v after the attempt before, want 1 s, at most 1 s late", i+1, gap)
		}
	}
	// The third attempt is settled after its handler returns, so after
	// the test saw it start: wait for it before reading the counts.
	eventually(t, "the third attempt settled", 10*time.Second, func() bool { return cons.Stats()[topic].Completed == 2 })
	if s := cons.Stats()[topic]; s.Retried != 2 || s.Completed != 2 || s.Hops != 0 {
		t.Errorf("stats %+v: want 2 retries through the 1 s tier, 2 completed", s)
	}
}
