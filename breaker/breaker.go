package breaker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// State is the state of a Breaker.
type State uint8

// The three breaker states.
const (
	// Closed lets every call through and counts failures.
	Closed State = iota
	// HalfOpen lets a limited number of probe calls through to test the
	// dependency.
	HalfOpen
	// Open rejects every call until the break duration has elapsed.
	Open
)

var stateNames = [...]string{Closed: "closed", HalfOpen: "half_open", Open: "open"}

// String returns "closed", "half_open" or "open", the names used in the API,
// metrics and logs.
func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// MarshalText encodes the state as its String name. It fails for a value
// that is not one of the three states.
func (s State) MarshalText() ([]byte, error) {
	if int(s) >= len(stateNames) {
		return nil, fmt.Errorf("breaker: invalid state %d", uint8(s))
	}
	return []byte(stateNames[s]), nil
}

// UnmarshalText decodes a name produced by MarshalText.
func (s *State) UnmarshalText(text []byte) error {
	for i, name := range stateNames {
		if string(text) == name {
			*s = State(i)
			return nil
		}
	}
	return fmt.Errorf("breaker: unknown state %q (want closed, half_open or open)", text)
}

// ErrOpen is matched, through errors.Is, by every error a breaker returns
// when it rejects a call.
var ErrOpen = errors.New("breaker: circuit open")

// OpenError is the error Allow and Do return when they reject a call. It
// matches ErrOpen with errors.Is; use errors.As to read the fields.
//
// A breaker hands the same *OpenError to every call it rejects during one
// break, so treat it as read-only.
type OpenError struct {
	// Name is the breaker's name.
	Name string
	// ReadyAt is when the breaker will let a call through again. When the
	// breaker is open it is the moment it becomes half-open. When it is
	// half-open with every probe out (HalfOpen is true) it is the latest
	// moment the probes are settled: the breaker closes or reopens sooner
	// if they report sooner.
	ReadyAt time.Time
	// HalfOpen is true when the breaker is half-open and the call was
	// rejected only because every probe slot was taken.
	HalfOpen bool
}

const errorTimeLayout = "2006-01-02T15:04:05.999Z07:00"

// Error says which breaker rejected the call and when it lets calls through
// again.
func (e *OpenError) Error() string {
	if e.HalfOpen {
		return fmt.Sprintf("breaker %q: circuit half-open, probes in flight; settled by %s",
			e.Name, e.ReadyAt.Format(errorTimeLayout))
	}
	return fmt.Sprintf("breaker %q: circuit open, half-opens at %s", e.Name, e.ReadyAt.Format(errorTimeLayout))
}

// Is reports whether target is ErrOpen.
func (e *OpenError) Is(target error) bool { return target == ErrOpen }

// Token is the permission Allow grants for one call. Pass it to Record with
// the call's outcome. It is a small value: copy it freely. The zero Token
// belongs to no state, so recording it changes nothing.
type Token struct {
	// w is the breaker's state word (gen<<2 | state) when the token was
	// issued: the period it belongs to, and whether it is a probe (a token
	// issued while HalfOpen).
	w uint64
}

func (t Token) probe() bool { return State(t.w&3) == HalfOpen }

// Status is a snapshot of a breaker, as shown by the API, the dashboard and
// metrics.
type Status struct {
	// Name is the breaker's name.
	Name string `json:"name"`
	// State is the breaker's state. An open breaker whose break has
	// elapsed shows HalfOpen.
	State State `json:"state"`
	// Failures is the number of failures within the window.
	Failures int `json:"failures"`
	// Requests is the number of completed calls within the window. It is
	// counted in ratio mode only and is 0 in count mode, which keeps the
	// success path free of shared writes.
	Requests int `json:"requests"`
	// OpenedAt is when the breaker last opened; zero while closed.
	OpenedAt time.Time `json:"opened_at,omitzero"`
	// ReadyAt is when an open breaker becomes half-open; zero unless
	// State is Open.
	ReadyAt time.Time `json:"ready_at,omitzero"`
	// Trips counts every time the breaker opened since it was created.
	Trips uint64 `json:"trips"`
}

