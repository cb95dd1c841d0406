package storetest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/redrivehq/redrive/store"
)

// Deleting shared breakers (store.Breakers.DeleteBreaker): the hand-picked
// cases, then random interleavings checked against a model of the
// contract, then concurrent sharers racing an operator's deletions.

// testBreakersDelete: only an unused record is deleted (closed and left
// alone for the idle period or its window, or forced open by an operator);
// a missing record reads closed at a version above the deleted one's, and
// a record created again starts above it; force deletes anything.
func testBreakersDelete(x *h) {
	del := func(name string, now time.Time, force bool) (store.BreakerState, error) {
		x.t.Helper()
		return x.s.DeleteBreaker(x.ctx, store.BreakerDelete{Name: name, Now: now, Force: force})
	}
	if _, err := del("dep", at(0), false); !errors.Is(err, store.ErrNotFound) {
		x.t.Fatalf("delete of an unknown breaker: %v, want ErrNotFound", err)
	}
	// Reported on a minute ago: in use, and the refusal says by whom.
	st := x.report(store.BreakerReport{Name: "dep", Process: "p1", Now: at(0), Failures: 1, Rule: countRule})
	x.wantBreaker(st, store.BreakerClosed, 1)
	_, err := del("dep", at(time.Minute), false)
	var inUse *store.BreakerInUseError
	if !errors.As(err, &inUse) || !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), "p1") {
		x.t.Fatalf("delete of a breaker reported on a minute ago: %v, want a BreakerInUseError naming p1", err)
	}
	x.wantBreaker(st, store.BreakerClosed, 1)
	// Left alone for the idle period: deleted.
	got, err := del("dep", at(store.BreakerIdle), false)
	if err != nil || got.Name != "dep" || got.Version != 1 {
		x.t.Fatalf("delete of an idle closed breaker: %+v, %v", got, err)
	}
	if _, err := x.s.Breaker(x.ctx, "dep"); !errors.Is(err, store.ErrNotFound) {
		x.t.Fatalf("Breaker after delete: %v, want ErrNotFound", err)
	}
	if all, err := x.s.ListBreakers(x.ctx); err != nil || len(all) != 0 {
		x.t.Fatalf("ListBreakers after delete: %+v, %v", all, err)
	}
	if _, err := del("dep", at(store.BreakerIdle), false); !errors.Is(err, store.ErrNotFound) {
		x.t.Fatalf("second delete: %v, want ErrNotFound", err)
	}
	// A missing record reads closed, above the deleted version, and a
	// refused claim or a settle does not create it.
	if st, granted := x.claim("dep", "p2", at(time.Hour), at(2*time.Hour)); granted || st.State != store.BreakerClosed || st.Version <= 1 {
		x.t.Fatalf("claim on a deleted breaker: granted %v, %+v; want closed above version 1", granted, st)
	}
	if st := x.settle(store.BreakerSettle{Name: "dep", Process: "p2", Now: at(time.Hour), OK: true}); st.State != store.BreakerClosed || st.Version <= 1 {
		x.t.Fatalf("settle on a deleted breaker: %+v; want closed above version 1", st)
	}
	if _, err := x.s.Breaker(x.ctx, "dep"); !errors.Is(err, store.ErrNotFound) {
		x.t.Fatalf("a claim or settle created the deleted record: %v", err)
	}
	// Used again: created again, above every version it had.
	st = x.report(store.BreakerReport{Name: "dep", Process: "p1", Now: at(time.Hour), Failures: 3, Rule: countRule})
	if st.State != store.BreakerOpen || st.Version <= 2 || st.Trips != 1 {
		x.t.Fatalf("re-created by a tripping report: %+v; want open above version 2, one trip", st)
	}
	// Open by trips (until 1h5s), or half-open: in use until nobody
	// asked for the probe, or took it over, for the idle period.
	ready := at(time.Hour + countRule.BreakDuration)
	if _, err := del("dep", ready.Add(store.BreakerIdle-time.Second), false); !errors.As(err, &inUse) || !strings.Contains(err.Error(), "open") {
		x.t.Fatalf("delete of a tripped breaker: %v, want in use (open)", err)
	}
	x.claim("dep", "p2", ready, at(2*time.Hour))
	if _, err := del("dep", at(2*time.Hour).Add(store.BreakerIdle-time.Second), false); !errors.As(err, &inUse) || !strings.Contains(err.Error(), "p2") {
		x.t.Fatalf("delete of a half-open breaker: %v, want in use (probe by p2)", err)
	}
	// Force deletes it; the floor rises above it.
	last, err := x.s.Breaker(x.ctx, "dep")
	if err != nil {
		x.t.Fatal(err)
	}
	if got, err := del("dep", at(time.Hour+10*time.Second), true); err != nil || got.State != store.BreakerHalfOpen {
		x.t.Fatalf("forced delete of a half-open breaker: %+v, %v", got, err)
	}
	if st, _ := x.claim("dep", "p2", at(2*time.Hour), at(3*time.Hour)); st.State != store.BreakerClosed || st.Version <= last.Version {
		x.t.Fatalf("after a forced delete: %+v, want closed above version %d", st, last.Version)
	}
	// Forced open by an operator: the operator may delete it at once.
	st, err = x.s.SetBreaker(x.ctx, store.BreakerSet{Name: "bad name!", State: store.BreakerOpen, Now: at(0)})
	if err != nil {
		x.t.Fatal(err)
	}
	if _, err := del("bad name!", at(time.Second), false); err != nil {
		x.t.Fatalf("delete of a breaker forced open: %v", err)
	}
	// A window longer than the idle period: unused only after the window.
	long := countRule
	long.Window = 2 * time.Hour
	x.report(store.BreakerReport{Name: "slow", Process: "p1", Now: at(0), Failures: 1, Rule: long})
	if _, err := del("slow", at(time.Hour), false); !errors.As(err, &inUse) || !strings.Contains(err.Error(), "2h") {
		x.t.Fatalf("delete within a 2h window: %v, want in use for 2h", err)
	}
	if _, err := del("slow", at(2*time.Hour), false); err != nil {
		x.t.Fatalf("delete after the window: %v", err)
	}
	// Open by trips, its break over for the idle period with nobody
	// asking for the probe: unused; half-open, its lease over for the
	// idle period: unused too.
	x.report(store.BreakerReport{Name: "stale", Process: "p1", Now: at(0), Failures: 3, Rule: countRule})
	if _, err := del("stale", at(countRule.BreakDuration+store.BreakerIdle), false); err != nil {
		x.t.Fatalf("delete of a breaker whose break ended %s ago: %v", store.BreakerIdle, err)
	}
	x.report(store.BreakerReport{Name: "stale", Process: "p1", Now: at(time.Hour), Failures: 3, Rule: countRule})
	x.claim("stale", "p1", at(time.Hour+countRule.BreakDuration), at(2*time.Hour))
	if _, err := del("stale", at(2*time.Hour+store.BreakerIdle), false); err != nil {
		x.t.Fatalf("delete of a breaker whose probe's lease ended %s ago: %v", store.BreakerIdle, err)
	}
	// Closed by its probe: in use until idle.
	x.report(store.BreakerReport{Name: "probed", Process: "p1", Now: at(0), Failures: 3, Rule: countRule})
	x.claim("probed", "p1", at(countRule.BreakDuration), at(time.Hour))
	x.settle(store.BreakerSettle{Name: "probed", Process: "p1", Now: at(countRule.BreakDuration), OK: true})
	if _, err := del("probed", at(countRule.BreakDuration+time.Second), false); !errors.As(err, &inUse) || !strings.Contains(err.Error(), "closed at") {
		x.t.Fatalf("delete just after its probe closed it: %v, want in use", err)
	}
	// Invalid requests.
	if _, err := del("", at(0), false); !errors.Is(err, store.ErrInvalid) {
		x.t.Fatalf("delete with an empty name: %v, want ErrInvalid", err)
	}
	if _, err := del("probed", time.Time{}, false); !errors.Is(err, store.ErrInvalid) {
		x.t.Fatalf("delete with a zero time: %v, want ErrInvalid", err)
	}
}

