package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/server"
)

// TestServePeriodic runs `redrive serve` with a schedule in its config
// file: an http job every second against a local target; the CLI lists,
// pauses and triggers it through the server. A config with a bad schedule
// stops serve at start with the schedule and the field named.
func TestServePeriodic(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the redrive binary")
	}
	var hits atomic.Int64
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/tick" {
			hits.Add(1)
		}
	}))
	defer target.Close()
	bin := buildRedrive(t)
	dir := t.TempDir()
	config := filepath.Join(dir, "redrive.json")
	// pulse, of tick's period in a queue of its own, shows the
	// scheduler's passes while tick is paused.
	body := fmt.Sprintf(`{"schedules": {"tick": {"every": "1s", "kind": "http", "payload": {"url": %q}},
		"pulse": {"every": "1s", "kind": "http", "queue": "pulse", "payload": {"url": %q}},
		"nightly": {"cron": "0 2 * * *", "time_zone": "America/New_York", "kind": "http", "payload": {"url": %q}, "missed": "run_once"}}}`,
		target.URL+"/tick", target.URL+"/pulse", target.URL+"/nightly")
	if err := os.WriteFile(config, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startRedrive(t, bin, nil, "--db", filepath.Join(dir, "redrive.db"), "--addr", "127.0.0.1:0", "--config", config,
		"--queues", "default,pulse")

	waitUntil(t, e2eWait, "three ticks", func() error {
		if n := hits.Load(); n < 3 {
			return fmt.Errorf("%d ticks", n)
		}
		return nil
	})
	var list server.ScheduleList
	if err := json.Unmarshal(s.cli("periodic", "ls"), &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Schedules) != 3 || list.Schedules[2].Name != "tick" || list.Schedules[2].LastJobID == 0 || list.Schedules[2].LastRun.IsZero() ||
		list.Schedules[0].Name != "nightly" || list.Schedules[0].TimeZone != "America/New_York" {
		t.Fatalf("periodic ls: %+v", list)
	}

	// Paused, it enqueues nothing more (a job enqueued just before may
	// still run).
	s.cli("periodic", "pause", "tick")
	waitUntil(t, e2eWait, "no tick job left to run after the pause", func() error {
		code, b := s.api("GET", "/v1/jobs?kind=http&queue=default&state=pending,scheduled,running", "")
		if code != http.StatusOK || strings.Contains(string(b), `"id"`) {
			return fmt.Errorf("%d %s", code, b)
		}
		return nil
	})
	paused := hits.Load()
	tickJob := scheduleInfo(t, s, "tick").LastJobID
	// The scheduler goes on: three more occurrences of pulse enqueued,
	// in passes at which tick, paused, was due too.
	pulseFrom := scheduleInfo(t, s, "pulse").LastRun
	waitUntil(t, e2eWait, "three more occurrences of pulse enqueued while tick is paused", func() error {
		if last := scheduleInfo(t, s, "pulse").LastRun; last.Before(pulseFrom.Add(3 * time.Second)) {
			return fmt.Errorf("pulse last ran for %v, from %v", last, pulseFrom)
		}
		return nil
	})
	if n := hits.Load(); n != paused {
		t.Errorf("%d ticks while paused", n-paused)
	}
	if id := scheduleInfo(t, s, "tick").LastJobID; id != tickJob {
		t.Errorf("the paused schedule enqueued job %d", id)
	}
	// Triggered: one job now, though paused.
	s.cli("periodic", "trigger", "tick")
	waitUntil(t, e2eWait, "the triggered job ran", holds(func() bool { return hits.Load() != paused }))

	// A bad schedule: serve refuses to start and says which and why.
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"schedules": {"nightly": {"cron": "0 2 * * *", "time_zone": "America/NewYork", "kind": "http"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, stderr, err := runRedrive(t, bin, "serve", "--db", filepath.Join(dir, "other.db"), "--addr", "127.0.0.1:0", "--config", bad)
	if err == nil || !strings.Contains(string(stderr), `schedules: schedule "nightly": time_zone: unknown time zone "America/NewYork"`) {
		t.Errorf("serve with a bad schedule: %v\n%s", err, stderr)
	}
}

// scheduleInfo returns the schedule name of the serve s.
func scheduleInfo(t *testing.T, s *redriveProc, name string) redrive.ScheduleInfo {
	t.Helper()
	code, b := s.api("GET", "/v1/schedules/"+name, "")
	var body server.ScheduleBody
	if code != http.StatusOK {
		t.Fatalf("GET /v1/schedules/%s: %d %s", name, code, b)
	}
	if err := json.Unmarshal(b, &body); err != nil {
		t.Fatal(err)
	}
	return body.Schedule
}
