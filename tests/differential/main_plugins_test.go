package differential

import (
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/internal/plugintest"
	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netlinkx"
)

// Scenarios of the interface plugins.

func bridgeScenarios() []*scenario {
	br := func(extra string) string {
		return `{"type":"bridge","bridge":"cni0"` + extra + `}`
	}
	return []*scenario{
		{name: "isGateway", plugin: "bridge",
			conf:  conflist("1.0.0", br(`,"isGateway":true,"ipam":`+hostLocal(v4, ""))),
			probe: func(t *testing.T, s *side) string { return ping(t, s, "ctr", gateway4) }},
		{name: "DEL after the netns is gone", plugin: "bridge", netnsGone: true,
			conf: conflist("1.0.0", br(`,"isDefaultGateway":true,"ipMasq":true,"ipam":`+hostLocal(v4, "")))},
		{name: "layer 2", plugin: "bridge",
			conf: conflist("1.0.0", br(`,"mtu":1400`))},
		{name: "isDefaultGateway ipMasq dual-stack", plugin: "bridge",
			conf:  conflist("1.1.0", br(`,"isDefaultGateway":true,"ipMasq":true,"ipam":`+hostLocal(dual, ""))),
			setup: uplink,
			probe: probes(
				func(t *testing.T, s *side) string { return udpSource(t, s, "ctr", upOut4.Addr()) },
				func(t *testing.T, s *side) string { return udpSource(t, s, "ctr", upOut6.Addr()) })},
		{name: "ipMasq nftables backend", plugin: "bridge",
			conf: conflist("1.0.0", br(`,"isDefaultGateway":true,"ipMasq":true,"ipMasqBackend":"nftables","ipam":`+
				hostLocal(v4, ""))),
			setup: uplink,
			probe: func(t *testing.T, s *side) string { return udpSource(t, s, "ctr", upOut4.Addr()) }},
		{name: "isGateway without masquerade", plugin: "bridge",
			conf:  conflist("1.0.0", br(`,"isDefaultGateway":true,"ipam":`+hostLocal(v4, ""))),
			setup: uplink,
			probe: func(t *testing.T, s *side) string { return udpSource(t, s, "ctr", upOut4.Addr()) }},
		{name: "two containers hairpin promisc-free", plugin: "bridge", ctrs: 2,
			conf: conflist("1.0.0", br(`,"isGateway":true,"hairpinMode":true,"portIsolation":false,"ipam":`+hostLocal(v4, ""))),
			probe: func(t *testing.T, s *side) string {
				return ping(t, s, "ctr", netip.MustParseAddr("10.22.0.3"))
			}},
		{name: "portIsolation", plugin: "bridge", ctrs: 2,
			conf: conflist("1.0.0", br(`,"isGateway":true,"portIsolation":true,"ipam":`+hostLocal(v4, ""))),
			probe: func(t *testing.T, s *side) string {
				return ping(t, s, "ctr", netip.MustParseAddr("10.22.0.3")) + "; " + ping(t, s, "ctr", gateway4)
			}},
		{name: "promiscMode mtu", plugin: "bridge",
			conf: conflist("0.4.0", br(`,"promiscMode":true,"mtu":1400,"ipam":`+hostLocal(v4, ""))),
		},
		{name: "mac capability macspoofchk", plugin: "bridge",
			conf: conflist("1.0.0", br(`,"isGateway":true,"macspoofchk":true,"capabilities":{"mac":true},"ipam":`+
				hostLocal(v4, ""))),
			caps:  map[string]any{"mac": "02:22:33:44:55:66"},
			probe: func(t *testing.T, s *side) string { return ping(t, s, "ctr", gateway4) }},
		{name: "existing bridge forceAddress", plugin: "bridge",
			conf: conflist("1.0.0", br(`,"isGateway":true,"forceAddress":true,"ipam":`+hostLocal(v4, ""))),
			setup: func(t *testing.T, s *side) {
				h := s.h["host"]
				plugintest.Must(t, h.AddBridge(netlinkx.BridgeSpec{Name: "cni0"}))
				plugintest.Must(t, h.AddAddr("cni0", netip.MustParsePrefix("10.22.0.9/24"), netlinkx.AddrOpts{NoDAD: true}))
			}},
		{name: "existing bridge address conflict", plugin: "bridge",
			conf: conflist("1.0.0", br(`,"isGateway":true,"ipam":`+hostLocal(v4, ""))),
			setup: func(t *testing.T, s *side) {
				h := s.h["host"]
				plugintest.Must(t, h.AddBridge(netlinkx.BridgeSpec{Name: "cni0"}))
				plugintest.Must(t, h.AddAddr("cni0", netip.MustParsePrefix("10.22.0.9/24"), netlinkx.AddrOpts{NoDAD: true}))
				plugintest.Must(t, h.SetUp("cni0"))
			}},
		{name: "existing bridge that lost its ports", plugin: "bridge",
			conf: conflist("1.0.0", br(`,"isGateway":true,"ipam":`+hostLocal(v4, ""))),
			setup: func(t *testing.T, s *side) {
				// Never pinned, its last port gone: the kernel zeroed its MAC.
				h := s.h["host"]
				plugintest.Must(t, h.AddBridge(netlinkx.BridgeSpec{Name: "cni0"}))
				plugintest.Must(t, h.AddVeth(netlinkx.VethSpec{Name: "tmp0", PeerName: "tmp1"}))
				plugintest.Must(t, h.SetMaster("tmp0", "cni0"))
				plugintest.Must(t, h.DeleteLink("tmp0"))
			},
			probe: func(t *testing.T, s *side) string { return ping(t, s, "ctr", gateway4) }},
		{name: "existing bridge with the gateway address", plugin: "bridge",
			conf: conflist("1.0.0", br(`,"isGateway":true,"ipam":`+hostLocal(v4, ""))),
			setup: func(t *testing.T, s *side) {
				// An administrator's bridge: the gateway address, a port,
				// its MAC never set (it follows the port's).
				h := s.h["host"]
				plugintest.Must(t, h.AddBridge(netlinkx.BridgeSpec{Name: "cni0"}))
				plugintest.Must(t, h.AddVeth(netlinkx.VethSpec{Name: "adm0", PeerName: "adm1"}))
				plugintest.Must(t, h.SetMAC("adm0", net.HardwareAddr{0x02, 0, 0, 0, 0, 0x50}))
				plugintest.Must(t, h.SetMaster("adm0", "cni0"))
				plugintest.Must(t, h.AddAddr("cni0", netip.MustParsePrefix("10.22.0.1/24"), netlinkx.AddrOpts{NoDAD: true}))
				plugintest.Must(t, h.SetUp("cni0"))
			},
			// Port churn after ADD: a lower MAC joins, the port whose MAC
			// the bridge had leaves. CHECK (next) compares the bridge's
			// MAC with the result's.
			probe: func(t *testing.T, s *side) string {
				h := s.h["host"]
				plugintest.Must(t, h.AddVeth(netlinkx.VethSpec{Name: "low0", PeerName: "low1"}))
				plugintest.Must(t, h.SetMAC("low0", net.HardwareAddr{0x02, 0, 0, 0, 0, 0x01}))
				plugintest.Must(t, h.SetMaster("low0", "cni0"))
				plugintest.Must(t, h.DeleteLink("adm0"))
				return "bridge MAC after churn " + plugintest.MustLink(t, h, "cni0").MAC.String() + "; " + ping(t, s, "ctr", gateway4)
			}},
		{name: "vlan", plugin: "bridge", vlanFiltering: true,
			conf: conflist("1.0.0", br(`,"vlan":100,"isGateway":true,"ipam":`+hostLocal(v4, "")))},
		{name: "vlanTrunk", plugin: "bridge", vlanFiltering: true,
			conf: conflist("1.0.0", br(`,"vlanTrunk":[{"minID":200,"maxID":203},{"id":300}]`))},
		{name: "static ipam dns and cniVersion 0.3.1", plugin: "bridge",
			conf: conflist("0.3.1", br(`,"isGateway":true,"ipam":{"type":"static","addresses":[{"address":"10.22.0.5/24","gateway":"10.22.0.1"}],
				"routes":[{"dst":"192.168.0.0/16"}],"dns":{"nameservers":["10.22.0.1"],"search":["example.com"]}}`))},
		{name: "bad subnet", plugin: "bridge",
			conf: conflist("1.0.0", br(`,"ipam":`+hostLocal(`[[{"subnet":"10.22.0.0/33"}]]`, "")))},
		{name: "bridge name too long", plugin: "bridge",
			conf: conflist("1.0.0", `{"type":"bridge","bridge":"abcdefghijklmnopq","ipam":`+hostLocal(v4, "")+`}`)},
		{name: "bad ipMasqBackend", plugin: "bridge",
			conf: conflist("1.0.0", br(`,"ipMasq":true,"ipMasqBackend":"pf","ipam":`+hostLocal(v4, "")))},
		{name: "hairpin with promisc", plugin: "bridge",
			conf: conflist("1.0.0", br(`,"hairpinMode":true,"promiscMode":true,"ipam":`+hostLocal(v4, "")))},
	}
}

