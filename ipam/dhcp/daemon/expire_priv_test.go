package daemon

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netlinkx"
)

// TestExpire6: an expired DHCPv6 lease takes its address off the
// interface and leaves the rest alone (the link stays up, an IPv4
// address stays); with the address already gone there is nothing to do.
func TestExpire6(t *testing.T) {
	privtest.Require(t)
	ns := privtest.NewNS(t)
	privtest.Wire(t, ns, "eth0", netip.MustParsePrefix("fd00::5/64"), privtest.NewNS(t), "p0", netip.Prefix{})
	h := privtest.Handle(t, ns)
	if err := h.AddAddr("eth0", netip.MustParsePrefix("10.0.0.5/24"), netlinkx.AddrOpts{}); err != nil {
		t.Fatal(err)
	}
	b, err := newBinding6(reply6(t, 0, 0, time.Hour, time.Hour), time.Now(), testMAC, iaidOf("eth0"))
	if err != nil {
		t.Fatal(err)
	}
	d := &Daemon{cfg: Config{Logf: t.Logf}}
	o := owner{ContainerID: "c1", Network: "n", IfName: "eth0", Netns: ns.Path()}
	for range 2 {
		if err := (dhcp6{d}).expire(o, b); err != nil {
			t.Fatal(err)
		}
		addrs, err := h.Addrs("eth0", 0)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, a := range addrs {
			if !a.Prefix.Addr().IsLinkLocalUnicast() {
				got = append(got, a.Prefix.String())
			}
		}
		if !slices.Equal(got, []string{"10.0.0.5/24"}) {
			t.Errorf("eth0 has %v, want only 10.0.0.5/24", got)
		}
		if l, err := h.LinkByName("eth0"); err != nil || !l.Up {
			t.Errorf("eth0: %+v %v", l, err)
		}
	}
}
