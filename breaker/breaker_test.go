package breaker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// fakeClock is a clock tests move by hand; safe for concurrent use.
type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) Now() time.Time          { return t0.Add(time.Duration(c.ns.Load())) }
func (c *fakeClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

var errBoom = errors.New("boom")

func newTest(t *testing.T, cfg Config) (*Breaker, *fakeClock) {
	t.Helper()
	clk := &fakeClock{}
	cfg.Now = clk.Now
	b, err := NewChecked("dep", cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b, clk
}

// call runs one call through b with the given outcome and returns Allow's error.
func call(b *Breaker, outcome error) error {
	tok, err := b.Allow()
	if err != nil {
		return err
	}
	b.Record(tok, outcome)
	return nil
}

func mustState(t *testing.T, b *Breaker, want State) {
	t.Helper()
	if got := b.State(); got != want {
		t.Fatalf("state = %v, want %v", got, want)
	}
}

func TestCountTripsAfterExactlyFailures(t *testing.T) {
	b, clk := newTest(t, Config{CountOnly: true})
	for i := range 4 {
		if err := call(b, errBoom); err != nil {
			t.Fatalf("failure %d rejected: %v", i+1, err)
		}
		// Successes in between do not reset the count: it is N failures
		// within the window, not N in a row.
		for range 3 {
			if err := call(b, nil); err != nil {
				t.Fatal(err)
			}
		}
		clk.Advance(time.Second)
	}
	mustState(t, b, Closed)
	if st := b.Status(); st.Failures != 4 || st.Trips != 0 {
		t.Fatalf("status = %+v, want 4 failures, 0 trips", st)
	}
	if err := call(b, errBoom); err != nil {
		t.Fatal(err)
	}
	mustState(t, b, Open)
	if st := b.Status(); st.Trips != 1 || st.Failures != 5 {
		t.Fatalf("status = %+v, want 5 failures, 1 trip", st)
	}
}

func TestCountWindowSlides(t *testing.T) {
	b, clk := newTest(t, Config{CountOnly: true, Failures: 5, Window: 30 * time.Second})
	// Failures at 0s, 10s, 20s, 29s.
	for _, at := range []time.Duration{0, 10, 20, 29} {
		clk.ns.Store(int64(at * time.Second))
		if err := call(b, errBoom); err != nil {
			t.Fatal(err)
		}
	}
	// At 30s the failure at 0s is exactly one window old and no longer
	// counts: 10, 20, 29, 30 is four.
	clk.ns.Store(int64(30 * time.Second))
	if err := call(b, errBoom); err != nil {
		t.Fatal(err)
	}
	mustState(t, b, Closed)
	if got := b.Status().Failures; got != 4 {
		t.Fatalf("failures in window = %d, want 4", got)
	}
	// At 31s: 10, 20, 29, 30, 31 is five.
	clk.ns.Store(int64(31 * time.Second))
	if err := call(b, errBoom); err != nil {
		t.Fatal(err)
	}
	mustState(t, b, Open)
}

func TestCountOldFailuresExpire(t *testing.T) {
	b, clk := newTest(t, Config{CountOnly: true, Failures: 3, Window: 10 * time.Second})
	for range 20 { // two failures every 10s never reach three in 10s
		call(b, errBoom)
		call(b, errBoom)
		clk.Advance(10 * time.Second)
	}
	mustState(t, b, Closed)
	if got := b.Status().Failures; got != 0 {
		t.Fatalf("failures after the window = %d, want 0", got)
	}
}

func TestRatioTripsAfterMinRequestsAtRatio(t *testing.T) {
	b, _ := newTest(t, Config{FailureRatio: 0.5, MinRequests: 10, Consecutive: NoConsecutive})
	// Nine failures out of nine calls is 100% and above Failures (5), but
	// below MinRequests.
	for range 9 {
		if err := call(b, errBoom); err != nil {
			t.Fatal(err)
		}
	}
	mustState(t, b, Closed)
	if st := b.Status(); st.Requests != 9 || st.Failures != 9 {
		t.Fatalf("status = %+v, want 9/9", st)
	}
	call(b, errBoom) // the tenth call reaches MinRequests
	mustState(t, b, Open)

	b, _ = newTest(t, Config{FailureRatio: 0.5, MinRequests: 10, Consecutive: NoConsecutive})
	for range 6 {
		call(b, nil)
	}
	for range 5 {
		call(b, errBoom)
	}
	mustState(t, b, Closed) // 5/11 = 0.45
	call(b, errBoom)
	mustState(t, b, Open) // 6/12 = 0.5
	if st := b.Status(); st.Requests != 12 || st.Failures != 6 {
		t.Fatalf("status = %+v, want 6 failures in 12 requests", st)
	}
}

func TestRatioExactDecimal(t *testing.T) {
	// 3/10 must reach a ratio of 0.3 despite floating point.
	b, _ := newTest(t, Config{Failures: 3, FailureRatio: 0.3, MinRequests: 10})
	for range 7 {
		call(b, nil)
	}
	call(b, errBoom)
	call(b, errBoom)
	mustState(t, b, Closed)
	call(b, errBoom)
	mustState(t, b, Open)
}

func TestRatioWindowSlides(t *testing.T) {
	b, clk := newTest(t, Config{FailureRatio: 0.5, MinRequests: 10, Window: 30 * time.Second, Consecutive: NoConsecutive})
	for range 40 {
		call(b, nil)
	}
	clk.Advance(31 * time.Second) // the successes leave the window
	for range 9 {
		call(b, errBoom)
	}
	mustState(t, b, Closed)
	if st := b.Status(); st.Requests != 9 {
		t.Fatalf("requests = %d, want 9 (old successes slid out)", st.Requests)
	}
	call(b, errBoom)
	mustState(t, b, Open)
}

func TestRatioAndCount(t *testing.T) {
	// Both thresholds must be met: 3 failures among 13 calls reach
	// Failures but not the ratio.
	b, _ := newTest(t, Config{Failures: 3, FailureRatio: 0.5, Consecutive: NoConsecutive})
	for range 10 {
		call(b, nil)
	}
	for range 9 {
		call(b, errBoom)
	}
	mustState(t, b, Closed) // 9/19
	if st := b.Status(); st.Requests != 19 || st.Failures != 9 {
		t.Fatalf("status = %+v, want 9 failures in 19 requests", st)
	}
	call(b, errBoom) // 10/20: both met
	mustState(t, b, Open)

	// 100% failures below Failures do not trip.
	b, _ = newTest(t, Config{Failures: 3, FailureRatio: 0.5, Consecutive: NoConsecutive})
	call(b, errBoom)
	call(b, errBoom)
	mustState(t, b, Closed)
	call(b, errBoom)
	mustState(t, b, Open)
}

func TestDefaultTripRule(t *testing.T) {
	// A full outage trips the default breaker at its 5th failure.
	b, _ := newTest(t, Config{})
	for i := range 4 {
		if err := call(b, errBoom); err != nil {
			t.Fatalf("failure %d rejected: %v", i+1, err)
		}
	}
	mustState(t, b, Closed)
	call(b, errBoom)
	mustState(t, b, Open)

	// Failures spread among many successes do not.
	b, _ = newTest(t, Config{})
	for i := range 1000 {
		if i%10 == 0 {
			call(b, errBoom)
		} else {
			call(b, nil)
		}
	}
	mustState(t, b, Closed)
	if st := b.Status(); st.Failures != 100 || st.Requests != 1000 {
		t.Fatalf("status = %+v, want 100 failures in 1000 requests", st)
	}

	// DefaultConfig is Config{}.
	for _, cfg := range []Config{{}, DefaultConfig()} {
		for _, tc := range []struct {
			fails, reqs int64
			want        bool
		}{
			{4, 4, false}, {5, 5, true}, {5, 10, true}, {5, 11, false}, {50, 100, true}, {49, 100, false},
			{100, 10000, false}, {0, 0, false},
		} {
			if got := cfg.Trips(tc.fails, tc.reqs); got != tc.want {
				t.Errorf("%+v.Trips(%d, %d) = %v, want %v", cfg, tc.fails, tc.reqs, got, tc.want)
			}
		}
	}
	if !(Config{CountOnly: true}).Trips(5, 1_000_000) || (Config{CountOnly: true}).Trips(4, 4) {
		t.Error("CountOnly: Trips must look at the failure count alone")
	}
	if (Config{MinRequests: 8}).Trips(5, 5) || !(Config{MinRequests: 8}).Trips(5, 8) {
		t.Error("MinRequests is not applied")
	}
}

func trip(t *testing.T, b *Breaker) {
	t.Helper()
	for b.State() == Closed {
		if err := call(b, errBoom); err != nil {
			t.Fatal(err)
		}
	}
	mustState(t, b, Open)
}

func TestOpenRejects(t *testing.T) {
	b, clk := newTest(t, Config{BreakDuration: time.Minute})
	clk.Advance(5 * time.Second)
	trip(t, b)
	wantReady := t0.Add(5*time.Second + time.Minute)

	clk.Advance(10 * time.Second)
	_, err := b.Allow()
	var oe *OpenError
	if !errors.As(err, &oe) {
		t.Fatalf("Allow error = %v (%T), want *OpenError", err, err)
	}
	if !errors.Is(err, ErrOpen) {
		t.Fatal("errors.Is(err, ErrOpen) = false")
	}
	if oe.Name != "dep" || !oe.ReadyAt.Equal(wantReady) || oe.HalfOpen {
		t.Fatalf("OpenError = %+v, want dep ready at %v", oe, wantReady)
	}
	if msg := err.Error(); !strings.Contains(msg, `"dep"`) || !strings.Contains(msg, "2025-03-01T12:01:05Z") {
		t.Fatalf("Error() = %q, want the name and the half-open time", msg)
	}
	if got := b.ReadyAt(); !got.Equal(wantReady) {
		t.Fatalf("ReadyAt() = %v, want %v", got, wantReady)
	}
	st := b.Status()
	if st.State != Open || !st.ReadyAt.Equal(wantReady) || !st.OpenedAt.Equal(t0.Add(5*time.Second)) {
		t.Fatalf("status = %+v", st)
	}

	called := false
	err = b.Do(context.Background(), func(context.Context) error { called = true; return nil })
	if called || !errors.As(err, &oe) {
		t.Fatalf("Do on an open breaker: called=%v err=%v", called, err)
	}

	// A closed breaker has no ReadyAt.
	b.Reset()
	if got := b.ReadyAt(); !got.IsZero() {
		t.Fatalf("ReadyAt() when closed = %v, want zero", got)
	}
}

func TestHalfOpenSingleProbe(t *testing.T) {
	b, clk := newTest(t, Config{})
	trip(t, b)
	clk.Advance(60*time.Second - time.Nanosecond)
	mustState(t, b, Open)
	if _, err := b.Allow(); !errors.Is(err, ErrOpen) {
		t.Fatalf("Allow just before the break ends: %v", err)
	}
	clk.Advance(time.Nanosecond)
	mustState(t, b, HalfOpen) // reported before any Allow
	if got := b.ReadyAt(); !got.IsZero() {
		t.Fatalf("ReadyAt() after the break = %v, want zero", got)
	}
	if st := b.Status(); st.State != HalfOpen || !st.ReadyAt.IsZero() {
		t.Fatalf("status = %+v", st)
	}

	probe, err := b.Allow()
	if err != nil || !probe.probe() {
		t.Fatalf("first Allow after the break: %+v %v", probe, err)
	}
	_, err = b.Allow()
	var oe *OpenError
	if !errors.As(err, &oe) || !oe.HalfOpen || !errors.Is(err, ErrOpen) {
		t.Fatalf("second Allow while the probe is out: %v", err)
	}
	if want := clk.Now().Add(60 * time.Second); !oe.ReadyAt.Equal(want) {
		t.Fatalf("half-open ReadyAt = %v, want %v", oe.ReadyAt, want)
	}
	b.Record(probe, nil)
	mustState(t, b, Closed)
	if err := call(b, nil); err != nil {
		t.Fatal(err)
	}
	if st := b.Status(); st.Failures != 0 || !st.OpenedAt.IsZero() {
		t.Fatalf("status after closing = %+v, want counts cleared", st)
	}
}

func TestHalfOpenProbesAllMustSucceed(t *testing.T) {
	b, clk := newTest(t, Config{HalfOpenProbes: 3})
	trip(t, b)
	clk.Advance(time.Minute)
	var probes []Token
	for i := range 3 {
		tok, err := b.Allow()
		if err != nil {
			t.Fatalf("probe %d rejected: %v", i+1, err)
		}
		probes = append(probes, tok)
	}
	for range 5 {
		if _, err := b.Allow(); !errors.Is(err, ErrOpen) {
			t.Fatalf("Allow beyond the probes: %v", err)
		}
	}
	b.Record(probes[0], nil)
	b.Record(probes[1], nil)
	mustState(t, b, HalfOpen)
	// A finished probe does not free a slot: the three probes are the test.
	if _, err := b.Allow(); !errors.Is(err, ErrOpen) {
		t.Fatalf("Allow after two probes succeeded: %v", err)
	}
	b.Record(probes[2], nil)
	mustState(t, b, Closed)
}

func TestFailedProbeReopens(t *testing.T) {
	b, clk := newTest(t, Config{HalfOpenProbes: 2})
	trip(t, b)
	clk.Advance(time.Minute)
	p1, _ := b.Allow()
	p2, _ := b.Allow()
	b.Record(p1, nil)
	clk.Advance(3 * time.Second)
	b.Record(p2, errBoom)
	mustState(t, b, Open)
	want := clk.Now().Add(time.Minute) // a fresh break from the failure
	if got := b.ReadyAt(); !got.Equal(want) {
		t.Fatalf("ReadyAt after a failed probe = %v, want %v", got, want)
	}
	if st := b.Status(); st.Trips != 2 {
		t.Fatalf("trips = %d, want 2", st.Trips)
	}
	clk.Advance(time.Minute - time.Nanosecond)
	mustState(t, b, Open)
	clk.Advance(time.Nanosecond)
	mustState(t, b, HalfOpen)
}

func TestStaleRecordsIgnored(t *testing.T) {
	b, clk := newTest(t, Config{Failures: 2})
	old1, _ := b.Allow()
	old2, _ := b.Allow()
	trip(t, b)
	trips := b.Status().Trips

	// Late failures from the closed period do not extend the break.
	b.Record(old1, errBoom)
	if st := b.Status(); st.Trips != trips {
		t.Fatalf("stale failure re-tripped: %+v", st)
	}

	clk.Advance(time.Minute)
	probe, err := b.Allow()
	if err != nil {
		t.Fatal(err)
	}
	// A late success from the closed period is not a probe result.
	b.Record(old2, nil)
	mustState(t, b, HalfOpen)
	// A late failure from the closed period does not reopen.
	b.Record(old1, errBoom)
	mustState(t, b, HalfOpen)

	// The probe fails; a new half-open period begins later. The old
	// probe's token, recorded again, must not close the new period.
	b.Record(probe, errBoom)
	mustState(t, b, Open)
	clk.Advance(time.Minute)
	probe2, err := b.Allow()
	if err != nil {
		t.Fatal(err)
	}
	b.Record(probe, nil)
	mustState(t, b, HalfOpen)
	b.Record(probe2, nil)
	mustState(t, b, Closed)

	// Tokens from before a Reset are stale too.
	tok, _ := b.Allow()
	b.Reset()
	b.Record(tok, errBoom)
	b.Record(tok, errBoom)
	mustState(t, b, Closed)
	if got := b.Status().Failures; got != 0 {
		t.Fatalf("failures after stale records = %d", got)
	}

	// The zero Token belongs to no period.
	b.Record(Token{}, errBoom)
	b.Record(Token{}, errBoom)
	mustState(t, b, Closed)
}

func TestCanceledAndIgnoredDoNotCount(t *testing.T) {
	// Count only: in ratio mode the ignored errors would be successes
	// that keep 2 failures under the ratio (see TestRatioIgnoresCanceled).
	b, _ := newTest(t, Config{CountOnly: true, Failures: 2})
	notFound := Ignore(fs.ErrNotExist)
	for range 10 {
		call(b, context.Canceled)
		call(b, fmt.Errorf("query: %w", context.Canceled))
		call(b, notFound)
		call(b, fmt.Errorf("lookup: %w", notFound))
	}
	mustState(t, b, Closed)
	if got := b.Status().Failures; got != 0 {
		t.Fatalf("failures = %d, want 0", got)
	}
	// DeadlineExceeded is a failure.
	call(b, context.DeadlineExceeded)
	call(b, context.DeadlineExceeded)
	mustState(t, b, Open)

	// Ignore keeps the cause reachable and the message intact.
	if !errors.Is(notFound, fs.ErrNotExist) || notFound.Error() != fs.ErrNotExist.Error() {
		t.Fatalf("Ignore hides its cause: %v", notFound)
	}
	var pe *fs.PathError
	if !errors.As(Ignore(&fs.PathError{Op: "open", Path: "x", Err: fs.ErrNotExist}), &pe) || pe.Path != "x" {
		t.Fatal("errors.As does not reach through Ignore")
	}
	if Ignore(nil) != nil {
		t.Fatal("Ignore(nil) != nil")
	}
}

func TestRatioIgnoresCanceled(t *testing.T) {
	b, _ := newTest(t, Config{FailureRatio: 0.5, MinRequests: 4})
	call(b, errBoom)
	call(b, Ignore(errBoom)) // a success: the dependency answered
	for range 10 {
		call(b, context.Canceled) // neutral: not a request at all
	}
	if st := b.Status(); st.Requests != 2 || st.Failures != 1 {
		t.Fatalf("status = %+v, want 1 failure in 2 requests", st)
	}
}

func TestProbeOutcomes(t *testing.T) {
	// A canceled probe says nothing: it frees its slot without closing.
	b, clk := newTest(t, Config{})
	trip(t, b)
	clk.Advance(time.Minute)
	p, _ := b.Allow()
	b.Record(p, context.Canceled)
	mustState(t, b, HalfOpen)
	p, err := b.Allow()
	if err != nil {
		t.Fatalf("slot not freed by a canceled probe: %v", err)
	}
	// An ignored error is an answer from the dependency: success.
	b.Record(p, Ignore(errBoom))
	mustState(t, b, Closed)
}

func TestCustomIsFailure(t *testing.T) {
	errTimeout := errors.New("timeout")
	b, _ := newTest(t, Config{CountOnly: true, Failures: 2, IsFailure: func(err error) bool {
		return errors.Is(err, errTimeout)
	}})
	for range 10 {
		call(b, errBoom)
	}
	mustState(t, b, Closed)
	call(b, errTimeout)
	call(b, fmt.Errorf("get: %w", errTimeout))
	mustState(t, b, Open)

	// A custom rule may count what the default excludes.
	b, _ = newTest(t, Config{Failures: 1, IsFailure: func(error) bool { return true }})
	call(b, context.Canceled)
	mustState(t, b, Open)
}

func TestDoPanicCountsAsFailure(t *testing.T) {
	b, _ := newTest(t, Config{Failures: 1})
	func() {
		defer func() {
			if r := recover(); r != "kaboom" {
				t.Fatalf("recovered %v, want the original panic", r)
			}
		}()
		b.Do(context.Background(), func(context.Context) error { panic("kaboom") })
	}()
	mustState(t, b, Open)
}

func TestDoPassesContextAndError(t *testing.T) {
	b, _ := newTest(t, Config{})
	type key struct{}
	ctx := context.WithValue(context.Background(), key{}, 7)
	err := b.Do(ctx, func(ctx context.Context) error {
		if ctx.Value(key{}) != 7 {
			t.Error("Do did not pass ctx through")
		}
		return errBoom
	})
	if err != errBoom {
		t.Fatalf("Do returned %v, want fn's error unchanged", err)
	}
}

func TestPresumedFailedProbe(t *testing.T) {
	b, clk := newTest(t, Config{})
	trip(t, b)
	clk.Advance(time.Minute)
	lost, _ := b.Allow() // never recorded in time
	clk.Advance(time.Minute - time.Nanosecond)
	if _, err := b.Allow(); !errors.Is(err, ErrOpen) {
		t.Fatal("second probe let through")
	}
	mustState(t, b, HalfOpen)
	clk.Advance(time.Nanosecond)
	_, err := b.Allow()
	var oe *OpenError
	if !errors.As(err, &oe) || oe.HalfOpen {
		t.Fatalf("after a lost probe: %v, want a fresh break", err)
	}
	mustState(t, b, Open)
	if want := clk.Now().Add(time.Minute); !b.ReadyAt().Equal(want) {
		t.Fatalf("ReadyAt = %v, want %v", b.ReadyAt(), want)
	}
	b.Record(lost, nil) // too late: stale
	mustState(t, b, Open)
}

func TestOnStateChange(t *testing.T) {
	type change struct {
		name     string
		from, to State
	}
	var (
		got []change
		b   *Breaker
	)
	clk := &fakeClock{}
	b = New("svc", Config{Failures: 1, Now: clk.Now, OnStateChange: func(name string, from, to State) {
		// Not called under the lock: these would deadlock otherwise.
		_ = b.State()
		_ = b.Status()
		_ = b.ReadyAt()
		got = append(got, change{name, from, to})
	}})
	call(b, errBoom) // closed -> open
	clk.Advance(time.Minute)
	p, _ := b.Allow() // open -> half_open
	b.Record(p, errBoom)
	clk.Advance(time.Minute)
	p, _ = b.Allow()
	b.Record(p, nil)
	call(b, errBoom)
	b.Reset()
	b.Reset() // already closed: no transition
	want := []change{
		{"svc", Closed, Open},
		{"svc", Open, HalfOpen},
		{"svc", HalfOpen, Open},
		{"svc", Open, HalfOpen},
		{"svc", HalfOpen, Closed},
		{"svc", Closed, Open},
		{"svc", Open, Closed},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("transitions:\n got %v\nwant %v", got, want)
	}
}

func TestOnStateChangeReentrant(t *testing.T) {
	// A callback that itself changes the state sees both transitions, in
	// order, and nothing deadlocks.
	var got []string
	var b *Breaker
	b = New("svc", Config{Failures: 1, OnStateChange: func(_ string, from, to State) {
		got = append(got, from.String()+">"+to.String())
		if to == Open {
			b.Reset()
		}
	}})
	done := make(chan struct{})
	go func() {
		defer close(done)
		call(b, errBoom)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("deadlock in OnStateChange")
	}
	if want := "[closed>open open>closed]"; fmt.Sprint(got) != want {
		t.Fatalf("transitions = %v, want %v", got, want)
	}
	mustState(t, b, Closed)
}

func TestOnStateChangePanicDoesNotWedge(t *testing.T) {
	n := 0
	b := New("svc", Config{Failures: 1, OnStateChange: func(string, State, State) {
		n++
		if n == 1 {
			panic("hook")
		}
	}})
	func() {
		defer func() { _ = recover() }()
		call(b, errBoom)
	}()
	b.Reset()
	if n != 2 {
		t.Fatalf("callback calls = %d, want 2 (delivery resumes after a panic)", n)
	}
}

func TestConcurrentInvariants(t *testing.T) {
	for _, cfg := range []Config{
		{CountOnly: true, Failures: 5, Window: 100 * time.Millisecond, HalfOpenProbes: 3, BreakDuration: 50 * time.Millisecond},
		{FailureRatio: 0.3, MinRequests: 20, Window: time.Second, HalfOpenProbes: 2, BreakDuration: 50 * time.Millisecond},
	} {
		t.Run(fmt.Sprintf("count_only=%v", cfg.CountOnly), func(t *testing.T) {
			testConcurrent(t, cfg)
		})
	}
}

func testConcurrent(t *testing.T, cfg Config) {
	clk := &fakeClock{}
	cfg.Now = clk.Now
	var transitions atomic.Int64
	cfg.OnStateChange = func(string, State, State) { transitions.Add(1) }
	b := New("dep", cfg)
	probes := cfg.HalfOpenProbes

	// Probe tokens outstanding per generation, counted by the test itself.
	var mu sync.Mutex
	out := map[uint64]int{}
	var violations atomic.Int64

	stop := make(chan struct{})
	var wg, workersWG sync.WaitGroup
	outcomes := []error{nil, errBoom, nil, context.Canceled, nil, errBoom, Ignore(errBoom), nil, errBoom, nil, nil}
	const workers, iters = 16, 4000
	var allowed, rejected atomic.Int64
	for w := range workers {
		workersWG.Go(func() {
			for i := range iters {
				if i%4 == 0 { // the clock advances while calls run
					clk.Advance(time.Millisecond)
				}
				tok, err := b.Allow()
				if err != nil {
					if !errors.Is(err, ErrOpen) {
						violations.Add(1)
					}
					rejected.Add(1)
					continue
				}
				allowed.Add(1)
				if tok.probe() {
					mu.Lock()
					out[tok.w]++
					if out[tok.w] > probes {
						violations.Add(1)
					}
					mu.Unlock()
				}
				if s := b.State(); s > Open {
					violations.Add(1)
				}
				if tok.probe() {
					mu.Lock()
					out[tok.w]--
					mu.Unlock()
				}
				b.Record(tok, outcomes[(w+i)%len(outcomes)])
				if i%97 == 0 {
					st := b.Status()
					if st.Failures < 0 || st.Requests < 0 || st.State > Open {
						violations.Add(1)
					}
				}
			}
		})
	}
	// Check the breaker's own probe accounting while the calls run.
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			b.mu.Lock()
			if b.inflight < 0 || b.passed < 0 || b.inflight+b.passed > probes {
				violations.Add(1)
			}
			b.mu.Unlock()
			runtime.Gosched()
		}
	})
	workersWG.Wait()
	close(stop)
	wg.Wait()
	if v := violations.Load(); v != 0 {
		t.Fatalf("%d invariant violations", v)
	}
	st := b.Status()
	if st.Trips == 0 || transitions.Load() == 0 {
		t.Fatalf("the test never tripped the breaker: %+v", st)
	}
	t.Logf("allowed %d, rejected %d, trips %d, transitions %d", allowed.Load(), rejected.Load(), st.Trips, transitions.Load())
}

