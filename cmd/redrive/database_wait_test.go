package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/internal/closedport"
)

// The tests of --database-wait: serve waits for PostgreSQL, answering
// /readyz 503 meanwhile, retries only what can heal, gives up after the
// wait, and stops at once when told to.

// freePort returns a local TCP port that nothing listens on (it was free
// a moment ago).
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	ln.Close()
	return port
}

// serveTCP accepts connections on a local port until the test ends and
// hands each to handle (in its own goroutine); it returns the port.
func serveTCP(t *testing.T, handle func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				handle(c)
			})
		}
	})
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}

// fakePostgresError is a server that answers the startup message as
// PostgreSQL does when it refuses a connection: with a FATAL error.
func fakePostgresError(t *testing.T, code, msg string) string {
	return serveTCP(t, func(c net.Conn) {
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		be := pgproto3.NewBackend(c, c)
		m, err := be.ReceiveStartupMessage()
		if err != nil {
			return
		}
		if _, ok := m.(*pgproto3.SSLRequest); ok {
			if _, err := c.Write([]byte("N")); err != nil {
				return
			}
			if _, err := be.ReceiveStartupMessage(); err != nil {
				return
			}
		}
		be.Send(&pgproto3.ErrorResponse{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: code, Message: msg})
		_ = be.Flush()
	})
}

// fakeTLSPostgres is a server that accepts TLS with a self-signed
// certificate no client trusts.
func fakeTLSPostgres(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert := tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	return serveTCP(t, func(c net.Conn) {
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		be := pgproto3.NewBackend(c, c)
		m, err := be.ReceiveStartupMessage()
		if err != nil {
			return
		}
		if _, ok := m.(*pgproto3.SSLRequest); !ok {
			return
		}
		if _, err := c.Write([]byte("S")); err != nil {
			return
		}
		tc := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{cert}})
		_ = tc.Handshake()
		_, _ = io.Copy(io.Discard, tc)
	})
}

// connectErr is the error of a real connection attempt to u.
func connectErr(t *testing.T, u string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, u)
	if err == nil {
		conn.Close(ctx)
		t.Fatalf("%s: connected", u)
	}
	return err
}

// TestDBErrorHeals classifies the errors of real connection attempts:
// those that can heal are retried, the others end the wait at once.
func TestDBErrorHeals(t *testing.T) {
	closer := serveTCP(t, func(net.Conn) {}) // accepts, then closes: a proxy whose backend is down
	for _, tc := range []struct {
		name  string
		url   string
		heals bool
	}{
		{"refused", "postgres://postgres@127.0.0.1:" + closedport.New(t).Number() + "/test?sslmode=disable", true},
		{"closed at once", "postgres://postgres@127.0.0.1:" + closer + "/test?sslmode=disable", true},
		{"unknown host", "postgres://postgres@redrive-no-such-host.invalid:5432/test?sslmode=disable", true},
		{"starting up", "postgres://postgres@127.0.0.1:" + fakePostgresError(t, "57P03", "the database system is starting up") + "/test?sslmode=disable", true},
		{"too many connections", "postgres://postgres@127.0.0.1:" + fakePostgresError(t, "53300", "sorry, too many clients already") + "/test", true},
		{"password", "postgres://postgres:x@127.0.0.1:" + fakePostgresError(t, "28P01", `password authentication failed for user "postgres"`) + "/test", false},
		{"untrusted certificate", "postgres://postgres@localhost:" + fakeTLSPostgres(t) + "/test?sslmode=verify-full", false},
		{"TLS refused", "postgres://postgres@127.0.0.1:" + fakePostgresError(t, "08P01", "unused") + "/test?sslmode=require", false},
	} {
		err := connectErr(t, tc.url)
		t.Logf("%s: %v", tc.name, err)
		if got := dbErrorHeals(err); got != tc.heals {
			t.Errorf("%s: dbErrorHeals = %v, want %v: %v", tc.name, got, tc.heals, err)
		}
	}

	// The real server's refusals.
	u := pgURL(t)
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	role := *pu
	role.User = url.User("redrive_no_such_role")
	db := *pu
	db.Path = "/redrive_no_such_database"
	for _, tc := range []struct{ name, url string }{{"unknown role", role.String()}, {"unknown database", db.String()}} {
		err := connectErr(t, tc.url)
		t.Logf("%s: %v", tc.name, err)
		if dbErrorHeals(err) {
			t.Errorf("%s: dbErrorHeals = true: %v", tc.name, err)
		}
	}
}

// waitLine polls the process's output until a JSON log line with the
// message msg appears, and returns it decoded.
func waitLine(t *testing.T, p *redriveProc, msg string, n int) []map[string]any {
	t.Helper()
	var found []map[string]any
	waitUntil(t, e2eWait, fmt.Sprintf("redrive logged %d %q", n, msg), func() error {
		found = found[:0]
		for line := range strings.SplitSeq(p.out.String(), "\n") {
			var rec map[string]any
			if json.Unmarshal([]byte(line), &rec) == nil && rec["msg"] == msg {
				found = append(found, rec)
			}
		}
		if len(found) >= n {
			return nil
		}
		select {
		case <-p.done:
			t.Fatalf("redrive exited (%v) before logging %d %q:\n%s", p.err, n, msg, p.out)
		default:
		}
		return fmt.Errorf("%d so far; output:\n%s", len(found), p.out)
	})
	return found
}

