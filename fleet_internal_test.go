package redrive

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redrivehq/redrive/breaker"
	"github.com/redrivehq/redrive/internal/sqlitetest"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/sqlite"
)

// countingStore counts the calls of the shared breakers' store methods, and
// fails them all while down is set (a store out of reach).
type countingStore struct {
	store.Store
	calls atomic.Int64
	down  atomic.Bool
}

var errDown = errors.New("test: store down: " + store.ErrUnavailable.Error())

func (s *countingStore) hit() error {
	s.calls.Add(1)
	if s.down.Load() {
		return errDown
	}
	return nil
}

func (s *countingStore) ReportBreaker(ctx context.Context, r store.BreakerReport) (store.BreakerState, error) {
	if err := s.hit(); err != nil {
		return store.BreakerState{}, err
	}
	return s.Store.ReportBreaker(ctx, r)
}

func (s *countingStore) ClaimBreakerProbe(ctx context.Context, c store.BreakerClaim) (store.BreakerState, bool, error) {
	if err := s.hit(); err != nil {
		return store.BreakerState{}, false, err
	}
	return s.Store.ClaimBreakerProbe(ctx, c)
}

func (s *countingStore) SettleBreakerProbe(ctx context.Context, p store.BreakerSettle) (store.BreakerState, error) {
	if err := s.hit(); err != nil {
		return store.BreakerState{}, err
	}
	return s.Store.SettleBreakerProbe(ctx, p)
}

func (s *countingStore) ListBreakers(ctx context.Context) ([]store.BreakerState, error) {
	if err := s.hit(); err != nil {
		return nil, err
	}
	return s.Store.ListBreakers(ctx)
}

// sharedRegistry returns a registry shared through a counting SQLite store,
// connected and synced once, as a running worker's is.
func sharedRegistry(tb testing.TB, cfg breaker.Config) (*breaker.Registry, *countingStore, *fleetBreakers) {
	tb.Helper()
	st, err := sqlite.Open(context.Background(), sqlitetest.Path(tb), sqlite.Options{Logger: quietLog()})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { st.Close() })
	cs := &countingStore{Store: st}
	reg := breaker.NewRegistry(cfg)
	f := newFleetBreakers(context.Background(), cs, reg, "p1", quietLog())
	reg.Share(f)
	f.sync(context.Background())
	return reg, cs, f
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// BenchmarkSharedClosed is the success path of a closed breaker shared
// through a store: Allow and Record with no store access and no allocation.
func BenchmarkSharedClosed(b *testing.B) {
	for _, mode := range []struct {
		name string
		cfg  breaker.Config
	}{{"default", breaker.Config{}}, {"count-only", breaker.Config{CountOnly: true}}} {
		b.Run(mode.name, func(b *testing.B) {
			reg, cs, _ := sharedRegistry(b, mode.cfg)
			br := reg.Get("dep")
			before := cs.calls.Load()
			b.ReportAllocs()
			for b.Loop() {
				tok, err := br.Allow()
				if err != nil {
					b.Fatal(err)
				}
				br.Record(tok, nil)
			}
			if n := cs.calls.Load() - before; n != 0 {
				b.Fatalf("%d store calls on the closed path", n)
			}
		})
	}
}

// TestSharedClosedNoStoreNoAlloc: on a shared, closed breaker, successes
// neither reach the store nor allocate.
func TestSharedClosedNoStoreNoAlloc(t *testing.T) {
	for _, cfg := range []breaker.Config{{}, {CountOnly: true}} {
		reg, cs, _ := sharedRegistry(t, cfg)
		br := reg.Get("dep")
		before := cs.calls.Load()
		allocs := testing.AllocsPerRun(1000, func() {
			tok, err := br.Allow()
			if err != nil {
				t.Fatal(err)
			}
			br.Record(tok, nil)
		})
		if allocs != 0 {
			t.Errorf("%+v: %v allocations per call, want 0", cfg, allocs)
		}
		if n := cs.calls.Load() - before; n != 0 {
			t.Errorf("%+v: %d store calls for 1000 successes, want 0", cfg, n)
		}
	}
}

