package breaker_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/redrivehq/redrive/breaker"
	"github.com/redrivehq/redrive/failure"
)

func ExampleConfig_Trips() {
	def := breaker.Config{} // at least 5 failures and 50% of the calls
	fmt.Println(def.Trips(5, 5), def.Trips(5, 10), def.Trips(100, 10_000), def.Trips(4, 4))

	old := breaker.Config{CountOnly: true} // 5 failures, whatever the successes
	fmt.Println(old.Trips(5, 10_000))
	// Output:
	// true true false false
	// true
}

func ExampleMarkRateLimited() {
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	b := breaker.New("search", breaker.Config{Failures: 1, Now: func() time.Time { return now }})

	// A 429 is the dependency asking to slow down: not counted.
	tok, _ := b.Allow()
	b.Record(tok, &failure.StatusError{Code: 429, RetryAfter: time.Second})
	// Nor is an error a caller's own classification finds rate-limited.
	tok, _ = b.Allow()
	b.Record(tok, breaker.MarkRateLimited(errors.New("quota exceeded for today")))
	fmt.Println(b.State(), b.Status().Failures)

	// A 502 is a failure.
	tok, _ = b.Allow()
	b.Record(tok, &failure.StatusError{Code: 502})
	fmt.Println(b.State())
	// Output:
	// closed 0
	// open
}