func TestValidate(t *testing.T) {
	if err := (Config{}).Validate(); err != nil {
		t.Fatalf("zero Config: %v", err)
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("DefaultConfig: %v", err)
	}
	for _, tc := range []struct {
		cfg   Config
		field string
	}{
		{Config{Failures: -1}, "Failures"},
		{Config{Window: -time.Second}, "Window"},
		{Config{FailureRatio: 1.5}, "FailureRatio"},
		{Config{FailureRatio: -0.1}, "FailureRatio"},
		{Config{MinRequests: -3}, "MinRequests"},
		{Config{CountOnly: true, FailureRatio: 0.5}, "FailureRatio"},
		{Config{FailureRatio: math.NaN()}, "FailureRatio"},
		{Config{BreakDuration: -1}, "BreakDuration"},
		{Config{HalfOpenProbes: -2}, "HalfOpenProbes"},
	} {
		err := tc.cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), "Config."+tc.field) {
			t.Errorf("Validate(%+v) = %v, want an error naming %s", tc.cfg, err, tc.field)
		}
		if _, err := NewChecked("x", tc.cfg); err == nil {
			t.Errorf("NewChecked(%+v) accepted", tc.cfg)
		}
	}
	err := Config{Failures: -1, HalfOpenProbes: -1}.Validate()
	if !strings.Contains(err.Error(), "Failures") || !strings.Contains(err.Error(), "HalfOpenProbes") {
		t.Fatalf("Validate reports only some fields: %v", err)
	}
}

