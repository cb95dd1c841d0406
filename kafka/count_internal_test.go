package kafka

import (
	"math/rand/v2"
	"testing"
)

// TestRecordCounterModel: random partitions of records, transaction
// markers and aborted records, read in random slices as updates read
// them, the start moving as retention removes offsets, and random
// cursors: every count of a range, and every pending count, against a
// model (the set of offsets that hold records).
func TestRecordCounterModel(t *testing.T) {
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 2))
		const span = 300
		isRecord := make([]bool, span)
		for o := range isRecord {
			isRecord[o] = rng.IntN(3) > 0
		}
		rc := &recordCounter{parts: map[int32]*partRecords{}}
		pr := &partRecords{}
		rc.parts[0] = pr
		start := int64(0)
		for pr.to < span {
			// An update: retention may have moved the start; then the
			// offsets up to a new end are read.
			if rng.IntN(4) == 0 {
				start = min(start+rng.Int64N(20), pr.to)
				pr.trim(start)
			}
			end := min(pr.to+1+rng.Int64N(40), span)
			for o := pr.to; o < end; o++ {
				if isRecord[o] {
					pr.add(o)
				}
			}
			pr.to = end
			for i, r := range pr.runs {
				if r.from < start || r.to <= r.from || (i > 0 && r.from <= pr.runs[i-1].to) {
					t.Fatalf("seed %d: runs not sorted, disjoint, apart and above the start %d: %+v", seed, start, pr.runs)
				}
			}
			for range 20 {
				from := start + rng.Int64N(pr.to-start+1)
				to := from + rng.Int64N(pr.to-from+1)
				var want int64
				for o := from; o < to; o++ {
					if isRecord[o] {
						want++
					}
				}
				if got := rc.count(0, from, to); got != want {
					t.Fatalf("seed %d: count [%d, %d) = %d, want %d (runs %+v)", seed, from, to, got, want, pr.runs)
				}
			}
			// A cursor: its offset, and settled ranges above it.
			c := cursor{at: start + rng.Int64N(pr.to-start+1)}
			for range rng.IntN(5) {
				f := c.at + 1 + rng.Int64N(pr.to-c.at+1)
				c.settle(f, f+rng.Int64N(10))
			}
			var want int64
			for o := c.at; o < pr.to; o++ {
				if isRecord[o] && !c.settled(o) {
					want++
				}
			}
			if got := rc.pending(0, c, pr.to); got != want {
				t.Fatalf("seed %d: pending after %+v = %d, want %d", seed, c, got, want)
			}
		}
	}
}