// Breaker is a circuit breaker. Create one with New, NewChecked or a
// Registry; the zero Breaker is not usable. All methods are safe for
// concurrent use.
type Breaker struct {
	// word is gen<<2 | state. gen starts at 1 and grows on every state
	// change, so a Token names the exact period it was issued in. It is
	// written only under mu and read lock-free.
	word atomic.Uint64
	// openErr is the error for the current (or latest) break; it is
	// stored before word so that a reader seeing Open finds it.
	openErr atomic.Pointer[OpenError]
	// win holds the ratio-mode counters of the current closed period; nil
	// in count mode.
	win atomic.Pointer[window]

	name  string
	cfg   settings
	ratio bool      // ratio mode on
	base  time.Time // creation time: the origin of the relative clock

	mu        sync.Mutex
	fails     []int64 // count mode: failure times (relative ns), oldest first
	openedAt  time.Time
	readyAt   time.Time
	inflight  int       // half-open: probes handed out and not yet reported
	passed    int       // half-open: probes that succeeded
	lastProbe time.Time // half-open: latest probe handed out or reported
	halfErr   *OpenError
	trips     uint64
	pending   []transition // state changes not yet passed to OnStateChange
	notifying bool         // a goroutine is delivering pending

	sh sharing // the fleet's shared state, when shared (shared.go)

	// streak counts the failures in a row, with no success between them,
	// of the current closed period's window (streakWin); streakEpoch is
	// the epoch of the run's last failure and streakMark the successes its
	// bucket held then; under mu.
	streak      int
	streakWin   *window
	streakEpoch int64
	streakMark  int64
	// runTrip is set when the last failure completed a run of
	// Consecutive failures: a Shared layer's fleet trips on it (shared.go).
	runTrip bool
}

type transition struct{ from, to State }

// outcome is what a recorded call tells the breaker.
type outcome uint8

const (
	success outcome = iota
	failure
	neutral
)

// New returns a breaker named name. Zero-valued fields of cfg take their
// defaults, and so do invalid ones (a negative duration, a ratio above 1):
// New never fails and never panics. Call cfg.Validate first, or use
// NewChecked, to reject a bad configuration instead.
func New(name string, cfg Config) *Breaker {
	s := cfg.settle()
	b := &Breaker{name: name, cfg: s, ratio: s.ratio > 0, base: s.now()}
	if b.ratio {
		b.win.Store(newWindow(s.window))
	}
	b.word.Store(1<<2 | uint64(Closed))
	return b
}

// NewChecked is New for configurations that come from users: it returns
// cfg.Validate's error instead of replacing invalid fields with defaults.
func NewChecked(name string, cfg Config) (*Breaker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return New(name, cfg), nil
}

// Name returns the name the breaker was created with.
func (b *Breaker) Name() string { return b.name }

// Allow asks whether a call may go ahead. It returns a Token to pass to
// Record with the call's outcome, or an *OpenError (matching ErrOpen) when
// the call must not be made: the breaker is open, or half-open with every
// probe slot taken.
//
// On a closed breaker Allow is a single atomic load. On an open breaker whose
// break has elapsed it moves the breaker to HalfOpen and returns a probe
// token.
func (b *Breaker) Allow() (t Token, err error) {
	// Shaped to fit the inliner's budget (cost 80 of 80 with Go 1.26; the
	// naked return matters): on a closed breaker the token is the state
	// word itself. Check with go build -gcflags=-m after editing.
	t.w = b.word.Load()
	if State(t.w&3) != Closed {
		t, err = b.allowSlow()
	}
	return
}

