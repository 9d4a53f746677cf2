package macspoof

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"

	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/nft"
	"github.com/nftcni/nftcni/nft/internal/nfttest"
	"github.com/nftcni/nftcni/ownerid"
)

// live reads our table and sets back, elements as nft lists them.
var live = nfttest.Live{Table: table, Sets: sets, Key: func(_ *nftables.Set, e nft.Element) string {
	s := `"` + strings.TrimRight(string(e.Key[:nft.IfnameLen]), "\x00") + `"`
	if len(e.Key) > nft.IfnameLen {
		s += " . " + net.HardwareAddr(e.Key[nft.IfnameLen:nft.IfnameLen+6]).String()
	}
	return s
}}

func TestLiveSetupTeardownGC(t *testing.T) {
	ns := privtest.NewNS(t)
	a := ownerid.Owner{Network: "net1", ContainerID: "aaaa", IfName: "eth0"}
	b := ownerid.Owner{Network: "net1", ContainerID: "bbbb", IfName: "eth0"}
	c := ownerid.Owner{Network: "net2", ContainerID: "cccc", IfName: "eth0"}
	macs := map[string]net.HardwareAddr{}
	for i, o := range []ownerid.Owner{a, b, c} {
		mac := net.HardwareAddr{2, 0, 0, 0, 0, byte(i + 1)}
		port := fmt.Sprintf("veth%d", i+1)
		macs[port] = mac
		for range 2 { // idempotent
			if err := Setup(ns, o, port, mac); err != nil {
				t.Fatal(err)
			}
		}
	}
	want := map[string][]string{
		"guarded": {
			`"veth1" comment "` + a.Tag() + `"`,
			`"veth2" comment "` + b.Tag() + `"`,
			`"veth3" comment "` + c.Tag() + `"`,
		},
		"allowed": {
			`"veth1" . 02:00:00:00:00:01 comment "` + a.Tag() + `"`,
			`"veth2" . 02:00:00:00:00:02 comment "` + b.Tag() + `"`,
			`"veth3" . 02:00:00:00:00:03 comment "` + c.Tag() + `"`,
		},
	}
	live.Expect(t, ns, want)

	// Not ours: an untagged element in our set.
	conn, err := nft.Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.Update(func(tx *nft.Tx) error {
		tx.Batch().AddElements(guarded, []nft.Element{{Key: nft.IfnameKey("uplink")}})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	want["guarded"] = append(want["guarded"], `"uplink"`)

	// Same owner, new MAC: replaced.
	if err := Setup(ns, a, "veth1", net.HardwareAddr{2, 0, 0, 0, 0, 0x11}); err != nil {
		t.Fatal(err)
	}
	want["allowed"][0] = `"veth1" . 02:00:00:00:00:11 comment "` + a.Tag() + `"`
	live.Expect(t, ns, want)

	for range 2 {
		if err := Teardown(ns, b); err != nil {
			t.Fatal(err)
		}
	}
	for k := range want {
		want[k] = slices.DeleteFunc(want[k], func(s string) bool { return strings.HasPrefix(s, `"veth2"`) })
	}
	live.Expect(t, ns, want)

	if err := GC(ns, "net1", []ownerid.Owner{}); err != nil {
		t.Fatal(err)
	}
	live.Expect(t, ns, map[string][]string{
		"guarded": {`"uplink"`, `"veth3" comment "` + c.Tag() + `"`},
		"allowed": {`"veth3" . 02:00:00:00:00:03 comment "` + c.Tag() + `"`},
	})
	ok, err := conn.TableExists(table)
	if err != nil || !ok {
		t.Errorf("table gone after GC: %v %v", ok, err)
	}
}

// A recycled port name with another MAC, set up by an owner without
// state (the fast path): the old owner's (port . old MAC) cannot be found
// by looking up (port . new MAC), so Setup must fall back to reading the
// sets, or the old MAC would stay allowed on the port. Both Teardowns then
// leave the sets empty, owners markers included.
func TestLiveRecycledPortNewMAC(t *testing.T) {
	ns := privtest.NewNS(t)
	a := ownerid.Owner{Network: "net1", ContainerID: "aaaa", IfName: "eth0"}
	b := ownerid.Owner{Network: "net1", ContainerID: "bbbb", IfName: "eth0"}
	if err := Setup(ns, a, "veth1", net.HardwareAddr{2, 0, 0, 0, 0, 1}); err != nil {
		t.Fatal(err)
	}
	if err := Setup(ns, b, "veth1", net.HardwareAddr{2, 0, 0, 0, 0, 2}); err != nil {
		t.Fatal(err)
	}
	withOwners := live
	withOwners.Sets = append(slices.Clip(sets), nft.OwnersSet(table))
	withOwners.Key = func(s *nftables.Set, e nft.Element) string {
		if s.Name == nft.OwnersSetName {
			return `"` + string(e.Key) + `"`
		}
		return live.Key(s, e)
	}
	withOwners.Expect(t, ns, map[string][]string{
		"guarded": {`"veth1" comment "` + b.Tag() + `"`},
		"allowed": {`"veth1" . 02:00:00:00:00:02 comment "` + b.Tag() + `"`},
		"owners": {
			`"` + a.AttachmentHash() + `" comment "` + nft.MarkerWith(a, "veth1 02:00:00:00:00:01").Comment + `"`,
			`"` + b.AttachmentHash() + `" comment "` + nft.MarkerWith(b, "veth1 02:00:00:00:00:02").Comment + `"`,
		},
	})
	for _, o := range []ownerid.Owner{a, b} {
		if err := Teardown(ns, o); err != nil {
			t.Fatal(err)
		}
	}
	withOwners.Expect(t, ns, nil)
}

func TestLiveNothingToRemove(t *testing.T) {
	live.CreatesNothing(t,
		func(ns *netns.NS) error {
			return Teardown(ns, ownerid.Owner{Network: "n", ContainerID: "c", IfName: "eth0"})
		},
		func(ns *netns.NS) error { return GC(ns, "n", nil) })
}

// Tables that are not ours are never touched, even one named like ours in
// another family.
func TestLiveForeignTableUntouched(t *testing.T) {
	ns := privtest.NewNS(t)
	o := ownerid.Owner{Network: "net1", ContainerID: "aaaa", IfName: "eth0"}
	g, err := nftables.New(nftables.WithNetNSFd(ns.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	ft := g.AddTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: TableName})
	fs := &nftables.Set{Table: ft, Name: "guarded", KeyType: nftables.TypeIFName}
	if err := g.AddSet(fs, []nftables.SetElement{{Key: nft.IfnameKey("veth1"), Comment: o.Tag()}}); err != nil {
		t.Fatal(err)
	}
	if err := g.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := Setup(ns, o, "veth1", net.HardwareAddr{2, 0, 0, 0, 0, 1}); err != nil {
		t.Fatal(err)
	}
	if err := Teardown(ns, o); err != nil {
		t.Fatal(err)
	}
	if err := GC(ns, "net1", nil); err != nil {
		t.Fatal(err)
	}
	c, err := nft.Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if els, err := c.Elements(fs); err != nil || len(els) != 1 {
		t.Errorf("foreign inet table changed: %v %v", els, err)
	}
}

// bridged builds a bridge in host with two ports, vetha and vethb, leading
// to containers a (10.98.0.2) and b (10.98.0.3).
func bridged(t *testing.T) (host, a, b *netns.NS, ha *netlinkx.Handle) {
	t.Helper()
	host, a, b = privtest.NewNS(t), privtest.NewNS(t), privtest.NewNS(t)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	hh := privtest.Handle(t, host)
	must(hh.AddBridge(netlinkx.BridgeSpec{Name: "br0"}))
	must(hh.SetUp("br0"))
	for _, c := range []struct {
		ns   *netns.NS
		port string
		addr string
	}{{a, "vetha", "10.98.0.2/24"}, {b, "vethb", "10.98.0.3/24"}} {
		must(hh.AddVeth(netlinkx.VethSpec{Name: c.port, PeerName: "eth0", PeerNS: c.ns}))
		must(hh.SetMaster(c.port, "br0"))
		must(hh.SetUp(c.port))
		hc := privtest.Handle(t, c.ns)
		if c.ns == a {
			ha = hc
		}
		must(hc.AddAddr("eth0", netip.MustParsePrefix(c.addr), netlinkx.AddrOpts{}))
		must(hc.SetUp("eth0"))
		privtest.WaitOperUp(t, hc, "eth0")
		privtest.WaitOperUp(t, hh, c.port)
	}
	return host, a, b, ha
}

func TestLiveSpoofedFramesDropped(t *testing.T) {
	host, a, b, ha := bridged(t)
	la, err := ha.LinkByName("eth0")
	if err != nil {
		t.Fatal(err)
	}
	o := ownerid.Owner{Network: "net1", ContainerID: "aaaa", IfName: "eth0"}
	src, dst := netip.MustParseAddr("10.98.0.2"), netip.MustParseAddr("10.98.0.3")
	const timeout = 700 * time.Millisecond
	port := uint16(41000)
	exchange := func() (arrived, echoed bool) {
		port++
		seen, echoed := privtest.UDPExchange(t, a, b, netip.AddrPortFrom(src, port), dst, timeout)
		return seen.Addr() == src, echoed
	}

	if err := Setup(host, o, "vetha", la.MAC); err != nil {
		t.Fatal(err)
	}
	if arrived, echoed := exchange(); !arrived || !echoed {
		t.Fatalf("with its own MAC %s: arrived %v, echoed %v; want both", la.MAC, arrived, echoed)
	}

	spoofed := net.HardwareAddr{0x02, 0xba, 0xd0, 0x00, 0x00, 0x01}
	if err := ha.SetMAC("eth0", spoofed); err != nil {
		t.Fatal(err)
	}
	if arrived, _ := exchange(); arrived {
		t.Errorf("with a changed MAC %s: the datagram crossed the bridge", spoofed)
	}

	if err := Teardown(host, o); err != nil {
		t.Fatal(err)
	}
	// b still maps a's address to the old MAC, so its echo may go astray:
	// what shows the filter is gone is a's datagram reaching b.
	if arrived, _ := exchange(); !arrived {
		t.Errorf("after Teardown: the datagram did not cross the bridge")
	}
}
