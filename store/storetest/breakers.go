package storetest

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redrivehq/redrive/store"
)

// countRule is the count-only rule the breaker subtests report with: 3
// failures within 10 s, 5 s open.
var countRule = store.BreakerRule{Failures: 3, Window: 10 * time.Second, BreakDuration: 5 * time.Second}

func (x *h) report(r store.BreakerReport) store.BreakerState {
	x.t.Helper()
	st, err := x.s.ReportBreaker(x.ctx, r)
	if err != nil {
		x.t.Fatalf("ReportBreaker(%+v): %v", r, err)
	}
	return st
}

func (x *h) claim(name, process string, now, until time.Time) (store.BreakerState, bool) {
	x.t.Helper()
	st, granted, err := x.s.ClaimBreakerProbe(x.ctx, store.BreakerClaim{Name: name, Process: process, Now: now, Until: until})
	if err != nil {
		x.t.Fatalf("ClaimBreakerProbe(%s, %s): %v", name, process, err)
	}
	return st, granted
}

func (x *h) settle(s store.BreakerSettle) store.BreakerState {
	x.t.Helper()
	st, err := x.s.SettleBreakerProbe(x.ctx, s)
	if err != nil {
		x.t.Fatalf("SettleBreakerProbe(%+v): %v", s, err)
	}
	return st
}

// wantBreaker fails unless st has the given state and version, and the
// store returns the same record.
func (x *h) wantBreaker(st store.BreakerState, state string, version int64) {
	x.t.Helper()
	if st.State != state || st.Version != version {
		x.t.Fatalf("breaker %s: state %s version %d, want %s version %d (%+v)", st.Name, st.State, st.Version, state, version, st)
	}
	got, err := x.s.Breaker(x.ctx, st.Name)
	if err != nil {
		x.t.Fatalf("Breaker(%s): %v", st.Name, err)
	}
	if got.State != st.State || got.Version != st.Version || !sameInstant(got.Since, st.Since) || got.OpenedBy != st.OpenedBy ||
		!sameInstant(got.ReadyAt, st.ReadyAt) || got.Trips != st.Trips || got.ProbeBy != st.ProbeBy || !sameInstant(got.ProbeUntil, st.ProbeUntil) ||
		got.Forced != st.Forced || len(got.Counts) != len(st.Counts) {
		x.t.Fatalf("Breaker(%s) = %+v, want what the change returned: %+v", st.Name, got, st)
	}
}

// sameInstant compares times to the microsecond; zero equals zero only.
func sameInstant(a, b time.Time) bool {
	if a.IsZero() || b.IsZero() {
		return a.IsZero() && b.IsZero()
	}
	return sameTime(a, b)
}

// testBreakersTrip: reports of several processes add up to the fleet's
// count; the report that reaches the rule opens the breaker, by that
// process, until now + the break; later reports change nothing.
func testBreakersTrip(x *h) {
	if _, err := x.s.Breaker(x.ctx, "dep"); !errors.Is(err, store.ErrNotFound) {
		x.t.Fatalf("Breaker of an unknown dependency: %v, want ErrNotFound", err)
	}
	st := x.report(store.BreakerReport{Name: "dep", Process: "p1", Now: at(0), Failures: 1, Rule: countRule})
	x.wantBreaker(st, store.BreakerClosed, 1)
	if f, _ := st.Totals(at(0)); f != 1 || len(st.Counts) != 1 || st.Counts[0].Process != "p1" {
		x.t.Fatalf("after one report: %+v", st)
	}
	// p1's second report replaces its first: still 2 failures in all.
	st = x.report(store.BreakerReport{Name: "dep", Process: "p1", Now: at(time.Second), Failures: 2, Rule: countRule})
	x.wantBreaker(st, store.BreakerClosed, 2)
	if f, _ := st.Totals(at(time.Second)); f != 2 {
		x.t.Fatalf("p1 reported 2 failures: fleet counts %d", f)
	}
	st = x.report(store.BreakerReport{Name: "dep", Process: "p2", Now: at(2 * time.Second), Failures: 1, Rule: countRule})
	x.wantBreaker(st, store.BreakerOpen, 3)
	if st.OpenedBy != "p2" || !sameInstant(st.OpenedAt, at(2*time.Second)) || !sameInstant(st.ReadyAt, at(7*time.Second)) ||
		!sameInstant(st.Since, at(2*time.Second)) || st.Trips != 1 || len(st.Counts) != 0 {
		x.t.Fatalf("tripped breaker: %+v", st)
	}
	// A report on an open breaker changes nothing.
	st = x.report(store.BreakerReport{Name: "dep", Process: "p3", Now: at(3 * time.Second), Failures: 9, Rule: countRule})
	x.wantBreaker(st, store.BreakerOpen, 3)
	// Another dependency is independent.
	other := x.report(store.BreakerReport{Name: "other", Process: "p1", Now: at(3 * time.Second), Failures: 1, Rule: countRule})
	x.wantBreaker(other, store.BreakerClosed, 1)
	all, err := x.s.ListBreakers(x.ctx)
	if err != nil {
		x.t.Fatalf("ListBreakers: %v", err)
	}
	if len(all) != 2 || all[0].Name != "dep" || all[1].Name != "other" || all[0].State != store.BreakerOpen {
		x.t.Fatalf("ListBreakers = %+v", all)
	}
}

