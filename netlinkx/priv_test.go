package netlinkx_test

import (
	"errors"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jsimonetti/rtnetlink/v2"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/sysctl"
)

// newNS gives a throwaway namespace and a handle in it.
func newNS(t *testing.T) (*netns.NS, *netlinkx.Handle) {
	t.Helper()
	ns := privtest.NewNS(t)
	h, err := netlinkx.Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return ns, h
}

func mustLink(t *testing.T, h *netlinkx.Handle, name string) netlinkx.Link {
	t.Helper()
	l, err := h.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// wantErr checks an error's full text and its errno/sentinel.
func wantErr(t *testing.T, err error, text string, target error) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %q", text)
	}
	if privtest.WithoutKernelReasons(err.Error()) != text {
		t.Errorf("error %q, want %q", err, text)
	}
	if !errors.Is(err, target) {
		t.Errorf("errors.Is(%q, %v) = false", err, target)
	}
}

func TestLinksInNewNS(t *testing.T) {
	_, h := newNS(t)
	links, err := h.Links()
	must(t, err)
	if len(links) != 1 || links[0].Name != "lo" {
		t.Fatalf("links in a fresh netns: %+v", links)
	}
	lo := links[0]
	if lo.Up || lo.Kind != "" || lo.MTU != 65536 {
		t.Errorf("lo = %+v", lo)
	}
	byIdx, err := h.LinkByIndex(lo.Index)
	must(t, err)
	if byIdx.Name != "lo" {
		t.Errorf("LinkByIndex(%d) = %+v", lo.Index, byIdx)
	}
	_, err = h.LinkByIndex(4242)
	wantErr(t, err, "looking up link index 4242: Link not found", netlinkx.ErrNotFound)
	_, err = h.LinkByName("nope0")
	wantErr(t, err, `looking up link "nope0": Link not found`, netlinkx.ErrNotFound)
	_, err = h.LinkByName("a-name-far-too-long")
	wantErr(t, err, `looking up link "a-name-far-too-long": Link not found`, netlinkx.ErrNotFound)
	err = h.DeleteLink("nope0")
	wantErr(t, err, `deleting link "nope0": Link not found`, netlinkx.ErrNotFound)
	err = h.SetUp("nope0")
	wantErr(t, err, `setting "nope0" up: Link not found`, netlinkx.ErrNotFound)
}

func TestConcurrentUse(t *testing.T) {
	_, h := newNS(t)
	must(t, h.AddVeth(netlinkx.VethSpec{Name: "a0", PeerName: "b0"}))
	errs := make(chan error, 40)
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			p := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 0, byte(i), 1}), 24)
			if err := h.AddAddr("a0", p, netlinkx.AddrOpts{}); err != nil {
				errs <- err
			}
			if _, err := h.Links(); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	addrs, err := h.Addrs("a0", unix.AF_INET)
	must(t, err)
	if len(addrs) != 20 {
		t.Errorf("%d addresses, want 20", len(addrs))
	}
}

