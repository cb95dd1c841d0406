package httpjob_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/httpjob"
)

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
		err := httpjob.CheckAddr(httpjob.Options{BlockPrivate: true}, a)
		var be *httpjob.BlockedError
		if !errors.As(err, &be) {
			t.Errorf("%s with private addresses blocked: %v, want refused", c.addr, err)
		}
		err = httpjob.CheckAddr(httpjob.Options{}, a)
		if c.blockPrivate && err != nil {
			t.Errorf("%s with private addresses allowed: %v, want allowed", c.addr, err)
		}
		if !c.blockPrivate && !errors.As(err, &be) {
			t.Errorf("%s with private addresses allowed: %v, want refused (link-local or metadata)", c.addr, err)
		}
	}
	for _, ok := range []string{"64:ff9b::808:808", "2002:808:808::1", "2606:4700:4700::1111", "::8.8.8.8", "2001:0:808:808::f7f7:f7f7"} {
		if err := httpjob.CheckAddr(httpjob.Options{BlockPrivate: true}, netip.MustParseAddr(ok)); err != nil {
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
		for _, opts := range []httpjob.Options{{}, {BlockPrivate: true}, {AllowLinkLocal: true}} {
			err := httpjob.CheckAddr(opts, a)
			for _, v4 := range httpjob.EmbeddedIPv4(a) {
				if httpjob.CheckAddr(opts, v4) != nil && err == nil {
					t.Fatalf("%s embeds %s, which is refused, but it is allowed (%+v)", a, v4, opts)
				}
			}
		}
	})
}

// TestRefusalNamesSetting: a refusal names the setting that allows the
// address: the Options field by default, the program's own name for it
// when given (serve's flags).
func TestRefusalNamesSetting(t *testing.T) {
	for _, c := range []struct {
		opts httpjob.Options
		addr string
		want string
	}{
		{httpjob.Options{}, "169.254.169.254", "allowed by httpjob.Options.AllowLinkLocal"},
		{httpjob.Options{}, "fe80::1", "allowed by httpjob.Options.AllowLinkLocal"},
		{httpjob.Options{BlockPrivate: true}, "10.0.0.1", "allowed by httpjob.Options.BlockPrivate false"},
		{httpjob.Options{AllowLinkLocalSetting: "--http-allow-link-local"}, "169.254.1.1", "allowed by --http-allow-link-local"},
		{httpjob.Options{BlockPrivate: true, AllowPrivateSetting: "--http-allow-private"}, "127.0.0.1", "allowed by --http-allow-private"},
	} {
		err := httpjob.CheckAddr(c.opts, netip.MustParseAddr(c.addr))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s with %+v: %v, want %q", c.addr, c.opts, err, c.want)
		}
	}
}

// TestRedirectKeepsCredentialsHome: an http job's own credential header
// (X-Api-Key) reaches the host the job names, not the other host a
// redirect sends it to.
func TestRedirectKeepsCredentialsHome(t *testing.T) {
	var key atomic.Value
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key.Store(r.Header.Get("X-Api-Key"))
	}))
	defer other.Close()
	home := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Api-Key") != "secret" {
			t.Errorf("the named host got X-Api-Key %q", r.Header.Get("X-Api-Key"))
		}
		http.Redirect(w, r, other.URL+"/elsewhere", http.StatusTemporaryRedirect)
	}))
	defer home.Close()
	raw, _ := json.Marshal(map[string]any{"url": home.URL, "headers": map[string]string{"X-Api-Key": "secret"}})
	if err := httpjob.New(httpjob.Options{}).Handle(context.Background(), &redrive.Job{ID: 1, Payload: raw}); err != nil {
		t.Fatal(err)
	}
	if k, _ := key.Load().(string); k != "" {
		t.Fatalf("the redirect's host got X-Api-Key %q", k)
	}
}
