package breaker_test

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redrivehq/redrive/breaker"
	"github.com/redrivehq/redrive/store"
)

// memoryFleet shares breakers between registries of one program through a
// map, with the transitions of package store: a stand-in for what a redrive
// Worker does through its store between processes.
type memoryFleet struct {
	mu     sync.Mutex
	states map[string]*store.BreakerState
}

// member is one registry's connection to the fleet.
type member struct {
	fleet   *memoryFleet
	process string
	reg     *breaker.Registry
}

func (f *memoryFleet) update(name string, now time.Time, fn func(st *store.BreakerState)) store.BreakerState {
	f.mu.Lock()
	defer f.mu.Unlock()
	st, ok := f.states[name]
	if !ok {
		s := store.NewBreakerState(name, now)
		st = &s
		f.states[name] = st
	}
	fn(st)
	return *st
}

func (m *member) fleetOf(st store.BreakerState) breaker.Fleet {
	f := breaker.Fleet{OpenedAt: st.OpenedAt, OpenedBy: st.OpenedBy, Version: st.Version}
	switch st.State {
	case store.BreakerOpen:
		f.State, f.ReadyAt = breaker.Open, st.ReadyAt
	case store.BreakerHalfOpen:
		f.State, f.ReadyAt, f.Prober = breaker.HalfOpen, st.ProbeUntil, st.ProbeBy == m.process
	}
	return f
}

func (m *member) Failed(name string, r breaker.Report) (breaker.Fleet, error) {
	b, _ := m.reg.Lookup(name)
	c := b.Settings()
	rule := store.BreakerRule{Failures: c.Failures, Window: c.Window, BreakDuration: c.BreakDuration}
	st := m.fleet.update(name, r.Now, func(st *store.BreakerState) {
		store.ApplyBreakerReport(st, store.BreakerReport{Name: name, Process: m.process, Now: r.Now, Failures: r.Failures,
			Tripped: r.Tripped, ReadyAt: r.ReadyAt, Rule: rule})
	})
	return m.fleetOf(st), nil
}

func (m *member) Succeeded(name string, r breaker.Report) (breaker.Fleet, error) {
	return m.Failed(name, r) // the counts replace this member's, its run ended
}

func (m *member) Probe(name string, now, until time.Time) (breaker.Fleet, bool, error) {
	granted := false
	st := m.fleet.update(name, now, func(st *store.BreakerState) {
		granted = store.ApplyBreakerClaim(st, store.BreakerClaim{Name: name, Process: m.process, Now: now, Until: until})
	})
	return m.fleetOf(st), granted, nil
}

func (m *member) Probed(name string, ok bool, now, readyAt time.Time) (breaker.Fleet, error) {
	st := m.fleet.update(name, now, func(st *store.BreakerState) {
		store.ApplyBreakerSettle(st, store.BreakerSettle{Name: name, Process: m.process, Now: now, OK: ok, ReadyAt: readyAt})
	})
	return m.fleetOf(st), nil
}

func (m *member) Fallback() bool { return false }

// Two registries share their breakers: the failures of both count
// together, and the trip reported by one reaches the other with Apply (a
// redrive Worker does this through its store, for every process on it).
func ExampleRegistry_Share() {
	fleet := &memoryFleet{states: map[string]*store.BreakerState{}}
	cfg := breaker.Config{Failures: 4, CountOnly: true, BreakDuration: time.Minute}
	a, b := breaker.NewRegistry(cfg), breaker.NewRegistry(cfg)
	ma, mb := &member{fleet, "a", a}, &member{fleet, "b", b}
	a.Share(ma)
	b.Share(mb)

	fail := func(r *breaker.Registry) {
		br := r.Get("payments")
		if tok, err := br.Allow(); err == nil {
			br.Record(tok, errors.New("503"))
		}
	}
	for range 2 {
		fail(a)
		fail(b) // the fourth failure of the fleet, the second of b
	}
	fmt.Println("b:", b.Get("payments").State())
	fmt.Println("a before it hears of it:", a.Get("payments").State())
	fleet.mu.Lock()
	st := *fleet.states["payments"]
	fleet.mu.Unlock()
	a.Get("payments").Apply(ma.fleetOf(st))
	fmt.Println("a:", a.Get("payments").State(), "opened by", st.OpenedBy)
	// Output:
	// b: open
	// a before it hears of it: closed
	// a: open opened by b
}
