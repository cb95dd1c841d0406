package postgres_test

import (
	"testing"
	"time"

	"github.com/redrivehq/redrive/store/postgres"
)

// TestSlotPrune: the slot a holder killed while holding it (never
// released, its key never taken again) is deleted by a later take of
// another group, every slotPruneEvery takes, once its lease has ended;
// a slot still leased stays.
func TestSlotPrune(t *testing.T) {
	defer postgres.SetSlotPruneEvery(3)()
	s := openFresh(t)
	ctx := t.Context()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	take := func(key string, now, until time.Time) {
		t.Helper()
		if tok, err := s.TakeLimitSlot(ctx, "l", key, 5, "p", now, until); err != nil || tok == 0 {
			t.Fatalf("take %s: %d %v", key, tok, err)
		}
	}
	count := func(key string) (n int) {
		t.Helper()
		if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM `+s.Schema()+`.limit_slots WHERE key = $1`, key).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	take("killed", t0, t0.Add(time.Second))
	take("held", t0, t0.Add(time.Hour))
	later := t0.Add(time.Minute)
	for range 3 {
		take("other", later, later.Add(time.Second))
	}
	if n := count("killed"); n != 0 {
		t.Errorf("the killed holder's ended slot: %d rows, want it pruned", n)
	}
	if n := count("held"); n != 1 {
		t.Errorf("the slot still leased: %d rows, want it kept", n)
	}
}