func ptpScenarios() []*scenario {
	return []*scenario{
		{name: "ipv4", plugin: "ptp",
			conf:  conflist("1.0.0", `{"type":"ptp","ipam":`+hostLocal(v4, "")+`}`),
			probe: func(t *testing.T, s *side) string { return ping(t, s, "ctr", gateway4) }},
		{name: "dual-stack ipMasq mtu", plugin: "ptp",
			conf:  conflist("1.1.0", `{"type":"ptp","ipMasq":true,"mtu":1400,"ipam":`+hostLocal(dual, `,"routes":[{"dst":"0.0.0.0/0"},{"dst":"::/0"}]`)+`}`),
			setup: uplink,
			probe: probes(
				func(t *testing.T, s *side) string { return udpSource(t, s, "ctr", upOut4.Addr()) },
				func(t *testing.T, s *side) string { return udpSource(t, s, "ctr", upOut6.Addr()) })},
		{name: "static with routes", plugin: "ptp",
			conf: conflist("0.4.0", `{"type":"ptp","ipam":{"type":"static","addresses":[{"address":"10.22.0.5/24","gateway":"10.22.0.1"}],
				"routes":[{"dst":"0.0.0.0/0"},{"dst":"192.168.0.0/16","gw":"10.22.0.1"}]}}`)},
		{name: "DEL after the netns is gone", plugin: "ptp", netnsGone: true,
			conf: conflist("1.0.0", `{"type":"ptp","ipMasq":true,"ipam":`+hostLocal(dual, "")+`}`)},
		{name: "IPAM config mistake", plugin: "ptp",
			conf: conflist("1.0.0", `{"type":"ptp","ipam":`+hostLocal(badRanges, "")+`}`)},
		{name: "no gateway", plugin: "ptp",
			conf: conflist("1.0.0", `{"type":"ptp","ipam":{"type":"static","addresses":[{"address":"10.22.0.5/24"}]}}`)},
		{name: "two containers", plugin: "ptp", ctrs: 2,
			conf: conflist("1.0.0", `{"type":"ptp","ipam":`+hostLocal(v4, "")+`}`),
			probe: func(t *testing.T, s *side) string {
				return ping(t, s, "ctr", netip.MustParseAddr("10.22.0.3"))
			}},
	}
}

