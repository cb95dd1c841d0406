package server

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/store/sqlite"
)

// serveFrom serves one request to h as if it came from remote (an
// address with a port), with headers given in pairs.
func serveFrom(h http.Handler, remote, method, path string, headers ...string) resp {
	req := httptest.NewRequest(method, path, nil)
	req.RemoteAddr = remote
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	b, _ := io.ReadAll(rec.Result().Body)
	return resp{status: rec.Code, header: rec.Header(), body: b}
}

const throttleToken = "0123456789abcdef-token"

// TestBearerGuessesThrottled: wrong bearer tokens count against the same
// throttle as the sign-in: after five, a client is answered 429 with a
// Retry-After, unchecked (the right token too, so that the answer tells a
// guesser nothing), on /v1 and on what RequireToken guards, and its
// sign-in is throttled too; other clients, and clients that send the
// right token, are not slowed down.
func TestBearerGuessesThrottled(t *testing.T) {
	e := newEnv(t, Options{Token: throttleToken})
	metrics := e.api.RequireToken(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "metrics\n") }))
	const guesser = "198.51.100.7:4000"
	unauthorized, throttled := 0, 0
	for i := range 200 {
		path, h := "/v1/stats", http.Handler(e.api)
		if i%2 == 1 {
			path, h = "/metrics", metrics
		}
		r := serveFrom(h, guesser, "GET", path, "Authorization", fmt.Sprintf("Bearer guess-%d", i))
		switch r.status {
		case 401:
			unauthorized++
		case 429:
			throttled++
			if r.header.Get("Retry-After") == "" {
				t.Fatalf("429 without Retry-After: %s", r.body)
			}
			wantErr(t, r, 429, "too_many_attempts", "")
		default:
			t.Fatalf("guess %d: status %d: %s", i, r.status, r.body)
		}
	}
	if unauthorized != loginBurst || throttled != 200-loginBurst {
		t.Fatalf("200 wrong guesses: %d answered 401, %d 429; want %d and the rest", unauthorized, throttled, loginBurst)
	}
	wantErr(t, serveFrom(e.api, guesser, "GET", "/v1/stats", "Authorization", "Bearer "+throttleToken), 429, "too_many_attempts", "")
	if r := serveFrom(metrics, guesser, "GET", "/metrics", "Authorization", "Bearer "+throttleToken); r.status != 429 {
		t.Errorf("/metrics with the right token from a throttled client: %d", r.status)
	}
	form := httptest.NewRequest("POST", "/ui/login", strings.NewReader(url.Values{"token": {throttleToken}}.Encode()))
	form.RemoteAddr = guesser
	form.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	rec := httptest.NewRecorder()
	e.api.ServeHTTP(rec, form)
	if rec.Code != 429 {
		t.Errorf("sign-in from a client throttled for bearer guesses: %d, want 429", rec.Code)
	}

	// A client that knows the token is never throttled, however many
	// requests it sends at once; a missing token is no guess.
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 50 {
				r := serveFrom(e.api, "192.0.2.10:5000", "GET", "/v1/stats", "Authorization", "Bearer "+throttleToken)
				if r.status != 200 {
					t.Errorf("goroutine %d request %d with the right token: %d", g, i, r.status)
					return
				}
			}
		})
	}
	wg.Wait()
	for range 20 {
		wantErr(t, serveFrom(e.api, "192.0.2.11:5000", "GET", "/v1/stats"), 401, "unauthorized", "")
	}
	if r := serveFrom(metrics, "192.0.2.11:5000", "GET", "/metrics", "Authorization", "Bearer "+throttleToken); r.status != 200 {
		t.Errorf("/metrics with the right token: %d %s", r.status, r.body)
	}
}

// exhaust sends wrong tokens from remote (with headers) until the
// throttle answers 429, and fails unless that takes exactly loginBurst.
func exhaust(t *testing.T, h http.Handler, remote string, headers ...string) {
	t.Helper()
	for i := range loginBurst {
		r := serveFrom(h, remote, "GET", "/v1/stats", append([]string{"Authorization", "Bearer wrong"}, headers...)...)
		if r.status != 401 {
			t.Fatalf("wrong guess %d from %s %v: %d, want 401", i+1, remote, headers, r.status)
		}
	}
	if r := serveFrom(h, remote, "GET", "/v1/stats", append([]string{"Authorization", "Bearer wrong"}, headers...)...); r.status != 429 {
		t.Fatalf("guess after the burst from %s %v: %d, want 429", remote, headers, r.status)
	}
}

