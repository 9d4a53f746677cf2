package firewall

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"testing"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"

	"github.com/nftcni/nftcni/cniruntime"
	"github.com/nftcni/nftcni/internal/plugintest"
	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/nft"
	"github.com/nftcni/nftcni/ownerid"
)

func TestMain(m *testing.M) { plugintest.Main(m) }

// world is a test's host namespace, where every plugin runs (bridge,
// host-local and firewall, chained by our libcni-compatible runtime), plus
// an "outside" namespace wired to it: host up0 192.0.2.1/24 and
// 2001:db8:1::1/64, outside down0 .2 / ::2, routing the container ranges
// (10.0.0.0/8, fd00::/8) back through the host.
type world struct {
	t       *testing.T
	th      *plugintest.Host // runs "firewall" alone, for single calls
	rt      *cniruntime.Runtime
	outside *netns.NS
}

func newWorld(t *testing.T) *world {
	t.Helper()
	th := plugintest.NewHost(t, "firewall")
	plugintest.RequirePlugin(t, "host-local")
	plugintest.RequirePlugin(t, "bridge")
	outside := privtest.NewNS(t)
	privtest.Wire(t, th.NS, "up0", netip.MustParsePrefix("192.0.2.1/24"), outside, "down0", netip.MustParsePrefix("192.0.2.2/24"))
	ho := privtest.Handle(t, outside)
	nodad := netlinkx.AddrOpts{NoDAD: true}
	plugintest.Must(t, ho.AddAddr("down0", netip.MustParsePrefix("2001:db8:1::2/64"), nodad))
	plugintest.Must(t, th.H.AddAddr("up0", netip.MustParsePrefix("2001:db8:1::1/64"), nodad))
	plugintest.Must(t, ho.SetUp("lo"))
	for _, r := range []struct{ dst, gw string }{{"10.0.0.0/8", "192.0.2.1"}, {"fd00::/8", "2001:db8:1::1"}} {
		plugintest.Must(t, ho.AddRoute(netlinkx.Route{Dst: netip.MustParsePrefix(r.dst), Gw: netip.MustParseAddr(r.gw)}))
	}
	return &world{
		t:       t,
		th:      th,
		outside: outside,
		rt: &cniruntime.Runtime{
			Path:     []string{plugintest.BinDir(t)},
			CacheDir: t.TempDir(),
			HostNS:   th.NS,
			Stderr:   io.Discard,
		},
	}
}

// network is a conflist: bridge (gateway and default route, host-local
// with an IPv4 and an IPv6 range) and, unless fw is nil, firewall with the
// JSON members *fw (starting with a comma, or empty).
func (w *world) network(name, bridge, subnet4, subnet6 string, fw *string) *cniruntime.NetworkConfigList {
	w.t.Helper()
	plugins := fmt.Sprintf(`{"type":"bridge","bridge":%q,"isDefaultGateway":true,`+
		`"ipam":{"type":"host-local","dataDir":%q,"ranges":[[{"subnet":%q}],[{"subnet":%q}]]}}`,
		bridge, w.t.TempDir(), subnet4, subnet6)
	if fw != nil {
		plugins += `,{"type":"firewall"` + *fw + `}`
	}
	list, err := cniruntime.NetworkConfFromBytes([]byte(fmt.Sprintf(`{"cniVersion":"1.1.0","name":%q,"plugins":[%s]}`, name, plugins)))
	plugintest.Must(w.t, err)
	return list
}

func fields(s string) *string { return &s }

// ctr is an attached container.
type ctr struct {
	ns       *netns.NS
	id       string
	network  string
	v4, v6   string // its addresses
	destroy  func() // destroys ns (DoomedCtr), for "netns gone"
	rtConf   *cniruntime.RuntimeConf
	listConf *cniruntime.NetworkConfigList
}

func (c *ctr) owner() ownerid.Owner {
	return ownerid.Owner{Network: c.network, ContainerID: c.id, IfName: "eth0"}
}

// attach creates a container namespace and runs ADD of list for it.
func (w *world) attach(list *cniruntime.NetworkConfigList, id string) *ctr {
	w.t.Helper()
	return w.attachCaps(list, id, nil)
}

// attachCaps is attach with the runtime's capability arguments (port
// mappings).
func (w *world) attachCaps(list *cniruntime.NetworkConfigList, id string, caps map[string]any) *ctr {
	w.t.Helper()
	ns, destroy := plugintest.DoomedCtr(w.t)
	h := privtest.Handle(w.t, ns)
	plugintest.Must(w.t, h.SetUp("lo"))
	rc := &cniruntime.RuntimeConf{ContainerID: id, NetNS: ns.Path(), IfName: "eth0", CapabilityArgs: caps}
	r, err := w.rt.AddNetworkList(context.Background(), list, rc)
	if err != nil {
		w.t.Fatalf("ADD %s to %s: %v", id, list.Name, err)
	}
	c := &ctr{ns: ns, id: id, network: list.Name, destroy: destroy, rtConf: rc, listConf: list}
	for _, ip := range r.IPs {
		if ip.Address.Addr().Is4() {
			c.v4 = ip.Address.Addr().String()
		} else {
			c.v6 = ip.Address.Addr().String()
		}
	}
	if c.v4 == "" || c.v6 == "" {
		w.t.Fatalf("ADD %s: addresses %v", id, r.IPs)
	}
	return c
}

// detach runs DEL of the container's list.
func (w *world) detach(c *ctr) {
	w.t.Helper()
	if err := w.rt.DelNetworkList(context.Background(), c.listConf, c.rtConf); err != nil {
		w.t.Fatalf("DEL %s: %v", c.id, err)
	}
}