// parent gives the host a link for macvlan and ipvlan to sit on: one end
// of a veth pair whose other end is in "out" (not compared), which holds
// an address of the container network for probes.
func parent(t *testing.T, s *side) {
	t.Helper()
	out := s.newNS("out")
	h := s.h["host"]
	plugintest.Must(t, h.AddVeth(netlinkx.VethSpec{Name: "lower0", PeerName: "eth0", PeerNS: out}))
	plugintest.Must(t, h.SetUp("lower0"))
	plugintest.Must(t, s.h["out"].AddAddr("eth0", netip.MustParsePrefix("10.22.0.254/24"), netlinkx.AddrOpts{NoDAD: true}))
	plugintest.Must(t, s.h["out"].SetUp("eth0"))
}

var peerOnLower = netip.MustParseAddr("10.22.0.254")

// vlanPeer gives the host a trunk for vlan to sit on: lower0, one end of
// a veth pair whose other end, trunk0, is in "out" (not compared) with a
// VLAN 100 link on it holding vlanPeer4.
func vlanPeer(t *testing.T, s *side) {
	t.Helper()
	out := s.newNS("out")
	h, oh := s.h["host"], s.h["out"]
	plugintest.Must(t, h.AddVeth(netlinkx.VethSpec{Name: "lower0", PeerName: "trunk0", PeerNS: out}))
	plugintest.Must(t, h.SetUp("lower0"))
	plugintest.Must(t, oh.SetUp("trunk0"))
	plugintest.Must(t, oh.AddVlan(netlinkx.VlanSpec{ChildSpec: netlinkx.ChildSpec{Name: "trunk0.100",
		Parent: plugintest.MustLink(t, oh, "trunk0").Index}, ID: 100}))
	plugintest.Must(t, oh.AddAddr("trunk0.100", vlanPeer4, netlinkx.AddrOpts{}))
	plugintest.Must(t, oh.SetUp("trunk0.100"))
}

