// Package closedport gives tests a local TCP port on which every
// connection is refused, for as long as the test runs.
//
// A port that was free a moment ago (listen on port 0, then close) is not
// enough: another process may bind it, and an outgoing connection may be
// given it as its own local port, which on Linux connects the socket to
// itself; a client then waits for an answer that never comes instead of
// being refused. A port held bound but not listening is refused by the
// kernel, and neither can happen to it.
package closedport

import (
	"net"
	"os"
	"strconv"
	"syscall"
	"testing"
)

// Port is a local TCP port bound but not listening.
type Port struct {
	fd   int
	port int
}

// New holds a port on 127.0.0.1 until the test ends.
func New(t testing.TB) *Port {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatalf("closedport: socket: %v", err)
	}
	p := &Port{fd: fd}
	t.Cleanup(func() {
		if p.fd >= 0 {
			syscall.Close(p.fd)
		}
	})
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatalf("closedport: bind: %v", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatalf("closedport: getsockname: %v", err)
	}
	p.port = sa.(*syscall.SockaddrInet4).Port
	return p
}

// Addr returns "127.0.0.1:N".
func (p *Port) Addr() string { return net.JoinHostPort("127.0.0.1", p.Number()) }

// Number returns the port number as a string.
func (p *Port) Number() string { return strconv.Itoa(p.port) }

// Listen starts listening on the port and hands it over as a
// net.Listener, the caller's to close; connections are accepted from now
// on. Listen may be called once.
func (p *Port) Listen(t testing.TB) net.Listener {
	t.Helper()
	if p.fd < 0 {
		t.Fatalf("closedport: port %d already handed over", p.port)
	}
	if err := syscall.Listen(p.fd, 128); err != nil {
		t.Fatalf("closedport: listen on %d: %v", p.port, err)
	}
	f := os.NewFile(uintptr(p.fd), "closedport "+p.Number())
	p.fd = -1
	defer f.Close()
	ln, err := net.FileListener(f)
	if err != nil {
		t.Fatalf("closedport: %v", err)
	}
	return ln
}
