package differential

import (
	"fmt"
	"net/netip"
	"regexp"
	"testing"

	"github.com/nftcni/nftcni/internal/hostfw"
	"github.com/nftcni/nftcni/internal/privtest"
)

// forwardDrop gives the host what Docker and kube-proxy leave behind: a
// DROP policy on iptables-nft's FORWARD chains, set with the iptables
// programs before the ADD.
func forwardDrop(t *testing.T, s *side) {
	t.Helper()
	hostfw.Require(t)
	hostfw.Commands(t, s.ns["host"], "iptables -P FORWARD DROP\nip6tables -P FORWARD DROP")
}

// Scenarios of the chained (meta) plugins, each behind an interface
// plugin that gives it a prevResult.

// gwBridge is a bridge with host-local, the usual head of a chain.
func gwBridge(ranges string) string {
	return `{"type":"bridge","bridge":"cni0","isDefaultGateway":true,"ipMasq":true,"ipam":` + hostLocal(ranges, "") + `}`
}

func ptpHead(ranges string) string {
	return `{"type":"ptp","ipam":` + hostLocal(ranges, "") + `}`
}

// mapped dials a mapped host port from a role's namespace and says which
// client address the container's listener saw (none: not reachable).
func mapped(from string, dial string) func(t *testing.T, s *side) string {
	return func(t *testing.T, s *side) string {
		ap := netip.MustParseAddrPort(dial)
		listen := netip.AddrPortFrom(netip.IPv4Unspecified(), 80)
		if ap.Addr().Is6() {
			listen = netip.AddrPortFrom(netip.IPv6Unspecified(), 80)
		}
		seen := privtest.TCPRoundTrip(t, s.ns[from], ap, s.ns["ctr"], listen)
		return fmt.Sprintf("tcp %s→%s: client seen %s", from, dial, seen.Addr())
	}
}

