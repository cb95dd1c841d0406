package store

import (
	"encoding/base64"
	"errors"
	"testing"
	"time"
)

func TestPageSize(t *testing.T) {
	for limit, want := range map[int]int{-5: DefaultPageSize, 0: DefaultPageSize, 1: 1, 999: 999, MaxPageSize: MaxPageSize, MaxPageSize + 1: MaxPageSize} {
		if got := (Page{Limit: limit}).Size(); got != want {
			t.Errorf("Page{Limit: %d}.Size() = %d, want %d", limit, got, want)
		}
	}
}

func TestFilterDeadSelection(t *testing.T) {
	cases := []struct {
		states         []State
		selects, dOnly bool
	}{
		{nil, true, false},
		{[]State{Dead}, true, true},
		{[]State{Pending, Dead}, true, false},
		{[]State{Completed, Canceled}, false, false},
	}
	for _, c := range cases {
		f := Filter{States: c.states}
		if f.SelectsDead() != c.selects || f.DeadOnly() != c.dOnly {
			t.Errorf("%v: SelectsDead %v DeadOnly %v, want %v %v", c.states, f.SelectsDead(), f.DeadOnly(), c.selects, c.dOnly)
		}
	}
}

func TestCursorRoundTrip(t *testing.T) {
	dead := time.UnixMicro(1767323045678901)
	j := &Job{ID: 42, DeadAt: &dead}
	at, id, err := DecodeCursor(EncodeCursor(j, true), true)
	if err != nil || at != dead.UnixMicro() || id != 42 {
		t.Fatalf("dead cursor: %d %d %v", at, id, err)
	}
	at, id, err = DecodeCursor(EncodeCursor(j, false), false)
	if err != nil || at != 0 || id != 42 {
		t.Fatalf("id cursor: %d %d %v", at, id, err)
	}
	// A cursor of one kind of listing is refused by the other.
	if _, _, err := DecodeCursor(EncodeCursor(j, true), false); !errors.Is(err, ErrInvalid) {
		t.Fatalf("dead cursor in an id listing: %v", err)
	}
	enc := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	for _, c := range []string{"", "!!!", "MTIz.YQ", "YQ", enc("-1"), enc("+5"), enc("007")} {
		if _, _, err := DecodeCursor(c, false); !errors.Is(err, ErrInvalid) {
			t.Errorf("DecodeCursor(%q): %v, want ErrInvalid", c, err)
		}
	}
	for _, c := range []string{enc("-1.5"), enc("5.-1"), enc("01.5")} {
		if _, _, err := DecodeCursor(c, true); !errors.Is(err, ErrInvalid) {
			t.Errorf("DecodeCursor(%q) of a dead listing: %v, want ErrInvalid", c, err)
		}
	}
}

func FuzzDecodeCursor(f *testing.F) {
	f.Add("NDI", false)
	f.Add("MTc2NzMyMzA0NTY3ODkwMS40Mg", true)
	f.Add("", true)
	f.Fuzz(func(t *testing.T, c string, dead bool) {
		at, id, err := DecodeCursor(c, dead)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		if !dead && at != 0 {
			t.Fatalf("id cursor %q decoded a dead_at %d", c, at)
		}
		// What is accepted is exactly what EncodeCursor writes.
		j := &Job{ID: id}
		if dead {
			d := time.UnixMicro(at)
			j.DeadAt = &d
		}
		if got := EncodeCursor(j, dead); got != c {
			t.Fatalf("cursor %q decoded to %d %d, which encode as %q", c, at, id, got)
		}
	})
}

func TestPageResult(t *testing.T) {
	jobs := func(n int) []*Job {
		var js []*Job
		for i := range n {
			js = append(js, &Job{ID: int64(100 - i)})
		}
		return js
	}
	p := Page{Limit: 3}
	if r := p.Result(nil, false); r.Jobs == nil || len(r.Jobs) != 0 || r.Next != "" {
		t.Errorf("no jobs: %+v, want an empty, non-nil page without a next cursor", r)
	}
	if r := p.Result(jobs(3), false); len(r.Jobs) != 3 || r.Next != "" {
		t.Errorf("exactly a page: %d jobs, next %q; want 3 and none", len(r.Jobs), r.Next)
	}
	r := p.Result(jobs(4), false)
	if len(r.Jobs) != 3 || r.Next != EncodeCursor(r.Jobs[2], false) {
		t.Errorf("one job more than a page: %d jobs, next %q; want 3 and the cursor after job %d", len(r.Jobs), r.Next, r.Jobs[2].ID)
	}
}
