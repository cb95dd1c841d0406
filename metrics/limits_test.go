package metrics_test

import (
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/metrics"
	"github.com/redrivehq/redrive/metrics/internal/metricstest"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/sqlite"
)

func TestLimitMetrics(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "r.db"), sqlite.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: log})
	if err := c.SetLimits([]redrive.ConcurrencyLimit{{Name: "per-customer", Kind: "crm", Key: "payload.c", Max: 2}}); err != nil {
		t.Fatal(err)
	}
	// A configured limit is reported before any job used it.
	text := metricstest.Exposition(t, metrics.NewCollector(c, metrics.CollectorOptions{Logger: log}))
	metricstest.WantSamples(t, text, map[string]float64{
		`redrive_limit_max{limit="per-customer"}`:         2,
		`redrive_limit_in_use{limit="per-customer"}`:      0,
		`redrive_limit_groups{limit="per-customer"}`:      0,
		`redrive_limit_waiting{limit="per-customer"}`:     0,
		`redrive_limit_held_groups{limit="per-customer"}`: 0,
	})
	for _, cust := range []string{"a", "a", "a", "b"} {
		if _, err := c.Enqueue(t.Context(), "crm", map[string]string{"c": cust}); err != nil {
			t.Fatal(err)
		}
	}
	// Lease what the limit lets run: 2 of a, 1 of b; 1 of a waits.
	now := time.Now()
	got, err := st.Fetch(t.Context(), store.FetchParams{Queue: redrive.DefaultQueue, Limit: 10, Now: now, LeaseUntil: now.Add(time.Minute), Worker: "w"})
	if err != nil || len(got) != 3 {
		t.Fatalf("Fetch = %d jobs, %v; want 3", len(got), err)
	}
	text = metricstest.Exposition(t, metrics.NewCollector(c, metrics.CollectorOptions{Logger: log}))
	metricstest.WantSamples(t, text, map[string]float64{
		`redrive_limit_max{limit="per-customer"}`:     2,
		`redrive_limit_groups{limit="per-customer"}`:  2,
		`redrive_limit_in_use{limit="per-customer"}`:  3,
		`redrive_limit_busiest{limit="per-customer"}`: 2,
		`redrive_limit_waiting{limit="per-customer"}`: 1,
	})
}

// TestLimitRateMetrics: a limit's rate and burst are exposed, and the
// starts its rate delayed counted.
func TestLimitRateMetrics(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "r.db"), sqlite.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: log})
	if err := c.SetLimits([]redrive.ConcurrencyLimit{{Name: "pay", Kind: "charge", Rate: "2/s", Burst: 2}}); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		if _, err := c.Enqueue(t.Context(), "charge", map[string]string{}); err != nil {
			t.Fatal(err)
		}
	}
	// The burst of 2 starts at once; the third waits for its turn (the
	// store's clock is the fetch's Now: no time passes here).
	now := time.Now().Add(time.Second)
	p := store.FetchParams{Queue: redrive.DefaultQueue, Limit: 10, Now: now, LeaseUntil: now.Add(time.Minute), Worker: "w"}
	if got, err := st.Fetch(t.Context(), p); err != nil || len(got) != 2 {
		t.Fatalf("Fetch = %d jobs, %v; want 2", len(got), err)
	}
	p.Now = now.Add(500 * time.Millisecond)
	if got, err := st.Fetch(t.Context(), p); err != nil || len(got) != 1 {
		t.Fatalf("Fetch = %d jobs, %v; want 1", len(got), err)
	}
	text := metricstest.Exposition(t, metrics.NewCollector(c, metrics.CollectorOptions{Logger: log}))
	metricstest.WantSamples(t, text, map[string]float64{
		`redrive_limit_max{limit="pay"}`:                           0,
		`redrive_limit_rate{limit="pay"}`:                          2,
		`redrive_limit_burst{limit="pay"}`:                         2,
		`redrive_limit_throttled_total{limit="pay",reason="rate"}`: 1,
		`redrive_limit_waiting{limit="pay"}`:                       1,
	})
}
