package redrive

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redrivehq/redrive/store"
)

// The statistics history.
//
// The stores keep running totals of what happens (Stats.Counters). Once a
// minute, the worker that runs maintenance (one process at a time on a
// store shared by several) records a snapshot of those totals under the
// minute; a snapshot of a minute already recorded, by another process or
// before a restart, is ignored, so the history is the same whichever
// process took it and survives restarts. What happened during minute M is
// the snapshot of M+1 minus the snapshot of M. Snapshots older than
// WorkerOptions.StatsRetention are deleted.

// DefaultStatsRetention is how long per-minute statistics snapshots are
// kept when WorkerOptions.StatsRetention is zero: seven days.
const DefaultStatsRetention = 7 * 24 * time.Hour

// statsCheckInterval bounds how long the snapshot loop sleeps: it wakes
// at each minute boundary, and at least this often, so that a jump of the
// wall clock (or a change of leader) delays a snapshot by at most this.
const statsCheckInterval = time.Second

// Series is the per-minute history of the statistics, oldest minute first.
type Series struct {
	// Since is the first minute the series covers (the requested time,
	// truncated to the minute, in UTC).
	Since time.Time `json:"since"`
	// Points are the minutes with data, oldest first. A minute for which
	// no snapshot was taken (no worker was running) is absent, never
	// reported as zero nor folded into the next minute. The last point
	// may be Partial.
	Points []SeriesPoint `json:"points"`
}

// SeriesPoint is what happened during one minute.
type SeriesPoint struct {
	// At is the start of the minute, in UTC.
	At time.Time `json:"at"`
	// Partial marks the live point: what happened since the last snapshot
	// (the current minute, or the one before when its end has not been
	// recorded yet). Its counts still grow.
	Partial bool `json:"partial"`
	// Counts are the totals of the minute over the queues selected.
	Counts SeriesCounts `json:"counts"`
	// Failed counts failed attempts by failure class ("transient",
	// "rate_limited", "permanent", "needs_auth", "unknown"); classes with
	// no failure in the minute are absent.
	Failed map[string]int64 `json:"failed"`
	// DeadByClass counts the jobs moved to the DLQ by the class of their
	// last failure; classes with none are absent.
	DeadByClass map[string]int64 `json:"dead_by_class"`
	// Limits is, in the series of every queue only, the use of each
	// concurrency limit that had a running job at the start of the minute,
	// by limit name; a limit absent had none running. It is sampled once
	// a minute, with the snapshot: a point's use is the use at its At.
	Limits map[string]store.LimitSample `json:"limits,omitempty"`
}

// SeriesCounts are the totals of one minute.
type SeriesCounts struct {
	// Succeeded counts the attempts that completed their job.
	Succeeded int64 `json:"succeeded"`
	// Retried counts the retries scheduled.
	Retried int64 `json:"retried"`
	// Dead counts the jobs moved to the DLQ.
	Dead int64 `json:"dead"`
	// Attempts counts the attempts started.
	Attempts int64 `json:"attempts"`
	// Enqueued counts the jobs created.
	Enqueued int64 `json:"enqueued"`
	// Redriven counts the jobs redriven from the DLQ.
	Redriven int64 `json:"redriven"`
}

// statsNow is the clock of the statistics history: the minutes of the
// snapshots and of the live point.
func (c *Client) statsNow() time.Time {
	if c.statsClock != nil {
		return c.statsClock()
	}
	return c.now()
}

// Series returns the per-minute statistics from the minute holding since
// on (a zero since: the whole history kept), for one queue, or summed over
// every queue when queue is "". It reads the snapshots the worker records
// once a minute (see WorkerOptions.StatsRetention) and appends a partial
// point for the minute going on: the current counters minus the last
// snapshot. A counter that went down between two snapshots (its rows
// were deleted) counts as zero, never as a negative number.
func (c *Client) Series(ctx context.Context, since time.Time, queue string) (Series, error) {
	from := since.Truncate(time.Minute)
	snaps, err := c.store.Snapshots(ctx, from)
	if err != nil {
		return Series{}, fmt.Errorf("redrive: series: %w", err)
	}
	// Read after the snapshots, the counters are never older than the last
	// of them.
	st, err := c.store.Stats(ctx)
	if err != nil {
		return Series{}, fmt.Errorf("redrive: series: %w", err)
	}
	return Series{Since: from.UTC(), Points: seriesPoints(snaps, st.Counters, c.statsNow(), queue)}, nil
}

// seriesPoints computes the points of a series from snapshots (oldest
// first), the current counters (nil: no live point) and the current time:
// one point per pair of snapshots one minute apart, and a partial point
// from the last snapshot to the current counters when that snapshot is of
// the current minute or the one before (an older one means the history
// stopped: the difference would fold many minutes into one).
func seriesPoints(snaps []store.Snapshot, live map[string]map[string]int64, now time.Time, queue string) []SeriesPoint {
	points := []SeriesPoint{}
	for i := 0; i+1 < len(snaps); i++ {
		a, b := snaps[i], snaps[i+1]
		if !b.At.Equal(a.At.Add(time.Minute)) {
			continue // the minutes from a to b are missing
		}
		p := delta(a.At, a.Counters, b.Counters, queue, false)
		if queue == "" {
			p.Limits = a.Limits
		}
		points = append(points, p)
	}
	if live != nil && len(snaps) > 0 {
		last := snaps[len(snaps)-1]
		if !last.At.Before(now.Truncate(time.Minute).Add(-time.Minute)) {
			p := delta(last.At, last.Counters, live, queue, true)
			if queue == "" {
				p.Limits = last.Limits
			}
			points = append(points, p)
		}
	}
	return points
}

// delta is the point of the minute at: the counters of to minus those of
// from, counter by counter, a decrease counting as zero.
func delta(at time.Time, from, to map[string]map[string]int64, queue string, partial bool) SeriesPoint {
	p := SeriesPoint{At: at.UTC(), Partial: partial, Failed: map[string]int64{}, DeadByClass: map[string]int64{}}
	for q, names := range to {
		if queue != "" && q != queue {
			continue
		}
		for name, n := range names {
			d := n - from[q][name]
			if d <= 0 {
				continue
			}
			stat, class, _ := strings.Cut(name, ".")
			switch stat {
			case store.StatSucceeded:
				p.Counts.Succeeded += d
			case store.StatRetried:
				p.Counts.Retried += d
			case store.StatAttempts:
				p.Counts.Attempts += d
			case store.StatEnqueued:
				p.Counts.Enqueued += d
			case store.StatRedriven:
				p.Counts.Redriven += d
			case store.StatDead:
				p.Counts.Dead += d
				if class != "" {
					p.DeadByClass[class] += d
				}
			case store.StatFailed:
				if class != "" {
					p.Failed[class] += d
				}
			}
		}
	}
	return p
}
