package store_test

import (
	"maps"
	"math/rand/v2"
	"slices"
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

// TestFairRoundKeysAppear is TestFairRoundModel with keys that appear
// while a fetch runs, as on PostgreSQL, whose fair fetch reads each key
// in a statement of its own (read committed) and so sees a key enqueued
// by another process between two of them: the keys that had due jobs
// from the start to the end still keep within the bound of each other.
func TestFairRoundKeysAppear(t *testing.T) {
	for seed := range uint64(3000) {
		rng := rand.New(rand.NewPCG(seed, 29))
		var keys []string // sorted, as the index reads them
		due := map[string]int{}
		weights := map[string]int{}
		addKey := func(k string, n int) {
			if _, ok := due[k]; ok {
				return
			}
			keys = append(keys, k)
			slices.Sort(keys)
			due[k] = n
			if rng.IntN(3) == 0 {
				weights[k] = 1 + rng.IntN(4)
			}
		}
		for range 2 + rng.IntN(4) {
			addKey(string(rune('a'+rng.IntN(26))), 1000)
		}
		steady := slices.Clone(keys)
		w := func(k string) int {
			if v, ok := weights[k]; ok {
				return v
			}
			return 1
		}
		next := func(after string, first bool) (string, bool, error) {
			for _, k := range keys {
				if due[k] > 0 && (first || k > after) {
					return k, true, nil
				}
			}
			return "", false, nil
		}
		starts := map[string]int{}
		take := func(k string, n int) (int, error) {
			got := min(n, due[k])
			due[k] -= got
			starts[k] += got
			if rng.IntN(8) == 0 { // another process enqueues a new key's jobs
				addKey(string(rune('a'+rng.IntN(26)))+"x", 1+rng.IntN(5))
			}
			return got, nil
		}
		var cur store.FairCursor
		for range 1 + rng.IntN(6) {
			want := 1 + rng.IntN(200)
			c, _, err := store.FairRound(cur, weights, want, next, take)
			if err != nil {
				t.Fatal(err)
			}
			cur = c
		}
		for _, a := range steady {
			for _, b := range steady {
				if due[a] == 0 || due[b] == 0 {
					continue
				}
				if ra, rb := float64(starts[a])/float64(w(a)), float64(starts[b])/float64(w(b)); ra-rb > 2 {
					t.Fatalf("seed %d: key %s started %d (weight %d), key %s %d (weight %d), both with due jobs throughout; starts %v, weights %v",
						seed, a, starts[a], w(a), b, starts[b], w(b), starts, weights)
				}
			}
		}
	}
}

// TestFairRoundTurnStartLeaves: a fetch whose turn started at a key that
// then ran out of due jobs, with no key after it in key order, still sees
// where the next turn starts, so its keys with a backlog take the same
// shares: here a (weight 1) and b (weight 1), with c holding two jobs and
// the previous fetch stopped at b.
func TestFairRoundTurnStartLeaves(t *testing.T) {
	due := map[string]int{"a": 1000, "b": 1000, "c": 2}
	keys := []string{"a", "b", "c"}
	next := func(after string, first bool) (string, bool, error) {
		for _, k := range keys {
			if due[k] > 0 && (first || k > after) {
				return k, true, nil
			}
		}
		return "", false, nil
	}
	starts := map[string]int{}
	take := func(k string, n int) (int, error) {
		got := min(n, due[k])
		due[k] -= got
		starts[k] += got
		return got, nil
	}
	cur := store.FairCursor{Key: "b", Used: 1, Set: true}
	for range 3 {
		c, _, err := store.FairRound(cur, nil, 50, next, take)
		if err != nil {
			t.Fatal(err)
		}
		cur = c
	}
	if d := starts["a"] - starts["b"]; d > 2 || d < -2 {
		t.Fatalf("a started %d, b %d: more than two rounds apart (starts %v)", starts["a"], starts["b"], starts)
	}
}

// TestFairLevelUnkeyed is TestFairRoundModel for a priority that also has
// due jobs without a fair key (store.FairUnkeyed): they take turns as one
// more key of weight 1 after every key, whatever the weights say, and
// keep within the bound of the keys; the store's next function never
// sees FairUnkeyed; a cursor left at FairUnkeyed goes on at the first key
// once the priority has no jobs without a key.
func TestFairLevelUnkeyed(t *testing.T) {
	for seed := range uint64(3000) {
		rng := rand.New(rand.NewPCG(seed, 30))
		nkeys := rng.IntN(6) // 0: only jobs without a key
		keys := make([]string, nkeys)
		due := map[string]int{store.FairUnkeyed: rng.IntN(40)}
		weights := map[string]int{store.FairUnkeyed: 50} // ignored
		for i := range keys {
			keys[i] = string(rune('a' + i))
			due[keys[i]] = rng.IntN(30)
			if rng.IntN(3) == 0 {
				weights[keys[i]] = 1 + rng.IntN(4)
			}
		}
		w := func(k string) int {
			if v, ok := weights[k]; ok && k != store.FairUnkeyed {
				return v
			}
			return 1
		}
		next := func(after string, first bool) (string, bool, error) {
			if !first && after == store.FairUnkeyed {
				t.Fatalf("seed %d: next asked for the key after FairUnkeyed", seed)
			}
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
			c, got, err := store.FairLevel(cur, weights, want, due[store.FairUnkeyed] > 0, next, take)
			if err != nil {
				t.Fatal(err)
			}
			cur = c
			if got > want || got < min(want, total) {
				t.Fatalf("seed %d: FairLevel(want %d) = %d, with %d due", seed, want, got, total)
			}
		}
		var left []string
		for k, n := range due {
			if n > 0 {
				left = append(left, k)
			}
		}
		for _, a := range left {
			for _, b := range left {
				if ra, rb := float64(starts[a])/float64(w(a)), float64(starts[b])/float64(w(b)); ra-rb > 2 {
					t.Fatalf("seed %d: key %q started %d (weight %d), key %q %d (weight %d), both with due jobs left; starts %v, weights %v",
						seed, a, starts[a], w(a), b, starts[b], w(b), starts, weights)
				}
			}
		}
	}
	// A cursor left at FairUnkeyed, the priority's jobs without a key all
	// gone: the walk goes on at the first key.
	var took []string
	_, _, err := store.FairLevel(store.FairCursor{Key: store.FairUnkeyed, Used: 1, Set: true}, nil, 2, false,
		func(after string, first bool) (string, bool, error) {
			if first {
				return "a", true, nil
			}
			if after == "a" {
				return "b", true, nil
			}
			return "", false, nil
		},
		func(k string, n int) (int, error) { took = append(took, k); return 1, nil })
	if err != nil || !slices.Equal(took, []string{"a", "b"}) {
		t.Errorf("from a cursor at FairUnkeyed without unkeyed jobs, took %v, %v; want [a b]", took, err)
	}
}

// TestFairCursorsStage: a staged cursor is what Get returns, and becomes
// the cursor with Commit; Discard drops it and Get returns the one before.
func TestFairCursorsStage(t *testing.T) {
	var c store.FairCursors
	a := store.FairCursor{Key: "a", Used: 1, Set: true}
	b := store.FairCursor{Key: "b", Used: 1, Set: true}
	c.Put("q", 0, a)
	c.Stage("q", 0, b)
	if got := c.Get("q", 0); got != b {
		t.Fatalf("Get after Stage = %v, want %v", got, b)
	}
	c.Discard()
	if got := c.Get("q", 0); got != a {
		t.Fatalf("Get after Discard = %v, want %v", got, a)
	}
	c.Stage("q", 0, b)
	c.Commit()
	c.Discard()
	if got := c.Get("q", 0); got != b {
		t.Fatalf("Get after Commit = %v, want %v", got, b)
	}
}