// TestThrottleClientKey: behind a trusted proxy each client has its own
// bucket (X-Forwarded-For, the rightmost entry that is not a trusted
// proxy), so one guesser cannot lock everyone out, nor escape by
// prepending entries; without a trusted proxy the header is ignored, so
// it cannot be used to escape; IPv6 clients are counted by /64.
func TestThrottleClientKey(t *testing.T) {
	proxy := netip.MustParsePrefix("10.0.0.0/8")
	e := newEnv(t, Options{Token: throttleToken, TrustedProxies: []netip.Prefix{proxy}})
	exhaust(t, e.api, "10.1.2.3:80", "X-Forwarded-For", "203.0.113.5")
	// Another client behind the same proxy is not locked out.
	if r := serveFrom(e.api, "10.1.2.3:80", "GET", "/v1/stats", "Authorization", "Bearer wrong", "X-Forwarded-For", "203.0.113.6"); r.status != 401 {
		t.Errorf("another client behind the proxy: %d, want 401", r.status)
	}
	if r := serveFrom(e.api, "10.1.2.3:80", "GET", "/v1/stats", "Authorization", "Bearer "+throttleToken, "X-Forwarded-For", "203.0.113.6"); r.status != 200 {
		t.Errorf("another client behind the proxy with the token: %d, want 200", r.status)
	}
	// The guesser cannot escape by sending an entry of its own, which
	// the proxy keeps to the left of the address it saw, nor through a
	// second trusted proxy.
	for _, xff := range []string{"192.0.2.1, 203.0.113.5", "203.0.113.5, 10.9.9.9", "garbage, 203.0.113.5"} {
		if r := serveFrom(e.api, "10.1.2.3:80", "GET", "/v1/stats", "Authorization", "Bearer wrong", "X-Forwarded-For", xff); r.status != 429 {
			t.Errorf("X-Forwarded-For %q from the throttled client: %d, want 429", xff, r.status)
		}
	}
	// Not through a trusted proxy: the header is not believed.
	exhaust(t, e.api, "198.51.100.1:80", "X-Forwarded-For", "203.0.113.50")
	if r := serveFrom(e.api, "198.51.100.1:80", "GET", "/v1/stats", "Authorization", "Bearer wrong", "X-Forwarded-For", "203.0.113.51"); r.status != 429 {
		t.Errorf("a client that is no proxy, with another X-Forwarded-For: %d, want 429", r.status)
	}
	// IPv6: one /64 is one client.
	exhaust(t, e.api, "[2001:db8:1:2::1]:80")
	if r := serveFrom(e.api, "[2001:db8:1:2:ffff::9]:80", "GET", "/v1/stats", "Authorization", "Bearer wrong"); r.status != 429 {
		t.Errorf("another address of the same /64: %d, want 429", r.status)
	}
	if r := serveFrom(e.api, "[2001:db8:1:3::1]:80", "GET", "/v1/stats", "Authorization", "Bearer wrong"); r.status != 401 {
		t.Errorf("an address of another /64: %d, want 401", r.status)
	}
}

// TestThrottleBounded: however many addresses guess, the throttle
// remembers at most maxThrottled of them, and the addresses beyond share
// one bucket, so that fresh addresses do not buy fresh guesses.
func TestThrottleBounded(t *testing.T) {
	now := time.Now()
	th := loginThrottle{now: func() time.Time { return now }}
	wrong := func() bool { return false }
	for i := range 2 * maxThrottled {
		th.guess(fmt.Sprintf("client-%d", i), wrong)
	}
	if n := len(th.clients); n > maxThrottled {
		t.Fatalf("the throttle remembers %d clients, more than %d", n, maxThrottled)
	}
	if allowed, _, _ := th.guess("yet-another", wrong); allowed {
		t.Error("a new client got a guess once the table was full of throttled clients")
	}
	// A remembered client keeps its own bucket: four guesses left.
	if allowed, right, _ := th.guess("client-0", func() bool { return true }); !allowed || !right {
		t.Error("a remembered client with guesses left was refused")
	}
	// Once the buckets refill, the table makes room again.
	now = now.Add(loginBurst * loginEvery)
	if allowed, _, _ := th.guess("yet-another", wrong); !allowed {
		t.Error("a new client was refused after every bucket refilled")
	}
	if _, ok := th.clients["yet-another"]; !ok {
		t.Error("the full buckets were not forgotten to make room")
	}
}

