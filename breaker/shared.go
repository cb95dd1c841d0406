package breaker

import (
	"sync/atomic"
	"time"
)

// Fleet is a breaker's state as several processes share it (a fleet of
// workers on one store). A Shared layer returns it, and Breaker.Apply adopts
// it.
type Fleet struct {
	// State is the fleet's state. HalfOpen means another process holds the
	// probe, unless Prober is set.
	State State
	// Prober is true when this process holds the half-open probe.
	Prober bool
	// OpenedAt is when the fleet's breaker last opened, and OpenedBy who
	// opened it (a process, or an operator).
	OpenedAt time.Time
	OpenedBy string
	// ReadyAt is, when Open, when a probe may be asked for (zero: forced
	// open until an operator closes it); when HalfOpen, when the probe's
	// lease ends.
	ReadyAt time.Time
	// Version orders the states of one breaker: Apply ignores a state
	// older than the newest it applied.
	Version int64
}

// Report is what a breaker tells its Shared layer after it counted a
// failure while closed.
type Report struct {
	// Now is when the failure was recorded.
	Now time.Time
	// Failures and Requests are the breaker's counts within its window,
	// the failure included (Requests is zero with Config.CountOnly).
	Failures int
	Requests int
	// Streak is this process's failures in a row, with no success between
	// them (the failure included; 0 in count-only mode or with
	// Config.Consecutive off, and in a Succeeded report).
	Streak int
	// Tripped is true when the failure opened the breaker on its own
	// counts, and ReadyAt then when it half-opens. A shared breaker trips
	// on its own counts only while its Shared layer is in fallback. It is
	// also true when the failure completed a run of Config.Consecutive
	// failures in this process: a run is exact knowledge of one process
	// (successes do not travel, so the fleet cannot see runs), and the
	// fleet trips on it.
	Tripped bool
	ReadyAt time.Time
}

// Shared connects breakers to state shared with other processes. A Breaker
// calls it, outside its lock, only on its slow paths: after it counted a
// failure, when its break has elapsed (to ask for the fleet's single probe)
// and when its probe's outcome is known. Successes on a closed breaker never
// reach it. The calls may block on I/O; they are made by the goroutine that
// called Allow or Record.
//
// While Fallback reports false, a closed breaker does not trip on its own
// counts: it reports each failure with Failed and adopts the answer. When
// a call returns an error, or while Fallback reports true, the breaker
// decides alone, as an unshared breaker would: that is the fallback of a
// process that lost the shared state.
type Shared interface {
	// Failed reports a failure counted by the closed breaker name and
	// returns the fleet's state.
	Failed(name string, r Report) (Fleet, error)
	// Succeeded reports that a success broke the run of failures in a
	// row this process reported (r.Streak is 0; r's counts are the
	// process's), so that the fleet's run of failures starts again. It is
	// called for the first success after such failures only: other
	// successes never reach the Shared layer.
	Succeeded(name string, r Report) (Fleet, error)
	// Probe asks for the fleet's single half-open probe once the
	// breaker's break elapsed; the lease ends at until if no outcome is
	// reported. granted tells whether this process got it; f is the
	// fleet's state either way.
	Probe(name string, now, until time.Time) (f Fleet, granted bool, err error)
	// Probed reports the outcome of a probe granted by Probe: ok closes
	// the fleet's breaker, a failure opens it again until readyAt.
	Probed(name string, ok bool, now, readyAt time.Time) (Fleet, error)
	// Fallback reports whether the shared state is out of reach, so that
	// breakers decide alone.
	Fallback() bool
}

// sharing is a breaker's link to its Shared layer.
type sharing struct {
	hook     atomic.Pointer[sharedHook] // nil: not shared
	claiming atomic.Bool                // a Probe call is in progress
	// run is set once a failure with a run of failures in a row was
	// reported: the next success reports that the run broke.
	run     atomic.Bool
	version int64 // newest Fleet.Version applied; under the breaker's mu
	// fleetOpen is set while the breaker is open because it applied the
	// fleet's state (not by its own trip); under the breaker's mu.
	fleetOpen bool
}

// OpenedByFleet reports whether the breaker is open because it applied
// the fleet's state (Apply, or the answer to a probe request), rather
// than because its own calls tripped it. A shared layer that hands a
// process's own trips over to the fleet after losing it hands over only
// the latter: the fleet may have closed or deleted what the former came
// from meanwhile.
func (b *Breaker) OpenedByFleet() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.sh.fleetOpen && State(b.word.Load()&3) == Open
}

type sharedHook struct{ s Shared }

// event is a recorded outcome a Shared layer hears of.
type event uint8

