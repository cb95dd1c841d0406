package server

import (
	"context"
	"encoding/json"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/store"
)

// awayFromMinuteEnd waits, when the current minute ends within 10 s, for
// the next one, so that a test relating snapshots to the current minute
// does not see the minute change under it.
func awayFromMinuteEnd() time.Time {
	now := time.Now()
	if next := now.Truncate(time.Minute).Add(time.Minute); next.Sub(now) < 10*time.Second {
		// Real time: the wall clock's minute must turn, as the store's
		// snapshots are stamped with it.
		time.Sleep(next.Sub(now) + 10*time.Millisecond)
	}
	return time.Now().Truncate(time.Minute).UTC()
}

// enqueueN enqueues n jobs of kind k in queue.
func (e *env) enqueueN(queue string, n int) {
	e.t.Helper()
	for range n {
		if _, err := e.client.Enqueue(context.Background(), "k", nil, redrive.InQueue(queue)); err != nil {
			e.t.Fatal(err)
		}
	}
}

// snapshot records the minute m.
func (e *env) snapshot(m time.Time) {
	e.t.Helper()
	if err := e.st.Snapshot(context.Background(), m); err != nil {
		e.t.Fatal(err)
	}
}

// failBoth leases the two due jobs of queue and fails them as a worker
// would: the first retried (transient), the second dead (permanent),
// with the counters the worker adds.
func (e *env) failBoth(queue string) {
	e.t.Helper()
	ctx := context.Background()
	now := time.Now()
	got, err := e.st.Fetch(ctx, store.FetchParams{Queue: queue, Limit: 10, Now: now, LeaseUntil: now.Add(time.Minute), Worker: "w"})
	if err != nil || len(got) != 2 {
		e.t.Fatalf("fetch: %v %v", got, err)
	}
	retry := store.Outcome{JobID: got[0].ID, Queue: queue, Attempt: got[0].Attempt, Lease: got[0].Lease, Worker: "w", Kind: store.Retry, At: now,
		RunAt: now.Add(time.Hour), Class: failure.Transient, Error: "503",
		Counters: []store.Counter{{Queue: queue, Name: store.StatFailed, Class: "transient", N: 1}, {Queue: queue, Name: store.StatRetried, N: 1}}}
	bury := store.Outcome{JobID: got[1].ID, Queue: queue, Attempt: got[1].Attempt, Lease: got[1].Lease, Worker: "w", Kind: store.Bury, At: now,
		Class: failure.Permanent, Error: "404", DeadReason: "http_404", Fingerprint: "f",
		Counters: []store.Counter{{Queue: queue, Name: store.StatFailed, Class: "permanent", N: 1}, {Queue: queue, Name: store.StatDead, Class: "permanent", N: 1}}}
	if applied, err := e.st.Finish(ctx, []store.Outcome{retry, bury}); err != nil || !applied[0] || !applied[1] {
		e.t.Fatalf("finish: %v %v", applied, err)
	}
}

