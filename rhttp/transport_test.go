package rhttp_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redrivehq/redrive/breaker"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/internal/closedport"
	"github.com/redrivehq/redrive/retry"
	"github.com/redrivehq/redrive/rhttp"
)

// fastPolicy retries maxRetries times after 2ms, 4ms, 8ms, ... (capped at
// 16ms), without jitter.
func fastPolicy(maxRetries int) *retry.Policy {
	return &retry.Policy{
		MaxRetries: maxRetries,
		Initial:    2 * time.Millisecond,
		Multiplier: 2,
		MaxDelay:   16 * time.Millisecond,
		Jitter:     retry.JitterNone,
	}
}

var quiet = slog.New(slog.DiscardHandler)

// server starts a test server whose handler is told the 1-based number of
// the request it serves.
func server(t *testing.T, h func(w http.ResponseWriter, r *http.Request, n int64)) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var count atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h(w, r, count.Add(1))
	}))
	t.Cleanup(srv.Close)
	return srv, &count
}

// transport returns a Transport sending through srv's client transport,
// with a fast policy, no logs and retries recorded into *infos.
func transport(srv *httptest.Server, p *retry.Policy, infos *[]rhttp.RetryInfo) *rhttp.Transport {
	tr := &rhttp.Transport{Policy: p, Logger: quiet}
	if srv != nil {
		tr.Base = srv.Client().Transport
	}
	if infos != nil {
		tr.OnRetry = func(ri rhttp.RetryInfo) { *infos = append(*infos, ri) }
	}
	return tr
}

func get(t *testing.T, c *http.Client, u string) *http.Response {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func readBody(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading body: %v", err)
	}
	return string(b)
}

func TestRetry503Then200(t *testing.T) {
	srv, count := server(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		if n == 1 {
			http.Error(w, "upstream busy", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok")
	})
	var infos []rhttp.RetryInfo
	c := rhttp.NewClient(transport(srv, fastPolicy(3), &infos))

	resp := get(t, c, srv.URL)
	if resp.StatusCode != 200 || readBody(t, resp) != "ok" {
		t.Fatalf("got %d, want 200 ok", resp.StatusCode)
	}
	if got := count.Load(); got != 2 {
		t.Fatalf("server saw %d requests, want 2", got)
	}
	if len(infos) != 1 {
		t.Fatalf("OnRetry called %d times, want 1", len(infos))
	}
	ri := infos[0]
	if ri.Attempt != 1 || ri.StatusCode != 503 || ri.Class != failure.Transient || ri.Reason != "http_503" ||
		ri.Delay != 2*time.Millisecond || ri.DelayReason != retry.ReasonBackoff || ri.Request == nil {
		t.Errorf("RetryInfo = %+v", ri)
	}
	var se *failure.StatusError
	if !errors.As(ri.Err, &se) || se.Code != 503 || se.Body != "upstream busy" {
		t.Errorf("RetryInfo.Err = %#v, want a 503 StatusError with the body excerpt", ri.Err)
	}
}

func TestNonRetryableStatusReturnedIntact(t *testing.T) {
	// Longer than failure.MaxBodyExcerpt, to catch a partial read.
	body := strings.Repeat("0123456789abcdef", 300)
	for _, tc := range []struct {
		code  int
		class failure.Class
	}{
		{404, failure.Permanent},
		{400, failure.Permanent},
		{410, failure.Permanent},
		{401, failure.NeedsAuth},
		{403, failure.NeedsAuth},
	} {
		t.Run(strconv.Itoa(tc.code), func(t *testing.T) {
			srv, count := server(t, func(w http.ResponseWriter, r *http.Request, n int64) {
				w.Header().Set("Retry-After", "1") // must not matter
				w.WriteHeader(tc.code)
				io.WriteString(w, body)
			})
			var infos []rhttp.RetryInfo
			c := rhttp.NewClient(transport(srv, fastPolicy(3), &infos))

			resp := get(t, c, srv.URL)
			if resp.StatusCode != tc.code {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.code)
			}
			if got := readBody(t, resp); got != body {
				t.Fatalf("body of %d bytes altered: got %d bytes", len(body), len(got))
			}
			if got := count.Load(); got != 1 {
				t.Fatalf("server saw %d requests, want 1", got)
			}
			if len(infos) != 0 {
				t.Fatalf("OnRetry called: %+v", infos)
			}
			if got := failure.StatusClass(tc.code); got != tc.class {
				t.Fatalf("StatusClass(%d) = %v, want %v", tc.code, got, tc.class)
			}
		})
	}
}

