package postgres_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/redrivehq/redrive/internal/testwait"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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
	t.Cleanup(func() { a.Close(); b.Close() })
	roundsA, roundsB := electRounds(a), electRounds(b)
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
		testwait.Until(t, what, 15*time.Second, cond)
	}
	waitFor("one leader", func() bool { return leadA() || leadB() })
	// Never two at once, while each store tries for the role again (or
	// confirms it).
	roundsWhile(t, "one store at most leads", 15*time.Second, func() bool { return !(leadA() && leadB()) }, roundsA, roundsB)
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

// electRounds counts the election rounds of s; call it before Elect.
func electRounds(s *postgres.Store) *atomic.Int64 {
	n := new(atomic.Int64)
	postgres.OnElectRound(s, func(string, bool) { n.Add(1) })
	return n
}

// roundsWhile waits until each store whose rounds are counted in rounds
// ended two more election rounds (so one whole round, each trying for
// the role or confirming it), checking ok all along: it fails the test,
// saying what, as soon as ok does not hold.
func roundsWhile(t *testing.T, what string, within time.Duration, ok func() bool, rounds ...*atomic.Int64) {
	t.Helper()
	from := make([]int64, len(rounds))
	for i, r := range rounds {
		from[i] = r.Load()
	}
	testwait.Watch(t, "two election rounds of each store while "+what, within, func() (bool, string) {
		if !ok() {
			t.Fatalf("not so: %s", what)
		}
		var seen []string
		done := true
		for i, r := range rounds {
			n := r.Load() - from[i]
			done = done && n >= 2
			seen = append(seen, fmt.Sprintf("store %d: %d rounds", i+1, n))
		}
		return done, strings.Join(seen, ", ")
	})
	if !ok() {
		t.Fatalf("not so: %s", what)
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
	proxy := newPartitionProxy(t, net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))))
	schema := newSchema(t)
	a, err := postgres.Open(t.Context(), viaProxy(t, raw, proxy.ln.Addr().String()), postgres.Options{Schema: schema, MaxConns: 2, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	roundsA := electRounds(a)
	// The cut-off store's attempts to connect again (to the silent
	// proxy) end within a second, not ten: its rounds are waited for.
	defer postgres.SetElectConnectTimeout(time.Second)()
	// Closed before the proxy (cleanups run last registered first): closing
	// writes to the silent connections and waits for no answer.
	t.Cleanup(func() { a.Close() })
	b := open(t, schema)
	defer b.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Liveness bounds, not timing claims: an election round is ~2s.
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		testwait.Until(t, what, 20*time.Second, cond)
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
	proxy.partition(true)
	waitFor("the other store takes the role after the cut", leadB)
	waitFor("the cut-off leader steps down while the other leads", func() bool { return !leadA() })
	// And it does not come back while cut off, while it tries again.
	roundsWhile(t, "the cut-off store does not lead again", 20*time.Second, func() bool { return !leadA() }, roundsA)
	if !leadB() {
		t.Fatal("the other store stopped leading")
	}
}

// proxyListen listens on loopback for a test proxy and, when the test
// ends, closes the listener and then every connection in *conns, taken
// under mu (the proxy's lock for them).
func proxyListen(t *testing.T, mu *sync.Mutex, conns *[]net.Conn) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range *conns {
			c.Close()
		}
	})
	return ln
}

// poolerProxy stands for a pooler in transaction mode, for one client
// connection on loopback: it opens two server sessions with the client's
// startup message, answers the client with the first, and once switched
// sends the client's next messages to the second, as such a pooler may
// do between two transactions.
type poolerProxy struct {
	ln       net.Listener
	target   string
	switched atomic.Bool
	errs     chan error
	mu       sync.Mutex
	conns    []net.Conn
}

func newPoolerProxy(t *testing.T, target string) *poolerProxy {
	t.Helper()
	p := &poolerProxy{target: target, errs: make(chan error, 100)}
	p.ln = proxyListen(t, &p.mu, &p.conns)
	go p.accept()
	return p
}

func (p *poolerProxy) track(c ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.conns = append(p.conns, c...)
}

func (p *poolerProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.track(c)
		go func() {
			if err := p.serve(c); err != nil {
				p.errs <- err
			}
		}()
	}
}

// readMessage reads one protocol message: its type byte (none for the
// startup message) and its length-prefixed body.
func readMessage(r io.Reader, typed bool) ([]byte, error) {
	n := 4
	if typed {
		n = 5
	}
	head := make([]byte, n)
	if _, err := io.ReadFull(r, head); err != nil {
		return nil, err
	}
	size := int(binary.BigEndian.Uint32(head[n-4:]))
	if size < 4 || size > 1<<24 {
		return nil, fmt.Errorf("message length %d", size)
	}
	body := make([]byte, size-4)
	if _, err := io.ReadFull(r, body); err != nil {
		return nil, err
	}
	return append(head, body...), nil
}

