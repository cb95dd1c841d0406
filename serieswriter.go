package redrive

import (
	"context"
	"time"
)

// seriesWriter records the snapshot of every minute of the statistics
// (see Client.Series) while this worker leads maintenance, and deletes
// the snapshots older than StatsRetention. It wakes at each minute
// boundary of the statistics clock (and at least every
// statsCheckInterval); a minute it already recorded costs nothing, so it
// never touches the store more than once a minute.
type seriesWriter struct {
	loop
	w *Worker
}

// start records snapshots until ctx ends or stop.
func (s *seriesWriter) start(ctx context.Context) { s.startWith(ctx, s.run) }

// run is the loop: a round looks at the statistics clock, records its
// minute unless already done (when leading), and sends the test signal.
func (s *seriesWriter) run(ctx context.Context) {
	w := s.w
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var last time.Time // the minute this worker last recorded
	failing := false
	for ctx.Err() == nil {
		if w.leading() {
			m := w.client.statsNow().Truncate(time.Minute)
			if !m.Equal(last) {
				if err := w.snapshot(ctx, m); err != nil {
					if ctx.Err() != nil {
						return
					}
					if !failing {
						w.log.Error("statistics snapshot failed; retrying every second", "minute", m, "error", err)
					}
					failing = true
				} else {
					if failing {
						w.log.Info("statistics snapshots recorded again", "minute", m)
					}
					failing = false
					last = m
				}
			}
		}
		s.signal.send()
		now := w.client.statsNow()
		wait := min(now.Truncate(time.Minute).Add(time.Minute).Sub(now), statsCheckInterval)
		timer.Reset(max(wait, time.Millisecond))
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
	}
}

// snapshot records the minute m and applies the retention.
func (w *Worker) snapshot(ctx context.Context, m time.Time) error {
	if err := w.store.Snapshot(ctx, m); err != nil {
		return err
	}
	if n, err := w.store.DeleteSnapshots(ctx, m.Add(-w.opts.StatsRetention)); err != nil {
		if ctx.Err() == nil {
			w.log.Error("statistics retention failed", "error", err)
		}
	} else if n > 0 {
		w.log.Debug("statistics retention", "deleted_minutes", n)
	}
	return nil
}
