package schedule

import "time"

// Missed is what happens to the occurrences missed while no process
// enqueued them for longer than the grace period.
type Missed string

// The missed-run policies.
const (
	// Skip runs none of them: the schedule goes on from the next
	// occurrence.
	Skip Missed = "skip"
	// RunOnce runs one job for the latest of them.
	RunOnce Missed = "run_once"
)

// Plan is what a process enqueues for a schedule at a moment.
type Plan struct {
	// Run are the occurrences to enqueue, oldest first.
	Run []time.Time
	// Cursor is the schedule's new cursor: every occurrence at or before
	// it is decided (enqueued, or skipped by the missed-run policy).
	Cursor time.Time
	// Skipped reports that missed occurrences were skipped (Skip), or
	// left out but the latest (RunOnce).
	Skipped bool
	// Next is the first occurrence after Cursor (zero if none).
	Next time.Time
}

// lookbacks are the windows searched, shortest first, for the latest
// missed occurrence, so that a schedule whose cursor is months behind is
// not walked occurrence by occurrence.
var lookbacks = []time.Duration{time.Hour, 25 * time.Hour, 32 * 24 * time.Hour, 367 * 24 * time.Hour, 5 * 367 * 24 * time.Hour}

// Plan computes what to enqueue at now, for a schedule whose occurrences
// up to cursor are decided. Occurrences in (cursor, now] no older than
// grace (at or after now-grace) are all due, oldest first; older ones
// were missed and follow the policy: Skip runs none of them, RunOnce the
// latest. At most limit occurrences are returned (limit < 1 means 1); the
// cursor then stops at the last one, and the next call goes on from it.
// Times are in whole milliseconds.
func (s *Schedule) Plan(cursor, now time.Time, grace time.Duration, missed Missed, limit int) Plan {
	if limit < 1 {
		limit = 1
	}
	now = now.Truncate(time.Millisecond)
	cursor = cursor.Truncate(time.Millisecond)
	horizon := now.Add(-grace).Truncate(time.Millisecond) // occurrences before it were missed
	p := Plan{Cursor: cursor}
	from := cursor
	if cursor.Before(horizon) {
		// The occurrences in (cursor, horizon), if any, were missed: the
		// cursor moves past them. Without any, it stays (nothing to
		// write).
		if o := s.Next(cursor); !o.IsZero() && o.Before(horizon) {
			p.Skipped = true
			if missed == RunOnce {
				p.Run = append(p.Run, s.latestBefore(cursor, horizon))
			}
			from = horizon.Add(-time.Millisecond)
			p.Cursor = from
		}
	}
	for o := s.Next(from); !o.IsZero() && !o.After(now) && len(p.Run) < limit; o = s.Next(o) {
		p.Run = append(p.Run, o)
		p.Cursor = o
	}
	p.Next = s.Next(p.Cursor)
	return p
}

// latestBefore returns the latest occurrence in (after, before), which
// the caller knows exists.
func (s *Schedule) latestBefore(after, before time.Time) time.Time {
	for _, back := range lookbacks {
		from := before.Add(-back)
		if from.Before(after) {
			break
		}
		if l := s.lastIn(from, before); !l.IsZero() {
			return l
		}
	}
	return s.lastIn(after, before)
}

// lastIn returns the last occurrence in (from, before), or zero.
func (s *Schedule) lastIn(from, before time.Time) time.Time {
	if s.every > 0 {
		// before-1ms rounded down to a multiple of the interval.
		last := s.Next(before.Add(-time.Millisecond - s.every))
		if last.After(from) && last.Before(before) {
			return last
		}
		return time.Time{}
	}
	var last time.Time
	for o := s.Next(from); !o.IsZero() && o.Before(before); o = s.Next(o) {
		last = o
	}
	return last
}
