package hostdevice

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jsimonetti/rtnetlink/v2"
	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/internal/plugintest"
	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netlinkx"
)

// useInterfaceNetwork: the device takes its layer 3 into the container.
// cloudNIC gives hd0, on top of newWorld's addresses, what a cloud VM's
// extra NIC comes with — routes in main and in a table of its own, with a
// source-address rule to that table — plus routes and rules that must not
// follow it; and gives the lan the addresses those routes lead to.
//
//	main:      10.60.0.0/16 via 10.9.0.1 proto dhcp metric 100
//	           10.9.1.1 dev hd0 scope link proto static
//	           fd00:50::/64 via fd00:9::1 (metric 1024)
//	           fd00:51::/64 via fd00:9::1 src fd00:9::2 (the kernel refuses it
//	             while fd00:9::2 is tentative: see TestInterfaceNetwork)
//	           fd00:60::/64 via fd00:9::1 proto ra         (not copied: RA's)
//	table 100: default via 10.9.0.1
//	rules:     100: from 10.9.0.2 lookup 100                (copied)
//	           101: from 10.9.0.0/24 fwmark 0x7 lookup 100   (copied, with its mark)
//	           102: from 10.77.0.0/16 lookup 100             (not: other source)
//	           103: from 10.9.0.2 lookup 200                 (not: no route of hd0 there)
//	lan:       10.50.0.1, 10.60.0.1, fd00:50::1 (on lan0)
func cloudNIC(t *testing.T, w *world) {
	t.Helper()
	h := w.th.H
	idx := plugintest.MustLink(t, h, "hd0").Index
	gw, gw6 := netip.MustParseAddr("10.9.0.1"), netip.MustParseAddr("fd00:9::1")
	pfx := netip.MustParsePrefix
	for _, r := range []netlinkx.Route{
		{Dst: pfx("10.60.0.0/16"), Gw: gw, Protocol: unix.RTPROT_DHCP, Priority: 100},
		{Dst: pfx("10.9.1.1/32"), Protocol: unix.RTPROT_STATIC, Scope: unix.RT_SCOPE_LINK},
		{Dst: pfx("fd00:50::/64"), Gw: gw6},
		{Dst: pfx("fd00:51::/64"), Gw: gw6, Src: netip.MustParseAddr("fd00:9::2")},
		{Dst: pfx("fd00:60::/64"), Gw: gw6, Protocol: unix.RTPROT_RA},
		{Dst: pfx("0.0.0.0/0"), Gw: gw, Table: 100},
	} {
		r.LinkIndex = idx
		plugintest.Must(t, h.AddRoute(r))
	}
	for _, r := range []netlinkx.Rule{
		{Src: pfx("10.9.0.2/32"), Table: 100, Priority: 100},
		{Src: pfx("10.77.0.0/16"), Table: 100, Priority: 102},
		{Src: pfx("10.9.0.2/32"), Table: 200, Priority: 103},
	} {
		plugintest.Must(t, h.AddRule(r))
	}
	plugintest.Must(t, h.AddRuleAsRead(markRule(t)))
	hl := privtest.Handle(t, w.lan)
	for _, a := range []string{"10.50.0.1/32", "10.60.0.1/32", "fd00:50::1/128"} {
		plugintest.Must(t, hl.AddAddr("lan0", netip.MustParsePrefix(a), netlinkx.AddrOpts{NoDAD: true}))
	}
}

// markRule is rule 101 of cloudNIC, with a selector Rule does not model
// (a firewall mark).
func markRule(t *testing.T) netlinkx.Rule {
	t.Helper()
	prio, table, mark, mask := uint32(101), uint32(100), uint32(7), uint32(0xff)
	src := net.ParseIP("10.9.0.0").To4()
	raw, err := (&rtnetlink.RuleMessage{Family: unix.AF_INET, SrcLength: 24, Table: 100, Action: unix.FR_ACT_TO_TBL,
		Attributes: &rtnetlink.RuleAttributes{Src: &src, Priority: &prio, Table: &table, FwMark: &mark, FwMask: &mask}}).MarshalBinary()
	plugintest.Must(t, err)
	return netlinkx.Rule{Raw: raw}
}

