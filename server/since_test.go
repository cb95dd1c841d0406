package server

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
)

// TestParseTime: since and until are RFC 3339 times or durations back
// from now, Go durations or whole days.
func TestParseTime(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		in   string
		want time.Time
		ok   bool
	}{
		{"2026-01-02T15:04:05Z", time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC), true},
		{"1h", now.Add(-time.Hour), true},
		{"30m", now.Add(-30 * time.Minute), true},
		{"7d", now.Add(-7 * 24 * time.Hour), true},
		{"0s", now, true},
		{"-1h", time.Time{}, false},
		{"1w", time.Time{}, false},
		{"yesterday", time.Time{}, false},
		{"", time.Time{}, false},
	} {
		got, ok := ParseTime(c.in, now)
		if ok != c.ok || !got.Equal(c.want) {
			t.Errorf("ParseTime(%q) = %v, %v; want %v, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

// TestRelativeSinceUntil: the listings and the redrive body take a
// relative since and until.
func TestRelativeSinceUntil(t *testing.T) {
	st := openStore(t)
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quiet})
	s := New(Options{Client: c, Logger: quiet})
	t.Cleanup(func() { _ = s.Close() })
	if _, err := c.Enqueue(t.Context(), "k", nil); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"since=1h", "since=7d&until=1m", "until=30m"} {
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, httptest.NewRequest("GET", "/v1/jobs?"+q, nil))
		if rec.Code != http.StatusOK {
			t.Errorf("GET /v1/jobs?%s: %d %s", q, rec.Code, rec.Body)
		}
	}
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest("GET", "/v1/jobs?since=1h", nil))
	if !strings.Contains(rec.Body.String(), `"kind":"k"`) {
		t.Errorf("since=1h misses the job just enqueued: %s", rec.Body)
	}
	rec = httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest("GET", "/v1/jobs?since=1h&until=7d", nil))
	if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "until must be after since") {
		t.Errorf("since=1h&until=7d: %d %s", rec.Code, rec.Body)
	}
	req := httptest.NewRequest("POST", "/v1/dlq/redrive", strings.NewReader(`{"filter":{"since":"7d","until":"1m"}}`))
	req.Header.Set("Content-Type", "application/json")
	rec = httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	if rec.Code >= 300 {
		t.Errorf("redrive with a relative filter: %d %s", rec.Code, rec.Body)
	}
}
