package vlan

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

// Kernels without 802.1Q skip these (privtest.RequireLinkKind in
// newTrunk); the VM runs them. TestNoKernelSupport runs only there.

func TestMain(m *testing.M) { plugintest.Main(m) }

// trunk is a test's network: the host namespace the plugin runs in,
// holding the master up0 — a veth whose peer down0, in the switch
// namespace, carries VLANs 100 and 200 to one station each: s100 at
// 10.50.0.1/24 (and fd00:50::1/64) and s200 at 10.50.0.4/24. Both VLANs use
// one subnet, so only the tags keep them apart.
type trunk struct {
	*plugintest.Host
	s100, s200 *netns.NS
}

func newTrunk(t *testing.T) *trunk {
	t.Helper()
	privtest.RequireLinkKind(t, "vlan")
	th := plugintest.NewHost(t, "vlan")
	sw, swh := plugintest.NewCtr(t)
	privtest.Wire(t, th.NS, "up0", netip.Prefix{}, sw, "down0", netip.Prefix{})
	down0 := plugintest.MustLink(t, swh, "down0")
	tr := &trunk{Host: th}
	for _, st := range []struct {
		ns    **netns.NS
		id    int
		addrs []string
	}{{&tr.s100, 100, []string{"10.50.0.1/24", "fd00:50::1/64"}}, {&tr.s200, 200, []string{"10.50.0.4/24"}}} {
		ns, h := plugintest.NewCtr(t, plugintest.NoDAD)
		*st.ns = ns
		name := fmt.Sprint("v", st.id)
		plugintest.Must(t, swh.AddVlan(netlinkx.VlanSpec{ChildSpec: netlinkx.ChildSpec{Name: name, Parent: down0.Index, NS: ns}, ID: st.id}))
		for _, a := range st.addrs {
			plugintest.Must(t, h.AddAddr(name, netip.MustParsePrefix(a), netlinkx.AddrOpts{NoDAD: true}))
		}
		plugintest.Must(t, h.SetUp(name))
	}
	return tr
}

func newCtr(t *testing.T) (*netns.NS, *netlinkx.Handle) {
	return plugintest.NewCtr(t, plugintest.NoDAD)
}

// conf is a vlan config for network "testnet" on master up0; fields are
// more JSON members (starting with a comma).
func conf(version string, id int, fields string) string {
	return fmt.Sprintf(`{"cniVersion":%q,"name":"testnet","type":"vlan","master":"up0","vlanId":%d%s}`, version, id, fields)
}

// TestTraffic: a container on VLAN 100 reaches the VLAN 100 station (IPv4
// and IPv6), one on VLAN 200 the VLAN 200 station; across VLANs nothing
// gets through, although all share one subnet and one master.
func TestTraffic(t *testing.T) {
	t.Parallel()
	tr := newTrunk(t)
	a, _ := newCtr(t)
	b, _ := newCtr(t)
	tr.Add(a, "a", conf("1.0.0", 100, plugintest.Static("", "10.50.0.2/24", "fd00:50::2/64")))
	tr.Add(b, "b", conf("1.0.0", 200, plugintest.Static("", "10.50.0.3/24")))
	privtest.RoundTrips(t, []privtest.Trip{
		{Name: "a->s100", From: a, To: tr.s100, Dst: "10.50.0.1"},
		{Name: "s100->a v6", From: tr.s100, To: a, Dst: "fd00:50::2"},
		{Name: "b->s200", From: b, To: tr.s200, Dst: "10.50.0.4"},
		{Name: "s200->b", From: tr.s200, To: b, Dst: "10.50.0.3"},
	})
	for _, tt := range []struct {
		name     string
		from, to *netns.NS
		dst      string
	}{
		{"a->s200", a, tr.s200, "10.50.0.4"},
		{"b->s100", b, tr.s100, "10.50.0.1"},
		{"a->b", a, b, "10.50.0.3"},
	} {
		if privtest.UDPRoundTrip(t, tt.from, tt.to, netip.MustParseAddr(tt.dst)) {
			t.Errorf("%s: round trip across VLANs", tt.name)
		}
	}
}