// startWaiting starts `redrive serve` and returns once it listens, which
// it does before its store is open.
func startWaiting(t *testing.T, bin string, args ...string) *redriveProc {
	t.Helper()
	p := launchRedrive(t, bin, nil, append([]string{"--addr", "127.0.0.1:0", "--shutdown-timeout", "5s"}, args...)...)
	rec := waitLine(t, p, "redrive starting: opening the store", 1)[0]
	addr, _ := rec["addr"].(string)
	if addr == "" {
		t.Fatalf("no addr in %v", rec)
	}
	p.base = "http://" + addr
	return p
}

// get calls the server and returns the status, the Retry-After header and
// the body.
func get(t *testing.T, method, u, host, body string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Retry-After"), string(b)
}

// checkWaiting checks the answers of a server waiting for its database.
func checkWaiting(t *testing.T, p *redriveProc) {
	t.Helper()
	if code, _, body := get(t, "GET", p.base+"/healthz", "", ""); code != http.StatusOK {
		t.Errorf("/healthz while waiting: %d %s", code, body)
	}
	code, ra, body := get(t, "GET", p.base+"/readyz", "", "")
	if code != http.StatusServiceUnavailable || ra == "" || !strings.Contains(body, "waiting for the database") {
		t.Errorf("/readyz while waiting: %d (Retry-After %q) %s", code, ra, body)
	}
	for _, r := range [][2]string{{"POST", "/v1/jobs"}, {"GET", "/v1/stats"}, {"GET", "/"}, {"GET", "/metrics"}} {
		code, ra, body := get(t, r[0], p.base+r[1], "", `{"kind":"http"}`)
		if code != http.StatusServiceUnavailable || ra == "" {
			t.Errorf("%s %s while waiting: %d (Retry-After %q) %s", r[0], r[1], code, ra, body)
		}
	}
	// The host check guards the waiting server too.
	if code, _, body := get(t, "GET", p.base+"/readyz", "evil.example", ""); code != http.StatusMisdirectedRequest {
		t.Errorf("/readyz for a foreign host while waiting: %d %s", code, body)
	}
}

// checkAttemptLogs checks the warn lines of the failed attempts: numbered
// from 1, each with its error and the delay before the next.
func checkAttemptLogs(t *testing.T, recs []map[string]any) {
	t.Helper()
	for i, rec := range recs {
		if rec["level"] != "WARN" || rec["attempt"] != float64(i+1) || rec["error"] == "" || rec["retry_in"] == nil {
			t.Errorf("attempt log %d: %v", i+1, rec)
		}
		if d, err := time.ParseDuration(fmt.Sprint(rec["retry_in"])); err != nil || d <= 0 || d > 11*time.Second {
			t.Errorf("attempt log %d: retry_in %v", i+1, rec["retry_in"])
		}
	}
}

// forward forwards every connection to the held port to target until the
// test ends.
func forward(t *testing.T, held *closedport.Port, target string) {
	t.Helper()
	ln := held.Listen(t)
	var mu sync.Mutex
	var conns []net.Conn
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, up)
			mu.Unlock()
			wg.Go(func() { _, _ = io.Copy(up, c); up.Close() })
			wg.Go(func() { _, _ = io.Copy(c, up); c.Close() })
		}
	})
}