func TestVethAcrossNamespaces(t *testing.T) {
	ctr, hc := newNS(t)
	host, hh := newNS(t)
	_ = ctr
	mac := net.HardwareAddr{0x02, 0x42, 0xac, 0x11, 0x00, 0x02}

	must(t, hc.AddVeth(netlinkx.VethSpec{Name: "eth0", PeerName: "veth1234abcd", PeerNS: host, MTU: 1400, MAC: mac}))

	c := mustLink(t, hc, "eth0")
	if c.Kind != "veth" || c.MTU != 1400 || c.MAC.String() != mac.String() || c.Up {
		t.Errorf("container end = %+v", c)
	}
	p := mustLink(t, hh, "veth1234abcd")
	if p.Kind != "veth" || p.MTU != 1400 || p.MAC.String() == mac.String() || p.TxQueueLen != 1000 {
		t.Errorf("host end = %+v", p)
	}
	// A peer queue length asked for, 0 included, is the peer's only.
	qlen := uint32(0)
	must(t, hc.AddVeth(netlinkx.VethSpec{Name: "eth9", PeerName: "veth9", PeerNS: host, PeerTxQueueLen: &qlen}))
	if c, p := mustLink(t, hc, "eth9"), mustLink(t, hh, "veth9"); c.TxQueueLen != 1000 || p.TxQueueLen != 0 {
		t.Errorf("txqueuelen: eth9 %d, veth9 %d; want 1000 and 0", c.TxQueueLen, p.TxQueueLen)
	}
	if _, err := hc.LinkByName("veth1234abcd"); !errors.Is(err, netlinkx.ErrNotFound) {
		t.Errorf("peer visible in the container netns: %v", err)
	}

	// Clash on either side: EEXIST.
	err := hc.AddVeth(netlinkx.VethSpec{Name: "eth0", PeerName: "veth0000ffff", PeerNS: host})
	wantErr(t, err, `adding veth "eth0" (peer "veth0000ffff"): file exists`, unix.EEXIST)
	err = hc.AddVeth(netlinkx.VethSpec{Name: "eth1", PeerName: "veth1234abcd", PeerNS: host})
	wantErr(t, err, `adding veth "eth1" (peer "veth1234abcd"): file exists`, unix.EEXIST)

	// Deleting one end removes both.
	must(t, hh.DeleteLink("veth1234abcd"))
	if _, err := hc.LinkByName("eth0"); !errors.Is(err, netlinkx.ErrNotFound) {
		t.Errorf("container end survived deleting the peer: %v", err)
	}
}

func TestSetLinkAttributes(t *testing.T) {
	_, h := newNS(t)
	must(t, h.AddVeth(netlinkx.VethSpec{Name: "a0", PeerName: "b0"}))

	must(t, h.SetMTU("a0", 1280))
	mac := net.HardwareAddr{0x02, 0, 0, 0, 0, 0x11}
	must(t, h.SetMAC("a0", mac))
	must(t, h.SetPromisc("a0", true))
	l := mustLink(t, h, "a0")
	if l.MTU != 1280 || l.MAC.String() != mac.String() || !l.Promisc {
		t.Errorf("after set: %+v", l)
	}
	must(t, h.SetPromisc("a0", false))
	if l := mustLink(t, h, "a0"); l.Promisc {
		t.Error("promisc still on")
	}

	must(t, h.SetUp("b0"))
	must(t, h.SetUp("a0"))
	l = mustLink(t, h, "a0")
	if !l.Up {
		t.Errorf("not up: %+v", l)
	}
	// The peer's index is our ParentIndex.
	if b := mustLink(t, h, "b0"); l.ParentIndex != b.Index {
		t.Errorf("ParentIndex %d, peer index %d", l.ParentIndex, b.Index)
	}
	must(t, h.SetDown("a0"))
	if l := mustLink(t, h, "a0"); l.Up {
		t.Error("still up")
	}

	must(t, h.Rename("a0", "renamed0"))
	if _, err := h.LinkByName("a0"); !errors.Is(err, netlinkx.ErrNotFound) {
		t.Errorf("old name still there: %v", err)
	}
	if got := mustLink(t, h, "renamed0"); got.Index != l.Index {
		t.Errorf("renamed link has index %d, want %d", got.Index, l.Index)
	}
	err := h.Rename("a0", "x0")
	wantErr(t, err, `renaming "a0" to "x0": Link not found`, netlinkx.ErrNotFound)

	err = h.SetMTU("renamed0", 10)
	wantErr(t, err, `setting MTU 10 on "renamed0": invalid argument`, unix.EINVAL)
}

