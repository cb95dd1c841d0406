package breaker

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestRegistrySameBreaker(t *testing.T) {
	r := NewRegistry(Config{Failures: 2})
	a, b := r.Get("payments"), r.Get("payments")
	if a != b {
		t.Fatal("Get returned two breakers for one name")
	}
	if a.Name() != "payments" {
		t.Fatalf("Name() = %q", a.Name())
	}
	if r.Get("search") == a {
		t.Fatal("two names share a breaker")
	}
	// The registry's defaults apply.
	call(a, errBoom)
	call(a, errBoom)
	mustState(t, a, Open)
}

func TestRegistryConcurrentGetCreatesOne(t *testing.T) {
	// New reads the clock exactly once, to start the breaker's relative
	// clock, and nothing else on a closed count-only breaker does:
	// counting clock reads counts breakers created.
	var created atomic.Int64
	r := NewRegistry(Config{CountOnly: true, Now: func() time.Time { created.Add(1); return t0 }})
	const n = 64
	got := make([]*Breaker, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			got[i] = r.Get("db")
			tok, _ := got[i].Allow()
			got[i].Record(tok, nil)
		})
	}
	close(start)
	wg.Wait()
	for i := range got {
		if got[i] != got[0] {
			t.Fatalf("goroutine %d got a different breaker", i)
		}
	}
	if c := created.Load(); c != 1 {
		t.Fatalf("%d breakers created, want 1", c)
	}
	if len(r.Statuses()) != 1 {
		t.Fatalf("statuses = %v", r.Statuses())
	}
}

func TestRegistryStatusesSorted(t *testing.T) {
	var r Registry // the zero Registry works
	for _, name := range []string{"search", "auth", "payments", "blob", "auth"} {
		r.Get(name)
	}
	var names []string
	for _, st := range r.Statuses() {
		names = append(names, st.Name)
		if st.State != Closed {
			t.Fatalf("%s: state %v", st.Name, st.State)
		}
	}
	if got := fmt.Sprint(names); got != "[auth blob payments search]" {
		t.Fatalf("names = %s", got)
	}
	if len((&Registry{}).Statuses()) != 0 {
		t.Fatal("an empty registry has statuses")
	}
}

func TestRegistryConfigureAndLookup(t *testing.T) {
	var changes []string
	clk := &fakeClock{}
	r := NewRegistry(Config{
		Now: clk.Now,
		OnStateChange: func(name string, from, to State) {
			changes = append(changes, name+":"+to.String())
		},
	})
	if _, ok := r.Lookup("search"); ok {
		t.Fatal("Lookup found a breaker never created")
	}
	old := r.Get("search")
	b := r.Configure("search", Config{Failures: 1, BreakDuration: time.Second})
	if b == old || r.Get("search") != b {
		t.Fatal("Configure did not replace the breaker")
	}
	if got, ok := r.Lookup("search"); !ok || got != b {
		t.Fatal("Lookup does not return the configured breaker")
	}
	call(b, errBoom)
	mustState(t, b, Open)
	// Clock and hook are inherited from the registry.
	if want := t0.Add(time.Second); !b.ReadyAt().Equal(want) {
		t.Fatalf("ReadyAt = %v, want %v (registry clock)", b.ReadyAt(), want)
	}
	if fmt.Sprint(changes) != "[search:open]" {
		t.Fatalf("changes = %v", changes)
	}
	if len(r.Statuses()) != 1 {
		t.Fatal("Configure left two breakers under one name")
	}
}