// TestKernelState: the VLAN link has the configured id and MTU, sits on
// the master and has its MAC, and is up with the addresses.
func TestKernelState(t *testing.T) {
	t.Parallel()
	tr := newTrunk(t)
	ctr, hc := newCtr(t)
	r := tr.Add(ctr, "ks", conf("1.0.0", 100, `,"mtu":1400`+plugintest.Static(`[{"dst":"0.0.0.0/0"}]`, "10.50.0.2/24 10.50.0.1")))
	eth0 := plugintest.MustLink(t, hc, "eth0")
	up0 := plugintest.MustLink(t, tr.H, "up0")
	if eth0.Kind != "vlan" || eth0.MTU != 1400 || !eth0.Up || eth0.ParentIndex != up0.Index || eth0.MAC.String() != up0.MAC.String() {
		t.Errorf("eth0 %+v (up0 %+v)", eth0, up0)
	}
	if id, err := hc.VlanID("eth0"); err != nil || id != 100 {
		t.Errorf("VLAN id %d %v", id, err)
	}
	if r.Interfaces[0].Mac != up0.MAC.String() || *r.IPs[0].Interface != 0 {
		t.Errorf("result %+v", r)
	}
	if rs := plugintest.RoutesTo(t, hc, "0.0.0.0/0"); len(rs) != 1 || rs[0].Gw.String() != "10.50.0.1" {
		t.Errorf("default route %+v", rs)
	}
	plugintest.WantLinks(t, tr.H, "lo", "up0")
}

// TestResultPerVersion compares the printed result with the expected text
// per spec version (testdata/result-*.json; CMAC and SANDBOX filled in):
// the config's DNS replaces IPAM's.
func TestResultPerVersion(t *testing.T) {
	t.Parallel()
	plugintest.ResultPerVersion(t, func(t *testing.T, v string) (string, plugintest.Placeholders) {
		tr := newTrunk(t)
		ctr, hc := newCtr(t)
		out := tr.OK(plugintest.Cmd("ADD", ctr, "c0ffee", conf(v, 100, `,"dns":{"nameservers":["1.1.1.1"]}`+
			`,"ipam":{"type":"static","addresses":[{"address":"10.50.0.2/24","gateway":"10.50.0.1"}],"routes":[{"dst":"0.0.0.0/0"}],"dns":{"nameservers":["9.9.9.9"]}}`)))
		return out, plugintest.Placeholders{"CMAC", plugintest.MustLink(t, hc, "eth0").MAC.String(), "SANDBOX", ctr.Path()}
	})
}

