package hostlocal

import (
	"net/netip"
	"strings"
)

// Range is one validated range: addresses RangeStart..RangeEnd (inclusive)
// of Subnet, handed out with Subnet's prefix length and Gateway.
type Range struct {
	Subnet     netip.Prefix // network address, no host bits
	RangeStart netip.Addr
	RangeEnd   netip.Addr
	Gateway    netip.Addr // inside Subnet, not necessarily inside [RangeStart, RangeEnd]
}

// RangeSet is a non-empty list of same-family, non-overlapping ranges; ADD
// takes one address from every set.
type RangeSet []Range

// Contains reports whether addr is in the subnet and inside [start, end].
// A bound of the other family does not exclude anything, as in the
// reference (its comparison answers "incomparable", which passes the end
// test); this only matters while an explicit rangeEnd is being validated.
func (r *Range) Contains(addr netip.Addr) bool {
	addr = addr.Unmap()
	if !r.Subnet.Contains(addr) {
		return false
	}
	if r.RangeStart.IsValid() && (r.RangeStart.BitLen() != addr.BitLen() || addr.Less(r.RangeStart)) {
		return false
	}
	if r.RangeEnd.IsValid() && r.RangeEnd.BitLen() == addr.BitLen() && r.RangeEnd.Less(addr) {
		return false
	}
	return true
}

// String is the reference's "<start>-<end>".
func (r *Range) String() string {
	return r.RangeStart.String() + "-" + r.RangeEnd.String()
}

// overlaps compares effective [start, end] intervals, not subnets: two
// halves of one /24 do not overlap.
func (r *Range) overlaps(o *Range) bool {
	if r.RangeStart.Is4() != o.RangeStart.Is4() {
		return false
	}
	return r.Contains(o.RangeStart) || r.Contains(o.RangeEnd) ||
		o.Contains(r.RangeStart) || o.Contains(r.RangeEnd)
}

// String joins the ranges with ",", as error messages print a set.
func (s RangeSet) String() string {
	parts := make([]string, len(s))
	for i := range s {
		parts[i] = s[i].String()
	}
	return strings.Join(parts, ",")
}

// RangeFor returns the range of s containing addr, or nil.
func (s RangeSet) RangeFor(addr netip.Addr) *Range {
	for i := range s {
		if s[i].Contains(addr) {
			return &s[i]
		}
	}
	return nil
}

// Contains reports whether any range of s contains addr.
func (s RangeSet) Contains(addr netip.Addr) bool { return s.RangeFor(addr) != nil }
