package closedport_test

import (
	"errors"
	"net"
	"syscall"
	"testing"

	"github.com/redrivehq/redrive/internal/closedport"
)

func TestRefusedThenListening(t *testing.T) {
	p := closedport.New(t)
	// Many dials: each is refused, none connects (to itself or anything).
	for i := 0; i < 200; i++ {
		c, err := net.Dial("tcp", p.Addr())
		if err == nil {
			c.Close()
			t.Fatalf("dial %d connected", i)
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("dial %d: %v, want connection refused", i, err)
		}
	}
	// Nobody else can take the port meanwhile.
	if ln, err := net.Listen("tcp", p.Addr()); err == nil {
		ln.Close()
		t.Fatal("another listener took the held port")
	}
	ln := p.Listen(t)
	defer ln.Close()
	if ln.Addr().String() != p.Addr() {
		t.Fatalf("listening on %s, want %s", ln.Addr(), p.Addr())
	}
	accepted := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			c.Close()
		}
		accepted <- err
	}()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatalf("dial after Listen: %v", err)
	}
	c.Close()
	if err := <-accepted; err != nil {
		t.Fatalf("accept: %v", err)
	}
}
