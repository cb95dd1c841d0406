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
	body := fmt.Sprintf(`{"schedules": {"tick": {"every": "1s", "kind": "http", "payload": {"url": %q}},
		"nightly": {"cron": "0 2 * * *", "time_zone": "America/New_York", "kind": "http", "payload": {"url": %q}, "missed": "run_once"}}}`,
		target.URL+"/tick", target.URL+"/nightly")
	if err := os.WriteFile(config, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startRedrive(t, bin, nil, "--db", filepath.Join(dir, "redrive.db"), "--addr", "127.0.0.1:0", "--config", config)

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
	if len(list.Schedules) != 2 || list.Schedules[1].Name != "tick" || list.Schedules[1].LastJobID == 0 || list.Schedules[1].LastRun.IsZero() ||
		list.Schedules[0].Name != "nightly" || list.Schedules[0].TimeZone != "America/New_York" {
		t.Fatalf("periodic ls: %+v", list)
	}

	// Paused, it enqueues nothing more (a job enqueued just before may
	// still run).
	s.cli("periodic", "pause", "tick")
	waitUntil(t, e2eWait, "no tick job left to run after the pause", func() error {
		code, b := s.api("GET", "/v1/jobs?kind=http&state=pending,scheduled,running", "")
		if code != http.StatusOK || strings.Contains(string(b), `"id"`) {
			return fmt.Errorf("%d %s", code, b)
		}
		return nil
	})
	paused := hits.Load()
	// A real wait: that a paused schedule enqueues nothing over two and a
	// half of its periods is what is tested.
	time.Sleep(2500 * time.Millisecond)
	if n := hits.Load(); n != paused {
		t.Errorf("%d ticks while paused", n-paused)
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
