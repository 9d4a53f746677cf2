package privtest

import (
	"net/netip"
	"testing"

	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/netns"
)

// Wire connects namespaces a and b with a veth pair (aName in a, bName in
// b), puts the given addresses on the ends (IPv6 without duplicate address
// detection, so they are usable at once; an invalid prefix means none) and
// sets both ends up. It is how a test gives a "host" namespace an uplink to
// an "internet" namespace.
func Wire(t testing.TB, a *netns.NS, aName string, aAddr netip.Prefix, b *netns.NS, bName string, bAddr netip.Prefix) {
	t.Helper()
	ha, err := netlinkx.Open(a)
	if err != nil {
		t.Fatal(err)
	}
	defer ha.Close()
	hb, err := netlinkx.Open(b)
	if err != nil {
		t.Fatal(err)
	}
	defer hb.Close()
	if err := ha.AddVeth(netlinkx.VethSpec{Name: aName, PeerName: bName, PeerNS: b}); err != nil {
		t.Fatal(err)
	}
	for _, e := range []struct {
		h    *netlinkx.Handle
		name string
		addr netip.Prefix
	}{{ha, aName, aAddr}, {hb, bName, bAddr}} {
		if e.addr.IsValid() {
			if err := e.h.AddAddr(e.name, e.addr, netlinkx.AddrOpts{NoDAD: true}); err != nil {
				t.Fatal(err)
			}
		}
		if err := e.h.SetUp(e.name); err != nil {
			t.Fatal(err)
		}
	}
}