// handshake reads a server's answers to the startup message up to its
// first ReadyForQuery, handing each to fn.
func handshake(srv net.Conn, fn func([]byte) error) error {
	for {
		m, err := readMessage(srv, true)
		if err != nil {
			return err
		}
		if m[0] == 'R' && binary.BigEndian.Uint32(m[5:9]) != 0 {
			return errors.New("the server asks for a password: the pooler proxy forwards trust authentication only")
		}
		if err := fn(m); err != nil {
			return err
		}
		if m[0] == 'Z' {
			return nil
		}
	}
}

func (p *poolerProxy) serve(c net.Conn) error {
	startup, err := readMessage(c, false)
	if err != nil {
		return err
	}
	var srv [2]net.Conn
	for i := range srv {
		if srv[i], err = net.Dial("tcp", p.target); err != nil {
			return err
		}
		p.track(srv[i])
		if _, err := srv[i].Write(startup); err != nil {
			return err
		}
	}
	if err := handshake(srv[0], func(m []byte) error { _, err := c.Write(m); return err }); err != nil {
		return err
	}
	if err := handshake(srv[1], func([]byte) error { return nil }); err != nil {
		return err
	}
	// The client sends its next message only after the answer to the
	// last, so the two sessions never answer at once.
	go io.Copy(c, srv[0])
	go io.Copy(c, srv[1])
	for {
		m, err := readMessage(c, true)
		if err != nil {
			return nil // the client went away
		}
		to := srv[0]
		if p.switched.Load() {
			to = srv[1]
		}
		if _, err := to.Write(m); err != nil {
			return err
		}
	}
}

// TestElectPoolerDetected: when the connection holding the role reaches
// another server session, as it may behind a pooler in transaction mode,
// the leader says that redrive needs a direct connection or session
// pooling, and steps down: it no longer knows whether it holds the lock.
func TestElectPoolerDetected(t *testing.T) {
	raw := dbURL(t)
	cfg, err := pgx.ParseConfig(raw)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host == "" || strings.HasPrefix(cfg.Host, "/") || cfg.TLSConfig != nil {
		t.Skipf("the test database is not reached over plain TCP (host %q)", cfg.Host)
	}
	proxy := newPoolerProxy(t, net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))))
	schema := newSchema(t)
	s := open(t, schema) // migrated directly, not through the proxy
	s.Close()
	var logs syncBuffer
	a, err := postgres.Open(t.Context(), viaProxy(t, raw, proxy.ln.Addr().String()),
		postgres.Options{Schema: schema, MaxConns: 1, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	lead, err := a.Elect(ctx, "maintenance")
	if err != nil {
		t.Fatal(err)
	}
	// Liveness bounds, not timing claims: an election round is ~2s.
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		testwait.Until(t, what, 20*time.Second, func() bool {
			select {
			case err := <-proxy.errs:
				t.Fatalf("proxy: %v", err)
			default:
			}
			return cond()
		})
	}
	waitFor("the store behind the pooler leads", lead)
	proxy.switched.Store(true)
	waitFor("the leader steps down", func() bool { return !lead() })
	if !strings.Contains(logs.String(), "session pooling") {
		t.Errorf("logs %q do not say that redrive needs session pooling", logs.String())
	}
}

// TestElectRandomCuts: three stores, each behind a proxy, have their
// networks cut (the server hears of it), frozen (it does not) and healed
// in a random order; after each step, once the election settles, the
// stores leading are what the model says: exactly one, among those whose
// network works (none when every one is down).
func TestElectRandomCuts(t *testing.T) {
	raw := dbURL(t)
	cfg, err := pgx.ParseConfig(raw)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host == "" || strings.HasPrefix(cfg.Host, "/") {
		t.Skipf("the test database is not reached over TCP (host %q)", cfg.Host)
	}
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	target := net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
	schema := newSchema(t)
	s := open(t, schema) // migrated once, directly
	s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const n = 3
	var proxies [n]*partitionProxy
	var leads [n]func() bool
	for i := range n {
		proxies[i] = newPartitionProxy(t, target)
		st, err := postgres.Open(t.Context(), viaProxy(t, raw, proxies[i].ln.Addr().String()),
			postgres.Options{Schema: schema, MaxConns: 1, Logger: quiet(), SkipMigrate: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() }) // before its proxy closes
		if leads[i], err = st.Elect(ctx, "maintenance"); err != nil {
			t.Fatal(err)
		}
	}
	var healthy [n]bool // the model: whose network works
	for i := range healthy {
		healthy[i] = true
	}
	settled := func() (bool, string) {
		var leading []int
		for i := range n {
			if leads[i]() {
				leading = append(leading, i)
			}
		}
		anyHealthy := false
		for i := range n {
			anyHealthy = anyHealthy || healthy[i]
		}
		ok := len(leading) == 0 && !anyHealthy || len(leading) == 1 && healthy[leading[0]]
		return ok, fmt.Sprintf("healthy %v, leading %v", healthy, leading)
	}
	for step := range 8 {
		i := rng.IntN(n)
		if healthy[i] {
			cut := rng.IntN(2) == 0
			t.Logf("step %d: store %d down (cut: %v)", step, i, cut)
			proxies[i].partition(cut)
		} else {
			proxies[i].heal()
		}
		healthy[i] = !healthy[i]
		// A liveness bound, not a timing claim: a cut store stops within
		// a few seconds, the server ends a frozen one's session within
		// ~10 s, a healed one may first wait out a connection attempt
		// (10 s).
		var last string
		testwait.Watch(t, fmt.Sprintf("step %d to settle", step), 40*time.Second, func() (bool, string) {
			var ok bool
			ok, last = settled()
			return ok, last
		})
		t.Logf("step %d: %s", step, last)
	}
}

