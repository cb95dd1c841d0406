package amqp_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/amqp"
	"github.com/redrivehq/redrive/store/sqlite"
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
// of the trace context the dead letter carried, which the job keeps
// (issue 30: every log line about a job does).
func TestKeeperLogsTrace(t *testing.T) {
	t.Parallel()
	c := dial(t)
	q := newQueue(t, c)
	topo := amqp.Topology{Queue: q}
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "redrive.db"), sqlite.Options{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	client := redrive.NewClient(st, redrive.ClientOptions{Logger: quiet()})
	var logs lockedLines
	k, err := amqp.NewKeeper(c, amqp.KeeperOptions{Topologies: []amqp.Topology{topo}, Add: client.AddDead,
		Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ch, err := c.Channel(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := topo.Declare(ch); err != nil {
		t.Fatal(err)
	}
	ch.Close()
	const traceID = "0af7651916cd43dd8448eb211c80319c"
	publishRaw(t, c, topo.DLQ(), amqp091.Publishing{MessageId: "m-t", Body: []byte(`{"doc":1}`),
		Headers: amqp091.Table{"traceparent": "00-" + traceID + "-b7ad6b7169203331-01"}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- k.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("keeper.Run: %v", err)
		}
	})
	eventually(t, "the dead letter kept", 20*time.Second, func() bool { return k.Stats()[q].Kept == 1 })
	found := false
	for _, line := range logs.lines() {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) != nil || rec["msg"] != "amqp: dead letter stored as a dead job" {
			continue
		}
		found = true
		if rec["trace_id"] != traceID || rec["span_id"] != "b7ad6b7169203331" {
			t.Errorf("the dead job's line without the dead letter's trace: %s", line)
		}
	}
	if !found {
		t.Fatalf("no line about the dead job; log:\n%s", strings.Join(logs.lines(), "\n"))
	}
}
