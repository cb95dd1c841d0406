package metrics_test

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/redrivehq/redrive/metrics"
	"github.com/redrivehq/redrive/store"
)

// TestCollectorFleetBreakers: the fleet's breakers, read from the store,
// with who opened each and when.
func TestCollectorFleetBreakers(t *testing.T) {
	client, st := openClient(t)
	ctx := t.Context()
	opened := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	rule := store.BreakerRule{Failures: 2, Window: 24 * 365 * time.Hour, BreakDuration: 100 * 365 * 24 * time.Hour}
	if _, err := st.ReportBreaker(ctx, store.BreakerReport{Name: "payments", Process: "worker-a", Now: opened, Failures: 2, Rule: rule}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.ReportBreaker(ctx, store.BreakerReport{Name: "mail", Process: "worker-b", Now: time.Now(), Failures: 1, Rule: rule}); err != nil {
		t.Fatal(err)
	}
	c := metrics.NewCollector(client, metrics.CollectorOptions{Logger: slog.New(slog.DiscardHandler)})
	ready := float64(opened.Add(rule.BreakDuration).Unix())
	want := fmt.Sprintf(`
# HELP redrive_fleet_breaker_state The fleet's circuit breaker state: 1 for the breaker's current state, 0 for the others. An open breaker whose break elapsed shows half_open. Store-wide: every process sharing the store reports the same value; aggregate replicas with max, not sum.
# TYPE redrive_fleet_breaker_state gauge
redrive_fleet_breaker_state{breaker="mail",state="closed"} 1
redrive_fleet_breaker_state{breaker="mail",state="half_open"} 0
redrive_fleet_breaker_state{breaker="mail",state="open"} 0
redrive_fleet_breaker_state{breaker="payments",state="closed"} 0
redrive_fleet_breaker_state{breaker="payments",state="half_open"} 0
redrive_fleet_breaker_state{breaker="payments",state="open"} 1
# HELP redrive_fleet_breaker_opened_timestamp_seconds When the fleet's circuit breaker last opened (Unix time), labeled with who opened it: the worker process whose failures tripped it, or the operator. Absent for a breaker that never opened. Store-wide: every process sharing the store reports the same value; aggregate replicas with max, not sum.
# TYPE redrive_fleet_breaker_opened_timestamp_seconds gauge
redrive_fleet_breaker_opened_timestamp_seconds{breaker="payments",opened_by="worker-a"} %v
# HELP redrive_fleet_breaker_ready_timestamp_seconds When the fleet's open circuit breaker lets a probe through (Unix time). Absent unless open with a deadline. Store-wide: every process sharing the store reports the same value; aggregate replicas with max, not sum.
# TYPE redrive_fleet_breaker_ready_timestamp_seconds gauge
redrive_fleet_breaker_ready_timestamp_seconds{breaker="payments"} %v
# HELP redrive_fleet_breaker_failures The fleet's failures within the breaker's window, as the processes reported them. Store-wide: every process sharing the store reports the same value; aggregate replicas with max, not sum.
# TYPE redrive_fleet_breaker_failures gauge
redrive_fleet_breaker_failures{breaker="mail"} 1
redrive_fleet_breaker_failures{breaker="payments"} 0
# HELP redrive_fleet_breaker_trips_total Times the fleet's circuit breaker opened. Store-wide: every process sharing the store reports the same value; aggregate replicas with max, not sum.
# TYPE redrive_fleet_breaker_trips_total counter
redrive_fleet_breaker_trips_total{breaker="mail"} 0
redrive_fleet_breaker_trips_total{breaker="payments"} 1
`, float64(opened.Unix()), ready)
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "redrive_fleet_breaker_state", "redrive_fleet_breaker_opened_timestamp_seconds",
		"redrive_fleet_breaker_ready_timestamp_seconds", "redrive_fleet_breaker_failures", "redrive_fleet_breaker_trips_total"); err != nil {
		t.Fatal(err)
	}
}

// TestCollectorDeletedBreaker: a deleted breaker's series are gone at the
// next scrape; the others stay.
func TestCollectorDeletedBreaker(t *testing.T) {
	client, st := openClient(t)
	ctx := t.Context()
	now := time.Now()
	rule := store.BreakerRule{Failures: 2, Window: time.Minute, BreakDuration: time.Hour}
	for _, name := range []string{"gone", "kept"} {
		if _, err := st.ReportBreaker(ctx, store.BreakerReport{Name: name, Process: "worker-a", Now: now, Failures: 2, Rule: rule}); err != nil {
			t.Fatal(err)
		}
	}
	c := metrics.NewCollector(client, metrics.CollectorOptions{Logger: slog.New(slog.DiscardHandler)})
	if n := testutil.CollectAndCount(c, "redrive_fleet_breaker_trips_total"); n != 2 {
		t.Fatalf("%d trips series before the delete, want 2", n)
	}
	if _, err := st.DeleteBreaker(ctx, store.BreakerDelete{Name: "gone", Now: now, Force: true}); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP redrive_fleet_breaker_trips_total Times the fleet's circuit breaker opened. Store-wide: every process sharing the store reports the same value; aggregate replicas with max, not sum.
# TYPE redrive_fleet_breaker_trips_total counter
redrive_fleet_breaker_trips_total{breaker="kept"} 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "redrive_fleet_breaker_trips_total"); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"redrive_fleet_breaker_state", "redrive_fleet_breaker_opened_timestamp_seconds",
		"redrive_fleet_breaker_ready_timestamp_seconds", "redrive_fleet_breaker_failures"} {
		if n := testutil.CollectAndCount(c, name); n == 0 {
			t.Errorf("%s: no series left for the kept breaker", name)
		}
	}
}
