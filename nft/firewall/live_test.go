package firewall

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"

	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/nft"
	"github.com/nftcni/nftcni/nft/foreign"
	"github.com/nftcni/nftcni/nft/internal/nfttest"
	"github.com/nftcni/nftcni/ownerid"
	"github.com/nftcni/nftcni/sysctl"
)

// Live tests run against the kernel, each in a throwaway namespace, and
// read the result back through netlink.

// live reads our sets back, elements as nft lists them.
var live = nfttest.Live{Table: table, Sets: sets, Key: key}

// key shows an element's key as nft would list it.
func key(s *nftables.Set, e nft.Element) string {
	str := func(b []byte) string { return `"` + strings.TrimRight(string(b), "\x00") + `"` }
	addr := func(b []byte) string { a, _ := netip.AddrFromSlice(b); return a.String() }
	switch s {
	case allow4, allow6:
		return addr(e.Key)
	case owners4, owners6:
		n := len(e.Key) - nft.IfnameLen
		return addr(e.Key[:n]) + " . " + str(e.Key[n:])
	case bridges:
		return str(e.Key)
	}
	return str(e.Key[:nft.IfnameLen]) + " . " + str(e.Key[nft.IfnameLen:])
}

func addrs(s ...string) []netip.Addr {
	out := make([]netip.Addr, len(s))
	for i, a := range s {
		out[i] = netip.MustParseAddr(a)
	}
	return out
}

func q(s string) string { return `"` + s + `"` }

// elem renders an element with its comment, as Live.Read does.
func elem(k string, o ownerid.Owner) string { return k + ` comment "` + o.Tag() + `"` }

func TestLiveSetupTeardown(t *testing.T) {
	ns := privtest.NewNS(t)
	o := ownerid.Owner{Network: "net1", ContainerID: "c0ffee", IfName: "eth0"}
	a := Attachment{Owner: o, Addrs: addrs("10.99.0.5", "fd00:99::5"), Bridge: "br0", Policy: PolicyIsolated}
	i := q(id(o))
	full := map[string][]string{
		"allow4":          {elem("10.99.0.5", o)},
		"allow6":          {elem("fd00:99::5", o)},
		"owners4":         {elem("10.99.0.5 . "+i, o)},
		"owners6":         {elem("fd00:99::5 . "+i, o)},
		"bridges":         {elem(`"br0"`, o)},
		"bridge_self":     {elem(`"br0" . "br0"`, o)},
		"isolated_self":   {elem(`"br0" . "br0"`, o)},
		"bridge_owners":   {elem(`"br0" . `+i, o)},
		"isolated_owners": {elem(`"br0" . `+i, o)},
	}
	for range 2 { // idempotent
		if err := Setup(ns, a); err != nil {
			t.Fatal(err)
		}
		live.Expect(t, ns, full)
		if err := Check(ns, a); err != nil {
			t.Errorf("Check after Setup: %v", err)
		}
	}
	c := dial(t, ns)
	if got := comments(t, c, forward); !slices.Equal(got, ruleComments()) {
		t.Errorf("forward rules %q, want %q", got, ruleComments())
	}

	// The administrator's chain keeps what is put there.
	addRule(t, ns, adminChain(""), "an administrator's rule")
	if err := Setup(ns, Attachment{Owner: o, Addrs: addrs("10.99.0.6")}); err != nil {
		t.Fatal(err)
	}
	live.Expect(t, ns, map[string][]string{
		"allow4":  {elem("10.99.0.6", o)},
		"owners4": {elem("10.99.0.6 . "+i, o)},
	})

	for range 2 { // idempotent
		if err := Teardown(ns, o, nil); err != nil {
			t.Fatal(err)
		}
		live.Expect(t, ns, nil)
	}
	if !live.TableExists(t, ns) {
		t.Error("Teardown deleted the table; it must stay")
	}
	if got := comments(t, c, adminChain("")); !slices.Equal(got, []string{"an administrator's rule"}) {
		t.Errorf("admin chain after Teardown: %q", got)
	}
	if err := Check(ns, a); err == nil {
		t.Error("Check passed after Teardown")
	}
}

