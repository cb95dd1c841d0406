package kafka

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
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

// TestRecordCounterStaleOffsets: an update given offsets older than
// what the counter read (two counts race: each lists the offsets, then
// waits for the counter; the one that listed first updates last) keeps
// what the counter knows, and reads nothing: the offsets went back
// because the snapshot is older, not because the topic is new. (It
// forgot all and read the partition again from its start: a full read of
// a large DLT whenever a dashboard and a scrape count at once.)
func TestRecordCounterStaleOffsets(t *testing.T) {
	id := kadm.TopicID{1}
	rc := &recordCounter{topic: "t", id: id, parts: map[int32]*partRecords{
		0: {from: 10, to: 100, runs: []offRange{{10, 40}, {41, 99}}},
	}}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // no read may happen: there is no broker
	for _, s := range []struct{ start, end int64 }{{10, 50}, {5, 100}, {0, 0}} {
		if err := rc.update(ctx, id, map[int32]int64{0: s.start}, map[int32]int64{0: s.end}); err != nil {
			t.Errorf("update with the older offsets [%d, %d): %v", s.start, s.end, err)
		}
		if got := rc.count(0, s.start, s.end); got != min(max(s.end, 10), 40)-10+max(min(s.end, 99)-41, 0) {
			t.Errorf("count [%d, %d) after an update with them: %d", s.start, s.end, got)
		}
		if pr := rc.parts[0]; pr.from != 10 || pr.to != 100 || len(pr.runs) != 2 {
			t.Errorf("after an update with the older offsets [%d, %d): %+v, want what was read kept", s.start, s.end, pr)
		}
	}
}