func TestStatsSeries(t *testing.T) {
	e := newEnv(t, Options{})
	cur := awayFromMinuteEnd()
	m := func(n int) time.Time { return cur.Add(time.Duration(n) * time.Minute) }

	// No snapshot yet: no point, and the same shape.
	var empty map[string]json.RawMessage
	e.want(e.do("GET", "/v1/stats/series", ""), 200, &empty)
	if string(empty["points"]) != "[]" || string(empty["step"]) != `"1m"` {
		t.Errorf("series of an empty store: %v", empty)
	}

	e.enqueueN("mail", 2)
	e.snapshot(m(-5)) // the history stops, then starts again: no point for minute -5
	e.snapshot(m(-2))
	e.failBoth("mail")
	e.enqueueN("hooks", 1)
	e.snapshot(m(-1))
	e.enqueueN("hooks", 3)
	e.snapshot(m(0))
	e.enqueueN("mail", 1)

	r := e.do("GET", "/v1/stats/series", "")
	if r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	// The exact shape, keys included.
	var raw struct {
		Step   string           `json:"step"`
		Since  string           `json:"since"`
		Points []map[string]any `json:"points"`
	}
	r.json(t, &raw)
	var top map[string]any
	r.json(t, &top)
	if len(top) != 3 {
		t.Errorf("top-level keys %v, want step, since, points", top)
	}
	if raw.Step != "1m" {
		t.Errorf("step %q, want 1m", raw.Step)
	}
	if want := m(-60).UTC().Format(time.RFC3339); raw.Since != want {
		t.Errorf("since %q, want %q (an hour ago, truncated to the minute)", raw.Since, want)
	}
	if len(raw.Points) != 3 {
		t.Fatalf("%d points, want 3: %s", len(raw.Points), r.body)
	}
	for i, p := range raw.Points {
		keys := slices.Sorted(func(yield func(string) bool) {
			for k := range p {
				if !yield(k) {
					return
				}
			}
		})
		if !slices.Equal(keys, []string{"at", "counts", "dead_by_class", "failed", "partial"}) {
			t.Errorf("point %d keys %v", i, keys)
		}
		counts, _ := p["counts"].(map[string]any)
		if len(counts) != 6 {
			t.Errorf("point %d counts %v, want succeeded, retried, dead, attempts, enqueued, redriven", i, counts)
		}
		at, _ := p["at"].(string)
		if want := m(i - 2).UTC().Format(time.RFC3339); at != want {
			t.Errorf("point %d at %q, want %q", i, at, want)
		}
	}

	type point = redrive.SeriesPoint
	type cnt = redrive.SeriesCounts
	none := map[string]int64{}
	all := []point{
		{At: m(-2), Counts: cnt{Attempts: 2, Retried: 1, Dead: 1, Enqueued: 1},
			Failed: map[string]int64{"transient": 1, "permanent": 1}, DeadByClass: map[string]int64{"permanent": 1}},
		{At: m(-1), Counts: cnt{Enqueued: 3}, Failed: none, DeadByClass: none},
		{At: m(0), Partial: true, Counts: cnt{Enqueued: 1}, Failed: none, DeadByClass: none},
	}
	mail := []point{
		{At: m(-2), Counts: cnt{Attempts: 2, Retried: 1, Dead: 1},
			Failed: map[string]int64{"transient": 1, "permanent": 1}, DeadByClass: map[string]int64{"permanent": 1}},
		{At: m(-1), Failed: none, DeadByClass: none},
		{At: m(0), Partial: true, Counts: cnt{Enqueued: 1}, Failed: none, DeadByClass: none},
	}
	for _, c := range []struct {
		query string
		since time.Time
		want  []point
	}{
		{"", m(-60), all},
		{"?since=2m", m(-2), all},
		{"?since=5m", m(-5), all},
		{"?since=1m", m(-1), all[1:]},
		{"?since=7d", m(-7 * 24 * 60), all},
		{"?since=168h&queue=mail", m(-7 * 24 * 60), mail},
		{"?queue=hooks&since=2m", m(-2), []point{
			{At: m(-2), Counts: cnt{Enqueued: 1}, Failed: none, DeadByClass: none},
			{At: m(-1), Counts: cnt{Enqueued: 3}, Failed: none, DeadByClass: none},
			{At: m(0), Partial: true, Failed: none, DeadByClass: none},
		}},
		{"?queue=nope", m(-60), []point{
			{At: m(-2), Failed: none, DeadByClass: none},
			{At: m(-1), Failed: none, DeadByClass: none},
			{At: m(0), Partial: true, Failed: none, DeadByClass: none},
		}},
	} {
		var got SeriesResponse
		e.want(e.do("GET", "/v1/stats/series"+c.query, ""), 200, &got)
		for i := range got.Points {
			got.Points[i].At = got.Points[i].At.UTC()
		}
		if got.Step != "1m" || !got.Since.Equal(c.since) || !reflect.DeepEqual(got.Points, c.want) {
			t.Errorf("GET /v1/stats/series%s = %+v\nwant since %s, points %+v", c.query, got, c.since, c.want)
		}
	}
}

func TestStatsSeriesBadInput(t *testing.T) {
	e := newEnv(t, Options{})
	for _, since := range []string{"0", "0s", "-1h", "8d", "169h", "abc", "1.5d", "7x", "d", "-1d", "1h30d", "9999999999d"} {
		wantErr(t, e.do("GET", "/v1/stats/series?since="+since, ""), 400, "invalid", "since")
	}
	wantErr(t, e.do("GET", "/v1/stats/series?queue=%01x", ""), 400, "invalid", "queue")
	wantErr(t, e.do("GET", "/v1/stats/series?window=1h", ""), 400, "invalid", "window")
	wantErr(t, e.do("GET", "/v1/stats/series?since=1h&since=2h", ""), 400, "invalid", "since")
	wantErr(t, e.do("POST", "/v1/stats/series", ""), 405, "method_not_allowed", "")
	for _, since := range []string{"", "1h", "7d", "168h", "1m", "1s", "1d"} {
		e.want(e.do("GET", "/v1/stats/series?since="+since, ""), 200, nil)
	}
}

func TestStatsSeriesAuth(t *testing.T) {
	e := newEnv(t, Options{Token: "s3cret"})
	e.want(e.do("GET", "/v1/stats/series", ""), 200, nil)
	e.token = ""
	wantErr(t, e.do("GET", "/v1/stats/series", ""), 401, "unauthorized", "")
	wantErr(t, e.do("GET", "/v1/stats/series", "", "Authorization", "Bearer nope"), 401, "unauthorized", "")
}
