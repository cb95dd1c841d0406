// Package netguard is the SSRF guard of redrive's built-in HTTP job kinds
// (httpjob's "http", download's "download"): it refuses link-local and
// cloud-metadata addresses (169.254.0.0/16, fe80::/10, 169.254.169.254,
// fd00:ec2::254, metadata.google.internal, ...) unless allowed, and, when
// asked, loopback, private, shared and unspecified addresses.
//
// The check runs on the address actually dialed (a net.Dialer Control
// hook, after name resolution), so a host name that resolves to a refused
// address is refused too, and on every redirect; an IPv6 address that
// carries an IPv4 address (IPv4-compatible, NAT64, 6to4, Teredo) is
// refused as that IPv4 address would be. A client built by the guard uses
// no proxy: a proxy would dial on its behalf and escape the check.
//
// Refusals name the setting that allows the address, as the program's
// users set it (an Options field, or a command-line flag).
package netguard

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/redrivehq/redrive/internal/httpreq"
)

// MaxRedirects bounds the redirects a guarded client follows in one
// request.
const MaxRedirects = 10

// Options configure a Guard. The zero value allows loopback and private
// addresses and refuses link-local and metadata addresses.
type Options struct {
	// Name prefixes the guard's error messages ("httpjob", "download").
	// Default "netguard".
	Name string
	// BlockPrivate refuses loopback (127.0.0.0/8, ::1), private
	// (10/8, 172.16/12, 192.168/16, fc00::/7), shared (100.64/10),
	// unspecified (0.0.0.0, ::), reserved (0.0.0.0/8, 240.0.0.0/4 with
	// 255.255.255.255), site-local (fec0::/10) and IPv4-translated
	// (::ffff:0:0:0/96) addresses.
	BlockPrivate bool
	// AllowLinkLocal allows link-local addresses (169.254.0.0/16,
	// fe80::/10) and the cloud metadata endpoints.
	AllowLinkLocal bool
	// AllowLinkLocalSetting and AllowPrivateSetting name, in refusals, the
	// setting that allows link-local and private addresses (default
	// "AllowLinkLocal" and "BlockPrivate false").
	AllowLinkLocalSetting string
	AllowPrivateSetting   string
}

// Guard checks addresses against its Options. It is safe for concurrent
// use.
type Guard struct {
	opts Options
}

// New returns a guard with opts, its empty names defaulted.
func New(opts Options) *Guard {
	if opts.Name == "" {
		opts.Name = "netguard"
	}
	if opts.AllowLinkLocalSetting == "" {
		opts.AllowLinkLocalSetting = "AllowLinkLocal"
	}
	if opts.AllowPrivateSetting == "" {
		opts.AllowPrivateSetting = "BlockPrivate false"
	}
	return &Guard{opts: opts}
}

// Options returns the guard's options, defaults filled in.
func (g *Guard) Options() Options { return g.opts }

// BlockedError is the error of a request to an address the guard refuses.
// Callers report it as a permanent failure.
type BlockedError struct {
	// Addr is the refused address (an IP, or a host name known to serve
	// cloud metadata).
	Addr string
	// Why says which rule refused it.
	Why string

	by string // the guard's Name, prefixing the message
}

func (e *BlockedError) Error() string {
	prefix := ""
	if e.by != "" {
		prefix = e.by + ": "
	}
	return fmt.Sprintf("%srefusing to connect to %s: %s", prefix, e.Addr, e.Why)
}

func (g *Guard) blocked(addr, why string) *BlockedError {
	return &BlockedError{Addr: addr, Why: why, by: g.opts.Name}
}

// NewTransport returns an HTTP transport whose dialer checks every address
// it dials, with no proxy. The caller may adjust its other fields (but not
// Proxy or DialContext) before use.
func (g *Guard) NewTransport() *http.Transport {
	dialer := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, Control: g.Control}
	return &http.Transport{
		// No proxy: a proxy would dial on our behalf and escape the
		// address check.
		Proxy:                  nil,
		DialContext:            dialer.DialContext,
		ForceAttemptHTTP2:      true,
		MaxIdleConns:           100,
		MaxIdleConnsPerHost:    10,
		IdleConnTimeout:        90 * time.Second,
		TLSHandshakeTimeout:    10 * time.Second,
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: 64 << 10,
	}
}

