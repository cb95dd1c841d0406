package breaker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	failclass "github.com/redrivehq/redrive/failure"
)

// Defaults applied to zero-valued Config fields: at least 5 failures making
// up at least half of the calls within 30s trip the breaker, which stays open
// 60s and then lets 1 probe through.
const (
	defaultFailures       = 5
	defaultWindow         = 30 * time.Second
	defaultFailureRatio   = 0.5
	defaultBreakDuration  = 60 * time.Second
	defaultHalfOpenProbes = 1
)

// NoConsecutive, as Config.Consecutive, turns the consecutive-failures rule
// off: only the window's ratio (with Failures) trips the breaker.
const NoConsecutive = -1

// Config tunes a Breaker. A zero-valued field takes its default, so
// Config{} is the default configuration.
//
// # The trip rule
//
// By default a closed breaker trips when, within the last Window, at least
// Failures calls failed AND failures make up at least FailureRatio of the
// calls that completed (and at least MinRequests calls completed, when that
// is set), OR the last Consecutive calls (default: Failures) all failed. With
// the defaults, 5 failures and 50% within 30s, or 5 failures in a row: a
// dependency that fails 1% of a busy stream of calls never trips the breaker
// (five failures in a row come once in ten billion calls at 1%), and one
// that goes down trips it at its 5th failure, even right after thousands of
// successes that keep the window's ratio low for a while. A dependency that
// fails a large share of calls without going down (20%: five in a row once
// in about 3,000 calls) may trip on a run; set Consecutive to NoConsecutive
// to let only the ratio decide.
//
// CountOnly turns the ratio off: the breaker then trips on Failures failures
// within Window whatever the number of successes in between. That was the
// default before ratio and count were combined; set CountOnly to get it back.
type Config struct {
	// Failures is the minimum number of failures within Window that trips
	// the breaker (together with FailureRatio, unless CountOnly). Default 5.
	Failures int

	// Window is the sliding window failures and calls are counted in.
	// Default 30s.
	Window time.Duration

	// FailureRatio is the minimum share of failures among the calls that
	// completed within Window for the breaker to trip, in (0, 1]. Zero
	// means the default, 0.5. It must stay zero when CountOnly is set.
	FailureRatio float64

	// CountOnly turns the failure ratio off: Failures failures within
	// Window trip the breaker, whatever the successes in between. In this
	// mode successes are not tracked at all, so a closed breaker's
	// Record(tok, nil) writes nothing.
	CountOnly bool

	// Consecutive trips the breaker when that many calls failed in a row,
	// with no success between them and each within Window of the next one
	// (still in the window, whose 20 buckets slide in steps of Window/20,
	// when the next one came), whatever the ratio (MinRequests still
	// applies). Zero means
	// Failures; NoConsecutive turns the rule off. Ignored with CountOnly,
	// where Failures failures trip the breaker anyway.
	Consecutive int

	// MinRequests is how many calls must have completed within Window
	// before the ratio may trip the breaker. Zero (the default) adds no
	// minimum of its own: Failures failures are already that many calls.
	// Set it above Failures to keep a few failures among the first calls
	// of a quiet dependency from tripping it. Ignored when CountOnly is set.
	MinRequests int

	// BreakDuration is how long the breaker stays open before it lets
	// probes through. Default 60s.
	BreakDuration time.Duration

	// HalfOpenProbes is how many probe calls a half-open breaker lets
	// through. All of them must succeed to close the breaker; any failure
	// opens it again. Default 1.
	HalfOpenProbes int

	// CountRateLimited counts rate-limited calls (see IsRateLimited) like
	// any other outcome. By default they are neutral: neither a failure
	// nor, for the ratio, a completed call, because a dependency that
	// answers 429 is up and asking callers to slow down, which Retry-After
	// handles; fencing it off would only add a second, longer wait.
	CountRateLimited bool

	// IsRateLimited decides whether a non-nil error is a rate-limited
	// answer. It is never called with nil. Default: DefaultIsRateLimited.
	IsRateLimited func(error) bool

	// IsFailure decides whether a non-nil error counts against the
	// dependency. It is never called with nil, nor for an error that is
	// rate-limited and not counted (see CountRateLimited). Default:
	// DefaultIsFailure.
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
// in: at least 5 failures that make up at least 50% of the calls completed
// within 30s trip the breaker, which stays open 60s and then lets 1 probe
// through. Rate-limited calls are not counted. MinRequests is 0: no minimum
// beyond Failures.
func DefaultConfig() Config {
	return Config{
		Failures:       defaultFailures,
		Window:         defaultWindow,
		FailureRatio:   defaultFailureRatio,
		Consecutive:    defaultFailures,
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
	switch {
	case math.IsNaN(c.FailureRatio) || c.FailureRatio < 0 || c.FailureRatio > 1:
		bad("FailureRatio", "is %v; it must lie in [0, 1] (0 means the default, 0.5)", c.FailureRatio)
	case c.CountOnly && c.FailureRatio != 0:
		bad("FailureRatio", "is %v but CountOnly is set; CountOnly turns the ratio off, so leave FailureRatio at 0", c.FailureRatio)
	}
	if c.Consecutive < NoConsecutive {
		bad("Consecutive", "is %d; it must be >= 0 (0 means Failures) or NoConsecutive (-1, off)", c.Consecutive)
	}
	if c.MinRequests < 0 {
		bad("MinRequests", "is %d; it must be >= 0 (0 means no minimum beyond Failures)", c.MinRequests)
	}
	if c.BreakDuration < 0 {
		bad("BreakDuration", "is %v; it must be >= 0 (0 means the default, 60s)", c.BreakDuration)
	}
	if c.HalfOpenProbes < 0 {
		bad("HalfOpenProbes", "is %d; it must be >= 0 (0 means the default, 1)", c.HalfOpenProbes)
	}
	return errors.Join(errs...)
}

// Trips reports whether a closed breaker configured by c trips when failures
// of the requests calls completed within one Window failed: at least Failures
// failures and, unless CountOnly, at least MinRequests calls and a failure
// share of at least FailureRatio. Rate-limited calls that are not counted
// belong in neither number. Defaults apply as in New.
//
// A Breaker applies this rule to its own counts; code that keeps counts
// elsewhere (for several processes sharing a dependency) applies it to
// those.
func (c Config) Trips(failures, requests int64) bool {
	s := c.settle()
	return s.trips(failures, requests)
}

// settings is a Config with defaults applied; it never changes after New.
type settings struct {
	failures         int
	consecutive      int // 0: off
	window           time.Duration
	ratio            float64 // 0: count only
	minRequests      int
	breakDuration    time.Duration
	probes           int
	countRateLimited bool
	isRateLimited    func(error) bool
	isFailure        func(error) bool
	onChange         func(string, State, State)
	now              func() time.Time
	systemClock      bool // now is time.Now: the monotonic clock alone serves rel
}

// trips is the trip rule (see Config.Trips).
func (s *settings) trips(failures, requests int64) bool {
	if failures < int64(s.failures) {
		return false
	}
	if s.ratio == 0 {
		return true
	}
	return requests > 0 && requests >= int64(s.minRequests) &&
		float64(failures)/float64(requests) >= s.ratio
}

// settle applies defaults to zero fields and to invalid ones, field by field.
func (c Config) settle() settings {
	s := settings{
		failures:         c.Failures,
		window:           c.Window,
		ratio:            c.FailureRatio,
		minRequests:      c.MinRequests,
		breakDuration:    c.BreakDuration,
		probes:           c.HalfOpenProbes,
		countRateLimited: c.CountRateLimited,
		isRateLimited:    c.IsRateLimited,
		isFailure:        c.IsFailure,
		onChange:         c.OnStateChange,
		now:              c.Now,
	}
	switch {
	case c.CountOnly:
		s.ratio = 0
	case math.IsNaN(s.ratio) || s.ratio <= 0 || s.ratio > 1:
		s.ratio = defaultFailureRatio
	}
	if s.failures <= 0 {
		s.failures = defaultFailures
	}
	switch {
	case c.CountOnly || c.Consecutive < 0:
		s.consecutive = 0
	case c.Consecutive == 0:
		s.consecutive = s.failures
	default:
		s.consecutive = c.Consecutive
	}
	if s.window <= 0 {
		s.window = defaultWindow
	}
	if s.minRequests < 0 {
		s.minRequests = 0
	}
	if s.breakDuration <= 0 {
		s.breakDuration = defaultBreakDuration
	}
	if s.probes <= 0 {
		s.probes = defaultHalfOpenProbes
	}
	if s.isRateLimited == nil {
		s.isRateLimited = DefaultIsRateLimited
	}
	if s.isFailure == nil {
		s.isFailure = DefaultIsFailure
	}
	if s.now == nil {
		s.now = time.Now
		s.systemClock = true
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

// errRateLimited is the marker MarkRateLimited attaches.
var errRateLimited = errors.New("breaker: rate limited")

type rateLimitedError struct{ err error }

func (e *rateLimitedError) Error() string        { return e.err.Error() }
func (e *rateLimitedError) Unwrap() error        { return e.err }
func (e *rateLimitedError) Is(target error) bool { return target == errRateLimited }

// MarkRateLimited marks err as a rate-limited answer for
// DefaultIsRateLimited: code that classifies errors its own way (a job
// engine with status overrides or message rules) uses it to tell the breaker
// that the dependency asked to slow down. The marked error has the same
// message, and errors.Is and errors.As still reach err.
// MarkRateLimited(nil) returns nil.
func MarkRateLimited(err error) error {
	if err == nil {
		return nil
	}
	return &rateLimitedError{err: err}
}

// DefaultIsRateLimited is the rule used when Config.IsRateLimited is nil: err
// was marked with MarkRateLimited, or failure.Classify finds it RateLimited
// (a failure.WrapRateLimited error, an HTTP 429 *failure.StatusError, a 503
// carrying a Retry-After).
func DefaultIsRateLimited(err error) bool {
	return err != nil && (errors.Is(err, errRateLimited) || failclass.Classify(err).Class == failclass.RateLimited)
}
