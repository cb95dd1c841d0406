package server

import (
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"
)

// What keeps a web page in the operator's browser from driving the API:
//
//   - The Host check (Options.AllowedHosts): a DNS-rebinding page reaches
//     the server under its own host name, which is not one of the names
//     the server answers to, so it gets 421 and reads nothing.
//   - Cross-origin protection: a request that changes something (any
//     method but GET, HEAD and OPTIONS) is refused with 403 when the
//     browser says it comes from another site (Sec-Fetch-Site) or
//     another origin (Origin). Clients that are not browsers send neither
//     header and are not affected.
//   - JSON bodies must say Content-Type: application/json (415 otherwise),
//     which a page cannot send cross-origin without a CORS preflight that
//     this server never grants.

// hostGuard answers 421 Misdirected Request to a request whose Host
// header is none of the allowed names; an empty list allows any host.
func hostGuard(allowed []string, next http.Handler) http.Handler {
	if len(allowed) == 0 {
		return next
	}
	names := make(map[string]bool, len(allowed))
	for _, h := range allowed {
		names[normalizeHost(h)] = true
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !names[normalizeHost(hostOnly(r.Host))] {
			writeError(w, &apiError{status: http.StatusMisdirectedRequest, code: "host_not_allowed",
				msg: "this server does not answer to the host name " + quoteClip(r.Host) +
					"; if that is how you reach it, start it with --allowed-host naming it"})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// HostGuard is the Host check of Options.AllowedHosts as a middleware,
// for handlers served beside the API (such as /metrics).
func HostGuard(allowed []string, next http.Handler) http.Handler { return hostGuard(allowed, next) }

// hostOnly strips the port from a Host header value.
func hostOnly(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return strings.TrimSuffix(strings.TrimPrefix(hostport, "["), "]")
}

// normalizeHost lower-cases a host name, drops a trailing dot and the
// brackets of an IPv6 literal, and writes IP addresses canonically.
func normalizeHost(h string) string {
	h = strings.TrimSuffix(strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")), ".")
	if ip, err := netip.ParseAddr(h); err == nil {
		return ip.Unmap().String()
	}
	return h
}

func quoteClip(s string) string {
	if len(s) > 100 {
		s = s[:100] + "…"
	}
	return "\"" + strings.ToValidUTF8(s, "?") + "\""
}

// crossOriginGuard refuses state-changing requests that a browser marks as
// coming from another origin, with the API's JSON error.
func crossOriginGuard(next http.Handler) http.Handler {
	p := http.NewCrossOriginProtection()
	p.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, &apiError{status: http.StatusForbidden, code: "cross_origin",
			msg: "a request from another site or origin may not change anything here (Origin " + quoteClip(r.Header.Get("Origin")) +
				", Sec-Fetch-Site " + quoteClip(r.Header.Get("Sec-Fetch-Site")) + ")"})
	}))
	return p.Handler(next)
}

// jsonContentType reports a request body that does not say it is JSON.
func jsonContentType(r *http.Request) *apiError {
	ct := r.Header.Get("Content-Type")
	mt, _, err := mime.ParseMediaType(ct)
	if err == nil && mt == "application/json" {
		return nil
	}
	msg := "send the body as JSON with Content-Type: application/json"
	if ct != "" {
		msg += " (got " + quoteClip(ct) + ")"
	}
	return &apiError{status: http.StatusUnsupportedMediaType, code: "unsupported_media_type", msg: msg}
}

// LoopbackHosts are the names a server listening on loopback answers to
// (with the listen address's own host name or address added by the
// caller).
var LoopbackHosts = []string{"localhost", "127.0.0.1", "::1"}

// loginThrottle limits guesses of the token per client (clientKey):
// failed sign-ins and failed bearer checks take from one bucket per
// client, a burst of loginBurst, then one every loginEvery. Once a
// client's bucket is empty its next guesses are refused unchecked, right
// or wrong, so that throttling tells a guesser nothing.
//
// It remembers at most maxThrottled clients; beyond them the clients it
// has no bucket for share one overflow bucket, so that many addresses
// neither grow the memory without bound nor get a burst each. A client
// that sent the right token within knownFor (at most maxThrottled such
// clients are kept) gets a bucket of its own even then: a guesser with
// many addresses, which never sent the right token, cannot lock it out
// by filling the table and draining the overflow bucket. Being known
// buys no guesses: a known client's wrong guesses count as any other's.
type loginThrottle struct {
	mu       sync.Mutex
	clients  map[string]*bucket
	overflow bucket
	// known is when each client last sent the right token.
	known map[string]time.Time
	// purged is when the full buckets were last forgotten.
	purged time.Time
	now    func() time.Time
}

