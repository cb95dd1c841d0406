package httpjob

import (
	"net/netip"

	"github.com/redrivehq/redrive/internal/netguard"
)

// CheckAddr applies the SSRF guard of a handler with opts to one address.
func CheckAddr(opts Options, a netip.Addr) error { return New(opts).guard.CheckAddr(a) }

// EmbeddedIPv4 returns the IPv4 addresses an IPv6 address carries.
func EmbeddedIPv4(a netip.Addr) []netip.Addr {
	var out []netip.Addr
	for _, e := range netguard.EmbeddedIPv4(a.Unmap()) {
		out = append(out, e.V4)
	}
	return out
}