// TestSharedFallback: a process that loses the store decides alone on its
// own counts, says so (Fallback), makes no store call while it is out of
// reach, and hands its trip to the fleet when the store is back.
func TestSharedFallback(t *testing.T) {
	reg, cs, f := sharedRegistry(t, breaker.Config{Failures: 3, CountOnly: true, BreakDuration: time.Hour})
	var logs strings.Builder
	f.log = slog.New(slog.NewTextHandler(&logs, nil))
	br := reg.Get("dep")
	fail := func() {
		tok, err := br.Allow()
		if err != nil {
			t.Fatalf("Allow: %v", err)
		}
		br.Record(tok, errors.New("boom"))
	}
	fail()
	if f.Fallback() {
		t.Fatal("fallback while the store answers")
	}
	cs.down.Store(true)
	fail() // the report fails: the store is out of reach
	if !f.Fallback() || !reg.Shared().Fallback() {
		t.Fatal("no fallback after the store failed")
	}
	calls := cs.calls.Load()
	fail() // third local failure: the local breaker trips on its own
	if br.State() != breaker.Open {
		t.Fatalf("local breaker in fallback after 3 failures: %v", br.State())
	}
	if n := cs.calls.Load() - calls; n != 0 {
		t.Fatalf("%d store calls while out of reach", n)
	}
	cs.down.Store(false)
	f.sync(context.Background())
	if f.Fallback() {
		t.Fatal("still in fallback after the store answered")
	}
	st, err := cs.Breaker(context.Background(), "dep")
	if err != nil {
		t.Fatal(err)
	}
	if st.State != store.BreakerOpen || st.OpenedBy != "p1" {
		t.Fatalf("fleet breaker after rejoining: %+v", st)
	}
	if n := strings.Count(logs.String(), "the store is out of reach"); n != 1 {
		t.Errorf("%d log lines about the lost store, want 1:\n%s", n, logs.String())
	}
	if n := strings.Count(logs.String(), "the store is back"); n != 1 {
		t.Errorf("%d log lines about the store coming back, want 1:\n%s", n, logs.String())
	}
}

// TestSharedTwoProcesses: two registries on one store behave as one
// breaker: the failures of both add up, the trip reaches the other at the
// next sync, one probe is granted, its success closes both.
func TestSharedTwoProcesses(t *testing.T) {
	st, err := sqlite.Open(context.Background(), sqlitetest.Path(t), sqlite.Options{Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var now atomic.Int64
	now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()).UTC() }
	cfg := breaker.Config{Failures: 4, CountOnly: true, BreakDuration: time.Minute, Now: clock}
	var regs [2]*breaker.Registry
	var fs [2]*fleetBreakers
	for i := range regs {
		regs[i] = breaker.NewRegistry(cfg)
		fs[i] = newFleetBreakers(context.Background(), st, regs[i], []string{"a", "b"}[i], quietLog())
		regs[i].Share(fs[i])
		fs[i].sync(context.Background())
	}
	a, b := regs[0].Get("dep"), regs[1].Get("dep")
	fail := func(br *breaker.Breaker) {
		t.Helper()
		tok, err := br.Allow()
		if err != nil {
			t.Fatalf("%s: Allow: %v", br.Name(), err)
		}
		br.Record(tok, errors.New("boom"))
	}
	fail(a)
	fail(b)
	fail(a)
	if a.State() != breaker.Closed || b.State() != breaker.Closed {
		t.Fatal("tripped before 4 fleet failures")
	}
	fail(b) // the 4th failure of the fleet, 2nd of b
	if b.State() != breaker.Open {
		t.Fatalf("b after the fleet's 4th failure: %v", b.State())
	}
	fs[0].sync(context.Background())
	if a.State() != breaker.Open {
		t.Fatalf("a after a sync: %v", a.State())
	}
	now.Add(int64(time.Minute))
	ta, errA := a.Allow()
	_, errB := b.Allow()
	if errA != nil || errB == nil {
		t.Fatalf("after the break: a %v, b %v; want a to probe and b refused", errA, errB)
	}
	var oe *breaker.OpenError
	if !errors.As(errB, &oe) || !oe.HalfOpen {
		t.Fatalf("b refused with %v, want a half-open OpenError", errB)
	}
	a.Record(ta, nil)
	if a.State() != breaker.Closed {
		t.Fatalf("a after its probe succeeded: %v", a.State())
	}
	fs[1].sync(context.Background())
	if b.State() != breaker.Closed {
		t.Fatalf("b after a sync: %v", b.State())
	}
}