// NewClient returns an HTTP client on tr (a new NewTransport when nil)
// that checks redirects with CheckRedirect.
func (g *Guard) NewClient(tr *http.Transport) *http.Client {
	if tr == nil {
		tr = g.NewTransport()
	}
	return &http.Client{Transport: tr, CheckRedirect: g.CheckRedirect}
}

// CheckRedirect bounds redirects to MaxRedirects and checks the host of
// each (its address is checked again at dial time, like the first
// request's). A redirect to another origin than the first request's
// (SameOrigin) keeps only the headers in RedirectHeaders: credentials a
// job set in headers of its own (X-Api-Key, Private-Token, ...), which
// Go's client forwards, never reach a host the job did not name. It has
// the signature of http.Client.CheckRedirect.
func (g *Guard) CheckRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= MaxRedirects {
		return fmt.Errorf("%s: stopped after %d redirects", g.opts.Name, MaxRedirects)
	}
	if err := g.CheckHost(req.URL.Hostname()); err != nil {
		return err
	}
	if len(via) > 0 && !SameOrigin(via[0].URL, req.URL) {
		for k := range req.Header {
			if !RedirectHeaders[http.CanonicalHeaderKey(k)] {
				delete(req.Header, k)
			}
		}
		// Go sets Referer to the previous URL, query included, and a
		// query often carries a credential (access_token=, a signature):
		// another origin gets only a Referer the request set itself.
		if own := via[0].Header.Get("Referer"); own != "" {
			req.Header.Set("Referer", own)
		} else {
			req.Header.Del("Referer")
		}
	}
	return nil
}

// RedirectHeaders are the request headers a redirect to another origin
// keeps: none carries a credential. (Referer is kept only when the first
// request set it: the one Go's client sets names the previous URL, query
// included.)
var RedirectHeaders = map[string]bool{
	"Accept": true, "Accept-Encoding": true, "Accept-Language": true, "Cache-Control": true, "Pragma": true,
	"User-Agent": true, "Referer": true, "Range": true, "If-Range": true, "If-Match": true, "If-None-Match": true,
	"If-Modified-Since": true, "If-Unmodified-Since": true, "Content-Type": true, "Content-Language": true,
}

// SameOrigin reports whether a redirect from a to b stays with the
// origin a names: the same host (case ignored) and port (the scheme's
// default when absent) and scheme, or an upgrade from http to https on
// the same host with default ports.
func SameOrigin(a, b *url.URL) bool {
	if !strings.EqualFold(a.Hostname(), b.Hostname()) {
		return false
	}
	port := func(u *url.URL) string {
		if p := u.Port(); p != "" {
			return p
		}
		if strings.EqualFold(u.Scheme, "https") {
			return "443"
		}
		return "80"
	}
	as, bs := strings.ToLower(a.Scheme), strings.ToLower(b.Scheme)
	switch {
	case as == bs:
		return port(a) == port(b)
	case as == "http" && bs == "https":
		return port(a) == "80" && port(b) == "443"
	}
	return false
}

// Control runs after name resolution, on the address about to be dialed;
// it has the signature of net.Dialer.Control.
func (g *Guard) Control(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return g.blocked(address, "not an IP address")
	}
	return g.CheckAddr(ap.Addr())
}

// metadataHosts are host names of cloud metadata services.
var metadataHosts = map[string]bool{
	"metadata.google.internal": true, "metadata.goog": true, "metadata": true,
	"instance-data": true, "instance-data.ec2.internal": true,
	"metadata.azure.com": true, "metadata.packet.net": true,
}