// bridgeVlanFiltering reads IFLA_BR_VLAN_FILTERING with rtnetlink directly,
// since netlinkx.Link does not expose it.
func bridgeVlanFiltering(t *testing.T, ns *netns.NS, index int) bool {
	t.Helper()
	c, err := rtnetlink.Dial(&netlink.Config{NetNS: ns.Fd()})
	must(t, err)
	defer c.Close()
	m, err := c.Link.Get(uint32(index))
	must(t, err)
	ld, ok := m.Attributes.Info.Data.(*rtnetlink.LinkData)
	if !ok {
		t.Fatalf("bridge info data is %T", m.Attributes.Info.Data)
	}
	ad, err := netlink.NewAttributeDecoder(ld.Data)
	must(t, err)
	for ad.Next() {
		if ad.Type() == unix.IFLA_BR_VLAN_FILTERING {
			return ad.Uint8() != 0
		}
	}
	t.Fatal("no IFLA_BR_VLAN_FILTERING")
	return false
}

func TestBridge(t *testing.T) {
	ns, h := newNS(t)
	mac := net.HardwareAddr{0x02, 0, 0, 0, 0xbb, 0x01}
	must(t, h.AddBridge(netlinkx.BridgeSpec{Name: "br0", MTU: 1450, MAC: mac}))

	br := mustLink(t, h, "br0")
	if br.Kind != "bridge" || br.MTU != 1450 || br.MAC.String() != mac.String() {
		t.Errorf("br0 = %+v", br)
	}
	if bridgeVlanFiltering(t, ns, br.Index) {
		t.Error("br0: vlan_filtering on")
	}
	t.Run("vlan_filtering", func(t *testing.T) {
		privtest.RequireBridgeVlanFiltering(t)
		must(t, h.AddBridge(netlinkx.BridgeSpec{Name: "brv", VlanFiltering: true}))
		if !bridgeVlanFiltering(t, ns, mustLink(t, h, "brv").Index) {
			t.Error("brv: vlan_filtering off")
		}
	})

	err := h.AddBridge(netlinkx.BridgeSpec{Name: "br0"})
	wantErr(t, err, `adding bridge "br0": file exists`, unix.EEXIST)

	must(t, h.AddVeth(netlinkx.VethSpec{Name: "port0", PeerName: "peer0"}))
	must(t, h.SetMaster("port0", "br0"))
	if p := mustLink(t, h, "port0"); p.MasterIndex != br.Index {
		t.Errorf("port0 master %d, want %d", p.MasterIndex, br.Index)
	}
	must(t, h.NoMaster("port0"))
	if p := mustLink(t, h, "port0"); p.MasterIndex != 0 {
		t.Errorf("port0 still has master %d", p.MasterIndex)
	}
	err = h.SetMaster("port0", "nobr0")
	wantErr(t, err, `looking up link "nobr0": Link not found`, netlinkx.ErrNotFound)

	// Bridges cannot change namespace (NETIF_F_NETNS_LOCAL); the kernel's
	// answer comes through.
	other := privtest.NewNS(t)
	if err := h.MoveToNS("br0", other); !errors.Is(err, unix.EINVAL) {
		t.Errorf("moving a bridge: %v", err)
	}
}

func TestMoveToNS(t *testing.T) {
	_, h1 := newNS(t)
	ns2, h2 := newNS(t)
	must(t, h1.AddVeth(netlinkx.VethSpec{Name: "stay0", PeerName: "move0"}))
	must(t, h1.MoveToNS("move0", ns2))
	if _, err := h1.LinkByName("move0"); !errors.Is(err, netlinkx.ErrNotFound) {
		t.Errorf("still in the source netns: %v", err)
	}
	if l := mustLink(t, h2, "move0"); l.Kind != "veth" {
		t.Errorf("moved link = %+v", l)
	}
	err := h1.MoveToNS("gone0", ns2)
	if !errors.Is(err, netlinkx.ErrNotFound) || !strings.Contains(err.Error(), "Link not found") {
		t.Errorf("moving a missing link: %v", err)
	}
}

func prefixes(addrs []netlinkx.Addr) []string {
	var s []string
	for _, a := range addrs {
		s = append(s, a.Prefix.String())
	}
	slices.Sort(s)
	return s
}