// ruleStrings lists the rules of h's namespace with a source, with their
// other selectors marked.
func ruleStrings(t *testing.T, h *netlinkx.Handle) []string {
	t.Helper()
	rules, err := h.Rules(0)
	plugintest.Must(t, err)
	var out []string
	for _, r := range rules {
		if r.Src.IsValid() {
			s := r.String()
			if r.OtherSelectors {
				s += " +selectors"
			}
			out = append(out, s)
		}
	}
	return out
}

// linkRoutes lists the routes of link that DEL gives back (hostRoute), as
// text without the link index.
func linkRoutes(t *testing.T, h *netlinkx.Handle, link string) []string {
	t.Helper()
	rs, err := h.LinkRoutes(plugintest.MustLink(t, h, link).Index)
	plugintest.Must(t, err)
	var out []string
	for _, r := range rs {
		if hostRoute(r) {
			r.LinkIndex = 0
			out = append(out, fmt.Sprintf("%+v", r))
		}
	}
	return out
}

// wantGone checks that a useInterfaceNetwork attachment is gone: the
// container (hc) has neither the device nor the copied rules, and hd0 is
// home as it was (wantHome), with the routes it had and the host's rules
// as they were.
func (w *world) wantGone(t *testing.T, hc *netlinkx.Handle, mac string, routes, rules []string) {
	t.Helper()
	plugintest.WantLinks(t, hc, "lo")
	if got := ruleStrings(t, hc); len(got) != 0 {
		t.Errorf("container rules %q", got)
	}
	w.wantHome(t, mac)
	if got := linkRoutes(t, w.th.H, "hd0"); !slices.Equal(got, routes) {
		t.Errorf("hd0 routes\n%q\nwant\n%q", got, routes)
	}
	if got := ruleStrings(t, w.th.H); !slices.Equal(got, rules) {
		t.Errorf("host rules %q, want %q", got, rules)
	}
}

var copiedRules = []string{"100: from 10.9.0.2/32 lookup 100", "101: from 10.9.0.0/24 lookup 100 +selectors"}

