package metrics

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
)

// The fleet-wide concurrency limits kept in the store (store-wide), which
// the Collector reads at every scrape:
//
//	redrive_limit_max{limit}      how many jobs of one group may run at once
//	redrive_limit_in_use{limit}   the limit's running jobs, all groups together
//	redrive_limit_busiest{limit}  the most running in one group
//	redrive_limit_groups{limit}   how many of its groups have a running job
//	redrive_limit_waiting{limit}  the limit's due jobs not running (waiting on a slot or its rate, or not fetched yet)
//	redrive_limit_held_groups{limit}  its groups a Retry-After holds now (hold_on_retry_after)
//	redrive_limit_rate{limit}     the limit's rate, in job starts per second per group (absent: no rate)
//	redrive_limit_burst{limit}    how many jobs of one group may start at once under the rate
//	redrive_limit_throttled_total{limit,reason="rate"}  starts the rate delayed (a counter)
//
// The limits the process is configured with (serve's concurrency limits)
// are reported from the start, at 0, before any job used them.
var (
	limitMaxDesc = prometheus.NewDesc("redrive_limit_max",
		"How many jobs of one group of the concurrency limit may run at once, fleet-wide (0: no cap, a limit with only a rate)."+storeWide, []string{"limit"}, nil)
	limitInUseDesc = prometheus.NewDesc("redrive_limit_in_use",
		"How many jobs under the concurrency limit run now, all its groups together."+storeWide, []string{"limit"}, nil)
	limitBusiestDesc = prometheus.NewDesc("redrive_limit_busiest",
		"The most jobs running now in one group of the concurrency limit (at most its max, unless the max was lowered while they ran)."+storeWide,
		[]string{"limit"}, nil)
	limitGroupsDesc = prometheus.NewDesc("redrive_limit_groups",
		"How many groups of the concurrency limit have a running job."+storeWide, []string{"limit"}, nil)
	limitWaitingDesc = prometheus.NewDesc("redrive_limit_waiting",
		"How many jobs under the concurrency limit are due and not running: waiting on a slot or its rate, or not fetched yet."+storeWide,
		[]string{"limit"}, nil)
	limitHeldDesc = prometheus.NewDesc("redrive_limit_held_groups",
		"How many groups of the limit a 429 (or 503) with Retry-After holds now, fleet-wide, until the Retry-After has passed (limits that hold on Retry-After)."+storeWide,
		[]string{"limit"}, nil)
	limitRateDesc = prometheus.NewDesc("redrive_limit_rate",
		"The limit's rate: how many jobs of one group may start per second, fleet-wide (absent when the limit has none)."+storeWide, []string{"limit"}, nil)
	limitBurstDesc = prometheus.NewDesc("redrive_limit_burst",
		"How many jobs of one group of the limit may start at once under its rate."+storeWide, []string{"limit"}, nil)
	limitThrottledDesc = prometheus.NewDesc("redrive_limit_throttled_total",
		"Job starts the limit delayed: jobs leased after their due time because reason (the limit's rate) held their group then."+storeWide,
		[]string{"limit", "reason"}, nil)
)

func describeLimits(ch chan<- *prometheus.Desc) {
	ch <- limitRateDesc
	ch <- limitBurstDesc
	ch <- limitThrottledDesc
	ch <- limitMaxDesc
	ch <- limitInUseDesc
	ch <- limitBusiestDesc
	ch <- limitGroupsDesc
	ch <- limitWaitingDesc
	ch <- limitHeldDesc
}

// collectLimits reads the concurrency limits from the store.
func (c *Collector) collectLimits(ctx context.Context, ch chan<- prometheus.Metric) {
	list, err := c.client.LimitStates(ctx)
	if err != nil {
		c.log.Warn("metrics: reading the concurrency limits failed", "error", err)
		return
	}
	for _, l := range list {
		name := nonEmpty(l.Name)
		ch <- prometheus.MustNewConstMetric(limitMaxDesc, prometheus.GaugeValue, float64(l.Max), name)
		ch <- prometheus.MustNewConstMetric(limitInUseDesc, prometheus.GaugeValue, float64(l.InUse), name)
		ch <- prometheus.MustNewConstMetric(limitBusiestDesc, prometheus.GaugeValue, float64(l.Busiest), name)
		ch <- prometheus.MustNewConstMetric(limitGroupsDesc, prometheus.GaugeValue, float64(l.Groups), name)
		ch <- prometheus.MustNewConstMetric(limitWaitingDesc, prometheus.GaugeValue, float64(l.Waiting), name)
		ch <- prometheus.MustNewConstMetric(limitHeldDesc, prometheus.GaugeValue, float64(l.HeldGroups), name)
		if l.Rate != nil && l.Rate.N > 0 {
			ch <- prometheus.MustNewConstMetric(limitRateDesc, prometheus.GaugeValue, float64(l.Rate.N)/l.Rate.Per.Seconds(), name)
			ch <- prometheus.MustNewConstMetric(limitBurstDesc, prometheus.GaugeValue, float64(l.Rate.Burst), name)
		}
		ch <- prometheus.MustNewConstMetric(limitThrottledDesc, prometheus.CounterValue, float64(l.Throttled), name, "rate")
	}
}
