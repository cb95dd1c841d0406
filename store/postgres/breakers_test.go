package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/redrivehq/redrive/store"
)

// TestListenBreakers: every change of a shared breaker's state is announced
// to the listeners of the store's breaker channel; a report that only adds
// counts is not.
func TestListenBreakers(t *testing.T) {
	s := openFresh(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	got := make(chan string, 16)
	done := make(chan error, 1)
	go func() { done <- s.ListenBreakers(ctx, func(name string) { got <- name }) }()
	next := func(what string) string {
		t.Helper()
		select {
		case n := <-got:
			return n
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no notification", what)
			return ""
		}
	}
	if n := next("connect"); n != "" {
		t.Fatalf("first notification %q, want \"\" (connected)", n)
	}
	now := time.Now()
	rule := store.BreakerRule{Failures: 2, Window: time.Minute, BreakDuration: time.Minute}
	if _, err := s.ReportBreaker(ctx, store.BreakerReport{Name: "quiet", Process: "p", Now: now, Failures: 1, Rule: rule}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReportBreaker(ctx, store.BreakerReport{Name: "dep", Process: "p", Now: now, Failures: 2, Rule: rule}); err != nil {
		t.Fatal(err)
	}
	if n := next("trip"); n != "dep" {
		t.Fatalf("notification %q, want dep (the count-only report of quiet announces nothing)", n)
	}
	if _, err := s.SetBreaker(ctx, store.BreakerSet{Name: "dep", State: store.BreakerClosed, Now: now}); err != nil {
		t.Fatal(err)
	}
	if n := next("close"); n != "dep" {
		t.Fatalf("notification %q, want dep", n)
	}
	cancel()
	if err := <-done; err != context.Canceled {
		t.Fatalf("ListenBreakers after cancel: %v", err)
	}
	select {
	case n := <-got:
		t.Fatalf("unexpected notification %q", n)
	default:
	}
}
