package redrive

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/redrivehq/redrive/internal/sqlitetest"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/postgres"
	"github.com/redrivehq/redrive/store/sqlite"
)

// clockAt returns a fakeClock (series_internal_test.go) set to t.
func clockAt(t time.Time) *fakeClock {
	c := &fakeClock{}
	c.set(t)
	return c
}

// add moves the clock forward by d.
func (c *fakeClock) add(d time.Duration) { c.set(c.now().Add(d)) }

// periodicStores opens a SQLite store, and a PostgreSQL one when
// REDRIVE_POSTGRES_URL is set.
func periodicStores(t *testing.T) map[string]func(t *testing.T) store.Store {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	out := map[string]func(t *testing.T) store.Store{
		"sqlite": func(t *testing.T) store.Store {
			st, err := sqlite.Open(t.Context(), sqlitetest.Path(t), sqlite.Options{Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			return st
		},
	}
	if url := os.Getenv("REDRIVE_POSTGRES_URL"); url != "" {
		out["postgres"] = func(t *testing.T) store.Store {
			schema := "redrive_periodic_" + strings.ToLower(strings.NewReplacer("/", "_", "-", "_").Replace(t.Name()))
			if len(schema) > 60 {
				schema = schema[:60]
			}
			st, err := postgres.Open(context.Background(), url, postgres.Options{Schema: schema, Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			st.Pool().Exec(context.Background(), "TRUNCATE "+schema+".jobs, "+schema+".schedules")
			t.Cleanup(func() {
				st.Pool().Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
				st.Close()
			})
			return st
		}
	}
	return out
}

// periodicWorker is a worker on st whose clock is clk, with the schedules
// ps compiled.
func periodicWorker(t *testing.T, st store.Store, clk *fakeClock, ps ...Periodic) (*Worker, []*periodic) {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	c := NewClient(st, ClientOptions{Logger: quiet})
	c.setClock(clk.now)
	w := NewWorker(c, WorkerOptions{Logger: quiet})
	w.leading = func() bool { return true }
	compiled, err := compilePeriodic(ps)
	if err != nil {
		t.Fatal(err)
	}
	return w, compiled
}

// periodicJobs returns the run times of the jobs of a schedule, by key,
// and fails on a job twice for one occurrence.
func periodicJobs(t *testing.T, st store.Store) []string {
	t.Helper()
	res, err := st.List(t.Context(), store.Filter{}, store.Page{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	seen := map[string]bool{}
	for _, j := range res.Jobs {
		if seen[j.IdempotencyKey] {
			t.Errorf("two jobs with the key %s", j.IdempotencyKey)
		}
		seen[j.IdempotencyKey] = true
		if strings.HasPrefix(j.IdempotencyKey, "periodic:") && !strings.Contains(j.IdempotencyKey, ":trigger:") {
			keys = append(keys, j.RunAt.UTC().Format("15:04:05.000"))
		}
	}
	sort.Strings(keys)
	return keys
}

func TestPeriodicEnqueue(t *testing.T) {
	for name, open := range periodicStores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			st := open(t)
			clk := clockAt(time.Date(2026, 1, 2, 3, 0, 0, 300_000_000, time.UTC))
			p := Periodic{Name: "tick", Every: time.Second, Kind: "tick", Payload: map[string]int{"n": 1},
				Options: []Option{InQueue("ticks"), MaxRetries(2)}, Grace: 5 * time.Second}
			// Two workers on one store, both leading (as on SQLite, which
			// has no election).
			w1, ps1 := periodicWorker(t, st, clk, p)
			w2, ps2 := periodicWorker(t, st, clk, p)
			if !w1.declarePeriodic(ctx, ps1) || !w2.declarePeriodic(ctx, ps2) {
				t.Fatal("declare failed")
			}
			clk.add(2 * time.Second) // 03:00:02.300: 01 and 02 are due
			w1.enqueuePeriodic(ctx, ps1)
			w2.enqueuePeriodic(ctx, ps2)
			if got := strings.Join(periodicJobs(t, st), " "); got != "03:00:01.000 03:00:02.000" {
				t.Fatalf("jobs after 2 s: %s", got)
			}
			sc, _ := st.GetSchedule(ctx, "tick")
			if !sc.Cursor.Equal(time.Date(2026, 1, 2, 3, 0, 2, 0, time.UTC)) || sc.LastJobID == 0 || !sc.LastRun.Equal(sc.Cursor) {
				t.Errorf("schedule after 2 s: %+v", sc)
			}
			j, _ := st.Get(ctx, sc.LastJobID)
			if j.Queue != "ticks" || j.Kind != "tick" || j.MaxRetries != 2 || string(j.Payload) != `{"n":1}` && string(j.Payload) != `{"n": 1}` {
				t.Errorf("job: %+v", j)
			}

			// A leader that enqueued but died before moving the cursor:
			// the next leader enqueues the same keys, so nothing twice.
			clk.add(time.Second)
			stale, _ := st.GetSchedule(ctx, "tick")
			if _, err := w1.runPeriodic(ctx, ps1[0], stale, clk.now()); err != nil {
				t.Fatal(err)
			}
			if _, err := w2.runPeriodic(ctx, ps2[0], stale, clk.now()); err != nil { // stale cursor: CAS refused
				t.Fatal(err)
			}
			if got := len(periodicJobs(t, st)); got != 3 {
				t.Errorf("%d jobs after 3 s with a stale second leader, want 3", got)
			}

			// Paused: nothing; resumed: from the resume on.
			c := w1.client
			if _, err := c.PauseSchedule(ctx, "tick"); err != nil {
				t.Fatal(err)
			}
			clk.add(3 * time.Second)
			w1.enqueuePeriodic(ctx, ps1)
			if got := len(periodicJobs(t, st)); got != 3 {
				t.Errorf("%d jobs while paused, want 3", got)
			}
			info, err := c.ResumeSchedule(ctx, "tick")
			if err != nil || info.Paused || !info.NextRun.Equal(time.Date(2026, 1, 2, 3, 0, 7, 0, time.UTC)) {
				t.Errorf("resume: %+v, %v", info, err)
			}
			clk.add(time.Second)
			w1.enqueuePeriodic(ctx, ps1)
			if got := strings.Join(periodicJobs(t, st), " "); got != "03:00:01.000 03:00:02.000 03:00:03.000 03:00:07.000" {
				t.Errorf("jobs after the pause: %s", got)
			}

			// Everything down for a minute, grace 5 s, skip: only the
			// occurrences of the last 5 s run.
			clk.add(time.Minute)
			w1.enqueuePeriodic(ctx, ps1)
			keys := periodicJobs(t, st)
			if n := len(keys); n != 4+5 || keys[4] != "03:01:03.000" || keys[8] != "03:01:07.000" {
				t.Errorf("after a minute down: %d jobs %v", n, keys)
			}

			// Trigger: one job now, with its own key, whatever the clock.
			job, err := c.TriggerSchedule(ctx, "tick")
			if err != nil || !strings.HasPrefix(job.IdempotencyKey, "periodic:tick:trigger:") || job.Queue != "ticks" {
				t.Errorf("trigger: %+v, %v", job, err)
			}
			if _, err := c.TriggerSchedule(ctx, "nope"); !errors.Is(err, ErrNotFound) {
				t.Errorf("trigger of an unknown schedule: %v, want ErrNotFound", err)
			}

			list, err := c.Schedules(ctx)
			if err != nil || len(list) != 1 {
				t.Fatalf("schedules: %+v, %v", list, err)
			}
			defer func() {
				// Deleted while a worker declares it: the worker's next
				// pass asks to declare it again, and it starts afresh.
				if err := c.DeleteSchedule(ctx, "tick"); err != nil {
					t.Fatal(err)
				}
				if err := c.DeleteSchedule(ctx, "tick"); !errors.Is(err, ErrNotFound) {
					t.Errorf("second delete: %v, want ErrNotFound", err)
				}
				if _, redeclare := w1.enqueuePeriodic(ctx, ps1); !redeclare {
					t.Error("a pass after the delete does not ask to declare again")
				}
				w1.declarePeriodic(ctx, ps1)
				if sc, err := st.GetSchedule(ctx, "tick"); err != nil || !sc.Cursor.Equal(clk.now().Truncate(time.Millisecond)) || sc.LastJobID != 0 {
					t.Errorf("declared again: %+v, %v", sc, err)
				}
			}()
			in := list[0]
			if in.Every != "1s" || in.Kind != "tick" || in.Queue != "ticks" || in.Missed != MissedSkip || in.Grace != "5s" ||
				!in.LastRun.Equal(time.Date(2026, 1, 2, 3, 1, 7, 0, time.UTC)) || !in.NextRun.Equal(time.Date(2026, 1, 2, 3, 1, 8, 0, time.UTC)) {
				t.Errorf("listed: %+v", in)
			}
		})
	}
}

// TestPeriodicRunOnce: everything down for a day, the daily schedule with
// run once enqueues one job, for the latest occurrence, and a restart
// after that enqueues nothing more.
func TestPeriodicRunOnce(t *testing.T) {
	ctx := t.Context()
	st := periodicStores(t)["sqlite"](t)
	clk := clockAt(time.Date(2026, 3, 6, 12, 0, 0, 0, time.UTC))
	p := Periodic{Name: "nightly", Cron: "0 2 * * *", TimeZone: "America/New_York", Kind: "reindex", Missed: MissedRunOnce}
	w, ps := periodicWorker(t, st, clk, p)
	w.declarePeriodic(ctx, ps)
	clk.add(3 * 24 * time.Hour) // 9 March, noon UTC: 7, 8 and 9 March missed
	w.enqueuePeriodic(ctx, ps)
	if got := strings.Join(periodicJobs(t, st), " "); got != "06:00:00.000" {
		t.Errorf("run once after three days down: %s, want the 9 March 02:00 EDT (06:00 UTC) occurrence", got)
	}
	// A restart: a new worker declares again, the cursor is kept.
	w2, ps2 := periodicWorker(t, st, clk, p)
	w2.declarePeriodic(ctx, ps2)
	before, _ := st.GetSchedule(ctx, "nightly")
	clk.add(time.Hour)
	w2.enqueuePeriodic(ctx, ps2)
	if got := len(periodicJobs(t, st)); got != 1 {
		t.Errorf("%d jobs after a restart, want 1", got)
	}
	// A pass with nothing due writes nothing.
	if after, _ := st.GetSchedule(ctx, "nightly"); !after.UpdatedAt.Equal(before.UpdatedAt) || !after.Cursor.Equal(before.Cursor) {
		t.Errorf("a pass with nothing due changed the schedule: %+v, then %+v", before, after)
	}
}

func TestPeriodicValidate(t *testing.T) {
	for _, c := range []struct {
		p    Periodic
		want string
	}{
		{Periodic{Name: "", Every: time.Second, Kind: "k"}, "schedule name is required"},
		{Periodic{Name: "a/b", Every: time.Second, Kind: "k"}, "path separator"},
		{Periodic{Name: "n", Kind: "k"}, `periodic "n": invalid request: cron: a schedule needs`},
		{Periodic{Name: "n", Cron: "0 25 * * *", Kind: "k"}, `periodic "n": invalid request: cron: `},
		{Periodic{Name: "n", Cron: "@daily", TimeZone: "Nowhere/City", Kind: "k"}, `time_zone: unknown time zone "Nowhere/City"`},
		{Periodic{Name: "n", Every: 10 * time.Millisecond, Kind: "k"}, "every: 10ms is shorter than"},
		{Periodic{Name: "n", Every: time.Second}, "kind: invalid request: kind is required"},
		{Periodic{Name: "n", Every: time.Second, Kind: "k", Options: []Option{IdempotencyKey("x")}}, "options: the schedule sets"},
		{Periodic{Name: "n", Every: time.Second, Kind: "k", Options: []Option{After(time.Second)}}, "options: the schedule sets each job's run time"},
		{Periodic{Name: "n", Every: time.Second, Kind: "k", Options: []Option{InQueue("a b ")}}, "queue:"},
		{Periodic{Name: "n", Every: time.Second, Kind: "k", Missed: "sometimes"}, `missed: "sometimes"`},
		{Periodic{Name: "n", Every: time.Second, Kind: "k", Grace: -time.Second}, "grace: -1s"},
		{Periodic{Name: "n", Every: time.Second, Kind: "k", Payload: make(chan int)}, "payload:"},
		{Periodic{Name: "n", Every: time.Second, Kind: "k", Options: []Option{Priority(MaxPriority + 1)}}, "priority: 101 is out of range"},
		{Periodic{Name: "n", Every: time.Second, Kind: "k", Options: []Option{Priority(-1000)}}, "priority: -1000 is out of range"},
	} {
		err := c.p.Validate()
		if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate(%+v) = %v, want ErrInvalid containing %q", c.p, err, c.want)
		}
	}
	_, err := compilePeriodic([]Periodic{{Name: "n", Every: time.Second, Kind: "k"}, {Name: "n", Cron: "@daily", Kind: "k"}})
	if err == nil || !strings.Contains(err.Error(), "declared twice") {
		t.Errorf("two schedules of one name: %v", err)
	}
}

// TestPeriodicRunRefuses: Run fails at once on an invalid schedule, and
// on a payload its kind's validator or the payload bound refuses.
func TestPeriodicRunRefuses(t *testing.T) {
	st := periodicStores(t)["sqlite"](t)
	quiet := slog.New(slog.DiscardHandler)
	c := NewClient(st, ClientOptions{Logger: quiet, MaxPayload: 64})
	c.SetValidator("fetch", func(p json.RawMessage) error {
		if !strings.Contains(string(p), "url") {
			return errors.New("url is required")
		}
		return nil
	})
	for _, c2 := range []struct {
		p    Periodic
		want string
	}{
		{Periodic{Name: "bad", Cron: "every day", Kind: "k"}, `redrive: periodic "bad": invalid request: cron: `},
		{Periodic{Name: "fetch", Every: time.Minute, Kind: "fetch", Payload: map[string]string{"u": "x"}}, `periodic "fetch": invalid request: payload: url is required`},
		{Periodic{Name: "big", Every: time.Minute, Kind: "k", Payload: strings.Repeat("x", 100)}, `periodic "big": invalid request: payload: 102 bytes, the limit is 64`},
	} {
		w := NewWorker(c, WorkerOptions{Logger: quiet, Periodic: []Periodic{c2.p}})
		err := w.Run(t.Context())
		if err == nil || !strings.Contains(err.Error(), c2.want) {
			t.Errorf("Run with %+v: %v, want %q", c2.p, err, c2.want)
		}
	}
}

// TestPeriodicPriorityKept: a schedule's priority is in its stored spec,
// and the spec read back gives its jobs that priority.
func TestPeriodicPriorityKept(t *testing.T) {
	p, err := Periodic{Name: "n", Every: time.Second, Kind: "k", Options: []Option{Priority(-7)}}.compile()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(p.raw), `"priority":-7`) {
		t.Errorf("stored spec %s has no priority -7", p.raw)
	}
	back, err := decodeSpec("n", p.raw, nil)
	if err != nil {
		t.Fatal(err)
	}
	if back.req.Priority != -7 {
		t.Errorf("spec read back: priority %d, want -7", back.req.Priority)
	}
}
