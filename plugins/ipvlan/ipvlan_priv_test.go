package ipvlan

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/nftcni/nftcni/internal/plugintest"
	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/netns"
)

// Kernels without the ipvlan driver skip these (privtest.RequireLinkKind
// in newLAN); the VM runs them. TestNoKernelSupport runs only there.

func TestMain(m *testing.M) { plugintest.Main(m) }

// lan is a test's network: the host namespace the plugin runs in, holding
// the master up0 at 10.9.0.2/24 — a veth whose peer down0 sits in the
// outside namespace at 10.9.0.1/24 and fd00:9::1/64, a station of the LAN.
// The station routes 10.20.0.0/24 (the l3 containers' subnet) via the
// host's address: in l3 modes the master answers for its ipvlans' packets,
// not for their ARP.
type lan struct {
	*plugintest.Host
	out *netns.NS
}

func newLAN(t *testing.T) *lan {
	t.Helper()
	privtest.RequireLinkKind(t, "ipvlan")
	th := plugintest.NewHost(t, "ipvlan")
	out, oh := plugintest.NewCtr(t, plugintest.NoDAD)
	privtest.Wire(t, th.NS, "up0", netip.MustParsePrefix("10.9.0.2/24"), out, "down0", netip.MustParsePrefix("10.9.0.1/24"))
	plugintest.Must(t, oh.AddAddr("down0", netip.MustParsePrefix("fd00:9::1/64"), netlinkx.AddrOpts{NoDAD: true}))
	down0 := plugintest.MustLink(t, oh, "down0")
	plugintest.Must(t, oh.AddRoute(netlinkx.Route{Dst: netip.MustParsePrefix("10.20.0.0/24"), Gw: netip.MustParseAddr("10.9.0.2"), LinkIndex: down0.Index}))
	return &lan{th, out}
}

func newCtr(t *testing.T) (*netns.NS, *netlinkx.Handle) {
	return plugintest.NewCtr(t, plugintest.NoDAD)
}

// conf is an ipvlan config for network "testnet" on master up0; fields
// are more JSON members (starting with a comma).
func conf(version, fields string) string {
	return fmt.Sprintf(`{"cniVersion":%q,"name":"testnet","type":"ipvlan","master":"up0"%s}`, version, fields)
}

func confNoMaster(version, fields string) string {
	return fmt.Sprintf(`{"cniVersion":%q,"name":"testnet","type":"ipvlan"%s}`, version, fields)
}

// TestTrafficByMode: in every mode containers on one master reach each
// other and a station of the LAN, both ways. In l2 they sit in the LAN's
// subnet (IPv6 too); in l3 and l3s in their own, which the station routes
// via the host.
func TestTrafficByMode(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		mode, a1, a2 string
		extra        string // more addresses (l2: IPv6)
		routes       string
	}{
		{"l2", "10.9.0.11/24", "10.9.0.12/24", "fd00:9::", ""},
		{"l3", "10.20.0.11/24", "10.20.0.12/24", "", `[{"dst":"0.0.0.0/0"}]`},
		{"l3s", "10.20.0.11/24", "10.20.0.12/24", "", `[{"dst":"0.0.0.0/0"}]`},
	} {
		t.Run(tt.mode, func(t *testing.T) {
			t.Parallel()
			l := newLAN(t)
			c1, h1 := newCtr(t)
			c2, _ := newCtr(t)
			mode := `,"mode":"` + tt.mode + `"`
			addrs := func(a string, n int) []string {
				if tt.extra == "" {
					return []string{a}
				}
				return []string{a, fmt.Sprintf("%s%d/64", tt.extra, n)}
			}
			r1 := l.Add(c1, "c1", conf("1.0.0", mode+plugintest.Static(tt.routes, addrs(tt.a1, 11)...)))
			l.Add(c2, "c2", conf("1.0.0", mode+plugintest.Static(tt.routes, addrs(tt.a2, 12)...)))
			if got, err := h1.IPVlanMode("eth0"); err != nil || got.String() != tt.mode {
				t.Errorf("mode %v %v", got, err)
			}
			// An ipvlan has its master's MAC.
			if r1.Interfaces[0].Mac != plugintest.MustLink(t, l.H, "up0").MAC.String() {
				t.Errorf("MAC %s", r1.Interfaces[0].Mac)
			}
			ip := func(p string) string { return netip.MustParsePrefix(p).Addr().String() }
			trips := []privtest.Trip{
				{Name: "c1->c2", From: c1, To: c2, Dst: ip(tt.a2)},
				{Name: "c1->lan", From: c1, To: l.out, Dst: "10.9.0.1"},
				{Name: "lan->c2", From: l.out, To: c2, Dst: ip(tt.a2)},
			}
			if tt.extra != "" {
				trips = append(trips, privtest.Trip{Name: "c2->lan v6", From: c2, To: l.out, Dst: "fd00:9::1"},
					privtest.Trip{Name: "c2->c1 v6", From: c2, To: c1, Dst: "fd00:9::11"})
			}
			privtest.RoundTrips(t, trips)
		})
	}
}