func TestRetryAfterSecondsWaits(t *testing.T) {
	// The one test that really waits: Retry-After: 1 must hold the retry
	// back at least a second.
	srv, count := server(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		if n == 1 {
			w.Header().Set("Retry-After", "1")
			http.Error(w, "slow down", http.StatusTooManyRequests)
			return
		}
		io.WriteString(w, "ok")
	})
	var infos []rhttp.RetryInfo
	c := rhttp.NewClient(transport(srv, fastPolicy(3), &infos))

	start := time.Now()
	resp := get(t, c, srv.URL)
	elapsed := time.Since(start)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d, want 200", resp.StatusCode)
	}
	if elapsed < time.Second {
		t.Fatalf("retried after %v, want at least 1s (Retry-After: 1)", elapsed)
	}
	if count.Load() != 2 || len(infos) != 1 {
		t.Fatalf("requests %d, retries %d; want 2 and 1", count.Load(), len(infos))
	}
	ri := infos[0]
	// 1s plus the Retry-After jitter: up to 10% of it.
	if ri.Class != failure.RateLimited || ri.Delay < time.Second || ri.Delay >= 1100*time.Millisecond ||
		ri.DelayReason != retry.ReasonRetryAfter || ri.RetryAfter != time.Second {
		t.Errorf("RetryInfo = %+v, want a delay in [1s, 1.1s)", ri)
	}
}

func TestRetryAfterClamped(t *testing.T) {
	srv, count := server(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		if n == 1 {
			w.Header().Set("Retry-After", "3600")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		io.WriteString(w, "ok")
	})
	p := fastPolicy(3)
	p.MaxRetryAfter = 30 * time.Millisecond
	var infos []rhttp.RetryInfo
	c := rhttp.NewClient(transport(srv, p, &infos))

	start := time.Now()
	resp := get(t, c, srv.URL)
	if elapsed := time.Since(start); elapsed > 2*time.Second {
		t.Fatalf("took %v: Retry-After was not clamped", elapsed)
	}
	if resp.StatusCode != 200 || count.Load() != 2 || len(infos) != 1 {
		t.Fatalf("status %d, requests %d, retries %d", resp.StatusCode, count.Load(), len(infos))
	}
	// Clamped to 30ms, plus up to 10% of it of jitter.
	if ri := infos[0]; ri.Delay < 30*time.Millisecond || ri.Delay >= 33*time.Millisecond || ri.RetryAfter != time.Hour || ri.DelayReason != retry.ReasonRetryAfter {
		t.Errorf("Delay %v (%s), RetryAfter %v; want 30ms clamped from 1h, plus less than 3ms", ri.Delay, ri.DelayReason, ri.RetryAfter)
	}
}

func TestRetryAfterHTTPDate(t *testing.T) {
	srv, count := server(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		if n == 1 {
			w.Header().Set("Retry-After", time.Now().Add(3*time.Second).UTC().Format(http.TimeFormat))
			w.WriteHeader(http.StatusServiceUnavailable) // 503 + Retry-After: rate limited
			return
		}
		io.WriteString(w, "ok")
	})
	var slept []time.Duration
	tr := transport(srv, fastPolicy(3), nil)
	tr.Sleep = func(ctx context.Context, d time.Duration) error {
		slept = append(slept, d)
		return nil
	}
	var infos []rhttp.RetryInfo
	tr.OnRetry = func(ri rhttp.RetryInfo) { infos = append(infos, ri) }

	resp := get(t, rhttp.NewClient(tr), srv.URL)
	if resp.StatusCode != 200 || count.Load() != 2 {
		t.Fatalf("status %d after %d requests", resp.StatusCode, count.Load())
	}
	// The date has a resolution of a second: it lies 2 to 3 s ahead, and
	// the Retry-After jitter adds up to 10% of it.
	if len(slept) != 1 || slept[0] < time.Second || slept[0] > 3300*time.Millisecond {
		t.Fatalf("slept %v, want one delay between 1s and 3.3s", slept)
	}
	if ri := infos[0]; ri.Class != failure.RateLimited || ri.DelayReason != retry.ReasonRetryAfter {
		t.Errorf("class %v, delay reason %s", ri.Class, ri.DelayReason)
	}
}

