package ptp

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/internal/plugintest"
	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/ownerid"
)

const dualIPAM = `[{"dst":"0.0.0.0/0"},{"dst":"::/0"}]`

// routeIn finds a route of the main table by destination.
func routeIn(t *testing.T, h *netlinkx.Handle, dst string) (netlinkx.Route, bool) {
	t.Helper()
	if rs := plugintest.RoutesTo(t, h, dst); len(rs) > 0 {
		return rs[0], true
	}
	return netlinkx.Route{}, false
}

// The helpers shared with the bridge tests are in internal/plugintest
// (host.go, conf.go, kernel.go); these are ptp's own.

func TestMain(m *testing.M) { plugintest.Main(m) }

// newHost makes a host namespace for the ptp plugin, with duplicate
// address detection off for links created there, like newCtr.
func newHost(t *testing.T) *plugintest.Host { return plugintest.NewHost(t, "ptp") }

// newCtr makes a container namespace with lo up. ptp keeps IPv6 duplicate
// address detection on and waits for it; links created here skip it
// (plugintest.NoDAD) so tests do not wait unless DAD is the point.
func newCtr(t *testing.T) (*netns.NS, *netlinkx.Handle) {
	return plugintest.NewCtr(t, plugintest.NoDAD)
}

// doomedCtr makes a container namespace the test destroys itself with the
// returned function (plugintest.DoomedCtr), without DAD like newCtr.
func doomedCtr(t *testing.T) (*netns.NS, func()) { return plugintest.DoomedCtr(t, plugintest.NoDAD) }

// conf is a ptp config for network "testnet"; fields are more JSON
// members (starting with a comma), e.g. an "ipam" object.
func conf(version, fields string) string {
	return fmt.Sprintf(`{"cniVersion":%q,"name":"testnet","type":"ptp"%s}`, version, fields)
}

// TestKernelStateAfterAdd checks both namespaces after a dual-stack ADD:
// container addresses and the routes that send even the
// subnet via the gateway; the gateway as /32 and /128 on the host end and
// host routes to the container.
func TestKernelStateAfterAdd(t *testing.T) {
	t.Parallel()
	th := newHost(t)
	ctr, hc := newCtr(t)
	r := th.Add(ctr, "c1", conf("1.0.0", `,"mtu":1400`+plugintest.Static(dualIPAM, "10.1.1.5/24 10.1.1.1", "fd00:1::5/64 fd00:1::1")))

	veth := plugintest.OnlyVeth(t, th.H)
	eth0 := plugintest.MustLink(t, hc, "eth0")
	if len(r.Interfaces) != 2 || r.Interfaces[0].Name != veth.Name || r.Interfaces[0].Mac != veth.MAC.String() ||
		r.Interfaces[1].Name != "eth0" || r.Interfaces[1].Mac != eth0.MAC.String() || r.Interfaces[1].Sandbox != ctr.Path() {
		t.Errorf("result interfaces %+v", r.Interfaces)
	}
	for _, ip := range r.IPs {
		if ip.Interface == nil || *ip.Interface != 1 {
			t.Errorf("%s bound to %v", ip.Address, ip.Interface)
		}
	}
	if eth0.MTU != 1400 || veth.MTU != 1400 || !eth0.Up || !veth.Up {
		t.Errorf("eth0 %+v host %+v", eth0, veth)
	}

	// Container: no connected subnet route; gateway host routes; the
	// subnet via the gateway; IPAM's default routes.
	for _, tt := range []struct{ dst, gw, src string }{
		{"10.1.1.1/32", "", "10.1.1.5"},
		{"10.1.1.0/24", "10.1.1.1", "10.1.1.5"},
		{"0.0.0.0/0", "10.1.1.1", ""},
		{"fd00:1::1/128", "", "fd00:1::5"},
		{"fd00:1::/64", "fd00:1::1", "fd00:1::5"},
		{"::/0", "fd00:1::1", ""},
	} {
		rt, ok := routeIn(t, hc, tt.dst)
		if !ok {
			t.Errorf("container: no route to %s", tt.dst)
			continue
		}
		if rt.Gw.String() != tt.gw && !(tt.gw == "" && !rt.Gw.IsValid()) {
			t.Errorf("container route %s via %v, want %s", tt.dst, rt.Gw, tt.gw)
		}
		if tt.src != "" && rt.Src.String() != tt.src {
			t.Errorf("container route %s src %v, want %s", tt.dst, rt.Src, tt.src)
		}
		if rt.LinkIndex != eth0.Index {
			t.Errorf("container route %s on %d", tt.dst, rt.LinkIndex)
		}
	}
	if rt, _ := routeIn(t, hc, "10.1.1.1/32"); rt.Scope != unix.RT_SCOPE_LINK {
		t.Errorf("gateway route scope %d", rt.Scope)
	}

	// Host.
	if got := plugintest.AddrStrings(t, th.H, veth.Name, 0); !slices.Equal(got, []string{"10.1.1.1/32", "fd00:1::1/128"}) {
		t.Errorf("host veth addresses %v", got)
	}
	for _, dst := range []string{"10.1.1.5/32", "fd00:1::5/128"} {
		rt, ok := routeIn(t, th.H, dst)
		if !ok || rt.LinkIndex != veth.Index {
			t.Errorf("host route %s: %+v %v", dst, rt, ok)
		}
	}
	if rt, _ := routeIn(t, th.H, "10.1.1.5/32"); rt.Scope != unix.RT_SCOPE_HOST {
		t.Errorf("host route scope %d, want host", rt.Scope)
	}
	for key, want := range map[string]string{
		"net/ipv4/ip_forward":                       "1",
		"net/ipv6/conf/all/forwarding":              "1",
		"net/ipv6/conf/" + veth.Name + "/accept_ra": "0",
	} {
		if got := plugintest.Sysctl(t, th.NS, key); got != want {
			t.Errorf("host %s = %s, want %s", key, got, want)
		}
	}
}

