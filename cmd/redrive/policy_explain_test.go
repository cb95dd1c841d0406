package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestPolicyExplainClassifyAndBreaker: policy explain shows a queue's
// classification and the breaker of a dependency or of an http job's URL,
// as serve's settings make them.
func TestPolicyExplainClassifyAndBreaker(t *testing.T) {
	path := writeFile(t, "redrive.json", `{
		"classify": {"status": {"404": "transient"}},
		"breaker": {"failures": 10, "dependencies": {"payments": {"hosts": ["api.pay.example"], "failures": 3, "ratio": 0, "open_for": "30s", "probes": 2}}},
		"queues": {"webhooks": {"classify": {"status": {"409": "permanent"}, "rules": [{"contains": "quota", "class": "rate_limited"}]}}}
	}`)
	stdout, stderr, err := runCLI(t, "policy", "explain", "--config", path, "--queue", "webhooks", "--url", "https://api.pay.example/charge")
	if err != nil {
		t.Fatalf("%v (stderr %q)", err, stderr)
	}
	for _, want := range []string{
		"classification (queue webhooks):",
		"  HTTP 404: transient (built-in: permanent)",
		"  HTTP 409: permanent (built-in: permanent)",
		`  rule 1: message contains "quota" (any case): rate_limited`,
		"breaker payments (dependency of http jobs to api.pay.example):",
		"  trips on 3 failures within 30s, whatever the successes (count only)",
		"  stays open 30s, then lets 2 probes through; all must succeed to close it",
	} {
		if !strings.Contains(stdout, want+"\n") {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}

	// Another host: its own breaker, with the default settings (10 failures).
	stdout, _, err = runCLI(t, "policy", "explain", "--config", path, "--url", "https://other.example/x")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"classification (default):",
		"breaker other.example:443 (the host's own breaker, default settings):",
		"  trips on at least 10 failures making up at least 50% of the calls completed within 30s",
	} {
		if !strings.Contains(stdout, want+"\n") {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}

	// --json, with a dependency and flags on top of the file.
	stdout, _, err = runCLI(t, "--json", "policy", "explain", "--config", path, "--queue", "default", "--dependency", "payments",
		"--classify-rules", `[{"regexp":"^E1","class":"needs_auth"}]`, "--retry-after-jitter", "off")
	if err != nil {
		t.Fatal(err)
	}
	var got explainOutput
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, stdout)
	}
	if c := got.Classification; c == nil || c.OwnConfig || c.Status["404"] != "transient" || len(c.Rules) != 1 || c.Rules[0].Class != "needs_auth" {
		t.Errorf("classification = %+v", got.Classification)
	}
	if b := got.Breaker; b == nil || b.Dependency != "payments" || !b.Configured || b.Failures != 3 || !b.CountOnly || b.OpenForMS != 30000 ||
		b.Probes != 2 || len(b.Hosts) != 1 {
		t.Errorf("breaker = %+v", got.Breaker)
	}

	// Errors name the flag.
	_, _, err = runCLI(t, "policy", "explain", "--url", "ftp://x")
	if err == nil || !strings.Contains(err.Error(), "--url") {
		t.Errorf("--url ftp://x: %v", err)
	}
	_, _, err = runCLI(t, "policy", "explain", "--breaker-failures", "0")
	if err == nil || !strings.Contains(err.Error(), "--breaker-failures") {
		t.Errorf("--breaker-failures 0: %v", err)
	}
	_, _, err = runCLI(t, "policy", "explain", "--dependency", "a", "--url", "https://x/")
	if err == nil {
		t.Error("--dependency with --url accepted")
	}
}

// TestPolicyExplainRetryAfterJitter: the Retry-After jitter settings show
// in the explanation.
func TestPolicyExplainRetryAfterJitter(t *testing.T) {
	stdout, _, err := runCLI(t, "policy", "explain", "--retry-after-jitter", "5s", "--retry-after-jitter-factor", "0.5")
	if err != nil {
		t.Fatal(err)
	}
	if want := "a Retry-After ra longer than the backoff waits ra + rand(0, min(50% of ra, 5s)), never less than ra\n"; !strings.Contains(stdout, want) {
		t.Errorf("output lacks %q:\n%s", want, stdout)
	}
	stdout, _, err = runCLI(t, "policy", "explain", "--retry-after-jitter", "0")
	if err != nil {
		t.Fatal(err)
	}
	if want := "a Retry-After longer than the backoff is waited exactly, no jitter\n"; !strings.Contains(stdout, want) {
		t.Errorf("output lacks %q:\n%s", want, stdout)
	}
	_, _, err = runCLI(t, "policy", "explain", "--retry-after-jitter-factor", "0")
	if err == nil || !strings.Contains(err.Error(), "--retry-after-jitter-factor") {
		t.Errorf("factor 0: %v", err)
	}
}
