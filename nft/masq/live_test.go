package masq

import (
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/nftables"

	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/nft"
	"github.com/nftcni/nftcni/nft/internal/nfttest"
	"github.com/nftcni/nftcni/ownerid"
	"github.com/nftcni/nftcni/sysctl"
)

// Live tests run against the kernel, each in a throwaway namespace, and
// read the result back through netlink.

func pfx(s ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(s))
	for i, p := range s {
		out[i] = netip.MustParsePrefix(p)
	}
	return out
}

// live reads our table and sets back, elements as nft lists them.
var live = nfttest.Live{Table: table, Sets: sets, Key: key}

// key shows an element's key as nft would list it.
func key(s *nftables.Set, e nft.Element) string {
	addr := func(b []byte) string { a, _ := netip.AddrFromSlice(b); return a.String() }
	switch s {
	case local4, local6:
		h := len(e.Key) / 2
		return addr(e.Key[:h]) + " . " + addr(e.Key[h:])
	case src4, src6:
		return addr(e.Key) + " : jump " + e.Jump
	}
	return addr(e.Key)
}

func TestLiveSetupTeardown(t *testing.T) {
	ns := privtest.NewNS(t)
	o := ownerid.Owner{Network: "net1", ContainerID: "c0ffee", IfName: "eth0"}
	tag := o.Tag()
	full := map[string][]string{
		"src4":   {`10.99.0.5 : jump subnet4_24 comment "` + tag + `"`},
		"src6":   {`fd00:99::5 : jump subnet6_64 comment "` + tag + `"`},
		"local4": {`10.99.0.5 . 10.99.0.0 comment "` + tag + `"`},
		"local6": {`fd00:99::5 . fd00:99:: comment "` + tag + `"`},
	}
	for range 2 { // idempotent
		if err := Setup(ns, o, pfx("10.99.0.5/24", "fd00:99::5/64")); err != nil {
			t.Fatal(err)
		}
		live.Expect(t, ns, full)
	}

	c, err := nft.Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rs, err := c.Rules(chain)
	if err != nil {
		t.Fatal(err)
	}
	var comments []string
	for _, r := range rs {
		comments = append(comments, r.Comment)
	}
	if !slices.Equal(comments, ruleComments()) {
		t.Errorf("postrouting rules %q, want %q", comments, ruleComments())
	}

	// The same owner with another address: replaced, not added.
	if err := Setup(ns, o, pfx("10.99.0.6/16")); err != nil {
		t.Fatal(err)
	}
	live.Expect(t, ns, map[string][]string{
		"src4":   {`10.99.0.6 : jump subnet4_16 comment "` + tag + `"`},
		"local4": {`10.99.0.6 . 10.99.0.0 comment "` + tag + `"`},
	})

	for range 2 { // idempotent
		if err := Teardown(ns, o); err != nil {
			t.Fatal(err)
		}
		live.Expect(t, ns, nil)
	}
	if !live.TableExists(t, ns) {
		t.Error("Teardown deleted the table; it must stay")
	}
}