func TestNewUsesDefaultsForInvalid(t *testing.T) {
	clk := &fakeClock{}
	b := New("x", Config{Failures: -1, BreakDuration: -time.Hour, FailureRatio: 7, Now: clk.Now})
	for range 4 {
		call(b, errBoom)
	}
	mustState(t, b, Closed)
	call(b, errBoom)
	mustState(t, b, Open)
	if want := t0.Add(60 * time.Second); !b.ReadyAt().Equal(want) {
		t.Fatalf("ReadyAt = %v, want the default 60s break", b.ReadyAt())
	}
	if b.Name() != "x" {
		t.Fatalf("Name() = %q", b.Name())
	}
}

func TestStateText(t *testing.T) {
	for _, s := range []State{Closed, HalfOpen, Open} {
		text, err := s.MarshalText()
		if err != nil || string(text) != s.String() {
			t.Fatalf("MarshalText(%v) = %q, %v", s, text, err)
		}
		var back State
		if err := back.UnmarshalText(text); err != nil || back != s {
			t.Fatalf("UnmarshalText(%q) = %v, %v", text, back, err)
		}
	}
	if got := fmt.Sprint(Closed, HalfOpen, Open); got != "closed half_open open" {
		t.Fatalf("names = %q", got)
	}
	if _, err := State(9).MarshalText(); err == nil {
		t.Fatal("MarshalText accepted an invalid state")
	}
	var s State
	if err := s.UnmarshalText([]byte("ajar")); err == nil {
		t.Fatal("UnmarshalText accepted an unknown name")
	}
}

