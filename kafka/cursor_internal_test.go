package kafka

import (
	"math/rand/v2"
	"testing"
)

// TestCursorModel: random settles, in random order and overlapping, each
// checked against a model (the set of settled offsets): what is settled,
// how many are pending, and that the cursor survives its metadata.
func TestCursorModel(t *testing.T) {
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 1))
		const span = 200
		start := rng.Int64N(5)
		c := cursor{at: start}
		model := map[int64]bool{}
		for o := range start {
			model[o] = true
		}
		for step := range 40 {
			from := rng.Int64N(span)
			to := from + rng.Int64N(12)
			c.settle(from, to)
			for o := from; o < to; o++ {
				model[o] = true
			}
			at := int64(0)
			for model[at] {
				at++
			}
			if c.at != at {
				t.Fatalf("seed %d step %d: cursor at %d, want %d (%+v)", seed, step, c.at, at, c)
			}
			var pending int64
			for o := range int64(span + 20) {
				if c.settled(o) != model[o] {
					t.Fatalf("seed %d step %d: settled(%d) = %v, want %v (%+v)", seed, step, o, c.settled(o), model[o], c)
				}
				if !model[o] && o >= at && o < span {
					pending++
				}
			}
			every := &recordCounter{parts: map[int32]*partRecords{0: {to: span, runs: []offRange{{0, span}}}}}
			if got := every.pending(0, c, span); got != pending {
				t.Fatalf("seed %d step %d: pending %d, want %d (%+v)", seed, step, got, pending, c)
			}
			for i, r := range c.done {
				if r.from <= c.at || r.to <= r.from || (i > 0 && r.from <= c.done[i-1].to) {
					t.Fatalf("seed %d step %d: ranges not sorted, disjoint, apart and above the offset: %+v", seed, step, c)
				}
			}
			if len(c.done) <= maxCursorRanges {
				back, err := parseCursor(c.at, c.metadata())
				if err != nil || back.at != c.at || len(back.done) != len(c.done) {
					t.Fatalf("seed %d step %d: %+v came back from %q as %+v %v", seed, step, c, c.metadata(), back, err)
				}
				for i := range back.done {
					if back.done[i] != c.done[i] {
						t.Fatalf("seed %d step %d: %+v came back as %+v", seed, step, c, back)
					}
				}
			}
		}
	}
}

// FuzzParseCursor: any metadata either is refused or gives a cursor
// whose ranges keep the invariants and that reads back the same from its
// own encoding.
func FuzzParseCursor(f *testing.F) {
	f.Add(int64(0), "")
	f.Add(int64(3), "redrive.v1:5-7,9-10")
	f.Add(int64(3), "redrive.v1:3-7")
	f.Add(int64(0), "other metadata")
	f.Add(int64(0), "redrive.v1:1-2,2-3")
	f.Fuzz(func(t *testing.T, at int64, md string) {
		c, err := parseCursor(at, md)
		if err != nil {
			return
		}
		for i, r := range c.done {
			if r.from <= c.at || r.to <= r.from || (i > 0 && r.from <= c.done[i-1].to) {
				t.Fatalf("%d %q: ranges break the invariants: %+v", at, md, c)
			}
		}
		back, err := parseCursor(c.at, c.metadata())
		if err != nil || len(back.done) != len(c.done) {
			t.Fatalf("%d %q: %+v reads back from %q as %+v %v", at, md, c, c.metadata(), back, err)
		}
		for i := range back.done {
			if back.done[i] != c.done[i] {
				t.Fatalf("%d %q: %+v reads back as %+v", at, md, c, back)
			}
		}
	})
}
