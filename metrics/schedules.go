package metrics

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
)

// The periodic schedules kept in the store (store-wide), which the
// Collector reads at every scrape:
//
//	redrive_schedule_paused{schedule}                      1 when paused
//	redrive_schedule_last_run_timestamp_seconds{schedule}  the latest occurrence enqueued (absent before the first)
//	redrive_schedule_next_run_timestamp_seconds{schedule}  the next occurrence (absent while paused)
//	redrive_schedule_overdue_seconds{schedule}             how long the next occurrence has been due and not enqueued
//
// An overdue schedule has no process enqueuing it: no worker declares it
// any more, or none runs.
var (
	schedulePausedDesc = prometheus.NewDesc("redrive_schedule_paused",
		"1 when the periodic schedule is paused (nothing is enqueued for it), else 0."+storeWide, []string{"schedule"}, nil)
	scheduleLastDesc = prometheus.NewDesc("redrive_schedule_last_run_timestamp_seconds",
		"The latest occurrence of the periodic schedule that was enqueued (Unix time). Absent before the first."+storeWide,
		[]string{"schedule"}, nil)
	scheduleNextDesc = prometheus.NewDesc("redrive_schedule_next_run_timestamp_seconds",
		"The next occurrence of the periodic schedule (Unix time). Absent while paused."+storeWide, []string{"schedule"}, nil)
	scheduleOverdueDesc = prometheus.NewDesc("redrive_schedule_overdue_seconds",
		"How long the next occurrence of the periodic schedule has been due without being enqueued: above a few seconds, no process enqueues it. 0 when not due yet or paused."+storeWide,
		[]string{"schedule"}, nil)
)

func describeSchedules(ch chan<- *prometheus.Desc) {
	ch <- schedulePausedDesc
	ch <- scheduleLastDesc
	ch <- scheduleNextDesc
	ch <- scheduleOverdueDesc
}

// collectSchedules reads the schedules from the store.
func (c *Collector) collectSchedules(ctx context.Context, ch chan<- prometheus.Metric) {
	list, err := c.client.Schedules(ctx)
	if err != nil {
		c.log.Warn("metrics: reading the schedules failed", "error", err)
		return
	}
	now := c.now()
	for _, s := range list {
		name := nonEmpty(s.Name)
		ch <- prometheus.MustNewConstMetric(schedulePausedDesc, prometheus.GaugeValue, b2f(s.Paused), name)
		if !s.LastRun.IsZero() {
			ch <- prometheus.MustNewConstMetric(scheduleLastDesc, prometheus.GaugeValue, float64(s.LastRun.UnixMilli())/1000, name)
		}
		overdue := 0.0
		if !s.NextRun.IsZero() {
			ch <- prometheus.MustNewConstMetric(scheduleNextDesc, prometheus.GaugeValue, float64(s.NextRun.UnixMilli())/1000, name)
			if d := now.Sub(s.NextRun); d > 0 {
				overdue = d.Seconds()
			}
		}
		ch <- prometheus.MustNewConstMetric(scheduleOverdueDesc, prometheus.GaugeValue, overdue, name)
	}
}
