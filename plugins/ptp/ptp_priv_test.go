package ptp

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/internal/plugintest"
	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/nft"
)

const dualIPAM = `[{"dst":"0.0.0.0/0"},{"dst":"::/0"}]`

// hostVethOf returns the only veth in the host namespace.
func hostVethOf(t *testing.T, th *testHost) netlinkx.Link {
	t.Helper()
	links, err := th.h.Links()
	must(t, err)
	var v []netlinkx.Link
	for _, l := range links {
		if l.Kind == "veth" {
			v = append(v, l)
		}
	}
	if len(v) != 1 {
		t.Fatalf("host veths %+v", v)
	}
	return v[0]
}

// routeIn finds a route of the main table by destination.
func routeIn(t *testing.T, h *netlinkx.Handle, dst string) (netlinkx.Route, bool) {
	t.Helper()
	p := netip.MustParsePrefix(dst)
	fam := unix.AF_INET
	if p.Addr().Is6() {
		fam = unix.AF_INET6
	}
	rs, err := h.Routes(fam, 0)
	must(t, err)
	for _, r := range rs {
		if r.Dst == p {
			return r, true
		}
	}
	return netlinkx.Route{}, false
}

// TestKernelStateAfterAdd checks both namespaces after a dual-stack ADD
// (contract §2.2): container addresses and the routes that send even the
// subnet via the gateway; the gateway as /32 and /128 on the host end and
// host routes to the container.
func TestKernelStateAfterAdd(t *testing.T) {
	t.Parallel()
	th := newHost(t)
	ctr, hc := newCtr(t)
	r := th.add(ctr, "c1", conf("1.0.0", `,"mtu":1400`+static(dualIPAM, "10.1.1.5/24 10.1.1.1", "fd00:1::5/64 fd00:1::1")))

	veth := hostVethOf(t, th)
	eth0 := mustLink(t, hc, "eth0")
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
	if got := addrStrings(t, th.h, veth.Name, 0); !slices.Equal(got, []string{"10.1.1.1/32", "fd00:1::1/128"}) {
		t.Errorf("host veth addresses %v", got)
	}
	for _, dst := range []string{"10.1.1.5/32", "fd00:1::5/128"} {
		rt, ok := routeIn(t, th.h, dst)
		if !ok || rt.LinkIndex != veth.Index {
			t.Errorf("host route %s: %+v %v", dst, rt, ok)
		}
	}
	if rt, _ := routeIn(t, th.h, "10.1.1.5/32"); rt.Scope != unix.RT_SCOPE_HOST {
		t.Errorf("host route scope %d, want host", rt.Scope)
	}
	for key, want := range map[string]string{
		"net/ipv4/ip_forward":                       "1",
		"net/ipv6/conf/all/forwarding":              "1",
		"net/ipv6/conf/" + veth.Name + "/accept_ra": "0",
	} {
		if got := sysctl(t, th.ns, key); got != want {
			t.Errorf("host %s = %s, want %s", key, got, want)
		}
	}
}

// TestTraffic: two ptp containers of one subnet reach each other through
// the host, and the host's gateway address, over IPv4 and IPv6.
func TestTraffic(t *testing.T) {
	t.Parallel()
	th := newHost(t)
	c1, _ := newCtr(t)
	c2, _ := newCtr(t)
	th.add(c1, "c1", conf("1.0.0", static(dualIPAM, "10.1.1.5/24 10.1.1.1", "fd00:1::5/64 fd00:1::1")))
	th.add(c2, "c2", conf("1.0.0", static(dualIPAM, "10.1.1.6/24 10.1.1.1", "fd00:1::6/64 fd00:1::1")))
	for _, tt := range []struct {
		name     string
		from, to *netns.NS
		dst      string
	}{
		{"c1->c2 v4", c1, c2, "10.1.1.6"},
		{"c2->c1 v6", c2, c1, "fd00:1::5"},
		{"c1->c2 v6", c1, c2, "fd00:1::6"},
		{"c1->gw v4", c1, th.ns, "10.1.1.1"},
		{"c2->gw v6", c2, th.ns, "fd00:1::1"},
		{"host->c2 v4", th.ns, c2, "10.1.1.6"},
	} {
		if !privtest.UDPRoundTrip(t, tt.from, tt.to, netip.MustParseAddr(tt.dst)) {
			t.Errorf("%s: no UDP round trip", tt.name)
		}
	}
}

