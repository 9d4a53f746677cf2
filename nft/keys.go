package nft

import "net/netip"

// Helpers for building set keys and data, which nf_tables lays out as the
// concatenation of their fields, each padded to a 32-bit register.

// Concat joins key fields.
func Concat(parts ...[]byte) []byte {
	var out []byte
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// Pad extends a field to a multiple of 4 bytes, as in a concatenated key.
func Pad(b []byte) []byte {
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// LastAddr is the highest address of p: the end of p's range in an
// interval set.
func LastAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}
