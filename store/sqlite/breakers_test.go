package sqlite_test

import (
	"errors"
	"testing"
	"time"

	"github.com/redrivehq/redrive/store"
)

// FuzzBreakerName: a name CheckBreakerName accepts is stored and read back
// byte for byte, through every breaker call; any other name is ErrInvalid
// and stores nothing.
func FuzzBreakerName(f *testing.F) {
	for _, s := range []string{"payments", "api.example.com:443", "ünï cödé", "", "a\x00b", "\xff", "tab\there", "x\x7f",
		string(make([]byte, 201))} {
		f.Add(s)
	}
	s := open(f)
	f.Cleanup(func() { s.Close() })
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	rule := store.BreakerRule{Failures: 1, Window: time.Minute, BreakDuration: time.Minute}
	f.Fuzz(func(t *testing.T, name string) {
		valid := store.CheckBreakerName(name) == nil
		st, err := s.ReportBreaker(t.Context(), store.BreakerReport{Name: name, Process: "p", Now: now, Failures: 1, Rule: rule})
		if !valid {
			if !errors.Is(err, store.ErrInvalid) {
				t.Fatalf("ReportBreaker(%q): %v, want ErrInvalid", name, err)
			}
			if _, err := s.Breaker(t.Context(), name); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("Breaker(%q) after a refused report: %v", name, err)
			}
			return
		}
		if err != nil || st.Name != name || st.State != store.BreakerOpen {
			t.Fatalf("ReportBreaker(%q) = %+v, %v", name, st, err)
		}
		if _, err := s.SetBreaker(t.Context(), store.BreakerSet{Name: name, State: store.BreakerClosed, Now: now}); err != nil {
			t.Fatalf("SetBreaker(%q): %v", name, err)
		}
		got, err := s.Breaker(t.Context(), name)
		if err != nil || got.Name != name || got.State != store.BreakerClosed {
			t.Fatalf("Breaker(%q) = %+v, %v", name, got, err)
		}
	})
}
