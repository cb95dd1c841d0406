package kafka_test

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

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
	n, err := dlt.Count(ctx)
	if err != nil || n.Total != 3 || n.Pending != 0 {
		t.Errorf("count after the redrive: %+v %v, want 3 in all, none pending", n, err)
	}
	// Nothing new: a second redrive takes nothing.
	if res, err := dlt.Redrive(ctx, kafka.RedriveOptions{Rate: -1}); err != nil || res.Redriven != 0 {
		t.Errorf("second redrive: %+v %v, want nothing", res, err)
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
	again, err := dlt.Peek(ctx, 10, nil)
	if err != nil || len(again) != 1 {
		t.Fatalf("the new dead letter: %v %v", again, err)
	}
	if d := again[0]; d.Redriven != 1 || len(d.History) != 3 || d.History[1].Kind != "redriven" {
		t.Errorf("dead again: redriven %d history %+v, want both lives", d.Redriven, d.History)
	}
	trace := false
	for _, h := range again[0].Headers {
		if h.Key == "trace" {
			trace = bytes.Equal(h.Value, []byte{1, 2})
		}
	}
	if !trace {
		t.Errorf("the record's own header was not kept byte-exact: %v", again[0].Headers)
	}
}
