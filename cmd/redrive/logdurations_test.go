package main

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestDurationText: serve's JSON logs write durations with their unit,
// never as bare nanoseconds, in attributes given per record, once
// (With) and in groups; other values are untouched.
func TestDurationText(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(durationText(slog.NewJSONHandler(&buf, nil)))
	log.With("timeout", 30*time.Second).Info("retry scheduled", "delay", 1080*time.Millisecond, "attempt", 2,
		slog.Group("budget", "window", time.Minute, "ratio", 0.1), "plain", "x")
	log.Info("nothing to rewrite", "n", 1)
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("logs: %s", buf.String())
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &m); err != nil {
		t.Fatal(err)
	}
	budget, _ := m["budget"].(map[string]any)
	if m["delay"] != "1.08s" || m["timeout"] != "30s" || budget["window"] != "1m0s" || budget["ratio"] != 0.1 ||
		m["attempt"] != 2.0 || m["plain"] != "x" {
		t.Errorf("log line %s", lines[0])
	}
	if !strings.Contains(lines[1], `"n":1`) {
		t.Errorf("log line %s", lines[1])
	}
}
