// Package stableport gives tests a local TCP port for a server of their
// own that they stop and start again on the same port (a broker node a
// test restarts).
//
// A port that was free a moment ago (listen on port 0, then close) lies
// in the kernel's ephemeral range: while the server is down, any process
// on the machine that connects anywhere may be given it as the local
// port of its connection, and the server, started again, fails to bind
// it. With several test binaries running at once, that happened. A port
// below the ephemeral range is never handed out that way: only a
// process that binds it by number can take it.
package stableport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
)

// lowest is the lowest port Pick returns: above the well-known and the
// usual registered services' ports (PostgreSQL 5432, RabbitMQ 5672 and
// 15672, epmd 4369, MinIO 19000, Kafka 19092 in CI).
const lowest = 20000

// Pick returns a port on 127.0.0.1 below the ephemeral range that
// nothing was bound to a moment ago. It fails tb if the ephemeral range
// leaves no room below it.
func Pick(tb testing.TB) int {
	tb.Helper()
	lo, err := ephemeralLow()
	if err != nil {
		tb.Fatalf("stableport: %v", err)
	}
	if lo-lowest < 1000 {
		tb.Fatalf("stableport: the ephemeral range starts at %d, leaving too few ports above %d", lo, lowest)
	}
	p, err := pickIn(lowest, lo)
	if err != nil {
		tb.Fatalf("stableport: %v", err)
	}
	return p
}

// pickIn returns a port of lo..hi-1 that could be listened on a moment
// ago, trying at most 100 at random.
func pickIn(lo, hi int) (int, error) {
	for range 100 {
		p := lo + rand.IntN(hi-lo)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue // taken: another
		}
		l.Close()
		return p, nil
	}
	return 0, fmt.Errorf("no free port in %d..%d after 100 tries", lo, hi-1)
}

// ephemeralLow returns the first port of the kernel's ephemeral range,
// or Linux's default where the range cannot be read.
func ephemeralLow() (int, error) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768, nil // not Linux: the default of Linux and the BSDs' is higher
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, &net.ParseError{Type: "ip_local_port_range", Text: string(b)}
	}
	return strconv.Atoi(f[0])
}
