package netguard_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/redrivehq/redrive/internal/netguard"
)

func check(opts netguard.Options, a netip.Addr) error { return netguard.New(opts).CheckAddr(a) }

func embedded(a netip.Addr) []netip.Addr {
	var out []netip.Addr
	for _, e := range netguard.EmbeddedIPv4(a.Unmap()) {
		out = append(out, e.V4)
	}
	return out
}

// TestEmbeddedIPv4Refused: an IPv6 address that carries a refused IPv4
// address (IPv4-compatible, IPv4-mapped, NAT64, 6to4, Teredo) is refused
// as that address would be, in either mode.
func TestEmbeddedIPv4Refused(t *testing.T) {
	for _, c := range []struct {
		addr         string
		blockPrivate bool // refused only when private addresses are blocked
	}{
		{"::169.254.169.254", false},
		{"::ffff:169.254.169.254", false},
		{"64:ff9b::a9fe:a9fe", false},
		{"64:ff9b::169.254.169.254", false},
		{"64:ff9b:1:a9fe:a9:fe00::", false}, // local-use NAT64, /48 layout: 169.254.169.254
		{"2002:a9fe:a9fe::1", false},
		{"2001:0:a9fe:a9fe::1", false},                  // Teredo server 169.254.169.254
		{"2001:0:4136:e378:8000:63bf:5601:5601", false}, // Teredo client, obfuscated: 169.254.169.254
		{"::10.0.0.1", true},
		{"64:ff9b::7f00:1", true},
		{"64:ff9b::a00:1", true},
		{"2002:7f00:1::", true},
		{"::ffff:127.0.0.1", true},
	} {
		a := netip.MustParseAddr(c.addr)
		err := check(netguard.Options{BlockPrivate: true}, a)
		var be *netguard.BlockedError
		if !errors.As(err, &be) {
			t.Errorf("%s with private addresses blocked: %v, want refused", c.addr, err)
		}
		err = check(netguard.Options{}, a)
		if c.blockPrivate && err != nil {
			t.Errorf("%s with private addresses allowed: %v, want allowed", c.addr, err)
		}
		if !c.blockPrivate && !errors.As(err, &be) {
			t.Errorf("%s with private addresses allowed: %v, want refused (link-local or metadata)", c.addr, err)
		}
	}
	for _, ok := range []string{"64:ff9b::808:808", "2002:808:808::1", "2606:4700:4700::1111", "::8.8.8.8", "2001:0:808:808::f7f7:f7f7"} {
		if err := check(netguard.Options{BlockPrivate: true}, netip.MustParseAddr(ok)); err != nil {
			t.Errorf("%s: %v, want allowed (a public IPv4 inside)", ok, err)
		}
	}
}

// FuzzCheckAddr: any 16 bytes: the guard never panics, and an address
// whose embedded IPv4 is refused is refused.
func FuzzCheckAddr(f *testing.F) {
	for _, s := range []string{"::169.254.169.254", "64:ff9b::a9fe:a9fe", "2002:a9fe:a9fe::", "2001:0:4136:e378:8000:63bf:5601:5601", "::1", "::"} {
		b := netip.MustParseAddr(s).As16()
		f.Add(b[:])
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if len(raw) != 16 {
			return
		}
		a := netip.AddrFrom16([16]byte(raw))
		for _, opts := range []netguard.Options{{}, {BlockPrivate: true}, {AllowLinkLocal: true}} {
			err := check(opts, a)
			for _, v4 := range embedded(a) {
				if check(opts, v4) != nil && err == nil {
					t.Fatalf("%s embeds %s, which is refused, but it is allowed (%+v)", a, v4, opts)
				}
			}
		}
	})
}