// Two networks naming different admin chains: each gets its jump, neither
// replaces the other's.
func TestLiveAdminChains(t *testing.T) {
	ns := privtest.NewNS(t)
	x := Attachment{Owner: ownerid.Owner{Network: "net1", ContainerID: "x", IfName: "eth0"}, Addrs: addrs("10.99.0.5")}
	y := Attachment{Owner: ownerid.Owner{Network: "net2", ContainerID: "y", IfName: "eth0"}, Addrs: addrs("10.98.0.5"), AdminChain: "MY-ADMIN"}
	for _, a := range []Attachment{x, y, x} {
		if err := Setup(ns, a); err != nil {
			t.Fatal(err)
		}
	}
	c := dial(t, ns)
	want := []string{"nftcni firewall v1: admin chain CNI-ADMIN", "nftcni firewall v1: admin chain MY-ADMIN"}
	if got := comments(t, c, adminJumps); !slices.Equal(got, want) {
		t.Errorf("admin-jumps %q, want %q", got, want)
	}
	for _, a := range []Attachment{x, y} {
		if err := Check(ns, a); err != nil {
			t.Errorf("Check %s: %v", a.Owner.ContainerID, err)
		}
	}
}

// Shared keys stay while anyone claims them: an address two networks hand
// out, a bridge several containers police.
func TestLiveSharedClaims(t *testing.T) {
	ns := privtest.NewNS(t)
	x := ownerid.Owner{Network: "net1", ContainerID: "xxxx", IfName: "eth0"}
	y := ownerid.Owner{Network: "net2", ContainerID: "yyyy", IfName: "eth0"}
	for _, o := range []ownerid.Owner{x, y} {
		if err := Setup(ns, Attachment{Owner: o, Addrs: addrs("10.1.0.5"), Bridge: "br0", Policy: PolicySameBridge}); err != nil {
			t.Fatal(err)
		}
	}
	if got := live.Read(t, ns); !slices.Equal(got["allow4"], []string{elem("10.1.0.5", x)}) || len(got["owners4"]) != 2 || len(got["bridge_owners"]) != 2 {
		t.Fatalf("after both Setups: %q", got)
	}
	if err := Teardown(ns, x, nil); err != nil {
		t.Fatal(err)
	}
	i := q(id(y))
	live.Expect(t, ns, map[string][]string{
		"allow4":        {elem("10.1.0.5", y)},
		"owners4":       {elem("10.1.0.5 . "+i, y)},
		"bridges":       {elem(`"br0"`, y)},
		"bridge_self":   {elem(`"br0" . "br0"`, y)},
		"bridge_owners": {elem(`"br0" . `+i, y)},
	})
	if err := Check(ns, Attachment{Owner: y, Addrs: addrs("10.1.0.5"), Bridge: "br0", Policy: PolicySameBridge}); err != nil {
		t.Errorf("Check of the remaining owner: %v", err)
	}
	if err := Teardown(ns, y, nil); err != nil {
		t.Fatal(err)
	}
	live.Expect(t, ns, nil)
}

