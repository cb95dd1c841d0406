package postgres_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/postgres"
)

// TestBreakerDeleteRacesAcrossStores runs reports, probe claims and
// settles, operator sets and deletions of two shared breakers at once,
// from several store instances on one schema (several processes), with
// random choices, and checks them against the contract's model of
// versions:
//
//   - a version names one state of a record: two answers at the same
//     version of a name hold the same state (a record created again after
//     a deletion never reuses a version, and no update is lost);
//   - once a deletion of version V returned, every answer to a call
//     started after it is above V (the floor), whichever instance answers.
func TestBreakerDeleteRacesAcrossStores(t *testing.T) {
	schema := newSchema(t)
	var stores []*postgres.Store
	for range 3 {
		s := open(t, schema)
		t.Cleanup(func() { s.Close() })
		stores = append(stores, s)
	}
	ctx := t.Context()
	base := time.Date(2026, time.March, 1, 0, 0, 0, 0, time.UTC)
	var (
		mu    sync.Mutex
		clock = time.Hour
		seen  = map[string]map[int64]string{} // name -> version -> state
		floor = map[string]int64{}            // name -> version every later answer is above
	)
	now := func(r *rand.Rand) time.Time {
		mu.Lock()
		defer mu.Unlock()
		step := time.Duration(r.IntN(3)) * time.Second
		if r.IntN(30) == 0 {
			step = store.BreakerIdle
		}
		clock += step
		return base.Add(clock)
	}
	describe := func(st store.BreakerState) string {
		return fmt.Sprintf("%s trips=%d forced=%v by=%q probe=%q ready=%s", st.State, st.Trips, st.Forced, st.OpenedBy, st.ProbeBy,
			st.ReadyAt.UTC().Format(time.RFC3339Nano))
	}
	record := func(who, what string, before int64, st store.BreakerState) {
		mu.Lock()
		defer mu.Unlock()
		if st.Version < before {
			t.Errorf("%s: %s %s answered version %d, below %d of a deletion that returned before it started", who, what, st.Name, st.Version, before)
		}
		m := seen[st.Name]
		if m == nil {
			m = map[int64]string{}
			seen[st.Name] = m
		}
		d := describe(st)
		if prev, ok := m[st.Version]; ok && prev != d {
			t.Errorf("%s: %s %s at version %d is %s, another answer at that version was %s", who, what, st.Name, st.Version, d, prev)
		}
		m[st.Version] = d
	}
	rule := store.BreakerRule{Failures: 3, Window: 10 * time.Second, BreakDuration: 3 * time.Second}
	names := []string{"x", "y"}
	var wg sync.WaitGroup
	for i := range 6 {
		s := stores[i%len(stores)]
		p := fmt.Sprintf("p%d", i)
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(i), 31))
			for range 80 {
				if t.Failed() {
					return
				}
				name := names[r.IntN(len(names))]
				mu.Lock()
				before := floor[name]
				mu.Unlock()
				ts := now(r)
				var (
					st   store.BreakerState
					err  error
					what string
				)
				switch r.IntN(6) {
				case 0, 1:
					what = "report"
					st, err = s.ReportBreaker(ctx, store.BreakerReport{Name: name, Process: p, Now: ts, Failures: 1 + r.IntN(3), Requests: 4, Rule: rule})
				case 2:
					what = "claim"
					st, _, err = s.ClaimBreakerProbe(ctx, store.BreakerClaim{Name: name, Process: p, Now: ts, Until: ts.Add(2 * time.Second)})
				case 3:
					what = "settle"
					st, err = s.SettleBreakerProbe(ctx, store.BreakerSettle{Name: name, Process: p, Now: ts, OK: r.IntN(2) == 0, ReadyAt: ts.Add(3 * time.Second)})
				case 4:
					what = "set"
					state := store.BreakerOpen
					if r.IntN(2) == 0 {
						state = store.BreakerClosed
					}
					st, err = s.SetBreaker(ctx, store.BreakerSet{Name: name, State: state, By: p, Now: ts})
				default:
					what = "delete"
					st, err = s.DeleteBreaker(ctx, store.BreakerDelete{Name: name, Now: ts, Force: r.IntN(3) == 0})
					if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrConflict) {
						continue
					}
					if err == nil {
						record(p, what, before, st)
						mu.Lock()
						floor[name] = max(floor[name], st.Version+1)
						mu.Unlock()
						continue
					}
				}
				if err != nil {
					t.Errorf("%s: %s %s: %v", p, what, name, err)
					return
				}
				record(p, what, before, st)
			}
		})
	}
	wg.Wait()
}
