package httpjob

import "net/netip"

// CheckAddr applies the SSRF guard of a handler with opts to one address.
func CheckAddr(opts Options, a netip.Addr) error { return New(opts).checkAddr(a) }

// EmbeddedIPv4 returns the IPv4 addresses an IPv6 address carries.
func EmbeddedIPv4(a netip.Addr) []netip.Addr {
	var out []netip.Addr
	for _, e := range embeddedIPv4(a.Unmap()) {
		out = append(out, e.v4)
	}
	return out
}
