package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/internal/sqlitetest"
	"github.com/redrivehq/redrive/server"
	"github.com/redrivehq/redrive/store/sqlite"
)

// declareSchedules declares ps in the SQLite file db, as a worker does
// when it starts.
func declareSchedules(t *testing.T, db string, ps ...redrive.Periodic) {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	st, err := sqlite.Open(context.Background(), db, sqlite.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: log})
	w := redrive.NewWorker(c, redrive.WorkerOptions{Logger: log, Periodic: ps, Queues: map[string]int{"idle": 1}})
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() { stop(); <-done }()
	waitUntil(t, e2eWait, "the worker declared its schedules", func() error {
		if list, err := c.Schedules(ctx); err != nil || len(list) != len(ps) {
			return fmt.Errorf("%d of %d schedules (%v)", len(list), len(ps), err)
		}
		return nil
	})
}

// checkPeriodicCLI runs the periodic commands through pre (the
// connection flags) on the store of the SQLite file db.
func checkPeriodicCLI(t *testing.T, db string, pre []string) {
	t.Helper()
	cli := func(args ...string) string {
		t.Helper()
		return mustCLI(t, append(append([]string{}, pre...), args...)...)
	}
	if out := cli("periodic", "ls"); out != "no schedules\n" {
		t.Errorf("periodic ls on an empty store: %q", out)
	}
	declareSchedules(t, db,
		redrive.Periodic{Name: "nightly sync", Cron: "0 2 * * *", TimeZone: "America/New_York", Kind: "http",
			Payload: map[string]string{"url": "https://example.com/sync"}, Missed: redrive.MissedRunOnce, Options: []redrive.Option{redrive.InQueue("sync")}},
		redrive.Periodic{Name: "ping", Every: time.Hour, Kind: "http", Payload: map[string]string{"url": "https://example.com/ping"}})

	out := cli("periodic", "ls")
	for _, want := range []string{"NAME", "NEXT RUN", "nightly sync", "0 2 * * * (America/New_York)", "run_once", "ping", "every 1h0m0s", "skip", "active"} {
		if !strings.Contains(out, want) {
			t.Errorf("periodic ls lacks %q:\n%s", want, out)
		}
	}
	list := decode[server.ScheduleList](t, cli("--json", "periodic", "ls"))
	if len(list.Schedules) != 2 || list.Schedules[0].Name != "nightly sync" || list.Schedules[0].NextRun.IsZero() {
		t.Errorf("periodic ls --json: %+v", list)
	}

	out = cli("periodic", "pause", "nightly sync")
	if !strings.Contains(out, "schedule nightly sync paused since ") || !strings.Contains(out, "`redrive periodic resume 'nightly sync'`") {
		t.Errorf("periodic pause: %q", out)
	}
	if s := decode[server.ScheduleBody](t, cli("--json", "periodic", "pause", "nightly sync")).Schedule; !s.Paused {
		t.Errorf("periodic pause --json: %+v", s)
	}
	if out := cli("periodic", "ls"); !strings.Contains(out, "paused") {
		t.Errorf("periodic ls after a pause:\n%s", out)
	}
	out = cli("periodic", "resume", "nightly sync")
	if !strings.Contains(out, "schedule nightly sync resumed: next run ") {
		t.Errorf("periodic resume: %q", out)
	}

	out = cli("periodic", "trigger", "ping")
	if !strings.Contains(out, "schedule ping triggered: job ") || !strings.Contains(out, "kind http, queue default") {
		t.Errorf("periodic trigger: %q", out)
	}
	j := decode[redrive.Job](t, cli("--json", "periodic", "trigger", "nightly sync"))
	if j.Kind != "http" || j.Queue != "sync" || !strings.HasPrefix(j.IdempotencyKey, "periodic:nightly sync:trigger:") {
		t.Errorf("periodic trigger --json: %+v", j)
	}

	for _, args := range [][]string{{"periodic", "pause", "nope"}, {"periodic", "resume", "nope"}, {"periodic", "trigger", "nope"}} {
		_, stderr, err := runCLI(t, append(append([]string{}, pre...), args...)...)
		if err == nil || !strings.Contains(stderr, "not found") {
			t.Errorf("%v: %v %q, want not found", args, err, stderr)
		}
	}
	if _, _, err := runCLI(t, append(append([]string{}, pre...), "periodic", "trigger")...); err == nil {
		t.Error("periodic trigger without a name succeeded")
	}

	if out := cli("periodic", "rm", "ping"); out != "schedule ping deleted\n" {
		t.Errorf("periodic rm: %q", out)
	}
	if list := decode[server.ScheduleList](t, cli("--json", "periodic", "ls")); len(list.Schedules) != 1 || list.Schedules[0].Name != "nightly sync" {
		t.Errorf("after periodic rm: %+v", list)
	}
	if _, stderr, err := runCLI(t, append(append([]string{}, pre...), "periodic", "rm", "ping")...); err == nil || !strings.Contains(stderr, "not found") {
		t.Errorf("periodic rm of a deleted schedule: %v %q", err, stderr)
	}
}

