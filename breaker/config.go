package breaker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"
)

// Defaults applied to zero-valued Config fields (5 failures in 30s,
// a 60s break, 1 half-open probe).
const (
	defaultFailures       = 5
	defaultWindow         = 30 * time.Second
	defaultMinRequests    = 10
	defaultBreakDuration  = 60 * time.Second
	defaultHalfOpenProbes = 1
)

// Config tunes a Breaker. A zero-valued field takes its default, so
// Config{} is the default configuration.
type Config struct {
	// Failures trips the breaker once this many failures fall within Window.
	// Successes in between do not reset the count. Default 5.
	//
	// When FailureRatio is set, zero means "no count threshold": only the
	// ratio trips the breaker. Set both to trip on whichever comes first.
	Failures int

	// Window is the sliding window failures (and, in ratio mode, requests)
	// are counted in. Default 30s.
	Window time.Duration

	// FailureRatio, when above zero, also trips the breaker when
	// failures/requests within Window reaches it, once at least MinRequests
	// calls completed within Window. It must lie in [0, 1]; 0 turns ratio
	// mode off.
	FailureRatio float64

	// MinRequests is how many calls must complete within Window before
	// FailureRatio applies. Default 10. Ignored when FailureRatio is zero.
	MinRequests int

	// BreakDuration is how long the breaker stays open before it lets
	// probes through. Default 60s.
	BreakDuration time.Duration

	// HalfOpenProbes is how many probe calls a half-open breaker lets
	// through. All of them must succeed to close the breaker; any failure
	// opens it again. Default 1.
	HalfOpenProbes int

	// IsFailure decides whether a non-nil error counts against the
	// dependency. It is never called with nil. Default: DefaultIsFailure.
	IsFailure func(error) bool

	// OnStateChange, when set, is called after every state change. Calls
	// are made outside the breaker's lock, one at a time and in the order
	// the transitions happened; the callback may use the breaker, even
	// cause further transitions, without deadlocking. The goroutine that
	// caused a transition makes the call, unless another goroutine is
	// already delivering notifications for this breaker, in which case
	// that goroutine delivers it.
	OnStateChange func(name string, from, to State)

	// Now is the clock. Default time.Now. Tests inject a fake clock.
	Now func() time.Time
}

// DefaultConfig returns the default configuration with every field filled
// in: 5 failures within 30s trip the breaker, which stays open 60s and then
// lets 1 probe through. Ratio mode is off (MinRequests is shown at its
// default for when FailureRatio is set).
func DefaultConfig() Config {
	return Config{
		Failures:       defaultFailures,
		Window:         defaultWindow,
		MinRequests:    defaultMinRequests,
		BreakDuration:  defaultBreakDuration,
		HalfOpenProbes: defaultHalfOpenProbes,
	}
}

// Validate reports every invalid field, each by name. Zero values are valid:
// they mean "use the default".
func (c Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("breaker: Config.%s "+format, append([]any{field}, args...)...))
	}
	if c.Failures < 0 {
		bad("Failures", "is %d; it must be >= 0 (0 means the default, 5)", c.Failures)
	}
	if c.Window < 0 {
		bad("Window", "is %v; it must be >= 0 (0 means the default, 30s)", c.Window)
	}
	if math.IsNaN(c.FailureRatio) || c.FailureRatio < 0 || c.FailureRatio > 1 {
		bad("FailureRatio", "is %v; it must lie in [0, 1] (0 turns ratio mode off)", c.FailureRatio)
	}
	if c.MinRequests < 0 {
		bad("MinRequests", "is %d; it must be >= 0 (0 means the default, 10)", c.MinRequests)
	}
	if c.BreakDuration < 0 {
		bad("BreakDuration", "is %v; it must be >= 0 (0 means the default, 60s)", c.BreakDuration)
	}
	if c.HalfOpenProbes < 0 {
		bad("HalfOpenProbes", "is %d; it must be >= 0 (0 means the default, 1)", c.HalfOpenProbes)
	}
	return errors.Join(errs...)
}

// settings is a Config with defaults applied; it never changes after New.
type settings struct {
	failures      int // 0: no count threshold (ratio mode only)
	window        time.Duration
	ratio         float64 // 0: ratio mode off
	minRequests   int
	breakDuration time.Duration
	probes        int
	isFailure     func(error) bool
	onChange      func(string, State, State)
	now           func() time.Time
}

// settle applies defaults to zero fields and to invalid ones, field by field.
func (c Config) settle() settings {
	s := settings{
		failures:      c.Failures,
		window:        c.Window,
		ratio:         c.FailureRatio,
		minRequests:   c.MinRequests,
		breakDuration: c.BreakDuration,
		probes:        c.HalfOpenProbes,
		isFailure:     c.IsFailure,
		onChange:      c.OnStateChange,
		now:           c.Now,
	}
	if math.IsNaN(s.ratio) || s.ratio < 0 || s.ratio > 1 {
		s.ratio = 0
	}
	if s.failures < 0 || (s.failures == 0 && s.ratio == 0) {
		s.failures = defaultFailures
	}
	if s.window <= 0 {
		s.window = defaultWindow
	}
	if s.minRequests <= 0 {
		s.minRequests = defaultMinRequests
	}
	if s.breakDuration <= 0 {
		s.breakDuration = defaultBreakDuration
	}
	if s.probes <= 0 {
		s.probes = defaultHalfOpenProbes
	}
	if s.isFailure == nil {
		s.isFailure = DefaultIsFailure
	}
	if s.now == nil {
		s.now = time.Now
	}
	return s
}

// errIgnored is the marker Ignore attaches; only ignoredError matches it.
var errIgnored = errors.New("breaker: ignored")

type ignoredError struct{ err error }

func (e *ignoredError) Error() string        { return e.err.Error() }
func (e *ignoredError) Unwrap() error        { return e.err }
func (e *ignoredError) Is(target error) bool { return target == errIgnored }

// Ignore marks err as not a failure for the default failure rule: the
// dependency answered and the error is the caller's own business (a record
// not found, a validation error). The marked error has the same message, and
// errors.Is and errors.As still reach err. Ignore(nil) returns nil.
//
// A breaker with a custom Config.IsFailure sees the mark only if that
// function looks for it, for instance by calling DefaultIsFailure first.
func Ignore(err error) error {
	if err == nil {
		return nil
	}
	return &ignoredError{err: err}
}

// DefaultIsFailure is the failure rule used when Config.IsFailure is nil: a
// non-nil error is a failure unless it is (or wraps) context.Canceled or was
// marked with Ignore. context.DeadlineExceeded is a failure: a dependency too
// slow to answer is failing.
func DefaultIsFailure(err error) bool {
	return err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, errIgnored)
}