func TestAddresses(t *testing.T) {
	_, h := newNS(t)
	must(t, h.AddVeth(netlinkx.VethSpec{Name: "eth0", PeerName: "peer0"}))
	must(t, h.AddVeth(netlinkx.VethSpec{Name: "eth1", PeerName: "peer1"}))

	v4 := netip.MustParsePrefix("10.1.0.2/24")
	v6 := netip.MustParsePrefix("2001:db8::2/64")
	must(t, h.AddAddr("eth0", v4, netlinkx.AddrOpts{}))
	must(t, h.AddAddr("eth0", v6, netlinkx.AddrOpts{NoDAD: true}))
	must(t, h.AddAddr("eth1", netip.MustParsePrefix("10.9.0.1/32"), netlinkx.AddrOpts{}))

	err := h.AddAddr("eth0", v4, netlinkx.AddrOpts{})
	wantErr(t, err, "adding address 10.1.0.2/24 to eth0: file exists", unix.EEXIST)
	err = h.AddAddr("nope0", v4, netlinkx.AddrOpts{})
	wantErr(t, err, "adding address 10.1.0.2/24 to nope0: Link not found", netlinkx.ErrNotFound)

	eth0 := mustLink(t, h, "eth0")
	tests := []struct {
		link   string
		family int
		want   []string
	}{
		{"eth0", 0, []string{"10.1.0.2/24", "2001:db8::2/64"}},
		{"eth0", unix.AF_INET, []string{"10.1.0.2/24"}},
		{"eth0", unix.AF_INET6, []string{"2001:db8::2/64"}},
		{"eth1", 0, []string{"10.9.0.1/32"}},
		{"", unix.AF_INET, []string{"10.1.0.2/24", "10.9.0.1/32"}},
	}
	for _, tt := range tests {
		addrs, err := h.Addrs(tt.link, tt.family)
		must(t, err)
		if got := prefixes(addrs); !slices.Equal(got, tt.want) {
			t.Errorf("Addrs(%q, %d) = %v, want %v", tt.link, tt.family, got, tt.want)
		}
	}
	// One AF_UNSPEC dump gives the link's addresses of every family.
	byIndex, err := h.AddrsByIndex(eth0.Index)
	must(t, err)
	if got, want := prefixes(byIndex), []string{"10.1.0.2/24", "2001:db8::2/64"}; !slices.Equal(got, want) {
		t.Errorf("AddrsByIndex(eth0) = %v, want %v", got, want)
	}
	addrs, err := h.Addrs("eth0", unix.AF_INET6)
	must(t, err)
	if a := addrs[0]; a.LinkIndex != eth0.Index || a.Flags&unix.IFA_F_NODAD == 0 || a.Tentative() || a.Flags&unix.IFA_F_PERMANENT == 0 {
		t.Errorf("NODAD address = %+v", a)
	}

	// Without NODAD the address stays tentative on a link without carrier.
	must(t, h.AddAddr("eth1", netip.MustParsePrefix("2001:db8:1::2/64"), netlinkx.AddrOpts{}))
	must(t, h.SetUp("eth1"))
	addrs, err = h.Addrs("eth1", unix.AF_INET6)
	must(t, err)
	if len(addrs) != 1 || !addrs[0].Tentative() {
		t.Errorf("DAD address on a carrier-less link = %+v", addrs)
	}

	must(t, h.DelAddr("eth0", v4))
	err = h.DelAddr("eth0", v4)
	wantErr(t, err, "deleting address 10.1.0.2/24 from eth0: cannot assign requested address", unix.EADDRNOTAVAIL)
	addrs, err = h.Addrs("eth0", 0)
	must(t, err)
	if got := prefixes(addrs); !slices.Equal(got, []string{"2001:db8::2/64"}) {
		t.Errorf("after delete: %v", got)
	}
}

