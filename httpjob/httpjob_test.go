package httpjob_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/redrivehq/redrive/internal/testwait"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/httpjob"
	"github.com/redrivehq/redrive/retry"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/sqlite"
)

const maxRetries = 3

// start runs a real worker with the http kind on a SQLite store in a
// temporary folder, with a fast policy (5ms initial, no jitter).
func start(t *testing.T, opts httpjob.Options) *redrive.Client {
	return startLogging(t, opts, slog.New(slog.DiscardHandler))
}

// startLogging is start with the worker's logs going to log.
func startLogging(t *testing.T, opts httpjob.Options, log *slog.Logger) *redrive.Client {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "redrive.db"), sqlite.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	client := redrive.NewClient(st, redrive.ClientOptions{Logger: log})
	p := retry.DefaultPolicy()
	p.MaxRetries = maxRetries
	p.Initial = 5 * time.Millisecond
	p.MaxDelay = 40 * time.Millisecond
	p.Jitter = retry.JitterNone
	w := redrive.NewWorker(client, redrive.WorkerOptions{Policy: &p, DisableRetryBudget: true, Logger: log,
		PollInterval: 50 * time.Millisecond})
	httpjob.Register(w, opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("worker: %v", err)
		}
		st.Close()
	})
	return client
}

// run enqueues an http job and waits until it is completed or dead.
func run(t *testing.T, client *redrive.Client, payload any) *redrive.Job {
	t.Helper()
	ctx := context.Background()
	j, err := client.Enqueue(ctx, httpjob.Kind, payload)
	if err != nil {
		t.Fatal(err)
	}
	id := j.ID
	testwait.Until(t, fmt.Sprintf("job %d completed or dead", id), 15*time.Second, func() bool {
		if j, err = client.Get(ctx, id); err != nil {
			t.Fatal(err)
		}
		return j.State == redrive.Completed || j.State == redrive.Dead
	})
	return j
}

// statusServer answers with the statuses in turn, then repeats the last.
func statusServer(t *testing.T, header http.Header, body string, statuses ...int) (*httptest.Server, *atomic.Int32) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i := int(n.Add(1)) - 1
		code := statuses[min(i, len(statuses)-1)]
		for k, v := range header {
			w.Header()[k] = v
		}
		w.WriteHeader(code)
		io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

func TestOK(t *testing.T) {
	client := start(t, httpjob.Options{})
	srv, n := statusServer(t, nil, "fine", 200)
	j := run(t, client, map[string]any{"url": srv.URL + "/ok"})
	if j.State != redrive.Completed || j.Attempt != 1 || n.Load() != 1 {
		t.Fatalf("state %s after %d attempts, %d requests", j.State, j.Attempt, n.Load())
	}
	// The success is in the history with the response's status and body.
	if len(j.History) != 1 {
		t.Fatalf("history %+v, want one completed event", j.History)
	}
	ev := j.History[0]
	if ev.Kind != store.EventCompleted || ev.Attempt != 1 || ev.Reason != "http_200" ||
		!strings.Contains(ev.Note, "200 OK") || !strings.Contains(ev.Note, "fine") || ev.Duration <= 0 || ev.Class != "" {
		t.Fatalf("completed event %+v", ev)
	}
}

// TestLongSuccessBodyIsBounded: a large 2xx body is kept as a bounded
// excerpt, and the request still completes.
func TestLongSuccessBodyIsBounded(t *testing.T) {
	client := start(t, httpjob.Options{})
	srv, _ := statusServer(t, nil, strings.Repeat("x", 100_000), 201)
	j := run(t, client, map[string]any{"url": srv.URL})
	if j.State != redrive.Completed || len(j.History) != 1 {
		t.Fatalf("state %s, history %+v", j.State, j.History)
	}
	ev := j.History[0]
	if ev.Reason != "http_201" || len(ev.Note) > failure.MaxBodyExcerpt+64 || !strings.Contains(ev.Note, "xxxx") {
		t.Fatalf("completed event: reason %q, note of %d bytes", ev.Reason, len(ev.Note))
	}
}

