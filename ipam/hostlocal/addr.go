package hostlocal

import (
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/netip"
	"strings"
)

// The wire types below parse text with package net on purpose: the
// reference decodes into net.IP / net.IPNet, and reusing the same parsers is
// the cheapest way to accept and reject exactly the same spellings (leading
// zeros in a prefix length, zones, IPv4-mapped forms). Everything after
// decoding works on net/netip values.

// ipNet mirrors the reference's types.IPNet: a CIDR kept with its host bits
// and with the mask width the text implied, so an IPv4-mapped IPv6 subnet
// ("::ffff:10.0.0.0/120") can still be told apart and rejected.
type ipNet struct {
	set      bool
	addr     netip.Addr // IPv4 for IPv4 text; IPv6 text keeps its 4in6 form
	bits     int        // prefix length as written
	maskBits int        // 32 or 128: the width of the mask the text implied
}

// UnmarshalJSON accepts what types.IPNet accepts. Like the reference it is
// also called for JSON null, which then fails as an empty CIDR.
func (n *ipNet) UnmarshalJSON(data []byte) error {
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return err
	}
	v, err := parseCIDR(s)
	if err != nil {
		return err
	}
	*n = v
	return nil
}

// parseCIDR is net.ParseCIDR keeping the host bits, with its error text
// ("invalid CIDR address: <text>").
func parseCIDR(s string) (ipNet, error) {
	ip, nw, err := net.ParseCIDR(s)
	if err != nil {
		return ipNet{}, err
	}
	ones, size := nw.Mask.Size()
	a := netip.AddrFrom16([16]byte(ip.To16()))
	if size == 32 {
		a = a.Unmap()
	}
	return ipNet{set: true, addr: a, bits: ones, maskBits: size}, nil
}

// prefix returns the CIDR as the reference prints it: an IPv4-mapped
// address is shown as IPv4 with the mask's last 32 bits (so
// "::ffff:10.0.0.0/120" reads "10.0.0.0/24" and a shorter mask reads /0).
func (n ipNet) prefix() netip.Prefix {
	if n.addr.Is4In6() {
		return netip.PrefixFrom(n.addr.Unmap(), max(n.bits-96, 0))
	}
	return netip.PrefixFrom(n.addr, n.bits)
}

// toAddr converts a decoded net.IP (nil = absent) to its canonical netip
// form: IPv4-mapped addresses become IPv4, like the reference's
// canonicalizeIP.
func toAddr(ip net.IP) netip.Addr {
	if len(ip) == 0 {
		return netip.Addr{}
	}
	a, ok := netip.AddrFromSlice(ip)
	if !ok {
		return netip.Addr{}
	}
	return a.Unmap()
}

// parseRequested parses a requested address the way the reference's
// ip.ParseIP does: "<ip>" or "<ip>/<len>" (the length is checked, then
// ignored). IPv4-mapped addresses become IPv4.
func parseRequested(s string) (netip.Addr, bool) {
	var ip net.IP
	if strings.Contains(s, "/") {
		var err error
		if ip, _, err = net.ParseCIDR(s); err != nil {
			return netip.Addr{}, false
		}
	} else if ip = net.ParseIP(s); ip == nil {
		return netip.Addr{}, false
	}
	a := toAddr(ip)
	return a, a.IsValid()
}

// reqIP is one entry of args.cni.ips / runtimeConfig.ips.
type reqIP struct{ addr netip.Addr }

// UnmarshalText has the reference's error text: no colon after "address".
func (r *reqIP) UnmarshalText(data []byte) error {
	a, ok := parseRequested(string(data))
	if !ok {
		return fmt.Errorf("invalid IP address %s", data)
	}
	r.addr = a
	return nil
}

// lastAddr is the reference's default rangeEnd: the last address of the
// subnet, minus one for IPv4 (the broadcast address).
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	hostBits := p.Addr().BitLen() - p.Bits()
	for i := len(b) - 1; i >= 0 && hostBits > 0; i-- {
		n := min(hostBits, 8)
		b[i] |= byte(1<<n - 1)
		hostBits -= n
	}
	a, _ := netip.AddrFromSlice(b)
	if a.Is4() {
		a = a.Prev()
	}
	return a
}

// span counts the addresses of [lo, hi] (same family, lo <= hi), saturating
// at math.MaxUint64: STATUS only needs to compare it with a file count, and
// a 128-bit range must never be walked or overflow.
func span(lo, hi netip.Addr) uint64 {
	l, h := lo.As16(), hi.As16()
	lh, ll := be64(l[:8]), be64(l[8:])
	hh, hl := be64(h[:8]), be64(h[8:])
	dl := hl - ll
	dh := hh - lh
	if hl < ll {
		dh--
	}
	if dh != 0 || dl == math.MaxUint64 {
		return math.MaxUint64
	}
	return dl + 1
}

func be64(b []byte) uint64 {
	var v uint64
	for _, c := range b {
		v = v<<8 | uint64(c)
	}
	return v
}