// TestRouteMetrics: an IPAM route's mtu and advmss, from the static IPAM
// config through the result, end up as the container route's metrics
// (with its priority); CHECK passes.
func TestRouteMetrics(t *testing.T) {
	t.Parallel()
	th := newHost(t)
	ctr, hc := newCtr(t)
	cfg := conf("1.1.0", plugintest.Static(`[{"dst":"0.0.0.0/0","mtu":1300,"advmss":1000,"priority":30},{"dst":"::/0","mtu":1280,"advmss":1100}]`,
		"10.1.1.5/24 10.1.1.1", "fd00:1::5/64 fd00:1::1"))
	out := th.OK(plugintest.Cmd("ADD", ctr, "metrics", cfg))
	for _, tt := range []struct {
		dst                   string
		mtu, advmss, priority int
	}{{"0.0.0.0/0", 1300, 1000, 30}, {"::/0", 1280, 1100, 1024}} {
		rt, ok := routeIn(t, hc, tt.dst)
		if !ok || rt.MTU != tt.mtu || rt.AdvMSS != tt.advmss || rt.Priority != tt.priority {
			t.Errorf("container route %s: %+v, want mtu %d advmss %d metric %d", tt.dst, rt, tt.mtu, tt.advmss, tt.priority)
		}
	}
	th.OK(plugintest.Cmd("CHECK", ctr, "metrics", plugintest.WithPrev(cfg, out)))
}

// TestTraffic: two ptp containers of one subnet reach each other through
// the host, and the host's gateway address, over IPv4 and IPv6.
func TestTraffic(t *testing.T) {
	t.Parallel()
	th := newHost(t)
	c1, _ := newCtr(t)
	c2, _ := newCtr(t)
	th.Add(c1, "c1", conf("1.0.0", plugintest.Static(dualIPAM, "10.1.1.5/24 10.1.1.1", "fd00:1::5/64 fd00:1::1")))
	th.Add(c2, "c2", conf("1.0.0", plugintest.Static(dualIPAM, "10.1.1.6/24 10.1.1.1", "fd00:1::6/64 fd00:1::1")))
	privtest.RoundTrips(t, []privtest.Trip{
		{Name: "c1->c2 v4", From: c1, To: c2, Dst: "10.1.1.6"},
		{Name: "c2->c1 v6", From: c2, To: c1, Dst: "fd00:1::5"},
		{Name: "c1->c2 v6", From: c1, To: c2, Dst: "fd00:1::6"},
		{Name: "c1->gw v4", From: c1, To: th.NS, Dst: "10.1.1.1"},
		{Name: "c2->gw v6", From: c2, To: th.NS, Dst: "fd00:1::1"},
		{Name: "host->c2 v4", From: th.NS, To: c2, Dst: "10.1.1.6"},
	})
}