// The breaker deletion model: what the contract says of one name's
// record. A process applies a state only if its version is above the
// newest it applied (breaker.Breaker.Apply): so versions must only rise
// for a name, across deletes and re-creations.
type bdModel struct {
	x     *h
	r     *rand.Rand
	now   time.Time
	recs  map[string]*store.BreakerState // nil: missing
	floor map[string]int64               // per name
	// seen is the highest version any call returned for each name.
	seen  map[string]int64
	names []string
	steps []string
}

var bdProcesses = []string{"p1", "p2", "p3"}

// testBreakersDeleteModel: random interleavings of reports, claims,
// settles, operators' decisions and deletions (forced or not) by several
// processes, each checked against the model: every call's answer is the
// model's, a deletion succeeds exactly when the record is unused (or
// forced), versions only rise for a name, and a deleted record stays
// deleted until a report or an operator uses it again.
func testBreakersDeleteModel(x *h) {
	for _, seed := range []uint64{1, 2, 3} {
		m := &bdModel{x: x, r: rand.New(rand.NewPCG(seed, 0xb4ea)), now: at(time.Duration(seed) * 1000 * time.Hour),
			recs: map[string]*store.BreakerState{}, seen: map[string]int64{}, floor: map[string]int64{},
			names: []string{fmt.Sprint("a", seed), fmt.Sprint("b", seed)}}
		for range 300 {
			m.step()
			if x.t.Failed() {
				x.t.Fatalf("seed %d: failed after steps:\n%s", seed, strings.Join(m.steps, "\n"))
			}
		}
	}
}