// TestLinkInContainer: the master lives in the container's namespace; the
// VLAN link is made there and reaches its VLAN's station. The host is
// left alone, and DEL leaves the master.
func TestLinkInContainer(t *testing.T) {
	t.Parallel()
	tr := newTrunk(t)
	ctr, hc := newCtr(t)
	sw, swh := newCtr(t)
	privtest.Wire(t, ctr, "m0", netip.Prefix{}, sw, "o0", netip.Prefix{})
	plugintest.Must(t, swh.AddVlan(netlinkx.VlanSpec{ChildSpec: netlinkx.ChildSpec{Name: "o0.300", Parent: plugintest.MustLink(t, swh, "o0").Index}, ID: 300}))
	plugintest.Must(t, swh.AddAddr("o0.300", netip.MustParsePrefix("10.60.0.1/24"), netlinkx.AddrOpts{}))
	plugintest.Must(t, swh.SetUp("o0.300"))
	cfg := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"testnet","type":"vlan","master":"m0","vlanId":300,"linkInContainer":true%s}`,
		plugintest.Static("", "10.60.0.2/24"))
	out := tr.OK(plugintest.Cmd("ADD", ctr, "lic", cfg))
	if got := plugintest.MustLink(t, hc, "eth0").ParentIndex; got != plugintest.MustLink(t, hc, "m0").Index {
		t.Errorf("parent %d", got)
	}
	privtest.RoundTrips(t, []privtest.Trip{{Name: "ctr->vlan 300", From: ctr, To: sw, Dst: "10.60.0.1"}})
	tr.OK(plugintest.Cmd("CHECK", ctr, "lic", plugintest.WithPrev(cfg, out)))
	plugintest.WantLinks(t, tr.H, "lo", "up0")
	tr.OK(plugintest.Cmd("DEL", ctr, "lic", cfg))
	plugintest.WantLinks(t, hc, "lo", "m0")
}

// TestBadConfig: config errors come with the reference's message (code
// 999) before anything is created or allocated — or, for errors only the
// kernel or IPAM can find, with everything taken back.
func TestBadConfig(t *testing.T) {
	t.Parallel()
	tr := newTrunk(t)
	dir := plugintest.HostLocalStore(t)
	ipamConf := plugintest.HostLocal(dir, "10.50.0.0/24")
	taken, _ := newCtr(t)
	tr.Add(taken, "taken", conf("1.0.0", 100, plugintest.Static("", "10.50.0.9/24")))
	for i, tt := range []struct {
		name, conf, msg string
	}{
		{"no master", `{"cniVersion":"1.0.0","name":"testnet","type":"vlan","vlanId":100` + ipamConf + `}`,
			`"master" field is required. It specifies the host interface name to create the VLAN for`},
		{"id too big", conf("1.0.0", 4095, ipamConf), "invalid VLAN ID 4095 (must be between 0 and 4095 inclusive)"},
		{"id negative", conf("1.0.0", -1, ipamConf), "invalid VLAN ID -1 (must be between 0 and 4095 inclusive)"},
		{"id type", `{"cniVersion":"1.0.0","name":"testnet","type":"vlan","master":"up0","vlanId":"100"` + ipamConf + `}`,
			"failed to load netconf: json: cannot unmarshal string into Go struct field NetConf.vlanId of type int"},
		{"master missing", `{"cniVersion":"1.0.0","name":"testnet","type":"vlan","master":"nope0","vlanId":100` + ipamConf + `}`, "Link not found"},
		{"mtu above master", conf("1.0.0", 100, `,"mtu":9000`+ipamConf), "invalid MTU 9000, must be [0, master MTU(1500)]"},
		{"id in use on the master", conf("1.0.0", 100, ipamConf), "failed to create vlan: file exists"},
		{"ipam missing", conf("1.0.0", 101, `,"ipam":{"type":"no-such-ipam"}`), `^failed to execute IPAM delegate: failed to find plugin "no-such-ipam" in path \[.*\]$`},
	} {
		ctr, hc := newCtr(t)
		e := tr.Fail(plugintest.Cmd("ADD", ctr, fmt.Sprint("bad", i), tt.conf))
		if e.Code != 999 {
			t.Errorf("%s: code %d", tt.name, e.Code)
		}
		plugintest.MatchMsg(t, tt.name, e.Msg, tt.msg)
		plugintest.WantLinks(t, hc, "lo")
	}
	plugintest.WantLinks(t, tr.H, "lo", "up0")
	if got := plugintest.Reservations(t, dir); len(got) != 0 {
		t.Errorf("reservations %v", got)
	}
	e := tr.Fail(plugintest.Cmd("ADD", tr.NS, "own", conf("1.0.0", 300, ipamConf)))
	if e.Code != 8 || len(plugintest.Reservations(t, dir)) != 0 {
		t.Errorf("own netns: %+v", e)
	}
	plugintest.WantLinks(t, tr.H, "lo", "up0")
}

// TestFailedAddLeavesNothing: when a step after the VLAN link was created
// fails, it is deleted and the IPAM reservation released; a container
// interface that already existed is left alone.
func TestFailedAddLeavesNothing(t *testing.T) {
	t.Parallel()
	dir := plugintest.HostLocalStore(t)
	world := func(t *testing.T) *plugintest.Host { return newTrunk(t).Host }
	plugintest.FailedAdds(t, dir, world, []string{"lo", "up0"}, []plugintest.FailedAdd{
		{Name: "ipam no addresses", Conf: conf("1.0.0", 100, plugintest.Static("")), Msg: "IPAM plugin returned missing IP config"},
		{Name: "unreachable route", Conf: conf("1.0.0", 100, plugintest.UnreachableRoute(dir, "10.50.0.0/24")), Msg: plugintest.UnreachableMsg},
		{Name: "interface name taken", Conf: conf("1.0.0", 100, plugintest.Static("", "10.50.0.2/24")), Msg: plugintest.IfNameTakenMsg, Existing: true},
	}, func(t *testing.T, h *plugintest.Host) {
		// The VLAN id is free again on the master.
		c2, _ := newCtr(t)
		h.Add(c2, "again", conf("1.0.0", 100, plugintest.Static("", "10.50.0.3/24")))
	})
}

// TestDel: idempotent, tolerant of a vanished namespace or interface and
// of an empty CNI_NETNS; IPAM is released in each case. DEL does not need
// the master: it works after the master is gone.
func TestDel(t *testing.T) {
	t.Parallel()
	tr := newTrunk(t)
	dir := plugintest.HostLocalStore(t)
	cfg := conf("1.0.0", 100, plugintest.HostLocal(dir, "10.50.0.0/24"))
	plugintest.DelEverywhere(t, tr.Host, dir, cfg, "", "lo", "up0")

	// The master is gone (and the VLAN link with it): DEL still releases.
	ctr, _ := newCtr(t)
	tr.OK(plugintest.Cmd("ADD", ctr, "m", cfg))
	plugintest.Must(t, tr.H.DeleteLink("up0"))
	tr.OK(plugintest.Cmd("DEL", ctr, "m", cfg))
	if got := plugintest.Reservations(t, dir); len(got) != 0 {
		t.Errorf("master gone: reservations %v", got)
	}
	tr.OK(plugintest.Cmd("DEL", nil, "x", conf("1.0.0", 100, ""))) // layer 2: no IPAM to ask
}

// TestCheck: success right after ADD, and the reference's messages for
// drift (the VLAN id's one is the reference's, odd wording included).
func TestCheck(t *testing.T) {
	t.Parallel()
	tr := newTrunk(t)
	ctr, hc := newCtr(t)
	fields := plugintest.Static(`[{"dst":"0.0.0.0/0"}]`, "10.50.0.2/24 10.50.0.1")
	cfg := conf("1.0.0", 100, fields)
	out := tr.OK(plugintest.Cmd("ADD", ctr, "chk", cfg))
	check := plugintest.Cmd("CHECK", ctr, "chk", plugintest.WithPrev(cfg, out))
	tr.OK(check)

	plugintest.CheckDrift(t, tr.Host, ctr, hc, cfg, out, "10.50.0.99/24",
		"vlan: Interface eth0 Mac 02:00:00:00:00:99 doesn't match container Mac: ", "Sandbox in prevResult  doesn't match configured netns: ",
		[4]string{"id", conf("1.0.0", 101, fields), out, "Error: Tuning link eth0 configured promisc is 101, current value is 100"},
		[4]string{"mtu", conf("1.0.0", 100, `,"mtu":1300`+fields), out, "Error: Tuning configured MTU of eth0 is 1300, current value is 1500"},
		[4]string{"master", strings.Replace(cfg, `"up0"`, `"gone0"`, 1), out, `failed to lookup master "gone0": Link not found`})
	// IPAM is checked first; static itself insists on a prevResult,
	// host-local does not, so vlan's own message shows.
	tr.FailsWith("no prevResult (static)", plugintest.Cmd("CHECK", ctr, "chk", cfg), "Required prevResult missing")
	if plugintest.HasPlugin(t, "host-local") {
		hl := conf("1.0.0", 101, plugintest.HostLocal(t.TempDir(), "10.50.0.0/24"))
		hlCtr, _ := newCtr(t)
		tr.OK(plugintest.Cmd("ADD", hlCtr, "hl", hl))
		tr.FailsWith("no prevResult", plugintest.Cmd("CHECK", hlCtr, "hl", hl), "vlan: Required prevResult missing")
	}
	plugintest.CheckReplaced(t, tr.Host, hc, check,
		"vlan: Container Interface name in prevResult: eth0 not found", "Error: Container interface eth0 not of type vlan")
}

// TestGCAndStatus: GC and STATUS go to IPAM when there is one; without,
// they succeed.
func TestGCAndStatus(t *testing.T) {
	t.Parallel()
	tr := newTrunk(t)
	dir := plugintest.HostLocalStore(t)
	fields := plugintest.HostLocal(dir, "10.50.0.0/24")
	plugintest.GCKeepsValid(t, tr.Host, dir, conf("1.1.0", 100, fields), conf("1.1.0", 200, fields), conf("1.1.0", 100, ""), "")
}

// TestNoKernelSupport: on a kernel without 802.1Q ADD says so and leaves
// nothing behind (IPAM is not even asked). Kernels with it skip this.
func TestNoKernelSupport(t *testing.T) {
	t.Parallel()
	th := plugintest.NewHost(t, "vlan")
	plugintest.Must(t, th.H.AddVeth(netlinkx.VethSpec{Name: "up0", PeerName: "peer0"}))
	probe := th.H.AddVlan(netlinkx.VlanSpec{ChildSpec: netlinkx.ChildSpec{Name: "probe0", Parent: plugintest.MustLink(t, th.H, "up0").Index}, ID: 5})
	if probe == nil {
		t.Skip("this kernel has 802.1Q")
	}
	dir := plugintest.HostLocalStore(t)
	ctr, hc := newCtr(t)
	th.FailsWith("ADD", plugintest.Cmd("ADD", ctr, "k", conf("1.0.0", 100, plugintest.HostLocal(dir, "10.50.0.0/24"))),
		"failed to create vlan: vlan not supported by this kernel")
	plugintest.WantLinks(t, hc, "lo")
	plugintest.WantLinks(t, th.H, "lo", "peer0", "up0")
	if got := plugintest.Reservations(t, dir); len(got) != 0 {
		t.Errorf("reservations %v", got)
	}
}
