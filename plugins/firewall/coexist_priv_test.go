package firewall

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/cniruntime"
	"github.com/nftcni/nftcni/internal/hostfw"
	"github.com/nftcni/nftcni/internal/plugintest"
	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/sysctl"

	"github.com/nftcni/nftcni/netns"
)

// Coexistence: the host situations of real machines, each built in the
// test's host namespace the way its owner builds it (internal/hostfw: the
// iptables and nft programs), before or after the containers are added.
// The networks are Podman's chain — bridge with ipMasq, portmap, firewall
// — and the proof is packets: masqueraded egress over IPv4 and IPv6,
// container to container on one bridge and across two, a host port from
// outside over both families and from a container of the other bridge.
// CHECK passes in every order; after DEL and GC every other owner's
// ruleset is as it was (nft's JSON listing, handles included, and
// iptables-save), nothing of ours is left anywhere.

// situation is one host firewall setup.
type situation struct {
	name string
	// build makes the other owners' rules in the host namespace.
	build func(t *testing.T, ns *netns.NS)
	// late: built after the containers were added (Docker starting
	// after them).
	late bool
	// optIn: the networks name the administrator's chain
	// (nftablesAcceptChains "inet filter forward").
	optIn bool
	// drops: the situation drops forwarded traffic by itself — a network
	// without firewall and portmap loses its egress.
	drops bool
	// blocked: our attachments' traffic does not pass either (the
	// administrator's drop chain, not opted in: the control).
	blocked bool
	// kube: kube-proxy's service 10.96.0.10:80 (served by the outside,
	// 192.0.2.2:8080) must still work from a container.
	kube bool
}

func docker(t *testing.T, ns *netns.NS)    { hostfw.Commands(t, ns, hostfw.Docker) }
func kubeProxy(t *testing.T, ns *netns.NS) { hostfw.Load(t, ns, hostfw.KubeProxy) }
func admin(t *testing.T, ns *netns.NS)     { hostfw.Load(t, ns, hostfw.AdminFilter) }

var situations = []situation{
	{name: "Docker before ADD", build: docker, drops: true},
	{name: "Docker after ADD", build: docker, late: true, drops: true},
	{name: "kube-proxy nftables", build: kubeProxy, kube: true},
	{name: "kube-proxy iptables mode after ADD", build: func(t *testing.T, ns *netns.NS) { hostfw.Commands(t, ns, hostfw.KubeProxyIptables) },
		late: true, drops: true},
	{name: "kube-proxy nftables and Docker after ADD", build: func(t *testing.T, ns *netns.NS) { kubeProxy(t, ns); docker(t, ns) },
		late: true, drops: true, kube: true},
	{name: "admin inet filter drop, opted in", build: admin, optIn: true, drops: true},
	{name: "admin inet filter drop, not opted in", build: admin, drops: true, blocked: true},
}

// hostPort is the port mapped to container a's port 80 (Docker maps
// 8080, kube-proxy's NodePorts are 30080 and 30081).
const hostPort = 8081

func TestCoexistence(t *testing.T) {
	t.Parallel()
	for _, s := range situations {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			coexist(t, s)
		})
	}
}

// podman is Podman's default chain for network name on bridge br: bridge
// (gateway, default routes, ipMasq, host-local over an IPv4 and an IPv6
// range), portmap, firewall; extra goes into portmap and firewall.
func (w *world) podman(name, br, subnet4, subnet6, extra string) *cniruntime.NetworkConfigList {
	w.t.Helper()
	list, err := cniruntime.NetworkConfFromBytes(fmt.Appendf(nil, `{"cniVersion":"1.1.0","name":%q,"plugins":[
		{"type":"bridge","bridge":%q,"isGateway":true,"ipMasq":true,"hairpinMode":true,
		 "ipam":{"type":"host-local","dataDir":%q,"ranges":[[{"subnet":%q}],[{"subnet":%q}]],"routes":[{"dst":"0.0.0.0/0"},{"dst":"::/0"}]}},
		{"type":"portmap","capabilities":{"portMappings":true}%s},
		{"type":"firewall"%s}]}`, name, br, w.t.TempDir(), subnet4, subnet6, extra, extra))
	plugintest.Must(w.t, err)
	return list
}