// TestResultPerVersion compares the printed result with the expected text
// per spec version (testdata/result-*.json; VETH, VETHMAC, CMAC and SANDBOX
// filled in), names and MACs read back from the kernel.
func TestResultPerVersion(t *testing.T) {
	t.Parallel()
	plugintest.ResultPerVersion(t, func(t *testing.T, v string) (string, plugintest.Placeholders) {
		th := newHost(t)
		ctr, hc := newCtr(t)
		out := th.OK(plugintest.Cmd("ADD", ctr, "c0ffee", conf(v, `,"dns":{"nameservers":["1.1.1.1"]}`+plugintest.Static(`[{"dst":"0.0.0.0/0"}]`, "10.1.1.5/24 10.1.1.1"))))
		veth := plugintest.OnlyVeth(t, th.H)
		return out, plugintest.Placeholders{
			"VETHMAC", veth.MAC.String(),
			"VETH", veth.Name,
			"CMAC", plugintest.MustLink(t, hc, "eth0").MAC.String(),
			"SANDBOX", ctr.Path(),
		}
	})
}

// TestSharedGateway: two addresses of one family behind the same gateway
// work (the reference fails with "file exists").
func TestSharedGateway(t *testing.T) {
	t.Parallel()
	th := newHost(t)
	ctr, hc := newCtr(t)
	th.Add(ctr, "sg", conf("1.0.0", plugintest.Static("", "10.2.0.5/24 10.2.0.1", "10.2.0.6/24 10.2.0.1")))
	if got := plugintest.AddrStrings(t, hc, "eth0", unix.AF_INET); !slices.Equal(got, []string{"10.2.0.5/24", "10.2.0.6/24"}) {
		t.Errorf("eth0 addresses %v", got)
	}
	if got := plugintest.AddrStrings(t, th.H, plugintest.OnlyVeth(t, th.H).Name, unix.AF_INET); !slices.Equal(got, []string{"10.2.0.1/32"}) {
		t.Errorf("host addresses %v", got)
	}
	for _, dst := range []string{"10.2.0.5/32", "10.2.0.6/32"} {
		if _, ok := routeIn(t, th.H, dst); !ok {
			t.Errorf("no host route %s", dst)
		}
	}
}