const (
	loginBurst   = 5
	loginEvery   = 12 * time.Second // 5 a minute
	maxThrottled = 10000            // clients remembered
	// knownFor is how long a client that sent the right token keeps a
	// bucket of its own when the table is full.
	knownFor = 24 * time.Hour
)

// bucket is a client's guesses: tokens left at the time at. The zero
// bucket is full (it has been refilling since the zero time).
type bucket struct {
	tokens float64
	at     time.Time
}

// refill brings b's tokens up to now.
func (b *bucket) refill(now time.Time) {
	b.tokens = min(loginBurst, b.tokens+now.Sub(b.at).Seconds()/loginEvery.Seconds())
	b.at = now
}

// bucketFor returns client's bucket, or the overflow bucket for a client
// it has none for once it remembers maxThrottled. With create, a client
// without one gets a new full bucket while there is room. t.mu is held.
func (t *loginThrottle) bucketFor(client string, now time.Time, create bool) *bucket {
	if t.clients == nil {
		t.clients = map[string]*bucket{}
	}
	if b := t.clients[client]; b != nil {
		return b
	}
	if len(t.clients) >= maxThrottled && now.Sub(t.purged) >= loginEvery {
		// Forget the full buckets first: they throttle nobody. At most
		// once per refill period, so that a flood of new addresses does
		// not make every guess walk the whole table.
		t.purged = now
		for k, v := range t.clients {
			if v.tokens+now.Sub(v.at).Seconds()/loginEvery.Seconds() >= loginBurst {
				delete(t.clients, k)
			}
		}
	}
	if len(t.clients) >= maxThrottled && !t.isKnown(client, now) {
		return &t.overflow
	}
	b := &bucket{}
	if create {
		t.clients[client] = b
	}
	return b
}

// allow takes a token for the client, or says how long until one is free.
func (t *loginThrottle) allow(client string) (bool, time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	b := t.bucketFor(client, now, true)
	b.refill(now)
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	wait := time.Duration((1 - b.tokens) * float64(loginEvery))
	return false, wait
}

// guess runs check, the constant-time comparison of a token a client
// presented, unless the client's guesses are used up: then allowed is
// false, wait says how long until the next one, and check is not run. A
// failed check takes one guess; a right one takes nothing, so a client
// that knows the token is never slowed down. The check runs under the
// throttle's lock, so that concurrent guesses cannot outrun the count.
func (t *loginThrottle) guess(client string, check func() bool) (allowed, right bool, wait time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	b := t.bucketFor(client, now, false)
	b.refill(now)
	if b.tokens < 1 {
		return false, false, time.Duration((1 - b.tokens) * float64(loginEvery))
	}
	if check() {
		t.remember(client, now)
		return true, true, 0
	}
	b = t.bucketFor(client, now, true)
	b.refill(now)
	b.tokens--
	return true, false, 0
}

// isKnown reports whether client sent the right token within knownFor.
// t.mu is held.
func (t *loginThrottle) isKnown(client string, now time.Time) bool {
	at, ok := t.known[client]
	return ok && now.Sub(at) < knownFor
}

// remember notes that client sent the right token, while fewer than
// maxThrottled clients are known (forgetting those known for longer than
// knownFor first). Only a client with the token gets here, so a guesser
// cannot fill it. t.mu is held.
func (t *loginThrottle) remember(client string, now time.Time) {
	if t.known == nil {
		t.known = map[string]time.Time{}
	}
	if _, ok := t.known[client]; !ok && len(t.known) >= maxThrottled {
		for k, at := range t.known {
			if now.Sub(at) >= knownFor {
				delete(t.known, k)
			}
		}
		if len(t.known) >= maxThrottled {
			return
		}
	}
	t.known[client] = now
}

// clientAddr is the address a request came from, without its port.
func clientAddr(r *http.Request) string {
	if h, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return h
	}
	return r.RemoteAddr
}

