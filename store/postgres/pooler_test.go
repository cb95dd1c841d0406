package postgres_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"github.com/redrivehq/redrive/internal/testwait"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/postgres"
)

// poolerStartupParams are the startup parameters PgBouncer passes on by
// default; it refuses a client sending any other ("unsupported startup
// parameter", unless its ignore_startup_parameters lists it, and then the
// setting is dropped).
var poolerStartupParams = map[string]bool{
	"user": true, "database": true, "application_name": true, "client_encoding": true,
	"datestyle": true, "timezone": true, "standard_conforming_strings": true,
}

// startupProxy stands for a pooler in session mode as far as its
// handshake goes: it refuses a startup message carrying a parameter
// outside poolerStartupParams, as PgBouncer does, and forwards the
// connections it accepts to the server.
type startupProxy struct {
	ln      net.Listener
	target  string
	mu      sync.Mutex
	conns   []net.Conn
	refused []string // the parameters refused
}

func newStartupProxy(t *testing.T, target string) *startupProxy {
	t.Helper()
	p := &startupProxy{target: target}
	p.ln = proxyListen(t, &p.mu, &p.conns)
	go p.accept()
	return p
}

func (p *startupProxy) track(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.conns = append(p.conns, c)
}

func (p *startupProxy) refusedParams() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.refused...)
}

func (p *startupProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.track(c)
		go p.serve(c)
	}
}

func (p *startupProxy) serve(c net.Conn) {
	startup, err := readMessage(c, false)
	if err != nil {
		return
	}
	// Length, protocol version, then name and value pairs, each ended by
	// a zero byte, and a zero byte.
	fields := bytes.Split(bytes.TrimRight(startup[8:], "\x00"), []byte{0})
	for i := 0; i+1 < len(fields); i += 2 {
		name := string(fields[i])
		if !poolerStartupParams[name] {
			p.mu.Lock()
			p.refused = append(p.refused, name)
			p.mu.Unlock()
			msg := "SFATAL\x00VFATAL\x00C08P01\x00Munsupported startup parameter: " + name + "\x00\x00"
			head := make([]byte, 5)
			head[0] = 'E'
			binary.BigEndian.PutUint32(head[1:], uint32(4+len(msg)))
			c.Write(append(head, msg...))
			c.Close()
			return
		}
	}
	srv, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.track(srv)
	if _, err := srv.Write(startup); err != nil {
		return
	}
	go func() { io.Copy(srv, c); srv.Close() }()
	io.Copy(c, srv)
	c.Close()
}

// TestOpenThroughPooler: the store works through a pooler in session
// mode (which docs/go.md supports): its connections send only the
// startup parameters PgBouncer accepts by default, and still run their
// statements at READ COMMITTED. Open, an enqueue with a key and an
// election go through the proxy.
func TestOpenThroughPooler(t *testing.T) {
	raw := dbURL(t)
	cfg, err := pgx.ParseConfig(raw)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host == "" || strings.HasPrefix(cfg.Host, "/") || cfg.TLSConfig != nil {
		t.Skipf("the test database is not reached over plain TCP (host %q)", cfg.Host)
	}
	for name := range cfg.RuntimeParams {
		if !poolerStartupParams[name] {
			t.Skipf("the test database's URL itself sets the startup parameter %q", name)
		}
	}
	proxy := newStartupProxy(t, net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))))
	schema := newSchema(t)
	ctx := t.Context()
	s, err := postgres.Open(ctx, viaProxy(t, raw, proxy.ln.Addr().String()), postgres.Options{Schema: schema, MaxConns: 2, Logger: quiet()})
	if err != nil {
		t.Fatalf("Open through a pooler: %v (refused %v)", err, proxy.refusedParams())
	}
	defer s.Close()
	if _, err := s.Enqueue(ctx, []store.NewJob{{Queue: "q", Kind: "k", IdempotencyKey: "k"}}, time.Now()); err != nil {
		t.Fatalf("Enqueue through a pooler: %v", err)
	}
	var level string
	if err := s.Pool().QueryRow(ctx, `SHOW default_transaction_isolation`).Scan(&level); err != nil || level != "read committed" {
		t.Errorf("the store's sessions default to %q, %v; want read committed", level, err)
	}
	ectx, cancel := context.WithCancel(ctx)
	defer cancel()
	lead, err := s.Elect(ectx, "maintenance")
	if err != nil {
		t.Fatal(err)
	}
	// A liveness bound, not a timing claim: an election round is ~2s.
	testwait.Watch(t, "the store behind the pooler to lead", 20*time.Second, func() (bool, string) {
		return lead(), fmt.Sprintf("startup parameters refused: %v", proxy.refusedParams())
	})
	if r := proxy.refusedParams(); len(r) > 0 {
		t.Errorf("startup parameters refused: %v", r)
	}
}