const (
	evNone event = iota
	evFailure
	evProbeOK
	evProbeFailed
)

// fleetDecides reports whether the breaker is shared and the shared state
// is within reach: its failures are then reported, and the fleet's counts,
// not its own, trip it.
func (sh *sharing) fleetDecides() bool {
	h := sh.hook.Load()
	return h != nil && !h.s.Fallback()
}

// Share connects the breaker to s, or disconnects it when s is nil. Share
// does not change the breaker's state; call Apply with the fleet's state.
func (b *Breaker) Share(s Shared) {
	if s == nil {
		b.sh.hook.Store(nil)
		return
	}
	b.sh.hook.Store(&sharedHook{s: s})
}

// Shared returns the layer the breaker shares its state through, or nil.
func (b *Breaker) Shared() Shared {
	if h := b.sh.hook.Load(); h != nil {
		return h.s
	}
	return nil
}

// Settings returns the breaker's configuration with every default applied
// (CountOnly set when the ratio is off). The function fields are nil.
func (b *Breaker) Settings() Config {
	s := b.cfg
	consecutive := s.consecutive
	if consecutive == 0 && s.ratio != 0 {
		consecutive = NoConsecutive
	}
	return Config{
		Failures:         s.failures,
		Window:           s.window,
		FailureRatio:     s.ratio,
		CountOnly:        s.ratio == 0,
		Consecutive:      consecutive,
		MinRequests:      s.minRequests,
		BreakDuration:    s.breakDuration,
		HalfOpenProbes:   s.probes,
		CountRateLimited: s.countRateLimited,
	}
}

// Apply adopts the fleet's state f, unless the breaker already applied a
// newer one: Closed closes the breaker, Open and HalfOpen (another process
// probing) open it until f.ReadyAt, or for at most one break duration so
// that a breaker forced open is looked at again. A HalfOpen state whose
// probe this process holds changes nothing: the breaker runs its probe.
func (b *Breaker) Apply(f Fleet) {
	now := b.cfg.now()
	b.mu.Lock()
	changed := b.applyLocked(f, now, false)
	b.mu.Unlock()
	if changed {
		b.notify()
	}
}

// applyLocked applies f; again also applies a state as new as the last one
// applied (the answer to a refused probe, which re-arms the deadline).
func (b *Breaker) applyLocked(f Fleet, now time.Time, again bool) bool {
	if f.Version < b.sh.version || (f.Version == b.sh.version && !again) {
		return false
	}
	b.sh.version = f.Version
	cur := State(b.word.Load() & 3)
	switch f.State {
	case Closed:
		if cur == Closed {
			return false
		}
		b.closeLocked()
		return true
	case HalfOpen:
		if f.Prober {
			return false
		}
		return b.fleetOpenLocked(f, now, true)
	default:
		return b.fleetOpenLocked(f, now, false)
	}
}

// fleetOpenLocked opens the breaker as the fleet's is: until f.ReadyAt,
// capped at one break from now.
func (b *Breaker) fleetOpenLocked(f Fleet, now time.Time, halfOpen bool) bool {
	readyAt := f.ReadyAt
	if limit := now.Add(b.cfg.breakDuration); readyAt.IsZero() || readyAt.After(limit) {
		readyAt = limit
	}
	openedAt := f.OpenedAt
	if openedAt.IsZero() {
		openedAt = now
	}
	cur := State(b.word.Load() & 3)
	if cur == Open && b.readyAt.Equal(readyAt) && b.openedAt.Equal(openedAt) {
		return false
	}
	if cur == Closed {
		b.trips++
	}
	b.openedAt = openedAt
	b.readyAt = readyAt
	b.halfErr = nil
	b.openErr.Store(&OpenError{Name: b.name, ReadyAt: readyAt, HalfOpen: halfOpen})
	b.setLocked(Open)
	b.sh.fleetOpen = true
	return true
}