var vlanPeer4 = netip.MustParsePrefix("10.22.1.254/24")

// udpTrip says whether a UDP round trip from one role's namespace to dst,
// served in another's, completes.
func udpTrip(t *testing.T, s *side, from, to string, dst netip.Addr) string {
	if privtest.UDPRoundTrip(t, s.ns[from], s.ns[to], dst) {
		return fmt.Sprintf("udp %s→%s: echoed", from, dst)
	}
	return fmt.Sprintf("udp %s→%s: none", from, dst)
}

func macvlanScenarios() []*scenario {
	mv := func(extra string) string { return `{"type":"macvlan","master":"lower0"` + extra + `}` }
	return []*scenario{
		{name: "bridge mode", plugin: "macvlan", setup: parent,
			conf:  conflist("1.0.0", mv(`,"mode":"bridge","ipam":`+hostLocal(v4, ""))),
			probe: func(t *testing.T, s *side) string { return ping(t, s, "ctr", peerOnLower) }},
		{name: "private mode mtu mac", plugin: "macvlan", setup: parent,
			conf: conflist("1.0.0", mv(`,"mode":"private","mtu":1400,"mac":"02:11:22:33:44:55","ipam":`+hostLocal(v4, "")))},
		{name: "vepa mode layer 2", plugin: "macvlan", setup: parent,
			conf: conflist("1.0.0", mv(`,"mode":"vepa"`))},
		{name: "passthru mode", plugin: "macvlan", setup: parent,
			conf: conflist("0.3.1", mv(`,"mode":"passthru","ipam":`+hostLocal(v4, "")))},
		{name: "mac capability", plugin: "macvlan", setup: parent,
			conf: conflist("1.0.0", mv(`,"capabilities":{"mac":true},"ipam":`+hostLocal(v4, ""))),
			caps: map[string]any{"mac": "02:22:33:44:55:77"}},
		{name: "DEL after the netns is gone", plugin: "macvlan", setup: parent, netnsGone: true,
			conf: conflist("1.0.0", mv(`,"ipam":`+hostLocal(v4, "")))},
		{name: "IPAM config mistake", plugin: "macvlan", setup: parent,
			conf: conflist("1.0.0", mv(`,"ipam":`+hostLocal(badRanges, "")))},
		{name: "missing master", plugin: "macvlan",
			conf: conflist("1.0.0", mv(`,"ipam":`+hostLocal(v4, "")))},
		{name: "bad mode", plugin: "macvlan", setup: parent,
			conf: conflist("1.0.0", mv(`,"mode":"sideways","ipam":`+hostLocal(v4, "")))},
		{name: "CHECK of a source-mode macvlan", plugin: "macvlan", setup: parent,
			conf: conflist("1.0.0", mv(`,"mode":"bridge"`)),
			// Before CHECK: eth0 becomes a macvlan in a mode no config
			// names (source), same MAC; CHECK reports its number.
			probe: func(t *testing.T, s *side) string {
				h, hc := s.h["host"], s.h["ctr"]
				mac := plugintest.MustLink(t, hc, "eth0").MAC
				plugintest.Must(t, hc.DeleteLink("eth0"))
				plugintest.Must(t, h.AddMacvlan(netlinkx.MacvlanSpec{Mode: netlinkx.MacvlanSource, ChildSpec: netlinkx.ChildSpec{
					Name: "eth0", Parent: plugintest.MustLink(t, h, "lower0").Index, NS: s.ns["ctr"], MAC: mac}}))
				return "eth0 replaced by a source-mode macvlan"
			}},
	}
}

