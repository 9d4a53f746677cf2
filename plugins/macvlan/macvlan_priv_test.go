package macvlan

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

func TestMain(m *testing.M) { plugintest.Main(m) }

// lan is a test's network: the host namespace the plugin runs in, holding
// the master up0 — a veth whose peer down0 sits in the outside namespace
// at 10.9.0.1/24 and fd00:9::1/64, a station of the LAN the containers
// join.
type lan struct {
	*plugintest.Host
	out *netns.NS
}

func newLAN(t *testing.T) *lan {
	t.Helper()
	th := plugintest.NewHost(t, "macvlan")
	out, oh := plugintest.NewCtr(t, plugintest.NoDAD)
	privtest.Wire(t, th.NS, "up0", netip.Prefix{}, out, "down0", netip.MustParsePrefix("10.9.0.1/24"))
	plugintest.Must(t, oh.AddAddr("down0", netip.MustParsePrefix("fd00:9::1/64"), netlinkx.AddrOpts{NoDAD: true}))
	return &lan{th, out}
}

// newCtr makes a container namespace with lo up and without IPv6 duplicate
// address detection, so addresses are usable at once.
func newCtr(t *testing.T) (*netns.NS, *netlinkx.Handle) {
	return plugintest.NewCtr(t, plugintest.NoDAD)
}

// conf is a macvlan config for network "testnet" on master up0; fields
// are more JSON members (starting with a comma).
func conf(version, fields string) string {
	return fmt.Sprintf(`{"cniVersion":%q,"name":"testnet","type":"macvlan","master":"up0"%s}`, version, fields)
}

// confNoMaster is conf without a master.
func confNoMaster(version, fields string) string {
	return fmt.Sprintf(`{"cniVersion":%q,"name":"testnet","type":"macvlan"%s}`, version, fields)
}

// TestTrafficByMode: containers on one master reach a station of the LAN
// in every mode, over IPv4 and IPv6; each other only in bridge mode
// (private forbids it, vepa sends it to the wire, where no switch
// reflects it).
func TestTrafficByMode(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		mode  string
		peers bool
	}{{"bridge", true}, {"private", false}, {"vepa", false}} {
		t.Run(tt.mode, func(t *testing.T) {
			t.Parallel()
			l := newLAN(t)
			c1, h1 := newCtr(t)
			c2, _ := newCtr(t)
			mode := `,"mode":"` + tt.mode + `"`
			l.Add(c1, "c1", conf("1.0.0", mode+plugintest.Static("", "10.9.0.11/24", "fd00:9::11/64")))
			l.Add(c2, "c2", conf("1.0.0", mode+plugintest.Static("", "10.9.0.12/24", "fd00:9::12/64")))
			info, err := h1.Macvlan("eth0")
			plugintest.Must(t, err)
			if info.Mode.String() != tt.mode {
				t.Errorf("mode %v", info.Mode)
			}
			privtest.RoundTrips(t, []privtest.Trip{
				{Name: "c1->lan v4", From: c1, To: l.out, Dst: "10.9.0.1"},
				{Name: "lan->c2 v4", From: l.out, To: c2, Dst: "10.9.0.12"},
				{Name: "c2->lan v6", From: c2, To: l.out, Dst: "fd00:9::1"},
			})
			if got := privtest.UDPRoundTrip(t, c1, c2, netip.MustParseAddr("10.9.0.12")); got != tt.peers {
				t.Errorf("c1->c2 round trip %v, want %v", got, tt.peers)
			}
		})
	}
}