// TestRefusalNamesSetting: a refusal names the setting that allows the
// address, and the guard's name prefixes it.
func TestRefusalNamesSetting(t *testing.T) {
	for _, c := range []struct {
		opts netguard.Options
		addr string
		want string
	}{
		{netguard.Options{}, "169.254.169.254", "netguard: refusing to connect to 169.254.169.254: cloud metadata address (allowed by AllowLinkLocal)"},
		{netguard.Options{Name: "download"}, "fe80::1", "download: refusing to connect to fe80::1: link-local address (allowed by AllowLinkLocal)"},
		{netguard.Options{BlockPrivate: true}, "10.0.0.1", "allowed by BlockPrivate false"},
		{netguard.Options{AllowLinkLocalSetting: "--http-allow-link-local"}, "169.254.1.1", "allowed by --http-allow-link-local"},
		{netguard.Options{BlockPrivate: true, AllowPrivateSetting: "--http-allow-private"}, "127.0.0.1", "allowed by --http-allow-private"},
		{netguard.Options{BlockPrivate: true}, "0.0.0.0", "unspecified address"},
		{netguard.Options{BlockPrivate: true}, "100.64.1.1", "private address"},
		{netguard.Options{}, "239.1.2.3", "multicast address"},
	} {
		err := check(c.opts, netip.MustParseAddr(c.addr))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s with %+v: %v, want %q", c.addr, c.opts, err, c.want)
		}
	}
}

func TestCheckHost(t *testing.T) {
	g := netguard.New(netguard.Options{})
	for _, h := range []string{"metadata.google.internal", "METADATA.GOOGLE.INTERNAL.", "169.254.169.254", "fd00:ec2::254"} {
		if err := g.CheckHost(h); err == nil {
			t.Errorf("%s allowed, want refused", h)
		}
	}
	for _, h := range []string{"example.com", "127.0.0.1", "localhost"} {
		if err := g.CheckHost(h); err != nil {
			t.Errorf("%s: %v, want allowed", h, err)
		}
	}
	if err := netguard.New(netguard.Options{AllowLinkLocal: true}).CheckHost("metadata.google.internal"); err != nil {
		t.Errorf("metadata host with AllowLinkLocal: %v", err)
	}
}

// TestDialedAddressChecked: a host name that resolves to a refused address
// is refused at dial time, before any request is sent.
func TestDialedAddressChecked(t *testing.T) {
	var hit atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hit.Store(true) }))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	c := netguard.New(netguard.Options{BlockPrivate: true}).NewClient(nil)
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, "http://localhost:"+port+"/", nil)
	_, err := c.Do(req)
	var be *netguard.BlockedError
	if !errors.As(err, &be) || hit.Load() {
		t.Fatalf("err %v, request sent %v; want a refusal before any request", err, hit.Load())
	}
}

// TestRedirectChecked: a redirect to a refused host is not followed, and
// redirects are bounded.
func TestRedirectChecked(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/meta" {
			http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/", http.StatusFound)
			return
		}
		http.Redirect(w, r, "/loop", http.StatusFound)
	}))
	defer srv.Close()
	c := netguard.New(netguard.Options{Name: "download"}).NewClient(nil)
	_, err := c.Get(srv.URL + "/meta")
	var be *netguard.BlockedError
	if !errors.As(err, &be) || be.Addr != "169.254.169.254" {
		t.Fatalf("redirect to metadata: %v, want refused", err)
	}
	_, err = c.Get(srv.URL + "/loop")
	if err == nil || !strings.Contains(err.Error(), "download: stopped after 10 redirects") {
		t.Fatalf("redirect loop: %v", err)
	}
}

func TestControlRejectsNonIP(t *testing.T) {
	if err := netguard.New(netguard.Options{}).Control("tcp", "not-an-address", nil); err == nil {
		t.Fatal("Control accepted a non-IP address")
	}
}