// metadataAddrs are cloud metadata addresses that are not link-local.
var metadataAddrs = map[netip.Addr]bool{
	netip.MustParseAddr("fd00:ec2::254"):   true, // AWS IMDS over IPv6
	netip.MustParseAddr("fd00:ec2::23"):    true, // AWS EKS Pod Identity Agent over IPv6 (169.254.170.23)
	netip.MustParseAddr("100.100.100.200"): true, // Alibaba Cloud
	netip.MustParseAddr("168.63.129.16"):   true, // Azure wire server
	netip.MustParseAddr("192.0.0.192"):     true, // Oracle Cloud
}

var (
	sharedSpace = netip.MustParsePrefix("100.64.0.0/10")
	imds        = netip.MustParseAddr("169.254.169.254")
	thisNetwork = netip.MustParsePrefix("0.0.0.0/8")   // RFC 791: "this network"; never a destination
	reserved4   = netip.MustParsePrefix("240.0.0.0/4") // RFC 1112's class E, and the broadcast address
	siteLocal   = netip.MustParsePrefix("fec0::/10")   // RFC 3879 deprecated it; still routed locally
)

// CheckHost refuses, before any connection, a URL host that is a metadata
// name or a refused IP literal. Host names are checked again, resolved,
// at dial time (Control).
func (g *Guard) CheckHost(host string) error {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if !g.opts.AllowLinkLocal && metadataHosts[host] {
		return g.blocked(host, "cloud metadata host (allowed by "+g.opts.AllowLinkLocalSetting+")")
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return g.CheckAddr(a)
	}
	return nil
}

// CheckAddr applies the address rules to a resolved address, and to the
// IPv4 address an IPv6 address embeds (IPv4-compatible, NAT64, 6to4,
// Teredo), which a translator or relay would reach on its behalf. Its
// error is a *BlockedError.
func (g *Guard) CheckAddr(a netip.Addr) error {
	a = a.Unmap().WithZone("")
	for _, e := range EmbeddedIPv4(a) {
		if err := g.CheckAddr(e.V4); err != nil {
			var be *BlockedError
			if errors.As(err, &be) {
				return g.blocked(a.String(), fmt.Sprintf("%s address embedding %s: %s", e.Kind, e.V4, be.Why))
			}
			return err
		}
	}
	if !g.opts.AllowLinkLocal {
		switch {
		case metadataAddrs[a] || a == imds:
			return g.blocked(a.String(), "cloud metadata address (allowed by "+g.opts.AllowLinkLocalSetting+")")
		case a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast():
			return g.blocked(a.String(), "link-local address (allowed by "+g.opts.AllowLinkLocalSetting+")")
		}
	}
	if g.opts.BlockPrivate {
		switch {
		case a.IsLoopback():
			return g.blocked(a.String(), "loopback address (private addresses are blocked; allowed by "+g.opts.AllowPrivateSetting+")")
		case a.IsPrivate() || sharedSpace.Contains(a):
			return g.blocked(a.String(), "private address (private addresses are blocked; allowed by "+g.opts.AllowPrivateSetting+")")
		case a.IsUnspecified():
			return g.blocked(a.String(), "unspecified address (private addresses are blocked; allowed by "+g.opts.AllowPrivateSetting+")")
		case thisNetwork.Contains(a) || reserved4.Contains(a):
			return g.blocked(a.String(), "reserved IPv4 address (private addresses are blocked; allowed by "+g.opts.AllowPrivateSetting+")")
		case siteLocal.Contains(a):
			return g.blocked(a.String(), "site-local address (private addresses are blocked; allowed by "+g.opts.AllowPrivateSetting+")")
		case ipv4Translated.Contains(a):
			return g.blocked(a.String(), "IPv4-translated address, for a local translator (private addresses are blocked; allowed by "+
				g.opts.AllowPrivateSetting+")")
		}
	}
	if a.IsMulticast() {
		return g.blocked(a.String(), "multicast address")
	}
	return nil
}

// Embedded is an IPv4 address found inside an IPv6 one.
type Embedded struct {
	V4   netip.Addr
	Kind string // "NAT64", "NAT64 /96" (a local-use layout), "6to4", "Teredo server", "Teredo client", "IPv4-compatible", "IPv4-translated"
}