func TestExhaustedReturnsLastResponse(t *testing.T) {
	srv, count := server(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprintf(w, "failure %d", n)
	})
	p := fastPolicy(3)
	var infos []rhttp.RetryInfo
	c := rhttp.NewClient(transport(srv, p, &infos))

	resp := get(t, c, srv.URL)
	if resp.StatusCode != 500 {
		t.Fatalf("status %d, want 500", resp.StatusCode)
	}
	want := fmt.Sprintf("failure %d", p.MaxRetries+1)
	if got := readBody(t, resp); got != want {
		t.Fatalf("body %q, want the last response's %q", got, want)
	}
	if got := count.Load(); got != int64(p.MaxRetries+1) {
		t.Fatalf("server saw %d requests, want %d", got, p.MaxRetries+1)
	}
	for i, ri := range infos {
		if ri.Attempt != i+1 || ri.Delay != 2*time.Millisecond<<i {
			t.Errorf("retry %d: attempt %d delay %v", i, ri.Attempt, ri.Delay)
		}
	}
}

func TestPostBodyReplayed(t *testing.T) {
	var mu sync.Mutex
	var bodies []string
	srv, count := server(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, r.Header.Get("Content-Type")+"|"+strconv.FormatInt(r.ContentLength, 10)+"|"+string(b))
		mu.Unlock()
		if n < 3 {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		io.WriteString(w, "created")
	})
	c := rhttp.NewClient(transport(srv, fastPolicy(3), nil))

	payload := `{"id":42,"name":"` + strings.Repeat("x", 1000) + `"}`
	req, err := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(payload))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	origBody, origHeader := req.Body, req.Header.Clone()

	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || count.Load() != 3 {
		t.Fatalf("status %d after %d requests", resp.StatusCode, count.Load())
	}
	want := "application/json|" + strconv.Itoa(len(payload)) + "|" + payload
	mu.Lock()
	defer mu.Unlock()
	for i, b := range bodies {
		if b != want {
			t.Errorf("attempt %d: server got %.60q..., want %.60q...", i+1, b, want)
		}
	}
	if req.Body != origBody || len(req.Header) != len(origHeader) || req.Header.Get("Content-Type") != "application/json" {
		t.Errorf("the caller's request was modified")
	}
}

// onceReader is an io.Reader that net/http cannot rewind: a request built
// on it has no GetBody.
type onceReader struct{ r io.Reader }

func (o *onceReader) Read(p []byte) (int, error) { return o.r.Read(p) }

func TestNonReplayableBodyNotRetried(t *testing.T) {
	var got atomic.Value
	srv, count := server(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		b, _ := io.ReadAll(r.Body)
		got.Store(string(b))
		http.Error(w, "try later", http.StatusServiceUnavailable)
	})
	var logs bytes.Buffer
	tr := transport(srv, fastPolicy(3), nil)
	tr.Logger = slog.New(slog.NewJSONHandler(&logs, nil))

	req, err := http.NewRequest(http.MethodPost, srv.URL, &onceReader{strings.NewReader("payload")})
	if err != nil {
		t.Fatal(err)
	}
	if req.GetBody != nil {
		t.Fatal("test needs a request without GetBody")
	}
	resp, err := rhttp.NewClient(tr).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 503 || readBody(t, resp) != "try later\n" {
		t.Fatalf("want the first 503 response with its body, got %d", resp.StatusCode)
	}
	if count.Load() != 1 || got.Load() != "payload" {
		t.Fatalf("server saw %d requests, body %q; want 1, \"payload\"", count.Load(), got.Load())
	}
	lines := logLines(t, &logs)
	if len(lines) != 1 || lines[0]["msg"] != "rhttp: not retrying request" ||
		!strings.Contains(lines[0]["why"].(string), "cannot be replayed") || lines[0]["level"] != "INFO" {
		t.Fatalf("log lines %v, want one explaining the body cannot be replayed", lines)
	}
}