// TestLocalNAT64Layouts: under the local-use NAT64 prefix 64:ff9b:1::/48
// a network may use any RFC 6052 prefix length from /48 to /96: the IPv4
// address carried by each layout is checked, so the metadata address
// under RFC 8215's /96 (64:ff9b:1::a9fe:a9fe) is refused by default.
func TestLocalNAT64Layouts(t *testing.T) {
	for _, addr := range []string{
		"64:ff9b:1::a9fe:a9fe",           // /96
		"64:ff9b:1::169.254.169.254",     // /96, written with a dotted quad
		"64:ff9b:1:0:a9:fea9:fe00:0",     // /64
		"64:ff9b:1:a9:fe:a9fe::",         // /56
		"64:ff9b:1:a9fe:a9:fe00::",       // /48
		"64:ff9b:1:ffff:ffff::a9fe:a9fe", // /96 under another /96 of the /48
	} {
		if err := check(netguard.Options{}, netip.MustParseAddr(addr)); err == nil {
			t.Errorf("%s allowed by default, want refused (it carries 169.254.169.254)", addr)
		}
	}
	if err := check(netguard.Options{BlockPrivate: true}, netip.MustParseAddr("64:ff9b:1::a00:1")); err == nil {
		t.Error("64:ff9b:1::a00:1 (10.0.0.1 under a /96) allowed with private addresses blocked")
	}
	if err := check(netguard.Options{BlockPrivate: true}, netip.MustParseAddr("64:ff9b:1::808:808")); err != nil {
		t.Errorf("64:ff9b:1::808:808 (8.8.8.8 under a /96): %v, want allowed", err)
	}
}

// TestBlockPrivateReserved: with private addresses blocked, addresses no
// public service has are refused too: "this network" 0.0.0.0/8, the
// reserved 240.0.0.0/4, the broadcast address, the deprecated site-local
// fec0::/10 and IPv4-translated ::ffff:0:a.b.c.d (whose IPv4 address is
// checked in any mode).
func TestBlockPrivateReserved(t *testing.T) {
	for _, addr := range []string{"0.1.2.3", "0.0.0.1", "240.0.0.1", "255.255.255.255", "250.1.2.3",
		"fec0::1", "feff::1", "::ffff:0:808:808", "::ffff:0:0a00:1"} {
		err := check(netguard.Options{BlockPrivate: true}, netip.MustParseAddr(addr))
		var be *netguard.BlockedError
		if !errors.As(err, &be) || !strings.Contains(err.Error(), "BlockPrivate false") {
			t.Errorf("%s with private addresses blocked: %v, want refused naming the setting", addr, err)
		}
	}
	if err := check(netguard.Options{}, netip.MustParseAddr("::ffff:0:a9fe:a9fe")); err == nil {
		t.Error("::ffff:0:a9fe:a9fe (169.254.169.254, IPv4-translated) allowed by default")
	}
	for _, ok := range []string{"1.2.3.4", "223.255.255.254", "2606:4700:4700::1111"} {
		if err := check(netguard.Options{BlockPrivate: true}, netip.MustParseAddr(ok)); err != nil {
			t.Errorf("%s: %v, want allowed", ok, err)
		}
	}
}