func TestLiveGC(t *testing.T) {
	ns := privtest.NewNS(t)
	a := ownerid.Owner{Network: "net1", ContainerID: "aaaa", IfName: "eth0"}
	b := ownerid.Owner{Network: "net1", ContainerID: "bbbb", IfName: "eth0"}
	c := ownerid.Owner{Network: "net2", ContainerID: "cccc", IfName: "eth0"}
	filter := foreignFilter(t, ns, nftables.TableFamilyIPv4)
	for i, o := range []ownerid.Owner{a, b, c} {
		if err := Setup(ns, Attachment{Owner: o, Addrs: addrs(fmt.Sprintf("10.99.0.%d", i+1))}); err != nil {
			t.Fatal(err)
		}
	}
	conn := dial(t, ns)
	if err := GC(ns, "net1", []ownerid.Owner{a}); err != nil {
		t.Fatal(err)
	}
	if got := live.Read(t, ns)["allow4"]; !slices.Equal(got, []string{elem("10.99.0.1", a), elem("10.99.0.3", c)}) {
		t.Errorf("after GC(net1, [a]): allow4 %q", got)
	}
	if err := GC(ns, "net1", []ownerid.Owner{}); err != nil {
		t.Fatal(err)
	}
	if got := live.Read(t, ns)["allow4"]; !slices.Equal(got, []string{elem("10.99.0.3", c)}) {
		t.Errorf("after GC(net1, []): allow4 %q", got)
	}
	want := []string{sharedTag, "a foreign rule"}
	if got := comments(t, conn, filter); !slices.Equal(got, want) {
		t.Errorf("ip filter FORWARD after GC: %q, want %q", got, want)
	}
	if got := [3]int{claimsOf(t, conn, a), claimsOf(t, conn, b), claimsOf(t, conn, c)}; got != [3]int{0, 0, 2} {
		t.Errorf("claims of a, b, c after GC: %v, want [0 0 2]", got)
	}
}

// claimsOf counts o's claims in table inet nftcni_accept: one element of
// map claims per accept o has for an iptables-nft FORWARD chain.
func claimsOf(t *testing.T, c *nft.Conn, o ownerid.Owner) int {
	t.Helper()
	els, err := c.OwnedElements()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range els {
		if e.Table == "nftcni_accept" && e.Set == "claims" && o.OwnedBy(e.Comment) {
			n++
		}
	}
	return n
}

func TestLiveNothingToRemove(t *testing.T) {
	o := ownerid.Owner{Network: "net1", ContainerID: "c0ffee", IfName: "eth0"}
	live.CreatesNothing(t,
		func(ns *netns.NS) error { return Teardown(ns, o, nil) },
		func(ns *netns.NS) error { return GC(ns, "net1", nil) })
}

