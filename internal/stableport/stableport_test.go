package stableport

import (
	"net"
	"strconv"
	"testing"
)

// TestPick: the port is below the ephemeral range, at or above lowest,
// and can be listened on.
func TestPick(t *testing.T) {
	lo, err := ephemeralLow()
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		p := Pick(t)
		if p < lowest || p >= lo {
			t.Fatalf("port %d outside %d..%d", p, lowest, lo-1)
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Fatalf("listen on the picked port: %v", err)
		}
		l.Close()
	}
}

// TestPickSkipsABoundPort: of two ports, one bound, pickIn returns the
// other every time; with both bound, it fails.
func TestPickSkipsABoundPort(t *testing.T) {
	for range 10 { // a window whose two ports are free; another on a race
		a := Pick(t)
		la, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(a)))
		if err != nil {
			continue
		}
		defer la.Close()
		for range 20 {
			if p, err := pickIn(a, a+1); err == nil || p != 0 {
				t.Fatalf("pickIn of the bound port alone: %d, %v", p, err)
			}
		}
		lb, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(a+1)))
		if err != nil {
			continue
		}
		lb.Close()
		for range 20 {
			if p, err := pickIn(a, a+2); err != nil || p != a+1 {
				t.Fatalf("pickIn(%d, %d) with %d bound: %d, %v", a, a+2, a, p, err)
			}
		}
		return
	}
	t.Fatal("found no two free ports side by side in 10 tries")
}
