package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/redrivehq/redrive/breaker"
	"github.com/redrivehq/redrive/store"
)

// The fleet's circuit breakers, as the store shares them between the
// processes (store-wide), and whether this process lost them.
var (
	fleetStateDesc = prometheus.NewDesc("redrive_fleet_breaker_state",
		"The fleet's circuit breaker state: 1 for the breaker's current state, 0 for the others. An open breaker whose break elapsed shows half_open."+storeWide,
		[]string{"breaker", "state"}, nil)
	fleetOpenedDesc = prometheus.NewDesc("redrive_fleet_breaker_opened_timestamp_seconds",
		"When the fleet's circuit breaker last opened (Unix time), labeled with who opened it: the worker process whose failures tripped it, or the operator. Absent for a breaker that never opened."+storeWide,
		[]string{"breaker", "opened_by"}, nil)
	fleetReadyDesc = prometheus.NewDesc("redrive_fleet_breaker_ready_timestamp_seconds",
		"When the fleet's open circuit breaker lets a probe through (Unix time). Absent unless open with a deadline."+storeWide,
		[]string{"breaker"}, nil)
	fleetFailuresDesc = prometheus.NewDesc("redrive_fleet_breaker_failures",
		"The fleet's failures within the breaker's window, as the processes reported them."+storeWide, []string{"breaker"}, nil)
	fleetTripsDesc = prometheus.NewDesc("redrive_fleet_breaker_trips_total",
		"Times the fleet's circuit breaker opened."+storeWide, []string{"breaker"}, nil)
	breakerFallbackDesc = prometheus.NewDesc("redrive_breaker_fallback",
		"1 when this process lost the store and its circuit breakers decide alone, on its own calls. Per process; absent when its breakers are not shared.",
		nil, nil)
)

func describeFleet(ch chan<- *prometheus.Desc) {
	ch <- fleetStateDesc
	ch <- fleetOpenedDesc
	ch <- fleetReadyDesc
	ch <- fleetFailuresDesc
	ch <- fleetTripsDesc
	ch <- breakerFallbackDesc
}

// collectFleet reads the fleet's breakers from the store.
func (c *Collector) collectFleet(ctx context.Context, ch chan<- prometheus.Metric) {
	if c.breakers != nil {
		if s := c.breakers.Shared(); s != nil {
			ch <- prometheus.MustNewConstMetric(breakerFallbackDesc, prometheus.GaugeValue, b2f(s.Fallback()))
		}
	}
	bs, err := c.client.Store().ListBreakers(ctx)
	if err != nil {
		c.log.Warn("metrics: reading the shared circuit breakers failed", "error", err)
		return
	}
	now := time.Now()
	for _, b := range bs {
		name := nonEmpty(b.Name)
		state := breaker.Closed
		switch b.State {
		case store.BreakerOpen:
			state = breaker.Open
			if !b.ReadyAt.IsZero() && !now.Before(b.ReadyAt) {
				state = breaker.HalfOpen
			}
		case store.BreakerHalfOpen:
			state = breaker.HalfOpen
		}
		for _, s := range []breaker.State{breaker.Closed, breaker.HalfOpen, breaker.Open} {
			ch <- prometheus.MustNewConstMetric(fleetStateDesc, prometheus.GaugeValue, b2f(state == s), name, s.String())
		}
		if !b.OpenedAt.IsZero() {
			ch <- prometheus.MustNewConstMetric(fleetOpenedDesc, prometheus.GaugeValue, float64(b.OpenedAt.UnixMilli())/1000, name, nonEmpty(b.OpenedBy))
		}
		if state == breaker.Open && !b.ReadyAt.IsZero() {
			ch <- prometheus.MustNewConstMetric(fleetReadyDesc, prometheus.GaugeValue, float64(b.ReadyAt.UnixMilli())/1000, name)
		}
		failures, _ := b.Totals(now)
		ch <- prometheus.MustNewConstMetric(fleetFailuresDesc, prometheus.GaugeValue, float64(failures), name)
		ch <- prometheus.MustNewConstMetric(fleetTripsDesc, prometheus.CounterValue, float64(b.Trips), name)
	}
}