func ipvlanScenarios() []*scenario {
	iv := func(extra string) string { return `{"type":"ipvlan","master":"lower0"` + extra + `}` }
	return []*scenario{
		{name: "l2", plugin: "ipvlan", kinds: []string{"ipvlan"}, setup: parent,
			conf:  conflist("1.0.0", iv(`,"mode":"l2","ipam":`+hostLocal(v4, ""))),
			probe: func(t *testing.T, s *side) string { return ping(t, s, "ctr", peerOnLower) }},
		{name: "l3 mtu", plugin: "ipvlan", kinds: []string{"ipvlan"}, setup: parent,
			conf: conflist("1.0.0", iv(`,"mode":"l3","mtu":1400,"ipam":`+hostLocal(dual, "")))},
		{name: "l3s", plugin: "ipvlan", kinds: []string{"ipvlan"}, setup: parent,
			conf: conflist("0.4.0", iv(`,"mode":"l3s","ipam":`+hostLocal(v4, "")))},
		{name: "IPAM config mistake", plugin: "ipvlan", kinds: []string{"ipvlan"}, setup: parent,
			conf: conflist("1.0.0", iv(`,"ipam":`+hostLocal(badRanges, "")))},
		{name: "missing master", plugin: "ipvlan", kinds: []string{"ipvlan"},
			conf: conflist("1.0.0", iv(`,"ipam":`+hostLocal(v4, "")))},
	}
}

func vlanScenarios() []*scenario {
	return []*scenario{
		{name: "vlanId 100", plugin: "vlan", kinds: []string{"vlan"}, setup: parent,
			conf: conflist("1.0.0", `{"type":"vlan","master":"lower0","vlanId":100,"ipam":`+hostLocal(v4, "")+`}`)},
		{name: "mtu", plugin: "vlan", kinds: []string{"vlan"}, setup: parent,
			conf: conflist("0.4.0", `{"type":"vlan","master":"lower0","vlanId":7,"mtu":1400,"ipam":`+hostLocal(dual, "")+`}`)},
		{name: "IPAM config mistake", plugin: "vlan", kinds: []string{"vlan"}, setup: parent,
			conf: conflist("1.0.0", `{"type":"vlan","master":"lower0","vlanId":9,"ipam":`+hostLocal(badRanges, "")+`}`)},
		{name: "bad vlanId", plugin: "vlan", kinds: []string{"vlan"}, setup: parent,
			conf: conflist("1.0.0", `{"type":"vlan","master":"lower0","vlanId":5000,"ipam":`+hostLocal(v4, "")+`}`)},
		{name: "mtu above master", plugin: "vlan", kinds: []string{"vlan"}, setup: parent,
			conf: conflist("1.0.0", `{"type":"vlan","master":"lower0","vlanId":8,"mtu":9000,"ipam":`+hostLocal(v4, "")+`}`)},
		{name: "layer 2", plugin: "vlan", kinds: []string{"vlan"}, setup: vlanPeer,
			conf: conflist("1.1.0", `{"type":"vlan","master":"lower0","vlanId":100,"dns":{"nameservers":["10.22.1.1"]}}`),
			// What the container does next: an address of its own (a
			// static one, or DHCP's), then traffic over VLAN 100.
			probe: func(t *testing.T, s *side) string {
				plugintest.Must(t, s.h["ctr"].AddAddr("eth0", netip.MustParsePrefix("10.22.1.5/24"), netlinkx.AddrOpts{}))
				return ping(t, s, "ctr", vlanPeer4.Addr())
			}},
	}
}

// device gives the host a device to hand to a container: one end of a
// veth pair (the other end in "out", holding a peer address), with an
// address and up, as a configured host device would be.
func device(t *testing.T, s *side) {
	t.Helper()
	out := s.newNS("out")
	h := s.h["host"]
	mac := []byte{0x02, 0x00, 0x00, 0xaa, 0xbb, 0xcc}
	plugintest.Must(t, h.AddVeth(netlinkx.VethSpec{Name: "dev0", PeerName: "eth0", PeerNS: out, MAC: mac}))
	plugintest.Must(t, h.SetUp("dev0"))
	plugintest.Must(t, s.h["out"].AddAddr("eth0", netip.MustParsePrefix("10.22.0.254/24"), netlinkx.AddrOpts{NoDAD: true}))
	plugintest.Must(t, s.h["out"].SetUp("eth0"))
}

