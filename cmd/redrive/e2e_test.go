package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/internal/sqlitetest"
	"github.com/redrivehq/redrive/store"
)

// The end-to-end tests build the real redrive binary, run `redrive serve`
// as its own process, enqueue http jobs against an httptest server that
// fails on purpose, and check how each ends, as docs/design.md says, through
// the REST API and through the CLI binary.

// e2eWait bounds every wait for an outcome. Outcomes are polled, never
// waited for with a fixed sleep; the bound only turns a hang into a
// failure.
const e2eWait = 30 * time.Second

// The short retry policy the scenario's server runs with: delays of 50ms,
// 100ms, 200ms without jitter, so that every delay is exact.
const (
	e2eBase       = 50 * time.Millisecond
	e2eMax        = 200 * time.Millisecond
	e2eMaxRetries = 3
	// e2eQueueMaxRetries is the max_retries of the "webhooks" queue's own
	// policy, from the config file.
	e2eQueueMaxRetries = 1
)

func TestE2E(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the redrive binary")
	}
	bin := buildRedrive(t)
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		const token = "e2e-sqlite-token"
		// The default policy from flags, the queue's from the file; the
		// token from the environment.
		s := startRedrive(t, bin, []string{"REDRIVE_TOKEN=" + token},
			"--db", filepath.Join(dir, "redrive.db"), "--addr", "127.0.0.1:0", "--config", e2eConfigFile(t, false),
			"--retry-base", e2eBase.String(), "--retry-max", e2eMax.String(),
			"--retry-max-retries", fmt.Sprint(e2eMaxRetries), "--retry-jitter", "none")
		s.token = token
		runScenario(t, s)
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		u := pgURL(t)
		schema := "e2e_" + randomHex(t, 6)
		t.Cleanup(func() { dropSchema(t, u, schema) })
		const token = "e2e-postgres-token"
		// The whole default policy from the file's "retry" object, the
		// database URL from the environment, the token from a flag.
		s := startRedrive(t, bin, []string{"REDRIVE_DATABASE_URL=" + u},
			"--schema", schema, "--addr", "127.0.0.1:0", "--config", e2eConfigFile(t, true), "--token", token)
		s.token = token
		runScenario(t, s)
	})
	t.Run("sigterm", func(t *testing.T) {
		t.Parallel()
		testSIGTERM(t, bin, "--db", sqlitetest.Path(t))
	})
	t.Run("sigterm-postgres", func(t *testing.T) {
		t.Parallel()
		u := pgURL(t)
		schema := "e2e_" + randomHex(t, 6)
		t.Cleanup(func() { dropSchema(t, u, schema) })
		testSIGTERM(t, bin, "--database-url", u, "--schema", schema)
	})
}

// buildRedrive builds the redrive binary into a temporary folder with
// the go command of the toolchain running the test, and the test's own
// race mode, so that the build reuses the packages the test compiled.
func buildRedrive(t *testing.T) string {
	t.Helper()
	// One build serves every test of the run: each test building its own
	// (eleven tests do) linked a -race binary of this package eleven
	// times, minutes of a loaded machine's CPU each time (4 min 39 s for
	// one of them beside other test runs), all to the same bytes. Tests
	// that need it at once wait for the one build.
	built.Lock()
	defer built.Unlock()
	if built.bin == "" && built.err == nil {
		built.bin, built.err = goBuildRedrive(t)
	}
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.bin
}

// built is the redrive binary built for this test run (buildRedrive), in
// a directory TestMain removes at the end of the run.
var built struct {
	sync.Mutex
	dir, bin string
	err      error
}

// removeBuilt removes the binary buildRedrive built, if any.
func removeBuilt() {
	built.Lock()
	defer built.Unlock()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
}