// trustedProxy reports whether ip is one of the trusted proxies.
func (a *api) trustedProxy(ip netip.Addr) bool {
	ip = ip.Unmap()
	for _, p := range a.trusted {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// maxForwardedHops bounds how many X-Forwarded-For entries clientKey
// walks.
const maxForwardedHops = 20

// clientKey names the client a request came from, for the throttle: its
// address; behind a trusted proxy, the address the proxies say they
// forwarded for (the last X-Forwarded-For entry that is not itself a
// trusted proxy), so that the clients behind a proxy do not share its
// bucket; an IPv6 address by its /64, which one client usually holds
// whole.
func (a *api) clientKey(r *http.Request) string {
	ip, err := netip.ParseAddr(clientAddr(r))
	if err != nil {
		return clientAddr(r)
	}
	ip = ip.Unmap()
	if len(a.trusted) > 0 && a.trustedProxy(ip) {
		ip = forwardedFor(ip, r.Header.Values("X-Forwarded-For"), a.trustedProxy)
	}
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.String()
	}
	return ip.String()
}

// auditRemote is where a request came from, as the audit log records
// it: the peer's address; behind a trusted proxy, the client the proxies
// say they forwarded for (as clientKey finds it, the whole address),
// then the proxy it came through: "203.0.113.7 (via 10.0.0.2:51522)".
func (a *api) auditRemote(r *http.Request) string {
	ip, err := netip.ParseAddr(clientAddr(r))
	if err != nil || len(a.trusted) == 0 {
		return r.RemoteAddr
	}
	ip = ip.Unmap()
	if !a.trustedProxy(ip) {
		return r.RemoteAddr
	}
	client := forwardedFor(ip, r.Header.Values("X-Forwarded-For"), a.trustedProxy)
	if client == ip {
		return r.RemoteAddr
	}
	return client.String() + " (via " + r.RemoteAddr + ")"
}

// forwardedFor walks the X-Forwarded-For values from the right (the
// entry the nearest proxy added) while the entries are trusted proxies,
// and returns the first that is not: the client. A malformed entry ends
// the walk at the last address known good, as does the end of the list.
func forwardedFor(peer netip.Addr, values []string, trusted func(netip.Addr) bool) netip.Addr {
	hops := 0
	for i := len(values) - 1; i >= 0; i-- {
		entries := strings.Split(values[i], ",")
		for j := len(entries) - 1; j >= 0; j-- {
			if hops++; hops > maxForwardedHops {
				return peer
			}
			ip, ok := forwardedAddr(entries[j])
			if !ok {
				return peer
			}
			peer = ip.Unmap()
			if !trusted(peer) {
				return peer
			}
		}
	}
	return peer
}

// forwardedAddr reads one X-Forwarded-For entry: an address, with spaces
// around it, and perhaps a port, as some proxies write it
// ("203.0.113.5:4711", "[2001:db8::5]:4711"), or an IPv6 address in
// brackets.
func forwardedAddr(entry string) (netip.Addr, bool) {
	entry = strings.TrimSpace(entry)
	if ip, err := netip.ParseAddr(entry); err == nil {
		return ip, true
	}
	if ap, err := netip.ParseAddrPort(entry); err == nil {
		return ap.Addr(), true
	}
	if strings.HasPrefix(entry, "[") && strings.HasSuffix(entry, "]") {
		if ip, err := netip.ParseAddr(entry[1 : len(entry)-1]); err == nil && ip.Is6() {
			return ip, true
		}
	}
	return netip.Addr{}, false
}

// throttleLog writes the throttle's refusals at most once a minute per
// message, with how many it left out since the line before: a refused
// guess costs the guesser nothing, so it must not cost the server a log
// line each.
type throttleLog struct {
	mu     sync.Mutex
	last   map[string]time.Time
	missed map[string]int
}

// warn logs msg with args, unless it logged msg less than a minute ago.
func (t *throttleLog) warn(l *slog.Logger, msg string, args ...any) {
	t.mu.Lock()
	now := time.Now()
	if t.last == nil {
		t.last, t.missed = map[string]time.Time{}, map[string]int{}
	}
	if at, ok := t.last[msg]; ok && now.Sub(at) < time.Minute {
		t.missed[msg]++
		t.mu.Unlock()
		return
	}
	missed := t.missed[msg]
	t.last[msg], t.missed[msg] = now, 0
	t.mu.Unlock()
	l.Warn(msg, append(args, "refused_since_last_line", missed)...)
}