// TestInterfaceNetwork: with useInterfaceNetwork the device arrives in the
// container with its permanent addresses, its routes (main and table 100,
// proto and metric kept; not the RA-learned one) and the two rules that
// send its addresses to table 100 (one with its fwmark selector). The
// container does duplicate address detection (the kernel's default); the
// copied IPv6 addresses skip it, else the route naming one as preferred
// source would be refused (the reference's ADD fails so). Packets
// prove each: main's IPv4 and IPv6 routes, and table 100, reached only
// through the rule with the device's address as source. CHECK passes. DEL
// removes the copied rules from the container and gives the host the
// device back with its addresses and routes; the host's rules were never
// touched. The exact result is TestInterfaceNetworkResult's.
func TestInterfaceNetwork(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "veth")
	cloudNIC(t, w)
	mac := plugintest.MustLink(t, w.th.H, "hd0").MAC.String()
	hostRules, hostRoutes := ruleStrings(t, w.th.H), linkRoutes(t, w.th.H, "hd0")
	ctr, hc := plugintest.NewCtr(t)
	cfg := w.conf("1.1.0", `,"device":"hd0","useInterfaceNetwork":true`)
	c := plugintest.Cmd("ADD", ctr, "uin", cfg)
	c.IfName = "net1"
	out := w.th.OK(c)

	if got := plugintest.AddrStrings(t, hc, "net1", 0); !slices.Equal(got, hostAddrs) {
		t.Errorf("net1 addresses %v, want %v", got, hostAddrs)
	}
	addrs, err := hc.Addrs("net1", unix.AF_INET6)
	plugintest.Must(t, err)
	for _, a := range addrs {
		if a.Prefix.Addr().IsGlobalUnicast() && (a.Flags&unix.IFA_F_NODAD == 0 || a.Tentative()) {
			t.Errorf("copied IPv6 address %s: flags %#x, want nodad and usable at once", a.Prefix, a.Flags)
		}
	}
	if got := linkRoutes(t, hc, "net1"); !slices.Equal(got, hostRoutes) {
		t.Errorf("net1 routes\n%q\nwant the host's\n%q", got, hostRoutes)
	}
	if got := ruleStrings(t, hc); !slices.Equal(got, copiedRules) {
		t.Errorf("container rules %q, want %q", got, copiedRules)
	}
	privtest.WaitOperUp(t, hc, "net1")
	privtest.RoundTrips(t, []privtest.Trip{
		{Name: "main IPv4 route", From: ctr, To: w.lan, Dst: "10.60.0.1"},
		{Name: "main IPv6 route", From: ctr, To: w.lan, Dst: "fd00:50::1"},
	})
	src := netip.AddrPortFrom(netip.MustParseAddr("10.9.0.2"), 0)
	if seen, echoed := privtest.UDPExchange(t, ctr, w.lan, src, netip.MustParseAddr("10.50.0.1"), 3*time.Second); !echoed || seen.Addr() != src.Addr() {
		t.Errorf("table 100 through the rule: seen %v, echoed %v", seen, echoed)
	}

	check := plugintest.Cmd("CHECK", ctr, "uin", plugintest.WithPrev(cfg, out))
	check.IfName = "net1"
	w.th.OK(check)

	del := plugintest.Cmd("DEL", ctr, "uin", plugintest.WithPrev(cfg, out))
	del.IfName = "net1"
	w.th.OK(del)
	w.wantGone(t, hc, mac, hostRoutes, hostRules)
	w.th.OK(del) // again: nothing to do
}

// TestInterfaceNetworkResult: the result per spec version
// (testdata/result-network-*.json): the device's addresses after IPAM's
// (bound to the interface, no gateway), its routes after IPAM's, in the
// kernel's order, with metric, table, and scope when not universe — the
// reference's.
func TestInterfaceNetworkResult(t *testing.T) {
	t.Parallel()
	plugintest.ResultPerVersionAs(t, "result-network", func(t *testing.T, v string) (string, plugintest.Placeholders) {
		w := newWorld(t, "veth")
		cloudNIC(t, w)
		mac := plugintest.MustLink(t, w.th.H, "hd0").MAC.String()
		ctr, _ := plugintest.NewCtr(t)
		out := w.th.OK(plugintest.Cmd("ADD", ctr, "uin", w.conf(v, `,"device":"hd0","useInterfaceNetwork":true,"dns":{"nameservers":["10.9.0.1"]}`+
			plugintest.Static(`[{"dst":"10.70.0.0/16","gw":"10.9.0.1"}]`, "10.9.0.5/24"))))
		return out, plugintest.Placeholders{"HDMAC", mac, "SANDBOX", ctr.Path()}
	})
}

// TestInterfaceNetworkLayer2: without IPAM the result has the device's
// addresses and routes and no dns (as the reference); IPAM returning no
// address is fine with useInterfaceNetwork (the device's may be all there
// is).
func TestInterfaceNetworkLayer2(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ name, fields string }{
		{"no ipam", `,"dns":{"nameservers":["10.9.0.1"]}`},
		{"ipam without addresses", plugintest.Static(`[{"dst":"10.70.0.0/16","gw":"10.9.0.1"}]`)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, "veth")
			ctr, _ := plugintest.NewCtr(t)
			cfg := w.conf("1.0.0", `,"device":"hd0","useInterfaceNetwork":true`+tt.fields)
			out := w.th.OK(plugintest.Cmd("ADD", ctr, "l2", cfg))
			if strings.Contains(out, `"dns"`) || !strings.Contains(out, `"address": "10.9.0.2/24"`) || !strings.Contains(out, `"address": "fd00:9::2/64"`) {
				t.Errorf("result %s", out)
			}
			w.th.OK(plugintest.Cmd("DEL", ctr, "l2", cfg))
		})
	}
}