func TestCancelDuringBackoff(t *testing.T) {
	srv, count := server(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	p := fastPolicy(3)
	p.Initial, p.MaxDelay = time.Minute, time.Minute
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tr := transport(srv, p, nil) // real sleep
	tr.OnRetry = func(rhttp.RetryInfo) { time.AfterFunc(20*time.Millisecond, cancel) }

	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	start := time.Now()
	resp, err := rhttp.NewClient(tr).Do(req)
	elapsed := time.Since(start)
	if resp != nil {
		resp.Body.Close()
		t.Fatalf("got a response (%d), want an error", resp.StatusCode)
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	var se *failure.StatusError
	if !errors.As(err, &se) || se.Code != 503 {
		t.Errorf("err = %v, want it to carry the 503 that was being retried", err)
	}
	var re *rhttp.Error
	if !errors.As(err, &re) || re.Attempts != 1 {
		t.Errorf("err = %#v, want *rhttp.Error with 1 attempt", err)
	}
	if elapsed > 2*time.Second {
		t.Fatalf("returned after %v, want promptly after cancel", elapsed)
	}
	srv.Close() // waits for any request still in flight
	if got := count.Load(); got != 1 {
		t.Fatalf("server saw %d requests, want 1", got)
	}
}

func TestDelayPastDeadlineGivesUp(t *testing.T) {
	srv, count := server(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		w.Header().Set("Retry-After", "10")
		http.Error(w, "later", http.StatusTooManyRequests)
	})
	var logs bytes.Buffer
	tr := transport(srv, fastPolicy(3), nil)
	tr.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	slept := false
	tr.Sleep = func(context.Context, time.Duration) error { slept = true; return nil }

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	resp, err := rhttp.NewClient(tr).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 429 || readBody(t, resp) != "later\n" {
		t.Fatalf("want the 429 with its body, got %d", resp.StatusCode)
	}
	if slept || count.Load() != 1 {
		t.Fatalf("slept %v, %d requests; want no sleep, 1 request", slept, count.Load())
	}
	lines := logLines(t, &logs)
	if len(lines) != 1 || !strings.Contains(lines[0]["why"].(string), "deadline") {
		t.Fatalf("log lines %v, want one about the deadline", lines)
	}
}

func TestContextDoneNotRetried(t *testing.T) {
	// A Base that cancels the request's context while answering, as a
	// caller giving up mid-request would.
	for _, withErr := range []bool{false, true} {
		t.Run(fmt.Sprintf("error=%v", withErr), func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var calls atomic.Int64
			base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
				calls.Add(1)
				cancel()
				if withErr {
					return nil, context.Canceled
				}
				return &http.Response{StatusCode: 503, Status: "503 Service Unavailable", Header: http.Header{}, Body: io.NopCloser(strings.NewReader("x")), Request: r}, nil
			})
			tr := &rhttp.Transport{Base: base, Policy: fastPolicy(3), Logger: quiet}
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://example.invalid/", nil)
			resp, err := tr.RoundTrip(req)
			if calls.Load() != 1 {
				t.Fatalf("%d attempts, want 1", calls.Load())
			}
			if withErr {
				if resp != nil || !errors.Is(err, context.Canceled) {
					t.Fatalf("got %v, %v; want context.Canceled", resp, err)
				}
				return
			}
			if err != nil || resp == nil || resp.StatusCode != 503 {
				t.Fatalf("got %v, %v; want the 503", resp, err)
			}
		})
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestConnectionRefusedRetriedThenError(t *testing.T) {
	u := "http://" + closedport.New(t).Addr() + "/x"
	p := fastPolicy(3)
	var infos []rhttp.RetryInfo
	tr := transport(nil, p, &infos)
	tr.Base = &http.Transport{}

	resp, err := rhttp.NewClient(tr).Get(u)
	if resp != nil {
		resp.Body.Close()
		t.Fatalf("got a response (%d)", resp.StatusCode)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("err = %v, want ECONNREFUSED", err)
	}
	var re *rhttp.Error
	if !errors.As(err, &re) || re.Attempts != p.MaxRetries+1 {
		t.Fatalf("err = %#v, want *rhttp.Error with %d attempts", err, p.MaxRetries+1)
	}
	if !strings.Contains(err.Error(), "gave up after 4 attempts") {
		t.Errorf("message %q does not state the attempts", err)
	}
	if len(infos) != p.MaxRetries {
		t.Fatalf("%d retries, want %d", len(infos), p.MaxRetries)
	}
	for _, ri := range infos {
		if ri.Class != failure.Transient || ri.Reason != failure.ReasonConnectionRefused || ri.StatusCode != 0 || ri.Err == nil {
			t.Errorf("RetryInfo = %+v", ri)
		}
	}
	// The caller's classification sees through the wrapping.
	if v := failure.Classify(err); v.Class != failure.Transient {
		t.Errorf("Classify(err) = %+v", v)
	}
}