// TestFailedAddLeavesNothing: a failing ADD removes the veth pair and
// releases IPAM.
func TestFailedAddLeavesNothing(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, fields, msg string
	}{
		{"no ipam type", ``, `ipam.type: ptp needs an IPAM plugin for the container's addresses: add e.g. "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.1.0.0/24"}]]}`},
		{"host-local subnet /33", plugintest.HostLocal("/nonexistent/store", "10.3.0.0/33"),
			`ipam.ranges[0][0].subnet: invalid CIDR address: 10.3.0.0/33: write a network address and a prefix length (IPv4 /0-/32, IPv6 /0-/128), e.g. "10.22.0.0/16"`},
		{"host-local ranges overlap", `,"ipam":{"type":"host-local","ranges":[[{"subnet":"10.3.0.0/24"},{"subnet":"10.3.0.128/25"}]]}`,
			`ipam.ranges[0][1]: subnets 10.3.0.1-10.3.0.254 and 10.3.0.129-10.3.0.254 overlap: make the ranges of a set disjoint (rangeStart/rangeEnd, or other subnets)`},
		{"no gateway", plugintest.Static("", "10.3.0.5/24"), "IPAM result address 10.3.0.5/24 has no gateway, which ptp requires"},
		{"no addresses", plugintest.Static(""), "IPAM plugin returned missing IP config"},
		{"masq backend", `,"ipMasq":true,"ipMasqBackend":"firewalld"` + plugintest.Static("", "10.3.0.5/24 10.3.0.1"), `unknown ipmasq backend "firewalld"`},
		{"unreachable route", plugintest.Static(`[{"dst":"192.168.0.0/16","gw":"10.99.0.1"}]`, "10.3.0.5/24 10.3.0.1"),
			"failed to add route '192.168.0.0/16 via 10.99.0.1 dev eth0 metric 0 (Scope: 0, Table: 0)': network is unreachable"},
		{"bad mtu type", `,"mtu":"x"` + plugintest.Static("", "10.3.0.5/24 10.3.0.1"),
			"failed to load netconf: json: cannot unmarshal string into Go struct field NetConf.mtu of type int"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			th := newHost(t)
			ctr, hc := newCtr(t)
			e := th.Fail(plugintest.Cmd("ADD", ctr, "f", conf("1.0.0", tt.fields)))
			if e.Msg != tt.msg {
				t.Errorf("error %q\n want %q", e.Msg, tt.msg)
			}
			plugintest.WantLinks(t, hc, "lo")
			plugintest.Untouched(t, th, "lo")
		})
	}
}

// TestFailedAddReleasesHostLocal: ptp asks IPAM first; when the veth
// cannot be made afterwards (the container interface name is taken), the
// reservation is released and the existing interface left alone.
func TestFailedAddReleasesHostLocal(t *testing.T) {
	t.Parallel()
	th := newHost(t)
	dir := plugintest.HostLocalStore(t)
	ctr, hc := newCtr(t)
	plugintest.Must(t, hc.AddVeth(netlinkx.VethSpec{Name: "eth0", PeerName: "mine0"}))
	e := th.Fail(plugintest.Cmd("ADD", ctr, "hl", conf("1.0.0", plugintest.HostLocal(dir, "10.4.0.0/24"))))
	if !strings.HasPrefix(e.Msg, `CNI_IFNAME "eth0" already exists in the container's network namespace`) {
		t.Errorf("error %q", e.Msg)
	}
	plugintest.WantLinks(t, hc, "lo", "eth0", "mine0")
	plugintest.WantLinks(t, th.H, "lo")
	if got := plugintest.Reservations(t, dir); len(got) != 0 {
		t.Errorf("reservations %v", got)
	}
}

// TestDel: idempotent, tolerant of a vanished namespace or interface and
// of an empty CNI_NETNS; IPAM is released in each case.
func TestDel(t *testing.T) {
	t.Parallel()
	th := newHost(t)
	dir := plugintest.HostLocalStore(t)
	cfg := conf("1.0.0", plugintest.HostLocal(dir, "10.5.0.0/24"))
	for i, how := range []string{"twice", "netns gone", "interface gone", "empty netns"} {
		id := fmt.Sprint("d", i)
		ctr, destroy := doomedCtr(t)
		out := th.OK(plugintest.Cmd("ADD", ctr, id, cfg))
		if len(plugintest.Reservations(t, dir)) != 1 {
			t.Fatalf("%s: reservations %v", how, plugintest.Reservations(t, dir))
		}
		c := plugintest.DelAs(t, how, ctr, destroy, plugintest.Cmd("DEL", ctr, id, plugintest.WithPrev(cfg, out)))
		th.OK(c)
		if how == "twice" {
			th.OK(c)
			th.OK(plugintest.Cmd("DEL", ctr, id, cfg))
		}
		if got := plugintest.Reservations(t, dir); len(got) != 0 {
			t.Errorf("%s: reservations %v", how, got)
		}
		if how != "empty netns" {
			plugintest.WaitLinks(t, th.H, "lo")
		}
		destroy()
	}
	// Without an IPAM type DEL cannot release anything and says so.
	th.FailsWith("DEL without ipam", plugintest.Cmd("DEL", nil, "x", conf("1.0.0", "")), "no plugin name provided")
}