// Expected results per version (VETH, VETHMAC, CMAC, SANDBOX filled in).
var wantResults = map[string]string{
	"0.3.1": `{
    "cniVersion": "0.3.1",
    "interfaces": [
        {
            "name": "VETH",
            "mac": "VETHMAC"
        },
        {
            "name": "eth0",
            "mac": "CMAC",
            "sandbox": "SANDBOX"
        }
    ],
    "ips": [
        {
            "version": "4",
            "interface": 1,
            "address": "10.1.1.5/24",
            "gateway": "10.1.1.1"
        }
    ],
    "routes": [
        {
            "dst": "0.0.0.0/0"
        }
    ],
    "dns": {
        "nameservers": [
            "1.1.1.1"
        ]
    }
}`,
	"1.0.0": `{
    "cniVersion": "1.0.0",
    "dns": {
        "nameservers": [
            "1.1.1.1"
        ]
    },
    "interfaces": [
        {
            "mac": "VETHMAC",
            "name": "VETH"
        },
        {
            "mac": "CMAC",
            "name": "eth0",
            "sandbox": "SANDBOX"
        }
    ],
    "ips": [
        {
            "address": "10.1.1.5/24",
            "gateway": "10.1.1.1",
            "interface": 1
        }
    ],
    "routes": [
        {
            "dst": "0.0.0.0/0"
        }
    ]
}`,
}

func init() {
	wantResults["0.4.0"] = strings.Replace(wantResults["0.3.1"], `"0.3.1"`, `"0.4.0"`, 1)
	wantResults["1.1.0"] = strings.Replace(wantResults["1.0.0"], `"1.0.0"`, `"1.1.0"`, 1)
}

// TestResultPerVersion compares the printed result with the expected text
// per spec version, names and MACs read back from the kernel.
func TestResultPerVersion(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"0.3.1", "0.4.0", "1.0.0", "1.1.0"} {
		t.Run(v, func(t *testing.T) {
			t.Parallel()
			th := newHost(t)
			ctr, hc := newCtr(t)
			out := th.ok(call("ADD", ctr, "c0ffee", conf(v, `,"dns":{"nameservers":["1.1.1.1"]}`+static(`[{"dst":"0.0.0.0/0"}]`, "10.1.1.5/24 10.1.1.1"))))
			veth := hostVethOf(t, th)
			want := strings.NewReplacer(
				"VETHMAC", veth.MAC.String(),
				"VETH", veth.Name,
				"CMAC", mustLink(t, hc, "eth0").MAC.String(),
				"SANDBOX", ctr.Path(),
			).Replace(wantResults[v])
			if out != want {
				t.Errorf("result\n%s\nwant\n%s", out, want)
			}
		})
	}
}

// TestSharedGateway: two addresses of one family behind the same gateway
// work (the reference fails with "file exists").
func TestSharedGateway(t *testing.T) {
	t.Parallel()
	th := newHost(t)
	ctr, hc := newCtr(t)
	th.add(ctr, "sg", conf("1.0.0", static("", "10.2.0.5/24 10.2.0.1", "10.2.0.6/24 10.2.0.1")))
	if got := addrStrings(t, hc, "eth0", unix.AF_INET); !slices.Equal(got, []string{"10.2.0.5/24", "10.2.0.6/24"}) {
		t.Errorf("eth0 addresses %v", got)
	}
	if got := addrStrings(t, th.h, hostVethOf(t, th).Name, unix.AF_INET); !slices.Equal(got, []string{"10.2.0.1/32"}) {
		t.Errorf("host addresses %v", got)
	}
	for _, dst := range []string{"10.2.0.5/32", "10.2.0.6/32"} {
		if _, ok := routeIn(t, th.h, dst); !ok {
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
		{"no ipam type", ``, "no plugin name provided"},
		{"no gateway", static("", "10.3.0.5/24"), "IPAM result address 10.3.0.5/24 has no gateway, which ptp requires"},
		{"no addresses", static(""), "IPAM plugin returned missing IP config"},
		{"masq backend", `,"ipMasq":true,"ipMasqBackend":"firewalld"` + static("", "10.3.0.5/24 10.3.0.1"), `unknown ipmasq backend "firewalld"`},
		{"unreachable route", static(`[{"dst":"192.168.0.0/16","gw":"10.99.0.1"}]`, "10.3.0.5/24 10.3.0.1"),
			"failed to add route '192.168.0.0/16 via 10.99.0.1 dev eth0 metric 0 (Scope: 0, Table: 0)': network is unreachable"},
		{"bad mtu type", `,"mtu":"x"` + static("", "10.3.0.5/24 10.3.0.1"),
			"failed to load netconf: json: cannot unmarshal string into Go struct field NetConf.mtu of type int"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			th := newHost(t)
			ctr, hc := newCtr(t)
			e := th.fail(call("ADD", ctr, "f", conf("1.0.0", tt.fields)))
			if e.Msg != tt.msg {
				t.Errorf("error %q\n want %q", e.Msg, tt.msg)
			}
			wantLinks(t, hc, "lo")
			wantLinks(t, th.h, "lo")
		})
	}
}

