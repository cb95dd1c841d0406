package amqp

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/redrivehq/redrive/retry"
	"github.com/redrivehq/redrive/store"
)

func TestNewTopologyTiers(t *testing.T) {
	topo := NewTopology("work", retry.DefaultPolicy())
	// The schedule's 1, 2 and 4 s, then 40 s and 400 s for longer waits
	// (up to MaxRetryAfter, 1h).
	if want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 40 * time.Second, 400 * time.Second}; !equalDurations(topo.Tiers, want) {
		t.Fatalf("tiers %v, want %v", topo.Tiers, want)
	}
	if got := topo.TierQueue(time.Second); got != "work-retry-1s" {
		t.Errorf("TierQueue(1s) = %q", got)
	}
	if got := topo.TierQueue(1500 * time.Millisecond); got != "work-retry-1500ms" {
		t.Errorf("TierQueue(1.5s) = %q", got)
	}
	if topo.DLQ() != "work-dlq" {
		t.Errorf("DLQ = %q", topo.DLQ())
	}
	// A capped policy repeats its cap: one tier for it.
	p := retry.DefaultPolicy()
	p.MaxRetries, p.MaxDelay, p.MaxRetryAfter = 10, 5*time.Second, 10*time.Second
	if got := NewTopology("w", p).Tiers; !equalDurations(got, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second}) {
		t.Errorf("capped tiers %v", got)
	}
	// Sub-millisecond delays need no delay queue.
	p = retry.Policy{MaxRetries: 3, Initial: 100 * time.Microsecond, Multiplier: 1, MaxDelay: time.Millisecond}
	if got := NewTopology("w", p).Tiers; len(got) != 0 {
		t.Errorf("sub-ms tiers %v", got)
	}
}

func equalDurations(a, b []time.Duration) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestTierFor(t *testing.T) {
	topo := Topology{Queue: "q", Tiers: []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}}
	for _, c := range []struct {
		d    time.Duration
		want time.Duration
		ok   bool
	}{
		{999 * time.Millisecond, 0, false},
		{time.Second, time.Second, true},
		{1100 * time.Millisecond, time.Second, true},
		{2 * time.Second, 2 * time.Second, true},
		{3999 * time.Millisecond, 2 * time.Second, true},
		{time.Hour, 4 * time.Second, true},
		{0, 0, false},
	} {
		got, ok := topo.tierFor(c.d)
		if got != c.want || ok != c.ok {
			t.Errorf("tierFor(%v) = %v, %v; want %v, %v", c.d, got, ok, c.want, c.ok)
		}
	}
}

func TestTopologyValidate(t *testing.T) {
	for _, bad := range []Topology{
		{},
		{Queue: "amq.work"},
		{Queue: "q\x00"},
		{Queue: "q", Tiers: []time.Duration{2 * time.Second, time.Second}},
		{Queue: "q", Tiers: []time.Duration{time.Microsecond}},
		{Queue: "q", Tiers: []time.Duration{1500 * time.Microsecond}},
		{Queue: "q", DeliveryLimit: -1},
	} {
		if err := bad.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil, want an error", bad)
		}
	}
	if err := (Topology{Queue: "q", Tiers: []time.Duration{time.Millisecond, time.Second}}).Validate(); err != nil {
		t.Errorf("valid topology: %v", err)
	}
}

func TestQueueArguments(t *testing.T) {
	topo := Topology{Queue: "w", Quorum: true, Tiers: []time.Duration{time.Second}}
	qs := topo.queues()
	if len(qs) != 3 || qs[0].name != "w" || qs[1].name != "w-dlq" || qs[2].name != "w-retry-1s" {
		t.Fatalf("queues %+v", qs)
	}
	work, tier := qs[0].args, qs[2].args
	for k, want := range map[string]any{"x-queue-type": "quorum", "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "w-dlq",
		"x-dead-letter-strategy": "at-least-once", "x-overflow": "reject-publish", "x-delivery-limit": int64(DefaultDeliveryLimit)} {
		if work[k] != want {
			t.Errorf("work queue %s = %v, want %v", k, work[k], want)
		}
	}
	for k, want := range map[string]any{"x-message-ttl": int64(1000), "x-dead-letter-routing-key": "w", "x-dead-letter-strategy": "at-least-once"} {
		if tier[k] != want {
			t.Errorf("tier %s = %v, want %v", k, tier[k], want)
		}
	}
	if _, ok := (Topology{Queue: "w"}).queues()[0].args["x-queue-type"]; ok {
		t.Error("a classic queue is declared with x-queue-type; brokers before 3.11 refuse that for queues declared without it")
	}
}

