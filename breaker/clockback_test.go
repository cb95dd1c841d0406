package breaker

import (
	"testing"
	"time"
)

// TestRunBrokenBySuccessWhileClockIsBack: a success recorded while the
// clock reads earlier than the run's last failure (a clock without a
// monotonic reading stepped back, by less than the window) still breaks
// the run of failures in a row. Five failures, each followed by a success
// recorded 2 s in the clock's past (more than one 1.5 s bucket), are not
// five failures in a row, and the ratio (5 in 105) is far from tripping.
func TestRunBrokenBySuccessWhileClockIsBack(t *testing.T) {
	b, clk := newTest(t, Config{})
	clk.Advance(time.Hour)
	for range 100 {
		clk.Advance(10 * time.Millisecond)
		call(b, nil)
	}
	for i := range 5 {
		clk.Advance(10 * time.Millisecond)
		call(b, errBoom)
		clk.Advance(-2 * time.Second) // the clock steps back
		call(b, nil)
		clk.Advance(2 * time.Second) // and forward again
		if st := b.Status(); st.State != Closed {
			t.Fatalf("after failure %d, each followed by a success: %+v, want closed (no 5 failures in a row)", i+1, st)
		}
	}
}
