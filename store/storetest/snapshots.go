package storetest

import (
	"fmt"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/store"
)

// minute returns the whole minute n minutes after the one holding base.
func minute(n int) time.Time { return base.Truncate(time.Minute).Add(time.Duration(n) * time.Minute) }

// snapshots returns Snapshots(since) and fails on an error.
func (x *h) snapshots(since time.Time) []store.Snapshot {
	x.t.Helper()
	got, err := x.s.Snapshots(x.ctx, since)
	if err != nil {
		x.t.Fatalf("Snapshots(%s): %v", fmtTime(since), err)
	}
	return got
}

// snapshot takes the snapshot of a minute and fails on an error.
func (x *h) snapshot(at time.Time) {
	x.t.Helper()
	if err := x.s.Snapshot(x.ctx, at); err != nil {
		x.t.Fatalf("Snapshot(%s): %v", fmtTime(at), err)
	}
}

// fmtSnapshots formats snapshots for comparison and messages: minutes in
// UTC, zero counters left out.
func fmtSnapshots(s []store.Snapshot) string {
	var b strings.Builder
	for _, sn := range s {
		fmt.Fprintf(&b, "%s %v\n", fmtTime(sn.At), normCounters(sn.Counters))
	}
	return b.String()
}

// checkSnapshots compares snapshots with want.
func (x *h) checkSnapshots(what string, got, want []store.Snapshot) {
	x.t.Helper()
	if g, w := fmtSnapshots(got), fmtSnapshots(want); g != w {
		x.t.Errorf("%s:\n%s\nwant\n%s", what, g, w)
	}
}