// goBuildRedrive builds this package's binary (with -race when the tests
// run with it) into a directory of its own, logging how long it took.
func goBuildRedrive(t *testing.T) (string, error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("the go command is needed to build redrive: %w", err)
	}
	// The go in PATH may stand for another toolchain: use the one whose
	// GOROOT it reports.
	if out, err := exec.Command(goBin, "env", "GOROOT").Output(); err == nil {
		candidate := filepath.Join(strings.TrimSpace(string(out)), "bin", "go")
		if runtime.GOOS == "windows" {
			candidate += ".exe"
		}
		if _, err := os.Stat(candidate); err == nil {
			goBin = candidate
		}
	}
	if out, err := exec.Command(goBin, "env", "GOVERSION").Output(); err == nil && strings.TrimSpace(string(out)) != runtime.Version() {
		t.Logf("note: %s is %s, the test runs on %s", goBin, strings.TrimSpace(string(out)), runtime.Version())
	}
	dir, err := os.MkdirTemp("", "redrive-test-bin-")
	if err != nil {
		return "", err
	}
	built.dir = dir
	bin := filepath.Join(dir, "redrive")
	if runtime.GOOS == "windows" {
		bin += ".exe"
	}
	args := []string{"build", "-o", bin}
	if raceEnabled() {
		args = append(args, "-race")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	start := time.Now()
	cmd := exec.CommandContext(ctx, goBin, append(args, ".")...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("built %s in %s (race %v)", bin, time.Since(start).Round(time.Millisecond), raceEnabled())
	return bin, nil
}

// raceEnabled reports whether the test binary was built with -race.
func raceEnabled() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}

func randomHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// e2eConfigFile writes the scenario's config file: queue "default" and
// queue "webhooks" with a policy of its own (only max_retries; the rest is
// the default policy's). With withRetry, the file also sets the default
// policy.
func e2eConfigFile(t *testing.T, withRetry bool) string {
	t.Helper()
	cfg := map[string]any{
		"queues": map[string]any{
			"default":  10,
			"webhooks": map[string]any{"workers": 2, "retry": map[string]any{"max_retries": e2eQueueMaxRetries}},
		},
		"shutdown-timeout": "10s",
		// Every failure mode of the scenario is a path of one test
		// host, whose breaker (one per host by default) must not fence
		// off the others: the scenario is about each job's own fate.
		"breaker": map[string]any{"failures": 1000},
	}
	if withRetry {
		cfg["retry"] = map[string]any{"max_retries": e2eMaxRetries, "base": e2eBase.String(), "max": e2eMax.String(), "jitter": "none"}
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return writeFile(t, "redrive.json", string(b))
}

// cleanEnv is the test's environment without any REDRIVE_ variable, so
// that the binaries run with exactly the settings a test gives. A binary
// built with -race would sleep a second at exit by default: not here.
func cleanEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "REDRIVE_") && !strings.HasPrefix(kv, "GORACE=") {
			env = append(env, kv)
		}
	}
	env = append(env, strings.TrimSpace("GORACE="+os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	return append(env, extra...)
}

// redriveProc is a running `redrive serve`.
type redriveProc struct {
	t     *testing.T
	bin   string
	cmd   *exec.Cmd
	base  string // http://host:port of its API
	token string
	out   *logWatcher
	done  chan struct{} // closed when the process has exited
	err   error         // its exit status, once done is closed
}

// logWatcher collects a process's output and reports the address of the
// first "redrive serving" log line.
type logWatcher struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	scanned int
	addr    chan string
	found   bool
}

func (w *logWatcher) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	for !w.found {
		rest := w.buf.Bytes()[w.scanned:]
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			break
		}
		line := rest[:i]
		w.scanned += i + 1
		var rec struct {
			Msg  string `json:"msg"`
			Addr string `json:"addr"`
		}
		if json.Unmarshal(line, &rec) == nil && rec.Msg == "redrive serving" && rec.Addr != "" {
			w.found = true
			w.addr <- rec.Addr
		}
	}
	return len(p), nil
}

func (w *logWatcher) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// startRedrive starts `redrive serve` with the given extra environment
// and flags, and waits until it logs the address it listens on. The
// process is stopped (SIGTERM, then killed) when the test ends.
func startRedrive(t *testing.T, bin string, env []string, args ...string) *redriveProc {
	t.Helper()
	p := launchRedrive(t, bin, env, args...)
	select {
	case addr := <-p.out.addr:
		p.base = "http://" + addr
	case <-p.done:
		t.Fatalf("redrive serve exited before serving (%v):\n%s", p.err, p.out)
	case <-time.After(e2eWait):
		t.Fatalf("redrive serve did not log its address within %s:\n%s", e2eWait, p.out)
	}
	return p
}

