package retry

import (
	"math/rand/v2"
	"testing"
	"time"
)

func newBenchSource() *rand.Rand { return rand.New(rand.NewPCG(1, 2)) }

var sinkDecision Decision
var sinkDuration time.Duration

func BenchmarkDecide(b *testing.B) {
	p := DefaultPolicy()
	for _, bc := range []struct {
		name string
		src  Source
	}{
		{"source", newBenchSource()},
		{"nil-source", nil},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			attempt := 0
			for b.Loop() {
				if attempt++; attempt > p.MaxRetries { // 1, 2, 3, 1, ... without a division
					attempt = 1
				}
				sinkDecision = p.Decide(Input{Class: transient, Attempt: attempt}, bc.src)
			}
		})
	}
}

func BenchmarkDelay(b *testing.B) {
	for _, j := range allJitters {
		b.Run(j.String(), func(b *testing.B) {
			p := DefaultPolicy()
			p.Jitter = j
			r := newBenchSource()
			b.ReportAllocs()
			n := 0
			var prev time.Duration
			for b.Loop() {
				n = (n + 1) % 8
				prev = p.Delay(n, prev, r)
			}
			sinkDuration = prev
		})
	}
	b.Run("multiplier=1.5", func(b *testing.B) {
		p := DefaultPolicy()
		p.Multiplier = 1.5
		r := newBenchSource()
		b.ReportAllocs()
		n := 0
		for b.Loop() {
			n = (n + 1) % 8
			sinkDuration = p.Delay(n, 0, r)
		}
	})
	b.Run("multiplier=3", func(b *testing.B) {
		p := DefaultPolicy()
		p.Multiplier = 3
		r := newBenchSource()
		b.ReportAllocs()
		n := 0
		for b.Loop() {
			n = (n + 1) % 8
			sinkDuration = p.Delay(n, 0, r)
		}
	})
}

func BenchmarkBudget(b *testing.B) {
	b.Run("serial", func(b *testing.B) {
		budget := NewBudget(BudgetConfig{})
		b.ReportAllocs()
		for b.Loop() {
			budget.Attempt()
			sinkDuration = budget.Retry(time.Second)
		}
	})
	b.Run("fake-clock", func(b *testing.B) {
		clock := newFakeClock()
		budget := NewBudget(BudgetConfig{Now: clock.Now})
		b.ReportAllocs()
		for b.Loop() {
			clock.Advance(time.Millisecond)
			budget.Attempt()
			sinkDuration = budget.Retry(time.Second)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		budget := NewBudget(BudgetConfig{})
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			var d time.Duration
			for pb.Next() {
				budget.Attempt()
				d = budget.Retry(time.Second)
			}
			_ = d
		})
	})
}