// TestResultPerVersion compares the printed result with the expected text
// per spec version (testdata/result-*.json; CMAC and SANDBOX filled in):
// the config's DNS replaces IPAM's.
func TestResultPerVersion(t *testing.T) {
	t.Parallel()
	plugintest.ResultPerVersion(t, func(t *testing.T, v string) (string, plugintest.Placeholders) {
		l := newLAN(t)
		ctr, hc := newCtr(t)
		out := l.OK(plugintest.Cmd("ADD", ctr, "c0ffee", conf(v, `,"mode":"l3","dns":{"nameservers":["1.1.1.1"]}`+
			`,"ipam":{"type":"static","addresses":[{"address":"10.20.0.11/24"}],"routes":[{"dst":"0.0.0.0/0"}],"dns":{"nameservers":["9.9.9.9"]}}`)))
		return out, plugintest.Placeholders{"CMAC", plugintest.MustLink(t, hc, "eth0").MAC.String(), "SANDBOX", ctr.Path()}
	})
}

// TestKernelState: parent, mode and MTU as configured; up, with the
// addresses; addresses announced on link-up (arp_notify, ndisc_notify).
func TestKernelState(t *testing.T) {
	t.Parallel()
	l := newLAN(t)
	ctr, hc := newCtr(t)
	l.Add(ctr, "ks", conf("1.0.0", `,"mode":"l2","mtu":1400`+plugintest.Static("", "10.9.0.11/24", "fd00:9::11/64")))
	eth0 := plugintest.MustLink(t, hc, "eth0")
	up0 := plugintest.MustLink(t, l.H, "up0")
	if eth0.Kind != "ipvlan" || eth0.MTU != 1400 || !eth0.Up || eth0.ParentIndex != up0.Index || eth0.MAC.String() != up0.MAC.String() {
		t.Errorf("eth0 %+v (up0 %+v)", eth0, up0)
	}
	if got := plugintest.AddrStrings(t, hc, "eth0", 0); strings.Join(got, " ") != "10.9.0.11/24 fd00:9::11/64" {
		t.Errorf("addresses %v", got)
	}
	for _, key := range []string{"net/ipv4/conf/eth0/arp_notify", "net/ipv6/conf/eth0/ndisc_notify"} {
		if v := plugintest.Sysctl(t, ctr, key); v != "1" {
			t.Errorf("%s = %s", key, v)
		}
	}
	plugintest.WantLinks(t, l.H, "lo", "up0")
}