func TestPermanentTransportErrorNotRetried(t *testing.T) {
	// An https URL answered by a plain HTTP server: a TLS failure, Permanent.
	srv, _ := server(t, func(w http.ResponseWriter, r *http.Request, n int64) {})
	var infos []rhttp.RetryInfo
	tr := transport(nil, fastPolicy(3), &infos)
	tr.Base = &http.Transport{}
	resp, err := rhttp.NewClient(tr).Get(strings.Replace(srv.URL, "http://", "https://", 1))
	if resp != nil {
		resp.Body.Close()
	}
	var re *rhttp.Error
	if !errors.As(err, &re) || re.Attempts != 1 || len(infos) != 0 {
		t.Fatalf("err = %v, retries %d; want 1 attempt, no retry", err, len(infos))
	}
	if v := failure.Classify(err); v.Class != failure.Permanent {
		t.Errorf("Classify(err) = %+v, want permanent", v)
	}
}

func TestBreakerOpensAndFailsFast(t *testing.T) {
	srv, count := server(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		w.WriteHeader(http.StatusInternalServerError)
	})
	reg := breaker.NewRegistry(breaker.Config{Failures: 3, Window: time.Minute, BreakDuration: time.Minute})
	tr := transport(srv, fastPolicy(5), nil)
	tr.Breakers = reg
	c := rhttp.NewClient(tr)

	// The third failure trips the breaker; the next retry would find it
	// open, so the request stops with its last response.
	resp := get(t, c, srv.URL)
	if resp.StatusCode != 500 || count.Load() != 3 {
		t.Fatalf("status %d after %d requests; want 500 after 3", resp.StatusCode, count.Load())
	}
	u, _ := url.Parse(srv.URL)
	b, ok := reg.Lookup(rhttp.HostKey(u))
	if !ok || b.State() != breaker.Open {
		t.Fatalf("breaker %q not open: %v", rhttp.HostKey(u), reg.Statuses())
	}

	for range 3 {
		start := time.Now()
		resp, err := c.Get(srv.URL + "/again")
		if resp != nil {
			resp.Body.Close()
			t.Fatalf("got a response (%d) through an open breaker", resp.StatusCode)
		}
		if !errors.Is(err, breaker.ErrOpen) {
			t.Fatalf("err = %v, want breaker.ErrOpen", err)
		}
		var oe *breaker.OpenError
		var re *rhttp.Error
		if !errors.As(err, &oe) || oe.ReadyAt.IsZero() || !errors.As(err, &re) || re.Attempts != 0 {
			t.Fatalf("err = %v, want *rhttp.Error{Attempts: 0} around *breaker.OpenError", err)
		}
		if d := time.Since(start); d > time.Second {
			t.Fatalf("took %v to fail fast", d)
		}
	}
	if got := count.Load(); got != 3 {
		t.Fatalf("server saw %d requests, want no more than 3", got)
	}
}

