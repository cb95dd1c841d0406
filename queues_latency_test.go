package redrive_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/store"
)

// TestQueuesLatency: Client.Queues reports each queue's latency (the age
// of its oldest due job) and flags the queues with due jobs that no live
// worker serves.
func TestQueuesLatency(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	defer st.Close()
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quietLogger()})
	now := time.Now()
	_, err := st.Enqueue(ctx, []store.NewJob{
		{Queue: "lonely", Kind: "k", RunAt: now.Add(-time.Hour), MaxRetries: -1},
		{Queue: "lonely", Kind: "k", RunAt: now.Add(-time.Minute), MaxRetries: -1},
		{Queue: "served", Kind: "k", RunAt: now.Add(-time.Minute), MaxRetries: -1},
		{Queue: "future", Kind: "k", RunAt: now.Add(time.Hour), MaxRetries: -1},
		{Queue: "abandoned", Kind: "k", RunAt: now.Add(-time.Minute), MaxRetries: -1},
	}, now.Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	// A live worker serves "served" (and "future", which has nothing
	// due); a stopped one served "abandoned"; a silent one "lonely".
	for _, w := range []store.WorkerInfo{
		{ID: "live", Queues: map[string]int{"served": 1, "future": 1}, StartedAt: now, HeartbeatAt: now},
		{ID: "stopped", Queues: map[string]int{"abandoned": 1}, StartedAt: now, HeartbeatAt: now},
		{ID: "silent", Queues: map[string]int{"lonely": 1}, StartedAt: now.Add(-time.Hour), HeartbeatAt: now.Add(-time.Hour)},
	} {
		if err := st.RegisterWorker(ctx, w); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.StopWorker(ctx, "stopped", now, "stopped"); err != nil {
		t.Fatal(err)
	}
	qs, err := c.Queues(ctx)
	if err != nil {
		t.Fatal(err)
	}
	type want struct {
		due        time.Time // zero: none due
		min, max   time.Duration
		unconsumed bool
	}
	wants := map[string]want{
		"lonely":    {due: now.Add(-time.Hour), min: time.Hour, max: time.Hour + time.Minute, unconsumed: true},
		"served":    {due: now.Add(-time.Minute), min: time.Minute, max: 2 * time.Minute},
		"future":    {},
		"abandoned": {due: now.Add(-time.Minute), min: time.Minute, max: 2 * time.Minute, unconsumed: true},
	}
	if len(qs) != len(wants) {
		t.Fatalf("Queues: %+v, want %d queues", qs, len(wants))
	}
	for _, q := range qs {
		w := wants[q.Name]
		if w.due.IsZero() {
			if q.OldestDueAt != nil || q.LatencyMS != 0 || q.Unconsumed {
				t.Errorf("%s: oldest due %v, latency %dms, unconsumed %v; want none due", q.Name, q.OldestDueAt, q.LatencyMS, q.Unconsumed)
			}
			continue
		}
		if q.OldestDueAt == nil || !q.OldestDueAt.Equal(w.due.Truncate(time.Microsecond)) {
			t.Errorf("%s: oldest due %v, want %v", q.Name, q.OldestDueAt, w.due)
		}
		if l := q.Latency(); l < w.min || l > w.max {
			t.Errorf("%s: latency %v, want %v to %v", q.Name, l, w.min, w.max)
		}
		if q.Unconsumed != w.unconsumed {
			t.Errorf("%s: unconsumed %v, want %v", q.Name, q.Unconsumed, w.unconsumed)
		}
	}
	// The JSON names the unit.
	b, err := json.Marshal(qs[0])
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"latency_ms", "oldest_due_at", "unconsumed"} {
		if _, ok := m[k]; !ok {
			t.Errorf("queue JSON %s lacks %q", b, k)
		}
	}
	// A pause answers with the latency too.
	q, err := c.PauseQueue(ctx, "lonely")
	if err != nil {
		t.Fatal(err)
	}
	if q.Latency() < time.Hour || !q.Unconsumed {
		t.Errorf("PauseQueue: latency %v, unconsumed %v; want at least 1h, true", q.Latency(), q.Unconsumed)
	}
}
