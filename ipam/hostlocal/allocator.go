package hostlocal

import (
	"fmt"
	"net/netip"

	"github.com/nftcni/nftcni/cni"
)

// allocation is one ADD's request for one range set.
type allocation struct {
	set       RangeSet
	idx       int // position in the assembled list: keys last_reserved_ip.<idx>
	id        string
	ifname    string
	requested netip.Addr // invalid: allocate dynamically
	logf      func(format string, args ...any)
}

// allocate takes one address from the set under the store lock (held for
// this set only, as in the reference) and returns it with the prefix length
// and gateway of its range. Errors carry the
// reference's texts without the "failed to allocate for range <i>: "
// prefix, which the caller adds.
func (s *store) allocate(a allocation) (ipc *cni.IPConfig, err error) {
	err = s.withLock(func() error {
		l, err := s.scan()
		if err != nil {
			return err
		}
		if a.requested.IsValid() {
			ipc, err = s.allocateRequested(a)
		} else {
			ipc, err = s.allocateNext(a, l)
		}
		return err
	})
	return ipc, err
}

// allocateRequested reserves the address the caller asked for. Unlike the
// dynamic path there is no duplicate guard: a container may obtain a
// second address from a set by requesting it (reference behaviour).
func (s *store) allocateRequested(a allocation) (*cni.IPConfig, error) {
	ip := a.requested
	r := a.set.RangeFor(ip)
	if r == nil { // the caller only passes addresses the set contains
		return nil, fmt.Errorf("%s not in range set %s", ip, a.set)
	}
	if ip == r.Gateway {
		return nil, fmt.Errorf("requested ip %s is subnet's gateway", ip)
	}
	ok, err := s.reserve(a, ip)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("requested IP address %s is not available in range set %s", ip, a.set)
	}
	return ipConfig(r, ip), nil
}

// allocateNext is the round-robin walk. Names already present in the
// snapshot are skipped without a syscall, so the walk costs at most one
// step per existing file before it reaches a free address: a large IPv6
// range is never walked address by address.
func (s *store) allocateNext(a allocation, l listing) (*cni.IPConfig, error) {
	for _, owned := range s.ownedBy(l, a.id, a.ifname) {
		if a.set.Contains(owned) {
			return nil, fmt.Errorf("%s has been allocated to %s, duplicate allocation is not allowed", owned, a.id)
		}
	}
	last, err := s.lastReserved(a.idx)
	if err != nil {
		a.logf("Error retrieving last reserved ip: %v", err)
	}
	it := newIter(a.set, last)
	var res *reservation
	defer func() {
		if res != nil {
			res.discard()
		}
	}()
	for {
		ip, r, ok := it.next()
		if !ok {
			return nil, fmt.Errorf("no IP addresses available in range set: %s", a.set)
		}
		if l.names[ip.String()] {
			continue
		}
		if res == nil {
			if res, err = s.newReservation(a.id, a.ifname); err != nil {
				return nil, err
			}
		}
		taken, err := res.take(ip, a.idx)
		if err != nil {
			return nil, err
		}
		if taken {
			return ipConfig(r, ip), nil
		}
	}
}

// reserve claims one address and records it as the set's last reserved one.
func (s *store) reserve(a allocation, ip netip.Addr) (bool, error) {
	res, err := s.newReservation(a.id, a.ifname)
	if err != nil {
		return false, err
	}
	defer res.discard()
	return res.take(ip, a.idx)
}

func ipConfig(r *Range, ip netip.Addr) *cni.IPConfig {
	return &cni.IPConfig{Address: netip.PrefixFrom(ip, r.Subnet.Bits()), Gateway: r.Gateway}
}

// iter walks a range set the way the reference's RangeIter does: start
// just after the last reserved address (or at the first rangeStart), wrap
// from each rangeEnd to the next range's rangeStart and from the last range
// to the first, skip the gateway of the range being walked, and stop on
// coming back to the first candidate, so the last reserved address is
// tried last.
type iter struct {
	set   RangeSet
	idx   int
	cur   netip.Addr // invalid until the first step
	start netip.Addr // first candidate; seeing it again ends the walk
}

func newIter(set RangeSet, last netip.Addr) *iter {
	it := &iter{set: set}
	if last.IsValid() {
		for i := range set {
			if set[i].Contains(last) {
				it.idx, it.cur = i, last
				break
			}
		}
	}
	return it
}

func (it *iter) next() (netip.Addr, *Range, bool) {
	for {
		r := &it.set[it.idx]
		if !it.cur.IsValid() {
			it.cur, it.start = r.RangeStart, r.RangeStart
		} else {
			if it.cur == r.RangeEnd || !it.cur.Next().IsValid() {
				it.idx = (it.idx + 1) % len(it.set)
				r = &it.set[it.idx]
				it.cur = r.RangeStart
			} else {
				it.cur = it.cur.Next()
			}
			if !it.start.IsValid() {
				it.start = it.cur
			} else if it.cur == it.start {
				return netip.Addr{}, nil, false
			}
		}
		if it.cur != r.Gateway {
			return it.cur, r, true
		}
	}
}