// testSnapshots: a snapshot records the counters as Stats sums them (over
// many outcomes, so over every shard a store may split them into), empty
// ones included; the first snapshot of a minute wins; Snapshots selects
// from a minute on, oldest first, whatever the location of the times;
// DeleteSnapshots deletes by minute and counts minutes.
func testSnapshots(x *h) {
	if got := x.snapshots(time.Time{}); len(got) != 0 {
		x.t.Fatalf("Snapshots of an empty store = %s, want none", fmtSnapshots(got))
	}
	// A minute with no counters at all is recorded.
	x.snapshot(minute(0))

	// Many outcomes, each its own Finish, so that a sharded counter is
	// spread over its shards.
	jobs := x.leaseNew(at(0), "w", repeatJob(store.NewJob{Queue: "sa", Kind: "k"}, 40)...)
	for i, j := range jobs {
		o := completeOf(j, at(time.Second))
		o.Counters = []store.Counter{{Queue: "sa", Name: store.StatSucceeded, N: 1}}
		if i%4 == 0 {
			o = buryOf(j, at(time.Second), failure.Permanent, "http_404", "f", "HTTP 404")
			o.Counters = []store.Counter{{Queue: "sa", Name: store.StatFailed, Class: "permanent", N: 1},
				{Queue: "sa", Name: store.StatDead, Class: "permanent", N: 1}}
		}
		x.finish(o)
	}
	x.enqueue(at(time.Second), store.NewJob{Queue: "sb", Kind: "k"})
	first := x.stats().Counters
	want1 := map[string]map[string]int64{
		"sa": {"enqueued": 40, "attempts": 40, "succeeded": 30, "failed.permanent": 10, "dead.permanent": 10},
		"sb": {"enqueued": 1},
	}
	if got := normCounters(first); !reflect.DeepEqual(got, want1) {
		x.t.Fatalf("Stats.Counters = %v, want %v", got, want1)
	}
	// The minute in another location is the same instant.
	x.snapshot(minute(1).In(time.FixedZone("UTC+5:30", 5*3600+1800)))

	// A second snapshot of the same minute, after more work, changes
	// nothing; neither does one of an earlier minute already taken.
	x.enqueue(at(2*time.Second), store.NewJob{Queue: "sa", Kind: "k"}, store.NewJob{Queue: "sc", Kind: "k"})
	x.snapshot(minute(1))
	x.snapshot(minute(0))
	// A gap: minute 2 is never taken.
	x.snapshot(minute(3))

	want := []store.Snapshot{
		{At: minute(0), Counters: map[string]map[string]int64{}},
		{At: minute(1), Counters: want1},
		{At: minute(3), Counters: map[string]map[string]int64{
			"sa": {"enqueued": 41, "attempts": 40, "succeeded": 30, "failed.permanent": 10, "dead.permanent": 10},
			"sb": {"enqueued": 1},
			"sc": {"enqueued": 1},
		}},
	}
	got := x.snapshots(time.Time{})
	x.checkSnapshots("Snapshots(zero time)", got, want)
	for _, s := range got {
		if s.Counters == nil {
			x.t.Errorf("snapshot of %s has nil Counters, want an empty map", fmtTime(s.At))
		}
	}
	x.checkSnapshots("Snapshots(minute 0)", x.snapshots(minute(0)), want)
	x.checkSnapshots("Snapshots(minute 1)", x.snapshots(minute(1)), want[1:])
	x.checkSnapshots("Snapshots(minute 1 in UTC-7)", x.snapshots(minute(1).In(time.FixedZone("UTC-7", -7*3600))), want[1:])
	x.checkSnapshots("Snapshots(minute 1 + 1µs)", x.snapshots(minute(1).Add(time.Microsecond)), want[2:])
	x.checkSnapshots("Snapshots(minute 2)", x.snapshots(minute(2)), want[2:])
	x.checkSnapshots("Snapshots(minute 4)", x.snapshots(minute(4)), nil)

	// Times that are not whole minutes are refused.
	for _, bad := range []time.Time{minute(5).Add(time.Second), minute(5).Add(time.Microsecond), {}} {
		err := x.s.Snapshot(x.ctx, bad)
		x.checkErr("Snapshot("+fmtTime(bad)+")", err, store.ErrInvalid)
	}
	x.checkSnapshots("Snapshots after refused snapshots", x.snapshots(time.Time{}), want)

	// Retention.
	if n, err := x.s.DeleteSnapshots(x.ctx, minute(0)); err != nil || n != 0 {
		x.t.Errorf("DeleteSnapshots(minute 0) = %d, %v; want 0, nil", n, err)
	}
	if n, err := x.s.DeleteSnapshots(x.ctx, minute(3)); err != nil || n != 2 {
		x.t.Errorf("DeleteSnapshots(minute 3) = %d, %v; want 2, nil", n, err)
	}
	x.checkSnapshots("Snapshots after DeleteSnapshots(minute 3)", x.snapshots(time.Time{}), want[2:])
	if n, err := x.s.DeleteSnapshots(x.ctx, minute(3)); err != nil || n != 0 {
		x.t.Errorf("DeleteSnapshots(minute 3) again = %d, %v; want 0, nil", n, err)
	}
	// A deleted minute may be taken again.
	x.snapshot(minute(1))
	if got := x.snapshots(time.Time{}); len(got) != 2 || !sameTime(got[0].At, minute(1)) || !sameTime(got[1].At, minute(3)) {
		x.t.Errorf("Snapshots after retaking minute 1 = %s, want minutes 1 and 3", fmtSnapshots(got))
	}
}