// trip reports whether a UDP round trip from `from` to dst, served in to,
// completes.
func trip(t *testing.T, from, to *netns.NS, dst string) bool {
	t.Helper()
	return privtest.UDPRoundTrip(t, from, to, netip.MustParseAddr(dst))
}

// Traffic is a table of round trips and whether each must complete.
type traffic []struct {
	name     string
	from, to *netns.NS
	dst      string
	passes   bool
}

func (tr traffic) expect(t *testing.T) {
	t.Helper()
	for _, x := range tr {
		if got := trip(t, x.from, x.to, x.dst); got != x.passes {
			t.Errorf("%s (to %s): round trip %v, want %v", x.name, x.dst, got, x.passes)
		}
	}
}

var (
	ipFilter  = &nftables.Table{Family: nftables.TableFamilyIPv4, Name: "filter"}
	ip6Filter = &nftables.Table{Family: nftables.TableFamilyIPv6, Name: "filter"}
)

// dropForward creates in ns what `iptables-nft -P FORWARD DROP` and
// `ip6tables-nft -P FORWARD DROP` leave behind: table ip/ip6 filter with
// base chain FORWARD, policy drop (google/nftables directly: our batches
// refuse tables not ours). Each chain also holds a rule of someone else's.
func dropForward(t *testing.T, ns *netns.NS) {
	t.Helper()
	g, err := nftables.New(nftables.WithNetNSFd(ns.Fd()))
	plugintest.Must(t, err)
	defer g.CloseLasting()
	drop := nftables.ChainPolicyDrop
	for _, tb := range []*nftables.Table{ipFilter, ip6Filter} {
		g.AddTable(tb)
		ch := g.AddChain(&nftables.Chain{Table: tb, Name: "FORWARD", Type: nftables.ChainTypeFilter,
			Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter, Policy: &drop})
		g.AddRule(&nftables.Rule{Table: tb, Chain: ch, Exprs: []expr.Any{&expr.Counter{}}, UserData: nft.RuleUserData("someone else's rule")})
	}
	plugintest.Must(t, g.Flush())
}

// foreignRules lists the comments of the rules in ip and ip6 filter
// FORWARD of ns (missing chains read as empty).
func foreignRules(t *testing.T, ns *netns.NS) []string {
	t.Helper()
	c, err := nft.Open(ns)
	plugintest.Must(t, err)
	defer c.Close()
	var out []string
	for _, tb := range []*nftables.Table{ipFilter, ip6Filter} {
		rs, err := c.Rules(&nftables.Chain{Table: tb, Name: "FORWARD"})
		plugintest.Must(t, err)
		for _, r := range rs {
			out = append(out, r.Comment)
		}
	}
	return out
}

// sharedTag is the comment of the one rule of ours in each iptables-nft
// FORWARD chain, the same for every attachment: it accepts the packets
// table inet nftcni_accept marked (foreign.MarkBit).
const sharedTag = "98d28d7ce706381e:effb6c9e37d86e32 nftcni-marked-accepts"

// foreignOwned counts owner's claims in table inet nftcni_accept: one
// element of map claims per accept it has in an iptables-nft FORWARD
// chain (two per address for the firewall).
func foreignOwned(t *testing.T, ns *netns.NS, owner ownerid.Owner) int {
	t.Helper()
	n := 0
	for _, e := range ownedElements(t, ns, owner) {
		if e.Table == "nftcni_accept" && e.Set == "claims" {
			n++
		}
	}
	return n
}

// ownedElements lists the elements of our tables carrying owner's tag.
func ownedElements(t *testing.T, ns *netns.NS, owner ownerid.Owner) []nft.OwnedElement {
	t.Helper()
	c, err := nft.Open(ns)
	plugintest.Must(t, err)
	defer c.Close()
	els, err := c.OwnedElements()
	plugintest.Must(t, err)
	var out []nft.OwnedElement
	for _, e := range els {
		if owner.OwnedBy(e.Comment) {
			out = append(out, e)
		}
	}
	return out
}

// sharedRules counts the rules of ours in ip and ip6 filter FORWARD:
// one each while any attachment has claims, none after the last DEL. Any
// other rule of ours there (a per-address accept) is an error.
func sharedRules(t *testing.T, ns *netns.NS) int {
	t.Helper()
	n := 0
	for _, c := range foreignRules(t, ns) {
		if c == sharedTag {
			n++
		} else if _, ok := ownerid.ParseTag(c); ok {
			t.Errorf("a rule of ours in FORWARD besides the shared one: %q", c)
		}
	}
	return n
}

// owned counts everything carrying owner's tag: elements and rules of
// our tables (nftcni_accept's claims too) and rules in the iptables-nft
// FORWARD chains (an earlier version's per-address accepts).
func owned(t *testing.T, ns *netns.NS, owner ownerid.Owner) int {
	t.Helper()
	n := plugintest.NFTOwned(t, ns, owner)
	for _, c := range foreignRules(t, ns) {
		if owner.OwnedBy(c) {
			n++
		}
	}
	if n != 0 {
		t.Logf("objects of %s: %v", owner.ContainerID, ownedElements(t, ns, owner))
	}
	return n
}

func tableExists(t *testing.T, ns *netns.NS, tb *nftables.Table) bool {
	t.Helper()
	c, err := nft.Open(ns)
	plugintest.Must(t, err)
	defer c.Close()
	ok, err := c.TableExists(tb)
	plugintest.Must(t, err)
	return ok
}