// TestPassthru: a passthru macvlan takes over the master, MAC included
// (the kernel makes the master promiscuous while it exists; the plugin
// never touches the master's flags). A second one on the same master
// fails and leaves nothing; after DEL the master is free again.
func TestPassthru(t *testing.T) {
	t.Parallel()
	l := newLAN(t)
	up0 := plugintest.MustLink(t, l.H, "up0")
	c1, h1 := newCtr(t)
	c2, h2 := newCtr(t)
	cfg := func(addr string) string {
		return conf("1.0.0", `,"mode":"passthru"`+plugintest.Static("", addr))
	}
	r := l.Add(c1, "p1", cfg("10.9.0.11/24"))
	if r.Interfaces[0].Mac != up0.MAC.String() || plugintest.MustLink(t, h1, "eth0").MAC.String() != up0.MAC.String() {
		t.Errorf("passthru MAC %s, master %s", r.Interfaces[0].Mac, up0.MAC)
	}
	privtest.RoundTrips(t, []privtest.Trip{{Name: "c1->lan", From: c1, To: l.out, Dst: "10.9.0.1"}})

	l.FailsWith("second passthru", plugintest.Cmd("ADD", c2, "p2", cfg("10.9.0.12/24")), "failed to create macvlan: invalid argument")
	plugintest.WantLinks(t, h2, "lo")
	if got := plugintest.MustLink(t, l.H, "up0"); got.Promisc {
		t.Error("plugin set the master's promisc flag")
	}

	l.OK(plugintest.Cmd("DEL", c1, "p1", cfg("10.9.0.11/24")))
	l.Add(c2, "p2", cfg("10.9.0.12/24"))
	privtest.RoundTrips(t, []privtest.Trip{{Name: "c2->lan", From: c2, To: l.out, Dst: "10.9.0.1"}})
	plugintest.WantLinks(t, l.H, "lo", "up0")
}

// TestKernelState: the macvlan's parent, mode, MTU, broadcast queue and
// MAC are what the config asked for; it is up with its addresses and
// IPAM's routes, and announces addresses (arp_notify, ndisc_notify).
func TestKernelState(t *testing.T) {
	t.Parallel()
	l := newLAN(t)
	ctr, hc := newCtr(t)
	r := l.Add(ctr, "ks", conf("1.0.0", `,"mode":"vepa","mtu":1400,"bcqueuelen":100,"mac":"02:00:00:00:00:42"`+
		plugintest.Static(`[{"dst":"0.0.0.0/0"},{"dst":"192.168.0.0/16","gw":"10.9.0.254"}]`, "10.9.0.11/24 10.9.0.1", "fd00:9::11/64")))
	eth0 := plugintest.MustLink(t, hc, "eth0")
	up0 := plugintest.MustLink(t, l.H, "up0")
	if eth0.Kind != "macvlan" || eth0.MTU != 1400 || !eth0.Up || eth0.ParentIndex != up0.Index || eth0.MAC.String() != "02:00:00:00:00:42" {
		t.Errorf("eth0 %+v (up0 index %d)", eth0, up0.Index)
	}
	info, err := hc.Macvlan("eth0")
	plugintest.Must(t, err)
	if info.Mode != netlinkx.MacvlanVEPA || info.BcQueueLen != 100 {
		t.Errorf("macvlan %+v", info)
	}
	if got := plugintest.AddrStrings(t, hc, "eth0", 0); strings.Join(got, " ") != "10.9.0.11/24 fd00:9::11/64" {
		t.Errorf("addresses %v", got)
	}
	for dst, gw := range map[string]string{"0.0.0.0/0": "10.9.0.1", "192.168.0.0/16": "10.9.0.254"} {
		rs := plugintest.RoutesTo(t, hc, dst)
		if len(rs) != 1 || rs[0].Gw.String() != gw || rs[0].LinkIndex != eth0.Index {
			t.Errorf("routes to %s: %+v", dst, rs)
		}
	}
	for _, key := range []string{"net/ipv4/conf/eth0/arp_notify", "net/ipv6/conf/eth0/ndisc_notify"} {
		if v := plugintest.Sysctl(t, ctr, key); v != "1" {
			t.Errorf("%s = %s", key, v)
		}
	}
	if len(r.Interfaces) != 1 || r.Interfaces[0].Mac != "02:00:00:00:00:42" || *r.IPs[0].Interface != 0 || *r.IPs[1].Interface != 0 {
		t.Errorf("result %+v", r)
	}
	plugintest.WantLinks(t, l.H, "lo", "up0")
}

// TestLayer2: without IPAM the macvlan is only brought up; the result has
// no addresses.
func TestLayer2(t *testing.T) {
	t.Parallel()
	l := newLAN(t)
	ctr, hc := newCtr(t)
	r := l.Add(ctr, "l2", conf("1.0.0", ""))
	if eth0 := plugintest.MustLink(t, hc, "eth0"); !eth0.Up || eth0.Kind != "macvlan" {
		t.Errorf("eth0 %+v", eth0)
	}
	if len(r.IPs) != 0 || len(r.Interfaces) != 1 {
		t.Errorf("result %+v", r)
	}
	if got := plugintest.AddrStrings(t, hc, "eth0", 0); len(got) != 0 {
		t.Errorf("addresses %v", got)
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
		out := l.OK(plugintest.Cmd("ADD", ctr, "c0ffee", conf(v, `,"dns":{"nameservers":["1.1.1.1"]}`+
			`,"ipam":{"type":"static","addresses":[{"address":"10.9.0.11/24","gateway":"10.9.0.1"}],"routes":[{"dst":"0.0.0.0/0"}],"dns":{"nameservers":["9.9.9.9"]}}`)))
		return out, plugintest.Placeholders{"CMAC", plugintest.MustLink(t, hc, "eth0").MAC.String(), "SANDBOX", ctr.Path()}
	})
}

