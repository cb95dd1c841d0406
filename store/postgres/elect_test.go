package postgres_test

import (
	"context"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/redrivehq/redrive/store/postgres"
)

// TestElectHandsOver: of two stores on one schema exactly one leads; when
// the leader's store closes (its connection, and so its advisory lock, go
// away), the other takes the role over.
func TestElectHandsOver(t *testing.T) {
	schema := newSchema(t)
	a, b := open(t, schema), open(t, schema)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	leadA, err := a.Elect(ctx, "maintenance")
	if err != nil {
		t.Fatal(err)
	}
	leadB, err := b.Elect(ctx, "maintenance")
	if err != nil {
		t.Fatal(err)
	}
	// Liveness bounds, not timing claims: an election round is ~2s.
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 15s", what)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitFor("one leader", func() bool { return leadA() || leadB() })
	for range 50 { // never two at once
		if leadA() && leadB() {
			t.Fatal("both stores lead at once")
		}
		time.Sleep(10 * time.Millisecond)
	}
	leader, survivor, leading, other := a, b, leadA, leadB
	if leadB() {
		leader, survivor, leading, other = b, a, leadB, leadA
	}
	leader.Close()
	waitFor("the old leader steps down", func() bool { return !leading() })
	waitFor("the other store takes over", other)
	// A different role is elected independently of the first.
	leadOther, err := survivor.Elect(ctx, "another-role")
	if err != nil {
		t.Fatal(err)
	}
	waitFor("a second role is elected independently", leadOther)
	if !other() {
		t.Fatal("electing a second role cost the first")
	}
}

// cutProxy forwards loopback TCP connections to a server until cut: then
// it closes its connections to the server (which ends their sessions and
// releases their advisory locks) and leaves the clients' ends open and
// silent, as a network cut or a failover does; connections made after
// the cut are accepted and left silent too.
type cutProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	conns  []net.Conn // every connection, both ends
	server []net.Conn // the ends towards the server
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target}
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *cutProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		p.conns = append(p.conns, c)
		cut := p.cut
		p.mu.Unlock()
		if cut {
			continue // silent
		}
		srv, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, srv)
		p.server = append(p.server, srv)
		p.mu.Unlock()
		// Neither copy closes the client's end when the server's goes.
		go io.Copy(srv, c)
		go io.Copy(c, srv)
	}
}

// cutServer closes the connections to the server and silences the
// clients' ends.
func (p *cutProxy) cutServer() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for _, c := range p.server {
		c.Close()
	}
}

func (p *cutProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
}

// viaProxy returns url with its host and port replaced by addr.
func viaProxy(t *testing.T, raw, addr string) string {
	t.Helper()
	host, port, _ := net.SplitHostPort(addr)
	if !strings.Contains(raw, "://") { // key=value: later keys win
		return raw + " host=" + host + " port=" + port
	}
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = addr
	return u.String()
}

// TestElectNetworkCut: when the leader's connection is cut so that the
// server ends the session (releasing the lock) while the leader's end
// stays silent, another store takes the role and the old leader steps
// down instead of leading beside it until TCP gives up.
func TestElectNetworkCut(t *testing.T) {
	raw := dbURL(t)
	cfg, err := pgx.ParseConfig(raw)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host == "" || strings.HasPrefix(cfg.Host, "/") {
		t.Skipf("the test database is not reached over TCP (host %q)", cfg.Host)
	}
	proxy := newCutProxy(t, net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))))
	schema := newSchema(t)
	a, err := postgres.Open(t.Context(), viaProxy(t, raw, proxy.ln.Addr().String()), postgres.Options{Schema: schema, MaxConns: 2, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	// Closed after the proxy (cleanups run last registered first), so that
	// nothing waits on a silent connection.
	t.Cleanup(func() { a.Close() })
	b := open(t, schema)
	defer b.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Liveness bounds, not timing claims: an election round is ~2s.
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 20s", what)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	leadA, err := a.Elect(ctx, "maintenance")
	if err != nil {
		t.Fatal(err)
	}
	waitFor("the store behind the proxy leads", leadA)
	leadB, err := b.Elect(ctx, "maintenance")
	if err != nil {
		t.Fatal(err)
	}
	proxy.cutServer()
	waitFor("the other store takes the role after the cut", leadB)
	waitFor("the cut-off leader steps down while the other leads", func() bool { return !leadA() })
	for range 50 { // and does not come back while cut off
		if leadA() {
			t.Fatal("the cut-off store leads again")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !leadB() {
		t.Fatal("the other store stopped leading")
	}
}
