package store_test

import (
	"maps"
	"math/rand/v2"
	"testing"

	"github.com/redrivehq/redrive/store"
)

// TestFairRoundModel runs FairRound against an in-memory set of keys with
// due jobs (and keys with waiting jobs none of which is due), over random
// runs of fetches of random sizes and weights: a fetch never takes more
// than a key has or than it wants, takes what it wants when that many are
// due, and in any run of fetches the keys that still have due jobs at its
// end got starts within two rounds of their weights of each other.
func TestFairRoundModel(t *testing.T) {
	for seed := range uint64(3000) {
		rng := rand.New(rand.NewPCG(seed, 28))
		nkeys := 1 + rng.IntN(8)
		keys := make([]string, nkeys)
		due := map[string]int{}
		weights := map[string]int{}
		for i := range keys {
			keys[i] = string(rune('a' + i))
			due[keys[i]] = rng.IntN(30) // 0: a key whose jobs are all due later
			if rng.IntN(3) == 0 {
				weights[keys[i]] = 1 + rng.IntN(4)
			}
		}
		w := func(k string) int {
			if v, ok := weights[k]; ok {
				return v
			}
			return 1
		}
		next := func(after string, first bool) (string, bool, error) {
			for _, k := range keys {
				if first || k > after {
					return k, true, nil
				}
			}
			return "", false, nil
		}
		starts := map[string]int{}
		take := func(k string, n int) (int, error) {
			if n < 1 {
				t.Fatalf("seed %d: take(%q, %d)", seed, k, n)
			}
			got := min(n, due[k])
			due[k] -= got
			starts[k] += got
			return got, nil
		}
		var cur store.FairCursor
		for range 1 + rng.IntN(10) {
			total := 0
			for _, n := range due {
				total += n
			}
			want := 1 + rng.IntN(12)
			before := maps.Clone(starts)
			c, got, err := store.FairRound(cur, weights, want, next, take)
			if err != nil {
				t.Fatal(err)
			}
			cur = c
			sum := 0
			for k, n := range starts {
				sum += n - before[k]
			}
			if got != sum || got > want || got < min(want, total) {
				t.Fatalf("seed %d: FairRound(want %d) = %d (took %d), with %d due", seed, want, got, sum, total)
			}
		}
		var left []string
		for _, k := range keys {
			if due[k] > 0 {
				left = append(left, k)
			}
		}
		for _, a := range left {
			for _, b := range left {
				if ra, rb := float64(starts[a])/float64(w(a)), float64(starts[b])/float64(w(b)); ra-rb > 2 {
					t.Fatalf("seed %d: key %s started %d (weight %d), key %s %d (weight %d), both with due jobs left; starts %v, weights %v",
						seed, a, starts[a], w(a), b, starts[b], w(b), starts, weights)
				}
			}
		}
	}
}