func TestTransientThenOK(t *testing.T) {
	client := start(t, httpjob.Options{})
	srv, n := statusServer(t, nil, "upstream busy", 503, 200)
	j := run(t, client, map[string]any{"url": srv.URL})
	if j.State != redrive.Completed || j.Attempt != 2 || n.Load() != 2 {
		t.Fatalf("state %s after %d attempts, %d requests: %+v", j.State, j.Attempt, n.Load(), j.History)
	}
	if len(j.History) != 2 || j.History[1].Kind != store.EventCompleted || j.History[1].Attempt != 2 {
		t.Fatalf("history %+v, want the failure then the success", j.History)
	}
	ev := j.History[0]
	if ev.Class != "transient" || ev.Reason != "http_503" || !strings.Contains(ev.Error, "503") ||
		!strings.Contains(ev.Error, "upstream busy") {
		t.Fatalf("first attempt %+v", ev)
	}
}

func TestNotFoundIsPermanent(t *testing.T) {
	client := start(t, httpjob.Options{})
	srv, n := statusServer(t, nil, "no such hook", 404)
	j := run(t, client, map[string]any{"url": srv.URL})
	if j.State != redrive.Dead || j.Attempt != 1 || n.Load() != 1 || j.LastErrorClass != failure.Permanent {
		t.Fatalf("state %s class %s after %d attempts: %+v", j.State, j.LastErrorClass, j.Attempt, j.History)
	}
	if !strings.Contains(j.LastError, "404") || !strings.Contains(j.LastError, "no such hook") {
		t.Fatalf("last error %q", j.LastError)
	}
}

func TestAuthIsNeedsAuth(t *testing.T) {
	for _, code := range []int{401, 403} {
		t.Run(http.StatusText(code), func(t *testing.T) {
			client := start(t, httpjob.Options{})
			srv, _ := statusServer(t, nil, "", code)
			j := run(t, client, map[string]any{"url": srv.URL})
			if j.State != redrive.Dead || j.Attempt != 1 || j.DeadReason != "needs_auth" {
				t.Fatalf("state %s reason %q after %d attempts: %+v", j.State, j.DeadReason, j.Attempt, j.History)
			}
		})
	}
}

func TestRetryAfterIsHonoured(t *testing.T) {
	client := start(t, httpjob.Options{})
	var mu sync.Mutex
	var times []time.Time
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		times = append(times, time.Now())
		first := len(times) == 1
		mu.Unlock()
		if first {
			w.Header().Set("Retry-After", "1")
			http.Error(w, "slow down", http.StatusTooManyRequests)
		}
	}))
	t.Cleanup(srv.Close)
	j := run(t, client, map[string]any{"url": srv.URL})
	if j.State != redrive.Completed || j.Attempt != 2 {
		t.Fatalf("state %s after %d attempts: %+v", j.State, j.Attempt, j.History)
	}
	ev := j.History[0]
	if ev.Class != "rate_limited" || ev.Reason != "http_429" || time.Duration(ev.Delay) < time.Second {
		t.Fatalf("first attempt %+v: want rate_limited with a delay of at least 1s", ev)
	}
	mu.Lock()
	defer mu.Unlock()
	if gap := times[1].Sub(times[0]); gap < time.Second {
		t.Fatalf("second request %s after the first, want >= 1s", gap)
	}
}

func TestAlways500GoesDeadAfterRetries(t *testing.T) {
	client := start(t, httpjob.Options{})
	srv, n := statusServer(t, nil, strings.Repeat("x", 10000), 500)
	j := run(t, client, map[string]any{"url": srv.URL})
	if j.State != redrive.Dead || j.Attempt != maxRetries+1 || int(n.Load()) != maxRetries+1 {
		t.Fatalf("state %s after %d attempts, %d requests", j.State, j.Attempt, n.Load())
	}
	if len(j.LastError) > failure.MaxBodyExcerpt+100 {
		t.Fatalf("last error is %d bytes long: the body excerpt is not bounded", len(j.LastError))
	}
}