func TestBreakerCountsClientErrorsAsSuccess(t *testing.T) {
	srv, count := server(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		http.NotFound(w, r)
	})
	reg := breaker.NewRegistry(breaker.Config{Failures: 2, Window: time.Minute, BreakDuration: time.Minute})
	tr := transport(srv, fastPolicy(3), nil)
	tr.Breakers = reg
	tr.BreakerName = func(*http.Request) string { return "catalog" }
	c := rhttp.NewClient(tr)
	for range 5 {
		if resp := get(t, c, srv.URL); resp.StatusCode != 404 {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	st := reg.Get("catalog").Status()
	if count.Load() != 5 || st.State != breaker.Closed || st.Failures != 0 {
		t.Fatalf("%d requests, breaker %+v; want 5 requests, closed, no failures", count.Load(), st)
	}
}

func TestBreakerIgnoresCallerCancel(t *testing.T) {
	release := make(chan struct{})
	srv, _ := server(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	defer close(release)
	reg := breaker.NewRegistry(breaker.Config{Failures: 1, Window: time.Minute, BreakDuration: time.Minute})
	tr := transport(srv, fastPolicy(3), nil)
	tr.Breakers = reg
	tr.BreakerName = func(*http.Request) string { return "slow" }

	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(30*time.Millisecond, cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	resp, err := rhttp.NewClient(tr).Do(req)
	if resp != nil {
		resp.Body.Close()
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if st := reg.Get("slow").Status(); st.State != breaker.Closed || st.Failures != 0 {
		t.Fatalf("breaker %+v: a canceled call must not count", st)
	}
}

func TestDiscardedBodiesDrainedAndConnectionReused(t *testing.T) {
	for _, tc := range []struct {
		name     string
		bodySize int
		maxConns int64 // most new connections allowed
	}{
		{"small", 16 << 10, 1},     // drained in full: the connection is reused
		{"huge", 1 << 20, 1 << 10}, // cut short: new connections, but no hang
	} {
		t.Run(tc.name, func(t *testing.T) {
			var conns, count atomic.Int64
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if count.Add(1) <= 3 {
					w.WriteHeader(http.StatusServiceUnavailable)
					w.Write(bytes.Repeat([]byte("z"), tc.bodySize))
					return
				}
				io.WriteString(w, "ok")
			}))
			srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
				if s == http.StateNew {
					conns.Add(1)
				}
			}
			srv.Start()
			t.Cleanup(srv.Close)
			base := &http.Transport{MaxConnsPerHost: 1}
			t.Cleanup(base.CloseIdleConnections)
			tr := transport(nil, fastPolicy(3), nil)
			tr.Base = base

			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			for i := range 2 {
				count.Store(0)
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
				resp, err := rhttp.NewClient(tr).Do(req)
				if err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
				if resp.StatusCode != 200 || readBody(t, resp) != "ok" {
					t.Fatalf("request %d: status %d", i, resp.StatusCode)
				}
				resp.Body.Close()
			}
			if got := conns.Load(); got > tc.maxConns {
				t.Fatalf("%d connections for 8 requests, want at most %d", got, tc.maxConns)
			}
		})
	}
}

// logLines parses JSON log lines.
func logLines(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var lines []map[string]any
	sc := bufio.NewScanner(buf)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		lines = append(lines, m)
	}
	return lines
}

func TestRetryLogLines(t *testing.T) {
	srv, _ := server(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		if n <= 2 {
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok")
	})
	var logs bytes.Buffer
	tr := transport(srv, fastPolicy(3), nil)
	tr.Logger = slog.New(slog.NewJSONHandler(&logs, nil))

	u, _ := url.Parse(srv.URL + "/items/7?token=s3cret#frag")
	u.User = url.UserPassword("alice", "hunter2")
	resp := get(t, rhttp.NewClient(tr), u.String())
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}

	raw := logs.String()
	for _, secret := range []string{"s3cret", "hunter2", "alice", "frag"} {
		if strings.Contains(raw, secret) {
			t.Errorf("log leaks %q: %s", secret, raw)
		}
	}
	lines := logLines(t, &logs)
	if len(lines) != 2 {
		t.Fatalf("%d log lines, want 2:\n%s", len(lines), raw)
	}
	for i, l := range lines {
		want := map[string]any{
			"level":        "INFO",
			"msg":          "rhttp: retrying request",
			"method":       "GET",
			"url":          srv.URL + "/items/7",
			"attempt":      float64(i + 1),
			"max_attempts": float64(4),
			"delay":        float64(2 * time.Millisecond << i),
			"delay_reason": "backoff",
			"class":        "transient",
			"reason":       "http_503",
			"status":       float64(503),
			"error":        "http status 503 Service Unavailable: busy",
		}
		for k, v := range want {
			if l[k] != v {
				t.Errorf("line %d: %s = %v, want %v", i+1, k, l[k], v)
			}
		}
	}
}

