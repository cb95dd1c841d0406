package storetest

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/redrivehq/redrive/store"
)

// fairOrderKeys sort differently by bytes than under a linguistic
// collation (en_US, ICU en-US: "a-b" "a_b" "ab" "aB" "B" "e" "é"), which
// ignores or demotes case and punctuation.
var fairOrderKeys = []string{"a-b", "a_b", "aB", "ab", "B", "é", "e", ""}

// testFairKeyOrder: fair keys are ordered by their bytes, whatever the
// database's collation: keys leased one at a time go round in byte
// order, every key once a round, and a batch of three rounds gives every
// key three jobs (a store that orders keys one way and counts turns
// another gives some keys more).
func testFairKeyOrder(x *h) { fairKeyOrder(x) }

// FairKeyOrder runs the conformance subtest FairKeyOrder on s (for a
// store on a database of another collation).
func FairKeyOrder(t *testing.T, s store.Store) {
	fairKeyOrder(&h{t: t, s: s, ctx: t.Context()})
}

func fairKeyOrder(x *h) {
	now := at(0)
	byBytes := slices.Clone(fairOrderKeys)
	slices.Sort(byBytes) // Go compares strings by bytes
	// ko2 has no empty key, which would come first in either order: a
	// batch's round robin starts at "a_b" under ICU en-US, and a turn
	// told by comparing keys' bytes then gives "a-b" and "a_b" a third
	// of the batch each.
	batchKeys := slices.DeleteFunc(slices.Clone(byBytes), func(k string) bool { return k == "" })
	for queue, keys := range map[string][]string{"ko1": fairOrderKeys, "ko2": batchKeys} {
		var nj []store.NewJob
		for range 4 {
			for _, k := range keys {
				nj = append(nj, fairJob(queue, k, now, 0))
			}
		}
		x.enqueue(now, nj...)
	}
	got := x.fairKeys("ko1", now, 2*len(byBytes), map[string]int{})
	if want := append(slices.Clone(byBytes), byBytes...); !slices.Equal(got, want) {
		x.t.Errorf("keys leased one at a time = %q, want %q (byte order, every key once a round)", got, want)
	}
	batch := x.fetch(store.FetchParams{Queue: "ko2", Limit: 3 * len(batchKeys), Now: now, LeaseUntil: now.Add(time.Minute), Worker: "w",
		FairWeights: map[string]int{}})
	count := map[string]int{}
	for _, j := range batch {
		count[tenantOf(j)]++
	}
	for _, k := range batchKeys {
		if count[k] != 3 {
			x.t.Errorf("a batch of three rounds of %d keys leased %v, want 3 of each", len(batchKeys), count)
			break
		}
	}
}