// TestCheck: success right after ADD, and the reference's messages for
// drift.
func TestCheck(t *testing.T) {
	t.Parallel()
	th := newHost(t)
	ctr, hc := newCtr(t)
	cfg := conf("1.0.0", plugintest.Static(`[{"dst":"0.0.0.0/0"}]`, "10.6.0.5/24 10.6.0.1"))
	out := th.OK(plugintest.Cmd("ADD", ctr, "chk", cfg))
	check := plugintest.Cmd("CHECK", ctr, "chk", plugintest.WithPrev(cfg, out))
	th.OK(check)

	edit := func(fn func(m map[string]any)) string { return plugintest.EditJSON(t, out, fn) }
	cont := func(m map[string]any) map[string]any { return m["interfaces"].([]any)[1].(map[string]any) }
	cmac := plugintest.MustLink(t, hc, "eth0").MAC.String()
	for _, tc := range []struct {
		name, prev, want string
	}{
		{"mac", edit(func(m map[string]any) { cont(m)["mac"] = "02:00:00:00:00:99" }),
			"ptp: Interface eth0 Mac 02:00:00:00:00:99 doesn't match container Mac: " + cmac},
		{"sandbox", edit(func(m map[string]any) { cont(m)["sandbox"] = "/other" }),
			"Sandbox in prevResult  doesn't match configured netns: " + ctr.Path()},
		{"address", edit(func(m map[string]any) { m["ips"].([]any)[0].(map[string]any)["address"] = "10.6.0.9/24" }),
			"Failed to match addr 10.6.0.9/24 on interface eth0"},
		{"route", edit(func(m map[string]any) { m["routes"] = []any{map[string]any{"dst": "10.77.0.0/16"}} }),
			"Expected Route {Dst:{IP:10.77.0.0 Mask:ffff0000} GW:<nil> MTU:0 AdvMSS:0 Priority:0 Table:<nil> Scope:<nil>} not found in routing table"},
	} {
		th.FailsWith(tc.name, plugintest.Cmd("CHECK", ctr, "chk", plugintest.WithPrev(cfg, tc.prev)), tc.want)
	}
	// IPAM is checked first; static itself insists on a prevResult.
	th.FailsWith("no prevResult", plugintest.Cmd("CHECK", ctr, "chk", cfg), "Required prevResult missing")
	if plugintest.HasPlugin(t, "host-local") {
		hlCfg := conf("1.0.0", plugintest.HostLocal(t.TempDir(), "10.6.1.0/24"))
		hlCtr, _ := newCtr(t)
		th.OK(plugintest.Cmd("ADD", hlCtr, "hl", hlCfg))
		th.FailsWith("no prevResult (host-local)", plugintest.Cmd("CHECK", hlCtr, "hl", hlCfg), "ptp: Required prevResult missing")
	}
	plugintest.Must(t, hc.DeleteLink("eth0"))
	th.FailsWith("eth0 deleted", check, "ptp: Container Interface name in prevResult: eth0 not found")
}

// TestIPMasq proves masquerading with packets and that DEL removes the
// container's nftables state, also when the namespace is gone.
func TestIPMasq(t *testing.T) {
	t.Parallel()
	th := newHost(t)
	inet := privtest.NewNS(t)
	privtest.Wire(t, th.NS, "up0", netip.MustParsePrefix("192.0.2.1/24"), inet, "down0", netip.MustParsePrefix("192.0.2.2/24"))
	ctr, destroy := doomedCtr(t)
	plain, _ := newCtr(t)
	cfg := conf("1.0.0", `,"ipMasq":true,"ipMasqBackend":"iptables"`+plugintest.Static(`[{"dst":"0.0.0.0/0"}]`, "10.7.0.5/24 10.7.0.1"))
	th.OKOrSkip(plugintest.Cmd("ADD", ctr, "masq", cfg))
	th.Add(plain, "plain", conf("1.0.0", plugintest.Static(`[{"dst":"0.0.0.0/0"}]`, "10.7.0.6/24 10.7.0.1")))

	seen, echoed := privtest.UDPExchange(t, ctr, inet, netip.AddrPort{}, netip.MustParseAddr("192.0.2.2"), time.Second)
	if seen.Addr().String() != "192.0.2.1" || !echoed {
		t.Errorf("masqueraded: seen from %v, echoed %v", seen, echoed)
	}
	seen, echoed = privtest.UDPExchange(t, plain, inet, netip.AddrPort{}, netip.MustParseAddr("192.0.2.2"), time.Second)
	if seen.Addr().String() != "10.7.0.6" || echoed {
		t.Errorf("not masqueraded: seen from %v, echoed %v", seen, echoed)
	}

	th.DelNetnsGone(ctr, destroy, ownerid.Owner{Network: "testnet", ContainerID: "masq", IfName: "eth0"}, cfg)
}