func TestRetryLogLineForTransportError(t *testing.T) {
	var logs bytes.Buffer
	tr := transport(nil, fastPolicy(1), nil)
	tr.Base = &http.Transport{}
	tr.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	resp, err := rhttp.NewClient(tr).Get("http://" + closedport.New(t).Addr() + "/")
	if resp != nil || err == nil {
		t.Fatalf("got %v, %v", resp, err)
	}
	lines := logLines(t, &logs)
	if len(lines) != 2 {
		t.Fatalf("want a retry line and a debug give-up line, got %v", lines)
	}
	l := lines[0]
	if l["attempt"] != float64(1) || l["class"] != "transient" || l["reason"] != "connection_refused" ||
		l["status"] != nil || !strings.Contains(l["error"].(string), "connection refused") {
		t.Errorf("retry line %v", l)
	}
	if g := lines[1]; g["level"] != "DEBUG" || g["why"] != retry.ReasonExhausted || g["attempt"] != float64(2) {
		t.Errorf("give-up line %v", g)
	}
}

func TestGetBodyErrorStops(t *testing.T) {
	srv, count := server(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	req, _ := http.NewRequest(http.MethodPut, srv.URL, strings.NewReader("data"))
	boom := errors.New("body gone")
	req.GetBody = func() (io.ReadCloser, error) { return nil, boom }
	resp, err := rhttp.NewClient(transport(srv, fastPolicy(3), nil)).Do(req)
	if resp != nil {
		resp.Body.Close()
	}
	var re *rhttp.Error
	if !errors.Is(err, boom) || !errors.As(err, &re) || re.Attempts != 1 || count.Load() != 1 {
		t.Fatalf("err = %v after %d requests; want body gone after 1", err, count.Load())
	}
}

func TestConcurrentRequests(t *testing.T) {
	var seen sync.Map // request id -> *atomic.Int64
	srv, _ := server(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		v, _ := seen.LoadOrStore(r.URL.Query().Get("id"), new(atomic.Int64))
		if v.(*atomic.Int64).Add(1) == 1 {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		io.WriteString(w, r.URL.Query().Get("id"))
	})
	var retries atomic.Int64
	tr := &rhttp.Transport{
		Base:     srv.Client().Transport,
		Policy:   fastPolicy(2),
		Logger:   quiet,
		Breakers: breaker.NewRegistry(breaker.Config{Failures: 1000}),
		OnRetry:  func(rhttp.RetryInfo) { retries.Add(1) },
	}
	c := rhttp.NewClient(tr)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 5 {
				id := fmt.Sprintf("%d-%d", g, i)
				resp, err := c.Post(srv.URL+"/?id="+id, "text/plain", strings.NewReader(id))
				if err != nil {
					t.Error(err)
					return
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || string(b) != id {
					t.Errorf("%s: %d %q", id, resp.StatusCode, b)
				}
			}
		})
	}
	wg.Wait()
	if retries.Load() != 40 {
		t.Errorf("%d retries, want 40", retries.Load())
	}
}

func TestZeroTransport(t *testing.T) {
	srv, count := server(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		io.WriteString(w, "ok")
	})
	resp := get(t, rhttp.NewClient(nil), srv.URL)
	if resp.StatusCode != 200 || readBody(t, resp) != "ok" || count.Load() != 1 {
		t.Fatalf("status %d", resp.StatusCode)
	}
}