// sharedSessionProxy stands for a pooler in transaction mode with one
// server connection: every client it accepts is served by the same
// server session, one request at a time (a simple-protocol query, or
// extended-protocol messages up to a Sync), as such a pooler hands its
// connection to whichever client asks between two transactions.
type sharedSessionProxy struct {
	ln        net.Listener
	target    string
	mu        sync.Mutex // held while one client's request is answered
	srv       net.Conn
	handshake [][]byte // the server's answers to the first startup message
	errs      chan error
	cmu       sync.Mutex
	conns     []net.Conn
}

func newSharedSessionProxy(t *testing.T, target string) *sharedSessionProxy {
	t.Helper()
	p := &sharedSessionProxy{target: target, errs: make(chan error, 100)}
	p.ln = proxyListen(t, &p.cmu, &p.conns)
	go p.accept()
	return p
}

func (p *sharedSessionProxy) track(c net.Conn) {
	p.cmu.Lock()
	defer p.cmu.Unlock()
	p.conns = append(p.conns, c)
}

func (p *sharedSessionProxy) accept() {
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

func (p *sharedSessionProxy) serve(c net.Conn) error {
	defer c.Close()
	startup, err := readMessage(c, false)
	if err != nil {
		return nil
	}
	p.mu.Lock()
	if p.srv == nil {
		srv, err := net.Dial("tcp", p.target)
		if err != nil {
			p.mu.Unlock()
			return err
		}
		p.track(srv)
		if _, err := srv.Write(startup); err != nil {
			p.mu.Unlock()
			return err
		}
		if err := handshake(srv, func(m []byte) error { p.handshake = append(p.handshake, m); return nil }); err != nil {
			p.mu.Unlock()
			return err
		}
		p.srv = srv
	}
	for _, m := range p.handshake {
		if _, err := c.Write(m); err != nil {
			p.mu.Unlock()
			return nil
		}
	}
	p.mu.Unlock()
	for {
		m, err := readMessage(c, true)
		if err != nil || m[0] == 'X' { // gone, or Terminate: the session stays
			return nil
		}
		p.mu.Lock()
		for {
			if _, err := p.srv.Write(m); err != nil {
				p.mu.Unlock()
				return err
			}
			if m[0] == 'Q' || m[0] == 'S' { // a request ends: answer it
				break
			}
			if m, err = readMessage(c, true); err != nil {
				p.mu.Unlock()
				return nil
			}
		}
		for {
			a, err := readMessage(p.srv, true)
			if err != nil {
				p.mu.Unlock()
				return err
			}
			c.Write(a)
			if a[0] == 'Z' {
				break
			}
		}
		p.mu.Unlock()
	}
}

// TestElectSharedSession: two stores whose election connections reach one
// server session, as behind a pooler in transaction mode, do not both
// lead (the session's advisory lock is taken again by the second, since
// a session may take a lock it holds), and the one that finds another's
// election on its session says that redrive needs a direct connection
// or session pooling.
func TestElectSharedSession(t *testing.T) {
	raw := dbURL(t)
	cfg, err := pgx.ParseConfig(raw)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host == "" || strings.HasPrefix(cfg.Host, "/") || cfg.TLSConfig != nil {
		t.Skipf("the test database is not reached over plain TCP (host %q)", cfg.Host)
	}
	proxy := newSharedSessionProxy(t, net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))))
	schema := newSchema(t)
	s := open(t, schema) // migrated directly, not through the proxy
	s.Close()
	// The simple protocol, as statements prepared by one client would
	// clash with another's on the shared session (PgBouncer 1.21 and later
	// keep them apart).
	u := viaProxy(t, raw, proxy.ln.Addr().String())
	if strings.Contains(u, "://") {
		if strings.Contains(u, "?") {
			u += "&default_query_exec_mode=simple_protocol"
		} else {
			u += "?default_query_exec_mode=simple_protocol"
		}
	} else {
		u += " default_query_exec_mode=simple_protocol"
	}
	var logs syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var leads [2]func() bool
	var rounds [2]*atomic.Int64
	for i := range leads {
		st, err := postgres.Open(t.Context(), u, postgres.Options{Schema: schema, MaxConns: 1, SkipMigrate: true,
			Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		rounds[i] = electRounds(st)
		if leads[i], err = st.Elect(ctx, "maintenance"); err != nil {
			t.Fatal(err)
		}
	}
	// Liveness bounds, not timing claims: an election round is ~2s.
	testwait.Until(t, "a store to lead", 20*time.Second, func() bool { return leads[0]() || leads[1]() })
	// Until the other has tried for the role: it leads too, or says why
	// it does not.
	testwait.Until(t, "the other store to lead too or log that it needs session pooling", 20*time.Second, func() bool {
		return strings.Contains(logs.String(), "session pooling") || leads[0]() && leads[1]()
	})
	roundsWhile(t, "no two stores lead on one server session", 20*time.Second, func() bool {
		select {
		case err := <-proxy.errs:
			t.Fatalf("proxy: %v", err)
		default:
		}
		return !(leads[0]() && leads[1]())
	}, rounds[0], rounds[1])
	if !strings.Contains(logs.String(), "session pooling") {
		t.Errorf("logs %q do not say that redrive needs session pooling", logs.String())
	}
}