func (m *bdModel) logf(format string, args ...any) {
	m.steps = append(m.steps, fmt.Sprintf("%s: ", m.now.Sub(base))+fmt.Sprintf(format, args...))
}

// cur returns the model's record of name: a missing one is a new record
// at the floor.
func (m *bdModel) cur(name string) (store.BreakerState, bool) {
	if r := m.recs[name]; r != nil {
		c := *r
		c.Counts = append([]store.BreakerCount(nil), r.Counts...)
		return c, true
	}
	st := store.NewBreakerState(name, m.now)
	st.Version = m.floor[name]
	return st, false
}

// check compares a call's answer with the model's and records its version.
func (m *bdModel) check(what string, got, want store.BreakerState) {
	m.x.t.Helper()
	if got.State != want.State || got.Version != want.Version || got.Trips != want.Trips || got.Forced != want.Forced ||
		got.ProbeBy != want.ProbeBy || got.OpenedBy != want.OpenedBy {
		m.x.t.Errorf("%s: store answered %s v%d trips %d forced %v probe %q by %q; model %s v%d trips %d forced %v probe %q by %q",
			what, got.State, got.Version, got.Trips, got.Forced, got.ProbeBy, got.OpenedBy,
			want.State, want.Version, want.Trips, want.Forced, want.ProbeBy, want.OpenedBy)
	}
	if got.Version < m.seen[got.Name] {
		m.x.t.Errorf("%s: version %d of %s after version %d was seen: versions went back", what, got.Version, got.Name, m.seen[got.Name])
	}
	m.seen[got.Name] = max(m.seen[got.Name], got.Version)
}

// unused is the contract's rule for a deletion without force, stated
// apart from store.CheckBreakerDelete: nothing changed the record for the
// idle period after the last thing it waited for (its last change; for an
// open breaker the end of its break, for a half-open one its probe's
// lease), or an operator forced it open.
func unused(st store.BreakerState, now time.Time) bool {
	idle := max(store.BreakerIdle, time.Duration(st.Window))
	last := st.UpdatedAt
	switch st.State {
	case store.BreakerOpen:
		if st.Forced {
			return true
		}
		if st.ReadyAt.After(last) {
			last = st.ReadyAt
		}
	case store.BreakerHalfOpen:
		if st.ProbeUntil.After(last) {
			last = st.ProbeUntil
		}
	}
	return !now.Before(last.Add(idle))
}

