package redrive

import (
	"testing"
	"time"
)

// TestHooksDoNotGrowWithWorkersGone checks that the hooks of workers
// that stopped are removed, not left as no-ops, while another worker of
// the same store keeps the registry entry alive: otherwise a process that
// keeps one worker and starts and stops others (tests, a fleet) grows the
// lists without bound, and every enqueue, pause and cancellation walks
// them.
func TestHooksDoNotGrowWithWorkersGone(t *testing.T) {
	c := &Client{}
	c.hooksKey = c
	keep := c.register("q", func(time.Time) {})
	keepPause := c.registerPause("q", func(bool) {})
	defer keep()
	defer keepPause()
	for range 100 {
		c.register("q", func(time.Time) {})()
		c.registerPause("q", func(bool) {})()
	}
	h := c.hooks()
	h.mu.RLock()
	nw, np := len(h.wakers["q"]), len(h.pausers["q"])
	h.mu.RUnlock()
	if nw != 1 || np != 1 {
		t.Fatalf("after 100 workers came and went beside one: %d wake-ups and %d pause hooks, want 1 each", nw, np)
	}
}
