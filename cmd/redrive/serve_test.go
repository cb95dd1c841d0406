package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redrivehq/redrive/internal/config"
	"github.com/redrivehq/redrive/internal/sqlitetest"
)

// loadConfig parses args as `redrive serve`'s flags and loads the
// configuration with env as the environment.
func loadConfig(t *testing.T, env map[string]string, args ...string) (*config.Serve, error) {
	t.Helper()
	root := newRootCmd()
	cmd, _, err := root.Find([]string{"serve"})
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.ParseFlags(args); err != nil {
		return nil, err
	}
	return config.Load(cmd.Flags(), func(k string) string { return env[k] })
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestServeRefusesNonLoopbackWithoutToken(t *testing.T) {
	t.Setenv("REDRIVE_TOKEN", "")
	t.Setenv("REDRIVE_CONFIG", "")
	db := filepath.Join(t.TempDir(), "redrive.db")
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0", "192.0.2.1:8080"} {
		_, stderr, err := runCLI(t, "--db", db, "serve", "--addr", addr)
		if err == nil || !strings.Contains(stderr, "refusing to listen on a non-loopback address without a token") {
			t.Errorf("%s: err = %v, stderr = %q", addr, err, stderr)
		}
	}
	if _, err := os.Stat(db); !os.IsNotExist(err) {
		t.Errorf("the database was created before the refusal: %v", err)
	}
}

// TestServeSafeDefaults: private addresses are reachable by http jobs by
// default only from a loopback server; host lists and proxies parse.
func TestServeSafeDefaults(t *testing.T) {
	for _, c := range []struct {
		args []string
		want bool
	}{
		{nil, true},
		{[]string{"--addr", "0.0.0.0:8080", "--token", "0123456789abcdef"}, false},
		{[]string{"--addr", "0.0.0.0:8080", "--token", "0123456789abcdef", "--http-allow-private"}, true},
		{[]string{"--addr", "127.0.0.1:8080", "--http-allow-private=false"}, false},
	} {
		cfg, err := loadConfig(t, nil, c.args...)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.HTTPAllowPrivate != c.want {
			t.Errorf("%v: http-allow-private %v, want %v", c.args, cfg.HTTPAllowPrivate, c.want)
		}
	}
	cfg, err := loadConfig(t, nil, "--allowed-host", " Redrive.Example., 10.1.2.3,[::1]", "--trusted-proxy", "10.0.0.0/8, 192.0.2.7")
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(cfg.AllowedHosts) != "[redrive.example 10.1.2.3 ::1]" || fmt.Sprint(cfg.TrustedProxies) != "[10.0.0.0/8 192.0.2.7/32]" {
		t.Errorf("hosts %v, proxies %v", cfg.AllowedHosts, cfg.TrustedProxies)
	}
	for _, c := range []struct {
		host  string
		extra []string
		want  string
	}{
		{"127.0.0.1", nil, "[localhost 127.0.0.1 ::1 127.0.0.1]"},
		{"localhost", []string{"box"}, "[localhost 127.0.0.1 ::1 localhost box]"},
		{"0.0.0.0", nil, "[]"},
		{"", []string{"redrive.example"}, "[redrive.example]"},
		{"10.0.0.5", []string{"redrive.example"}, "[10.0.0.5 redrive.example]"},
	} {
		if got := fmt.Sprint(allowedHosts(c.host, c.extra)); got != c.want {
			t.Errorf("allowedHosts(%q, %v) = %s, want %s", c.host, c.extra, got, c.want)
		}
	}
}

// TestServeRefusesShortTokenBeyondLoopback: a token too short to guard a
// server reachable from the network is refused, naming --token.
func TestServeRefusesShortTokenBeyondLoopback(t *testing.T) {
	t.Setenv("REDRIVE_CONFIG", "")
	db := filepath.Join(t.TempDir(), "redrive.db")
	_, stderr, err := runCLI(t, "--db", db, "serve", "--addr", "0.0.0.0:0", "--token", "short-token")
	if err == nil || !strings.Contains(stderr, "--token: 11 characters is too short") {
		t.Errorf("err = %v, stderr = %q", err, stderr)
	}
}