func (b *Breaker) allowSlow() (Token, error) {
	now := b.cfg.now()
	if State(b.word.Load()&3) == Open {
		if oe := b.openErr.Load(); oe != nil && now.Before(oe.ReadyAt) {
			return Token{}, oe
		}
		if h := b.sh.hook.Load(); h != nil {
			if t, handled, err := b.allowShared(h, now); handled {
				return t, err
			}
		}
	}
	b.mu.Lock()
	t, changed, oe := b.allowLocked(now)
	b.mu.Unlock()
	if changed {
		b.notify()
	}
	if oe != nil {
		return t, oe
	}
	return t, nil
}

// allowLocked is Allow's decision under the lock. It reports whether the
// state changed and, when the call is rejected, the error.
func (b *Breaker) allowLocked(now time.Time) (t Token, changed bool, oe *OpenError) {
	w := b.word.Load()
	switch State(w & 3) {
	case Closed:
		return Token{w}, false, nil
	case Open:
		if now.Before(b.readyAt) {
			return Token{}, false, b.openErr.Load()
		}
		b.halfOpenLocked(now)
		changed = true
		w = b.word.Load()
	}
	if b.inflight+b.passed < b.cfg.probes {
		b.inflight++
		b.touchProbe(now)
		return Token{w}, changed, nil
	}
	deadline := b.lastProbe.Add(b.cfg.breakDuration)
	if !now.Before(deadline) {
		// The probes out have not reported for a whole break: presume
		// they failed, rather than stay half-open forever.
		b.openLocked(now)
		return Token{}, true, b.openErr.Load()
	}
	if b.halfErr == nil || !b.halfErr.ReadyAt.Equal(deadline) {
		b.halfErr = &OpenError{Name: b.name, ReadyAt: deadline, HalfOpen: true}
	}
	return Token{}, changed, b.halfErr
}

// Record reports the outcome of a call that Allow let through: err is what
// the call returned (see the package documentation for how it is
// classified). Record each token exactly once. A token issued before the
// breaker last changed state (it tripped, half-opened, closed or was Reset)
// is stale: recording it changes nothing.
//
// On a closed breaker in count mode, Record(tok, nil) does no work at all.
func (b *Breaker) Record(t Token, err error) {
	if err == nil && State(t.w&3) == Closed && !b.ratio {
		return
	}
	b.recordSlow(t, err)
}

func (b *Breaker) recordSlow(t Token, err error) {
	b.record(t, b.classify(err))
}

func (b *Breaker) classify(err error) outcome {
	switch {
	case err == nil:
		return success
	case !b.cfg.countRateLimited && b.cfg.isRateLimited(err):
		return neutral
	case b.cfg.isFailure(err):
		return failure
	case errors.Is(err, context.Canceled):
		return neutral
	}
	return success
}

func (b *Breaker) record(t Token, o outcome) {
	if !t.probe() {
		switch o {
		case neutral:
			return
		case success:
			if b.ratio {
				b.countSuccess(t)
				if b.sh.run.Load() {
					b.shareRunBroken()
				}
			}
			return
		}
	}
	now := b.cfg.now()
	changed := false
	ev := evNone // what a Shared layer hears of (shared.go)
	b.mu.Lock()
	w := b.word.Load()
	switch {
	case w != t.w: // stale
	case State(w&3) == Closed:
		changed = b.failLocked(now)
		ev = evFailure
	case State(w&3) == HalfOpen && b.inflight > 0:
		b.inflight--
		b.touchProbe(now)
		switch o {
		case success:
			b.passed++
			if b.passed >= b.cfg.probes {
				b.closeLocked()
				changed = true
				ev = evProbeOK
			}
		case failure:
			b.openLocked(now)
			changed = true
			ev = evProbeFailed
		}
	}
	b.mu.Unlock()
	if changed {
		b.notify()
	}
	b.share(ev, changed, now)
}

// countSuccess counts a successful call in the ratio-mode window at the time
// it is recorded: a clock read and one atomic add, and the lock once per
// bucket period (see window).
func (b *Breaker) countSuccess(t Token) {
	if b.word.Load() != t.w {
		return
	}
	b.win.Load().addSuccess(b.relNow(), &b.mu)
}