// refusedURLs are URLs the default guard refuses before any connection.
var refusedURLs = []string{
	"http://169.254.169.254/latest/meta-data/",
	"http://[fd00:ec2::254]/latest/meta-data/",
	"http://metadata.google.internal/computeMetadata/v1/",
	"http://[fe80::1]/",
	"http://169.254.1.2:8080/",
	"http://[::169.254.169.254]/latest/meta-data/",
	"http://[64:ff9b::a9fe:a9fe]/",
}

// TestMetadataRefusedAtEnqueue: a job whose URL the guard refuses is
// refused when it is enqueued, naming payload.url, and nothing is stored.
func TestMetadataRefusedAtEnqueue(t *testing.T) {
	client := start(t, httpjob.Options{})
	for _, u := range refusedURLs {
		_, err := client.Enqueue(context.Background(), httpjob.Kind, map[string]any{"url": u})
		var fe *redrive.FieldError
		if !errors.Is(err, redrive.ErrInvalid) || !errors.As(err, &fe) || fe.Field != "payload.url" || !strings.Contains(err.Error(), "refusing") {
			t.Errorf("%s: %v; want refused at enqueue on payload.url", u, err)
		}
	}
	if n, _ := client.Count(context.Background(), redrive.Filter{}); n != 0 {
		t.Errorf("%d jobs stored", n)
	}
}

// TestMetadataRefusedWithoutRequest: a job that reached the handler
// anyway (enqueued by a client without the check) dies at once as a
// permanent failure, before any connection.
func TestMetadataRefusedWithoutRequest(t *testing.T) {
	h := httpjob.New(httpjob.Options{})
	for _, u := range refusedURLs {
		payload, _ := json.Marshal(map[string]any{"url": u})
		err := h.Handle(context.Background(), &redrive.Job{Payload: payload})
		if v := failure.Classify(err); v.Class != failure.Permanent || !strings.Contains(err.Error(), "refusing") {
			t.Errorf("%s: %v (%s); want a permanent refusal", u, err, v.Class)
		}
	}
}

func TestResolvedAddressIsChecked(t *testing.T) {
	// "localhost" is not an IP literal: only the dial-time check sees that
	// it resolves to loopback.
	var hit atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hit.Store(true) }))
	t.Cleanup(srv.Close)
	port := srv.URL[strings.LastIndexByte(srv.URL, ':'):]
	client := start(t, httpjob.Options{BlockPrivate: true})
	j := run(t, client, map[string]any{"url": "http://localhost" + port})
	if j.State != redrive.Dead || j.LastErrorClass != failure.Permanent || !strings.Contains(j.LastError, "loopback") || hit.Load() {
		t.Fatalf("state %s class %s error %q, request sent: %v", j.State, j.LastErrorClass, j.LastError, hit.Load())
	}
}

func TestAllowLinkLocalLetsMetadataThrough(t *testing.T) {
	h := httpjob.New(httpjob.Options{AllowLinkLocal: true})
	// A closed port at a link-local address would hang or fail at the
	// network level; what matters is that the refusal is not ours.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err := h.Handle(ctx, &redrive.Job{Payload: json.RawMessage(`{"url":"http://169.254.169.254/","timeout":"100ms"}`)})
	if err == nil || strings.Contains(err.Error(), "refusing") {
		t.Fatalf("err = %v, want a network error", err)
	}
}

func TestPostBodyAndHeadersArrive(t *testing.T) {
	type got struct {
		method, ct, sig, host, body string
	}
	var mu sync.Mutex
	var g got
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		g = got{r.Method, r.Header.Get("Content-Type"), r.Header.Get("X-Signature"), r.Host, string(b)}
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	client := start(t, httpjob.Options{})
	body := `{"event":"paid","amount":42,"note":"héllo\nworld"}`
	j := run(t, client, map[string]any{"method": "post", "url": srv.URL + "/hook?x=1",
		"headers": map[string]string{"Content-Type": "application/json", "X-Signature": "sha256=abc", "Host": "hooks.example"},
		"body":    body, "timeout": "5s"})
	if j.State != redrive.Completed {
		t.Fatalf("state %s: %+v", j.State, j.History)
	}
	mu.Lock()
	defer mu.Unlock()
	want := got{"POST", "application/json", "sha256=abc", "hooks.example", body}
	if g != want {
		t.Fatalf("server got %+v, want %+v", g, want)
	}
}

