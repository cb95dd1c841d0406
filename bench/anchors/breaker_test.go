package anchors

import (
	"context"
	"errors"
	"testing"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/sony/gobreaker/v2"

	"github.com/redrivehq/redrive/breaker"
)

// Each breaker benchmark runs one of four loops, on a breaker built afresh
// for it:
//
//   - closed, serial: one successful call through a closed breaker, that is
//     ask permission and record the success, from one goroutine;
//   - closed, parallel: the same from GOMAXPROCS goroutines at once
//     (b.RunParallel) on one shared breaker;
//   - open, serial and parallel: one call refused by an open breaker,
//     tripped by 5 failures, well inside its 60s break: the path an outage
//     hits.
//
// The loops are written out for each library, without a function value in
// between, so that nothing but the library's own calls is measured.

var errAllowed = errors.New("open breaker let a call through")

// breakerCases lists the libraries in the order benchstat shows them.
var breakerCases = []struct {
	lib string
	run func(b *testing.B, open, parallel bool)
}{
	// redrive: Allow, then Record(token, nil). Default count mode, where a
	// success on a closed breaker is not recorded at all.
	{"redrive", func(b *testing.B, open, parallel bool) {
		benchRedrive(b, newRedriveBreaker(), open, parallel)
	}},
	// redrive in ratio mode: Record counts the success in a time bucket.
	{"redrive-ratio", func(b *testing.B, open, parallel bool) {
		benchRedrive(b, newRedriveRatioBreaker(), open, parallel)
	}},
	// redrive: Do(ctx, fn), the wrapped form.
	{"redrive-do", benchRedriveDo},
	// gobreaker: CircuitBreaker.Execute(fn), rolling 30 x 1s window.
	{"gobreaker-execute", benchGobreakerExecute},
	// gobreaker: TwoStepCircuitBreaker.Allow, then done(nil), rolling window.
	{"gobreaker-twostep", func(b *testing.B, open, parallel bool) {
		benchGobreakerTwoStep(b, gobreakerSettings(), open, parallel)
	}},
	// gobreaker: the same with a fixed 30s window, its cheaper mode.
	{"gobreaker-twostep-fixed", func(b *testing.B, open, parallel bool) {
		benchGobreakerTwoStep(b, gobreakerFixedSettings(), open, parallel)
	}},
	// failsafe-go: TryAcquirePermit, then RecordSuccess.
	{"failsafe-permit", func(b *testing.B, open, parallel bool) {
		benchFailsafePermit(b, newFailsafeBreaker(), open, parallel)
	}},
	// failsafe-go: the same with a count-based threshold (the last 5
	// executions all failed) instead of a time-based one: its cheaper mode.
	{"failsafe-permit-count", func(b *testing.B, open, parallel bool) {
		benchFailsafePermit(b, newFailsafeCountBreaker(), open, parallel)
	}},
	// failsafe-go: failsafe.With(cb).Run(fn), the wrapped form.
	{"failsafe-run", benchFailsafeRun},
}

func benchBreakers(b *testing.B, open, parallel bool) {
	for _, c := range breakerCases {
		b.Run("lib="+c.lib, func(b *testing.B) { c.run(b, open, parallel) })
	}
}

// BenchmarkAllowRecord is one successful call through a closed breaker,
// uncontended.
func BenchmarkAllowRecord(b *testing.B) { benchBreakers(b, false, false) }

// BenchmarkAllowRecordParallel is BenchmarkAllowRecord from every P at once
// on one shared breaker.
func BenchmarkAllowRecordParallel(b *testing.B) { benchBreakers(b, false, true) }

// BenchmarkReject is one call refused by an open breaker, uncontended.
func BenchmarkReject(b *testing.B) { benchBreakers(b, true, false) }

// BenchmarkRejectParallel is BenchmarkReject from every P at once.
func BenchmarkRejectParallel(b *testing.B) { benchBreakers(b, true, true) }

func benchRedrive(b *testing.B, br *breaker.Breaker, open, parallel bool) {
	if open {
		tripRedrive(b, br)
	}
	b.ReportAllocs()
	switch {
	case open && parallel:
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := br.Allow(); err == nil {
					b.Error(errAllowed)
					return
				}
			}
		})
	case open:
		for b.Loop() {
			if _, err := br.Allow(); err == nil {
				b.Fatal(errAllowed)
			}
		}
	case parallel:
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				tok, err := br.Allow()
				if err != nil {
					b.Error(err)
					return
				}
				br.Record(tok, nil)
			}
		})
	default:
		for b.Loop() {
			tok, err := br.Allow()
			if err != nil {
				b.Fatal(err)
			}
			br.Record(tok, nil)
		}
	}
}

func benchRedriveDo(b *testing.B, open, parallel bool) {
	br := newRedriveBreaker()
	if open {
		tripRedrive(b, br)
	}
	ctx := context.Background()
	fn := func(context.Context) error { return nil }
	b.ReportAllocs()
	if parallel {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := br.Do(ctx, fn); (err == nil) == open {
					b.Errorf("Do returned %v on a breaker with open=%v", err, open)
					return
				}
			}
		})
		return
	}
	for b.Loop() {
		if err := br.Do(ctx, fn); (err == nil) == open {
			b.Fatalf("Do returned %v on a breaker with open=%v", err, open)
		}
	}
}