// cloudDevice is device, with what a cloud VM's extra NIC comes with on
// the host: addresses, routes in main and in a table of its own, a
// source-address rule to that table, and routes and rules that must not
// follow it into a container (an RA-learned route, rules for another
// source or a table without its routes). "out" holds the addresses the
// routes lead to. (No IPv6 route with a preferred source: the reference
// fails to copy one while the address is tentative, which it is until the
// moved link's carrier is back, even without DAD; plugins/hostdevice's
// TestInterfaceNetwork shows ours copies it.)
func cloudDevice(t *testing.T, s *side) {
	t.Helper()
	device(t, s)
	h, o := s.h["host"], s.h["out"]
	pfx := netip.MustParsePrefix
	for _, a := range []string{"10.22.0.5/24", "fd22::5/64"} {
		plugintest.Must(t, h.AddAddr("dev0", pfx(a), netlinkx.AddrOpts{NoDAD: true}))
	}
	for _, a := range []string{"fd22::254/64", "10.50.0.1/32", "10.60.0.1/32", "fd22:50::1/128"} {
		plugintest.Must(t, o.AddAddr("eth0", pfx(a), netlinkx.AddrOpts{NoDAD: true}))
	}
	idx := plugintest.MustLink(t, h, "dev0").Index
	gw, gw6 := peerOnLower, netip.MustParseAddr("fd22::254")
	for _, r := range []netlinkx.Route{
		{Dst: pfx("10.60.0.0/16"), Gw: gw, Protocol: unix.RTPROT_DHCP, Priority: 100},
		{Dst: pfx("10.22.1.1/32"), Protocol: unix.RTPROT_STATIC, Scope: unix.RT_SCOPE_LINK},
		{Dst: pfx("fd22:50::/64"), Gw: gw6},
		{Dst: pfx("fd22:60::/64"), Gw: gw6, Protocol: unix.RTPROT_RA},
		{Dst: pfx("0.0.0.0/0"), Gw: gw, Table: 100},
	} {
		r.LinkIndex = idx
		plugintest.Must(t, h.AddRoute(r))
	}
	for _, r := range []netlinkx.Rule{
		{Src: pfx("10.22.0.5/32"), Table: 100, Priority: 100},
		{Src: pfx("10.77.0.0/16"), Table: 100, Priority: 102},
		{Src: pfx("10.22.0.5/32"), Table: 200, Priority: 103},
	} {
		plugintest.Must(t, h.AddRule(r))
	}
}

// cloudProbe sends from the container with the device's address as
// source to an address only table 100 reaches (through the copied rule),
// and without a source to addresses main's copied routes reach.
func cloudProbe(t *testing.T, s *side) string {
	src := netip.AddrPortFrom(netip.MustParseAddr("10.22.0.5"), 4242)
	seen, echoed := privtest.UDPExchange(t, s.ns["ctr"], s.ns["out"], src, netip.MustParseAddr("10.50.0.1"), 3*time.Second)
	return fmt.Sprintf("udp %s→10.50.0.1: seen %s, echoed %v; ", src, seen, echoed) +
		udpTrip(t, s, "ctr", "out", netip.MustParseAddr("10.60.0.1")) + "; " +
		udpTrip(t, s, "ctr", "out", netip.MustParseAddr("fd22:50::1"))
}

