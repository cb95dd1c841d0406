package rhttp_test

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redrivehq/redrive/breaker"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/rhttp"
)

// TestBreakerIgnoresRateLimited: 429s and 503s with Retry-After do not count
// against the host's breaker by default; they do with CountRateLimited, and
// the Classifier's overrides decide what is rate-limited.
func TestBreakerIgnoresRateLimited(t *testing.T) {
	answer := func(w http.ResponseWriter, r *http.Request, n int64) {
		switch r.URL.Path {
		case "/429":
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
		case "/503-retry-after":
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
		case "/502":
			w.WriteHeader(http.StatusBadGateway)
		}
	}
	for _, tc := range []struct {
		name       string
		cfg        breaker.Config
		classifier failure.Config
		path       string
		wantOpen   bool
	}{
		{"429 neutral", breaker.Config{Failures: 1}, failure.Config{}, "/429", false},
		{"503 with Retry-After neutral", breaker.Config{Failures: 1}, failure.Config{}, "/503-retry-after", false},
		{"429 counted on request", breaker.Config{Failures: 1, CountRateLimited: true}, failure.Config{}, "/429", true},
		{"429 overridden to transient counts", breaker.Config{Failures: 1},
			failure.Config{Status: map[int]failure.Class{429: failure.Transient}}, "/429", true},
		{"502 overridden to rate_limited is neutral", breaker.Config{Failures: 1},
			failure.Config{Status: map[int]failure.Class{502: failure.RateLimited}}, "/502", false},
		{"502 counts", breaker.Config{Failures: 1}, failure.Config{}, "/502", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, count := server(t, answer)
			cl, err := failure.NewClassifier(tc.classifier)
			if err != nil {
				t.Fatal(err)
			}
			reg := breaker.NewRegistry(tc.cfg)
			tr := transport(srv, fastPolicy(0), nil)
			tr.Breakers, tr.Classifier = reg, cl
			tr.BreakerName = func(*http.Request) string { return "dep" }
			c := rhttp.NewClient(tr)
			for range 5 {
				resp, err := c.Get(srv.URL + tc.path)
				if err != nil {
					if !tc.wantOpen {
						t.Fatalf("GET: %v", err)
					}
					break
				}
				resp.Body.Close()
			}
			st := reg.Get("dep").Status()
			if open := st.State == breaker.Open; open != tc.wantOpen {
				t.Fatalf("after %d requests breaker = %+v, want open %v", count.Load(), st, tc.wantOpen)
			}
			if !tc.wantOpen && (count.Load() != 5 || st.Failures != 0) {
				t.Fatalf("%d requests, breaker %+v: want 5 requests and no failures counted", count.Load(), st)
			}
		})
	}
}

// TestRetryAfterJitterSpreadsRetries: a burst of 429s with Retry-After: 1
// comes back over the jitter window, never before 1s. The sleeps are
// recorded, not waited.
func TestRetryAfterJitterSpreadsRetries(t *testing.T) {
	srv, _ := server(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusTooManyRequests)
	})
	var mu sync.Mutex
	var slept []time.Duration
	tr := transport(srv, fastPolicy(1), nil)
	tr.Sleep = func(_ context.Context, d time.Duration) error {
		mu.Lock()
		slept = append(slept, d)
		mu.Unlock()
		return nil
	}
	c := rhttp.NewClient(tr)
	for range 200 {
		resp, err := c.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if len(slept) != 200 {
		t.Fatalf("%d sleeps, want 200", len(slept))
	}
	lo, hi := slices.Min(slept), slices.Max(slept)
	if lo < time.Second || hi >= 1100*time.Millisecond {
		t.Fatalf("delays from %v to %v, want within [1s, 1.1s)", lo, hi)
	}
	if hi-lo < 50*time.Millisecond {
		t.Fatalf("delays from %v to %v: not spread over the 100ms window", lo, hi)
	}
}