// TestServeHostCheck: serve on loopback answers to its own names only, on
// every route (API, dashboard, metrics), and says where the dashboard is.
func TestServeHostCheck(t *testing.T) {
	base, logs := startServe(t, "--allowed-host", "redrive.internal")
	_, port, _ := strings.Cut(strings.TrimPrefix(base, "http://"), ":")
	get := func(path, host string) int {
		req, _ := http.NewRequest("GET", base+path, nil)
		req.Host = host
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	for _, path := range []string{"/v1/stats", "/", "/metrics", "/healthz"} {
		for _, host := range []string{"127.0.0.1:" + port, "localhost:" + port, "redrive.internal"} {
			if s := get(path, host); s != 200 {
				t.Errorf("%s with Host %s: %d, want 200", path, host, s)
			}
		}
		if s := get(path, "attacker.example:"+port); s != 421 {
			t.Errorf("%s with a foreign Host: %d, want 421", path, s)
		}
	}
	if !strings.Contains(logs.String(), `"msg":"dashboard: http://127.0.0.1:`+port+`/"`) {
		t.Errorf("serve does not log the dashboard's URL:\n%s", logs)
	}
}

// syncBuffer is a bytes buffer safe for the concurrent writes of a logger.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startServe runs serve in-process on 127.0.0.1:0 with a temporary SQLite
// database and returns its base URL.
func startServe(t *testing.T, args ...string) (base string, logs *syncBuffer) {
	t.Helper()
	args = append([]string{"--addr", "127.0.0.1:0", "--db", sqlitetest.Path(t),
		"--shutdown-timeout", "5s"}, args...)
	cfg, err := loadConfig(t, nil, args...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	logs = &syncBuffer{}
	addrC := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() { done <- runServe(ctx, cfg, logs, func(a net.Addr) { addrC <- a }) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Error("serve did not stop within 20s")
		}
	})
	select {
	case a := <-addrC:
		return "http://" + a.String(), logs
	case err := <-done:
		t.Fatalf("serve stopped: %v\n%s", err, logs)
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not start within 20s")
	}
	return "", nil
}

func call(t *testing.T, method, url, token, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func TestServeEndToEnd(t *testing.T) {
	var hits atomic.Int32
	var gotBody atomic.Value
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		gotBody.Store(string(b))
		if hits.Add(1) == 1 {
			http.Error(w, "warming up", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusAccepted)
	}))
	defer target.Close()

	const token = "s3cret-token"
	base, logs := startServe(t, "--token", token)

	// Health needs no token; the API and metrics do.
	if code, _ := call(t, "GET", base+"/healthz", "", ""); code != http.StatusOK {
		t.Fatalf("/healthz: %d", code)
	}
	if code, _ := call(t, "GET", base+"/v1/jobs", "", ""); code != http.StatusUnauthorized {
		t.Fatalf("/v1/jobs without a token: %d", code)
	}
	if code, _ := call(t, "GET", base+"/metrics", "", ""); code != http.StatusUnauthorized {
		t.Fatalf("/metrics without a token: %d", code)
	}

	payload := fmt.Sprintf(`{"kind":"http","payload":{"method":"POST","url":%q,"body":"hello"}}`, target.URL+"/hook")
	code, b := call(t, "POST", base+"/v1/jobs", token, payload)
	if code != http.StatusCreated {
		t.Fatalf("POST /v1/jobs: %d %s", code, b)
	}
	var job struct {
		ID      int64  `json:"id"`
		State   string `json:"state"`
		Attempt int    `json:"attempt"`
		History []struct {
			Class  string `json:"class"`
			Reason string `json:"reason"`
			Error  string `json:"error"`
		} `json:"history"`
	}
	if err := json.Unmarshal(b, &job); err != nil || job.ID == 0 {
		t.Fatalf("POST /v1/jobs: %v %s", err, b)
	}
	waitUntil(t, e2eWait, "the job completed", func() error {
		if job.State == "completed" {
			return nil
		}
		code, b = call(t, "GET", fmt.Sprintf("%s/v1/jobs/%d", base, job.ID), token, "")
		if code != http.StatusOK {
			t.Fatalf("GET job: %d %s", code, b)
		}
		if err := json.Unmarshal(b, &job); err != nil {
			t.Fatal(err)
		}
		if job.State == "dead" {
			t.Fatalf("job dead: %s", b)
		}
		return fmt.Errorf("still %s: %s\nlogs:\n%s", job.State, b, logs)
	})
	if job.Attempt != 2 || hits.Load() != 2 || gotBody.Load() != "hello" {
		t.Fatalf("attempts %d, hits %d, body %q", job.Attempt, hits.Load(), gotBody.Load())
	}
	if len(job.History) == 0 || job.History[0].Reason != "http_503" || !strings.Contains(job.History[0].Error, "warming up") {
		t.Fatalf("history %s", b)
	}

	// Metrics: real counts, per queue and state.
	code, b = call(t, "GET", base+"/metrics", token, "")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d %s", code, b)
	}
	for _, want := range []string{
		`redrive_jobs{queue="default",state="completed"} 1`,
		`redrive_retried_total{class="none",queue="default"} 1`,
		`redrive_failed_total{class="transient",queue="default"} 1`,
		`redrive_stats_up 1`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("/metrics lacks %q:\n%s", want, grepLines(string(b), "redrive_"))
		}
	}
	// Logs are JSON.
	for line := range strings.SplitSeq(strings.TrimSpace(logs.String()), "\n") {
		if !json.Valid([]byte(line)) {
			t.Fatalf("log line is not JSON: %s", line)
		}
	}
}