// TestMaster: without master the ipvlan goes on the single interface of a
// chain's prevResult (whose addresses it then uses when there is no IPAM),
// else on the device of the default route — the container's with
// linkInContainer, where the master may also be named.
func TestMaster(t *testing.T) {
	t.Parallel()
	l := newLAN(t)
	up0 := plugintest.MustLink(t, l.H, "up0")
	parent := func(h *netlinkx.Handle) int { return plugintest.MustLink(t, h, "eth0").ParentIndex }

	c0, h0 := newCtr(t)
	l.FailsWith("no default route", plugintest.Cmd("ADD", c0, "x", confNoMaster("1.0.0", plugintest.Static("", "10.9.0.10/24"))), "no default route interface found")
	plugintest.WantLinks(t, h0, "lo")

	// Chained: prevResult names the master and carries the addresses.
	prev := `{"cniVersion":"1.0.0","interfaces":[{"name":"up0"}],"ips":[{"address":"10.9.0.11/24","interface":0}],"dns":{"nameservers":["9.9.9.9"]}}`
	c1, h1 := newCtr(t)
	r := l.Add(c1, "c1", plugintest.WithPrev(confNoMaster("1.0.0", ""), prev))
	if parent(h1) != up0.Index || len(r.Interfaces) != 1 || r.Interfaces[0].Name != "eth0" || len(r.IPs) != 1 ||
		r.IPs[0].Address != "10.9.0.11/24" || *r.IPs[0].Interface != 0 || r.DNS != nil {
		t.Errorf("chained: parent %d, result %+v", parent(h1), r)
	}
	privtest.RoundTrips(t, []privtest.Trip{{Name: "chained->lan", From: c1, To: l.out, Dst: "10.9.0.1"}})
	l.FailsWith("chain of two", plugintest.Cmd("ADD", c0, "x", plugintest.WithPrev(confNoMaster("1.0.0", ""),
		`{"cniVersion":"1.0.0","interfaces":[{"name":"up0"},{"name":"eth9"}]}`)),
		"chained master failure. PrevResult lacks a single named interface")
	// Without IPAM, a prevResult without addresses is not enough.
	l.FailsWith("chain without addresses", plugintest.Cmd("ADD", c0, "x", plugintest.WithPrev(confNoMaster("1.0.0", ""),
		`{"cniVersion":"1.0.0","interfaces":[{"name":"up0"}]}`)), "no plugin name provided")
	plugintest.WantLinks(t, h0, "lo")

	// The host's default route.
	plugintest.Must(t, l.H.AddRoute(netlinkx.Route{Dst: netip.MustParsePrefix("0.0.0.0/0"), Gw: netip.MustParseAddr("10.9.0.1"), LinkIndex: up0.Index}))
	c2, h2 := newCtr(t)
	l.Add(c2, "c2", confNoMaster("1.0.0", plugintest.Static("", "10.9.0.12/24")))
	if parent(h2) != up0.Index {
		t.Errorf("default route: parent %d", parent(h2))
	}

	// linkInContainer, named and by default route.
	c3, h3 := newCtr(t)
	out3, _ := newCtr(t)
	privtest.Wire(t, c3, "m0", netip.Prefix{}, out3, "o0", netip.MustParsePrefix("10.8.0.1/24"))
	cfg := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"testnet","type":"ipvlan","master":"m0","linkInContainer":true%s}`, plugintest.Static("", "10.8.0.11/24"))
	out := l.OK(plugintest.Cmd("ADD", c3, "c3", cfg))
	if parent(h3) != plugintest.MustLink(t, h3, "m0").Index {
		t.Errorf("linkInContainer: parent %d", parent(h3))
	}
	privtest.RoundTrips(t, []privtest.Trip{{Name: "c3->m0 lan", From: c3, To: out3, Dst: "10.8.0.1"}})
	l.OK(plugintest.Cmd("CHECK", c3, "c3", plugintest.WithPrev(cfg, out)))
	l.OK(plugintest.Cmd("DEL", c3, "c3", cfg))
	plugintest.WantLinks(t, h3, "lo", "m0")

	c4, h4 := newCtr(t)
	out4, _ := newCtr(t)
	privtest.Wire(t, c4, "m1", netip.MustParsePrefix("10.7.0.2/24"), out4, "o1", netip.MustParsePrefix("10.7.0.1/24"))
	m1 := plugintest.MustLink(t, h4, "m1")
	plugintest.Must(t, h4.AddRoute(netlinkx.Route{Dst: netip.MustParsePrefix("0.0.0.0/0"), Gw: netip.MustParseAddr("10.7.0.1"), LinkIndex: m1.Index}))
	l.Add(c4, "c4", confNoMaster("1.0.0", `,"linkInContainer":true`+plugintest.Static("", "10.17.0.11/24")))
	if parent(h4) != m1.Index {
		t.Errorf("linkInContainer default route: parent %d, want %d", parent(h4), m1.Index)
	}
	plugintest.WantLinks(t, l.H, "lo", "up0")
}

// TestBadConfig: config errors come with the reference's message (code
// 999, or the IPAM delegate's own) and leave nothing behind.
func TestBadConfig(t *testing.T) {
	t.Parallel()
	l := newLAN(t)
	dir := plugintest.HostLocalStore(t)
	ipamConf := plugintest.HostLocal(dir, "10.9.0.0/24")
	for i, tt := range []struct {
		name, conf, msg string
	}{
		{"mode", conf("1.0.0", `,"mode":"l4"`+ipamConf), `unknown ipvlan mode: "l4"`},
		{"mode type", conf("1.0.0", `,"mode":3`+ipamConf), "failed to load netconf: json: cannot unmarshal number into Go struct field NetConf.mode of type string"},
		{"master missing", `{"cniVersion":"1.0.0","name":"testnet","type":"ipvlan","master":"nope0"` + ipamConf + `}`, `failed to lookup master "nope0": Link not found`},
		{"no ipam", conf("1.0.0", ""), "no plugin name provided"},
		{"bad prevResult", plugintest.WithPrev(conf("1.0.0", ipamConf), `{"cniVersion":"1.0.0","ips":[{"address":"nope"}]}`), "^could not parse prevResult: "},
	} {
		ctr, hc := newCtr(t)
		e := l.Fail(plugintest.Cmd("ADD", ctr, fmt.Sprint("bad", i), tt.conf))
		if e.Code != 999 {
			t.Errorf("%s: code %d", tt.name, e.Code)
		}
		plugintest.MatchMsg(t, tt.name, e.Msg, tt.msg)
		plugintest.WantLinks(t, hc, "lo")
	}
	plugintest.WantLinks(t, l.H, "lo", "up0")
	if got := plugintest.Reservations(t, dir); len(got) != 0 {
		t.Errorf("reservations %v", got)
	}
	e := l.Fail(plugintest.Cmd("ADD", l.NS, "own", conf("1.0.0", ipamConf)))
	if e.Code != 8 || len(plugintest.Reservations(t, dir)) != 0 {
		t.Errorf("own netns: %+v", e)
	}
	plugintest.WantLinks(t, l.H, "lo", "up0")
}

// TestFailedAddLeavesNothing: when a step after the ipvlan was created
// fails, the ipvlan is deleted and the IPAM reservation released; a
// container interface that already existed is left alone.
func TestFailedAddLeavesNothing(t *testing.T) {
	t.Parallel()
	dir := plugintest.HostLocalStore(t)
	plugintest.FailedAdds(t, dir, func(t *testing.T) *plugintest.Host { return newLAN(t).Host }, []string{"lo", "up0"}, []plugintest.FailedAdd{
		{Name: "ipam no addresses", Conf: conf("1.0.0", plugintest.Static("")), Msg: "IPAM plugin returned missing IP config"},
		{Name: "unreachable route", Conf: conf("1.0.0", plugintest.UnreachableRoute(dir, "10.9.0.0/24")), Msg: plugintest.UnreachableMsg},
		{Name: "interface name taken", Conf: conf("1.0.0", plugintest.Static("", "10.9.0.11/24")), Msg: plugintest.IfNameTakenMsg, Existing: true},
	}, nil)
}

// TestDel: idempotent, tolerant of a vanished namespace or interface and
// of an empty CNI_NETNS; IPAM is released in each case. DEL does not look
// for the master: a config without one and no default route works.
func TestDel(t *testing.T) {
	t.Parallel()
	l := newLAN(t)
	dir := plugintest.HostLocalStore(t)
	plugintest.DelEverywhere(t, l.Host, dir, conf("1.0.0", plugintest.HostLocal(dir, "10.9.0.0/24")),
		confNoMaster("1.0.0", plugintest.HostLocal(dir, "10.9.0.0/24")), "lo", "up0")
}

// TestCheck: success right after ADD, and the reference's messages for
// drift. Without a configured master CHECK does not look for one.
func TestCheck(t *testing.T) {
	t.Parallel()
	l := newLAN(t)
	ctr, hc := newCtr(t)
	cfg := conf("1.0.0", plugintest.Static(`[{"dst":"0.0.0.0/0"}]`, "10.9.0.11/24 10.9.0.1"))
	out := l.OK(plugintest.Cmd("ADD", ctr, "chk", cfg))
	check := plugintest.Cmd("CHECK", ctr, "chk", plugintest.WithPrev(cfg, out))
	l.OK(check)
	noMaster := confNoMaster("1.0.0", plugintest.Static(`[{"dst":"0.0.0.0/0"}]`, "10.9.0.11/24 10.9.0.1"))
	l.OK(plugintest.Cmd("CHECK", ctr, "chk", plugintest.WithPrev(noMaster, out)))

	plugintest.CheckDrift(t, l.Host, ctr, hc, cfg, out, "10.9.0.99/24",
		"Interface eth0 Mac 02:00:00:00:00:99 doesn't match container Mac: ", "Sandbox in prevResult  doesn't match configured netns: ",
		[4]string{"mode", conf("1.0.0", `,"mode":"l3"`+plugintest.Static(`[{"dst":"0.0.0.0/0"}]`, "10.9.0.11/24 10.9.0.1")), out,
			"Container IPVlan mode l2 does not match expected value: l3"},
		[4]string{"master", strings.Replace(cfg, `"up0"`, `"gone0"`, 1), out, `failed to lookup master "gone0": Link not found`})
	l.FailsWith("no prevResult", plugintest.Cmd("CHECK", ctr, "chk", conf("1.0.0", "")), "Required prevResult missing")
	plugintest.CheckReplaced(t, l.Host, hc, check,
		"Container Interface name in prevResult: eth0 not found", "Error: Container interface eth0 not of type ipvlan")
}

// TestGCAndStatus: GC and STATUS go to IPAM when there is one; without,
// they succeed.
func TestGCAndStatus(t *testing.T) {
	t.Parallel()
	l := newLAN(t)
	dir := plugintest.HostLocalStore(t)
	fields := plugintest.HostLocal(dir, "10.9.0.0/24")
	plugintest.GCKeepsValid(t, l.Host, dir, conf("1.1.0", fields), conf("1.1.0", fields), conf("1.1.0", ""), "")
}

// TestNoKernelSupport: on a kernel without the ipvlan driver ADD says so,
// and leaves nothing behind (IPAM is not even asked). Kernels with the
// driver skip it.
func TestNoKernelSupport(t *testing.T) {
	t.Parallel()
	th := plugintest.NewHost(t, "ipvlan")
	plugintest.Must(t, th.H.AddVeth(netlinkx.VethSpec{Name: "up0", PeerName: "peer0"}))
	probe := th.H.AddIPVlan(netlinkx.IPVlanSpec{ChildSpec: netlinkx.ChildSpec{Name: "probe0", Parent: plugintest.MustLink(t, th.H, "up0").Index}})
	if probe == nil {
		t.Skip("this kernel has ipvlan")
	}
	dir := plugintest.HostLocalStore(t)
	ctr, hc := newCtr(t)
	th.FailsWith("ADD", plugintest.Cmd("ADD", ctr, "k", conf("1.0.0", plugintest.HostLocal(dir, "10.9.0.0/24"))),
		"failed to create ipvlan: ipvlan not supported by this kernel")
	plugintest.WantLinks(t, hc, "lo")
	plugintest.WantLinks(t, th.H, "lo", "peer0", "up0")
	if got := plugintest.Reservations(t, dir); len(got) != 0 {
		t.Errorf("reservations %v", got)
	}
}