// TestFailedAddReleasesHostLocal: ptp asks IPAM first; when the veth
// cannot be made afterwards (the container interface name is taken), the
// reservation is released and the existing interface left alone.
func TestFailedAddReleasesHostLocal(t *testing.T) {
	t.Parallel()
	th := newHost(t)
	plugintest.RequirePlugin(t, "host-local")
	dir := t.TempDir()
	ctr, hc := newCtr(t)
	must(t, hc.AddVeth(netlinkx.VethSpec{Name: "eth0", PeerName: "mine0"}))
	e := th.fail(call("ADD", ctr, "hl", conf("1.0.0", hostLocal(dir, "10.4.0.0/24"))))
	if !strings.HasPrefix(e.Msg, `container veth name ("eth0") peer provided ("veth`) {
		t.Errorf("error %q", e.Msg)
	}
	wantLinks(t, hc, "lo", "eth0", "mine0")
	wantLinks(t, th.h, "lo")
	if got := reservations(t, dir); len(got) != 0 {
		t.Errorf("reservations %v", got)
	}
}

// TestDel: idempotent, tolerant of a vanished namespace or interface and
// of an empty CNI_NETNS; IPAM is released in each case.
func TestDel(t *testing.T) {
	t.Parallel()
	th := newHost(t)
	plugintest.RequirePlugin(t, "host-local")
	dir := t.TempDir()
	cfg := conf("1.0.0", hostLocal(dir, "10.5.0.0/24"))
	for i, how := range []string{"twice", "netns gone", "interface gone", "empty netns"} {
		id := fmt.Sprint("d", i)
		ctr, destroy := doomedCtr(t)
		out := th.ok(call("ADD", ctr, id, cfg))
		if len(reservations(t, dir)) != 1 {
			t.Fatalf("%s: reservations %v", how, reservations(t, dir))
		}
		c := call("DEL", ctr, id, withPrev(cfg, out))
		switch how {
		case "netns gone":
			destroy()
		case "interface gone":
			h, err := netlinkx.Open(ctr)
			must(t, err)
			must(t, h.DeleteLink("eth0"))
			h.Close()
		case "empty netns":
			c.Netns = ""
		}
		th.ok(c)
		if how == "twice" {
			th.ok(c)
			th.ok(call("DEL", ctr, id, cfg))
		}
		if got := reservations(t, dir); len(got) != 0 {
			t.Errorf("%s: reservations %v", how, got)
		}
		if how != "empty netns" {
			waitLinks(t, th.h, "lo")
		}
		destroy()
	}
	// Without an IPAM type DEL cannot release anything and says so.
	e := th.fail(call("DEL", nil, "x", conf("1.0.0", "")))
	if e.Msg != "no plugin name provided" {
		t.Errorf("DEL without ipam: %q", e.Msg)
	}
}