// relNow returns the relative time now. With the system clock it reads
// the monotonic clock alone (time.Since), about half the cost of time.Now.
func (b *Breaker) relNow() int64 {
	if b.cfg.systemClock {
		return int64(time.Since(b.base))
	}
	return b.rel(b.cfg.now())
}

// failLocked counts a failure on a closed breaker and trips it when the trip
// rule (settings.trips) holds for the window's counts. It reports whether the
// breaker opened.
func (b *Breaker) failLocked(now time.Time) bool {
	rel := b.rel(now)
	var trip bool
	if b.ratio {
		win := b.win.Load()
		rel = win.advance(rel)
		win.addFailure(rel)
		e := win.epochOf(rel)
		reqs, fails := win.sum(e)
		streak := b.streakLocked(win, rel)
		b.runTrip = b.cfg.consecutive > 0 && streak >= b.cfg.consecutive && reqs >= int64(b.cfg.minRequests)
		trip = b.runTrip || b.cfg.trips(fails, reqs)
	} else {
		if n := len(b.fails); n > 0 && rel < b.fails[n-1] {
			rel = b.fails[n-1] // the clock went back: keep the list sorted
		}
		cut := rel - int64(b.cfg.window)
		i := 0
		for i < len(b.fails) && b.fails[i] <= cut {
			i++
		}
		if i > 0 {
			b.fails = b.fails[:copy(b.fails, b.fails[i:])]
		}
		b.fails = append(b.fails, rel)
		trip = b.cfg.trips(int64(len(b.fails)), 0)
	}
	if trip && b.sh.fleetDecides() {
		trip = false // the fleet's counts decide (shared.go)
	}
	if trip {
		b.openLocked(now)
	}
	return trip
}

// streakLocked counts a failure in the run of failures with no success
// between them and returns the run's length. A dependency that goes down
// after a busy spell trips on Failures failures in a row at once, without
// waiting for its failures to outweigh the window's earlier successes; a
// run of Failures failures is very unlikely at a low failure rate (at 1%,
// five in a row come once in ten billion calls). The window holds the
// successes recorded before this failure (counted in its buckets as they
// are recorded). A run whose previous failure has left the window (its
// bucket is no longer one of the window's) starts again. The caller has
// counted the failure at rel.
func (b *Breaker) streakLocked(win *window, rel int64) int {
	e := win.epochOf(rel)
	if b.streakWin == win && !win.succeededSince(b.streakEpoch, b.streakMark, e) {
		b.streak++
	} else {
		b.streak = 1
	}
	b.streakWin, b.streakEpoch, b.streakMark = win, e, win.successes(e)
	return b.streak
}

// rel converts t to nanoseconds since the breaker was created, using the
// monotonic clock when t and base both carry it.
func (b *Breaker) rel(t time.Time) int64 { return int64(t.Sub(b.base)) }

func (b *Breaker) touchProbe(now time.Time) {
	if now.After(b.lastProbe) {
		b.lastProbe = now
	}
}

// setLocked moves the breaker to state to, starting a new generation so that
// tokens issued before are ignored, and queues the notification.
func (b *Breaker) setLocked(to State) {
	w := b.word.Load()
	from := State(w & 3)
	b.word.Store((w>>2+1)<<2 | uint64(to))
	if b.cfg.onChange != nil && from != to {
		b.pending = append(b.pending, transition{from, to})
	}
}

func (b *Breaker) openLocked(now time.Time) {
	b.trips++
	b.openedAt = now
	b.readyAt = now.Add(b.cfg.breakDuration)
	b.halfErr = nil
	b.openErr.Store(&OpenError{Name: b.name, ReadyAt: b.readyAt})
	b.setLocked(Open)
	b.sh.fleetOpen = false
}

func (b *Breaker) halfOpenLocked(now time.Time) {
	b.inflight, b.passed = 0, 0
	b.lastProbe = now
	b.halfErr = nil
	b.setLocked(HalfOpen)
}