func benchGobreakerExecute(b *testing.B, open, parallel bool) {
	cb := gobreaker.NewCircuitBreaker[struct{}](gobreakerSettings())
	if open {
		for range tripFailures {
			if _, err := cb.Execute(fail); !errors.Is(err, errDown) {
				b.Fatalf("gobreaker refused a call before tripping: %v", err)
			}
		}
		if s := cb.State(); s != gobreaker.StateOpen {
			b.Fatalf("gobreaker is %v after %d failures, want open", s, tripFailures)
		}
	}
	b.ReportAllocs()
	if parallel {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := cb.Execute(ok); (err == nil) == open {
					b.Errorf("Execute returned %v on a breaker with open=%v", err, open)
					return
				}
			}
		})
		return
	}
	for b.Loop() {
		if _, err := cb.Execute(ok); (err == nil) == open {
			b.Fatalf("Execute returned %v on a breaker with open=%v", err, open)
		}
	}
}

func benchGobreakerTwoStep(b *testing.B, s gobreaker.Settings, open, parallel bool) {
	cb := gobreaker.NewTwoStepCircuitBreaker[struct{}](s)
	if open {
		for range tripFailures {
			done, err := cb.Allow()
			if err != nil {
				b.Fatalf("gobreaker two-step refused a call before tripping: %v", err)
			}
			done(errDown)
		}
		if s := cb.State(); s != gobreaker.StateOpen {
			b.Fatalf("gobreaker two-step is %v after %d failures, want open", s, tripFailures)
		}
	}
	b.ReportAllocs()
	switch {
	case open && parallel:
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := cb.Allow(); err == nil {
					b.Error(errAllowed)
					return
				}
			}
		})
	case open:
		for b.Loop() {
			if _, err := cb.Allow(); err == nil {
				b.Fatal(errAllowed)
			}
		}
	case parallel:
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				done, err := cb.Allow()
				if err != nil {
					b.Error(err)
					return
				}
				done(nil)
			}
		})
	default:
		for b.Loop() {
			done, err := cb.Allow()
			if err != nil {
				b.Fatal(err)
			}
			done(nil)
		}
	}
}

func benchFailsafePermit(b *testing.B, cb circuitbreaker.CircuitBreaker[any], open, parallel bool) {
	if open {
		tripFailsafe(b, cb)
	}
	b.ReportAllocs()
	switch {
	case open && parallel:
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if cb.TryAcquirePermit() {
					b.Error(errAllowed)
					return
				}
			}
		})
	case open:
		for b.Loop() {
			if cb.TryAcquirePermit() {
				b.Fatal(errAllowed)
			}
		}
	case parallel:
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if !cb.TryAcquirePermit() {
					b.Error("closed failsafe breaker refused a permit")
					return
				}
				cb.RecordSuccess()
			}
		})
	default:
		for b.Loop() {
			if !cb.TryAcquirePermit() {
				b.Fatal("closed failsafe breaker refused a permit")
			}
			cb.RecordSuccess()
		}
	}
}

func benchFailsafeRun(b *testing.B, open, parallel bool) {
	cb := newFailsafeBreaker()
	if open {
		tripFailsafe(b, cb)
	}
	ex := failsafe.With[any](cb)
	fn := func() error { return nil }
	b.ReportAllocs()
	if parallel {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := ex.Run(fn); (err == nil) == open {
					b.Errorf("Run returned %v on a breaker with open=%v", err, open)
					return
				}
			}
		})
		return
	}
	for b.Loop() {
		if err := ex.Run(fn); (err == nil) == open {
			b.Fatalf("Run returned %v on a breaker with open=%v", err, open)
		}
	}
}

func ok() (struct{}, error)   { return struct{}{}, nil }
func fail() (struct{}, error) { return struct{}{}, errDown }

// tripRedrive opens br with 5 failures.
func tripRedrive(tb testing.TB, br *breaker.Breaker) {
	tb.Helper()
	for range tripFailures {
		tok, err := br.Allow()
		if err != nil {
			tb.Fatalf("redrive refused a call before tripping: %v", err)
		}
		br.Record(tok, errDown)
	}
	if s := br.State(); s != breaker.Open {
		tb.Fatalf("redrive breaker is %v after %d failures, want open", s, tripFailures)
	}
}

// tripFailsafe opens cb with 5 failures.
func tripFailsafe(tb testing.TB, cb circuitbreaker.CircuitBreaker[any]) {
	tb.Helper()
	for range tripFailures {
		if !cb.TryAcquirePermit() {
			tb.Fatal("failsafe breaker refused a call before tripping")
		}
		cb.RecordFailure()
	}
	if !cb.IsOpen() {
		tb.Fatalf("failsafe breaker is %v after %d failures, want open", cb.State(), tripFailures)
	}
}