// TestSharedFleetDecides: with a ratio, one process whose own counts would
// trip its breaker does not fence the dependency off while the fleet's
// counts (another process's successes) keep the fleet's breaker closed.
func TestSharedFleetDecides(t *testing.T) {
	st, err := sqlite.Open(context.Background(), sqlitetest.Path(t), sqlite.Options{Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	cfg := breaker.Config{Failures: 5, FailureRatio: 0.5, Consecutive: breaker.NoConsecutive, BreakDuration: time.Minute}
	var regs [2]*breaker.Registry
	for i := range regs {
		regs[i] = breaker.NewRegistry(cfg)
		f := newFleetBreakers(context.Background(), st, regs[i], []string{"a", "b"}[i], quietLog())
		regs[i].Share(f)
		f.sync(context.Background())
	}
	a, b := regs[0].Get("dep"), regs[1].Get("dep")
	call := func(br *breaker.Breaker, err error) {
		t.Helper()
		tok, aerr := br.Allow()
		if aerr != nil {
			t.Fatalf("%s: Allow: %v", br.Name(), aerr)
		}
		br.Record(tok, err)
	}
	for range 100 {
		call(b, nil)
	}
	for range 5 {
		call(b, errors.New("boom")) // b: 5 of 105
	}
	for range 5 {
		call(a, errors.New("boom")) // a: 5 of 5, the fleet 10 of 110
	}
	if a.State() != breaker.Closed {
		t.Fatalf("a's breaker: %v, want closed: the fleet's counts (10 of 110) do not trip", a.State())
	}
	fleet, err := st.Breaker(context.Background(), "dep")
	if err != nil || fleet.State != store.BreakerClosed {
		t.Fatalf("fleet breaker: %+v, %v", fleet, err)
	}
	if f, r := fleet.Totals(time.Now()); f != 10 || r != 110 {
		t.Fatalf("fleet counts %d of %d, want 10 of 110", f, r)
	}
}

// TestSharedFleetRun: the fleet's run of failures in a row is the sum of
// its processes' runs, and a process's first success after its reported
// failures breaks its share of it. With the default rule, 5 failures in a
// row across two processes trip the fleet's breaker after a busy spell
// whose successes keep the ratio far below 50%.
func TestSharedFleetRun(t *testing.T) {
	st, err := sqlite.Open(context.Background(), sqlitetest.Path(t), sqlite.Options{Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var regs [2]*breaker.Registry
	for i := range regs {
		regs[i] = breaker.NewRegistry(breaker.Config{BreakDuration: time.Minute})
		f := newFleetBreakers(context.Background(), st, regs[i], []string{"a", "b"}[i], quietLog())
		regs[i].Share(f)
		f.sync(context.Background())
	}
	a, b := regs[0].Get("dep"), regs[1].Get("dep")
	call := func(br *breaker.Breaker, err error) {
		t.Helper()
		tok, aerr := br.Allow()
		if aerr != nil {
			t.Fatalf("%s: Allow: %v", br.Name(), aerr)
		}
		br.Record(tok, err)
	}
	boom := errors.New("boom")
	for range 200 {
		call(a, nil)
		call(b, nil)
	}
	// a: 2 in a row, b: 2 in a row, then b succeeds: the fleet's run is 2.
	call(a, boom)
	call(b, boom)
	call(a, boom)
	call(b, boom)
	call(b, nil)
	call(a, boom) // a: 3 in a row; the fleet's run: 3 + 0
	call(b, boom) // 3 + 1
	if a.State() != breaker.Closed || b.State() != breaker.Closed {
		t.Fatalf("breakers %v/%v after a fleet run of 4, want closed", a.State(), b.State())
	}
	if fleet, err := st.Breaker(context.Background(), "dep"); err != nil || fleet.State != store.BreakerClosed {
		t.Fatalf("fleet breaker after a run of 4: %+v, %v", fleet, err)
	}
	call(b, boom) // 3 + 2: the fleet's 5th failure in a row
	fleet, err := st.Breaker(context.Background(), "dep")
	if err != nil || fleet.State != store.BreakerOpen || fleet.OpenedBy != "b" {
		t.Fatalf("fleet breaker after a run of 5: %+v, %v; want open by b", fleet, err)
	}
	if fleet.Trips != 1 {
		t.Fatalf("fleet trips = %d, want 1", fleet.Trips)
	}
	if b.State() != breaker.Open {
		t.Fatalf("b's breaker: %v, want open (it adopts the fleet's answer)", b.State())
	}
}

// TestSharedForcedOpen: a breaker forced open until closed stays open past
// its break, asking the store once per break (not once per call), and
// closes when an operator closes it.
func TestSharedForcedOpen(t *testing.T) {
	var now atomic.Int64
	now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()).UTC() }
	reg, cs, f := sharedRegistry(t, breaker.Config{CountOnly: true, BreakDuration: time.Minute, Now: clock})
	br := reg.Get("dep")
	if _, err := cs.SetBreaker(context.Background(), store.BreakerSet{Name: "dep", State: store.BreakerOpen, Now: clock()}); err != nil {
		t.Fatal(err)
	}
	f.sync(context.Background())
	if _, err := br.Allow(); !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("Allow on a breaker forced open: %v", err)
	}
	for i := range 3 {
		now.Add(int64(time.Minute))
		before := cs.calls.Load()
		for range 10 {
			if _, err := br.Allow(); !errors.Is(err, breaker.ErrOpen) {
				t.Fatalf("break %d: Allow on a breaker forced open: %v", i, err)
			}
		}
		if n := cs.calls.Load() - before; n != 1 {
			t.Fatalf("break %d: %d store calls for 10 refused calls, want 1 (the refused probe claim)", i, n)
		}
	}
	if _, err := cs.SetBreaker(context.Background(), store.BreakerSet{Name: "dep", State: store.BreakerClosed, Now: clock()}); err != nil {
		t.Fatal(err)
	}
	f.sync(context.Background())
	if _, err := br.Allow(); err != nil {
		t.Fatalf("Allow after the operator closed it: %v", err)
	}
}