func TestHostKey(t *testing.T) {
	for in, want := range map[string]string{
		"http://Example.COM/x":         "example.com:80",
		"https://example.com/x":        "example.com:443",
		"https://example.com:8443/":    "example.com:8443",
		"http://user:pw@10.0.0.1:81/":  "10.0.0.1:81",
		"http://[::1]/":                "[::1]:80",
		"https://[2001:db8::1]:9000/a": "[2001:db8::1]:9000",
		"ftp://files.example.com/":     "files.example.com",
	} {
		u, err := url.Parse(in)
		if err != nil {
			t.Fatal(err)
		}
		if got := rhttp.HostKey(u); got != want {
			t.Errorf("HostKey(%s) = %q, want %q", in, got, want)
		}
	}
}

func TestErrorMessage(t *testing.T) {
	cause := errors.New("boom")
	for _, tc := range []struct {
		e    *rhttp.Error
		want string
	}{
		{&rhttp.Error{Attempts: 0, Err: cause}, "rhttp: request not sent: boom"},
		{&rhttp.Error{Attempts: 1, Err: cause}, "rhttp: gave up after 1 attempt: boom"},
		{&rhttp.Error{Attempts: 3, Err: cause}, "rhttp: gave up after 3 attempts: boom"},
	} {
		if got := tc.e.Error(); got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
		if !errors.Is(tc.e, cause) {
			t.Errorf("errors.Is does not reach the cause")
		}
	}
}

func TestNoAttemptAfterContextEndsDuringSleep(t *testing.T) {
	// A Sleep that returns nil although the context ended while it slept.
	srv, count := server(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tr := transport(srv, fastPolicy(3), nil)
	tr.Sleep = func(context.Context, time.Duration) error { cancel(); return nil }
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	resp, err := tr.RoundTrip(req)
	if resp != nil || !errors.Is(err, context.Canceled) || count.Load() != 1 {
		t.Fatalf("got %v, %v after %d requests; want context.Canceled after 1", resp, err, count.Load())
	}
}

// closeCounter counts Close calls on request bodies.
type closeCounter struct {
	io.Reader
	closed *atomic.Int64
}

func (c closeCounter) Close() error { c.closed.Add(1); return nil }

func TestBreakerOpensDuringBackoff(t *testing.T) {
	srv, count := server(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	reg := breaker.NewRegistry(breaker.Config{Failures: 5, Window: time.Minute, BreakDuration: time.Minute})
	tr := transport(srv, fastPolicy(3), nil)
	tr.Breakers = reg
	tr.BreakerName = func(*http.Request) string { return "svc" }
	// Other callers trip the breaker while this request sleeps.
	tr.Sleep = func(context.Context, time.Duration) error {
		b := reg.Get("svc")
		for range 5 {
			if tok, err := b.Allow(); err == nil {
				b.Record(tok, errors.New("down"))
			}
		}
		return nil
	}
	var gets, closed atomic.Int64
	req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("data"))
	req.GetBody = func() (io.ReadCloser, error) {
		gets.Add(1)
		return closeCounter{strings.NewReader("data"), &closed}, nil
	}
	resp, err := tr.RoundTrip(req)
	if resp != nil {
		resp.Body.Close()
		t.Fatalf("got a response (%d)", resp.StatusCode)
	}
	var re *rhttp.Error
	var se *failure.StatusError
	if !errors.Is(err, breaker.ErrOpen) || !errors.As(err, &re) || re.Attempts != 1 || !errors.As(err, &se) || se.Code != 503 {
		t.Fatalf("err = %v, want breaker.ErrOpen after 1 attempt, carrying the 503", err)
	}
	if count.Load() != 1 || gets.Load() != 1 || closed.Load() != 1 {
		t.Fatalf("requests %d, GetBody %d, closed %d; want 1 each (unsent body closed)", count.Load(), gets.Load(), closed.Load())
	}
}

func TestNilURL(t *testing.T) {
	tr := &rhttp.Transport{Logger: quiet, Breakers: breaker.NewRegistry(breaker.Config{})}
	resp, err := tr.RoundTrip(&http.Request{Method: "GET", Header: http.Header{}})
	var re *rhttp.Error
	if resp != nil || !errors.As(err, &re) || re.Attempts != 0 {
		t.Fatalf("got %v, %v", resp, err)
	}
}
