package kafka_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/kafka"
	"github.com/redrivehq/redrive/retry"
)

// lockedLines collects a logger's JSON lines from any goroutine.
type lockedLines struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLines) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Split(strings.TrimSpace(l.b.String()), "\n")
}

// TestKeeperLogsTrace: the keeper's line saying a dead letter became a
// dead job is a line about a job, so it carries the trace_id and span_id
// of the trace context the job keeps, the one its record carried (issue
// 30: every log line about a job does).
func TestKeeperLogsTrace(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	topic := newTopic(t)
	p := retry.Policy{MaxRetries: 1, Initial: 10 * time.Millisecond, Multiplier: 1, MaxDelay: 10 * time.Millisecond, Jitter: retry.JitterNone}
	cons, err := kafka.NewConsumer(kafka.ConsumerOptions{Brokers: c.brokers, Group: topic + "-g",
		Topics:   map[string]kafka.TopicOptions{topic: {Partitions: 1}},
		Executor: redrive.ExecutorOptions{Policy: &p, Logger: testLogger(t)}})
	if err != nil {
		t.Fatal(err)
	}
	cons.HandleFunc("scan", func(context.Context, *redrive.Job) error {
		return &failure.Error{Class: failure.Permanent, Reason: "bad_scan", Err: errors.New("not a PDF")}
	})
	running(t, cons)
	topo, _ := cons.Topology(topic)
	const traceID = "0af7651916cd43dd8448eb211c80319c"
	cl := c.client(t)
	c.produce(t, cl, &kgo.Record{Topic: topic, Value: []byte("x"), Headers: []kgo.RecordHeader{
		{Key: kafka.HeaderKind, Value: []byte("scan")}, {Key: "traceparent", Value: []byte("00-" + traceID + "-b7ad6b7169203331-01")}}})
	c.readAll(t, topo.DLT(), 1)

	client := openStore(t)
	var logs lockedLines
	k, err := kafka.NewKeeper(kafka.KeeperOptions{Brokers: c.brokers, Group: topic + "-keeper", Topologies: []kafka.Topology{topo},
		Add: client.AddDead, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	runKeeper(t, k)
	eventually(t, "the dead letter kept", 20*time.Second, func() bool { return k.Stats()[topic].Kept == 1 })
	res, err := client.List(context.Background(), redrive.Filter{States: []redrive.State{redrive.Dead}, Queue: topic}, redrive.Page{Limit: 2})
	if err != nil || len(res.Jobs) != 1 {
		t.Fatalf("dead jobs: %d, %v", len(res.Jobs), err)
	}
	j, err := client.Get(context.Background(), res.Jobs[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if redrive.TraceID(j) != traceID {
		t.Fatalf("the dead job's trace context is %q, want the record's trace", j.Trace)
	}
	found := false
	for _, line := range logs.lines() {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) != nil || rec["msg"] != "kafka: keeper: dead letter stored as a dead job" {
			continue
		}
		found = true
		if rec["trace_id"] != traceID || rec["span_id"] == nil {
			t.Errorf("the dead job's line without its trace (%q): %s", j.Trace, line)
		}
	}
	if !found {
		t.Fatalf("no line about the dead job; log:\n%s", strings.Join(logs.lines(), "\n"))
	}
}
