// Package metricstest holds what the tests of redrive's Prometheus
// collectors share: scraping collectors and reading the text exposition.
package metricstest

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Exposition registers cs on a fresh registry and returns its text
// exposition, as a scrape of /metrics would.
func Exposition(t *testing.T, cs ...prometheus.Collector) string {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(cs...)
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("metrics: %d %s", rec.Code, rec.Body)
	}
	return rec.Body.String()
}

// Sample returns the value of one series (name and labels exactly as
// exposed, labels sorted by name) in a text exposition.
func Sample(text, series string) (float64, bool) {
	for l := range strings.SplitSeq(text, "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			return f, err == nil
		}
	}
	return 0, false
}

// WantSamples checks series values in a text exposition; on a failure it
// logs the exposition's lines of the metrics named in want.
func WantSamples(t *testing.T, text string, want map[string]float64) {
	t.Helper()
	names := map[string]bool{}
	for series, w := range want {
		if got, ok := Sample(text, series); !ok || got != w {
			t.Errorf("%s = %v (found %v), want %v", series, got, ok, w)
		}
		name, _, _ := strings.Cut(series, "{")
		names[name] = true
	}
	if t.Failed() {
		var lines []string
		for name := range names {
			lines = append(lines, GrepLines(text, name))
		}
		t.Logf("exposition:\n%s", strings.Join(lines, "\n"))
	}
}

// GrepLines returns the lines of s that contain substr.
func GrepLines(s, substr string) string {
	var out []string
	for l := range strings.SplitSeq(s, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