// foreignFilter creates what `iptables-nft -P FORWARD DROP` (and
// ip6tables-nft) leaves behind — table <family> filter, base chain FORWARD
// with policy drop — holding one rule of someone else's, and returns the
// chain. google/nftables directly: our Batch refuses tables not ours.
func foreignFilter(t *testing.T, ns *netns.NS, fam nftables.TableFamily) *nftables.Chain {
	t.Helper()
	g, err := nftables.New(nftables.WithNetNSFd(ns.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	defer g.CloseLasting()
	drop := nftables.ChainPolicyDrop
	tb := g.AddTable(&nftables.Table{Family: fam, Name: "filter"})
	ch := g.AddChain(&nftables.Chain{Table: tb, Name: "FORWARD", Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter, Policy: &drop})
	g.AddRule(&nftables.Rule{Table: tb, Chain: ch, Exprs: []expr.Any{&expr.Counter{}}, UserData: nft.RuleUserData("a foreign rule")})
	if err := g.Flush(); err != nil {
		t.Fatal(err)
	}
	return ch
}

// addRule appends a counter rule with comment to ch (an admin chain).
func addRule(t *testing.T, ns *netns.NS, ch *nftables.Chain, comment string) {
	t.Helper()
	c := dial(t, ns)
	err := c.Update(func(tx *nft.Tx) error {
		tx.Batch().AddRule(&nftables.Rule{Table: ch.Table, Chain: ch, Exprs: []expr.Any{&expr.Counter{}}}, comment)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func dial(t *testing.T, ns *netns.NS) *nft.Conn {
	t.Helper()
	c, err := nft.Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func comments(t *testing.T, c *nft.Conn, ch *nftables.Chain) []string {
	t.Helper()
	rs, err := c.Rules(ch)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range rs {
		out = append(out, r.Comment)
	}
	return out
}

// The iptables-nft chains get the shared rule at their head, the owner's
// accepts its claims in table inet nftcni_accept, replaced by a Setup with
// other addresses, removed by Teardown with the shared rule (the owner was
// the last); the chain's policy and other rules stay. The ip6 chain,
// absent, is created as iptables-nft would (policy accept), and its table
// goes with the owner's last claim for it, holding nothing else.
func TestLiveForeignChain(t *testing.T) {
	ns := privtest.NewNS(t)
	filter := foreignFilter(t, ns, nftables.TableFamilyIPv4)
	o := ownerid.Owner{Network: "net1", ContainerID: "c0ffee", IfName: "eth0"}
	c := dial(t, ns)
	for range 2 {
		if err := Setup(ns, Attachment{Owner: o, Addrs: addrs("10.99.0.5", "10.99.0.6", "fd00:99::5")}); err != nil {
			t.Fatal(err)
		}
		want := []string{sharedTag, "a foreign rule"}
		if got := comments(t, c, filter); !slices.Equal(got, want) {
			t.Errorf("ip filter FORWARD %q, want %q", got, want)
		}
		if n := claimsOf(t, c, o); n != 6 {
			t.Errorf("%d claims of the owner, want 6 (2 per address)", n)
		}
	}
	ip6 := &nftables.Chain{Table: &nftables.Table{Family: nftables.TableFamilyIPv6, Name: "filter"}, Name: "FORWARD"}
	if got := comments(t, c, ip6); !slices.Equal(got, []string{sharedTag}) {
		t.Errorf("ip6 filter FORWARD %q, want the shared rule", got)
	}
	g, err := nftables.New(nftables.WithNetNSFd(ns.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	defer g.CloseLasting()
	ch, err := g.ListChain(ip6.Table, "FORWARD")
	if err != nil || ch.Policy == nil || *ch.Policy != nftables.ChainPolicyAccept || *ch.Hooknum != *nftables.ChainHookForward ||
		*ch.Priority != *nftables.ChainPriorityFilter || ch.Type != nftables.ChainTypeFilter {
		t.Errorf("ip6 FORWARD chain Setup created: %+v %v", ch, err)
	}
	if err := Setup(ns, Attachment{Owner: o, Addrs: addrs("10.99.0.7")}); err != nil {
		t.Fatal(err)
	}
	if got := comments(t, c, filter); !slices.Equal(got, []string{sharedTag, "a foreign rule"}) {
		t.Errorf("after a Setup with one address: %q", got)
	}
	if n := claimsOf(t, c, o); n != 2 {
		t.Errorf("%d claims of the owner after a Setup with one address, want 2", n)
	}
	if ok, err := c.TableExists(ip6.Table); err != nil || ok {
		t.Errorf("table ip6 filter after a Setup with one IPv4 address: %v %v, want it gone with the owner's last rule", ok, err)
	}
	if err := Check(ns, Attachment{Owner: o, Addrs: addrs("10.99.0.7")}); err != nil {
		t.Error(err)
	}
	if err := Teardown(ns, o, nil); err != nil {
		t.Fatal(err)
	}
	if got := comments(t, c, filter); !slices.Equal(got, []string{"a foreign rule"}) {
		t.Errorf("after Teardown: %q", got)
	}
	if n := claimsOf(t, c, o); n != 0 {
		t.Errorf("%d claims of the owner after Teardown", n)
	}
	ch, err = g.ListChain(filter.Table, "FORWARD")
	if err != nil || ch.Policy == nil || *ch.Policy != nftables.ChainPolicyDrop {
		t.Errorf("FORWARD chain after Teardown: %+v %v", ch, err)
	}
}

// Where iptables cannot be used (foreign.Use), Setup and its repetition
// create nothing of iptables-nft's and CHECK passes; an attachment whose
// configuration then says "never" loses its accepts there on its next
// Setup, and iptables-nft's table made for them goes with them.
func TestLiveWithoutIptables(t *testing.T) {
	ns := privtest.NewNS(t)
	c := dial(t, ns)
	ipFilter := &nftables.Table{Family: nftables.TableFamilyIPv4, Name: "filter"}
	o := ownerid.Owner{Network: "net1", ContainerID: "c0ffee", IfName: "eth0"}
	a := noIptables(Attachment{Owner: o, Addrs: addrs("10.99.0.5", "fd00:99::5")})
	for range 2 {
		if err := Setup(ns, a); err != nil {
			t.Fatal(err)
		}
		if ok, err := c.IptablesInUse(); err != nil || ok {
			t.Errorf("iptables-nft has a table after Setup: %v %v", ok, err)
		}
	}
	if err := Check(ns, a); err != nil {
		t.Error(err)
	}
	b := noIptables(Attachment{Owner: ownerid.Owner{Network: "net1", ContainerID: "beef", IfName: "eth0"}, Addrs: addrs("10.99.0.6"), Iptables: foreign.UseAlways})
	if err := Setup(ns, b); err != nil {
		t.Fatal(err)
	}
	if ok, err := c.TableExists(ipFilter); err != nil || !ok {
		t.Fatalf("ip filter after an \"always\" Setup: %v %v", ok, err)
	}
	b.Iptables = foreign.UseNever
	if err := Setup(ns, b); err != nil {
		t.Fatal(err)
	}
	if ok, err := c.TableExists(ipFilter); err != nil || ok {
		t.Errorf("ip filter after the owner's \"never\" Setup: %v %v, want it gone with its rules", ok, err)
	}
	if err := Check(ns, b); err != nil {
		t.Error(err)
	}
	for _, o := range []ownerid.Owner{a.Owner, b.Owner} {
		if err := Teardown(ns, o, nil); err != nil {
			t.Fatal(err)
		}
	}
}

// Concurrent Setups in one namespace all land, shared bridge included.
func TestLiveConcurrentSetup(t *testing.T) {
	ns := privtest.NewNS(t)
	foreignFilter(t, ns, nftables.TableFamilyIPv4)
	const n = 8
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			o := ownerid.Owner{Network: "net1", ContainerID: fmt.Sprintf("c%d", i), IfName: "eth0"}
			errs <- Setup(ns, Attachment{Owner: o, Addrs: addrs(fmt.Sprintf("10.99.0.%d", i+10)), Bridge: "br0", Policy: PolicySameBridge})
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if got := live.Read(t, ns); len(got["allow4"]) != n || len(got["bridge_owners"]) != n || len(got["bridges"]) != 1 {
		t.Errorf("after %d concurrent Setups: %q", n, got)
	}
}

// routed builds container ⇄ host (router) ⇄ outside, with routes both
// ways, forwarding on, and an iptables-nft FORWARD chain with policy drop
// in both families on the host.
func routed(t *testing.T) (container, host, outside *netns.NS) {
	t.Helper()
	container, host, outside = privtest.NewNS(t), privtest.NewNS(t), privtest.NewNS(t)
	hc, hh, ho := privtest.Handle(t, container), privtest.Handle(t, host), privtest.Handle(t, outside)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, ns := range []*netns.NS{container, host, outside} {
		must(sysctl.Set(ns, "net/ipv6/conf/default/accept_dad", "0"))
	}
	must(hh.AddVeth(netlinkx.VethSpec{Name: "to-c", PeerName: "eth0", PeerNS: container}))
	must(hh.AddVeth(netlinkx.VethSpec{Name: "to-o", PeerName: "eth0", PeerNS: outside}))
	noDAD := netlinkx.AddrOpts{NoDAD: true}
	for _, a := range []struct {
		h    *netlinkx.Handle
		link string
		addr string
	}{
		{hc, "eth0", "10.99.0.5/24"}, {hc, "eth0", "fd00:99::5/64"},
		{hh, "to-c", "10.99.0.1/24"}, {hh, "to-c", "fd00:99::1/64"},
		{hh, "to-o", "192.0.2.1/24"}, {hh, "to-o", "2001:db8::1/64"},
		{ho, "eth0", "192.0.2.2/24"}, {ho, "eth0", "2001:db8::2/64"},
	} {
		must(a.h.AddAddr(a.link, netip.MustParsePrefix(a.addr), noDAD))
	}
	for _, l := range []struct {
		h    *netlinkx.Handle
		name string
	}{{hc, "eth0"}, {hc, "lo"}, {hh, "to-c"}, {hh, "to-o"}, {ho, "eth0"}, {ho, "lo"}} {
		must(l.h.SetUp(l.name))
	}
	privtest.WaitOperUp(t, hc, "eth0")
	privtest.WaitOperUp(t, ho, "eth0")
	must(hc.AddRoute(netlinkx.Route{Dst: netip.MustParsePrefix("0.0.0.0/0"), Gw: netip.MustParseAddr("10.99.0.1")}))
	must(hc.AddRoute(netlinkx.Route{Dst: netip.MustParsePrefix("::/0"), Gw: netip.MustParseAddr("fd00:99::1")}))
	must(ho.AddRoute(netlinkx.Route{Dst: netip.MustParsePrefix("10.99.0.0/24"), Gw: netip.MustParseAddr("192.0.2.1")}))
	must(ho.AddRoute(netlinkx.Route{Dst: netip.MustParsePrefix("fd00:99::/64"), Gw: netip.MustParseAddr("2001:db8::1")}))
	must(sysctl.Set(host, "net/ipv4/ip_forward", "1"))
	must(sysctl.Set(host, "net/ipv6/conf/all/forwarding", "1"))
	foreignFilter(t, host, nftables.TableFamilyIPv4)
	foreignFilter(t, host, nftables.TableFamilyIPv6)
	return container, host, outside
}

// With a foreign FORWARD policy drop, the container's own traffic and the
// replies to it pass once Setup ran, new connections from outside do not
// (as with the reference's rules), and nothing passes after Teardown.
func TestLiveForeignDropPolicyTraffic(t *testing.T) {
	container, host, outside := routed(t)
	o := ownerid.Owner{Network: "net1", ContainerID: "c0ffee", IfName: "eth0"}
	a := Attachment{Owner: o, Addrs: addrs("10.99.0.5", "fd00:99::5")}
	const timeout = 700 * time.Millisecond
	port := uint16(40000)
	exchange := func(from, to *netns.NS, src, dst string) bool {
		port++
		_, echoed := privtest.UDPExchange(t, from, to, netip.AddrPortFrom(netip.MustParseAddr(src), port), netip.MustParseAddr(dst), timeout)
		return echoed
	}
	for _, fam := range []struct{ ctr, out string }{{"10.99.0.5", "192.0.2.2"}, {"fd00:99::5", "2001:db8::2"}} {
		if exchange(container, outside, fam.ctr, fam.out) {
			t.Fatalf("%s → %s passed the drop policy before Setup", fam.ctr, fam.out)
		}
	}
	if err := Setup(host, a); err != nil {
		t.Fatal(err)
	}
	for _, fam := range []struct{ ctr, out string }{{"10.99.0.5", "192.0.2.2"}, {"fd00:99::5", "2001:db8::2"}} {
		if !exchange(container, outside, fam.ctr, fam.out) {
			t.Errorf("%s → %s: no round trip after Setup", fam.ctr, fam.out)
		}
		if exchange(outside, container, fam.out, fam.ctr) {
			t.Errorf("%s → %s: a new connection from outside passed", fam.out, fam.ctr)
		}
	}
	if err := Teardown(host, o, nil); err != nil {
		t.Fatal(err)
	}
	for _, fam := range []struct{ ctr, out string }{{"10.99.0.5", "192.0.2.2"}, {"fd00:99::5", "2001:db8::2"}} {
		if exchange(container, outside, fam.ctr, fam.out) {
			t.Errorf("%s → %s passed after Teardown", fam.ctr, fam.out)
		}
	}
}

// A lookup element or static rule gone missing (deleted by hand) fails
// Check, and the next Setup of an attachment needing it puts it back.
func TestLiveRepair(t *testing.T) {
	ns := privtest.NewNS(t)
	o := ownerid.Owner{Network: "net1", ContainerID: "c0ffee", IfName: "eth0"}
	a := Attachment{Owner: o, Addrs: addrs("10.99.0.5"), Bridge: "br0", Policy: PolicySameBridge}
	if err := Setup(ns, a); err != nil {
		t.Fatal(err)
	}
	c := dial(t, ns)
	for _, tt := range []struct {
		name   string
		damage func(tx *nft.Tx) error
		want   string
	}{
		{"lookup element", func(tx *nft.Tx) error {
			tx.Batch().DeleteElements(allow4, []nft.Element{{Key: addr("10.99.0.5")}})
			return nil
		}, "address 10.99.0.5: no element in set inet nftcni_firewall allow4"},
		{"bridge element", func(tx *nft.Tx) error {
			tx.Batch().DeleteElements(bridgeSelf, []nft.Element{{Key: nft.Concat(nft.IfnameKey("br0"), nft.IfnameKey("br0"))}})
			return nil
		}, `bridge "br0": no element in set inet nftcni_firewall bridge_self`},
		{"static rule", func(tx *nft.Tx) error {
			rs, err := tx.Rules(forward)
			if err == nil {
				tx.Batch().DeleteRule(forward, rs[0].Handle)
			}
			return err
		}, "chain inet nftcni_firewall forward does not hold the firewall's rules"},
	} {
		if err := c.Update(tt.damage); err != nil {
			t.Fatal(err)
		}
		if err := Check(ns, a); errText(err) != tt.want {
			t.Errorf("%s: Check = %v, want %q", tt.name, err, tt.want)
		}
		if err := Setup(ns, a); err != nil {
			t.Fatal(err)
		}
		if err := Check(ns, a); err != nil {
			t.Errorf("%s: Check after a new Setup: %v", tt.name, err)
		}
	}
}

// Markers and counts follow the claims through any sequence of Setups,
// Teardowns and GCs, whichever way each ran: random operations of six
// owners in two networks over a few shared addresses and bridges, and after
// each, the claims are the model's, every lookup element is claimed and
// tagged with a claimant, every count is its key's number of claims, and
// every owner with claims has its marker recording them.
func TestLiveBookkeeping(t *testing.T) {
	ns := privtest.NewNS(t)
	addrs := []netip.Addr{netip.MustParseAddr("10.9.0.1"), netip.MustParseAddr("10.9.0.2"), netip.MustParseAddr("fd00:9::1")}
	owners := make([]ownerid.Owner, 6)
	for i := range owners {
		owners[i] = ownerid.Owner{Network: []string{"neta", "netb"}[i%2], ContainerID: fmt.Sprintf("c%d", i), IfName: "eth0"}
	}
	model := map[int]Attachment{} // what each owner has set up
	rng := rand.New(rand.NewPCG(1, 2))
	tried, fellBack := lookupRuns.tried.Load(), lookupRuns.fellBack.Load()
	for step := range 80 {
		i := rng.IntN(len(owners))
		var what string
		switch r := rng.IntN(10); {
		case r < 5:
			a := Attachment{Owner: owners[i]}
			for _, ad := range addrs {
				if rng.IntN(2) == 0 {
					a.Addrs = append(a.Addrs, ad)
				}
			}
			a.Policy = Policy(rng.IntN(3))
			if a.Policy != PolicyOpen {
				a.Bridge = []string{"br0", "br1"}[rng.IntN(2)]
			}
			what = fmt.Sprintf("Setup %s %s", owners[i].ContainerID, record(a))
			if err := Setup(ns, a); err != nil {
				t.Fatalf("step %d: %s: %v", step, what, err)
			}
			model[i] = a
		case r < 9:
			what = "Teardown " + owners[i].ContainerID
			if err := Teardown(ns, owners[i], nil); err != nil {
				t.Fatalf("step %d: %s: %v", step, what, err)
			}
			delete(model, i)
		default:
			var valid []ownerid.Owner
			for j, o := range owners {
				if o.Network == "neta" && (model[j].Owner.ContainerID == "" || rng.IntN(2) == 0) {
					valid = append(valid, o)
				}
			}
			what = fmt.Sprintf("GC neta keeping %d", len(valid))
			if err := GC(ns, "neta", valid); err != nil {
				t.Fatalf("step %d: %s: %v", step, what, err)
			}
			for j, o := range owners {
				if o.Network == "neta" && !slices.Contains(valid, o) {
					delete(model, j)
				}
			}
		}
		checkBookkeeping(t, ns, fmt.Sprintf("step %d, after %s", step, what), owners, model)
	}
	if n := lookupRuns.tried.Load() - tried; n < 30 {
		t.Errorf("only %d Setups and Teardowns planned by lookups", n)
	}
	t.Logf("planned by lookups: %d, of which run again the old way: %d", lookupRuns.tried.Load()-tried, lookupRuns.fellBack.Load()-fellBack)
}

// checkBookkeeping compares the claims with model and checks the lookup
// elements, counts and markers derived from them.
func checkBookkeeping(t *testing.T, ns *netns.NS, step string, owners []ownerid.Owner, model map[int]Attachment) {
	t.Helper()
	c, err := nft.Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	read := func(s *nftables.Set) []nft.Element {
		els, err := c.Elements(s)
		if err != nil {
			t.Fatal(err)
		}
		return els
	}
	want := map[*nftables.Set][]string{}
	for _, a := range model {
		w, err := wanted(a)
		if err != nil {
			t.Fatal(err)
		}
		for s, els := range w {
			for _, e := range uniqueKeys(els) {
				want[s] = append(want[s], fmt.Sprintf("%x %s", e.Key, e.Comment))
			}
		}
	}
	records := map[string]string{} // marker key → comment
	for _, a := range model {
		if rec := record(a); rec != "" {
			e := nft.MarkerWith(a.Owner, rec)
			records[string(e.Key)] = e.Comment
		}
	}
	for _, cs := range claimSets {
		claims := read(cs.set)
		var got []string
		n := map[string]uint32{}
		tags := map[string][]string{}
		for _, e := range claims {
			got = append(got, fmt.Sprintf("%x %s", e.Key, e.Comment))
			k := string(cs.claimed(e))
			n[k]++
			tags[k] = append(tags[k], e.Comment)
		}
		slices.Sort(got)
		w := want[cs.set]
		slices.Sort(w)
		if !slices.Equal(got, w) {
			t.Errorf("%s: %s holds %q, want %q", step, cs.set.Name, got, w)
		}
		for _, e := range read(cs.count) {
			if len(e.Val) != 4 || binary.BigEndian.Uint32(e.Val) != n[string(e.Key)] {
				t.Errorf("%s: %s[%x] = %x, want %d", step, cs.count.Name, e.Key, e.Val, n[string(e.Key)])
			}
			delete(n, string(e.Key))
		}
		if len(n) != 0 {
			t.Errorf("%s: %s lacks counts of %d keys", step, cs.count.Name, len(n))
		}
		for _, d := range cs.derived {
			have := map[string]bool{}
			for _, e := range read(d.set) {
				have[string(e.Key)] = true
				var claimants []string
				for k, ts := range tags {
					if string(d.key([]byte(k))) == string(e.Key) {
						claimants = ts
					}
				}
				if !slices.Contains(claimants, e.Comment) {
					t.Errorf("%s: %s element %x tagged %q, claimed by %q", step, d.set.Name, e.Key, e.Comment, claimants)
				}
			}
			for k := range tags {
				if !have[string(d.key([]byte(k)))] {
					t.Errorf("%s: %s lacks claimed key %x", step, d.set.Name, k)
				}
			}
		}
	}
	for _, e := range read(markers) {
		if records[string(e.Key)] != e.Comment {
			t.Errorf("%s: marker %s is %q, want %q", step, e.Key, e.Comment, records[string(e.Key)])
		}
		delete(records, string(e.Key))
	}
	if len(records) != 0 {
		t.Errorf("%s: markers missing: %v", step, records)
	}
}