// FuzzForwardedFor feeds arbitrary X-Forwarded-For values to the walk
// that finds the client behind trusted proxies: it never panics, returns
// the peer or an address written in the values, and, when no address is
// a trusted proxy, the rightmost entry when it is an address (else the
// peer); a server with no trusted proxy ignores the header.
func FuzzForwardedFor(f *testing.F) {
	for _, s := range [][2]string{
		{"203.0.113.5", ""}, {"192.0.2.1, 203.0.113.5", "10.0.0.1"}, {"garbage", "10.0.0.2, ::1"},
		{"", ""}, {",,,", " , "}, {"[::1]", "2001:db8::1%eth0"}, {strings.Repeat("10.0.0.1,", 30), "203.0.113.9"},
	} {
		f.Add(s[0], s[1])
	}
	peer := netip.MustParseAddr("10.0.0.254")
	inTen := func(ip netip.Addr) bool { return netip.MustParsePrefix("10.0.0.0/8").Contains(ip) }
	none := &api{}
	f.Fuzz(func(t *testing.T, a, b string) {
		values := []string{a, b}
		got := forwardedFor(peer, values, inTen)
		if got != peer && !strings.Contains(a+","+b, got.String()) && !strings.Contains(strings.ToLower(a+","+b), got.StringExpanded()) {
			// An address in the values may be written another way
			// (IPv4-mapped, zeros); parse them all to be sure.
			found := false
			for _, v := range values {
				for _, e := range strings.Split(v, ",") {
					if ip, ok := forwardedAddr(e); ok && ip.Unmap() == got {
						found = true
					}
				}
			}
			if !found {
				t.Fatalf("forwardedFor(%q) = %v: neither the peer nor in the values", values, got)
			}
		}
		entries := strings.Split(b, ",")
		last := strings.TrimSpace(entries[len(entries)-1])
		want := peer
		if ip, ok := forwardedAddr(last); ok {
			want = ip.Unmap()
		}
		if got := forwardedFor(peer, values, func(netip.Addr) bool { return false }); got != want {
			t.Fatalf("no trusted proxy: forwardedFor(%q) = %v, want %v", values, got, want)
		}
		req := httptest.NewRequest("GET", "/", nil)
		req.RemoteAddr = "198.51.100.3:80"
		plain := none.clientKey(req)
		req.Header.Set("X-Forwarded-For", a)
		if k := none.clientKey(req); k != plain {
			t.Fatalf("without trusted proxies X-Forwarded-For %q changed the client from %s to %s", a, plain, k)
		}
	})
}

// unwritableStore is a store whose last write failed with a reason that
// names a file.
type unwritableStore struct{ *sqlite.Store }

func (unwritableStore) WriteHealth() error {
	return errors.New("sqlite: write /srv/secret/redrive.db: disk I/O error")
}

// TestReadyzReasonNeedsToken: /readyz, which needs no token, says the
// store cannot write without saying why, unless the request carries the
// token (or the server has none).
func TestReadyzReasonNeedsToken(t *testing.T) {
	for _, token := range []string{throttleToken, ""} {
		c := redrive.NewClient(unwritableStore{openStore(t)}, redrive.ClientOptions{Logger: quiet})
		api := New(Options{Client: c, Token: token, Logger: quiet})
		t.Cleanup(func() { _ = api.Close() })
		r := serveFrom(api, "192.0.2.1:1", "GET", "/readyz")
		wantErr(t, r, 503, "not_writable", "")
		if leaked := strings.Contains(string(r.body), "/srv/secret"); leaked != (token == "") {
			t.Errorf("token %q: /readyz without it: %s", token, r.body)
		}
		if token == "" {
			continue
		}
		r = serveFrom(api, "192.0.2.1:1", "GET", "/readyz", "Authorization", "Bearer "+token)
		wantErr(t, r, 503, "not_writable", "")
		if !strings.Contains(string(r.body), "/srv/secret") {
			t.Errorf("/readyz with the token: %s, want the reason", r.body)
		}
		r = serveFrom(api, "192.0.2.1:1", "GET", "/readyz", "Authorization", "Bearer wrong")
		if strings.Contains(string(r.body), "/srv/secret") {
			t.Errorf("/readyz with a wrong token: %s", r.body)
		}
	}
}
