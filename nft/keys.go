package nft

import (
	"net/netip"
	"slices"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"
)

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

// IfnameLen is IFNAMSIZ: nft compares interface names as 16-byte strings
// padded with NULs.
const IfnameLen = unix.IFNAMSIZ

// IfnameKey is an interface name as the kernel compares it, in a set key
// or a rule's comparison: IfnameLen bytes, NUL-padded.
func IfnameKey(name string) []byte {
	k := make([]byte, IfnameLen)
	copy(k, name)
	return k
}

// Pad extends a field to a multiple of 4 bytes, as in a concatenated key.
func Pad(b []byte) []byte {
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// PrefixMask is the n-byte mask of a prefix of bits bits (255.255.255.0
// for 24 of 4 bytes), for matching an address masked to a prefix length.
func PrefixMask(bits, n int) []byte {
	m := make([]byte, n)
	for i := 0; i < bits && i < 8*n; i++ {
		m[i/8] |= 0x80 >> (i % 8)
	}
	return m
}

// UniqueElements drops repeated elements (a key both wanted and recorded
// is looked up twice).
func UniqueElements(els []Element) []Element {
	var out []Element
	for _, e := range els {
		if !slices.ContainsFunc(out, func(o Element) bool { return SameElement(o, e) }) {
			out = append(out, e)
		}
	}
	return out
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

// SameAddress reports whether e, an element of an address set s, is for
// the same container address as one of want. Such sets hold either the
// address itself, or — in interval sets — the pair (subnet . address),
// whose second half is the address. Components use it to let the newest
// attachment of an address take over an element a missed DEL left behind.
func SameAddress(s *nftables.Set, e Element, want []Element) bool {
	addrOf := func(k []byte) []byte {
		if s.Interval {
			return k[len(k)/2:]
		}
		return k
	}
	for _, w := range want {
		if string(addrOf(e.Key)) == string(addrOf(w.Key)) {
			return true
		}
	}
	return false
}