func TestPeriodicDirectMode(t *testing.T) {
	clearConnEnv(t)
	db := sqlitetest.Path(t)
	st, err := sqlite.Open(context.Background(), db, sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	checkPeriodicCLI(t, db, []string{"--db", db})
}

func TestPeriodicServerMode(t *testing.T) {
	clearConnEnv(t)
	ts, db := newTestServer(t, "s3cret")
	checkPeriodicCLI(t, db, []string{"--server", ts.URL, "--token", "s3cret"})
}

// TestPeriodicRmDeclared: `periodic rm` of a schedule a running worker
// declares is refused, naming the worker (it once deleted it, and the
// worker declared it again seconds later, as new and not paused),
// directly and through a server (409); once the worker stopped, it is
// deleted.
func TestPeriodicRmDeclared(t *testing.T) {
	clearConnEnv(t)
	for mode, setup := range countModes(t) {
		t.Run(mode, func(t *testing.T) {
			target, db := setup(t)
			log := slog.New(slog.DiscardHandler)
			st, err := sqlite.Open(context.Background(), db, sqlite.Options{Logger: log})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			c := redrive.NewClient(st, redrive.ClientOptions{Logger: log})
			w := redrive.NewWorker(c, redrive.WorkerOptions{Logger: log, Queues: map[string]int{"idle": 1},
				Periodic: []redrive.Periodic{{Name: "ping", Every: time.Hour, Kind: "http", Payload: map[string]string{"url": "https://example.com/ping"}}}})
			ctx, stop := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- w.Run(ctx) }()
			stopped := false
			stopWorker := func() {
				if !stopped {
					stopped = true
					stop()
					<-done
				}
			}
			defer stopWorker()
			waitUntil(t, e2eWait, "the worker declared its schedule", func() error {
				if s, err := c.Schedule(ctx, "ping"); err != nil || s.DeclaredBy == "" {
					return fmt.Errorf("%+v, %v", s, err)
				}
				return nil
			})
			s, err := c.Schedule(ctx, "ping")
			if err != nil {
				t.Fatal(err)
			}
			cli := func(args ...string) (string, string, error) {
				return runCLI(t, append(append([]string{}, target...), args...)...)
			}
			_, stderr, err := cli("periodic", "rm", "ping")
			if err == nil || !strings.Contains(stderr, `schedule "ping" is declared by the running worker `+s.DeclaredBy) {
				t.Fatalf("periodic rm of a declared schedule: %v %q", err, stderr)
			}
			if _, err := c.Schedule(context.Background(), "ping"); err != nil {
				t.Fatalf("the refused rm deleted the schedule: %v", err)
			}
			stopWorker()
			if out, stderr, err := cli("periodic", "rm", "ping"); err != nil || out != "schedule ping deleted\n" {
				t.Fatalf("periodic rm once the worker stopped: %v %q %q", err, out, stderr)
			}
		})
	}
}
