package redrive

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redrivehq/redrive/internal/sqlitetest"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/sqlite"
)

// t0 is a whole minute; mins(n) is n minutes after it.
var t0 = time.Date(2026, 3, 4, 5, 6, 0, 0, time.UTC)

func mins(n int) time.Time { return t0.Add(time.Duration(n) * time.Minute) }

type counters = map[string]map[string]int64

func snap(n int, c counters) store.Snapshot { return store.Snapshot{At: mins(n), Counters: c} }

// pt builds an expected point.
func pt(n int, partial bool, c SeriesCounts, failed, dead map[string]int64) SeriesPoint {
	if failed == nil {
		failed = map[string]int64{}
	}
	if dead == nil {
		dead = map[string]int64{}
	}
	return SeriesPoint{At: mins(n), Partial: partial, Counts: c, Failed: failed, DeadByClass: dead}
}

func TestSeriesPoints(t *testing.T) {
	a := counters{
		"q1": {"enqueued": 10, "attempts": 8, "succeeded": 5, "failed.transient": 3, "retried": 3},
		"q2": {"enqueued": 4, "attempts": 4, "failed.permanent": 2, "dead.permanent": 2, "succeeded": 2},
	}
	b := counters{
		"q1": {"enqueued": 15, "attempts": 14, "succeeded": 9, "failed.transient": 5, "retried": 4, "dead.transient": 1,
			"succeeded_after_retry": 2, "snoozed": 7},
		"q2": {"enqueued": 4, "attempts": 6, "failed.permanent": 3, "dead.permanent": 3, "succeeded": 3, "redriven": 1,
			"failed.needs_auth": 1, "dead.needs_auth": 1},
	}
	// ab is b minus a, over both queues.
	ab := pt(0, false, SeriesCounts{Succeeded: 5, Retried: 1, Dead: 3, Attempts: 8, Enqueued: 5, Redriven: 1},
		map[string]int64{"transient": 2, "permanent": 1, "needs_auth": 1}, map[string]int64{"transient": 1, "permanent": 1, "needs_auth": 1})
	ab1 := pt(0, false, SeriesCounts{Succeeded: 4, Retried: 1, Dead: 1, Attempts: 6, Enqueued: 5},
		map[string]int64{"transient": 2}, map[string]int64{"transient": 1})
	ab2 := pt(0, false, SeriesCounts{Succeeded: 1, Dead: 2, Attempts: 2, Redriven: 1},
		map[string]int64{"permanent": 1, "needs_auth": 1}, map[string]int64{"permanent": 1, "needs_auth": 1})
	at := func(p SeriesPoint, n int, partial bool) SeriesPoint {
		p.At, p.Partial = mins(n), partial
		return p
	}
	zero := func(n int, partial bool) SeriesPoint { return pt(n, partial, SeriesCounts{}, nil, nil) }

	cases := []struct {
		name  string
		snaps []store.Snapshot
		live  counters
		now   time.Time
		queue string
		want  []SeriesPoint
	}{
		{name: "no snapshots", live: b, now: mins(0), want: []SeriesPoint{}},
		{name: "one snapshot, no live counters", snaps: []store.Snapshot{snap(0, a)}, now: mins(0), want: []SeriesPoint{}},
		{name: "live point of the current minute", snaps: []store.Snapshot{snap(0, a)}, live: b, now: mins(0).Add(30 * time.Second),
			want: []SeriesPoint{at(ab, 0, true)}},
		{name: "live point while the current minute is not recorded yet", snaps: []store.Snapshot{snap(0, a)}, live: b,
			now: mins(1).Add(time.Second), want: []SeriesPoint{at(ab, 0, true)}},
		{name: "no live point when the history stopped", snaps: []store.Snapshot{snap(0, a)}, live: b,
			now: mins(2), want: []SeriesPoint{}},
		{name: "consecutive minutes and a live point", snaps: []store.Snapshot{snap(0, a), snap(1, b)}, live: b, now: mins(1),
			want: []SeriesPoint{ab, zero(1, true)}},
		{name: "summed over queues", snaps: []store.Snapshot{snap(0, a), snap(1, b)}, now: mins(1),
			want: []SeriesPoint{ab}},
		{name: "queue q1", snaps: []store.Snapshot{snap(0, a), snap(1, b)}, now: mins(1), queue: "q1", want: []SeriesPoint{ab1}},
		{name: "queue q2", snaps: []store.Snapshot{snap(0, a), snap(1, b)}, now: mins(1), queue: "q2", want: []SeriesPoint{ab2}},
		{name: "unknown queue", snaps: []store.Snapshot{snap(0, a), snap(1, b)}, live: b, now: mins(1), queue: "nope",
			want: []SeriesPoint{zero(0, false), zero(1, true)}},
		{name: "a gap is missing minutes, not a spike", snaps: []store.Snapshot{snap(0, a), snap(1, a), snap(5, b), snap(6, b)}, now: mins(6),
			want: []SeriesPoint{zero(0, false), zero(5, false)}},
		{name: "a reset counts as zero", snaps: []store.Snapshot{snap(0, b), snap(1, a)}, now: mins(1),
			want: []SeriesPoint{zero(0, false)}},
		{name: "a counter reset then growing again", snaps: []store.Snapshot{
			snap(0, counters{"q": {"succeeded": 100, "enqueued": 50}}),
			snap(1, counters{"q": {"succeeded": 3}}),
			snap(2, counters{"q": {"succeeded": 7, "enqueued": 2}}),
		}, now: mins(2), want: []SeriesPoint{zero(0, false), pt(1, false, SeriesCounts{Succeeded: 4, Enqueued: 2}, nil, nil)}},
		{name: "a queue deleted while another grows", snaps: []store.Snapshot{
			snap(0, counters{"gone": {"succeeded": 9}, "q": {"succeeded": 1}}),
			snap(1, counters{"q": {"succeeded": 3}}),
		}, now: mins(1), want: []SeriesPoint{pt(0, false, SeriesCounts{Succeeded: 2}, nil, nil)}},
		{name: "an empty first snapshot", snaps: []store.Snapshot{snap(0, counters{}), snap(1, a)}, now: mins(1), queue: "q2",
			want: []SeriesPoint{pt(0, false, SeriesCounts{Succeeded: 2, Dead: 2, Attempts: 4, Enqueued: 4},
				map[string]int64{"permanent": 2}, map[string]int64{"permanent": 2})}},
		{name: "live point after a snapshot from a clock ahead", snaps: []store.Snapshot{snap(0, a), snap(1, a)}, live: b,
			now: mins(0).Add(59 * time.Second), want: []SeriesPoint{zero(0, false), at(ab, 1, true)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := seriesPoints(c.snaps, c.live, c.now, c.queue)
			if !reflect.DeepEqual(got, c.want) {
				g, _ := json.MarshalIndent(got, "", " ")
				w, _ := json.MarshalIndent(c.want, "", " ")
				t.Errorf("got %s\nwant %s", g, w)
			}
		})
	}
}