func (b *Breaker) closeLocked() {
	b.fails = b.fails[:0]
	if b.ratio {
		b.win.Store(newWindow(b.cfg.window))
	}
	b.openedAt, b.readyAt = time.Time{}, time.Time{}
	b.inflight, b.passed = 0, 0
	b.halfErr = nil
	b.setLocked(Closed)
	b.sh.fleetOpen = false
}

// notify passes queued transitions to OnStateChange, outside the lock and in
// order. Only one goroutine delivers at a time; a transition queued while
// another goroutine delivers (including from inside the callback) is
// delivered by that goroutine.
func (b *Breaker) notify() {
	if b.cfg.onChange == nil {
		return
	}
	b.mu.Lock()
	if b.notifying || len(b.pending) == 0 {
		b.mu.Unlock()
		return
	}
	b.notifying = true
	done := false
	defer func() {
		if !done { // the callback panicked: let the next transition deliver
			b.mu.Lock()
			b.notifying = false
			b.mu.Unlock()
		}
	}()
	for len(b.pending) > 0 {
		t := b.pending[0]
		b.pending = b.pending[1:]
		b.mu.Unlock()
		b.cfg.onChange(b.name, t.from, t.to)
		b.mu.Lock()
	}
	b.pending = nil
	b.notifying = false
	done = true
	b.mu.Unlock()
}

// Do runs fn if the breaker allows a call, and records its outcome. When the
// breaker rejects the call, Do returns the *OpenError without calling fn.
// Otherwise it returns fn's error unchanged. If fn panics, the call is
// recorded as a failure and the panic continues.
func (b *Breaker) Do(ctx context.Context, fn func(context.Context) error) error {
	t, err := b.Allow()
	if err != nil {
		return err
	}
	finished := false
	defer func() {
		if !finished {
			b.record(t, failure)
		}
	}()
	err = fn(ctx)
	finished = true
	b.Record(t, err)
	return err
}

// State returns the breaker's state. An open breaker whose break has elapsed
// reports HalfOpen, although it only changes state on the next Allow.
func (b *Breaker) State() State {
	w := b.word.Load()
	s := State(w & 3)
	if s == Open {
		if oe := b.openErr.Load(); oe != nil && !b.cfg.now().Before(oe.ReadyAt) {
			return HalfOpen
		}
	}
	return s
}

// ReadyAt returns, while the breaker is open, the moment it becomes
// half-open, and the zero time otherwise. A job engine defers the jobs that
// depend on an open breaker until then.
func (b *Breaker) ReadyAt() time.Time {
	if State(b.word.Load()&3) != Open {
		return time.Time{}
	}
	if oe := b.openErr.Load(); oe != nil && b.cfg.now().Before(oe.ReadyAt) {
		return oe.ReadyAt
	}
	return time.Time{}
}

// Status returns a snapshot of the breaker.
func (b *Breaker) Status() Status {
	now := b.cfg.now()
	rel := b.rel(now)
	b.mu.Lock()
	defer b.mu.Unlock()
	st := Status{Name: b.name, State: State(b.word.Load() & 3), Trips: b.trips}
	if b.ratio {
		win := b.win.Load()
		reqs, fails := win.sum(win.epochOf(win.advance(rel)))
		st.Requests, st.Failures = int(reqs), int(fails)
	} else {
		cut := rel - int64(b.cfg.window)
		for i := len(b.fails) - 1; i >= 0 && b.fails[i] > cut; i-- {
			st.Failures++
		}
	}
	switch st.State {
	case Open:
		st.OpenedAt = b.openedAt
		if now.Before(b.readyAt) {
			st.ReadyAt = b.readyAt
		} else {
			st.State = HalfOpen
		}
	case HalfOpen:
		st.OpenedAt = b.openedAt
	}
	return st
}

// Reset forces the breaker closed and clears its counts. Tokens issued before
// Reset are ignored when recorded. Trips is kept.
func (b *Breaker) Reset() {
	b.mu.Lock()
	b.closeLocked()
	b.mu.Unlock()
	b.notify()
}
