package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
)

// loadScheduleConfig loads a config file holding body.
func loadScheduleConfig(t *testing.T, body string, env map[string]string) (*Serve, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "redrive.json")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	if env == nil {
		env = map[string]string{}
	}
	env[FileEnv] = path
	return fuzzLoad(t, nil, env)
}

func TestScheduleConfig(t *testing.T) {
	c, err := loadScheduleConfig(t, `{"queues": {"default": 4, "sync": 2}, "schedules": {
		"nightly-sync": {"cron": "0 2 * * *", "time_zone": "America/New_York", "kind": "http", "queue": "sync",
			"payload": {"url": "https://example.com/sync", "method": "POST"}, "missed": "run_once", "grace": "5m", "max_retries": 5,
			"dependency": "http:example.com", "priority": -40},
		"ping": {"every": "30s", "kind": "http", "payload": {"url": "https://example.com/ping"}}}}`, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Schedules) != 2 {
		t.Fatalf("schedules: %+v", c.Schedules)
	}
	n, p := c.Schedules[0], c.Schedules[1] // sorted by name
	if n.Name != "nightly-sync" || n.Cron != "0 2 * * *" || n.TimeZone != "America/New_York" || n.Missed != redrive.MissedRunOnce ||
		n.Grace != 5*time.Minute || len(n.Options) != 4 {
		t.Errorf("nightly-sync: %+v", n)
	}
	r := redrive.Request{}
	for _, o := range n.Options {
		o(&r)
	}
	if r.Queue != "sync" || r.MaxRetries == nil || *r.MaxRetries != 5 || r.Dependency != "http:example.com" || r.Priority != -40 {
		t.Errorf("nightly-sync options: %+v", r)
	}
	if p.Name != "ping" || p.Every != 30*time.Second || p.Kind != "http" {
		t.Errorf("ping: %+v", p)
	}

	// The same as JSON text in the environment.
	c, err = fuzzLoad(t, nil, map[string]string{"REDRIVE_SCHEDULES": `{"ping": {"every": "1m", "kind": "http", "payload": {"url": "https://example.com/ping"}}}`})
	if err != nil || len(c.Schedules) != 1 || c.Schedules[0].Every != time.Minute {
		t.Errorf("from the environment: %+v, %v", c, err)
	}
}

func TestScheduleConfigErrors(t *testing.T) {
	for _, c := range []struct{ schedules, want string }{
		{`{"s": {"cron": "0 25 * * *", "kind": "http"}}`, `schedules: schedule "s": cron: "0 25 * * *": `},
		{`{"s": {"cron": "0 2 * * *", "time_zone": "Mars/Base", "kind": "http"}}`, `schedule "s": time_zone: unknown time zone "Mars/Base"`},
		{`{"s": {"kind": "http"}}`, `schedule "s": cron: a schedule needs a cron expression or an interval`},
		{`{"s": {"every": "soon", "kind": "http"}}`, `schedule "s": every: "soon" is not a duration`},
		{`{"s": {"every": "100ms", "kind": "http"}}`, `schedule "s": every: 100ms is shorter than the minimum 1s`},
		{`{"s": {"every": "1m", "cron": "@daily", "kind": "http"}}`, `schedule "s": every: a schedule has a cron expression or an interval, not both`},
		{`{"s": {"every": "1m"}}`, `schedule "s": kind: required`},
		{`{"s": {"every": "1m", "kind": "email"}}`, `schedule "s": kind: "email" is not a kind serve runs (http)`},
		{`{"s": {"every": "1m", "kind": "download"}}`, `the download kind needs --download-dir`},
		{`{"s": {"every": "1m", "kind": "http", "queue": "elsewhere"}}`, `schedule "s": queue: "elsewhere" is not a queue serve works (default): add it to queues`},
		{`{"s": {"every": "1m", "kind": "http", "missed": "always"}}`, `schedule "s": missed: "always": want "skip" or "run_once"`},
		{`{"s": {"every": "1m", "kind": "http", "grace": "0s"}}`, `schedule "s": grace: "0s": want more than 0`},
		{`{"s": {"every": "1m", "kind": "http", "max_retries": -1}}`, `schedule "s": max_retries: -1: want 0 to 1000`},
		{`{"s": {"every": "1m", "kind": "http", "max_retries": "3"}}`, `schedule "s": max_retries: want a int, got a JSON string`},
		{`{"s": {"every": "1m", "kind": "http", "priority": 101}}`, `schedule "s": priority: 101: want an integer from -100 to 100`},
		{`{"s": {"every": "1m", "kind": "http", "priority": -1000}}`, `schedule "s": priority: -1000: want an integer from -100 to 100`},
		{`{"s": {"every": "1m", "kind": "http", "priority": 1.5}}`, `schedule "s": priority: want a int, got a JSON number`},
		{`{"s": {"every": "1m", "kind": "http", "priority": "high"}}`, `schedule "s": priority: want a int, got a JSON string`},
		{`{"s": {"every": "1m", "kind": "http", "colour": "red"}}`, `schedule "s": want an object of cron, every,`},
		{`{"a/b": {"every": "1m", "kind": "http"}}`, `schedules: schedule name "a/b" holds a path separator`},
		{`{"s": {"every": "1m", "kind": "http", "dependency": " x"}}`, `schedule "s": dependency: `},
		{`[1]`, `schedules: want a string, a number or a boolean, got [1]`},
		{`"[1]"`, `schedules: want a JSON object of schedule names to schedules`},
	} {
		_, err := loadScheduleConfig(t, `{"schedules": `+c.schedules+`}`, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("schedules %s: %v\nwant an error containing %s", c.schedules, err, c.want)
		}
	}
}

