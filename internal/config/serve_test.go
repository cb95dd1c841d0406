package config

import (
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestServeConfigDefaults(t *testing.T) {
	c, err := loadConfig(t, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Addr != "127.0.0.1:8080" || c.DB != "redrive.db" || c.DatabaseURL != "" || c.Token != "" ||
		len(c.Queues) != 1 || c.Queues["default"] != 10 || !c.HTTPAllowPrivate || c.HTTPAllowLinkLocal ||
		c.ShutdownTimeout != 30*time.Second || c.LogLevel != slog.LevelInfo || c.Schema != "redrive" || c.SQLiteSynchronous != "full" {
		t.Fatalf("defaults: %+v", c)
	}
}

// TestServeHTTPTraceParent: the http and download kinds send the
// attempt's traceparent unless --http-traceparent=false (or the file's
// or the environment's setting) says not to.
func TestServeHTTPTraceParent(t *testing.T) {
	c, err := loadConfig(t, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.HTTPOptions().NoTraceParent || c.DownloadOptions().NoTraceParent {
		t.Fatal("by default the kinds do not send traceparent")
	}
	for _, how := range []struct {
		env  map[string]string
		args []string
	}{
		{nil, []string{"--http-traceparent=false"}},
		{map[string]string{"REDRIVE_HTTP_TRACEPARENT": "false"}, nil},
		{nil, []string{"--config", writeFile(t, "tp.json", `{"http-traceparent": false}`)}},
	} {
		c, err := loadConfig(t, how.env, how.args...)
		if err != nil {
			t.Fatal(err)
		}
		if !c.HTTPOptions().NoTraceParent || !c.DownloadOptions().NoTraceParent {
			t.Errorf("%v %v: the kinds still send traceparent", how.env, how.args)
		}
	}
	if _, err := loadConfig(t, nil, "--http-traceparent=maybe"); err == nil || !strings.Contains(err.Error(), "http-traceparent") {
		t.Errorf("--http-traceparent=maybe: %v, want an error naming the setting", err)
	}
}

// TestServeEngineSettings: every engine setting a Go user has, a serve
// user has too.
func TestServeEngineSettings(t *testing.T) {
	c, err := loadConfig(t, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Lease != 30*time.Second || c.CompletedRetention != 24*time.Hour || c.DLQMaxAge != 168*time.Hour ||
		c.CleanupInterval != 24*time.Hour || c.KeyRetention != 168*time.Hour || c.NoBudget || c.Budget.Ratio != 0.2 ||
		c.Budget.MinRetries != 100 || c.Budget.Window != 10*time.Second {
		t.Errorf("engine defaults: %+v", c)
	}
	file := writeFile(t, "engine.json", `{"lease": "2m", "key-retention": "720h", "retry-budget": false}`)
	c, err = loadConfig(t, map[string]string{"REDRIVE_DLQ_MAX_AGE": "336h"}, "--config", file, "--retry-budget-min", "500",
		"--completed-retention", "1h", "--cleanup-interval", "10m")
	if err != nil {
		t.Fatal(err)
	}
	if c.Lease != 2*time.Minute || c.KeyRetention != 720*time.Hour || !c.NoBudget || c.DLQMaxAge != 336*time.Hour ||
		c.Budget.MinRetries != 500 || c.CompletedRetention != time.Hour || c.CleanupInterval != 10*time.Minute {
		t.Errorf("engine settings: %+v", c)
	}
}

func TestServeConfigPrecedence(t *testing.T) {
	file := writeFile(t, "redrive.json", `{
		"addr": "127.0.0.1:9001",
		"db": "file.db",
		"workers": 3,
		"queues": {"default": 2, "webhooks": 50},
		"log-level": "debug",
		"http.allow-private": false,
		"shutdown-timeout": "5s",
		"token": "from-file"
	}`)
	// The file alone.
	c, err := loadConfig(t, map[string]string{"REDRIVE_CONFIG": file})
	if err != nil {
		t.Fatal(err)
	}
	if c.Addr != "127.0.0.1:9001" || c.DB != "file.db" || c.Workers != 3 || c.Queues["webhooks"] != 50 ||
		c.Queues["default"] != 2 || c.LogLevel != slog.LevelDebug || c.HTTPAllowPrivate || c.ShutdownTimeout != 5*time.Second ||
		c.Token != "from-file" {
		t.Fatalf("from the file: %+v", c)
	}
	// The environment beats the file.
	env := map[string]string{
		"REDRIVE_CONFIG":           file,
		"REDRIVE_ADDR":             "127.0.0.1:9002",
		"REDRIVE_DB":               "env.db",
		"REDRIVE_WORKERS":          "4",
		"REDRIVE_QUEUES":           "a,b=7",
		"REDRIVE_TOKEN":            "from-env",
		"REDRIVE_SHUTDOWN_TIMEOUT": "6s",
	}
	c, err = loadConfig(t, env)
	if err != nil {
		t.Fatal(err)
	}
	if c.Addr != "127.0.0.1:9002" || c.DB != "env.db" || c.Token != "from-env" || c.ShutdownTimeout != 6*time.Second ||
		len(c.Queues) != 2 || c.Queues["a"] != 4 || c.Queues["b"] != 7 || c.LogLevel != slog.LevelDebug {
		t.Fatalf("file + env: %+v", c)
	}
	// Flags beat both; --config beats $REDRIVE_CONFIG.
	other := writeFile(t, "other.json", `{"log-level": "error"}`)
	c, err = loadConfig(t, env, "--config", other, "--addr", "127.0.0.1:9003", "--db", "flag.db", "--token", "from-flag",
		"--workers", "5", "--http-allow-link-local", "--log-level", "warn")
	if err != nil {
		t.Fatal(err)
	}
	if c.Addr != "127.0.0.1:9003" || c.DB != "flag.db" || c.Token != "from-flag" || c.Queues["a"] != 5 ||
		!c.HTTPAllowLinkLocal || c.LogLevel != slog.LevelWarn || c.ShutdownTimeout != 6*time.Second || !c.HTTPAllowPrivate {
		t.Fatalf("file + env + flags: %+v", c)
	}
}

// TestServeSQLiteSynchronous: every source sets the SQLite store's
// durability, and the default stays full.
func TestServeSQLiteSynchronous(t *testing.T) {
	for _, how := range []struct {
		env  map[string]string
		args []string
	}{
		{nil, []string{"--sqlite-synchronous", "normal"}},
		{map[string]string{"REDRIVE_SQLITE_SYNCHRONOUS": "normal"}, nil},
		{nil, []string{"--config", writeFile(t, "sync.json", `{"sqlite-synchronous": "normal"}`)}},
	} {
		c, err := loadConfig(t, how.env, how.args...)
		if err != nil {
			t.Fatal(err)
		}
		if c.SQLiteSynchronous != "normal" {
			t.Errorf("%v %v: synchronous %q, want normal", how.env, how.args, c.SQLiteSynchronous)
		}
	}
}

func TestServeConfigErrors(t *testing.T) {
	bad := writeFile(t, "bad.json", `{"workers": "many"}`)
	unknown := writeFile(t, "unknown.json", `{"adr": "127.0.0.1:1"}`)
	notJSON := writeFile(t, "not.json", `addr = 1`)
	for _, tc := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{args: []string{"--addr", "nonsense"}, want: `--addr: "nonsense": want host:port`},
		{args: []string{"--addr", "127.0.0.1:99999"}, want: `--addr: "127.0.0.1:99999": port "99999" is not a number from 0 to 65535`},
		{env: map[string]string{"REDRIVE_WORKERS": "lots"}, want: `REDRIVE_WORKERS: "lots": not a number`},
		{args: []string{"--workers", "0"}, want: "--workers: 0: want 1 to 10000"},
		{args: []string{"--queues", "default=x"}, want: `--queues: queue "default": "x": not a number`},
		{args: []string{"--queues", "=3"}, want: "--queues: \"=3\": a queue has no name"},
		{args: []string{"--queues", "a,a"}, want: `--queues: queue "a" is listed twice`},
		{env: map[string]string{"REDRIVE_HTTP_ALLOW_PRIVATE": "maybe"}, want: `REDRIVE_HTTP_ALLOW_PRIVATE: "maybe": not a boolean`},
		{args: []string{"--shutdown-timeout", "soon"}, want: `--shutdown-timeout: "soon": not a duration`},
		{args: []string{"--shutdown-timeout", "3h"}, want: "--shutdown-timeout: 3h0m0s: want more than 0 and at most 1h0m0s"},
		{env: map[string]string{"REDRIVE_LOG_LEVEL": "loud"}, want: `REDRIVE_LOG_LEVEL: "loud": want debug, info, warn or error`},
		{args: []string{"--token", "two words"}, want: "--token: must not contain white space"},
		{args: []string{"--database-url", "postgres://u:secret@h:notaport/db"}, want: "--database-url: not a PostgreSQL URL"},
		{args: []string{"--schema", "Bad-Schema"}, want: `--schema: "Bad-Schema": want a lower-case identifier`},
		{args: []string{"--db", ""}, want: "--db: empty path"},
		{args: []string{"--sqlite-synchronous", "off"}, want: `--sqlite-synchronous: "off": want full or normal`},
		{env: map[string]string{"REDRIVE_SQLITE_SYNCHRONOUS": "NORMAL"}, want: `REDRIVE_SQLITE_SYNCHRONOUS: "NORMAL": want full or normal`},
		{args: []string{"--config", bad}, want: bad + `: workers: "many": not a number`},
		{args: []string{"--config", unknown}, want: unknown + `: unknown setting "adr"`},
		{args: []string{"--config", notJSON}, want: notJSON + ": not a JSON object of settings"},
		{args: []string{"--config", "/nonexistent/redrive.json"}, want: "--config: open /nonexistent/redrive.json"},
		{args: []string{"--allowed-host", "redrive.example:8080"}, want: `--allowed-host: "redrive.example:8080" is not a host name or IP address`},
		{args: []string{"--allowed-host", "*.example"}, want: `--allowed-host: "*.example" is not a host name`},
		{env: map[string]string{"REDRIVE_TRUSTED_PROXY": "10.0.0.0/33"}, want: `REDRIVE_TRUSTED_PROXY: "10.0.0.0/33" is not an IP address or CIDR prefix`},
		{args: []string{"--lease", "10ms"}, want: "--lease: 10ms: want from 1s to 24h0m0s"},
		{args: []string{"--key-retention", "forever"}, want: `--key-retention: "forever": not a duration`},
		{env: map[string]string{"REDRIVE_RETRY_BUDGET_RATIO": "0"}, want: `REDRIVE_RETRY_BUDGET_RATIO: "0": want a number above 0`},
		{args: []string{"--retry-budget-min", "-1"}, want: `--retry-budget-min: "-1": want a whole number`},
	} {
		_, err := loadConfig(t, tc.env, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v %v: err = %v, want %q", tc.env, tc.args, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("the error shows the password: %v", err)
		}
	}
}

func TestIsLoopback(t *testing.T) {
	for host, want := range map[string]bool{"127.0.0.1": true, "::1": true, "localhost": true, "127.1.2.3": true,
		"": false, "0.0.0.0": false, "::": false, "10.0.0.1": false, "example.com": false} {
		if got := IsLoopback(host); got != want {
			t.Errorf("isLoopback(%q) = %v, want %v", host, got, want)
		}
	}
}
