package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redrivehq/redrive/internal/config"
)

func TestPolicyExplainDefaults(t *testing.T) {
	stdout, stderr, err := runCLI(t, "policy", "explain")
	if err != nil {
		t.Fatalf("policy explain: %v (stderr %q)", err, stderr)
	}
	want := `policy: 3 retries (4 attempts), backoff min(1s * 2^n, 30s), jitter proportional +-10%, Retry-After honoured up to 1h
retry  base  delay        cumulative
1      1s    900ms..1.1s  900ms..1.1s
2      2s    1.8s..2.2s   2.7s..3.3s
3      4s    3.6s..4.4s   6.3s..7.7s
attempt 4 is the last: if it fails, give up (retries_exhausted)
permanent and needs_auth failures give up at once
a Retry-After ra longer than the backoff waits ra + rand(0, min(10% of ra, 1s)), never less than ra
classification (default):
  HTTP statuses: the built-in table (429 rate_limited; 408, 5xx transient; 401, 403 needs_auth; other 4xx permanent)
  no message rules: an error nothing else recognises is unknown (retried)
breaker default (every dependency not configured by name, and one per http host):
  trips on at least 5 failures making up at least 50% of the calls completed within 30s
  or on 5 failures in a row, each within 30s of the previous one, whatever the ratio
  stays open 1m, then lets 1 probe through
  rate-limited answers (429, 503 with Retry-After) do not count
`
	if stdout != want {
		t.Errorf("policy explain printed\n%s\nwant\n%s", stdout, want)
	}
}

func TestPolicyExplainFlags(t *testing.T) {
	stdout, _, err := runCLI(t, "policy", "explain", "--max-retries", "5", "--initial", "100ms", "--multiplier", "3",
		"--max-delay", "2s", "--jitter", "none", "--max-retry-after", "10m")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"policy: 5 retries (6 attempts), backoff min(100ms * 3^n, 2s), no jitter, Retry-After honoured up to 10m",
		"1      100ms  100ms  100ms",
		"4      2s     2s     3.3s", // 2.7s capped at 2s; 0.1+0.3+0.9+2
		"5      2s     2s     5.3s",
		"attempt 6 is the last",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
	stdout, _, err = runCLI(t, "policy", "explain", "--jitter", "additive", "--jitter-max", "250ms", "--max-retries", "1")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stdout, "jitter additive d + rand(0, 250ms)") || !strings.Contains(stdout, "1s..1.25s") {
		t.Errorf("additive jitter not explained:\n%s", stdout)
	}
}

func TestPolicyExplainJSON(t *testing.T) {
	stdout, _, err := runCLI(t, "--json", "policy", "explain", "--jitter", "full", "--max-retries", "2")
	if err != nil {
		t.Fatal(err)
	}
	var got explainOutput
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, stdout)
	}
	if got.Policy.Jitter != "full" || got.Policy.MaxRetries != 2 || got.Policy.MaxAttempts != 3 || got.Policy.InitialMS != 1000 {
		t.Errorf("policy = %+v", got.Policy)
	}
	if len(got.Schedule) != 2 {
		t.Fatalf("schedule has %d steps, want 2: %+v", len(got.Schedule), got.Schedule)
	}
	s := got.Schedule[1]
	if s.Retry != 2 || s.BaseMS != 2000 || s.MinMS != 0 || s.MaxMS != 2000 || s.CumMaxMS != 3000 {
		t.Errorf("step 2 = %+v, want base 2000, range 0..2000, cumulative max 3000", s)
	}
	if got.Truncated {
		t.Error("truncated set for a 2-retry policy")
	}
}

func TestPolicyExplainBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--multiplier", "0.5"}, []string{"--multiplier must be at least 1, got 0.5"}},
		{[]string{"--max-delay", "10ms"}, []string{"--max-delay must be at least --initial (1s), got 10ms"}},
		{[]string{"--max-retries", "-1", "--jitter-factor", "2"},
			[]string{"--max-retries must not be negative", "--jitter-factor must be between 0 and 1, got 2"}},
		{[]string{"--jitter", "bogus"}, []string{`invalid --jitter "bogus"`}},
		{[]string{"--initial", "soon"}, []string{`"--initial"`}},
		{[]string{"--jitter-max", "-1s", "--jitter", "additive"}, []string{"--jitter-max must not be negative"}},
	} {
		stdout, stderr, err := runCLI(t, append([]string{"policy", "explain"}, tc.args...)...)
		if err == nil {
			t.Errorf("%v: no error; printed %q", tc.args, stdout)
			continue
		}
		if stdout != "" {
			t.Errorf("%v: printed %q besides the error", tc.args, stdout)
		}
		for _, w := range tc.want {
			if !strings.Contains(stderr, w) {
				t.Errorf("%v: stderr %q lacks %q", tc.args, stderr, w)
			}
		}
		if !strings.Contains(stderr, "Run 'redrive policy explain --help' for usage.") {
			t.Errorf("%v: stderr %q lacks the pointer to --help", tc.args, stderr)
		}
	}
}

// TestPolicyExplainServeSettings: policy explain reads serve's retry
// settings: the config file (with a queue's own policy), the --retry-*
// flags and REDRIVE_RETRY_* variables; the short flags win.
func TestPolicyExplainServeSettings(t *testing.T) {
	t.Setenv(config.FileEnv, "")
	cfg := filepath.Join(t.TempDir(), "serve.json")
	if err := os.WriteFile(cfg, []byte(`{"retry": {"max_retries": 5, "base": "1s", "max": "5m", "jitter": "full"},
 "queues": {"default": 10, "webhooks": {"workers": 50, "retry": {"max_retries": 10, "jitter": "none"}}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		env  string
		want string
	}{
		{[]string{"--config", cfg, "--queue", "webhooks"}, "", "policy: 10 retries (11 attempts), backoff min(1s * 2^n, 5m), no jitter"},
		{[]string{"--config", cfg}, "", "policy: 5 retries (6 attempts), backoff min(1s * 2^n, 5m), jitter full"},
		{[]string{"--config", cfg, "--max-retries", "1"}, "", "policy: 1 retry (2 attempts), backoff min(1s * 2^n, 5m), jitter full"},
		{[]string{"--retry-max-retries", "7", "--retry-jitter", "none"}, "", "policy: 7 retries (8 attempts), backoff min(1s * 2^n, 30s), no jitter"},
		{nil, cfg, "policy: 5 retries (6 attempts)"},
	} {
		t.Setenv(config.FileEnv, c.env)
		stdout, stderr, err := runCLI(t, append([]string{"policy", "explain"}, c.args...)...)
		if err != nil || !strings.HasPrefix(stdout, c.want) {
			t.Errorf("policy explain %v: %v %q\n%s\nwant %q", c.args, err, stderr, stdout, c.want)
		}
	}
	t.Setenv(config.FileEnv, "")
	_, stderr, err := runCLI(t, "policy", "explain", "--config", cfg, "--queue", "nope")
	if err != nil || !strings.Contains(stderr, "queue nope has no retry policy of its own") {
		t.Errorf("--queue nope: %v %q", err, stderr)
	}
	_, stderr, err = runCLI(t, "policy", "explain", "--retry-max", "1ms")
	if err == nil || !strings.Contains(stderr, "--retry-max: 1ms is less than the base delay") {
		t.Errorf("--retry-max 1ms: %v %q", err, stderr)
	}
}