// FuzzScheduleConfig: any "schedules" value is refused with an error that
// names the setting, or accepted as schedules that redrive.Periodic
// accepts, with a kind and a queue serve runs.
func FuzzScheduleConfig(f *testing.F) {
	for _, s := range []string{
		`{"nightly": {"cron": "0 2 * * *", "time_zone": "America/New_York", "kind": "http", "payload": {"url": "https://example.com"}, "missed": "run_once"}}`,
		`{"ping": {"every": "30s", "kind": "http", "grace": "10s", "max_retries": 2, "dependency": "d"}}`,
		`{"x": {"every": "1ms", "kind": "http"}}`,
		`{"x": {"cron": "@every 1h", "kind": "http"}}`,
		`{"x": {"cron": "TZ=UTC 0 0 * * *", "kind": "http"}}`,
		`{"x": {"cron": "0 0 30 2 *", "kind": "http"}}`,
		`{"x": {"every": "1m", "kind": "http", "queue": "q"}}`,
		`{"x": {"every": "1m", "kind": "http", "priority": 100}}`,
		`{"x": {"every": "1m", "kind": "http", "priority": -101}}`,
		`{"x": {"every": "1m", "kind": "http", "priority": 2.5}}`,
		`{"x": null}`, `{}`, `null`, `[]`, `"text"`, `{"x": {"every": 60}}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		c, err := fuzzLoad(t, nil, map[string]string{"REDRIVE_SCHEDULES": v})
		if err != nil {
			if !strings.HasPrefix(err.Error(), "REDRIVE_SCHEDULES: ") && !strings.HasPrefix(err.Error(), "schedules: ") {
				t.Fatalf("error does not name the setting: %v", err)
			}
			return
		}
		for _, p := range c.Schedules {
			r := redrive.Request{}
			for _, o := range p.Options {
				o(&r)
			}
			if r.Priority < redrive.MinPriority || r.Priority > redrive.MaxPriority {
				t.Fatalf("accepted schedule %q with priority %d", p.Name, r.Priority)
			}
			if err := p.Validate(); err != nil {
				t.Fatalf("accepted schedule %q that Validate refuses: %v", p.Name, err)
			}
			if p.Kind != "http" {
				t.Fatalf("accepted kind %q", p.Kind)
			}
		}
	})
}
