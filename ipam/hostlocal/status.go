package hostlocal

import (
	"context"
	"math"

	"github.com/nftcni/nftcni/cni"
)

// cmdStatus reports code 50 when ADD cannot succeed: the store cannot be
// created or locked, or some range set has no free address (ADD needs one
// from every set). The reference always answers success.
//
// Fullness is decided by counting, never by walking: each range holds
// span(start, end) addresses minus its own gateway when inside, against
// the address files named (canonically, as the allocator names them)
// inside those bounds. This is exact, because an existing name of any kind
// blocks its address, and cheap for a /64.
func cmdStatus(_ context.Context, a *cni.CmdArgs) error {
	conf, err := LoadConfig(a.StdinData, a.Args)
	if err != nil {
		return err
	}
	st, err := openStore(conf.DataDir, conf.Name)
	if err != nil {
		return cni.Errorf(cni.CodePluginNotAvailable, "host-local store unavailable: %v", err)
	}
	defer st.Close()
	var l listing
	if err := st.withLock(func() (err error) { l, err = st.scan(); return err }); err != nil {
		return cni.Errorf(cni.CodePluginNotAvailable, "host-local store unavailable: %v", err)
	}
	for _, set := range conf.Ranges {
		if set.free(l) == 0 {
			return cni.Errorf(cni.CodePluginNotAvailable, "no IP addresses available in range set: %s", set)
		}
	}
	return nil
}

// free counts the set's unreserved addresses (saturating; only zero versus
// non-zero matters to STATUS).
func (s RangeSet) free(l listing) uint64 {
	var capacity uint64
	for i := range s {
		r := &s[i]
		n := span(r.RangeStart, r.RangeEnd)
		if r.Contains(r.Gateway) && n != math.MaxUint64 {
			n--
		}
		capacity = satAdd(capacity, n)
	}
	var taken uint64
	for _, e := range l.ips {
		if e.name != e.addr.String() {
			continue // not a name the allocator would ever try
		}
		if r := s.RangeFor(e.addr); r != nil && e.addr != r.Gateway {
			taken++
		}
	}
	if taken >= capacity {
		return 0
	}
	return capacity - taken
}

func satAdd(a, b uint64) uint64 {
	if a > math.MaxUint64-b {
		return math.MaxUint64
	}
	return a + b
}