// testSnapshotsMany: DeleteSnapshots removes any number of minutes, and
// Snapshots returns them all in order.
func testSnapshotsMany(x *h) {
	x.enqueue(at(0), store.NewJob{Queue: "q", Kind: "k"})
	const n = 250
	for i := range n {
		x.snapshot(minute(i))
	}
	got := x.snapshots(time.Time{})
	if len(got) != n {
		x.t.Fatalf("Snapshots returned %d minutes, want %d", len(got), n)
	}
	for i, s := range got {
		if !sameTime(s.At, minute(i)) || s.Counters["q"]["enqueued"] != 1 {
			x.t.Fatalf("snapshot %d = %s %v, want %s with enqueued 1", i, fmtTime(s.At), s.Counters, fmtTime(minute(i)))
		}
	}
	if d, err := x.s.DeleteSnapshots(x.ctx, minute(n-1)); err != nil || d != n-1 {
		x.t.Fatalf("DeleteSnapshots(minute %d) = %d, %v; want %d, nil", n-1, d, err, n-1)
	}
	if got := x.snapshots(time.Time{}); len(got) != 1 || !sameTime(got[0].At, minute(n-1)) {
		x.t.Errorf("Snapshots after DeleteSnapshots = %s, want minute %d only", fmtSnapshots(got), n-1)
	}
}

// testSnapshotsConcurrent: processes snapshotting the same minutes at once
// while outcomes are applied record each minute once (never a sum of two
// snapshots), and a later minute never shows less than an earlier one.
func testSnapshotsConcurrent(x *h) {
	const jobs, minutes, takers = 60, 6, 4
	leased := x.leaseNew(at(0), "w", repeatJob(store.NewJob{Queue: "q", Kind: "k"}, jobs)...)
	var wg sync.WaitGroup
	errs := make(chan error, jobs+minutes*takers)
	wg.Go(func() {
		for _, j := range leased {
			o := completeOf(j, at(time.Second))
			o.Counters = []store.Counter{{Queue: "q", Name: store.StatSucceeded, N: 1}}
			if _, err := x.s.Finish(x.ctx, []store.Outcome{o}); err != nil {
				errs <- fmt.Errorf("finish: %w", err)
			}
		}
	})
	for range takers {
		wg.Go(func() {
			for m := range minutes {
				if err := x.s.Snapshot(x.ctx, minute(m)); err != nil {
					errs <- fmt.Errorf("snapshot of minute %d: %w", m, err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		x.t.Error(err)
	}
	got := x.snapshots(time.Time{})
	if len(got) != minutes {
		x.t.Fatalf("Snapshots = %s, want %d minutes", fmtSnapshots(got), minutes)
	}
	for i, s := range got {
		if !sameTime(s.At, minute(i)) {
			x.t.Errorf("snapshot %d is of %s, want %s", i, fmtTime(s.At), fmtTime(minute(i)))
		}
		c := normCounters(s.Counters)["q"]
		if c["enqueued"] != jobs || c["attempts"] != jobs || c["succeeded"] < 0 || c["succeeded"] > jobs || len(c) > 3 {
			x.t.Errorf("snapshot of %s = %v, want enqueued %d, attempts %d, succeeded 0..%d", fmtTime(s.At), c, jobs, jobs, jobs)
		}
		// Minutes are taken in order by each taker, and outcomes only add:
		// a later minute never shows fewer successes.
		if i > 0 && c["succeeded"] < normCounters(got[i-1].Counters)["q"]["succeeded"] {
			x.t.Errorf("snapshot of %s shows fewer successes than the one before: %s", fmtTime(s.At), fmtSnapshots(got))
		}
	}
	if n := x.counter("q", store.StatSucceeded); n != jobs {
		x.t.Errorf("succeeded = %d, want %d", n, jobs)
	}
}

// repeatJob returns n copies of j.
func repeatJob(j store.NewJob, n int) []store.NewJob {
	out := make([]store.NewJob, n)
	for i := range out {
		out[i] = j
	}
	return out
}

// snapshotCallsAfterClose are the snapshot calls testClose checks.
func snapshotCallsAfterClose(x *h) map[string]func() error {
	return map[string]func() error{
		"Snapshot":  func() error { return x.s.Snapshot(x.ctx, minute(0)) },
		"Snapshots": func() error { _, err := x.s.Snapshots(x.ctx, time.Time{}); return err },
		"DeleteSnapshots": func() error {
			_, err := x.s.DeleteSnapshots(x.ctx, minute(1))
			return err
		},
	}
}
