package redrive

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redrivehq/redrive/store"
)

// ParseRate parses a rate limit's rate, "N/interval": N jobs (an integer
// from 1 to store.MaxRateN) per interval, where the interval is a unit
// (ms, s, m, h: "50/s" is 50 a second) or a Go duration ("3/1m", "10/1.5s",
// "1/24h"), from store.MinRatePer to store.MaxRatePer, in whole
// microseconds. "none" (or "") is no rate: the zero LimitRate. The burst
// is not part of it: the rate's Burst is 0, to be set by the caller.
func ParseRate(s string) (store.LimitRate, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "none" {
		return store.LimitRate{}, nil
	}
	ns, per, ok := strings.Cut(s, "/")
	if !ok {
		return store.LimitRate{}, &FieldError{Field: "rate", Err: fmt.Errorf("%w: rate %q: want N/interval, e.g. 50/s or 3/1m", ErrInvalid, clipName(s))}
	}
	n, err := strconv.Atoi(strings.TrimSpace(ns))
	if err != nil || n < 1 || n > store.MaxRateN {
		return store.LimitRate{}, &FieldError{Field: "rate", Err: fmt.Errorf("%w: rate %q: the count must be an integer from 1 to %d", ErrInvalid, clipName(s), store.MaxRateN)}
	}
	per = strings.TrimSpace(per)
	var d time.Duration
	switch per {
	case "ms":
		d = time.Millisecond
	case "s":
		d = time.Second
	case "m", "min":
		d = time.Minute
	case "h":
		d = time.Hour
	default:
		if d, err = time.ParseDuration(per); err != nil {
			return store.LimitRate{}, &FieldError{Field: "interval", Err: fmt.Errorf("%w: rate %q: interval %q: want ms, s, m, h or a duration such as 1m or 1.5s", ErrInvalid, clipName(s), clipName(per))}
		}
	}
	r := store.LimitRate{N: n, Per: d, Burst: 1}
	if err := checkRate(r); err != nil {
		return store.LimitRate{}, err
	}
	r.Burst = 0
	return r, nil
}

// FormatRate writes r's N and Per as ParseRate reads them ("50/s",
// "3/1m0s"); "" for no rate.
func FormatRate(r store.LimitRate) string {
	if r.N == 0 {
		return ""
	}
	switch r.Per {
	case time.Millisecond:
		return fmt.Sprintf("%d/ms", r.N)
	case time.Second:
		return fmt.Sprintf("%d/s", r.N)
	case time.Minute:
		return fmt.Sprintf("%d/m", r.N)
	case time.Hour:
		return fmt.Sprintf("%d/h", r.N)
	}
	return fmt.Sprintf("%d/%s", r.N, r.Per)
}

// checkRate reports a rate no store keeps as an error wrapping ErrInvalid
// with the field at fault: rate, interval or burst.
func checkRate(r store.LimitRate) error {
	err := store.CheckLimitRate(r)
	if err == nil {
		return nil
	}
	field := "rate"
	msg := err.Error()
	switch {
	case strings.Contains(msg, "interval:"):
		field = "interval"
	case strings.Contains(msg, "burst:"):
		field = "burst"
	}
	return &FieldError{Field: field, Err: err}
}

// rateOf returns the rate of a limit's Rate and Burst fields: the zero
// rate when Rate is empty (Burst must then be 0), Burst 0 read as 1.
func rateOf(rate string, burst int) (store.LimitRate, error) {
	r, err := ParseRate(rate)
	if err != nil {
		return store.LimitRate{}, err
	}
	if r.N == 0 {
		if burst != 0 {
			return store.LimitRate{}, &FieldError{Field: "burst", Err: fmt.Errorf("%w: a burst without a rate", ErrInvalid)}
		}
		return r, nil
	}
	r.Burst = burst
	if burst == 0 {
		r.Burst = 1
	}
	if err := checkRate(r); err != nil {
		return store.LimitRate{}, err
	}
	return r, nil
}

// SetLimitRate changes, fleet-wide, the rate of the limit named name (the
// zero rate removes it; Burst 0 keeps the limit's burst, 1 when it has no
// rate yet), and creates the limit, with no cap on running jobs, if the
// store has none of that name. A rate set so wins over the one of the
// limits given to SetLimits. A bad name or rate is an error wrapping
// ErrInvalid naming the field (name, rate, interval, burst), and nothing
// is stored; so is removing the rate of a limit without a max (it would
// be no limit: the error names rate and wraps store.ErrNoCapNoRate).
func (c *Client) SetLimitRate(ctx context.Context, name string, r store.LimitRate) (store.LimitState, error) {
	if err := CheckName("limit name", name); err != nil {
		return store.LimitState{}, &FieldError{Field: "name", Err: err}
	}
	if r.N == 0 && (r.Per != 0 || r.Burst != 0) {
		return store.LimitState{}, &FieldError{Field: "rate", Err: fmt.Errorf("%w: rate: %d jobs per interval is out of range [1, %d]", ErrInvalid, r.N, store.MaxRateN)}
	}
	chk := r
	if chk.N != 0 && chk.Burst == 0 {
		chk.Burst = 1 // the store keeps the limit's burst
	}
	if err := checkRate(chk); err != nil {
		return store.LimitState{}, err
	}
	st, err := c.store.SetLimitRate(ctx, name, r, c.now())
	if errors.Is(err, store.ErrNoCapNoRate) {
		return store.LimitState{}, &FieldError{Field: "rate", Err: fmt.Errorf("%w: limit %q has no max: removing its rate would leave it no limit (give it a max first)", ErrInvalid, clipName(name))}
	}
	if err != nil {
		return store.LimitState{}, fmt.Errorf("redrive: set limit rate: %w", err)
	}
	return st, nil
}