func (m *bdModel) step() {
	x := m.x
	// Mostly small steps; sometimes long enough for records to go idle.
	if m.r.IntN(8) == 0 {
		m.now = m.now.Add(store.BreakerIdle + time.Duration(m.r.IntN(60))*time.Second)
	} else {
		m.now = m.now.Add(time.Duration(m.r.IntN(4)) * time.Second)
	}
	name := m.names[m.r.IntN(len(m.names))]
	p := bdProcesses[m.r.IntN(len(bdProcesses))]
	rule := store.BreakerRule{Failures: 3, Window: 10 * time.Second, BreakDuration: 5 * time.Second}
	if m.r.IntN(4) == 0 {
		rule.Window = 10 * time.Minute // longer than the idle period
	}
	st, existed := m.cur(name)
	switch n := m.r.IntN(100); {
	case n < 30:
		r := store.BreakerReport{Name: name, Process: p, Now: m.now, Failures: 1 + m.r.IntN(2), Tripped: m.r.IntN(10) == 0, Rule: rule}
		m.logf("report %s by %s: %d failures, tripped %v", name, p, r.Failures, r.Tripped)
		got, err := x.s.ReportBreaker(x.ctx, r)
		if err != nil {
			x.t.Fatalf("ReportBreaker: %v", err)
		}
		// A report creates the record (and changes it if closed); on a
		// missing record it starts from the floor.
		store.ApplyBreakerReport(&st, r)
		m.recs[name] = &st
		m.check("report", got, st)
	case n < 50:
		c := store.BreakerClaim{Name: name, Process: p, Now: m.now, Until: m.now.Add(time.Duration(1+m.r.IntN(10)) * time.Second)}
		m.logf("claim %s by %s", name, p)
		got, granted, err := x.s.ClaimBreakerProbe(x.ctx, c)
		if err != nil {
			x.t.Fatalf("ClaimBreakerProbe: %v", err)
		}
		want := store.ApplyBreakerClaim(&st, c)
		if want {
			m.recs[name] = &st
		}
		if granted != want {
			x.t.Errorf("claim granted %v, model %v", granted, want)
		}
		m.check("claim", got, st)
	case n < 65:
		s := store.BreakerSettle{Name: name, Process: p, Now: m.now, OK: m.r.IntN(2) == 0, ReadyAt: m.now.Add(5 * time.Second)}
		m.logf("settle %s by %s: ok %v", name, p, s.OK)
		got, err := x.s.SettleBreakerProbe(x.ctx, s)
		if err != nil {
			x.t.Fatalf("SettleBreakerProbe: %v", err)
		}
		if store.ApplyBreakerSettle(&st, s) {
			m.recs[name] = &st
		}
		m.check("settle", got, st)
	case n < 75:
		set := store.BreakerSet{Name: name, State: store.BreakerOpen, By: "op", Now: m.now}
		if m.r.IntN(2) == 0 {
			set.State = store.BreakerClosed
		} else if m.r.IntN(2) == 0 {
			set.Until = m.now.Add(time.Minute)
		}
		m.logf("set %s %s until %v", name, set.State, !set.Until.IsZero())
		got, err := x.s.SetBreaker(x.ctx, set)
		if err != nil {
			x.t.Fatalf("SetBreaker: %v", err)
		}
		store.ApplyBreakerSet(&st, set)
		m.recs[name] = &st
		m.check("set", got, st)
	default:
		force := m.r.IntN(5) == 0
		m.logf("delete %s force %v", name, force)
		got, err := x.s.DeleteBreaker(x.ctx, store.BreakerDelete{Name: name, Now: m.now, Force: force})
		switch {
		case !existed:
			if !errors.Is(err, store.ErrNotFound) {
				x.t.Errorf("delete of a missing record: %v, want ErrNotFound", err)
			}
		case force || unused(st, m.now):
			if err != nil {
				x.t.Errorf("delete of an unused record (%s, forced %v, updated %s ago, window %s): %v",
					st.State, st.Forced, m.now.Sub(st.UpdatedAt), time.Duration(st.Window), err)
				return
			}
			m.check("delete", got, st)
			m.recs[name] = nil
			m.floor[name] = max(m.floor[name], st.Version+1)
		default:
			if !errors.Is(err, store.ErrConflict) {
				x.t.Errorf("delete of a record in use (%s, updated %s ago): %v, want ErrConflict", st.State, m.now.Sub(st.UpdatedAt), err)
			}
		}
	}
	// The records are the model's: a deleted one stays deleted.
	for _, name := range m.names {
		got, err := x.s.Breaker(x.ctx, name)
		want := m.recs[name]
		switch {
		case want == nil && !errors.Is(err, store.ErrNotFound):
			x.t.Errorf("Breaker(%s) = %+v, %v; the model has no record", name, got, err)
		case want != nil && err != nil:
			x.t.Errorf("Breaker(%s): %v; the model has %s v%d", name, err, want.State, want.Version)
		case want != nil:
			m.check("read "+name, got, *want)
		}
	}
}