// partitionProxy forwards loopback TCP connections to a server, and
// partitions the network in one of two ways: freeze forwards nothing
// more either way and closes nothing, as a partition looks from both
// ends (the server keeps its end of each connection open and idle); cut
// closes the connections to the server (which ends their sessions) and
// leaves the clients' ends silent. Either way the connections made until
// heal are accepted and left silent; the connections partitioned stay
// so after heal.
type partitionProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	down   bool
	conns  []net.Conn // every connection, both ends
	pairs  []*proxyPair
}

// proxyPair is one forwarded connection.
type proxyPair struct {
	client, server net.Conn
	frozen         atomic.Bool
}

func newPartitionProxy(t *testing.T, target string) *partitionProxy {
	t.Helper()
	p := &partitionProxy{target: target}
	p.ln = proxyListen(t, &p.mu, &p.conns)
	go p.accept()
	return p
}

func (p *partitionProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		p.conns = append(p.conns, c)
		down := p.down
		p.mu.Unlock()
		if down {
			continue // silent
		}
		srv, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		pair := &proxyPair{client: c, server: srv}
		p.mu.Lock()
		p.conns = append(p.conns, srv)
		p.pairs = append(p.pairs, pair)
		p.mu.Unlock()
		go pair.pipe(srv, c)
		go pair.pipe(c, srv)
	}
}

// pipe copies from src to dst until the pair is frozen; an end closed
// before then closes the other, one closed after it does not.
func (pair *proxyPair) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if pair.frozen.Load() {
			if err != nil {
				return
			}
			continue // dropped
		}
		if n > 0 {
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			dst.Close()
			return
		}
	}
}

// partition freezes every connection, and closes the server's ends if
// cut.
func (p *partitionProxy) partition(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for _, pair := range p.pairs {
		pair.frozen.Store(true)
		if cut {
			pair.server.Close()
		}
	}
	p.pairs = nil
}

// heal forwards the connections made from now on.
func (p *partitionProxy) heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = false
}

// TestElectFrozenNetwork: when the leader's network is partitioned, so
// that neither its end nor the server's end of its connection hears of
// it, the leader steps down and another store takes the role: the
// server does not keep the silent session, and its lock, until TCP
// keepalives give up (hours by default).
func TestElectFrozenNetwork(t *testing.T) {
	raw := dbURL(t)
	cfg, err := pgx.ParseConfig(raw)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host == "" || strings.HasPrefix(cfg.Host, "/") {
		t.Skipf("the test database is not reached over TCP (host %q)", cfg.Host)
	}
	proxy := newPartitionProxy(t, net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))))
	schema := newSchema(t)
	a, err := postgres.Open(t.Context(), viaProxy(t, raw, proxy.ln.Addr().String()), postgres.Options{Schema: schema, MaxConns: 2, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() }) // before the proxy closes
	b := open(t, schema)
	defer b.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	waitFor := func(what string, within time.Duration, cond func() bool) {
		t.Helper()
		testwait.Until(t, what, within, cond)
	}
	leadA, err := a.Elect(ctx, "maintenance")
	if err != nil {
		t.Fatal(err)
	}
	// Liveness bounds, not timing claims: an election round is ~2s.
	waitFor("the store behind the proxy leads", 20*time.Second, leadA)
	leadB, err := b.Elect(ctx, "maintenance")
	if err != nil {
		t.Fatal(err)
	}
	proxy.partition(false)
	waitFor("the partitioned leader steps down", 20*time.Second, func() bool { return !leadA() })
	waitFor("the other store takes the role", 60*time.Second, leadB)
	if leadA() {
		t.Fatal("the partitioned store leads again")
	}
}