func TestSupported(t *testing.T) {
	q := Topology{Queue: "q", Quorum: true}
	if err := q.supported("3.9.29"); err == nil || !strings.Contains(err.Error(), "3.10") {
		t.Errorf("quorum on 3.9: %v", err)
	}
	for _, v := range []string{"3.10.8", "3.12.1", "4.0.0", ""} {
		if err := q.supported(v); err != nil {
			t.Errorf("quorum on %q: %v", v, err)
		}
	}
	if err := (Topology{Queue: "q"}).supported("3.8.0"); err != nil {
		t.Errorf("classic on 3.8: %v", err)
	}
}

func TestReadState(t *testing.T) {
	hist, _ := historyJSON([]store.Event{{Kind: store.EventRetry, Attempt: 1, Class: "transient", Error: "503"}}, 0, 10, 1<<20)
	st, err := readState(amqp091.Table{HeaderAttempt: int32(2), HeaderDue: "1700000000000", HeaderLastDelay: float64(1500),
		HeaderHistory: hist, HeaderMaxRetries: int16(5), HeaderDependency: "crm", HeaderPolicy: `{"MaxRetries":1}`}, "q")
	if err != nil {
		t.Fatal(err)
	}
	if st.attempts != 2 || st.due.UnixMilli() != 1700000000000 || st.lastDelay != 1500*time.Millisecond || st.maxRetries != 5 ||
		st.dependency != "crm" || len(st.history) != 1 || st.history[0].Error != "503" || string(st.policy) != `{"MaxRetries":1}` {
		t.Errorf("state %+v", st)
	}
	// No redrive header: the broker's rejections in this queue count.
	deaths := []any{
		amqp091.Table{"queue": "q", "reason": "rejected", "count": int64(2)},
		amqp091.Table{"queue": "q-retry-1s", "reason": "expired", "count": int64(5)},
		amqp091.Table{"queue": "other", "reason": "rejected", "count": int64(7)},
		amqp091.Table{"queue": "q", "reason": "delivery_limit", "count": int64(1)},
	}
	if st, err := readState(amqp091.Table{"x-death": deaths}, "q"); err != nil || st.attempts != 3 {
		t.Errorf("x-death fallback: attempts %d, %v; want 3", st.attempts, err)
	}
	// The header wins over x-death.
	if st, _ := readState(amqp091.Table{"x-death": deaths, HeaderAttempt: int64(1)}, "q"); st.attempts != 1 {
		t.Errorf("header and x-death: attempts %d, want 1", st.attempts)
	}
	for name, h := range map[string]amqp091.Table{
		"attempt text":     {HeaderAttempt: "two"},
		"attempt negative": {HeaderAttempt: int64(-1)},
		"attempt fraction": {HeaderAttempt: 1.5},
		"history":          {HeaderHistory: "{not json"},
		"history type":     {HeaderHistory: int64(1)},
		"policy":           {HeaderPolicy: "nope"},
		"dependency":       {HeaderDependency: int64(3)},
		"not-reprocess":    {HeaderNotReprocessable: "yes"},
	} {
		if _, err := readState(h, "q"); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestHistoryBounded(t *testing.T) {
	events := make([]store.Event, 80)
	for i := range events {
		events[i] = store.Event{Kind: store.EventRetry, Attempt: i + 1, Error: strings.Repeat("x", 400)}
	}
	s, dropped := historyJSON(events, 3, 50, 8<<10)
	var got []store.Event
	if err := json.Unmarshal([]byte(s), &got); err != nil {
		t.Fatal(err)
	}
	if len(s) > 8<<10 || len(got)+dropped != 80+3 || got[len(got)-1].Attempt != 80 {
		t.Errorf("%d bytes, %d events kept (last attempt %d), %d dropped", len(s), len(got), got[len(got)-1].Attempt, dropped)
	}
}

// FuzzReadState: any header values decode to a state or an error wrapping
// errUndecodable, never a panic, and a decoded attempt count is in range.
func FuzzReadState(f *testing.F) {
	f.Add(int64(2), "1700000000000", `[{"kind":"retry","attempt":1}]`, "x", 1.0)
	f.Add(int64(-5), "", `{`, "", -3.5)
	f.Add(int64(1<<40), "9999999999999999999", `null`, "\xff", 1e300)
	f.Fuzz(func(t *testing.T, attempt int64, due, history, dep string, delay float64) {
		h := amqp091.Table{HeaderAttempt: attempt, HeaderDue: due, HeaderHistory: history, HeaderDependency: dep,
			HeaderLastDelay: delay}
		st, err := readState(h, "q")
		if err != nil {
			if !strings.Contains(err.Error(), "undecodable") {
				t.Fatalf("error %v does not say undecodable", err)
			}
			return
		}
		if st.attempts < 0 || st.attempts > 1<<30 || st.lastDelay < 0 {
			t.Fatalf("state out of range: %+v", st)
		}
	})
}
