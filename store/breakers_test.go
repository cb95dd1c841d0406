package store

import (
	"testing"
	"time"
)

// TestBreakerFleetRun: the fleet's run of failures in a row is the sum of
// the processes' runs; a process reporting that a success broke its run
// takes its share out; a run trips the breaker whatever the ratio.
func TestBreakerFleetRun(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	rule := BreakerRule{Failures: 5, Ratio: 0.5, Consecutive: 5, Window: 30 * time.Second, BreakDuration: time.Minute}
	st := NewBreakerState("dep", t0)
	report := func(process string, at time.Duration, failures, requests, streak int) {
		t.Helper()
		r := BreakerReport{Name: "dep", Process: process, Now: t0.Add(at), Failures: failures, Requests: requests, Streak: streak, Rule: rule}
		if err := r.Validate(); err != nil {
			t.Fatal(err)
		}
		ApplyBreakerReport(&st, r)
	}
	// Three processes after a busy spell: 1000 calls each, failures in a
	// row 2 + 1 + 1 = 4: closed (the ratio is far below 50%).
	report("a", 0, 1, 1000, 1)
	report("b", time.Millisecond, 1, 1000, 1)
	report("a", 2*time.Millisecond, 2, 1001, 2)
	report("c", 3*time.Millisecond, 1, 1000, 1)
	if st.State != BreakerClosed {
		t.Fatalf("state = %s after a fleet run of 4, want closed", st.State)
	}
	// b's run broke (a success): its share leaves the fleet's run.
	report("b", 4*time.Millisecond, 1, 1002, 0)
	report("c", 5*time.Millisecond, 2, 1001, 2)
	if st.State != BreakerClosed {
		t.Fatalf("state = %s after b's run broke (fleet run 4), want closed", st.State)
	}
	report("b", 6*time.Millisecond, 2, 1003, 1)
	if st.State != BreakerOpen || st.OpenedBy != "b" {
		t.Fatalf("state = %s opened by %q after a fleet run of 5, want open by b", st.State, st.OpenedBy)
	}

	// A run whose reports are older than the window is forgotten.
	st = NewBreakerState("dep", t0)
	report("a", 0, 4, 100, 4)
	report("b", 31*time.Second, 1, 100, 1)
	if st.State != BreakerClosed {
		t.Fatalf("state = %s: a run reported a window ago counted, want closed", st.State)
	}

	// Consecutive 0 (count-only, or the rule off): runs do not trip.
	st = NewBreakerState("dep", t0)
	rule.Consecutive = 0
	report("a", 0, 3, 1000, 3)
	report("b", time.Millisecond, 3, 1000, 3)
	if st.State != BreakerClosed {
		t.Fatalf("state = %s with the consecutive rule off, want closed", st.State)
	}
	// A negative run is refused.
	if err := (BreakerReport{Name: "dep", Process: "a", Now: t0, Streak: -1, Rule: rule}).Validate(); err == nil {
		t.Fatal("a negative streak was accepted")
	}
}
