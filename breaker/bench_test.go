package breaker_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/redrivehq/redrive/breaker"
)

// BenchmarkAllowRecord is the success path of a closed breaker with the
// default configuration (failures and ratio), which reads the monotonic
// clock and counts each success with an atomic add in its time bucket.
// Requirement: 0 allocs, and at most 50 ns/op beyond BenchmarkMonotonicClock
// (the clock read it pays per success).
func BenchmarkAllowRecord(b *testing.B) {
	br := breaker.New("dep", breaker.Config{})
	b.ReportAllocs()
	for b.Loop() {
		tok, err := br.Allow()
		if err != nil {
			b.Fatal(err)
		}
		br.Record(tok, nil)
	}
}

// BenchmarkMonotonicClock is the clock read BenchmarkAllowRecord pays per
// success, to measure it against: time.Since of a time that carries the
// monotonic clock.
func BenchmarkMonotonicClock(b *testing.B) {
	base := time.Now()
	var d time.Duration
	for b.Loop() {
		d += time.Since(base)
	}
	if d < 0 {
		b.Fatal(d)
	}
}

// BenchmarkAllowRecordParallel is BenchmarkAllowRecord from every P at once
// on one shared breaker.
func BenchmarkAllowRecordParallel(b *testing.B) {
	br := breaker.New("dep", breaker.Config{})
	b.ReportAllocs()
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
}

// BenchmarkAllowRecordCountOnly is the success path of a closed count-only
// breaker, which writes nothing. Requirement: at most 50 ns/op, 0 allocs.
func BenchmarkAllowRecordCountOnly(b *testing.B) {
	br := breaker.New("dep", breaker.Config{CountOnly: true})
	b.ReportAllocs()
	for b.Loop() {
		tok, _ := br.Allow()
		br.Record(tok, nil)
	}
}

// BenchmarkAllowRecordCountOnlyParallel is BenchmarkAllowRecordCountOnly
// from every P.
func BenchmarkAllowRecordCountOnlyParallel(b *testing.B) {
	br := breaker.New("dep", breaker.Config{CountOnly: true})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			tok, _ := br.Allow()
			br.Record(tok, nil)
		}
	})
}

// BenchmarkDo is the closed success path through Do.
func BenchmarkDo(b *testing.B) {
	br := breaker.New("dep", breaker.Config{})
	ctx := context.Background()
	fn := func(context.Context) error { return nil }
	b.ReportAllocs()
	for b.Loop() {
		if err := br.Do(ctx, fn); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAllowOpen is the rejection path of an open breaker: one atomic
// load and one clock read, returning the break's shared *OpenError.
func BenchmarkAllowOpen(b *testing.B) {
	br := breaker.New("dep", breaker.Config{Failures: 1})
	tok, _ := br.Allow()
	br.Record(tok, errors.New("down"))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := br.Allow(); err == nil {
			b.Fatal("open breaker allowed a call")
		}
	}
}

// BenchmarkRegistryGet looks up an existing name among 100.
func BenchmarkRegistryGet(b *testing.B) {
	reg := breaker.NewRegistry(breaker.Config{})
	for i := range 100 {
		reg.Get("dep-" + strconv.Itoa(i))
	}
	b.ReportAllocs()
	for b.Loop() {
		if reg.Get("dep-42") == nil {
			b.Fatal("nil breaker")
		}
	}
}

// BenchmarkRegistryGetParallel is BenchmarkRegistryGet from every P.
func BenchmarkRegistryGetParallel(b *testing.B) {
	reg := breaker.NewRegistry(breaker.Config{})
	for i := range 100 {
		reg.Get("dep-" + strconv.Itoa(i))
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if reg.Get("dep-42") == nil {
				b.Error("nil breaker")
				return
			}
		}
	})
}