func TestStatusJSON(t *testing.T) {
	b, _ := newTest(t, Config{CountOnly: true, Failures: 1})
	raw, _ := json.Marshal(b.Status())
	if want := `{"name":"dep","state":"closed","failures":0,"requests":0,"trips":0}`; string(raw) != want {
		t.Fatalf("closed status JSON = %s, want %s", raw, want)
	}
	call(b, errBoom)
	raw, _ = json.Marshal(b.Status())
	want := `{"name":"dep","state":"open","failures":1,"requests":0,"opened_at":"2025-03-01T12:00:00Z","ready_at":"2025-03-01T12:01:00Z","trips":1}`
	if string(raw) != want {
		t.Fatalf("open status JSON = %s, want %s", raw, want)
	}
}

func TestAllowRecordDoNotAllocate(t *testing.T) {
	b := New("dep", Config{})
	if n := testing.AllocsPerRun(1000, func() {
		tok, _ := b.Allow()
		b.Record(tok, nil)
	}); n != 0 {
		t.Fatalf("closed Allow+Record allocates %v times", n)
	}
	trip(t, b)
	if n := testing.AllocsPerRun(1000, func() { _, _ = b.Allow() }); n != 0 {
		t.Fatalf("open Allow allocates %v times", n)
	}
	r := New("count", Config{CountOnly: true})
	if n := testing.AllocsPerRun(1000, func() {
		tok, _ := r.Allow()
		r.Record(tok, nil)
	}); n != 0 {
		t.Fatalf("count-only Allow+Record allocates %v times", n)
	}
}
