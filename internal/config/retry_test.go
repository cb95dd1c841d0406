package config

import (
	"strings"
	"testing"
	"time"

	"github.com/redrivehq/redrive/retry"
)

func TestServeRetryDefaults(t *testing.T) {
	c, err := loadConfig(t, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Retry != retry.DefaultPolicy() {
		t.Fatalf("default policy %+v, want retry.DefaultPolicy() %+v", c.Retry, retry.DefaultPolicy())
	}
	if len(c.QueueRetry) != 0 {
		t.Fatalf("queue policies without any configured: %v", c.QueueRetry)
	}
}

func TestServeRetryPrecedence(t *testing.T) {
	file := writeFile(t, "redrive.json", `{
		"retry": {"max_retries": 5, "base": "2s", "max": "5m", "jitter": "full", "multiplier": 3,
		          "jitter_factor": 0.5, "jitter-max": "1s", "max_retry_after": "10m"}
	}`)
	c, err := loadConfig(t, map[string]string{"REDRIVE_CONFIG": file})
	if err != nil {
		t.Fatal(err)
	}
	want := retry.Policy{MaxRetries: 5, Initial: 2 * time.Second, Multiplier: 3, MaxDelay: 5 * time.Minute,
		Jitter: retry.JitterFull, JitterFactor: 0.5, JitterMax: time.Second, MaxRetryAfter: 10 * time.Minute}
	if c.Retry != want {
		t.Fatalf("from the file: %+v, want %+v", c.Retry, want)
	}
	// The environment beats the file, flags beat both.
	env := map[string]string{"REDRIVE_CONFIG": file, "REDRIVE_RETRY_MAX_RETRIES": "7", "REDRIVE_RETRY_JITTER": "equal",
		"REDRIVE_RETRY_BASE": "3s"}
	c, err = loadConfig(t, env, "--retry-jitter", "none", "--retry-max", "1m")
	if err != nil {
		t.Fatal(err)
	}
	want.MaxRetries, want.Jitter, want.Initial, want.MaxDelay = 7, retry.JitterNone, 3*time.Second, time.Minute
	if c.Retry != want {
		t.Fatalf("file + env + flags: %+v, want %+v", c.Retry, want)
	}
	// Flat keys work in the file too.
	flat := writeFile(t, "flat.json", `{"retry-base": "100ms", "retry.max": "200ms", "retry_max_retries": 0}`)
	c, err = loadConfig(t, nil, "--config", flat)
	if err != nil {
		t.Fatal(err)
	}
	if c.Retry.Initial != 100*time.Millisecond || c.Retry.MaxDelay != 200*time.Millisecond || c.Retry.MaxRetries != 0 {
		t.Fatalf("flat keys: %+v", c.Retry)
	}
}

func TestServeQueueRetry(t *testing.T) {
	file := writeFile(t, "redrive.json", `{
		"workers": 4,
		"retry": {"max_retries": 5, "base": "1s", "max": "5m"},
		"queues": {
			"default": 10,
			"webhooks": {"workers": 50, "retry": {"max_retries": 10, "jitter": "decorrelated"}},
			"slow": {"retry": {"base": "10s", "max": "1h"}},
			"plain": {}
		}
	}`)
	c, err := loadConfig(t, map[string]string{"REDRIVE_CONFIG": file, "REDRIVE_RETRY_MAX": "10m"})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Queues) != 4 || c.Queues["default"] != 10 || c.Queues["webhooks"] != 50 || c.Queues["slow"] != 4 || c.Queues["plain"] != 4 {
		t.Fatalf("queues %v", c.Queues)
	}
	global := retry.DefaultPolicy()
	global.MaxRetries, global.Initial, global.MaxDelay = 5, time.Second, 10*time.Minute
	if c.Retry != global {
		t.Fatalf("default policy %+v, want %+v", c.Retry, global)
	}
	// A queue's retry object is on top of the default policy, whatever
	// source set it.
	webhooks := global
	webhooks.MaxRetries, webhooks.Jitter = 10, retry.JitterDecorrelated
	slow := global
	slow.Initial, slow.MaxDelay = 10*time.Second, time.Hour
	if len(c.QueueRetry) != 2 || c.QueueRetry["webhooks"] != webhooks || c.QueueRetry["slow"] != slow {
		t.Fatalf("queue policies %+v", c.QueueRetry)
	}
	// A queue's policy applies only while the queue is served.
	c, err = loadConfig(t, map[string]string{"REDRIVE_CONFIG": file}, "--queues", "webhooks=3,other")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.QueueRetry) != 1 || c.QueueRetry["webhooks"].MaxRetries != 10 || c.Queues["webhooks"] != 3 {
		t.Fatalf("queues %v, queue policies %+v", c.Queues, c.QueueRetry)
	}
}