// testBreakersWindow: counts older than the window are dropped; a process
// that tripped its own breaker opens the fleet's at once, until the time
// it gives.
func testBreakersWindow(x *h) {
	x.report(store.BreakerReport{Name: "dep", Process: "p1", Now: at(0), Failures: 2, Rule: countRule})
	st := x.report(store.BreakerReport{Name: "dep", Process: "p2", Now: at(11 * time.Second), Failures: 2, Rule: countRule})
	x.wantBreaker(st, store.BreakerClosed, 2)
	if f, _ := st.Totals(at(11 * time.Second)); f != 2 || len(st.Counts) != 1 {
		x.t.Fatalf("p1's counts are 11 s old, the window 10 s: %+v", st)
	}
	st = x.report(store.BreakerReport{Name: "dep", Process: "p3", Now: at(12 * time.Second), Failures: 1, Tripped: true,
		ReadyAt: at(20 * time.Second), Rule: countRule})
	x.wantBreaker(st, store.BreakerOpen, 3)
	if st.OpenedBy != "p3" || !sameInstant(st.ReadyAt, at(20*time.Second)) {
		x.t.Fatalf("breaker tripped by p3: %+v", st)
	}
}

// testBreakersRatio: with a ratio, failures/requests must reach it as
// well as the count.
func testBreakersRatio(x *h) {
	rule := store.BreakerRule{Failures: 5, Ratio: 0.5, Window: 30 * time.Second, BreakDuration: time.Minute}
	st := x.report(store.BreakerReport{Name: "dep", Process: "p1", Now: at(0), Failures: 5, Requests: 100, Rule: rule})
	x.wantBreaker(st, store.BreakerClosed, 1)
	st = x.report(store.BreakerReport{Name: "dep", Process: "p2", Now: at(time.Second), Failures: 40, Requests: 50, Rule: rule})
	x.wantBreaker(st, store.BreakerClosed, 2) // 45 of 150
	st = x.report(store.BreakerReport{Name: "dep", Process: "p2", Now: at(2 * time.Second), Failures: 95, Requests: 100, Rule: rule})
	x.wantBreaker(st, store.BreakerOpen, 3) // 100 of 200
}