// TestInterfaceNetworkFailedAdd: a failure after the device's network was
// applied in the container (here IPAM's route, via an unreachable gateway)
// takes everything back: the copied rules leave the container, the device
// comes home with its addresses and routes, no state is left.
func TestInterfaceNetworkFailedAdd(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "veth")
	cloudNIC(t, w)
	mac := plugintest.MustLink(t, w.th.H, "hd0").MAC.String()
	hostRules, hostRoutes := ruleStrings(t, w.th.H), linkRoutes(t, w.th.H, "hd0")
	ctr, hc := plugintest.NewCtr(t)
	w.th.FailsWith("ADD", plugintest.Cmd("ADD", ctr, "f", w.conf("1.0.0", `,"device":"hd0","useInterfaceNetwork":true`+
		plugintest.Static(`[{"dst":"192.168.0.0/16","gw":"10.99.0.1"}]`, "10.9.0.5/24"))),
		"failed to add route '192.168.0.0/16 via 10.99.0.1 dev eth0 metric 0 (Scope: 0, Table: 0)': network is unreachable")
	w.wantGone(t, hc, mac, hostRoutes, hostRules)
}

// TestRoutesComeBackWithoutInterfaceNetwork: a plain host-device DEL gives
// the device its routes back too (not only its addresses), which the
// reference loses with the move.
func TestRoutesComeBackWithoutInterfaceNetwork(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "veth")
	cloudNIC(t, w)
	mac := plugintest.MustLink(t, w.th.H, "hd0").MAC.String()
	hostRoutes := linkRoutes(t, w.th.H, "hd0")
	ctr, hc := plugintest.NewCtr(t)
	cfg := w.conf("1.0.0", `,"device":"hd0"`)
	w.th.OK(plugintest.Cmd("ADD", ctr, "p", cfg))
	if got := plugintest.AddrStrings(t, hc, "eth0", 0); len(got) != 0 {
		t.Errorf("eth0 addresses without useInterfaceNetwork: %v", got)
	}
	if got := ruleStrings(t, hc); len(got) != 0 {
		t.Errorf("container rules without useInterfaceNetwork: %q", got)
	}
	w.th.OK(plugintest.Cmd("DEL", ctr, "p", cfg))
	w.wantHome(t, mac)
	if got := linkRoutes(t, w.th.H, "hd0"); !slices.Equal(got, hostRoutes) {
		t.Errorf("hd0 routes\n%q\nwant\n%q", got, hostRoutes)
	}
}

// TestInterfaceNetworkKeepsContainerRules: a rule the container had
// already (the same as one of the host's) is not the attachment's: DEL
// leaves it, and removes only the rule ADD added.
func TestInterfaceNetworkKeepsContainerRules(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "veth")
	cloudNIC(t, w)
	ctr, hc := plugintest.NewCtr(t)
	plugintest.Must(t, hc.AddRule(netlinkx.Rule{Src: netip.MustParsePrefix("10.9.0.2/32"), Table: 100, Priority: 100}))
	cfg := w.conf("1.0.0", `,"device":"hd0","useInterfaceNetwork":true`)
	w.th.OK(plugintest.Cmd("ADD", ctr, "k", cfg))
	if got := ruleStrings(t, hc); !slices.Equal(got, copiedRules) {
		t.Errorf("container rules %q, want %q", got, copiedRules)
	}
	w.th.OK(plugintest.Cmd("DEL", ctr, "k", cfg))
	if got, want := ruleStrings(t, hc), copiedRules[:1]; !slices.Equal(got, want) {
		t.Errorf("container rules after DEL %q, want the container's own %q", got, want)
	}
}