// upPair makes a veth pair eth0 (here) / peer0 (in peerNS) with both ends up,
// so eth0 has carrier.
func upPair(t *testing.T, h *netlinkx.Handle, peerNS *netns.NS, hp *netlinkx.Handle) {
	t.Helper()
	must(t, h.AddVeth(netlinkx.VethSpec{Name: "eth0", PeerName: "peer0", PeerNS: peerNS}))
	must(t, hp.SetUp("peer0"))
	must(t, h.SetUp("eth0"))
}

func TestWaitDADSettled(t *testing.T) {
	t.Run("no addresses", func(t *testing.T) {
		_, h := newNS(t)
		must(t, h.AddBridge(netlinkx.BridgeSpec{Name: "br0"}))
		must(t, h.WaitDADSettled("br0", time.Second))
	})
	t.Run("settles", func(t *testing.T) {
		_, h := newNS(t)
		pns, hp := newNS(t)
		upPair(t, h, pns, hp)
		must(t, h.AddAddr("eth0", netip.MustParsePrefix("2001:db8::2/64"), netlinkx.AddrOpts{}))
		start := time.Now()
		must(t, h.WaitDADSettled("eth0", 5*time.Second))
		addrs, err := h.Addrs("eth0", unix.AF_INET6)
		must(t, err)
		for _, a := range addrs {
			if a.Tentative() {
				t.Errorf("still tentative: %+v", a)
			}
		}
		t.Logf("settled after %v", time.Since(start))
	})
	t.Run("no carrier: timeout is fine", func(t *testing.T) {
		_, h := newNS(t)
		must(t, h.AddVeth(netlinkx.VethSpec{Name: "eth0", PeerName: "peer0"}))
		must(t, h.SetUp("eth0")) // peer down: no carrier
		must(t, h.AddAddr("eth0", netip.MustParsePrefix("2001:db8::2/64"), netlinkx.AddrOpts{}))
		must(t, h.WaitDADSettled("eth0", 200*time.Millisecond))
	})
	t.Run("still tentative while up", func(t *testing.T) {
		ns, h := newNS(t)
		pns, hp := newNS(t)
		upPair(t, h, pns, hp)
		// Without carrier a timeout is fine (see above): wait for it.
		privtest.WaitOperUp(t, h, "eth0")
		// 100 probes, one a second: DAD cannot finish within the test.
		must(t, sysctl.Set(ns, "net/ipv6/conf/eth0/dad_transmits", "100"))
		must(t, h.AddAddr("eth0", netip.MustParsePrefix("2001:db8::2/64"), netlinkx.AddrOpts{}))
		err := h.WaitDADSettled("eth0", 300*time.Millisecond)
		if err == nil || err.Error() != "link eth0 still has tentative addresses after 1 seconds" {
			t.Errorf("error = %v", err)
		}
	})
	t.Run("dadfailed", func(t *testing.T) {
		_, h := newNS(t)
		pns, hp := newNS(t)
		upPair(t, h, pns, hp)
		must(t, hp.AddAddr("peer0", netip.MustParsePrefix("2001:db8::2/64"), netlinkx.AddrOpts{NoDAD: true}))
		must(t, h.AddAddr("eth0", netip.MustParsePrefix("2001:db8::2/64"), netlinkx.AddrOpts{}))
		err := h.WaitDADSettled("eth0", 5*time.Second)
		if err == nil || err.Error() != "link eth0 has address 2001:db8::2 in DADFAILED state" {
			t.Errorf("error = %v", err)
		}
	})
}

func findRoutes(rs []netlinkx.Route, dst string) []netlinkx.Route {
	var out []netlinkx.Route
	for _, r := range rs {
		if r.Dst.String() == dst {
			out = append(out, r)
		}
	}
	return out
}

