package redrive_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
)

// stepClock is a clock the test moves by hand.
type stepClock struct{ t atomic.Int64 }

func (c *stepClock) now() time.Time  { return time.Unix(0, c.t.Load()).UTC() }
func (c *stepClock) set(t time.Time) { c.t.Store(t.UnixNano()) }

// TestSeriesAcrossMinutes runs failing and succeeding jobs on two workers
// (two clients, as two processes would be) sharing one store, across two
// minute boundaries of the statistics clock, and checks that Series
// counts each minute exactly, in total and per queue, with the live
// partial point last.
func TestSeriesAcrossMinutes(t *testing.T) {
	st := openStore(t)
	clock := &stepClock{}
	m0 := time.Date(2030, 5, 6, 7, 8, 0, 0, time.UTC)
	minute := func(n int) time.Time { return m0.Add(time.Duration(n) * time.Minute) }
	clock.set(minute(0).Add(10 * time.Second))

	pol := fastPolicy(3)
	var clients []*redrive.Client
	// The first worker's rounds of snapshots, and the rounds of both
	// workers' engines.
	var series <-chan struct{}
	var engines []<-chan struct{}
	for i := range 2 {
		c := redrive.NewClient(st, redrive.ClientOptions{Logger: quietLogger()})
		redrive.SetStatsClock(c, clock.now)
		w := redrive.NewWorker(c, redrive.WorkerOptions{ID: fmt.Sprintf("w%d", i), Policy: &pol, Logger: quietLogger(),
			Queues: map[string]int{redrive.DefaultQueue: 4, "other": 4}})
		w.HandleFunc("ok", func(ctx context.Context, job *redrive.Job) error { return nil })
		w.HandleFunc("perm", func(ctx context.Context, job *redrive.Job) error {
			return redrive.Permanent(errors.New("no such recipient"))
		})
		w.HandleFunc("flaky", func(ctx context.Context, job *redrive.Job) error {
			if job.Attempt == 1 {
				return redrive.Transient(errors.New("connection reset"))
			}
			return nil
		})
		w.HandleFunc("fail", func(ctx context.Context, job *redrive.Job) error {
			return redrive.Transient(errors.New("still down"))
		})
		if i == 0 {
			series = redrive.SeriesSignal(w)
		}
		engines = append(engines, redrive.EngineSignal(w))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx) }()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("worker %d: %v", i, err)
			}
		})
		clients = append(clients, c)
	}
	c := clients[0]
	ctx := context.Background()

	rounds := mergeSignals(t, engines...)
	// A round of the first worker's snapshots at minute m records it (or
	// finds it recorded by the other worker).
	waitSnapshot := func(m time.Time) {
		t.Helper()
		untilSignal(t, series, fmt.Sprintf("the snapshot of %s", m), func() bool {
			snaps, err := st.Snapshots(ctx, m)
			if err != nil {
				t.Fatal(err)
			}
			return len(snaps) > 0 && snaps[0].At.Equal(m)
		})
	}
	waitState := func(id int64, state redrive.State) {
		t.Helper()
		var j *redrive.Job
		untilSignal(t, rounds, fmt.Sprintf("job %d %s", id, state), func() bool {
			var err error
			if j, err = c.Get(ctx, id); err != nil {
				t.Fatal(err)
			}
			return j.State == state
		})
	}
	enqueue := func(kind string, want redrive.State, opts ...redrive.Option) func() int64 {
		t.Helper()
		j, err := clients[1].Enqueue(ctx, kind, nil, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return func() int64 { waitState(j.ID, want); return j.ID }
	}

	// Minute 0, queue default: 3 successes, 2 permanent failures, one
	// success after a transient failure.
	waitSnapshot(minute(0))
	var waits []func() int64
	for range 3 {
		waits = append(waits, enqueue("ok", redrive.Completed))
	}
	waits = append(waits, enqueue("perm", redrive.Dead), enqueue("perm", redrive.Dead), enqueue("flaky", redrive.Completed))
	var ids []int64
	for _, w := range waits {
		ids = append(ids, w())
	}
	deadID := ids[3]

	// Minute 1, queue other: 2 successes, one job failing transiently
	// until its one retry is spent.
	clock.set(minute(1).Add(time.Second))
	waitSnapshot(minute(1))
	waits = []func() int64{
		enqueue("ok", redrive.Completed, redrive.InQueue("other")),
		enqueue("ok", redrive.Completed, redrive.InQueue("other")),
		enqueue("fail", redrive.Dead, redrive.InQueue("other"), redrive.MaxRetries(1)),
	}
	for _, w := range waits {
		w()
	}

	// Minute 2, live: a success and a redriven job that fails again.
	clock.set(minute(2).Add(30 * time.Second))
	waitSnapshot(minute(2))
	enqueue("ok", redrive.Completed)()
	if p, err := c.Redrive(ctx, redrive.RedriveRequest{IDs: []int64{deadID}}); err != nil || p.Redriven != 1 {
		t.Fatalf("Redrive = %+v, %v", p, err)
	}
	waitState(deadID, redrive.Dead)

	type cnt = redrive.SeriesCounts
	point := func(n int, partial bool, c cnt, failed, dead map[string]int64) redrive.SeriesPoint {
		if failed == nil {
			failed = map[string]int64{}
		}
		if dead == nil {
			dead = map[string]int64{}
		}
		return redrive.SeriesPoint{At: minute(n), Partial: partial, Counts: c, Failed: failed, DeadByClass: dead}
	}
	m0All := point(0, false, cnt{Succeeded: 4, Retried: 1, Dead: 2, Attempts: 7, Enqueued: 6},
		map[string]int64{"permanent": 2, "transient": 1}, map[string]int64{"permanent": 2})
	m1All := point(1, false, cnt{Succeeded: 2, Retried: 1, Dead: 1, Attempts: 4, Enqueued: 3},
		map[string]int64{"transient": 2}, map[string]int64{"transient": 1})
	m2All := point(2, true, cnt{Succeeded: 1, Dead: 1, Attempts: 2, Enqueued: 1, Redriven: 1},
		map[string]int64{"permanent": 1}, map[string]int64{"permanent": 1})
	zero := func(n int, partial bool) redrive.SeriesPoint { return point(n, partial, cnt{}, nil, nil) }
	withMinute := func(p redrive.SeriesPoint, n int, partial bool) redrive.SeriesPoint {
		p.At, p.Partial = minute(n), partial
		return p
	}

	for _, c := range []struct {
		queue string
		since time.Time
		want  []redrive.SeriesPoint
	}{
		{"", minute(0), []redrive.SeriesPoint{m0All, m1All, m2All}},
		{"", time.Time{}, []redrive.SeriesPoint{m0All, m1All, m2All}},
		{"", minute(1).Add(20 * time.Second), []redrive.SeriesPoint{m1All, m2All}},
		{"", minute(3), []redrive.SeriesPoint{}},
		{redrive.DefaultQueue, minute(0), []redrive.SeriesPoint{m0All, zero(1, false), m2All}},
		{"other", minute(0), []redrive.SeriesPoint{zero(0, false), withMinute(m1All, 1, false), zero(2, true)}},
	} {
		s, err := clients[1].Series(ctx, c.since, c.queue)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(s.Points, c.want) {
			g, _ := json.MarshalIndent(s.Points, "", " ")
			w, _ := json.MarshalIndent(c.want, "", " ")
			t.Errorf("Series(since %s, queue %q) points:\n%s\nwant\n%s", c.since, c.queue, g, w)
		}
		if want := c.since.Truncate(time.Minute).UTC(); !s.Since.Equal(want) {
			t.Errorf("Series(since %s).Since = %s, want %s", c.since, s.Since, want)
		}
	}

	// Each minute was recorded once although two workers run.
	snaps, err := st.Snapshots(ctx, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	var got []time.Time
	for _, s := range snaps {
		got = append(got, s.At.UTC())
	}
	if want := []time.Time{minute(0), minute(1), minute(2)}; !slices.Equal(got, want) {
		t.Errorf("snapshots of %v, want %v", got, want)
	}

	// Once the next minute is recorded, the live point becomes a whole
	// one and the new minute is the live point.
	clock.set(minute(3))
	waitSnapshot(minute(3))
	s, err := c.Series(ctx, minute(2), "")
	if err != nil {
		t.Fatal(err)
	}
	if want := []redrive.SeriesPoint{withMinute(m2All, 2, false), zero(3, true)}; !reflect.DeepEqual(s.Points, want) {
		t.Errorf("Series after minute 3 was recorded: %+v, want %+v", s.Points, want)
	}
}