// TestSeriesPointJSON pins the JSON shape the REST API and the dashboard
// rely on.
func TestSeriesPointJSON(t *testing.T) {
	p := pt(0, true, SeriesCounts{Succeeded: 1, Retried: 2, Dead: 3, Attempts: 4, Enqueued: 5, Redriven: 6},
		map[string]int64{"transient": 2}, map[string]int64{"permanent": 3})
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"at":"2026-03-04T05:06:00Z","partial":true,` +
		`"counts":{"succeeded":1,"retried":2,"dead":3,"attempts":4,"enqueued":5,"redriven":6},` +
		`"failed":{"transient":2},"dead_by_class":{"permanent":3}}`
	if string(b) != want {
		t.Errorf("JSON %s\nwant %s", b, want)
	}
}

// fakeClock is a clock the test sets.
type fakeClock struct{ t atomic.Int64 }

func (c *fakeClock) now() time.Time  { return time.Unix(0, c.t.Load()).UTC() }
func (c *fakeClock) set(t time.Time) { c.t.Store(t.UnixNano()) }

// TestWorkerSnapshots: a worker records the minute it starts in, then each
// minute boundary its clock crosses, and deletes snapshots older than
// StatsRetention.
func TestWorkerSnapshots(t *testing.T) {
	st, err := sqlite.Open(t.Context(), sqlitetest.Path(t), sqlite.Options{Synchronous: "normal", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	c := NewClient(st, ClientOptions{Logger: slog.New(slog.DiscardHandler)})
	clock := &fakeClock{}
	clock.set(mins(0).Add(40 * time.Second))
	SetStatsClock(c, clock.now)
	w := NewWorker(c, WorkerOptions{StatsRetention: 3 * time.Minute})
	if w.opts.StatsRetention != 3*time.Minute {
		t.Fatalf("StatsRetention = %s", w.opts.StatsRetention)
	}
	if d := NewWorker(c, WorkerOptions{}).opts.StatsRetention; d != 7*24*time.Hour {
		t.Errorf("default StatsRetention = %s, want 168h", d)
	}
	sig := newTestSignal()
	w.seriesWriter.signal = sig
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()

	minutes := func() []time.Time {
		s, err := st.Snapshots(context.Background(), time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		out := []time.Time{}
		for _, sn := range s {
			out = append(out, sn.At.UTC())
		}
		return out
	}
	waitMinutes := func(want ...time.Time) {
		t.Helper()
		waitRounds(t, sig, fmt.Sprintf("snapshots of %v", want), func() bool { return reflect.DeepEqual(minutes(), want) })
	}
	waitMinutes(mins(0))
	clock.set(mins(1))
	waitMinutes(mins(0), mins(1))
	clock.set(mins(2).Add(59 * time.Second))
	waitMinutes(mins(0), mins(1), mins(2))
	// Minutes 3 and 4 pass while the worker is not looking: they are
	// missing, and the retention (3 minutes) deletes minutes 0 and 1.
	clock.set(mins(5).Add(time.Second))
	waitMinutes(mins(2), mins(5))

	s, err := c.Series(ctx, mins(0), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Points) != 1 || !s.Points[0].At.Equal(mins(5)) || !s.Points[0].Partial {
		t.Errorf("Series = %+v, want one partial point at minute 5 (minute 2 has no next snapshot)", s)
	}
	s, err = c.Series(ctx, mins(2), "")
	if err != nil || !s.Since.Equal(mins(2)) {
		t.Fatalf("Series = %+v, %v", s, err)
	}
}