func TestServeDatabaseWait(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the redrive binary")
	}
	if runtime.GOOS == "windows" {
		t.Skip("no SIGTERM on Windows")
	}
	bin := buildRedrive(t)

	// PostgreSQL comes up after serve: serve waits, not ready, then
	// serves.
	t.Run("postgres-comes-up", func(t *testing.T) {
		t.Parallel()
		pu, err := url.Parse(pgURL(t))
		if err != nil {
			t.Fatal(err)
		}
		target := pu.Host
		if pu.Port() == "" {
			target = net.JoinHostPort(pu.Hostname(), "5432")
		}
		held := closedport.New(t)
		waitURL := *pu
		waitURL.Host = "127.0.0.1:" + held.Number()
		schema := "dbwait_" + randomHex(t, 6)
		t.Cleanup(func() { dropSchema(t, pu.String(), schema) })

		p := startWaiting(t, bin, "--database-url", waitURL.String(), "--schema", schema, "--database-wait", "2m")
		recs := waitLine(t, p, "database not reachable yet, retrying", 2)
		checkAttemptLogs(t, recs)
		if s := fmt.Sprint(recs[0]["error"]); !strings.Contains(s, "refused") {
			t.Errorf("first attempt's error: %s", s)
		}
		checkWaiting(t, p)
		if strings.Contains(p.out.String(), `"msg":"redrive serving"`) {
			t.Fatalf("serving without a database:\n%s", p.out)
		}

		// PostgreSQL "comes up" on the port.
		forward(t, held, target)
		waitUntil(t, e2eWait, "/readyz answers 200 after PostgreSQL came up", func() error {
			if code, _, body := get(t, "GET", p.base+"/readyz", "", ""); code != http.StatusOK {
				return fmt.Errorf("%d %s", code, body)
			}
			return nil
		})
		if rec := waitLine(t, p, "database reachable", 1)[0]; rec["attempts"].(float64) < 3 {
			t.Errorf("reachable after %v attempts, want at least 3", rec["attempts"])
		}
		waitLine(t, p, "redrive serving", 1)

		// It works: a job is enqueued and runs.
		hit := make(chan struct{}, 1)
		ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case hit <- struct{}{}:
			default:
			}
		}))
		defer ts.Close()
		id := p.enqueue("", ts.URL+"/ok")
		p.waitState(id, redrive.Completed)
		if !schemaExists(t, pu.String(), schema) {
			t.Errorf("schema %s not created", schema)
		}
		// SIGTERM: exit 0, before the forwarder goes away.
		p.stop()
	})

	// Nothing ever listens: serve gives up after the wait, with a message
	// naming the setting, and exits 1.
	t.Run("gives-up", func(t *testing.T) {
		t.Parallel()
		port := closedport.New(t).Number()
		start := time.Now()
		p := startWaiting(t, bin, "--database-url", "postgres://postgres@127.0.0.1:"+port+"/test?sslmode=disable",
			"--database-wait", "2500ms")
		checkWaiting(t, p)
		select {
		case <-p.done:
		case <-time.After(e2eWait):
			t.Fatalf("serve still runs %s after a 2.5s --database-wait", e2eWait)
		}
		took := time.Since(start)
		if ee, ok := p.err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
			t.Fatalf("exit: %v, want status 1", p.err)
		}
		if took < 2500*time.Millisecond {
			t.Errorf("gave up after %s, before the wait ended", took)
		}
		out := p.out.String()
		if want := "not reachable within --database-wait 2.5s"; !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
		checkAttemptLogs(t, waitLine(t, p, "database not reachable yet, retrying", 2))
		rec := waitLine(t, p, "giving up on the database", 1)[0]
		if rec["level"] != "ERROR" || rec["attempts"].(float64) < 3 || !strings.Contains(fmt.Sprint(rec["error"]), "refused") {
			t.Errorf("giving up: %v", rec)
		}
	})

	// SIGTERM while waiting: serve stops at once, exit 0.
	t.Run("sigterm", func(t *testing.T) {
		t.Parallel()
		p := startWaiting(t, bin, "--database-url", "postgres://postgres@127.0.0.1:"+closedport.New(t).Number()+"/test?sslmode=disable")
		waitLine(t, p, "database not reachable yet, retrying", 1)
		start := time.Now()
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case <-p.done:
		case <-time.After(e2eWait):
			t.Fatalf("serve did not stop within %s of SIGTERM", e2eWait)
		}
		if p.err != nil {
			t.Fatalf("exit after SIGTERM: %v, want 0", p.err)
		}
		if took := time.Since(start); took > 3*time.Second {
			t.Errorf("stopped %s after SIGTERM", took)
		}
		waitLine(t, p, "redrive stopped", 1)
	})

	// --database-wait 0: one attempt.
	t.Run("no-wait", func(t *testing.T) {
		t.Parallel()
		stdout, stderr, err := runRedrive(t, bin, "serve", "--addr", "127.0.0.1:0", "--database-wait", "0",
			"--database-url", "postgres://postgres@127.0.0.1:"+closedport.New(t).Number()+"/test?sslmode=disable")
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
			t.Fatalf("exit: %v, want status 1\n%s%s", err, stdout, stderr)
		}
		if want := "(not retried: --database-wait is 0)"; !bytes.Contains(stderr, []byte(want)) {
			t.Errorf("output lacks %q:\n%s", want, stderr)
		}
		if bytes.Contains(stderr, []byte("retrying")) {
			t.Errorf("retried:\n%s", stderr)
		}
	})

	// An error that waiting cannot fix ends the wait at once: the server
	// refuses the role.
	t.Run("unknown-role", func(t *testing.T) {
		t.Parallel()
		pu, err := url.Parse(pgURL(t))
		if err != nil {
			t.Fatal(err)
		}
		pu.User = url.User("redrive_no_such_role")
		start := time.Now()
		stdout, stderr, err := runRedrive(t, bin, "serve", "--addr", "127.0.0.1:0", "--database-url", pu.String())
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
			t.Fatalf("exit: %v, want status 1\n%s%s", err, stdout, stderr)
		}
		if took := time.Since(start); took > 10*time.Second {
			t.Errorf("took %s to give up", took)
		}
		for _, want := range []string{"redrive_no_such_role", "not retried: waiting would not fix this"} {
			if !bytes.Contains(stderr, []byte(want)) {
				t.Errorf("output lacks %q:\n%s", want, stderr)
			}
		}
		if bytes.Contains(stderr, []byte("retrying")) {
			t.Errorf("retried:\n%s", stderr)
		}
	})
}