// testFairLevelModel runs random sequential fetches of a fair queue
// (fair keys, weights, priorities, jobs without a fair key, jobs due
// later, batches of every size) against a model that runs
// store.FairLevel over the model's jobs, as a store that walks the keys
// one statement at a time does, and checks that the store leases exactly
// the jobs the model does, fetch after fetch: a store that runs the
// round robin in the database (PostgreSQL's job_fair_fetch) is checked
// against store.FairRound itself.
func testFairLevelModel(x *h) {
	seed := rand.Uint64()
	x.t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 28))
	keys := []string{"a-b", "a_b", "aB", "ab", "B", "é", "e", "k", "z"}
	type mjob struct {
		id     int64
		key    string // store.FairUnkeyed: no fair key
		prio   int
		runAt  time.Time
		leased bool
	}
	var model []*mjob
	var cursors store.FairCursors
	now := at(0)
	due := func(m *mjob, dueBy time.Time) bool { return !m.leased && !m.runAt.After(dueBy) }
	// fetch is the model's fetch of want jobs: fairFetch of the stores.
	fetch := func(want int, weights map[string]int) []int64 {
		var out []int64
		levels := map[int]bool{}  // priorities with waiting fair jobs
		unkeyed := map[int]bool{} // priorities with due jobs without a fair key
		for _, m := range model {
			switch {
			case m.leased:
			case m.key != store.FairUnkeyed:
				levels[m.prio] = true
			case due(m, now):
				unkeyed[m.prio] = true
			}
		}
		prios := map[int]bool{}
		for p := range levels {
			prios[p] = true
		}
		for p := range unkeyed {
			prios[p] = true
		}
		order := make([]int, 0, len(prios))
		for p := range prios {
			order = append(order, p)
		}
		slices.SortFunc(order, func(a, b int) int { return cmp.Compare(b, a) })
		take := func(prio int, key string, n int) int {
			var c []*mjob
			for _, m := range model {
				if m.prio == prio && m.key == key && due(m, now) {
					c = append(c, m)
				}
			}
			slices.SortFunc(c, func(a, b *mjob) int {
				if r := a.runAt.Compare(b.runAt); r != 0 {
					return r
				}
				return cmp.Compare(a.id, b.id)
			})
			c = c[:min(n, len(c))]
			for _, m := range c {
				m.leased = true
				out = append(out, m.id)
			}
			return len(c)
		}
		for _, prio := range order {
			if len(out) >= want {
				break
			}
			if !levels[prio] {
				take(prio, store.FairUnkeyed, want-len(out))
				continue
			}
			next := func(after string, first bool) (string, bool, error) {
				best, ok := "", false
				for _, m := range model {
					if m.leased || m.prio != prio || m.key == store.FairUnkeyed || (!first && m.key <= after) {
						continue
					}
					if !ok || m.key < best {
						best, ok = m.key, true
					}
				}
				return best, ok, nil
			}
			cur, _, _ := store.FairLevel(cursors.Get("lm", int64(prio)), weights, want-len(out), unkeyed[prio], next,
				func(key string, n int) (int, error) { return take(prio, key, n), nil })
			cursors.Put("lm", int64(prio), cur)
		}
		slices.Sort(out)
		return out
	}
	weightSets := []map[string]int{{}, {"a-b": 3, "é": 2}, {"B": 2, "ab": 4, "z": 1}}
	for step := range 60 {
		var nj []store.NewJob
		for range rng.IntN(12) {
			prio := []int{0, 0, 0, 1, -1}[rng.IntN(5)]
			runAt := now.Add(time.Duration(rng.IntN(8)-5) * time.Second)
			if rng.IntN(6) == 0 {
				nj = append(nj, plainJob("lm", "(none)", runAt, prio))
				continue
			}
			k := keys[rng.IntN(len(keys))]
			if rng.IntN(3) == 0 {
				k = keys[0] // a key with a backlog
			}
			nj = append(nj, fairJob("lm", k, runAt, prio))
		}
		if len(nj) > 0 {
			for i, j := range x.enqueue(now, nj...) {
				key := nj[i].FairKey
				if !nj[i].Fair {
					key = store.FairUnkeyed
				}
				model = append(model, &mjob{id: j.ID, key: key, prio: j.Priority, runAt: j.RunAt})
			}
		}
		now = now.Add(time.Duration(rng.IntN(3)) * time.Second)
		// The weights of a run of fetches: a fetch that stops in the
		// middle of a key's weight leaves the rest to the next.
		weights := weightSets[rng.IntN(len(weightSets))]
		for range 1 + rng.IntN(4) {
			want := 1 + rng.IntN(12)
			got := x.fetch(store.FetchParams{Queue: "lm", Limit: want, Now: now, LeaseUntil: now.Add(time.Hour), Worker: "w", FairWeights: weights})
			ids := jobIDs(got)
			slices.Sort(ids)
			if exp := fetch(want, weights); !slices.Equal(ids, exp) {
				x.t.Fatalf("step %d: a fetch of %d with weights %v leased %v, the model %v", step, want, weights, ids, exp)
			}
		}
	}
}