func TestServeMetricsWithoutToken(t *testing.T) {
	base, _ := startServe(t)
	code, b := call(t, "GET", base+"/metrics", "", "")
	if code != http.StatusOK || !strings.Contains(string(b), "redrive_stats_up 1") || !strings.Contains(string(b), "go_goroutines") {
		t.Fatalf("/metrics: %d\n%s", code, b)
	}
}

func grepLines(s, substr string) string {
	var out []string
	for l := range strings.SplitSeq(s, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestServeMetricsGuessesThrottled: wrong bearer tokens on /metrics count
// against the API's throttle: after five, /metrics and the API answer 429.
func TestServeMetricsGuessesThrottled(t *testing.T) {
	const token = "tok"
	base, _ := startServe(t, "--token", token)
	for i := range 5 {
		if code, b := call(t, "GET", base+"/metrics", "wrong", ""); code != http.StatusUnauthorized {
			t.Fatalf("wrong guess %d on /metrics: %d %s", i+1, code, b)
		}
	}
	if code, b := call(t, "GET", base+"/metrics", "wrong", ""); code != http.StatusTooManyRequests {
		t.Fatalf("sixth wrong guess on /metrics: %d %s, want 429", code, b)
	}
	if code, b := call(t, "GET", base+"/v1/stats", "wrong", ""); code != http.StatusTooManyRequests {
		t.Fatalf("a wrong guess on the API after five on /metrics: %d %s, want 429", code, b)
	}
}

// TestWeakToken: tokens of few distinct characters are flagged, generated
// ones are not.
func TestWeakToken(t *testing.T) {
	for _, tok := range []string{"aaaaaaaaaaaaaaaaaaaaaaaa", "passwordpassword", "abababababababababab", "tok", "1234512345123451"} {
		if !weakToken(tok) {
			t.Errorf("%q (%.0f bits at most) not flagged", tok, tokenBits(tok))
		}
	}
	for _, tok := range []string{"3f9c2a7be1d04c58a6e2f9b1", "0123456789abcdef-token", "c0rrect-H0rse-battery-Staple", "Zk8v_Qw2-Lp9xR4tYb7nM3sD"} {
		if weakToken(tok) {
			t.Errorf("%q (%.0f bits) flagged", tok, tokenBits(tok))
		}
	}
}

func TestServeRetryHelp(t *testing.T) {
	stdout, _, err := runCLI(t, "serve", "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"--retry-max-retries", "--retry-base", "--retry-max ", "--retry-jitter ", "$REDRIVE_RETRY_BASE",
		`"retry": {"max_retries": 5`} {
		if !strings.Contains(stdout, want) {
			t.Errorf("serve --help lacks %q", want)
		}
	}
}
