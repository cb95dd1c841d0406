package postgres_test

import (
	"context"
	"testing"
	"time"
)

// TestElectHandsOver: of two stores on one schema exactly one leads; when
// the leader's store closes (its connection, and so its advisory lock, go
// away), the other takes the role over.
func TestElectHandsOver(t *testing.T) {
	schema := newSchema(t)
	a, b := open(t, schema), open(t, schema)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	leadA, err := a.Elect(ctx, "maintenance")
	if err != nil {
		t.Fatal(err)
	}
	leadB, err := b.Elect(ctx, "maintenance")
	if err != nil {
		t.Fatal(err)
	}
	// Liveness bounds, not timing claims: an election round is ~2s.
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 15s", what)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitFor("one leader", func() bool { return leadA() || leadB() })
	for range 50 { // never two at once
		if leadA() && leadB() {
			t.Fatal("both stores lead at once")
		}
		time.Sleep(10 * time.Millisecond)
	}
	leader, survivor, leading, other := a, b, leadA, leadB
	if leadB() {
		leader, survivor, leading, other = b, a, leadB, leadA
	}
	leader.Close()
	waitFor("the old leader steps down", func() bool { return !leading() })
	waitFor("the other store takes over", other)
	// A different role is elected independently of the first.
	leadOther, err := survivor.Elect(ctx, "another-role")
	if err != nil {
		t.Fatal(err)
	}
	waitFor("a second role is elected independently", leadOther)
	if !other() {
		t.Fatal("electing a second role cost the first")
	}
}