// launchRedrive starts `redrive serve` with the given extra environment
// and flags, without waiting for anything. The process is stopped
// (SIGTERM, then killed) when the test ends, and its output is shown if
// the test failed.
func launchRedrive(t *testing.T, bin string, env []string, args ...string) *redriveProc {
	t.Helper()
	p := &redriveProc{t: t, bin: bin, out: &logWatcher{addr: make(chan string, 1)}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, append([]string{"serve"}, args...)...)
	p.cmd.Env = cleanEnv(env...)
	p.cmd.Stdout = p.out
	p.cmd.Stderr = p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.stop()
		if strings.Contains(p.out.String(), "WARNING: DATA RACE") {
			t.Errorf("the race detector found a data race in redrive serve")
		}
		if t.Failed() {
			t.Logf("redrive serve's output:\n%s", p.out)
		}
	})
	return p
}

// stop ends the process if it still runs: SIGTERM, after which it must
// exit 0, or else a kill.
func (p *redriveProc) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		if p.err != nil {
			p.t.Errorf("redrive serve exited with %v after SIGTERM, want 0", p.err)
		}
	case <-time.After(e2eWait):
		p.t.Errorf("redrive serve did not stop within %s of SIGTERM; killing it", e2eWait)
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// api calls the server's REST API with its token.
func (p *redriveProc) api(method, path, body string) (int, []byte) {
	p.t.Helper()
	return call(p.t, method, p.base+path, p.token, body)
}

// cli runs the redrive binary against the server (--server, --token)
// with --json and returns its standard output.
func (p *redriveProc) cli(args ...string) []byte {
	p.t.Helper()
	args = append(args, "--json", "--server", p.base, "--token", p.token)
	stdout, stderr, err := runRedrive(p.t, p.bin, args...)
	if err != nil {
		p.t.Fatalf("redrive %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, stdout, stderr)
	}
	return stdout
}

// runRedrive runs the binary with a clean environment.
func runRedrive(t *testing.T, bin string, args ...string) (stdout, stderr []byte, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), e2eWait)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = cleanEnv()
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	if strings.Contains(errOut.String(), "WARNING: DATA RACE") {
		t.Errorf("the race detector found a data race in redrive %s:\n%s", strings.Join(args, " "), errOut.String())
	}
	return out.Bytes(), errOut.Bytes(), err
}

// enqueue enqueues an http job through the API and returns its id.
func (p *redriveProc) enqueue(queue, url string) int64 {
	p.t.Helper()
	body, _ := json.Marshal(map[string]any{"kind": "http", "queue": queue, "payload": map[string]string{"method": "POST", "url": url}})
	code, b := p.api("POST", "/v1/jobs", string(body))
	if code != http.StatusCreated {
		p.t.Fatalf("POST /v1/jobs %s: %d %s", body, code, b)
	}
	var j store.Job
	if err := json.Unmarshal(b, &j); err != nil || j.ID == 0 {
		p.t.Fatalf("POST /v1/jobs: %v %s", err, b)
	}
	return j.ID
}

// job reads a job and its history through the API.
func (p *redriveProc) job(id int64) *store.Job {
	p.t.Helper()
	code, b := p.api("GET", fmt.Sprintf("/v1/jobs/%d", id), "")
	if code != http.StatusOK {
		p.t.Fatalf("GET /v1/jobs/%d: %d %s", id, code, b)
	}
	var j store.Job
	if err := json.Unmarshal(b, &j); err != nil {
		p.t.Fatalf("GET /v1/jobs/%d: %v\n%s", id, err, b)
	}
	return &j
}