func coexist(t *testing.T, s situation) {
	hostfw.Require(t)
	plugintest.RequirePlugin(t, "portmap")
	w := newWorld(t)
	host := w.th.NS
	var theirs, saved string
	snapshot := func() {
		theirs, saved = hostfw.Others(t, host), hostfw.WithoutOurs(hostfw.IptablesSave(t, host))
	}
	if !s.late {
		s.build(t, host)
		snapshot()
	}

	extra := ""
	if s.optIn {
		extra = `,"nftablesAcceptChains":["inet filter forward"]`
	}
	net1 := w.podman("net1", "br0", "10.70.0.0/24", "fd00:70::/64", extra)
	net2 := w.podman("net2", "br1", "10.71.0.0/24", "fd00:71::/64", extra)
	plain := w.network("plain", "br9", "10.79.0.0/24", "fd00:79::/64", nil)
	a := w.attachCaps(net1, "a", map[string]any{"portMappings": []map[string]any{{"hostPort": hostPort, "containerPort": 80, "protocol": "tcp"}}})
	b := w.attach(net1, "b")
	c := w.attach(net2, "c")
	d := w.attach(plain, "d")
	ctrs := []*ctr{a, b, c, d}
	check := func(when string) {
		t.Helper()
		for _, x := range ctrs {
			if err := w.rt.CheckNetworkList(context.Background(), x.listConf, x.rtConf); err != nil {
				t.Errorf("CHECK of %s %s: %v", x.id, when, err)
			}
		}
	}
	check("after ADD")
	if s.late {
		s.build(t, host)
		snapshot()
		check("after the situation was built")
	}

	pass := !s.blocked
	up4, up6 := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8:1::1")
	tcp := func(name string, from *netns.NS, dial netip.AddrPort, to *netns.NS, listen netip.AddrPort, seen netip.Addr, want bool) {
		t.Helper()
		got := privtest.TCPRoundTrip(t, from, dial, to, listen)
		switch {
		case got.IsValid() != want:
			t.Errorf("%s: connected %v, want %v", name, got.IsValid(), want)
		case want && seen.IsValid() && got.Addr() != seen:
			t.Errorf("%s: the server saw %s, want %s", name, got.Addr(), seen)
		}
	}
	ap := func(a string, port uint16) netip.AddrPort { return netip.AddrPortFrom(netip.MustParseAddr(a), port) }
	tcp("a → outside v4 (masqueraded)", a.ns, ap("192.0.2.2", 0), w.outside, ap("192.0.2.2", 0), up4, pass)
	tcp("a → outside v6 (masqueraded)", a.ns, ap("2001:db8:1::2", 0), w.outside, ap("2001:db8:1::2", 0), up6, pass)
	tcp("outside → host port v4 → a", w.outside, netip.AddrPortFrom(up4, hostPort), a.ns, ap(a.v4, 80), netip.MustParseAddr("192.0.2.2"), pass)
	tcp("outside → host port v6 → a", w.outside, netip.AddrPortFrom(up6, hostPort), a.ns, ap(a.v6, 80), netip.MustParseAddr("2001:db8:1::2"), pass)
	tcp("c (other bridge) → host port → a", c.ns, netip.AddrPortFrom(up4, hostPort), a.ns, ap(a.v4, 80), netip.Addr{}, pass)
	// On one bridge, packets meet the forward hook only with bridge
	// netfilter (br_netfilter, loaded on Docker and Kubernetes hosts):
	// with it, the situation's drop applies there too.
	traffic{
		{"a → b (same bridge) v4", a.ns, b.ns, b.v4, pass || !bridgeNetfilter(t, host)},
		{"a → c (across bridges) v4", a.ns, c.ns, c.v4, pass},
		{"c → a (across bridges) v6", c.ns, a.ns, a.v6, pass},
		{"d → outside (no firewall plugin) v4", d.ns, w.outside, "192.0.2.2", !s.drops},
	}.expect(t)
	if s.kube {
		tcp("a → kube-proxy's ClusterIP 10.96.0.10:80 → 192.0.2.2:8080", a.ns, ap("10.96.0.10", 80), w.outside, ap("192.0.2.2", 8080), up4, true)
	}

	// a and c go by DEL; b's container vanishes without one and GC (no
	// valid attachment left in net1) collects it; d, without our plugins,
	// by DEL.
	w.detach(a)
	gc := &cniruntime.GCArgs{ValidAttachments: []cni.Attachment{}}
	if err := w.rt.GCNetworkList(context.Background(), net1, gc); err != nil {
		t.Fatalf("GC of net1: %v", err)
	}
	w.detach(c)
	w.detach(d)
	for _, x := range ctrs {
		if n := owned(t, host, x.owner()); n != 0 {
			t.Errorf("%s: %d objects left", x.id, n)
		}
	}
	hostfw.Diff(t, "the other owners' nftables ruleset", theirs, hostfw.Others(t, host))
	hostfw.Diff(t, "iptables-save", saved, hostfw.IptablesSave(t, host))
	if n := hostfw.OursInOthers(t, host); n != 0 {
		t.Errorf("%d rules with an owner tag of ours left in other owners' tables", n)
	}
}

// bridgeNetfilter reports whether bridged IPv4 packets in ns go through the
// IP hooks (br_netfilter loaded, net.bridge.bridge-nf-call-iptables on).
func bridgeNetfilter(t *testing.T, ns *netns.NS) bool {
	t.Helper()
	v, err := sysctl.Get(ns, "net/bridge/bridge-nf-call-iptables")
	return err == nil && strings.TrimSpace(v) == "1"
}