// TestDefaultMaster: without master the macvlan goes on the device of the
// host's default route — or, with linkInContainer, of the container's.
func TestDefaultMaster(t *testing.T) {
	t.Parallel()
	l := newLAN(t)
	c0, h0 := newCtr(t)
	l.FailsWith("no default route", plugintest.Cmd("ADD", c0, "x", confNoMaster("1.0.0", "")), "no default route interface found")
	plugintest.WantLinks(t, h0, "lo")

	up0 := plugintest.MustLink(t, l.H, "up0")
	plugintest.Must(t, l.H.AddAddr("up0", netip.MustParsePrefix("10.9.0.2/24"), netlinkx.AddrOpts{}))
	plugintest.Must(t, l.H.AddRoute(netlinkx.Route{Dst: netip.MustParsePrefix("0.0.0.0/0"), Gw: netip.MustParseAddr("10.9.0.1"), LinkIndex: up0.Index}))
	c1, h1 := newCtr(t)
	l.Add(c1, "c1", confNoMaster("1.0.0", plugintest.Static("", "10.9.0.11/24")))
	if got := plugintest.MustLink(t, h1, "eth0").ParentIndex; got != up0.Index {
		t.Errorf("parent %d, want up0 (%d)", got, up0.Index)
	}
	privtest.RoundTrips(t, []privtest.Trip{{Name: "c1->lan", From: c1, To: l.out, Dst: "10.9.0.1"}})
	// CHECK resolves the master the same way.
	out := l.OK(plugintest.Cmd("ADD", c0, "c0", confNoMaster("1.0.0", plugintest.Static("", "10.9.0.10/24"))))
	l.OK(plugintest.Cmd("CHECK", c0, "c0", plugintest.WithPrev(confNoMaster("1.0.0", plugintest.Static("", "10.9.0.10/24")), out)))

	// linkInContainer: the container's default route, not the host's.
	c2, h2 := newCtr(t)
	out2, _ := newCtr(t)
	privtest.Wire(t, c2, "m0", netip.MustParsePrefix("10.8.0.2/24"), out2, "o0", netip.MustParsePrefix("10.8.0.1/24"))
	m0 := plugintest.MustLink(t, h2, "m0")
	plugintest.Must(t, h2.AddRoute(netlinkx.Route{Dst: netip.MustParsePrefix("0.0.0.0/0"), Gw: netip.MustParseAddr("10.8.0.1"), LinkIndex: m0.Index}))
	l.Add(c2, "c2", confNoMaster("1.0.0", `,"linkInContainer":true`))
	if got := plugintest.MustLink(t, h2, "eth0").ParentIndex; got != m0.Index {
		t.Errorf("linkInContainer parent %d, want m0 (%d)", got, m0.Index)
	}
}

