package strictjson

import (
	"runtime"
	"strings"
	"testing"
)

// deepBody is a 1 MiB-class body: a payload of objects nested depth deep,
// each under a key of keyLen bytes.
func deepBody(depth, keyLen int) []byte {
	key := `"` + strings.Repeat("k", keyLen) + `":`
	return []byte(`{"kind":"x","payload":` + strings.Repeat("{"+key, depth) + "1" + strings.Repeat("}", depth) + "}")
}

// TestCheckCostLinear holds the memory Check allocates on a deeply nested
// body to a small multiple of the body's size: the path of every key
// used to be built (and kept live down the recursion) at every level, so
// that a 1 MiB body nested 10,000 deep made gigabytes of path strings.
func TestCheckCostLinear(t *testing.T) {
	body := deepBody(5000, 100) // about 0.5 MiB
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	if err := Check(body, nil); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	alloc := after.TotalAlloc - before.TotalAlloc
	if limit := uint64(20 * len(body)); alloc > limit {
		t.Fatalf("Check allocated %d bytes on a %d-byte body (limit %d)", alloc, len(body), limit)
	}
}