func hostDeviceScenarios() []*scenario {
	return []*scenario{
		{name: "useInterfaceNetwork", plugin: "hostdevice", setup: cloudDevice, probe: cloudProbe,
			conf: conflist("1.1.0", `{"type":"host-device","device":"dev0","useInterfaceNetwork":true}`)},
		{name: "useInterfaceNetwork with static", plugin: "hostdevice", setup: cloudDevice, probe: cloudProbe,
			conf: conflist("1.0.0", `{"type":"host-device","device":"dev0","useInterfaceNetwork":true,"dns":{"nameservers":["10.22.0.254"]},
				"ipam":{"type":"static","addresses":[{"address":"10.22.0.6/24"}],"routes":[{"dst":"10.70.0.0/16","gw":"10.22.0.254"}]}}`)},
		{name: "by name with static", plugin: "hostdevice", setup: device,
			conf: conflist("1.0.0", `{"type":"host-device","device":"dev0","ipam":{"type":"static",
				"addresses":[{"address":"10.22.0.5/24","gateway":"10.22.0.1"}]}}`),
			probe: func(t *testing.T, s *side) string { return ping(t, s, "ctr", peerOnLower) }},
		{name: "by hwaddr layer 2", plugin: "hostdevice", setup: device,
			conf: conflist("0.4.0", `{"type":"host-device","hwaddr":"02:00:00:aa:bb:cc"}`)},
		{name: "DEL after the netns is gone", plugin: "hostdevice", setup: device, netnsGone: true,
			conf: conflist("1.0.0", `{"type":"host-device","device":"dev0","ipam":{"type":"static",
				"addresses":[{"address":"10.22.0.5/24","gateway":"10.22.0.1"}]}}`)},
		{name: "IPAM config mistake", plugin: "hostdevice", setup: device,
			conf: conflist("1.0.0", `{"type":"host-device","device":"dev0","ipam":`+hostLocal(badRanges, "")+`}`)},
		{name: "missing device", plugin: "hostdevice",
			conf: conflist("1.0.0", `{"type":"host-device","device":"nosuch0"}`)},
		{name: "no selector", plugin: "hostdevice", setup: device,
			conf: conflist("1.0.0", `{"type":"host-device"}`)},
	}
}

func loopbackScenarios() []*scenario {
	return []*scenario{
		{name: "1.1.0", plugin: "loopback", ifname: "lo",
			conf: conflist("1.1.0", `{"type":"loopback"}`),
			probe: func(t *testing.T, s *side) string {
				return ping(t, s, "ctr", netip.MustParseAddr("127.0.0.1")) + "; " + ping(t, s, "ctr", netip.MustParseAddr("::1"))
			}},
		{name: "0.3.1", plugin: "loopback", ifname: "lo",
			conf: conflist("0.3.1", `{"type":"loopback"}`)},
		{name: "chained behind ptp", plugin: "loopback",
			conf: conflist("1.0.0", `{"type":"ptp","ipam":`+hostLocal(v4, "")+`}`, `{"type":"loopback"}`)},
		{name: "0.2.0", plugin: "loopback", ifname: "lo",
			conf: `{"cniVersion":"0.2.0","name":"diffnet","plugins":[{"type":"loopback"}]}`},
	}
}

func dummyScenarios() []*scenario {
	return []*scenario{
		{name: "host-local", plugin: "dummy", kinds: []string{"dummy"},
			conf: conflist("1.0.0", `{"type":"dummy","ipam":`+hostLocal(dual, "")+`}`)},
		{name: "IPAM config mistake", plugin: "dummy", kinds: []string{"dummy"},
			conf: conflist("1.0.0", `{"type":"dummy","ipam":`+hostLocal(badRanges, "")+`}`)},
		{name: "no ipam", plugin: "dummy", kinds: []string{"dummy"},
			conf: conflist("1.0.0", `{"type":"dummy"}`)},
	}
}

func tapScenarios() []*scenario {
	return []*scenario{
		{name: "host-local mtu mac", plugin: "tap",
			conf: conflist("1.0.0", `{"type":"tap","mtu":1400,"mac":"02:33:44:55:66:77","ipam":`+hostLocal(v4, "")+`}`)},
		{name: "IPAM config mistake", plugin: "tap",
			conf: conflist("1.0.0", `{"type":"tap","ipam":`+hostLocal(badRanges, "")+`}`)},
		{name: "multiQueue owner group", plugin: "tap",
			conf: conflist("1.0.0", `{"type":"tap","multiQueue":true,"owner":1000,"group":1000}`)},
		{name: "on a bridge", plugin: "tap",
			conf: conflist("1.0.0", `{"type":"tap","bridge":"br9"}`),
			setup: func(t *testing.T, s *side) {
				t.Helper()
				nsBridge(t, s, "br9")
			}},
	}
}

// nsBridge makes a bridge in the container's namespace (tap's bridge is
// there).
func nsBridge(t *testing.T, s *side, name string) {
	t.Helper()
	plugintest.Must(t, s.h["ctr"].AddBridge(netlinkx.BridgeSpec{Name: name}))
	plugintest.Must(t, s.h["ctr"].SetUp(name))
}
