package failure

import (
	"net/http"
	"testing"
	"time"
)

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, time.March, 14, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		in     string
		want   time.Duration
		wantOK bool
	}{
		// Delta seconds.
		{"120", 120 * time.Second, true},
		{"0", 0, true},
		{"  7\t", 7 * time.Second, true},
		{"007", 7 * time.Second, true},
		{"+3", 3 * time.Second, true},
		{"1.5", 1500 * time.Millisecond, true},
		{"0.25", 250 * time.Millisecond, true},
		{"0.0001", time.Millisecond, true}, // rounded up
		{"2.0010", 2001 * time.Millisecond, true},
		{"2.0011", 2002 * time.Millisecond, true},
		{"2.000000", 2 * time.Second, true},
		{".5", 500 * time.Millisecond, true},
		{"5.", 5 * time.Second, true},
		{"2592000", MaxRetryAfter, true},
		{"2592001", MaxRetryAfter, true},
		{"2591999.9999", MaxRetryAfter, true},
		{"99999999999999999999", MaxRetryAfter, true},
		{"99999999999999999999999999999999999999.5", MaxRetryAfter, true},
		// Negative values: retry at once.
		{"-1", 0, true},
		{"-0", 0, true},
		{"-99999999999999999999", 0, true},
		{"-1.5", 0, true},
		// HTTP dates, in the three formats of net/http.ParseTime.
		{"Sat, 14 Mar 2026 12:02:00 GMT", 2 * time.Minute, true},     // IMF-fixdate
		{"Saturday, 14-Mar-26 12:00:30 GMT", 30 * time.Second, true}, // RFC 850
		{"Sat Mar 14 13:00:00 2026", time.Hour, true},                // ANSI C asctime
		{"  Sat, 14 Mar 2026 12:00:01 GMT  ", time.Second, true},     // surrounding spaces
		{now.Format(http.TimeFormat), 0, true},                       // now
		{"Fri, 13 Mar 2026 12:00:00 GMT", 0, true},                   // in the past
		{"Thu, 01 Jan 1970 00:00:00 GMT", 0, true},                   // long past
		{"Fri, 31 Dec 9999 23:59:59 GMT", MaxRetryAfter, true},       // far future
		{now.Add(MaxRetryAfter - time.Second).Format(http.TimeFormat), MaxRetryAfter - time.Second, true},
		// Garbage.
		{"", 0, false},
		{"   ", 0, false},
		{"soon", 0, false},
		{"1e3", 0, false},
		{"0x10", 0, false},
		{"1_000", 0, false},
		{"1.2.3", 0, false},
		{"12 s", 0, false},
		{"-", 0, false},
		{"+", 0, false},
		{".", 0, false},
		{"--1", 0, false},
		{"Inf", 0, false},
		{"NaN", 0, false},
		{"١٢", 0, false}, // Arabic-Indic digits
		{"Sat, 14 Mar 2026 12:02:00 PST", 0, false},
		{"2026-03-14T12:02:00Z", 0, false},
	}
	for _, tt := range tests {
		got, ok := ParseRetryAfter(tt.in, now)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("ParseRetryAfter(%q) = %v, %v; want %v, %v", tt.in, got, ok, tt.want, tt.wantOK)
		}
	}
}

func TestParseRetryAfterSubSecondNow(t *testing.T) {
	// A date has whole seconds; now need not.
	now := time.Date(2026, time.March, 14, 12, 0, 0, 250e6, time.UTC)
	got, ok := ParseRetryAfter("Sat, 14 Mar 2026 12:00:10 GMT", now)
	if !ok || got != 9750*time.Millisecond {
		t.Errorf("got %v, %v; want 9.75s", got, ok)
	}
}