// TestLinkInContainer: the master lives in the container's namespace; the
// macvlan is made there and reaches the master's LAN. The host is left
// alone, and DEL leaves the master.
func TestLinkInContainer(t *testing.T) {
	t.Parallel()
	l := newLAN(t)
	ctr, hc := newCtr(t)
	out2, _ := newCtr(t)
	privtest.Wire(t, ctr, "m0", netip.Prefix{}, out2, "o0", netip.MustParsePrefix("10.8.0.1/24"))
	cfg := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"testnet","type":"macvlan","master":"m0","linkInContainer":true%s}`,
		plugintest.Static("", "10.8.0.11/24"))
	out := l.OK(plugintest.Cmd("ADD", ctr, "lic", cfg))
	if got := plugintest.MustLink(t, hc, "eth0").ParentIndex; got != plugintest.MustLink(t, hc, "m0").Index {
		t.Errorf("parent %d", got)
	}
	privtest.RoundTrips(t, []privtest.Trip{{Name: "ctr->m0 lan", From: ctr, To: out2, Dst: "10.8.0.1"}})
	l.OK(plugintest.Cmd("CHECK", ctr, "lic", plugintest.WithPrev(cfg, out)))
	plugintest.WantLinks(t, l.H, "lo", "up0")
	l.OK(plugintest.Cmd("DEL", ctr, "lic", cfg))
	plugintest.WantLinks(t, hc, "lo", "m0")
	// Master missing in the container (it is on the host): the bare
	// reference message.
	c2, h2 := newCtr(t)
	l.FailsWith("master not in container", plugintest.Cmd("ADD", c2, "x", conf("1.0.0", `,"linkInContainer":true`)), "Link not found")
	plugintest.WantLinks(t, h2, "lo")
}

// TestMAC: the MAC comes from top-level mac, overridden by CNI_ARGS MAC,
// overridden by runtimeConfig.mac; args.cni.mac is not read by macvlan.
func TestMAC(t *testing.T) {
	t.Parallel()
	l := newLAN(t)
	for i, tt := range []struct {
		name, fields, args, want string
	}{
		{"top-level", `,"mac":"02:00:00:00:00:01"`, "", "02:00:00:00:00:01"},
		{"CNI_ARGS over top-level", `,"mac":"02:00:00:00:00:01"`, "IgnoreUnknown=1;MAC=02:00:00:00:00:02;K8S_POD_NAME=p", "02:00:00:00:00:02"},
		{"runtimeConfig over all", `,"mac":"02:00:00:00:00:01","runtimeConfig":{"mac":"02:00:00:00:00:03"}`, "MAC=02:00:00:00:00:02", "02:00:00:00:00:03"},
		{"args.cni.mac ignored", `,"args":{"cni":{"mac":"02:00:00:00:00:04"}}`, "", ""},
	} {
		ctr, hc := newCtr(t)
		c := plugintest.Cmd("ADD", ctr, fmt.Sprint("m", i), conf("1.0.0", tt.fields))
		c.Args = tt.args
		r := l.AddCall(c)
		got := plugintest.MustLink(t, hc, "eth0").MAC.String()
		if r.Interfaces[0].Mac != got || (tt.want != "" && got != tt.want) || (tt.want == "" && got == "02:00:00:00:00:04") {
			t.Errorf("%s: kernel %s, result %s, want %s", tt.name, got, r.Interfaces[0].Mac, tt.want)
		}
	}
}

// TestBadConfig: config and environment errors come with the reference's
// message (code 999) before anything is created or allocated.
func TestBadConfig(t *testing.T) {
	t.Parallel()
	l := newLAN(t)
	dir := plugintest.HostLocalStore(t)
	ipamConf := plugintest.HostLocal(dir, "10.9.0.0/24")
	for i, tt := range []struct {
		name, conf, args, msg string
	}{
		{"mode", conf("1.0.0", `,"mode":"l2"`+ipamConf), "", `unknown macvlan mode: "l2"`},
		{"mac", conf("1.0.0", `,"mac":"nope"`+ipamConf), "", "invalid args nope for MAC addr: address nope: invalid MAC address"},
		{"runtimeConfig mac", conf("1.0.0", `,"runtimeConfig":{"mac":"02:00:00:00:00"}`+ipamConf), "", "invalid args 02:00:00:00:00 for MAC addr: address 02:00:00:00:00: invalid MAC address"},
		{"mtu above master", conf("1.0.0", `,"mtu":9000`+ipamConf), "", "invalid MTU 9000, must be [0, master MTU(1500)]"},
		{"mtu negative", conf("1.0.0", `,"mtu":-1`+ipamConf), "", "invalid MTU -1, must be [0, master MTU(1500)]"},
		{"mtu type", conf("1.0.0", `,"mtu":"1400"`+ipamConf), "", "failed to load netconf: json: cannot unmarshal string into Go struct field NetConf.mtu of type int"},
		{"bcqueuelen", conf("1.0.0", `,"bcqueuelen":-5`+ipamConf), "", "failed to load netconf: json: cannot unmarshal number -5 into Go struct field NetConf.bcqueuelen of type uint32"},
		{"master missing", `{"cniVersion":"1.0.0","name":"testnet","type":"macvlan","master":"nope0"` + ipamConf + `}`, "", "Link not found"},
		{"no default route", confNoMaster("1.0.0", ipamConf), "", "no default route interface found"},
		{"CNI_ARGS unknown", conf("1.0.0", ipamConf), "IP=10.9.0.5", `ARGS: unknown args ["IP=10.9.0.5"]`},
		{"CNI_ARGS pair", conf("1.0.0", ipamConf), "MAC=02:00:00:00:00:01;", `ARGS: invalid pair ""`},
	} {
		ctr, hc := newCtr(t)
		c := plugintest.Cmd("ADD", ctr, fmt.Sprint("bad", i), tt.conf)
		c.Args = tt.args
		e := l.Fail(c)
		if e.Code != 999 || e.Msg != tt.msg {
			t.Errorf("%s: code %d %q\n want 999 %q", tt.name, e.Code, e.Msg, tt.msg)
		}
		plugintest.WantLinks(t, hc, "lo")
	}
	plugintest.WantLinks(t, l.H, "lo", "up0")
	if got := plugintest.Reservations(t, dir); len(got) != 0 {
		t.Errorf("reservations %v", got)
	}
	// A namespace that cannot be opened.
	c := plugintest.Cmd("ADD", nil, "nons", conf("1.0.0", ipamConf))
	c.Netns = "/nonexistent/netns"
	if e := l.Fail(c); !strings.HasPrefix(e.Msg, `failed to open netns "/nonexistent/netns": `) {
		t.Errorf("bad netns: %q", e.Msg)
	}
}

// TestOwnNetns: CNI_NETNS naming the plugin's own namespace is refused
// (code 8) before anything is created or allocated.
func TestOwnNetns(t *testing.T) {
	t.Parallel()
	l := newLAN(t)
	dir := plugintest.HostLocalStore(t)
	e := l.Fail(plugintest.Cmd("ADD", l.NS, "own", conf("1.0.0", plugintest.HostLocal(dir, "10.9.0.0/24"))))
	if e.Code != 8 || e.Msg != "plugin's netns and netns from CNI_NETNS should not be the same" {
		t.Errorf("error %+v", e)
	}
	plugintest.WantLinks(t, l.H, "lo", "up0")
	if got := plugintest.Reservations(t, dir); len(got) != 0 {
		t.Errorf("reservations %v", got)
	}
}

// TestFailedAddLeavesNothing: when a step after the macvlan was created
// fails, the macvlan is deleted and the IPAM reservation released; a
// container interface that already existed is left alone.
func TestFailedAddLeavesNothing(t *testing.T) {
	t.Parallel()
	dir := plugintest.HostLocalStore(t)
	plugintest.FailedAdds(t, dir, func(t *testing.T) *plugintest.Host { return newLAN(t).Host }, []string{"lo", "up0"}, []plugintest.FailedAdd{
		{Name: "ipam no addresses", Conf: conf("1.0.0", plugintest.Static("")), Msg: "IPAM plugin returned missing IP config"},
		{Name: "ipam missing", Conf: conf("1.0.0", `,"ipam":{"type":"no-such-ipam"}`), Msg: `^failed to find plugin "no-such-ipam" in path \[.*\]$`},
		{Name: "unreachable route", Conf: conf("1.0.0", plugintest.UnreachableRoute(dir, "10.9.0.0/24")), Msg: plugintest.UnreachableMsg},
		{Name: "interface name taken", Conf: conf("1.0.0", plugintest.Static("", "10.9.0.11/24")), Msg: plugintest.IfNameTakenMsg, Existing: true},
		// Config mistakes are found before anything is created.
		{Name: "host-local subnet /33", Conf: conf("1.0.0", plugintest.HostLocal(dir, "10.9.0.0/33")),
			Msg: `^ipam\.ranges\[0\]\[0\]\.subnet: invalid CIDR address: 10\.9\.0\.0/33: `},
		{Name: "master name too long", Conf: conf("1.0.0", `,"master":"up0-0123456789abcdef"`+plugintest.Static("", "10.9.0.11/24")),
			Msg: `master: interface name "up0-0123456789abcdef" is 20 bytes long, Linux allows at most 15: choose a shorter name`},
	}, nil)
}

// TestDel: idempotent, tolerant of a vanished namespace or interface and
// of an empty CNI_NETNS; IPAM is released in each case. DEL decodes the
// config only: a mode that ADD would refuse does not stop it.
func TestDel(t *testing.T) {
	t.Parallel()
	l := newLAN(t)
	dir := plugintest.HostLocalStore(t)
	plugintest.DelEverywhere(t, l.Host, dir, conf("1.0.0", plugintest.HostLocal(dir, "10.9.0.0/24")),
		conf("1.0.0", `,"mode":"nope"`+plugintest.HostLocal(dir, "10.9.0.0/24")), "lo", "up0")
	// Layer 2 only: nothing to release.
	ctr, hc := newCtr(t)
	l.Add(ctr, "l2", conf("1.0.0", ""))
	l.OK(plugintest.Cmd("DEL", ctr, "l2", conf("1.0.0", "")))
	plugintest.WantLinks(t, hc, "lo")
}

// TestCheck: success right after ADD, and the reference's messages for
// drift.
func TestCheck(t *testing.T) {
	t.Parallel()
	l := newLAN(t)
	ctr, hc := newCtr(t)
	cfg := conf("1.0.0", plugintest.Static(`[{"dst":"0.0.0.0/0"}]`, "10.9.0.11/24 10.9.0.1"))
	out := l.OK(plugintest.Cmd("ADD", ctr, "chk", cfg))
	check := plugintest.Cmd("CHECK", ctr, "chk", plugintest.WithPrev(cfg, out))
	l.OK(check)

	plugintest.CheckDrift(t, l.Host, ctr, hc, cfg, out, "10.9.0.99/24",
		"interface eth0 Mac 02:00:00:00:00:99 doesn't match container Mac: ", "sandbox in prevResult  doesn't match configured netns: ",
		[4]string{"mode", conf("1.0.0", `,"mode":"private"`+plugintest.Static(`[{"dst":"0.0.0.0/0"}]`, "10.9.0.11/24 10.9.0.1")), out,
			"container macvlan mode bridge does not match expected value: private"},
		[4]string{"route", cfg, plugintest.EditJSON(t, out, func(m map[string]any) { m["routes"] = []any{map[string]any{"dst": "10.77.0.0/16"}} }),
			"Expected Route {Dst:{IP:10.77.0.0 Mask:ffff0000} GW:<nil> MTU:0 AdvMSS:0 Priority:0 Table:<nil> Scope:<nil>} not found in routing table"},
		[4]string{"master", strings.Replace(cfg, `"up0"`, `"gone0"`, 1), out, "Link not found"})
	// Static IPAM insists on a prevResult itself; without IPAM the
	// plugin's own message shows.
	l.FailsWith("no prevResult", plugintest.Cmd("CHECK", ctr, "chk", cfg), "Required prevResult missing")
	l.FailsWith("no prevResult (L2)", plugintest.Cmd("CHECK", ctr, "chk", conf("1.0.0", "")), "required prevResult missing")

	// A macvlan in a mode no config names (source): a number, the
	// reference v1.10.0's for it.
	mac := plugintest.MustLink(t, hc, "eth0").MAC
	plugintest.Must(t, hc.DeleteLink("eth0"))
	plugintest.Must(t, l.H.AddMacvlan(netlinkx.MacvlanSpec{
		ChildSpec: netlinkx.ChildSpec{Name: "eth0", Parent: plugintest.MustLink(t, l.H, "up0").Index, NS: ctr, MAC: mac},
		Mode:      netlinkx.MacvlanSource,
	}))
	l.FailsWith("source mode", check, "unknown macvlan mode: 5")

	// Not a macvlan any more.
	plugintest.CheckReplaced(t, l.Host, hc, check,
		"container Interface name in prevResult: eth0 not found", "error: Container interface eth0 not of type macvlan")
}

// TestGCAndStatus: GC and STATUS go to IPAM when there is one; without,
// they succeed.
func TestGCAndStatus(t *testing.T) {
	t.Parallel()
	l := newLAN(t)
	dir := plugintest.HostLocalStore(t)
	fields := plugintest.HostLocal(dir, "10.9.0.0/24")
	plugintest.GCKeepsValid(t, l.Host, dir, conf("1.1.0", fields), conf("1.1.0", fields), conf("1.1.0", ""), "")
	l.FailsWith("STATUS, IPAM missing", plugintest.Call{Command: "STATUS", Stdin: conf("1.1.0", `,"ipam":{"type":"no-such-ipam"}`)},
		fmt.Sprintf(`failed to find plugin "no-such-ipam" in path [%s]`, plugintest.BinDir(t)))
}