// A rule layout from another version (or edited by hand) is replaced as a
// whole; the elements stay.
func TestLiveRulesRepaired(t *testing.T) {
	ns := privtest.NewNS(t)
	o := ownerid.Owner{Network: "net1", ContainerID: "c0ffee", IfName: "eth0"}
	if err := Setup(ns, o, pfx("10.99.0.5/24")); err != nil {
		t.Fatal(err)
	}
	c, err := nft.Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rs, _ := c.Rules(chain)
	err = c.Update(func(tx *nft.Tx) error {
		tx.Batch().DeleteRule(chain, rs[2].Handle)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := Setup(ns, ownerid.Owner{Network: "net1", ContainerID: "other", IfName: "eth0"}, pfx("10.99.0.6/24")); err != nil {
		t.Fatal(err)
	}
	rs, _ = c.Rules(chain)
	if len(rs) != len(rules()) || rs[2].Comment != rules()[2].Comment {
		t.Errorf("rules not repaired: %+v", rs)
	}
	if got := live.Read(t, ns)["src4"]; len(got) != 2 {
		t.Errorf("src4 %q, want both containers", got)
	}
}

func TestLiveNothingToRemove(t *testing.T) {
	o := ownerid.Owner{Network: "net1", ContainerID: "c0ffee", IfName: "eth0"}
	live.CreatesNothing(t,
		func(ns *netns.NS) error { return Teardown(ns, o) },
		func(ns *netns.NS) error { return GC(ns, "net1", nil) })
}

func TestLiveGC(t *testing.T) {
	ns := privtest.NewNS(t)
	a := ownerid.Owner{Network: "net1", ContainerID: "aaaa", IfName: "eth0"}
	b := ownerid.Owner{Network: "net1", ContainerID: "bbbb", IfName: "eth0"}
	c := ownerid.Owner{Network: "net2", ContainerID: "cccc", IfName: "eth0"}
	for i, o := range []ownerid.Owner{a, b, c} {
		if err := Setup(ns, o, pfx(fmt.Sprintf("10.99.0.%d/24", i+1))); err != nil {
			t.Fatal(err)
		}
	}
	// Not ours: an untagged element in our set, and a table of someone
	// else's holding an element with b's tag.
	conn, err := nft.Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	err = conn.Update(func(tx *nft.Tx) error {
		tx.Batch().AddElements(local4, []nft.Element{{Key: []byte{192, 0, 2, 9, 192, 0, 2, 0}}})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	foreign := addForeign(t, ns, b.Tag())

	if err := GC(ns, "net1", []ownerid.Owner{a}); err != nil {
		t.Fatal(err)
	}
	got := live.Read(t, ns)["local4"]
	want := []string{
		`10.99.0.1 . 10.99.0.0 comment "` + a.Tag() + `"`,
		`10.99.0.3 . 10.99.0.0 comment "` + c.Tag() + `"`,
		`192.0.2.9 . 192.0.2.0`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("after GC(net1, [a]): local4 %q, want %q", got, want)
	}
	if err := GC(ns, "net1", []ownerid.Owner{}); err != nil {
		t.Fatal(err)
	}
	got = live.Read(t, ns)["local4"]
	want = want[1:]
	if !slices.Equal(got, want) {
		t.Errorf("after GC(net1, []): local4 %q, want %q", got, want)
	}
	if src := live.Read(t, ns)["src4"]; len(src) != 1 {
		t.Errorf("src4 %q, want only c's", src)
	}
	if els, err := conn.Elements(foreign); err != nil || len(els) != 1 {
		t.Errorf("foreign table touched: %v %v", els, err)
	}
}

// addForeign creates `table inet other` with a set holding one element
// commented with tag, through google/nftables directly: our Batch refuses
// tables that are not ours.
func addForeign(t *testing.T, ns *netns.NS, tag string) *nftables.Set {
	t.Helper()
	g, err := nftables.New(nftables.WithNetNSFd(ns.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	tb := g.AddTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: "other"})
	s := &nftables.Set{Table: tb, Name: "masq4", KeyType: nftables.TypeIPAddr}
	if err := g.AddSet(s, []nftables.SetElement{{Key: []byte{10, 99, 0, 2}, Comment: tag}}); err != nil {
		t.Fatal(err)
	}
	if err := g.Flush(); err != nil {
		t.Fatal(err)
	}
	return s
}

// The known limit: one address, one owner — the last Setup takes it over.
func TestLiveTakeOver(t *testing.T) {
	ns := privtest.NewNS(t)
	x := ownerid.Owner{Network: "net1", ContainerID: "xxxx", IfName: "eth0"}
	y := ownerid.Owner{Network: "net2", ContainerID: "yyyy", IfName: "eth0"}
	if err := Setup(ns, x, pfx("10.1.0.5/24")); err != nil {
		t.Fatal(err)
	}
	if err := Setup(ns, y, pfx("10.1.0.5/16")); err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"src4":   {`10.1.0.5 : jump subnet4_16 comment "` + y.Tag() + `"`},
		"local4": {`10.1.0.5 . 10.1.0.0 comment "` + y.Tag() + `"`},
	}
	live.Expect(t, ns, want)
	if err := Teardown(ns, x); err != nil {
		t.Fatal(err)
	}
	live.Expect(t, ns, want)
}

// Concurrent Setups in one namespace all land: the generation guard makes
// losers re-read and retry instead of failing or overwriting.
func TestLiveConcurrentSetup(t *testing.T) {
	ns := privtest.NewNS(t)
	const n = 8
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			o := ownerid.Owner{Network: "net1", ContainerID: fmt.Sprintf("c%d", i), IfName: "eth0"}
			errs <- Setup(ns, o, pfx(fmt.Sprintf("10.99.0.%d/24", i+10)))
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if got := live.Read(t, ns); len(got["src4"]) != n || len(got["local4"]) != n {
		t.Errorf("after %d concurrent Setups: %q", n, got)
	}
}

// topology builds container ⇄ host (router) ⇄ internet, where the internet
// side has no route back to the container subnet: only masquerade lets
// replies return.
func topology(t *testing.T) (container, host, internet *netns.NS) {
	t.Helper()
	container, host, internet = privtest.NewNS(t), privtest.NewNS(t), privtest.NewNS(t)
	hc, hh, hi := privtest.Handle(t, container), privtest.Handle(t, host), privtest.Handle(t, internet)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	// No DAD on the links about to be created (link-local addresses
	// included): IPv6 works as soon as the links are up.
	for _, ns := range []*netns.NS{container, host, internet} {
		must(sysctl.Set(ns, "net/ipv6/conf/default/accept_dad", "0"))
	}
	must(hh.AddVeth(netlinkx.VethSpec{Name: "to-c", PeerName: "eth0", PeerNS: container}))
	must(hh.AddVeth(netlinkx.VethSpec{Name: "to-i", PeerName: "eth0", PeerNS: internet}))
	noDAD := netlinkx.AddrOpts{NoDAD: true}
	for _, a := range []struct {
		h    *netlinkx.Handle
		link string
		addr string
	}{
		{hc, "eth0", "10.99.0.5/24"}, {hc, "eth0", "fd00:99::5/64"},
		{hh, "to-c", "10.99.0.1/24"}, {hh, "to-c", "fd00:99::1/64"},
		{hh, "to-i", "192.0.2.1/24"}, {hh, "to-i", "2001:db8::1/64"},
		{hi, "eth0", "192.0.2.2/24"}, {hi, "eth0", "2001:db8::2/64"},
		// Beyond the router, but inside the container subnet's wider
		// prefix (10.99.0.0/16, fd00:99::/48): a destination the
		// container's own subnet covers when its prefix is declared that
		// wide.
		{hh, "to-i", "10.99.128.1/17"}, {hh, "to-i", "fd00:99:0:1::1/64"},
		{hi, "eth0", "10.99.128.2/17"}, {hi, "eth0", "fd00:99:0:1::2/64"},
	} {
		must(a.h.AddAddr(a.link, netip.MustParsePrefix(a.addr), noDAD))
	}
	for _, l := range []struct {
		h    *netlinkx.Handle
		name string
	}{{hc, "eth0"}, {hc, "lo"}, {hh, "to-c"}, {hh, "to-i"}, {hi, "eth0"}, {hi, "lo"}} {
		must(l.h.SetUp(l.name))
	}
	privtest.WaitOperUp(t, hc, "eth0")
	privtest.WaitOperUp(t, hh, "to-c")
	privtest.WaitOperUp(t, hh, "to-i")
	privtest.WaitOperUp(t, hi, "eth0")
	must(hc.AddRoute(netlinkx.Route{Dst: netip.MustParsePrefix("0.0.0.0/0"), Gw: netip.MustParseAddr("10.99.0.1")}))
	must(hc.AddRoute(netlinkx.Route{Dst: netip.MustParsePrefix("::/0"), Gw: netip.MustParseAddr("fd00:99::1")}))
	must(sysctl.Set(host, "net/ipv4/ip_forward", "1"))
	must(sysctl.Set(host, "net/ipv6/conf/all/forwarding", "1"))
	return container, host, internet
}

func TestLiveMasqueradeTraffic(t *testing.T) {
	container, host, internet := topology(t)
	o := ownerid.Owner{Network: "net1", ContainerID: "c0ffee", IfName: "eth0"}
	const timeout = 700 * time.Millisecond
	for _, tc := range []struct {
		src, router, dst string
	}{
		{"10.99.0.5", "192.0.2.1", "192.0.2.2"},
		{"fd00:99::5", "2001:db8::1", "2001:db8::2"},
	} {
		src, router, dst := netip.MustParseAddr(tc.src), netip.MustParseAddr(tc.router), netip.MustParseAddr(tc.dst)

		if err := Setup(host, o, pfx("10.99.0.5/24", "fd00:99::5/64")); err != nil {
			t.Fatal(err)
		}
		seen, echoed := privtest.UDPExchange(t, container, internet, netip.AddrPortFrom(src, 40001), dst, timeout)
		if seen.Addr() != router || !echoed {
			t.Errorf("%s → %s with masquerade: server saw %v (want %s), echo back: %v", src, dst, seen, router, echoed)
		}
		// A destination beyond the router outside the container's /24
		// (/64) is masqueraded; declared with a /16 (/48) prefix, the
		// container's subnet covers it and nothing is rewritten.
		near, nearRouter, wide := netip.MustParseAddr("10.99.128.2"), netip.MustParseAddr("10.99.128.1"), pfx("10.99.0.5/16", "fd00:99::5/48")
		if src.Is6() {
			near, nearRouter = netip.MustParseAddr("fd00:99:0:1::2"), netip.MustParseAddr("fd00:99:0:1::1")
		}
		if seen, _ := privtest.UDPExchange(t, container, internet, netip.AddrPortFrom(src, 40003), near, timeout); seen.Addr() != nearRouter {
			t.Errorf("%s → %s (outside its subnet): server saw %v, want %s", src, near, seen, nearRouter)
		}
		if err := Setup(host, o, wide); err != nil {
			t.Fatal(err)
		}
		if seen, _ := privtest.UDPExchange(t, container, internet, netip.AddrPortFrom(src, 40004), near, timeout); seen.Addr() != src {
			t.Errorf("%s → %s (own subnet): server saw %v, want the container's address", src, near, seen)
		}

		if err := Teardown(host, o); err != nil {
			t.Fatal(err)
		}
		// A new source port: a new flow, with no NAT decision cached in conntrack.
		seen, echoed = privtest.UDPExchange(t, container, internet, netip.AddrPortFrom(src, 40002), dst, timeout)
		if seen.Addr() != src || echoed {
			t.Errorf("%s → %s after Teardown: server saw %v (want %s, unmasqueraded), echo back: %v (want none: no route back)", src, dst, seen, src, echoed)
		}
	}
}