func TestRoutes(t *testing.T) {
	_, h := newNS(t)
	must(t, h.AddVeth(netlinkx.VethSpec{Name: "eth0", PeerName: "peer0"}))
	must(t, h.AddAddr("eth0", netip.MustParsePrefix("10.1.0.2/24"), netlinkx.AddrOpts{}))
	must(t, h.AddAddr("eth0", netip.MustParsePrefix("2001:db8::2/64"), netlinkx.AddrOpts{NoDAD: true}))
	must(t, h.SetUp("eth0"))
	idx := mustLink(t, h, "eth0").Index
	gw := netip.MustParseAddr("10.1.0.1")
	gw6 := netip.MustParseAddr("2001:db8::1")
	pfx := netip.MustParsePrefix

	// Gateway route and device route in main.
	must(t, h.AddRoute(netlinkx.Route{Dst: pfx("10.2.0.0/16"), Gw: gw, LinkIndex: idx}))
	must(t, h.AddRoute(netlinkx.Route{Dst: pfx("10.3.0.0/16"), LinkIndex: idx, Priority: 50}))
	must(t, h.AddRoute(netlinkx.Route{Dst: pfx("2001:db8:1::/64"), Gw: gw6, LinkIndex: idx}))
	must(t, h.AddRoute(netlinkx.Route{Dst: pfx("0.0.0.0/0"), Gw: gw, LinkIndex: idx}))

	main4, err := h.Routes(unix.AF_INET, 0)
	must(t, err)
	if rs := findRoutes(main4, "10.2.0.0/16"); len(rs) != 1 || rs[0].Gw != gw || rs[0].LinkIndex != idx ||
		rs[0].Scope != unix.RT_SCOPE_UNIVERSE || rs[0].Protocol != unix.RTPROT_BOOT || rs[0].Table != unix.RT_TABLE_MAIN ||
		rs[0].Type != unix.RTN_UNICAST {
		t.Errorf("gateway route: %+v", rs)
	}
	if rs := findRoutes(main4, "10.3.0.0/16"); len(rs) != 1 || rs[0].Gw.IsValid() || rs[0].Scope != unix.RT_SCOPE_LINK || rs[0].Priority != 50 {
		t.Errorf("device route: %+v", rs)
	}
	if rs := findRoutes(main4, "0.0.0.0/0"); len(rs) != 1 || rs[0].Gw != gw {
		t.Errorf("default route: %+v", rs)
	}
	// The kernel's connected route is there too, with protocol kernel.
	if rs := findRoutes(main4, "10.1.0.0/24"); len(rs) != 1 || rs[0].Protocol != unix.RTPROT_KERNEL {
		t.Errorf("connected route: %+v", rs)
	}
	main6, err := h.Routes(unix.AF_INET6, 0)
	must(t, err)
	if rs := findRoutes(main6, "2001:db8:1::/64"); len(rs) != 1 || rs[0].Gw != gw6 {
		t.Errorf("IPv6 route: %+v", rs)
	}
	if rs := findRoutes(main6, "10.2.0.0/16"); len(rs) != 0 {
		t.Errorf("IPv4 route in IPv6 listing: %+v", rs)
	}
	both, err := h.Routes(0, 0)
	must(t, err)
	if len(findRoutes(both, "10.2.0.0/16")) != 1 || len(findRoutes(both, "2001:db8:1::/64")) != 1 {
		t.Errorf("family 0 listing misses routes: %+v", both)
	}

	// Duplicate add: EEXIST, with the route described.
	err = h.AddRoute(netlinkx.Route{Dst: pfx("10.2.0.0/16"), Gw: gw, LinkIndex: idx})
	wantErr(t, err, "adding route 10.2.0.0/16 via 10.1.0.1 dev eth0: file exists", unix.EEXIST)
	err = h.AddRoute(netlinkx.Route{Dst: pfx("10.9.0.0/16"), Gw: netip.MustParseAddr("192.168.99.1"), LinkIndex: idx})
	wantErr(t, err, "adding route 10.9.0.0/16 via 192.168.99.1 dev eth0: network is unreachable", unix.ENETUNREACH)

	// Append: a second next hop for the same destination is accepted, an
	// identical route is not.
	must(t, h.AppendRoute(netlinkx.Route{Dst: pfx("10.2.0.0/16"), Gw: netip.MustParseAddr("10.1.0.3"), LinkIndex: idx}))
	err = h.AppendRoute(netlinkx.Route{Dst: pfx("10.2.0.0/16"), Gw: gw, LinkIndex: idx})
	wantErr(t, err, "adding route 10.2.0.0/16 via 10.1.0.1 dev eth0: file exists", unix.EEXIST)
	main4, err = h.Routes(unix.AF_INET, 0)
	must(t, err)
	if rs := findRoutes(main4, "10.2.0.0/16"); len(rs) != 2 {
		t.Errorf("after append: %+v", rs)
	}

	// Replace collapses to one route with the new attributes.
	must(t, h.DelRoute(netlinkx.Route{Dst: pfx("10.2.0.0/16"), Gw: netip.MustParseAddr("10.1.0.3")}))
	must(t, h.ReplaceRoute(netlinkx.Route{Dst: pfx("10.2.0.0/16"), Gw: netip.MustParseAddr("10.1.0.5"), LinkIndex: idx, MTU: 1300, AdvMSS: 1200}))
	main4, err = h.Routes(unix.AF_INET, 0)
	must(t, err)
	if rs := findRoutes(main4, "10.2.0.0/16"); len(rs) != 1 || rs[0].Gw.String() != "10.1.0.5" || rs[0].MTU != 1300 || rs[0].AdvMSS != 1200 {
		t.Errorf("after replace: %+v", rs)
	}

	// Custom tables, below and above 255.
	for _, table := range []int{100, 1000} {
		must(t, h.AddRoute(netlinkx.Route{Dst: pfx("0.0.0.0/0"), Gw: gw, LinkIndex: idx, Table: table}))
		must(t, h.AddRoute(netlinkx.Route{Dst: pfx("::/0"), Gw: gw6, LinkIndex: idx, Table: table}))
		rs, err := h.Routes(0, table)
		must(t, err)
		if len(rs) != 2 || rs[0].Table != table || rs[1].Table != table {
			t.Errorf("table %d: %+v", table, rs)
		}
		err = h.AddRoute(netlinkx.Route{Dst: pfx("0.0.0.0/0"), Gw: gw, LinkIndex: idx, Table: table})
		if !errors.Is(err, unix.EEXIST) || !strings.Contains(err.Error(), "table ") {
			t.Errorf("duplicate in table %d: %v", table, err)
		}
		must(t, h.DelRoute(netlinkx.Route{Dst: pfx("::/0"), Table: table}))
		rs, err = h.Routes(unix.AF_INET6, table)
		must(t, err)
		if len(rs) != 0 {
			t.Errorf("table %d after delete: %+v", table, rs)
		}
	}
	// Main was not touched by the table routes.
	main4, err = h.Routes(unix.AF_INET, 0)
	must(t, err)
	if rs := findRoutes(main4, "0.0.0.0/0"); len(rs) != 1 || rs[0].Table != unix.RT_TABLE_MAIN {
		t.Errorf("main default after table work: %+v", rs)
	}
	// A table that does not exist is empty.
	for _, fam := range []int{0, unix.AF_INET, unix.AF_INET6} {
		rs, err := h.Routes(fam, 4321)
		if err != nil || len(rs) != 0 {
			t.Errorf("Routes(%d, 4321) = %+v, %v", fam, rs, err)
		}
	}

	// Delete and delete again.
	must(t, h.DelRoute(netlinkx.Route{Dst: pfx("10.3.0.0/16")}))
	err = h.DelRoute(netlinkx.Route{Dst: pfx("10.3.0.0/16"), LinkIndex: idx})
	wantErr(t, err, "deleting route 10.3.0.0/16 dev eth0: no such process", unix.ESRCH)
}