// allowShared is Allow on an open breaker whose break elapsed, when the
// breaker is shared: it asks the fleet for the probe. handled is false when
// the local state machine should decide (the fleet is out of reach, or the
// breaker is not open past its break any more).
func (b *Breaker) allowShared(h *sharedHook, now time.Time) (t Token, handled bool, err error) {
	b.mu.Lock()
	w := b.word.Load()
	ready := State(w&3) == Open && !now.Before(b.readyAt)
	b.mu.Unlock()
	if !ready {
		return Token{}, false, nil
	}
	if !b.sh.claiming.CompareAndSwap(false, true) {
		// Another call of this process is asking the fleet: the probe,
		// if granted, is that call's.
		return Token{}, true, &OpenError{Name: b.name, ReadyAt: now.Add(b.cfg.breakDuration), HalfOpen: true}
	}
	defer b.sh.claiming.Store(false)
	f, granted, err := h.s.Probe(b.name, now, now.Add(b.cfg.breakDuration))
	if err != nil {
		return Token{}, false, nil
	}
	changed := false
	b.mu.Lock()
	if granted {
		if f.Version > b.sh.version {
			b.sh.version = f.Version
		}
		b.halfOpenLocked(now)
		b.inflight++
		b.touchProbe(now)
		t, changed = Token{b.word.Load()}, true
	} else {
		changed = b.applyLocked(f, now, true)
		w = b.word.Load()
		switch {
		case State(w&3) == Closed:
			t = Token{w}
		case State(w&3) == Open && now.Before(b.readyAt):
			err = b.openErr.Load()
		default:
			err = &OpenError{Name: b.name, ReadyAt: now.Add(b.cfg.breakDuration), HalfOpen: true}
		}
	}
	b.mu.Unlock()
	if changed {
		b.notify()
	}
	return t, true, err
}

// share tells the Shared layer, if any, of an outcome recorded at now, and
// adopts the fleet's answer. tripped is true when the outcome opened the
// breaker.
func (b *Breaker) share(ev event, tripped bool, now time.Time) {
	h := b.sh.hook.Load()
	if h == nil || ev == evNone {
		return
	}
	var (
		f   Fleet
		err error
	)
	switch ev {
	case evFailure:
		b.mu.Lock()
		r := Report{Now: now, Tripped: tripped || b.runTrip}
		r.Failures, r.Requests = b.countsLocked(now)
		if b.cfg.consecutive > 0 {
			r.Streak = b.streak
		}
		if tripped {
			r.ReadyAt = b.readyAt
		}
		b.mu.Unlock()
		f, err = h.s.Failed(b.name, r)
		if err == nil && r.Streak > 0 {
			b.sh.run.Store(true)
		}
	case evProbeOK:
		f, err = h.s.Probed(b.name, true, now, time.Time{})
	case evProbeFailed:
		b.mu.Lock()
		readyAt := b.readyAt
		b.mu.Unlock()
		f, err = h.s.Probed(b.name, false, now, readyAt)
	}
	if err != nil {
		return
	}
	b.Apply(f)
}

// shareRunBroken tells the Shared layer that a success broke the run of
// failures this process reported, once per run.
func (b *Breaker) shareRunBroken() {
	h := b.sh.hook.Load()
	if h == nil || !b.sh.run.CompareAndSwap(true, false) {
		return
	}
	now := b.cfg.now()
	b.mu.Lock()
	r := Report{Now: now}
	r.Failures, r.Requests = b.countsLocked(now)
	b.mu.Unlock()
	f, err := h.s.Succeeded(b.name, r)
	if err != nil {
		return
	}
	b.Apply(f)
}

// countsLocked returns the failures and completed calls within the window
// ending at now (calls only in ratio mode), or where the window stands if
// the clock went back. After a trip it returns the counts that tripped
// the breaker.
func (b *Breaker) countsLocked(now time.Time) (failures, requests int) {
	rel := b.rel(now)
	if b.ratio {
		win := b.win.Load()
		reqs, fails := win.sum(win.epochOf(win.advance(rel)))
		return int(fails), int(reqs)
	}
	cut := rel - int64(b.cfg.window)
	for i := len(b.fails) - 1; i >= 0 && b.fails[i] > cut; i-- {
		failures++
	}
	return failures, 0
}

// Share connects every breaker of the registry, and those it creates
// later, to s; nil disconnects them.
func (r *Registry) Share(s Shared) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s == nil {
		r.shared.Store(nil)
	} else {
		r.shared.Store(&sharedHook{s: s})
	}
	r.byName.Range(func(_, v any) bool {
		v.(*Breaker).Share(s)
		return true
	})
}

// Shared returns the layer the registry's breakers share their state
// through, or nil.
func (r *Registry) Shared() Shared {
	if h := r.shared.Load(); h != nil {
		return h.s
	}
	return nil
}

// attach connects a breaker the registry just created to the registry's
// Shared layer. The caller holds r.mu.
func (r *Registry) attach(b *Breaker) {
	if h := r.shared.Load(); h != nil {
		b.sh.hook.Store(h)
	}
}

// Breakers returns the registry's breakers, in no particular order.
func (r *Registry) Breakers() []*Breaker {
	var bs []*Breaker
	r.byName.Range(func(_, v any) bool {
		bs = append(bs, v.(*Breaker))
		return true
	})
	return bs
}