// TestGCAndStatus: GC goes to IPAM and collects stale masquerade state;
// STATUS goes to IPAM unconditionally.
func TestGCAndStatus(t *testing.T) {
	t.Parallel()
	th := newHost(t)
	dir := plugintest.HostLocalStore(t)
	fields := `,"ipMasq":true` + plugintest.HostLocal(dir, "10.8.0.0/24")
	keep, _ := newCtr(t)
	stale, _ := newCtr(t)
	o := th.Exec(plugintest.Cmd("ADD", keep, "keep", conf("1.1.0", fields)))
	plugintest.SkipIfNotImplemented(t, o)
	th.OK(plugintest.Cmd("ADD", stale, "stale", conf("1.1.0", fields)))
	gc := conf("1.1.0", fields)
	gc = gc[:len(gc)-1] + `,"cni.dev/valid-attachments":[{"containerID":"keep","ifname":"eth0"}]}`
	th.OK(plugintest.Call{Command: "GC", Stdin: gc})
	if got := plugintest.Reservations(t, dir); len(got) != 1 {
		t.Errorf("reservations after GC %v", got)
	}
	if plugintest.NFTOwned(t, th.NS, ownerid.Owner{Network: "testnet", ContainerID: "stale", IfName: "eth0"}) != 0 ||
		plugintest.NFTOwned(t, th.NS, ownerid.Owner{Network: "testnet", ContainerID: "keep", IfName: "eth0"}) == 0 {
		t.Error("GC collected the wrong masquerade state")
	}

	th.OK(plugintest.Call{Command: "STATUS", Stdin: conf("1.1.0", fields)})
	th.FailsWith("STATUS without ipam", plugintest.Call{Command: "STATUS", Stdin: conf("1.1.0", "")}, "no plugin name provided")
}

// TestIPv6DAD: ptp leaves duplicate address detection on in the container
// (as the reference) and ADD returns only once the address is usable, so
// the routes with it as source could be added.
func TestIPv6DAD(t *testing.T) {
	t.Parallel()
	th := newHost(t)
	ctr := privtest.NewNS(t) // kernel defaults: DAD on
	hc, err := netlinkx.Open(ctr)
	plugintest.Must(t, err)
	defer hc.Close()
	start := time.Now()
	th.Add(ctr, "dad", conf("1.0.0", plugintest.Static(`[{"dst":"::/0"}]`, "fd00:9::5/64 fd00:9::1")))
	took := time.Since(start)
	addrs, err := hc.Addrs("eth0", unix.AF_INET6)
	plugintest.Must(t, err)
	for _, a := range addrs {
		if a.Prefix.Addr().String() == "fd00:9::5" && (a.Tentative() || a.Flags&unix.IFA_F_NODAD != 0) {
			t.Errorf("container address %+v", a)
		}
	}
	if plugintest.Sysctl(t, ctr, "net/ipv6/conf/eth0/accept_dad") != "1" {
		t.Error("accept_dad changed")
	}
	if !privtest.UDPRoundTrip(t, ctr, th.NS, netip.MustParseAddr("fd00:9::1")) {
		t.Error("no round trip to the IPv6 gateway right after ADD")
	}
	t.Logf("ADD with DAD took %v", took)
}