var (
	nat64WellKnown = netip.MustParsePrefix("64:ff9b::/96")
	nat64Local     = netip.MustParsePrefix("64:ff9b:1::/48")
	sixToFour      = netip.MustParsePrefix("2002::/16")
	teredo         = netip.MustParsePrefix("2001::/32")
	ipv4Compatible = netip.MustParsePrefix("::/96")
	ipv4Translated = netip.MustParsePrefix("::ffff:0:0:0/96") // RFC 2765's SIIT
)

// EmbeddedIPv4 returns the IPv4 addresses an IPv6 address carries: the
// last 32 bits of an IPv4-compatible (::/96, but :: and ::1),
// IPv4-translated (::ffff:0:0:0/96) or well-known NAT64 (64:ff9b::/96)
// address; for a local-use NAT64 address (64:ff9b:1::/48, RFC 8215),
// whose network may use any of RFC 6052's prefix lengths from /48 to
// /96, the address of each layout (/48: bits 48-63 and 72-87; /56: bits
// 56-63 and 72-95; /64: bits 72-103; /96: the last 32 bits), less those
// in 0.0.0.0/8 unless all are (a /96 address read with a shorter layout
// gives 0.x.x.x, which no translator forwards to); bits 16-47 of a 6to4
// address (2002::/16); and a Teredo address's server (bits 32-63) and
// obfuscated client (the last 32 bits, inverted). IPv4-mapped
// ::ffff:0:0/96 addresses must be unmapped before.
func EmbeddedIPv4(a netip.Addr) []Embedded {
	if !a.Is6() {
		return nil
	}
	b := a.As16()
	v4 := func(p0, p1, p2, p3 byte) netip.Addr { return netip.AddrFrom4([4]byte{p0, p1, p2, p3}) }
	switch {
	case nat64WellKnown.Contains(a):
		return []Embedded{{v4(b[12], b[13], b[14], b[15]), "NAT64"}}
	case nat64Local.Contains(a):
		all := []Embedded{
			{v4(b[12], b[13], b[14], b[15]), "NAT64 /96"},
			{v4(b[9], b[10], b[11], b[12]), "NAT64 /64"},
			{v4(b[7], b[9], b[10], b[11]), "NAT64 /56"},
			{v4(b[6], b[7], b[9], b[10]), "NAT64 /48"},
		}
		var out []Embedded
		for _, e := range all {
			if !thisNetwork.Contains(e.V4) {
				out = append(out, e)
			}
		}
		if len(out) == 0 {
			return all
		}
		return out
	case ipv4Translated.Contains(a):
		return []Embedded{{v4(b[12], b[13], b[14], b[15]), "IPv4-translated"}}
	case sixToFour.Contains(a):
		return []Embedded{{v4(b[2], b[3], b[4], b[5]), "6to4"}}
	case teredo.Contains(a):
		return []Embedded{{v4(b[4], b[5], b[6], b[7]), "Teredo server"},
			{v4(^b[12], ^b[13], ^b[14], ^b[15]), "Teredo client"}}
	case ipv4Compatible.Contains(a) && !a.IsUnspecified() && !a.IsLoopback():
		return []Embedded{{v4(b[12], b[13], b[14], b[15]), "IPv4-compatible"}}
	}
	return nil
}

// ParseURL parses the URL a job asks for and checks it as a request
// would be checked before anything is sent: present, http or https, with
// a host the guard allows (when the host is a literal address; a name is
// checked on the address dialed). Its errors start with "url" and show
// the URL without credentials or query.
func (g *Guard) ParseURL(raw string) (*url.URL, error) {
	if raw == "" {
		return nil, errors.New("url is required")
	}
	u, err := url.Parse(raw)
	if err != nil {
		// url.Parse's error quotes the URL whole, password and query
		// too: only what it found wrong is shown.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("url: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("url %q: the scheme must be http or https", httpreq.Redact(u))
	}
	if u.Hostname() == "" {
		return nil, fmt.Errorf("url %q has no host", httpreq.Redact(u))
	}
	if err := g.CheckHost(u.Hostname()); err != nil {
		return nil, fmt.Errorf("url %q: %w", httpreq.Redact(u), err)
	}
	return u, nil
}