// waitState polls the API until the job is in state want, and fails if
// it reaches another final state or the wait bound passes.
func (p *redriveProc) waitState(id int64, want redrive.State) *store.Job {
	p.t.Helper()
	var j *store.Job
	waitUntil(p.t, e2eWait, fmt.Sprintf("job %d is %s", id, want), func() error {
		j = p.job(id)
		if j.State == want {
			return nil
		}
		if j.State == redrive.Completed || j.State == redrive.Dead || j.State == redrive.Canceled {
			p.t.Fatalf("job %d ended %s, want %s: %s", id, j.State, want, dump(j))
		}
		return fmt.Errorf("still %s: %s", j.State, dump(j))
	})
	return j
}

func dump(v any) string {
	b, _ := json.MarshalIndent(v, "", "  ")
	return string(b)
}

// flakyTarget is the httptest server the jobs call. Each path fails in
// its own way and counts its hits.
type flakyTarget struct {
	*httptest.Server
	mu     sync.Mutex
	hits   map[string][]time.Time
	healed atomic.Bool // /broken answers 200 once set
}

func newFlakyTarget(t *testing.T) *flakyTarget {
	ft := &flakyTarget{hits: map[string][]time.Time{}}
	ft.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ft.mu.Lock()
		ft.hits[r.URL.Path] = append(ft.hits[r.URL.Path], time.Now())
		n := len(ft.hits[r.URL.Path])
		ft.mu.Unlock()
		switch {
		case r.URL.Path == "/flaky": // 503 once, then fine
			if n == 1 {
				http.Error(w, "warming up", http.StatusServiceUnavailable)
				return
			}
			io.WriteString(w, "ready now")
		case r.URL.Path == "/gone": // not found, for good
			http.Error(w, "no such hook", http.StatusNotFound)
		case r.URL.Path == "/limited": // rate limited once, asking for 1s
			if n == 1 {
				w.Header().Set("Retry-After", "1")
				http.Error(w, "slow down", http.StatusTooManyRequests)
				return
			}
			w.WriteHeader(http.StatusOK)
		case r.URL.Path == "/busy": // 503 with Retry-After once
			if n == 1 {
				w.Header().Set("Retry-After", "1")
				http.Error(w, "overloaded", http.StatusServiceUnavailable)
				return
			}
			w.WriteHeader(http.StatusOK)
		case r.URL.Path == "/auth": // credentials refused
			http.Error(w, "bad token", http.StatusUnauthorized)
		case strings.HasPrefix(r.URL.Path, "/broken"): // 500 until healed
			if !ft.healed.Load() {
				http.Error(w, "kaput", http.StatusInternalServerError)
				return
			}
			w.WriteHeader(http.StatusNoContent)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(ft.Close)
	return ft
}

// hitTimes returns when path was requested.
func (ft *flakyTarget) hitTimes(path string) []time.Time {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	return append([]time.Time(nil), ft.hits[path]...)
}

// wantEvent checks one history event.
func wantEvent(t *testing.T, j *store.Job, i int, kind store.EventKind, attempt int, class failure.Class, reason string) store.Event {
	t.Helper()
	if i >= len(j.History) {
		t.Fatalf("job %d: no event %d: %s", j.ID, i, dump(j))
	}
	ev := j.History[i]
	wantClass := ""
	if kind == store.EventRetry || kind == store.EventDead {
		wantClass = class.String()
	}
	if ev.Kind != kind || ev.Attempt != attempt || ev.Class != wantClass || (reason != "" && ev.Reason != reason) {
		t.Fatalf("job %d: event %d is %+v, want kind %s, attempt %d, class %q, reason %q\n%s",
			j.ID, i, ev, kind, attempt, wantClass, reason, dump(j))
	}
	return ev
}

// runScenario enqueues one job per failure mode and checks how each ends,
// through the API and the CLI, then redrives the dead /broken job once
// the target is healed.
func runScenario(t *testing.T, s *redriveProc) {
	began, last := time.Now(), time.Now()
	phase := func(name string) {
		t.Logf("%-38s %8s (total %s)", name, time.Since(last).Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
		last = time.Now()
	}
	target := newFlakyTarget(t)
	flaky := s.enqueue("", target.URL+"/flaky")
	limited := s.enqueue("", target.URL+"/limited")
	broken := s.enqueue("", target.URL+"/broken")
	webhooks := s.enqueue("webhooks", target.URL+"/broken/webhooks")
	busy := s.enqueue("", target.URL+"/busy")
	auth := s.enqueue("", target.URL+"/auth")
	// The /gone job is enqueued through the CLI.
	var goneJob store.Job
	if err := json.Unmarshal(s.cli("enqueue", "http", "--payload", fmt.Sprintf(`{"url":%q}`, target.URL+"/gone")), &goneJob); err != nil || goneJob.ID == 0 {
		t.Fatalf("redrive enqueue: %v %+v", err, goneJob)
	}
	gone := goneJob.ID

	// 503 then 200: completed on attempt 2, the 503 in the history as a
	// transient failure retried after the base delay.
	j := s.waitState(flaky, redrive.Completed)
	// The history is the failed attempt, then the success with the
	// response's status and body.
	if j.Attempt != 2 || j.RetryCount != 1 || len(j.History) != 2 || j.FinishedAt == nil || len(target.hitTimes("/flaky")) != 2 {
		t.Fatalf("/flaky: attempt %d, retries %d, %d hits: %s", j.Attempt, j.RetryCount, len(target.hitTimes("/flaky")), dump(j))
	}
	ev := wantEvent(t, j, 0, store.EventRetry, 1, failure.Transient, "http_503")
	if !strings.Contains(ev.Error, "503") || !strings.Contains(ev.Error, "warming up") || time.Duration(ev.Delay) != e2eBase {
		t.Fatalf("/flaky: first attempt %+v, want the 503 and its body, retried after %s", ev, e2eBase)
	}
	if ev := wantEvent(t, j, 1, store.EventCompleted, 2, 0, "http_200"); !strings.Contains(ev.Note, "200 OK: ready now") || ev.Duration <= 0 {
		t.Fatalf("/flaky: completing attempt %+v, want the 200 and its body", ev)
	}

	phase("/flaky completed")
	// 404: dead after exactly one attempt, permanent.
	j = s.waitState(gone, redrive.Dead)
	if j.Attempt != 1 || j.RetryCount != 0 || len(j.History) != 1 || j.LastErrorClass != failure.Permanent ||
		j.DeadReason != "permanent" || !strings.Contains(j.LastError, "404") || len(target.hitTimes("/gone")) != 1 {
		t.Fatalf("/gone: %d hits: %s", len(target.hitTimes("/gone")), dump(j))
	}
	wantEvent(t, j, 0, store.EventDead, 1, failure.Permanent, "http_404")

	phase("/gone dead")
	// 429 with Retry-After: 1, then 200: completed, rate limited, and the
	// retry waited the second the server asked for.
	j = s.waitState(limited, redrive.Completed)
	if j.Attempt != 2 || len(j.History) != 2 {
		t.Fatalf("/limited: %s", dump(j))
	}
	wantEvent(t, j, 1, store.EventCompleted, 2, 0, "http_200")
	ev = wantEvent(t, j, 0, store.EventRetry, 1, failure.RateLimited, "http_429")
	if time.Duration(ev.Delay) < time.Second {
		t.Fatalf("/limited: retry delay %s, want at least the Retry-After of 1s: %s", time.Duration(ev.Delay), dump(j))
	}
	// The retry was due a second after the failure at least, and the
	// target saw it no sooner. (attempted_at is not compared: the worker
	// leases a job up to its 20ms lookahead before it is due, and the
	// store stamps attempted_at at the lease.)
	if due := j.RunAt.Sub(ev.At); due < time.Second {
		t.Fatalf("/limited: the retry was due %s after attempt 1 started, want at least 1s: %s", due, dump(j))
	}
	if hits := target.hitTimes("/limited"); len(hits) != 2 || hits[1].Sub(hits[0]) < time.Second {
		t.Fatalf("/limited: the target saw %d requests, %v apart; want 2, at least 1s apart", len(hits), hits)
	}
	// 503 with Retry-After is rate limiting too.
	j = s.waitState(busy, redrive.Completed)
	if j.Attempt != 2 || len(j.History) != 2 || j.RunAt.Sub(j.History[0].At) < time.Second {
		t.Fatalf("/busy: %s", dump(j))
	}
	if ev := wantEvent(t, j, 0, store.EventRetry, 1, failure.RateLimited, "http_503"); time.Duration(ev.Delay) < time.Second {
		t.Fatalf("/busy: retry delay %s, want at least the Retry-After of 1s", time.Duration(ev.Delay))
	}

	// 401: dead at once, needs_auth.
	j = s.waitState(auth, redrive.Dead)
	if j.Attempt != 1 || j.LastErrorClass != failure.NeedsAuth || j.DeadReason != "needs_auth" || len(target.hitTimes("/auth")) != 1 {
		t.Fatalf("/auth: %s", dump(j))
	}
	wantEvent(t, j, 0, store.EventDead, 1, failure.NeedsAuth, "http_401")
	phase("/limited, /busy completed, /auth dead")
	// Always 500: dead after max_retries+1 attempts, every one transient,
	// the delays those of the configured policy.
	j = s.waitState(broken, redrive.Dead)
	if j.Attempt != e2eMaxRetries+1 || j.RetryCount != e2eMaxRetries || len(j.History) != e2eMaxRetries+1 ||
		j.LastErrorClass != failure.Transient || j.DeadReason != "retries_exhausted" || len(target.hitTimes("/broken")) != e2eMaxRetries+1 {
		t.Fatalf("/broken: %d hits: %s", len(target.hitTimes("/broken")), dump(j))
	}
	for i, want := range []time.Duration{e2eBase, 2 * e2eBase, e2eMax} {
		ev := wantEvent(t, j, i, store.EventRetry, i+1, failure.Transient, "http_500")
		if time.Duration(ev.Delay) != want {
			t.Fatalf("/broken: retry %d after %s, want %s (base %s, max %s, no jitter): %s", i+1, time.Duration(ev.Delay), want, e2eBase, e2eMax, dump(j))
		}
	}
	wantEvent(t, j, e2eMaxRetries, store.EventDead, e2eMaxRetries+1, failure.Transient, "http_500")

	phase("/broken dead")
	// The same in queue "webhooks": its own policy allows one retry.
	j = s.waitState(webhooks, redrive.Dead)
	if j.Queue != "webhooks" || j.Attempt != e2eQueueMaxRetries+1 || len(j.History) != e2eQueueMaxRetries+1 || j.DeadReason != "retries_exhausted" {
		t.Fatalf("/broken/webhooks: %s", dump(j))
	}
	if ev := wantEvent(t, j, 0, store.EventRetry, 1, failure.Transient, "http_500"); time.Duration(ev.Delay) != e2eBase {
		t.Fatalf("/broken/webhooks: retried after %s, want the default policy's base %s", time.Duration(ev.Delay), e2eBase)
	}

	phase("/broken/webhooks dead")
	// The CLI shows each job as the API does.
	for _, id := range []int64{flaky, gone, limited, busy, auth, broken, webhooks} {
		want := s.job(id)
		var got store.Job
		out := s.cli("jobs", "show", fmt.Sprint(id))
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("redrive jobs show %d: %v\n%s", id, err, out)
		}
		if got.ID != id || got.State != want.State || got.Attempt != want.Attempt || got.LastErrorClass != want.LastErrorClass ||
			got.DeadReason != want.DeadReason || len(got.History) != len(want.History) || got.Fingerprint != want.Fingerprint {
			t.Fatalf("redrive jobs show %d: %s\nthe API says: %s", id, dump(got), dump(want))
		}
		for i := range got.History {
			if got.History[i].Kind != want.History[i].Kind || got.History[i].Class != want.History[i].Class ||
				got.History[i].Delay != want.History[i].Delay || !got.History[i].At.Equal(want.History[i].At) ||
				got.History[i].Note != want.History[i].Note {
				t.Fatalf("redrive jobs show %d: event %d is %+v, the API says %+v", id, i, got.History[i], want.History[i])
			}
		}
	}
	phase("jobs show (CLI) x7, wrong token")
	// A wrong token is refused, and the CLI says so.
	if _, stderr, err := runRedrive(t, s.bin, "jobs", "show", fmt.Sprint(flaky), "--server", s.base, "--token", "wrong"); err == nil ||
		!strings.Contains(strings.ToLower(string(stderr)), "unauthorized") {
		t.Fatalf("redrive jobs show with a wrong token: err %v, stderr %s", err, stderr)
	}
	// The DLQ holds exactly the four dead jobs, through the CLI and the API.
	wantDead := map[int64]bool{gone: true, auth: true, broken: true, webhooks: true}
	var page store.ListResult
	out := s.cli("dlq", "ls")
	if err := json.Unmarshal(out, &page); err != nil {
		t.Fatalf("redrive dlq ls: %v\n%s", err, out)
	}
	checkDead := func(src string, page store.ListResult) {
		t.Helper()
		if len(page.Jobs) != len(wantDead) {
			t.Fatalf("%s: %d dead jobs, want %d: %s", src, len(page.Jobs), len(wantDead), dump(page))
		}
		for _, j := range page.Jobs {
			if !wantDead[j.ID] || j.State != redrive.Dead {
				t.Fatalf("%s: unexpected job %d (%s): %s", src, j.ID, j.State, dump(page))
			}
		}
	}
	checkDead("redrive dlq ls", page)
	code, b := s.api("GET", "/v1/dlq", "")
	if code != http.StatusOK {
		t.Fatalf("GET /v1/dlq: %d %s", code, b)
	}
	page = store.ListResult{}
	if err := json.Unmarshal(b, &page); err != nil {
		t.Fatalf("GET /v1/dlq: %v\n%s", err, b)
	}
	checkDead("GET /v1/dlq", page)
	// Grouped by cause: the 404 and the 401 apart from the 500s.
	var groups struct {
		Groups []store.Group `json:"groups"`
	}
	out = s.cli("dlq", "groups")
	if err := json.Unmarshal(out, &groups); err != nil {
		t.Fatalf("redrive dlq groups: %v\n%s", err, out)
	}
	byClass := map[string]int64{}
	for _, g := range groups.Groups {
		byClass[g.Class] += g.Count
	}
	if byClass["permanent"] != 1 || byClass["needs_auth"] != 1 || byClass["transient"] != 2 || len(byClass) != 3 {
		t.Fatalf("redrive dlq groups: %v: %s", byClass, out)
	}

	phase("dlq ls, groups (CLI, API)")
	// Heal /broken and redrive its job with the CLI: it completes on the
	// first attempt after the redrive, its history kept.
	target.healed.Store(true)
	var prog redrive.RedriveProgress
	out = s.cli("dlq", "redrive", fmt.Sprint(broken))
	if err := json.Unmarshal(out, &prog); err != nil || prog.Redriven != 1 || prog.Matched != 1 {
		t.Fatalf("redrive dlq redrive %d: %v %s", broken, err, out)
	}
	j = s.waitState(broken, redrive.Completed)
	if j.Attempt != 1 || j.Redriven != 1 || len(j.History) != e2eMaxRetries+3 || len(target.hitTimes("/broken")) != e2eMaxRetries+2 {
		t.Fatalf("/broken after the redrive: %d hits: %s", len(target.hitTimes("/broken")), dump(j))
	}
	wantEvent(t, j, e2eMaxRetries+1, store.EventRedriven, 0, 0, "")
	wantEvent(t, j, e2eMaxRetries+2, store.EventCompleted, 1, 0, "http_204")
	phase("redriven /broken completed")
	var shown store.Job
	out = s.cli("jobs", "show", fmt.Sprint(broken))
	if err := json.Unmarshal(out, &shown); err != nil || shown.State != redrive.Completed || shown.Redriven != 1 || len(shown.History) != len(j.History) {
		t.Fatalf("redrive jobs show %d after the redrive: %v %s", broken, err, out)
	}
	// The other dead jobs stay dead.
	if j := s.job(webhooks); j.State != redrive.Dead {
		t.Fatalf("/broken/webhooks was not redriven but is %s", j.State)
	}
	phase("jobs show (CLI) after the redrive")
}

// testSIGTERM stops the binary with SIGTERM while jobs run: it waits for
// them, cancels the one that outlives --shutdown-timeout (back to pending
// without using an attempt) and exits 0; a restart finishes that job.
// storeArgs select the store, for serve and for the CLI alike.
func testSIGTERM(t *testing.T, bin string, storeArgs ...string) {
	if runtime.GOOS == "windows" {
		t.Skip("no SIGTERM on Windows")
	}
	arrived := make(chan string, 16)
	release := make(chan struct{})
	var stuckFixed atomic.Bool
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/stuck" && stuckFixed.Load() {
			w.WriteHeader(http.StatusOK)
			return
		}
		arrived <- r.URL.Path
		switch r.URL.Path {
		case "/hold": // answers once released
			select {
			case <-release:
				w.WriteHeader(http.StatusOK)
			case <-r.Context().Done():
			}
		case "/stuck": // never answers
			<-r.Context().Done()
		}
	}))
	defer target.Close()
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()

	args := append([]string{"--addr", "127.0.0.1:0", "--shutdown-timeout", "1s"}, storeArgs...)
	s := startRedrive(t, bin, nil, args...)
	var hold []int64
	for range 3 {
		hold = append(hold, s.enqueue("", target.URL+"/hold"))
	}
	stuck := s.enqueue("", target.URL+"/stuck")
	// Wait until the four jobs run.
	deadline := time.After(e2eWait)
	for range 4 {
		select {
		case <-arrived:
		case <-deadline:
			t.Fatalf("the jobs did not all start within %s", e2eWait)
		}
	}
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// It shuts down, and waits for its running jobs.
	waitLog(t, s, `"msg":"shutting down"`)
	select {
	case <-s.done:
		t.Fatalf("redrive exited before its running jobs finished:\n%s", s.out)
	default:
	}
	close(release)
	select {
	case <-s.done:
	case <-time.After(e2eWait):
		t.Fatalf("redrive did not exit within %s of SIGTERM", e2eWait)
	}
	if s.err != nil {
		t.Fatalf("redrive exited with %v, want 0:\n%s", s.err, s.out)
	}
	if !strings.Contains(s.out.String(), `"msg":"redrive stopped"`) {
		t.Fatalf("no \"redrive stopped\" log:\n%s", s.out)
	}

	// Through the CLI on the database: the held jobs completed, the stuck
	// one is pending again, its attempt given back.
	show := func(id int64) store.Job {
		t.Helper()
		stdout, stderr, err := runRedrive(t, bin, append([]string{"--json", "jobs", "show", fmt.Sprint(id)}, storeArgs...)...)
		if err != nil {
			t.Fatalf("redrive jobs show %d: %v\n%s", id, err, stderr)
		}
		var j store.Job
		if err := json.Unmarshal(stdout, &j); err != nil {
			t.Fatalf("redrive jobs show %d: %v\n%s", id, err, stdout)
		}
		return j
	}
	for _, id := range hold {
		if j := show(id); j.State != redrive.Completed || j.Attempt != 1 {
			t.Fatalf("held job %d after SIGTERM: %s", id, dump(j))
		}
	}
	j := show(stuck)
	if j.State != redrive.Pending || j.Attempt != 0 || len(j.History) != 1 || j.History[0].Kind != store.EventReleased || j.History[0].Reason != "shutdown" {
		t.Fatalf("stuck job after SIGTERM: %s", dump(j))
	}

	// Restarted on the same database, the interrupted job runs again.
	stuckFixed.Store(true)
	s = startRedrive(t, bin, nil, args...)
	j = *s.waitState(stuck, redrive.Completed)
	if j.Attempt != 1 {
		t.Fatalf("stuck job after the restart: %s", dump(j))
	}
}

// waitLog polls the process's output until it holds substr.
func waitLog(t *testing.T, p *redriveProc, substr string) {
	t.Helper()
	waitUntil(t, e2eWait, "redrive logged "+substr, func() error {
		if strings.Contains(p.out.String(), substr) {
			return nil
		}
		select {
		case <-p.done:
			t.Fatalf("redrive exited (%v) before logging %s:\n%s", p.err, substr, p.out)
		default:
		}
		return fmt.Errorf("output:\n%s", p.out)
	})
}
