package storetest

import (
	"math/rand/v2"
	"os"
	"strconv"
)

// modelSeeds returns the seeds a randomized model test runs: the fixed
// ones, which every run repeats, then one drawn for this run, so that
// each run of the suite (every CI run) explores interleavings the fixed
// seeds do not. The drawn seed is logged; REDRIVE_MODEL_SEED replays
// it (it then replaces the drawn one). Drawn seeds are below 100,000:
// the tests derive clock offsets in hours and names from them.
func modelSeeds(x *h, fixed ...uint64) []uint64 {
	x.t.Helper()
	seed := 100 + rand.Uint64N(100_000-100)
	if v := os.Getenv("REDRIVE_MODEL_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n >= 100_000 {
			x.t.Fatalf("REDRIVE_MODEL_SEED=%q: want a number below 100000", v)
		}
		seed = n
	}
	x.t.Logf("model seeds %v and %d (REDRIVE_MODEL_SEED=%d replays the last)", fixed, seed, seed)
	return append(fixed, seed)
}
