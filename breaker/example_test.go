package breaker_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redrivehq/redrive/breaker"
)

func ExampleBreaker_Do() {
	// A fixed clock keeps the output stable; leave Now nil in real code.
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	b := breaker.New("payments", breaker.Config{
		Failures:      2,
		BreakDuration: time.Minute,
		Now:           func() time.Time { return now },
	})
	ctx := context.Background()
	down := func(context.Context) error { return errors.New("connection refused") }

	for range 3 {
		err := b.Do(ctx, down)
		fmt.Println(err, errors.Is(err, breaker.ErrOpen))
	}

	now = now.Add(time.Minute) // the break is over: one probe may go
	fmt.Println(b.State())
	err := b.Do(ctx, func(context.Context) error { return nil })
	fmt.Println(err, b.State())
	// Output:
	// connection refused false
	// connection refused false
	// breaker "payments": circuit open, half-opens at 2025-03-01T12:01:00Z true
	// half_open
	// <nil> closed
}

func ExampleBreaker_Allow() {
	b := breaker.New("search", breaker.Config{})
	tok, err := b.Allow()
	if err != nil {
		var open *breaker.OpenError
		if errors.As(err, &open) {
			fmt.Println("retry after", open.ReadyAt)
		}
		return
	}
	err = nil // ... make the call ...
	b.Record(tok, err)
	fmt.Println(b.State())
	// Output: closed
}

func ExampleRegistry() {
	reg := breaker.NewRegistry(breaker.Config{
		OnStateChange: func(name string, from, to breaker.State) {
			fmt.Printf("%s: %s -> %s\n", name, from, to)
		},
	})
	reg.Configure("smtp", breaker.Config{Failures: 1})

	reg.Get("payments") // created with the registry's defaults
	reg.Get("smtp").Do(context.Background(), func(context.Context) error {
		return errors.New("550 mailbox unavailable")
	})

	for _, st := range reg.Statuses() {
		fmt.Println(st.Name, st.State, st.Trips)
	}
	// Output:
	// smtp: closed -> open
	// payments closed 0
	// smtp open 1
}