// TestCheck: success right after ADD, and the reference's messages for
// drift.
func TestCheck(t *testing.T) {
	t.Parallel()
	th := newHost(t)
	ctr, hc := newCtr(t)
	cfg := conf("1.0.0", static(`[{"dst":"0.0.0.0/0"}]`, "10.6.0.5/24 10.6.0.1"))
	out := th.ok(call("ADD", ctr, "chk", cfg))
	th.ok(call("CHECK", ctr, "chk", withPrev(cfg, out)))

	edit := func(fn func(m map[string]any)) string {
		var m map[string]any
		must(t, json.Unmarshal([]byte(out), &m))
		fn(m)
		b, _ := json.Marshal(m)
		return string(b)
	}
	cont := func(m map[string]any) map[string]any { return m["interfaces"].([]any)[1].(map[string]any) }
	cmac := mustLink(t, hc, "eth0").MAC.String()
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
		e := th.fail(call("CHECK", ctr, "chk", withPrev(cfg, tc.prev)))
		if e.Msg != tc.want {
			t.Errorf("%s: %q\n want %q", tc.name, e.Msg, tc.want)
		}
	}
	// IPAM is checked first; static itself insists on a prevResult.
	e := th.fail(call("CHECK", ctr, "chk", cfg))
	if e.Msg != "Required prevResult missing" {
		t.Errorf("no prevResult: %q", e.Msg)
	}
	if plugintest.HasPlugin(t, "host-local") {
		hlCfg := conf("1.0.0", hostLocal(t.TempDir(), "10.6.1.0/24"))
		hlCtr, _ := newCtr(t)
		th.ok(call("ADD", hlCtr, "hl", hlCfg))
		e = th.fail(call("CHECK", hlCtr, "hl", hlCfg))
		if e.Msg != "ptp: Required prevResult missing" {
			t.Errorf("no prevResult (host-local): %q", e.Msg)
		}
	}
	must(t, hc.DeleteLink("eth0"))
	e = th.fail(call("CHECK", ctr, "chk", withPrev(cfg, out)))
	if e.Msg != "ptp: Container Interface name in prevResult: eth0 not found" {
		t.Errorf("eth0 deleted: %q", e.Msg)
	}
}

// TestIPMasq proves masquerading with packets and that DEL removes the
// container's nftables state, also when the namespace is gone.
func TestIPMasq(t *testing.T) {
	t.Parallel()
	th := newHost(t)
	inet := privtest.NewNS(t)
	privtest.Wire(t, th.ns, "up0", netip.MustParsePrefix("192.0.2.1/24"), inet, "down0", netip.MustParsePrefix("192.0.2.2/24"))
	ctr, destroy := doomedCtr(t)
	plain, _ := newCtr(t)
	cfg := conf("1.0.0", `,"ipMasq":true,"ipMasqBackend":"iptables"`+static(`[{"dst":"0.0.0.0/0"}]`, "10.7.0.5/24 10.7.0.1"))
	o := th.exec(call("ADD", ctr, "masq", cfg))
	skipIfNotImplemented(t, o)
	if o.Status != 0 {
		t.Fatalf("ADD: %s", o.Stdout)
	}
	th.add(plain, "plain", conf("1.0.0", static(`[{"dst":"0.0.0.0/0"}]`, "10.7.0.6/24 10.7.0.1")))

	seen, echoed := privtest.UDPExchange(t, ctr, inet, netip.AddrPort{}, netip.MustParseAddr("192.0.2.2"), time.Second)
	if seen.Addr().String() != "192.0.2.1" || !echoed {
		t.Errorf("masqueraded: seen from %v, echoed %v", seen, echoed)
	}
	seen, echoed = privtest.UDPExchange(t, plain, inet, netip.AddrPort{}, netip.MustParseAddr("192.0.2.2"), time.Second)
	if seen.Addr().String() != "10.7.0.6" || echoed {
		t.Errorf("not masqueraded: seen from %v, echoed %v", seen, echoed)
	}

	own := nft.Owner{Network: "testnet", ContainerID: "masq", IfName: "eth0"}
	if nftOwned(t, th.ns, own) == 0 {
		t.Error("no nftables state after ADD")
	}
	path := ctr.Path()
	destroy()
	c := call("DEL", nil, "masq", cfg)
	c.Netns = path
	th.ok(c)
	if n := nftOwned(t, th.ns, own); n != 0 {
		t.Errorf("%d nftables objects left after DEL", n)
	}
}

