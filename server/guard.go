package server

import (
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

// loginThrottle limits sign-in attempts per client address: a burst of
// loginBurst, then one every loginEvery.
type loginThrottle struct {
	mu      sync.Mutex
	clients map[string]*bucket
	now     func() time.Time
}

const (
	loginBurst   = 5
	loginEvery   = 12 * time.Second // 5 a minute
	maxThrottled = 10000            // client addresses remembered
)

type bucket struct {
	tokens float64
	at     time.Time
}

// allow takes a token for the client, or says how long until one is free.
func (t *loginThrottle) allow(client string) (bool, time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	if t.clients == nil {
		t.clients = map[string]*bucket{}
	}
	b := t.clients[client]
	if b == nil {
		if len(t.clients) >= maxThrottled {
			// Forget the full buckets first: they throttle nobody.
			for k, v := range t.clients {
				if v.tokens+now.Sub(v.at).Seconds()/loginEvery.Seconds() >= loginBurst {
					delete(t.clients, k)
				}
			}
		}
		b = &bucket{tokens: loginBurst, at: now}
		t.clients[client] = b
	}
	b.tokens = min(loginBurst, b.tokens+now.Sub(b.at).Seconds()/loginEvery.Seconds())
	b.at = now
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	wait := time.Duration((1 - b.tokens) * float64(loginEvery))
	return false, wait
}

// clientAddr is the address a request came from, without its port.
func clientAddr(r *http.Request) string {
	if h, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return h
	}
	return r.RemoteAddr
}