func TestBadPayloadIsPermanent(t *testing.T) {
	h := httpjob.New(httpjob.Options{})
	for _, tc := range []struct{ payload, want string }{
		{`"just a string"`, "want a JSON object"},
		{`{"method":"GET"}`, "url is required"},
		{`{"url":"ftp://example.com/x"}`, "scheme must be http or https"},
		{`{"url":"http://"}`, "has no host"},
		{`{"url":"http://x","method":"BREW"}`, `method "BREW"`},
		{`{"url":"http://x","timeout":"soon"}`, `timeout "soon"`},
		{`{"url":"http://x","timeout":"-1s"}`, "must be positive"},
		{`{"url":"http://x","timeout":"2h"}`, "above the limit"},
		{`{"url":"http://x","timeout":true}`, "want a duration"},
		{`{"url":"http://x","headers":{"Bad Name":"v"}}`, "not a valid HTTP token"},
		{`{"url":"http://x","headers":{"X":"a\r\nInjected: 1"}}`, "line break"},
		{`{"url":"http://x","urls":"typo"}`, "unknown field"},
	} {
		err := h.Handle(context.Background(), &redrive.Job{Payload: json.RawMessage(tc.payload)})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want it to mention %q", tc.payload, err, tc.want)
			continue
		}
		if v := failure.Classify(err); v.Class != failure.Permanent {
			t.Errorf("%s: class %s, want permanent", tc.payload, v.Class)
		}
	}
}

func TestConnectionRefusedIsTransient(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	u := srv.URL
	srv.Close()
	h := httpjob.New(httpjob.Options{})
	err := h.Handle(context.Background(), &redrive.Job{Payload: json.RawMessage(`{"url":"` + u + `"}`)})
	if v := failure.Classify(err); v.Class != failure.Transient {
		t.Fatalf("err %v classified %s, want transient", err, v.Class)
	}
}

func TestTimeoutIsTransient(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-release }))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	h := httpjob.New(httpjob.Options{})
	err := h.Handle(context.Background(), &redrive.Job{Payload: json.RawMessage(`{"url":"` + srv.URL + `","timeout":"50ms"}`)})
	if v := failure.Classify(err); v.Class != failure.Transient || !strings.Contains(err.Error(), "no response within 50ms") {
		t.Fatalf("err %v classified %s, want transient", err, v.Class)
	}
}

// lockedBuffer is a bytes.Buffer safe for a logger's concurrent writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestLogLinesNameTheURL: the retry and DLQ log lines of an http job name
// its target, without credentials or query.
func TestLogLinesNameTheURL(t *testing.T) {
	srv, _ := statusServer(t, nil, "busy", 503)
	var logs lockedBuffer
	client := startLogging(t, httpjob.Options{}, slog.New(slog.NewJSONHandler(&logs, nil)))
	target := strings.Replace(srv.URL, "http://", "http://user:s3cret@", 1) + "/hook?token=s3cret"
	j := run(t, client, map[string]any{"url": target})
	if j.State != redrive.Dead {
		t.Fatalf("state %s", j.State)
	}
	var retried, dead int
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) != nil {
			continue
		}
		switch m["msg"] {
		case "job failed; retry scheduled":
			retried++
		case "job moved to the DLQ":
			dead++
		default:
			continue
		}
		if m["url"] != srv.URL+"/hook" || m["method"] != "GET" {
			t.Errorf("log line names url %v, method %v; want %s/hook, GET", m["url"], m["method"], srv.URL)
		}
	}
	if retried != maxRetries || dead != 1 {
		t.Errorf("%d retry lines, %d DLQ lines; want %d and 1", retried, dead, maxRetries)
	}
	if strings.Contains(logs.String(), "s3cret") {
		t.Error("the logs show the URL's credentials or query")
	}
}
