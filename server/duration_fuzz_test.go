package server

import (
	"strings"
	"testing"
	"time"
)

// FuzzParseDuration: ParseDuration never panics; what it reads as whole
// days is that many days, and FormatDuration's words read back to the
// same duration.
func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{"7d", "0d", "1000d", "1001d", "+1d", "-1d", "d", "1h30m", "400d", "1.5d", "15m", "", "1d2h"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, ok := ParseDuration(s)
		if !ok {
			return
		}
		if days, cut := strings.CutSuffix(s, "d"); cut && d != 0 && d%(24*time.Hour) != 0 {
			t.Fatalf("%q (%q days) read as %v, not whole days", s, days, d)
		}
		if d < 0 {
			return // a negative Go duration: callers refuse it
		}
		back, ok := ParseDuration(FormatDuration(d))
		if !ok || back != d {
			t.Fatalf("%q: %v formats as %q, which reads as %v, %v", s, d, FormatDuration(d), back, ok)
		}
	})
}

// TestForcedOpenDays: a breaker forced open through the API takes a
// duration in days, as since and until do; beyond the bound, the answer
// says it in days.
func TestForcedOpenDays(t *testing.T) {
	e := newEnv(t, Options{})
	var body BreakerBody
	e.want(e.do("POST", "/v1/breakers/payments/open", `{"duration":"30d"}`), 200, &body)
	if until := time.Until(body.Breaker.ReadyAt); until < 29*24*time.Hour || until > 31*24*time.Hour {
		t.Fatalf("forced open for 30d: ready at %v", body.Breaker.ReadyAt)
	}
	rec := e.do("POST", "/v1/breakers/payments/open", `{"duration":"400d"}`)
	wantErr(t, rec, 400, "invalid", "duration")
	if !strings.Contains(string(rec.body), "at most 366d") {
		t.Errorf("400d: %s", string(rec.body))
	}
}