// TestCrossOriginRedirectDropsCredentials: a redirect to another origin
// (host, port, or a downgrade to http) gets none of the request's headers
// but a short list of harmless ones: X-Api-Key and the like, which Go
// forwards (it drops only Authorization, Cookie and WWW-Authenticate, and
// those only for another domain), never reach it. A redirect within the
// origin, or from http to https on the same host, keeps them.
func TestCrossOriginRedirectDropsCredentials(t *testing.T) {
	var got atomic.Value
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got.Store(r.Header.Clone()) }))
	defer other.Close()
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/away":
			http.Redirect(w, r, other.URL+"/landed", http.StatusFound)
		case "/home":
			http.Redirect(w, r, "/landed", http.StatusFound)
		default:
			got.Store(r.Header.Clone())
		}
	}))
	defer origin.Close()
	c := netguard.New(netguard.Options{}).NewClient(nil)
	get := func(u string) http.Header {
		got.Store(http.Header{})
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, u, nil)
		req.Header.Set("X-Api-Key", "secret")
		req.Header.Set("Authorization", "Bearer secret")
		req.Header.Set("Cookie", "s=secret")
		req.Header.Set("Private-Token", "secret")
		req.Header.Set("User-Agent", "ua/1")
		req.Header.Set("Accept", "text/csv")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return got.Load().(http.Header)
	}
	h := get(origin.URL + "/away")
	for _, k := range []string{"X-Api-Key", "Authorization", "Cookie", "Private-Token"} {
		if v := h.Get(k); v != "" {
			t.Errorf("cross-origin redirect: %s: %q forwarded", k, v)
		}
	}
	if h.Get("User-Agent") != "ua/1" || h.Get("Accept") != "text/csv" {
		t.Errorf("cross-origin redirect: harmless headers lost: %v", h)
	}
	h = get(origin.URL + "/home")
	if h.Get("X-Api-Key") != "secret" || h.Get("Authorization") != "Bearer secret" {
		t.Errorf("same-origin redirect: credentials dropped: %v", h)
	}
	for _, c := range []struct {
		from, to string
		same     bool
	}{
		{"https://a.example/x", "https://a.example:443/y", true},
		{"http://a.example/x", "https://a.example/y", true}, // an upgrade
		{"https://a.example/x", "http://a.example/y", false},
		{"https://a.example/x", "https://b.a.example/y", false},
		{"https://a.example/x", "https://A.EXAMPLE/y", true},
		{"https://a.example/x", "https://a.example:8443/y", false},
		{"http://a.example:8080/x", "https://a.example:8443/y", false},
	} {
		if got := netguard.SameOrigin(mustURL(c.from), mustURL(c.to)); got != c.same {
			t.Errorf("SameOrigin(%s, %s) = %v, want %v", c.from, c.to, got, c.same)
		}
	}
}

func mustURL(s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		panic(err)
	}
	return u
}

// TestCrossOriginRedirectDropsReferer: Go's client sets Referer on a
// redirect to the whole previous URL, query included, and the query
// often carries a credential (access_token=, a signature): a redirect to
// another origin must not carry it there. A Referer the request set
// itself is the caller's and is kept.
func TestCrossOriginRedirectDropsReferer(t *testing.T) {
	var got atomic.Value
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got.Store(r.Header.Get("Referer")) }))
	defer other.Close()
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+"/landed", http.StatusFound)
	}))
	defer origin.Close()
	c := netguard.New(netguard.Options{}).NewClient(nil)
	get := func(explicit string) string {
		got.Store("")
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, origin.URL+"/file?access_token=secret", nil)
		if explicit != "" {
			req.Header.Set("Referer", explicit)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return got.Load().(string)
	}
	if ref := get(""); strings.Contains(ref, "secret") {
		t.Errorf("cross-origin redirect: Referer %q carries the first URL's query", ref)
	}
	if ref := get("https://portal.example/"); ref != "https://portal.example/" {
		t.Errorf("cross-origin redirect: the request's own Referer became %q", ref)
	}
}

// TestPodIdentityAgentRefused: the EKS Pod Identity Agent serves a pod's
// AWS credentials on 169.254.170.23 and, over IPv6, on fd00:ec2::23 (not
// link-local): both are refused by default, as fd00:ec2::254 (IMDS) is.
func TestPodIdentityAgentRefused(t *testing.T) {
	for _, s := range []string{"169.254.170.23", "fd00:ec2::23"} {
		var be *netguard.BlockedError
		if err := check(netguard.Options{}, netip.MustParseAddr(s)); !errors.As(err, &be) {
			t.Errorf("%s: %v, want refused (a cloud credentials endpoint)", s, err)
		}
		if err := check(netguard.Options{AllowLinkLocal: true}, netip.MustParseAddr(s)); err != nil {
			t.Errorf("%s with AllowLinkLocal: %v, want allowed", s, err)
		}
	}
}
