package kafka

import (
	"fmt"
	"testing"
)

// FuzzParseValueRef: a value reference is refused or read into a topic,
// partition and offset that write back to the same reference.
func FuzzParseValueRef(f *testing.F) {
	f.Add("orders/3/120")
	f.Add("orders-retry-4s/0/0")
	f.Add("/0/1")
	f.Add("a/b/c")
	f.Add("orders/-1/5")
	f.Fuzz(func(t *testing.T, ref string) {
		topic, p, o, ok := parseValueRef(ref)
		if !ok {
			return
		}
		if topic == "" || p < 0 || o < 0 {
			t.Fatalf("%q read as %q %d %d", ref, topic, p, o)
		}
		if back := fmt.Sprintf("%s/%d/%d", topic, p, o); back != ref {
			if _, _, _, ok := parseValueRef(back); !ok {
				t.Fatalf("%q read as %q %d %d, which does not read back", ref, topic, p, o)
			}
		}
	})
}