// testBreakersDeleteConcurrent: processes report, claim and settle on
// two breakers while an operator deletes them (sometimes forced) and
// forces them open or closed, all at once. Each caller's answers for a
// name never go back in version, and every deletion without force took a
// record the contract calls unused.
func testBreakersDeleteConcurrent(x *h) {
	var (
		clock atomic64
		wg    sync.WaitGroup
		names = []string{"x", "y"}
	)
	clock.v = int64(time.Hour)
	now := func(r *rand.Rand) time.Time {
		step := time.Duration(r.IntN(3)) * time.Second
		if r.IntN(40) == 0 {
			step = store.BreakerIdle
		}
		return at(time.Duration(clock.add(int64(step))))
	}
	rule := store.BreakerRule{Failures: 4, Window: 10 * time.Second, BreakDuration: 3 * time.Second}
	type seenVersions map[string]int64
	caller := func(id int, r *rand.Rand, fn func(name string) (store.BreakerState, error)) {
		seen := seenVersions{}
		for range 60 {
			name := names[r.IntN(len(names))]
			st, err := fn(name)
			if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrConflict) {
				continue
			}
			if err != nil {
				x.t.Errorf("caller %d: %v", id, err)
				return
			}
			if st.Version < seen[name] {
				x.t.Errorf("caller %d: %s at version %d after version %d: versions went back", id, name, st.Version, seen[name])
			}
			seen[name] = max(seen[name], st.Version)
		}
	}
	for i, p := range []string{"p1", "p2", "p3"} {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(i), 7))
			caller(i, r, func(name string) (store.BreakerState, error) {
				t := now(r)
				switch r.IntN(3) {
				case 0:
					return x.s.ReportBreaker(x.ctx, store.BreakerReport{Name: name, Process: p, Now: t, Failures: 1 + r.IntN(4), Rule: rule})
				case 1:
					st, _, err := x.s.ClaimBreakerProbe(x.ctx, store.BreakerClaim{Name: name, Process: p, Now: t, Until: t.Add(2 * time.Second)})
					return st, err
				default:
					return x.s.SettleBreakerProbe(x.ctx, store.BreakerSettle{Name: name, Process: p, Now: t, OK: r.IntN(2) == 0, ReadyAt: t.Add(3 * time.Second)})
				}
			})
		})
	}
	wg.Go(func() {
		r := rand.New(rand.NewPCG(99, 7))
		caller(99, r, func(name string) (store.BreakerState, error) {
			t := now(r)
			switch r.IntN(4) {
			case 0:
				return x.s.SetBreaker(x.ctx, store.BreakerSet{Name: name, State: store.BreakerOpen, Now: t})
			case 1:
				return x.s.SetBreaker(x.ctx, store.BreakerSet{Name: name, State: store.BreakerClosed, Now: t})
			default:
				force := r.IntN(4) == 0
				st, err := x.s.DeleteBreaker(x.ctx, store.BreakerDelete{Name: name, Now: t, Force: force})
				if err == nil && !force && !unused(st, t) {
					x.t.Errorf("deleted %s in use: %+v at %s", name, st, t.Sub(base))
				}
				if err == nil {
					// The deleted record is gone for this caller: the
					// next answer must still be above it.
					st.Version++
				}
				return st, err
			}
		})
	})
	wg.Wait()
}

// atomic64 is a clock shared by the concurrent callers.
type atomic64 struct {
	mu sync.Mutex
	v  int64
}

func (a *atomic64) add(d int64) int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.v += d
	return a.v
}