// testBreakersProbe: exactly one process gets the probe of a half-open
// period, even when many ask at once; its success closes the breaker, its
// failure opens it again; a lease that ends without an outcome lets
// another process probe.
func testBreakersProbe(x *h) {
	if st, granted := x.claim("dep", "p1", at(0), at(time.Second)); granted || st.State != store.BreakerClosed {
		x.t.Fatalf("claim on an unknown breaker: granted %v, %+v", granted, st)
	}
	if _, err := x.s.Breaker(x.ctx, "dep"); !errors.Is(err, store.ErrNotFound) {
		x.t.Fatalf("a refused claim created the record: %v", err)
	}
	x.report(store.BreakerReport{Name: "dep", Process: "p1", Now: at(0), Failures: 3, Rule: countRule}) // open until 5 s
	if st, granted := x.claim("dep", "p2", at(4*time.Second), at(10*time.Second)); granted || st.State != store.BreakerOpen {
		x.t.Fatalf("claim before ready_at: granted %v, %+v", granted, st)
	}
	// Ten processes ask at once: one gets it.
	var wg sync.WaitGroup
	var mu sync.Mutex
	var winners []string
	for i := range 10 {
		wg.Go(func() {
			p := fmt.Sprint("c", i)
			_, granted, err := x.s.ClaimBreakerProbe(x.ctx, store.BreakerClaim{Name: "dep", Process: p, Now: at(6 * time.Second), Until: at(16 * time.Second)})
			if err != nil {
				x.t.Errorf("ClaimBreakerProbe: %v", err)
				return
			}
			if granted {
				mu.Lock()
				winners = append(winners, p)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(winners) != 1 {
		x.t.Fatalf("concurrent claims granted to %v, want exactly one", winners)
	}
	prober := winners[0]
	st, err := x.s.Breaker(x.ctx, "dep")
	if err != nil {
		x.t.Fatal(err)
	}
	if st.State != store.BreakerHalfOpen || st.ProbeBy != prober || !sameInstant(st.ProbeUntil, at(16*time.Second)) || !sameInstant(st.Since, at(6*time.Second)) {
		x.t.Fatalf("half-open breaker: %+v", st)
	}
	// Only the prober settles.
	if got := x.settle(store.BreakerSettle{Name: "dep", Process: "p1", Now: at(7 * time.Second), OK: true}); got.State != store.BreakerHalfOpen || got.Version != st.Version {
		x.t.Fatalf("settle by a process without the probe changed the breaker: %+v", got)
	}
	// The probe fails: open again until the time given, one more trip.
	got := x.settle(store.BreakerSettle{Name: "dep", Process: prober, Now: at(7 * time.Second), ReadyAt: at(12 * time.Second)})
	x.wantBreaker(got, store.BreakerOpen, st.Version+1)
	if got.OpenedBy != prober || !sameInstant(got.ReadyAt, at(12*time.Second)) || got.Trips != 2 || got.ProbeBy != "" {
		x.t.Fatalf("after a failed probe: %+v", got)
	}
	// Next period: p1 probes, and its process dies: after the lease p2 may.
	if _, granted := x.claim("dep", "p1", at(12*time.Second), at(20*time.Second)); !granted {
		x.t.Fatal("claim after ready_at refused")
	}
	if _, granted := x.claim("dep", "p2", at(19*time.Second), at(30*time.Second)); granted {
		x.t.Fatal("claim granted while the lease runs")
	}
	st, granted := x.claim("dep", "p2", at(20*time.Second), at(30*time.Second))
	if !granted || st.ProbeBy != "p2" {
		x.t.Fatalf("claim after the lease ended: granted %v, %+v", granted, st)
	}
	// The late outcome of p1's probe changes nothing; p2's success closes.
	if got := x.settle(store.BreakerSettle{Name: "dep", Process: "p1", Now: at(21 * time.Second), OK: true}); got.State != store.BreakerHalfOpen || got.ProbeBy != "p2" {
		x.t.Fatalf("settle of an expired lease changed the breaker: %+v", got)
	}
	got = x.settle(store.BreakerSettle{Name: "dep", Process: "p2", Now: at(22 * time.Second), OK: true})
	x.wantBreaker(got, store.BreakerClosed, st.Version+1)
	if !sameInstant(got.Since, at(22*time.Second)) || got.OpenedBy != prober || got.Trips != 2 || !got.ReadyAt.IsZero() || got.ProbeBy != "" {
		x.t.Fatalf("closed breaker: %+v", got)
	}
}

// testBreakersSet: an operator forces a breaker open (no probe before
// until; none at all without until) and closes it.
func testBreakersSet(x *h) {
	st, err := x.s.SetBreaker(x.ctx, store.BreakerSet{Name: "dep", State: store.BreakerOpen, By: "alice", Now: at(0)})
	if err != nil {
		x.t.Fatal(err)
	}
	x.wantBreaker(st, store.BreakerOpen, 1)
	if !st.Forced || st.OpenedBy != "alice" || !st.ReadyAt.IsZero() || st.Trips != 1 {
		x.t.Fatalf("forced open: %+v", st)
	}
	if _, granted := x.claim("dep", "p1", at(time.Hour), at(2*time.Hour)); granted {
		x.t.Fatal("probe granted on a breaker forced open until closed")
	}
	x.report(store.BreakerReport{Name: "dep", Process: "p1", Now: at(time.Hour), Failures: 1, Rule: countRule})
	st, err = x.s.SetBreaker(x.ctx, store.BreakerSet{Name: "dep", State: store.BreakerOpen, Now: at(time.Hour), Until: at(2 * time.Hour)})
	if err != nil {
		x.t.Fatal(err)
	}
	if st.OpenedBy != "operator" || !sameInstant(st.ReadyAt, at(2*time.Hour)) || st.Trips != 1 || !st.Forced {
		x.t.Fatalf("forced open again with until: %+v", st)
	}
	if _, granted := x.claim("dep", "p1", at(2*time.Hour-time.Second), at(3*time.Hour)); granted {
		x.t.Fatal("probe granted before until")
	}
	if st, granted := x.claim("dep", "p1", at(2*time.Hour), at(3*time.Hour)); !granted || st.Forced {
		x.t.Fatalf("probe after until: granted %v, %+v", granted, st)
	}
	st, err = x.s.SetBreaker(x.ctx, store.BreakerSet{Name: "dep", State: store.BreakerClosed, Now: at(3 * time.Hour)})
	if err != nil {
		x.t.Fatal(err)
	}
	x.wantBreaker(st, store.BreakerClosed, st.Version)
	if st.ProbeBy != "" || st.Forced || len(st.Counts) != 0 {
		x.t.Fatalf("closed by an operator: %+v", st)
	}
	// Closing an unknown breaker creates a closed record.
	st, err = x.s.SetBreaker(x.ctx, store.BreakerSet{Name: "new", State: store.BreakerClosed, Now: at(0)})
	if err != nil || st.State != store.BreakerClosed || st.Version != 1 {
		x.t.Fatalf("close an unknown breaker: %+v, %v", st, err)
	}
}

// testBreakersInvalid: malformed requests are ErrInvalid and change
// nothing.
func testBreakersInvalid(x *h) {
	bad := map[string]func() error{
		"empty name": func() error {
			_, err := x.s.ReportBreaker(x.ctx, store.BreakerReport{Process: "p", Now: at(0), Failures: 1, Rule: countRule})
			return err
		},
		"long name": func() error {
			_, err := x.s.SetBreaker(x.ctx, store.BreakerSet{Name: strings.Repeat("x", 201), State: store.BreakerOpen, Now: at(0)})
			return err
		},
		"NUL in name": func() error {
			_, err := x.s.SetBreaker(x.ctx, store.BreakerSet{Name: "a\x00b", State: store.BreakerOpen, Now: at(0)})
			return err
		},
		"invalid UTF-8": func() error {
			_, _, err := x.s.ClaimBreakerProbe(x.ctx, store.BreakerClaim{Name: "\xff", Process: "p", Now: at(0), Until: at(time.Second)})
			return err
		},
		"no process": func() error {
			_, err := x.s.ReportBreaker(x.ctx, store.BreakerReport{Name: "dep", Now: at(0), Failures: 1, Rule: countRule})
			return err
		},
		"negative failures": func() error {
			_, err := x.s.ReportBreaker(x.ctx, store.BreakerReport{Name: "dep", Process: "p", Now: at(0), Failures: -1, Rule: countRule})
			return err
		},
		"empty rule": func() error {
			_, err := x.s.ReportBreaker(x.ctx, store.BreakerReport{Name: "dep", Process: "p", Now: at(0), Failures: 1,
				Rule: store.BreakerRule{Window: time.Second, BreakDuration: time.Second}})
			return err
		},
		"ratio above 1": func() error {
			_, err := x.s.ReportBreaker(x.ctx, store.BreakerReport{Name: "dep", Process: "p", Now: at(0), Failures: 1,
				Rule: store.BreakerRule{Ratio: 1.5, Window: time.Second, BreakDuration: time.Second}})
			return err
		},
		"lease not after now": func() error {
			_, _, err := x.s.ClaimBreakerProbe(x.ctx, store.BreakerClaim{Name: "dep", Process: "p", Now: at(0), Until: at(0)})
			return err
		},
		"failed probe without ready_at": func() error {
			_, err := x.s.SettleBreakerProbe(x.ctx, store.BreakerSettle{Name: "dep", Process: "p", Now: at(0)})
			return err
		},
		"unknown state": func() error {
			_, err := x.s.SetBreaker(x.ctx, store.BreakerSet{Name: "dep", State: "half_open", Now: at(0)})
			return err
		},
		"until on close": func() error {
			_, err := x.s.SetBreaker(x.ctx, store.BreakerSet{Name: "dep", State: store.BreakerClosed, Now: at(0), Until: at(time.Second)})
			return err
		},
	}
	for name, call := range bad {
		if err := call(); !errors.Is(err, store.ErrInvalid) {
			x.t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	all, err := x.s.ListBreakers(x.ctx)
	if err != nil || len(all) != 0 {
		x.t.Fatalf("after invalid requests: %+v, %v", all, err)
	}
}

// testBreakersConcurrent: processes reporting at once never lose a trip:
// with a rule of 3 failures, 8 processes reporting 1 failure each open
// the breaker exactly once, and the reports after the trip see it open.
func testBreakersConcurrent(x *h) {
	var wg sync.WaitGroup
	states := make([]store.BreakerState, 8)
	for i := range states {
		wg.Go(func() {
			st, err := x.s.ReportBreaker(x.ctx, store.BreakerReport{Name: "dep", Process: fmt.Sprint("p", i), Now: at(time.Duration(i) * time.Millisecond),
				Failures: 1, Rule: countRule})
			if err != nil {
				x.t.Errorf("ReportBreaker: %v", err)
			}
			states[i] = st
		})
	}
	wg.Wait()
	st, err := x.s.Breaker(x.ctx, "dep")
	if err != nil {
		x.t.Fatal(err)
	}
	if st.State != store.BreakerOpen || st.Trips != 1 || st.Version != 3 {
		x.t.Fatalf("after 8 concurrent reports: %+v", st)
	}
	open := 0
	for _, s := range states {
		if s.State == store.BreakerOpen {
			open++
		}
	}
	if open != 6 {
		x.t.Fatalf("%d reports saw the breaker open, want 6 (all but the first two)", open)
	}
}

// testBreakersClosed: every breaker call on a closed store reports
// ErrClosed.
func testBreakersClosed(x *h) {
	if err := x.s.Close(); err != nil {
		x.t.Fatalf("Close: %v", err)
	}
	calls := map[string]func() error{
		"ReportBreaker": func() error {
			_, err := x.s.ReportBreaker(x.ctx, store.BreakerReport{Name: "dep", Process: "p", Now: at(0), Failures: 1, Rule: countRule})
			return err
		},
		"ClaimBreakerProbe": func() error {
			_, _, err := x.s.ClaimBreakerProbe(x.ctx, store.BreakerClaim{Name: "dep", Process: "p", Now: at(0), Until: at(time.Second)})
			return err
		},
		"SettleBreakerProbe": func() error {
			_, err := x.s.SettleBreakerProbe(x.ctx, store.BreakerSettle{Name: "dep", Process: "p", Now: at(0), OK: true})
			return err
		},
		"SetBreaker": func() error {
			_, err := x.s.SetBreaker(x.ctx, store.BreakerSet{Name: "dep", State: store.BreakerOpen, Now: at(0)})
			return err
		},
		"DeleteBreaker": func() error {
			_, err := x.s.DeleteBreaker(x.ctx, store.BreakerDelete{Name: "dep", Now: at(0)})
			return err
		},
		"Breaker":      func() error { _, err := x.s.Breaker(x.ctx, "dep"); return err },
		"ListBreakers": func() error { _, err := x.s.ListBreakers(x.ctx); return err },
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, store.ErrClosed) {
			x.t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
}
