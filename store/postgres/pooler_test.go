package postgres_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
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
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &startupProxy{ln: ln, target: target}
	go p.accept()
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.conns {
			c.Close()
		}
	})
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
	deadline := time.Now().Add(20 * time.Second)
	for !lead() {
		if time.Now().After(deadline) {
			t.Fatalf("the store behind the pooler does not lead within 20s (refused %v)", proxy.refusedParams())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if r := proxy.refusedParams(); len(r) > 0 {
		t.Errorf("startup parameters refused: %v", r)
	}
}