func portmapScenarios() []*scenario {
	pm := `{"type":"portmap","capabilities":{"portMappings":true}}`
	return []*scenario{
		{name: "tcp from outside and from the host", plugin: "portmap", setup: uplink,
			conf:  conflist("1.0.0", gwBridge(v4), pm),
			caps:  map[string]any{"portMappings": []map[string]any{{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}}},
			probe: probes(mapped("out", "192.0.2.1:8080"), mapped("host", "127.0.0.1:8080"), mapped("host", "192.0.2.1:8080"))},
		{name: "dual-stack hostIP udp", plugin: "portmap", setup: uplink,
			conf: conflist("1.1.0", gwBridge(dual), pm),
			caps: map[string]any{"portMappings": []map[string]any{
				{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"},
				{"hostPort": 8053, "containerPort": 53, "protocol": "udp", "hostIP": "192.0.2.1"}}},
			probe: probes(mapped("out", "192.0.2.1:8080"), mapped("out", "[2001:db8:1::1]:8080"))},
		{name: "nftables backend snat off", plugin: "portmap", setup: uplink,
			conf:  conflist("1.0.0", gwBridge(v4), `{"type":"portmap","backend":"nftables","snat":false,"capabilities":{"portMappings":true}}`),
			caps:  map[string]any{"portMappings": []map[string]any{{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}}},
			probe: mapped("out", "192.0.2.1:8080")},
		// The reference's nftables backend honours masqAll since v1.10.0.
		{name: "nftables backend masqAll", plugin: "portmap", setup: uplink,
			conf:  conflist("1.0.0", gwBridge(v4), `{"type":"portmap","backend":"nftables","masqAll":true,"capabilities":{"portMappings":true}}`),
			caps:  map[string]any{"portMappings": []map[string]any{{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}}},
			probe: probes(mapped("out", "192.0.2.1:8080"), mapped("host", "192.0.2.1:8080"))},
		{name: "under a FORWARD drop policy", plugin: "portmap",
			setup: func(t *testing.T, s *side) { uplink(t, s); forwardDrop(t, s) },
			conf:  conflist("1.0.0", gwBridge(v4), pm),
			caps:  map[string]any{"portMappings": []map[string]any{{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}}},
			probe: mapped("out", "192.0.2.1:8080")},
		{name: "DEL after the netns is gone", plugin: "portmap", setup: uplink, netnsGone: true,
			conf: conflist("1.0.0", gwBridge(v4), pm),
			caps: map[string]any{"portMappings": []map[string]any{{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}}}},
		{name: "bad backend", plugin: "portmap",
			conf: conflist("1.0.0", gwBridge(v4), `{"type":"portmap","backend":"pf","capabilities":{"portMappings":true}}`),
			caps: map[string]any{"portMappings": []map[string]any{{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}}}},
	}
}

func bandwidthScenarios() []*scenario {
	return []*scenario{
		{name: "ingress and egress", plugin: "bandwidth",
			conf: conflist("1.0.0", ptpHead(v4), `{"type":"bandwidth","ingressRate":1000000,"ingressBurst":100000,"egressRate":2000000,"egressBurst":200000}`)},
		{name: "capability", plugin: "bandwidth",
			conf: conflist("1.0.0", ptpHead(v4), `{"type":"bandwidth","capabilities":{"bandwidth":true}}`),
			caps: map[string]any{"bandwidth": map[string]any{"ingressRate": 8000000, "ingressBurst": 800000, "egressRate": 4000000, "egressBurst": 400000}}},
		{name: "DEL after the netns is gone", plugin: "bandwidth", netnsGone: true,
			conf: conflist("1.0.0", ptpHead(v4), `{"type":"bandwidth","ingressRate":1000000,"ingressBurst":100000,"egressRate":2000000,"egressBurst":200000}`)},
		{name: "egress only", plugin: "bandwidth",
			conf: conflist("0.4.0", ptpHead(v4), `{"type":"bandwidth","egressRate":1000000,"egressBurst":100000}`)},
		{name: "rate without burst", plugin: "bandwidth",
			conf: conflist("1.0.0", ptpHead(v4), `{"type":"bandwidth","ingressRate":1000000}`)},
	}
}

func firewallScenarios() []*scenario {
	return []*scenario{
		{name: "bridge, outside reachable", plugin: "firewall", setup: uplink,
			conf:  conflist("1.0.0", gwBridge(v4), `{"type":"firewall"}`),
			probe: func(t *testing.T, s *side) string { return udpSource(t, s, "ctr", upOut4.Addr()) }},
		{name: "under a FORWARD drop policy", plugin: "firewall",
			setup: func(t *testing.T, s *side) { uplink(t, s); forwardDrop(t, s) },
			conf:  conflist("1.0.0", gwBridge(dual), `{"type":"firewall"}`),
			probe: probes(
				func(t *testing.T, s *side) string { return udpSource(t, s, "ctr", upOut4.Addr()) },
				func(t *testing.T, s *side) string { return udpSource(t, s, "ctr", upOut6.Addr()) })},
		{name: "ingressPolicy same-bridge", plugin: "firewall", ctrs: 2,
			conf: conflist("1.0.0", gwBridge(v4), `{"type":"firewall","ingressPolicy":"same-bridge"}`),
			probe: func(t *testing.T, s *side) string {
				return ping(t, s, "ctr", netip.MustParseAddr("10.22.0.3"))
			}},
		{name: "dual-stack ptp admin chain", plugin: "firewall",
			conf: conflist("1.0.0", ptpHead(dual), `{"type":"firewall","iptablesAdminChainName":"MY-ADMIN"}`)},
		{name: "alone", plugin: "firewall",
			conf: conflist("1.0.0", `{"type":"firewall"}`)},
		{name: "bad ingressPolicy", plugin: "firewall",
			conf: conflist("1.0.0", ptpHead(v4), `{"type":"firewall","ingressPolicy":"closed"}`)},
	}
}

func tuningScenarios() []*scenario {
	tuning := func(extra string) string { return `{"type":"tuning","dataDir":"@TMP@/tuning"` + extra + `}` }
	return []*scenario{
		{name: "sysctls and link attributes", plugin: "tuning",
			conf: conflist("1.0.0", ptpHead(v4), tuning(`,"sysctl":{"net.ipv4.conf.eth0.arp_filter":"1","net.core.somaxconn":"512",
				"net.ipv6.conf.eth0.accept_ra":"0"},"mtu":1300,"promisc":true,"allmulti":true,"txQLen":500,"mac":"02:44:55:66:77:88"`))},
		{name: "mac capability and args", plugin: "tuning",
			conf: conflist("1.0.0", ptpHead(v4), tuning(`,"capabilities":{"mac":true},"sysctl":{"net.ipv4.conf.eth0.arp_filter":"1"},
				"args":{"cni":{"mtu":1400,"sysctl":{"net.ipv4.conf.eth0.rp_filter":"2"}}}`)),
			caps: map[string]any{"mac": "02:44:55:66:77:99"}},
		{name: "args sysctl without sysctl", plugin: "tuning",
			conf: conflist("1.0.0", ptpHead(v4), tuning(`,"args":{"cni":{"sysctl":{"net.ipv4.conf.eth0.rp_filter":"2"}}}`))},
		{name: "non-net sysctl", plugin: "tuning",
			conf: conflist("1.0.0", ptpHead(v4), tuning(`,"sysctl":{"kernel.hostname":"x"}`))},
		{name: "missing sysctl", plugin: "tuning",
			conf: conflist("1.0.0", ptpHead(v4), tuning(`,"sysctl":{"net.ipv4.conf.eth0.nosuch":"1"}`))},
	}
}

func sbrScenarios() []*scenario {
	return []*scenario{
		{name: "ptp", plugin: "sbr",
			conf: conflist("1.0.0", ptpHead(dual), `{"type":"sbr"}`)},
		{name: "bridge with table", plugin: "sbr",
			conf: conflist("1.0.0", gwBridge(v4), `{"type":"sbr","table":500}`)},
		{name: "alone", plugin: "sbr",
			conf: conflist("1.0.0", `{"type":"sbr"}`)},
		// Keys the reference has since v1.10.0.
		{name: "gateways", plugin: "sbr",
			conf: conflist("1.0.0", gwBridge(dual), `{"type":"sbr","gateways":["10.22.0.254","fd22::fe"]}`)},
		{name: "addSourceHints", plugin: "sbr",
			conf: conflist("1.0.0", gwBridge(v4), `{"type":"sbr","addSourceHints":true}`)},
		{name: "gateways, two of a family", plugin: "sbr",
			conf: conflist("1.0.0", gwBridge(v4), `{"type":"sbr","gateways":["10.22.0.254","10.22.0.253"]}`)},
	}
}

func vrfScenarios() []*scenario {
	return []*scenario{
		{name: "auto table", plugin: "vrf", kinds: []string{"vrf"},
			conf: conflist("1.0.0", ptpHead(dual), `{"type":"vrf","vrfname":"blue"}`),
			// The IPv6 route moved into the VRF, with a source address
			// that just came back, refused (plugins/vrf: moveRoute).
			refRace: regexp.MustCompile(`could not add route .*Src: fd22::.*invalid argument`)},
		{name: "table two containers", plugin: "vrf", kinds: []string{"vrf"}, ctrs: 2,
			conf: conflist("1.0.0", ptpHead(v4), `{"type":"vrf","vrfname":"red","table":1001}`)},
		{name: "no vrfname", plugin: "vrf", kinds: []string{"vrf"},
			conf: conflist("1.0.0", ptpHead(v4), `{"type":"vrf"}`)},
	}
}
