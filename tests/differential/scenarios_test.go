package differential

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/nftcni/nftcni/internal/plugintest"
	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netlinkx"
)

// scenarios lists every scenario, the plugins' in the order of the
// plugin list.
func scenarios() []*scenario {
	return slices.Concat(bridgeScenarios(), ptpScenarios(), macvlanScenarios(), ipvlanScenarios(),
		vlanScenarios(), hostDeviceScenarios(), loopbackScenarios(), dummyScenarios(), tapScenarios(),
		hostLocalScenarios(), staticScenarios(), dhcpScenarios(), portmapScenarios(),
		bandwidthScenarios(), firewallScenarios(), tuningScenarios(), sbrScenarios(), vrfScenarios())
}

// conflist wraps plugin objects into a conflist of network "diffnet".
func conflist(version string, plugins ...string) string {
	s := `{"cniVersion":"` + version + `","name":"diffnet","plugins":[`
	for i, p := range plugins {
		if i > 0 {
			s += ","
		}
		s += p
	}
	return s + "]}"
}

// hostLocal is an ipam object for host-local with its store in the side's
// temporary directory; extra are more members (starting with a comma).
func hostLocal(ranges string, extra string) string {
	return `{"type":"host-local","dataDir":"@TMP@/ipam","ranges":` + ranges + extra + `}`
}

// badRanges is a host-local config mistake (rangeStart outside the subnet)
// that the plugins of this binary find before doing anything.
const badRanges = `[[{"subnet":"10.22.0.0/24","rangeStart":"10.23.0.1"}]]`

// v4 and dual are host-local ranges.
const (
	v4   = `[[{"subnet":"10.22.0.0/24"}]]`
	dual = `[[{"subnet":"10.22.0.0/24"}],[{"subnet":"fd22::/64"}]]`
)

// Addresses of the uplink: the host's "up0" and the "out" namespace's
// "eth0", an outside peer behind the host.
var (
	upHost4  = netip.MustParsePrefix("192.0.2.1/24")
	upOut4   = netip.MustParsePrefix("192.0.2.2/24")
	upHost6  = netip.MustParsePrefix("2001:db8:1::1/64")
	upOut6   = netip.MustParsePrefix("2001:db8:1::2/64")
	ctrNet4  = netip.MustParsePrefix("10.22.0.0/24")
	ctrNet6  = netip.MustParsePrefix("fd22::/64")
	gateway4 = netip.MustParseAddr("10.22.0.1")
)

// uplink gives the side's host an outside peer: namespace "out" (not
// compared) wired to the host's up0, IPv4 and IPv6, with routes back to
// the container networks through the host (for unmasqueraded replies).
func uplink(t *testing.T, s *side) {
	t.Helper()
	out := s.newNS("out")
	privtest.Wire(t, s.ns["host"], "up0", upHost4, out, "eth0", upOut4)
	h := s.h["out"]
	plugintest.Must(t, h.AddAddr("eth0", upOut6, netlinkx.AddrOpts{NoDAD: true}))
	plugintest.Must(t, s.h["host"].AddAddr("up0", upHost6, netlinkx.AddrOpts{NoDAD: true}))
	plugintest.Must(t, h.AddRoute(netlinkx.Route{Dst: ctrNet4, Gw: upHost4.Addr()}))
	plugintest.Must(t, h.AddRoute(netlinkx.Route{Dst: ctrNet6, Gw: upHost6.Addr()}))
}

// ping probes reachability from a role's namespace.
func ping(t *testing.T, s *side, from string, dst netip.Addr) string {
	if privtest.Ping(t, s.ns[from], dst) {
		return fmt.Sprintf("ping %s→%s: reply", from, dst)
	}
	return fmt.Sprintf("ping %s→%s: none", from, dst)
}

// udpSource sends a datagram from a role's namespace to dst in the "out"
// namespace and says which source address arrived: the container's own
// (forwarded) or the host's (masqueraded).
func udpSource(t *testing.T, s *side, from string, dst netip.Addr) string {
	seen, echoed := privtest.UDPExchange(t, s.ns[from], s.ns["out"], netip.AddrPort{}, dst, 3*time.Second)
	return fmt.Sprintf("udp %s→%s: source %s, echoed %v", from, dst, seen.Addr(), echoed)
}

// probes joins the outcomes of several probes.
func probes(fs ...func(t *testing.T, s *side) string) func(t *testing.T, s *side) string {
	return func(t *testing.T, s *side) string {
		out := ""
		for _, f := range fs {
			out += f(t, s) + "; "
		}
		return out
	}
}