func TestServeRetryErrors(t *testing.T) {
	files := map[string]string{}
	for name, content := range map[string]string{
		"jitter":        `{"retry": {"jitter": "wobbly"}}`,
		"unknown":       `{"retry": {"attempts": 3}}`,
		"notobject":     `{"retry": "fast"}`,
		"bool":          `{"retry": {"base": true}}`,
		"twice":         `{"retry-base": "1s", "retry": {"base": "2s"}}`,
		"maxbelow":      `{"retry": {"base": "10s", "max": "5s"}}`,
		"basetoobig":    `{"retry": {"base": "1m"}}`,
		"queuejitter":   `{"queues": {"webhooks": {"retry": {"jitter": "wobbly"}}}}`,
		"queuemax":      `{"queues": {"webhooks": {"workers": 5, "retry": {"max": "100ms"}}}}`,
		"queuekey":      `{"queues": {"webhooks": {"concurrency": 5}}}`,
		"queueworkers":  `{"queues": {"webhooks": {"workers": 1.5}}}`,
		"queueunknown":  `{"queues": {"webhooks": {"retry": {"colour": "red"}}}}`,
		"queueretrystr": `{"queues": {"webhooks": {"retry": 3}}}`,
		"queuezero":     `{"queues": {"webhooks": {"workers": 0}}}`,
	} {
		files[name] = writeFile(t, name+".json", content)
	}
	for _, tc := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{args: []string{"--retry-base", "0s"}, want: "--retry-base: 0s: want more than 0 and at most 168h0m0s"},
		{args: []string{"--retry-base", "-1s"}, want: "--retry-base: -1s: want more than 0"},
		{args: []string{"--retry-base", "soon"}, want: `--retry-base: "soon": not a duration`},
		{args: []string{"--retry-max", "200h"}, want: "--retry-max: 200h0m0s: want at most 168h0m0s"},
		{args: []string{"--retry-max-retries", "-1"}, want: "--retry-max-retries: -1: want 0 to 1000"},
		{args: []string{"--retry-max-retries", "1001"}, want: "--retry-max-retries: 1001: want 0 to 1000"},
		{args: []string{"--retry-max-retries", "3.5"}, want: `--retry-max-retries: "3.5": not a whole number`},
		{env: map[string]string{"REDRIVE_RETRY_JITTER": "wobbly"}, want: `REDRIVE_RETRY_JITTER: "wobbly": want none, proportional, full, equal, decorrelated or additive`},
		{args: []string{"--retry-multiplier", "0.5"}, want: "--retry-multiplier: 0.5: want 1 to 100"},
		{args: []string{"--retry-multiplier", "NaN"}, want: `--retry-multiplier: "NaN": not a number`},
		{args: []string{"--retry-jitter-factor", "1.5"}, want: "--retry-jitter-factor: 1.5: want 0 to 1"},
		{args: []string{"--retry-jitter-max", "-5ms"}, want: "--retry-jitter-max: -5ms: want at least 0"},
		{args: []string{"--retry-max-retry-after", "0"}, want: "--retry-max-retry-after: 0s: want more than 0"},
		// max >= base, naming both settings as their sources spell them.
		{args: []string{"--retry-base", "10s", "--retry-max", "5s"}, want: "--retry-max: 5s is less than the base delay 10s (--retry-base)"},
		{env: map[string]string{"REDRIVE_RETRY_BASE": "10s"}, args: []string{"--retry-max", "5s"}, want: "--retry-max: 5s is less than the base delay 10s (REDRIVE_RETRY_BASE)"},
		{args: []string{"--retry-max", "500ms"}, want: "--retry-max: 500ms is less than the base delay 1s (the default)"},
		{env: map[string]string{"REDRIVE_RETRY_BASE": "1m"}, want: "REDRIVE_RETRY_BASE: 1m0s is more than the max delay 30s (the default)"},
		{args: []string{"--config", files["maxbelow"]}, want: files["maxbelow"] + ": retry.max: 5s is less than the base delay 10s (" + files["maxbelow"] + ": retry.base)"},
		{args: []string{"--config", files["basetoobig"]}, want: files["basetoobig"] + ": retry.base: 1m0s is more than the max delay 30s"},
		{args: []string{"--config", files["jitter"]}, want: files["jitter"] + `: retry.jitter: "wobbly": want none, proportional`},
		{args: []string{"--config", files["unknown"]}, want: files["unknown"] + `: retry: unknown retry setting "attempts" (known: max_retries, base, max, multiplier, jitter, jitter_factor, jitter_max, max_retry_after, after_jitter, after_jitter_factor)`},
		{args: []string{"--config", files["notobject"]}, want: files["notobject"] + `: retry: want an object of retry settings`},
		{args: []string{"--config", files["bool"]}, want: files["bool"] + `: retry: base: want a string or a number, got true`},
		{args: []string{"--config", files["twice"]}, want: files["twice"] + `: retry.base: the setting retry-base is given twice (also as retry-base)`},
		{args: []string{"--config", files["queuejitter"]}, want: files["queuejitter"] + `: queues: queue "webhooks": retry.jitter: "wobbly": want none`},
		{args: []string{"--config", files["queuemax"]}, want: files["queuemax"] + `: queues: queue "webhooks": retry.max: 100ms is less than the base delay 1s (the default)`},
		{env: map[string]string{"REDRIVE_RETRY_BASE": "5s"}, args: []string{"--config", files["queuemax"]},
			want: files["queuemax"] + `: queues: queue "webhooks": retry.max: 100ms is less than the base delay 5s (REDRIVE_RETRY_BASE)`},
		{args: []string{"--config", files["queuekey"]}, want: files["queuekey"] + `: queues: queue "webhooks": unknown key "concurrency" (want workers, retry or classify)`},
		{args: []string{"--config", files["queueworkers"]}, want: files["queueworkers"] + `: queues: queue "webhooks": workers: want a whole number, got 1.5`},
		{args: []string{"--config", files["queueunknown"]}, want: files["queueunknown"] + `: queues: queue "webhooks": retry: unknown retry setting "colour"`},
		{args: []string{"--config", files["queueretrystr"]}, want: files["queueretrystr"] + `: queues: queue "webhooks": retry: want an object of retry settings`},
		{args: []string{"--config", files["queuezero"]}, want: files["queuezero"] + `: queues: queue "webhooks": 0: want 1 to 10000`},
	} {
		_, err := loadConfig(t, tc.env, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v %v:\n err = %v\nwant %q", tc.env, tc.args, err, tc.want)
		}
	}
}
