package redrive

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redrivehq/redrive/breaker"
	"github.com/redrivehq/redrive/internal/sqlitetest"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/sqlite"
)

// TestSharedDeletedForcedOpen: an operator forces a breaker open, then
// deletes it. The processes' breakers close at their next probe (a
// missing record reads closed above the deleted version: with versions
// restarting from 0 they stayed open for good, asking the store at every
// call), and neither their syncs nor that probe create the record again:
// only a failure (a use) does.
func TestSharedDeletedForcedOpen(t *testing.T) {
	var now atomic.Int64
	now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()).UTC() }
	reg, cs, f := sharedRegistry(t, breaker.Config{Failures: 1, CountOnly: true, BreakDuration: time.Minute, Now: clock})
	ctx := context.Background()
	br := reg.Get("dep")
	if _, err := cs.SetBreaker(ctx, store.BreakerSet{Name: "dep", State: store.BreakerOpen, Now: clock()}); err != nil {
		t.Fatal(err)
	}
	f.sync(ctx)
	if _, err := br.Allow(); !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("Allow on a breaker forced open: %v", err)
	}
	if _, err := cs.DeleteBreaker(ctx, store.BreakerDelete{Name: "dep", Now: clock()}); err != nil {
		t.Fatalf("delete of a breaker forced open: %v", err)
	}
	f.sync(ctx)
	now.Add(int64(time.Minute))
	tok, err := br.Allow()
	if err != nil {
		t.Fatalf("Allow after the break of a deleted breaker: %v, want it closed", err)
	}
	br.Record(tok, nil)
	if _, err := br.Allow(); err != nil || br.State() != breaker.Closed {
		t.Fatalf("breaker after its record was deleted: %v, %v", br.State(), err)
	}
	f.sync(ctx)
	if _, err := cs.Breaker(ctx, "dep"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the deleted record came back without a use: %v", err)
	}
	// Used again: a failure trips it (the rule is one failure), and the
	// record is back, open.
	tok, err = br.Allow()
	if err != nil {
		t.Fatal(err)
	}
	br.Record(tok, errors.New("boom"))
	if br.State() != breaker.Open {
		t.Fatalf("breaker after a failure used it again: %v, want open", br.State())
	}
	if st, err := cs.Breaker(ctx, "dep"); err != nil || st.State != store.BreakerOpen {
		t.Fatalf("record after a use: %+v, %v", st, err)
	}
}

// TestSharedDeletedRecreated: a process applied version N of a record;
// the record is deleted and created again by another process, which
// trips it. The first process's sync applies the trip: the new record's
// versions start above N (from 1 again, a process at N ignored every
// state up to N).
func TestSharedDeletedRecreated(t *testing.T) {
	st, err := sqlite.Open(context.Background(), sqlitetest.Path(t), sqlite.Options{Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	cfg := breaker.Config{Failures: 50, CountOnly: true, BreakDuration: time.Minute}
	var regs [2]*breaker.Registry
	var fs [2]*fleetBreakers
	for i := range regs {
		regs[i] = breaker.NewRegistry(cfg)
		fs[i] = newFleetBreakers(ctx, st, regs[i], []string{"a", "b"}[i], quietLog())
		regs[i].Share(fs[i])
		fs[i].sync(ctx)
	}
	a, b := regs[0].Get("dep"), regs[1].Get("dep")
	// a fails 10 times: the record reaches version 10, and a applied it.
	for range 10 {
		tok, err := a.Allow()
		if err != nil {
			t.Fatal(err)
		}
		a.Record(tok, errors.New("boom"))
	}
	old, err := st.Breaker(ctx, "dep")
	if err != nil || old.Version < 10 {
		t.Fatalf("record after 10 failures: %+v, %v", old, err)
	}
	if _, err := st.DeleteBreaker(ctx, store.BreakerDelete{Name: "dep", Now: time.Now(), Force: true}); err != nil {
		t.Fatal(err)
	}
	// b trips the new record (an operator's force-open stands for it).
	if _, err := st.SetBreaker(ctx, store.BreakerSet{Name: "dep", State: store.BreakerOpen, Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	fs[1].sync(ctx)
	fs[0].sync(ctx)
	if b.State() != breaker.Open {
		t.Fatalf("b after the re-created record opened: %v", b.State())
	}
	if a.State() != breaker.Open {
		t.Fatalf("a after the re-created record opened: %v, want open (a applied version %d of the old record)", a.State(), old.Version)
	}
}

// TestSharedDeletedRejoin: an operator forces a breaker open, the
// processes apply it, then the operator deletes it (deleting closes it).
// A process that lost the store for a moment before its next probe
// rejoins with its breaker still open by the fleet's deleted record: it
// must not hand that over as a trip of its own, re-creating the record
// open for the whole fleet against the operator's deletion. Only a
// breaker the process opened alone, while the store was out of reach, is
// the process's to hand over.
func TestSharedDeletedRejoin(t *testing.T) {
	var now atomic.Int64
	now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()).UTC() }
	reg, cs, f := sharedRegistry(t, breaker.Config{Failures: 1, CountOnly: true, BreakDuration: time.Minute, Now: clock})
	ctx := context.Background()
	br := reg.Get("dep")
	if _, err := cs.SetBreaker(ctx, store.BreakerSet{Name: "dep", State: store.BreakerOpen, Now: clock()}); err != nil {
		t.Fatal(err)
	}
	f.sync(ctx)
	if br.State() != breaker.Open {
		t.Fatalf("breaker forced open by the fleet: %v", br.State())
	}
	if _, err := cs.DeleteBreaker(ctx, store.BreakerDelete{Name: "dep", Now: clock()}); err != nil {
		t.Fatal(err)
	}
	// A store call failed: the process is offline, then the store answers.
	f.offline.Store(true)
	f.sync(ctx)
	if f.offline.Load() {
		t.Fatal("the process did not rejoin")
	}
	if st, err := cs.Breaker(ctx, "dep"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("after a rejoin, the deleted record is back: %s by %q, %v", st.State, st.OpenedBy, err)
	}
}