// TestGCAndStatus: GC goes to IPAM and collects stale masquerade state;
// STATUS goes to IPAM unconditionally.
func TestGCAndStatus(t *testing.T) {
	t.Parallel()
	th := newHost(t)
	plugintest.RequirePlugin(t, "host-local")
	dir := t.TempDir()
	fields := `,"ipMasq":true` + hostLocal(dir, "10.8.0.0/24")
	keep, _ := newCtr(t)
	stale, _ := newCtr(t)
	o := th.exec(call("ADD", keep, "keep", conf("1.1.0", fields)))
	skipIfNotImplemented(t, o)
	th.ok(call("ADD", stale, "stale", conf("1.1.0", fields)))
	gc := conf("1.1.0", fields)
	gc = gc[:len(gc)-1] + `,"cni.dev/valid-attachments":[{"containerID":"keep","ifname":"eth0"}]}`
	th.ok(plugintest.Call{Command: "GC", Stdin: gc})
	if got := reservations(t, dir); len(got) != 1 {
		t.Errorf("reservations after GC %v", got)
	}
	if nftOwned(t, th.ns, nft.Owner{Network: "testnet", ContainerID: "stale", IfName: "eth0"}) != 0 ||
		nftOwned(t, th.ns, nft.Owner{Network: "testnet", ContainerID: "keep", IfName: "eth0"}) == 0 {
		t.Error("GC collected the wrong masquerade state")
	}

	th.ok(plugintest.Call{Command: "STATUS", Stdin: conf("1.1.0", fields)})
	e := th.fail(plugintest.Call{Command: "STATUS", Stdin: conf("1.1.0", "")})
	if e.Msg != "no plugin name provided" {
		t.Errorf("STATUS without ipam: %q", e.Msg)
	}
}

// hostLocal is an "ipam" member for host-local with its store under dir
// and the subnet's first address as gateway.
func hostLocal(dir, subnet string) string {
	return fmt.Sprintf(`,"ipam":{"type":"host-local","dataDir":%q,"ranges":[[{"subnet":%q}]]}`, dir, subnet)
}

// reservations lists the addresses host-local holds for network testnet.
func reservations(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(dir, "testnet"))
	if os.IsNotExist(err) {
		return nil
	}
	must(t, err)
	var out []string
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "last_reserved_ip") && e.Name() != "lock" {
			out = append(out, e.Name())
		}
	}
	return out
}

// waitLinks waits briefly for the kernel to reap links of a destroyed
// namespace, then checks the list.
func waitLinks(t *testing.T, h *netlinkx.Handle, want ...string) {
	t.Helper()
	for range 100 {
		if len(linkNames(t, h)) == len(want) {
			break
		}
		sleepBrief()
	}
	wantLinks(t, h, want...)
}

// TestIPv6DAD: ptp leaves duplicate address detection on in the container
// (as the reference) and ADD returns only once the address is usable, so
// the routes with it as source could be added.
func TestIPv6DAD(t *testing.T) {
	t.Parallel()
	th := newHost(t)
	ctr := privtest.NewNS(t) // kernel defaults: DAD on
	hc, err := netlinkx.Open(ctr)
	must(t, err)
	defer hc.Close()
	start := time.Now()
	th.add(ctr, "dad", conf("1.0.0", static(`[{"dst":"::/0"}]`, "fd00:9::5/64 fd00:9::1")))
	took := time.Since(start)
	addrs, err := hc.Addrs("eth0", unix.AF_INET6)
	must(t, err)
	for _, a := range addrs {
		if a.Prefix.Addr().String() == "fd00:9::5" && (a.Tentative() || a.Flags&unix.IFA_F_NODAD != 0) {
			t.Errorf("container address %+v", a)
		}
	}
	if sysctl(t, ctr, "net/ipv6/conf/eth0/accept_dad") != "1" {
		t.Error("accept_dad changed")
	}
	if !privtest.UDPRoundTrip(t, ctr, th.ns, netip.MustParseAddr("fd00:9::1")) {
		t.Error("no round trip to the IPv6 gateway right after ADD")
	}
	t.Logf("ADD with DAD took %v", took)
}
