package vrf

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/internal/plugintest"
	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/sysctl"
)

// The VRF tests need a kernel with the vrf driver; on the CI host it is
// missing and they skip (privtest.RequireLinkKind), in the VM they run.

func TestMain(m *testing.M) { plugintest.Main(m) }

// newHost makes the namespace the plugin runs in (it only works inside the
// container's) after checking the kernel has VRFs.
func newHost(t *testing.T) *plugintest.Host {
	t.Helper()
	privtest.RequireLinkKind(t, "vrf")
	return plugintest.NewHost(t, "vrf")
}

// prev is a minimal prevResult for interface ifName.
func prev(ifName string) string {
	return fmt.Sprintf(`{"cniVersion":"1.0.0","interfaces":[{"name":%q}],"ips":[{"address":"10.1.0.5/24","interface":0}]}`, ifName)
}

// conf is a vrf config with a prevResult for ifName; fields are more
// members (starting with a comma).
func conf(ifName, fields string) string {
	return plugintest.WithPrev(fmt.Sprintf(`{"cniVersion":"1.0.0","name":"testnet","type":"vrf"%s}`, fields), prev(ifName))
}

// call is an invocation for ifName in ctr.
func call(cmd string, ctr *netns.NS, ifName, stdin string) plugintest.Call {
	c := plugintest.Cmd(cmd, ctr, "vrf1", stdin)
	c.IfName = ifName
	return c
}

// echoServer answers every datagram on addr in ns with name + payload.
func echoServer(t *testing.T, ns *netns.NS, addr, name string) {
	t.Helper()
	var pc net.PacketConn
	plugintest.Must(t, ns.Do(func() (err error) {
		pc, err = net.ListenPacket("udp", addr)
		return err
	}))
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 64)
		for {
			n, peer, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			pc.WriteTo(append([]byte(name+":"), buf[:n]...), peer)
		}
	}()
}

// askVia sends a datagram from ns to dst through the VRF device dev
// (SO_BINDTODEVICE, as applications in a VRF do) and returns who answered
// ("" for nobody within 1.5 s, three tries).
func askVia(t *testing.T, ns *netns.NS, dev, dst string) string {
	t.Helper()
	var c net.Conn
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) { serr = unix.BindToDevice(int(fd), dev) })
		if err != nil {
			return err
		}
		return serr
	}}
	plugintest.Must(t, ns.Do(func() (err error) {
		c, err = d.Dial("udp", dst)
		return err
	}))
	defer c.Close()
	buf := make([]byte, 64)
	for range 3 {
		if _, err := c.Write([]byte("hi")); err != nil {
			time.Sleep(500 * time.Millisecond)
			continue
		}
		c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		if n, err := c.Read(buf); err == nil {
			who, _, _ := strings.Cut(string(buf[:n]), ":")
			return who
		}
	}
	return ""
}

// TestIsolation: two VRFs in one container, each with an interface of the
// same address into a different network, and the same route via the same
// gateway address in each. Traffic sent through one VRF reaches only its
// network. The interfaces' routes moved from the main table into the
// VRF tables; a lost IPv6 address is re-added.
func TestIsolation(t *testing.T) {
	t.Parallel()
	th := newHost(t)
	ctr, hc := plugintest.NewCtr(t, plugintest.NoDAD)
	p := netip.MustParsePrefix
	nets := map[string]*netns.NS{}
	for _, n := range []struct{ name, ifName, vrf string }{{"A", "eth0", "red"}, {"B", "eth1", "blue"}} {
		lan, hl := plugintest.NewCtr(t, plugintest.NoDAD)
		nets[n.name] = lan
		privtest.Wire(t, ctr, n.ifName, p("10.1.0.5/24"), lan, "lan0", p("10.1.0.1/24"))
		plugintest.Must(t, hl.AddAddr("lo", p("198.51.100.7/32"), netlinkx.AddrOpts{}))
		echoServer(t, lan, "198.51.100.7:7", n.name)
		echoServer(t, lan, "10.1.0.1:7", n.name)
		// Addresses go when the interface is cycled unless kept.
		plugintest.Must(t, sysctl.Set(ctr, "net/ipv6/conf/"+n.ifName+"/keep_addr_on_down", "0"))
		plugintest.Must(t, hc.AddAddr(n.ifName, p("fd00:1::5/64"), netlinkx.AddrOpts{NoDAD: true}))
		idx := plugintest.MustLink(t, hc, n.ifName).Index
		plugintest.Must(t, hc.AddRoute(netlinkx.Route{Dst: p("198.51.100.0/24"), Gw: netip.MustParseAddr("10.1.0.1"), LinkIndex: idx}))

		cfg := conf(n.ifName, fmt.Sprintf(`,"vrfname":%q`, n.vrf))
		out := th.OK(call("ADD", ctr, n.ifName, cfg))
		want := fmt.Sprintf(`{
    "cniVersion": "1.0.0",
    "interfaces": [
        {
            "name": %q
        }
    ],
    "ips": [
        {
            "address": "10.1.0.5/24",
            "interface": 0
        }
    ]
}`, n.ifName)
		if out != want {
			t.Errorf("%s: result\n%s\nwant\n%s", n.vrf, out, want)
		}
		th.OK(call("CHECK", ctr, n.ifName, cfg))
	}

	red, err := hc.VRFByName("red")
	plugintest.Must(t, err)
	blue, err := hc.VRFByName("blue")
	plugintest.Must(t, err)
	if red.Table != 1 || blue.Table != 2 || !red.Up || !blue.Up {
		t.Errorf("red %+v blue %+v", red, blue)
	}
	for _, tt := range []struct {
		ifName string
		vrf    netlinkx.VRF
	}{{"eth0", red}, {"eth1", blue}} {
		l := plugintest.MustLink(t, hc, tt.ifName)
		if l.MasterIndex != tt.vrf.Index {
			t.Errorf("%s master %d, want %s", tt.ifName, l.MasterIndex, tt.vrf.Name)
		}
		rs, err := hc.Routes(unix.AF_INET, int(tt.vrf.Table))
		plugintest.Must(t, err)
		if !slices.ContainsFunc(rs, func(r netlinkx.Route) bool {
			return r.Dst == p("198.51.100.0/24") && r.Gw == netip.MustParseAddr("10.1.0.1") && r.LinkIndex == l.Index
		}) {
			t.Errorf("route not moved into table %d: %+v", tt.vrf.Table, rs)
		}
		if got := plugintest.AddrStrings(t, hc, tt.ifName, unix.AF_INET6); !slices.Equal(got, []string{"fd00:1::5/64"}) {
			t.Errorf("%s IPv6 addresses %v", tt.ifName, got)
		}
	}
	if rs := plugintest.RoutesTo(t, hc, "198.51.100.0/24"); len(rs) != 0 {
		t.Errorf("routes left in main: %+v", rs)
	}

	for _, tt := range []struct{ dev, dst, want string }{
		{"red", "198.51.100.7:7", "A"},
		{"blue", "198.51.100.7:7", "B"},
		{"red", "10.1.0.1:7", "A"},
		{"blue", "10.1.0.1:7", "B"},
	} {
		if got := askVia(t, ctr, tt.dev, tt.dst); got != tt.want {
			t.Errorf("via %s to %s: answered by %q, want %q", tt.dev, tt.dst, got, tt.want)
		}
	}

	for _, n := range []struct{ ifName, vrf string }{{"eth0", "red"}, {"eth1", "blue"}} {
		th.OK(call("DEL", ctr, n.ifName, conf(n.ifName, fmt.Sprintf(`,"vrfname":%q`, n.vrf))))
	}
	plugintest.WantLinks(t, hc, "lo", "eth0", "eth1")
}

// TestTableChoice: a configured table is used; otherwise the lowest id
// no other VRF has, skipping 253–255 (the reference could hand them out);
// a reused VRF keeps its table.
func TestTableChoice(t *testing.T) {
	t.Parallel()
	th := newHost(t)
	ctr, hc := plugintest.NewCtr(t)
	for i := uint32(1); i <= 252; i++ {
		plugintest.Must(t, hc.AddVRF(fmt.Sprintf("v%d", i), i))
	}
	for _, tt := range []struct{ ifName, fields string }{
		{"eth0", `,"vrfname":"auto"`},
		{"eth1", `,"vrfname":"fixed","table":5000`},
		{"eth2", `,"vrfname":"auto"`},
	} {
		plugintest.Must(t, hc.AddBridge(netlinkx.BridgeSpec{Name: tt.ifName}))
		th.OK(call("ADD", ctr, tt.ifName, conf(tt.ifName, tt.fields)))
	}
	for name, want := range map[string]uint32{"auto": 256, "fixed": 5000} {
		v, err := hc.VRFByName(name)
		plugintest.Must(t, err)
		if v.Table != want {
			t.Errorf("%s: table %d, want %d", name, v.Table, want)
		}
	}
}

// TestFailedAddLeavesNothing: a VRF made by a failing ADD is removed
// again, and the interface is as it was.
func TestFailedAddLeavesNothing(t *testing.T) {
	t.Parallel()
	th := newHost(t)
	ctr, hc := plugintest.NewCtr(t)
	plugintest.Must(t, hc.AddBridge(netlinkx.BridgeSpec{Name: "br0"}))
	plugintest.Must(t, hc.AddVeth(netlinkx.VethSpec{Name: "eth0", PeerName: "peer0"}))
	plugintest.Must(t, hc.SetMaster("eth0", "br0"))
	plugintest.Must(t, hc.AddBridge(netlinkx.BridgeSpec{Name: "notvrf"}))
	for _, tt := range []struct{ name, ifName, fields, msg string }{
		{"already enslaved", "eth0", `,"vrfname":"red"`, "cmdAdd failed: interface eth0 has already a master set: br0"},
		{"no such interface", "eth9", `,"vrfname":"red"`, "cmdAdd failed: could not get link by name eth9: Link not found"},
		{"not a VRF", "peer0", `,"vrfname":"notvrf"`, "cmdAdd failed: Netlink notvrf is not a VRF"},
	} {
		th.FailsWith(tt.name, call("ADD", ctr, tt.ifName, conf(tt.ifName, tt.fields)), tt.msg)
	}
	plugintest.WantLinks(t, hc, "lo", "br0", "eth0", "peer0", "notvrf")
	if l := plugintest.MustLink(t, hc, "eth0"); l.MasterIndex != plugintest.MustLink(t, hc, "br0").Index {
		t.Errorf("eth0 master changed: %+v", l)
	}
	// An existing VRF with another table than configured.
	plugintest.Must(t, hc.AddVRF("blue", 10))
	th.FailsWith("other table", call("ADD", ctr, "peer0", conf("peer0", `,"vrfname":"blue","table":11`)),
		"cmdAdd failed: VRF blue already exist with different routing table 10")
	th.FailsWith("no prevResult", call("ADD", ctr, "peer0", `{"cniVersion":"1.0.0","name":"testnet","type":"vrf","vrfname":"blue"}`),
		"missing prevResult from earlier plugin")
	th.FailsWith("no vrfname", call("ADD", ctr, "peer0", conf("peer0", "")), "configuration is expected to have a valid vrf name")
}

// TestDel: the VRF goes with its last interface and stays while others
// are in it; DEL can be repeated, also when the interface is gone and the
// VRF lives on (the reference failed), and succeeds for a vanished
// namespace or an empty CNI_NETNS.
func TestDel(t *testing.T) {
	t.Parallel()
	th := newHost(t)
	ctr, hc := plugintest.NewCtr(t)
	for _, n := range []string{"eth0", "eth1"} {
		plugintest.Must(t, hc.AddBridge(netlinkx.BridgeSpec{Name: n}))
		th.OK(call("ADD", ctr, n, conf(n, `,"vrfname":"red"`)))
	}
	plugintest.Must(t, hc.DeleteLink("eth0"))
	th.OK(call("DEL", ctr, "eth0", conf("eth0", `,"vrfname":"red"`)))
	th.OK(call("DEL", ctr, "eth0", conf("eth0", `,"vrfname":"red"`)))
	plugintest.WantLinks(t, hc, "lo", "red", "eth1")
	th.OK(call("DEL", ctr, "eth1", conf("eth1", `,"vrfname":"red"`)))
	th.OK(call("DEL", ctr, "eth1", conf("eth1", `,"vrfname":"red"`)))
	plugintest.WantLinks(t, hc, "lo", "eth1")
	if l := plugintest.MustLink(t, hc, "eth1"); l.MasterIndex != 0 {
		t.Errorf("eth1 still enslaved: %+v", l)
	}

	doomed, destroy := plugintest.DoomedCtr(t)
	hd, err := netlinkx.Open(doomed)
	plugintest.Must(t, err)
	plugintest.Must(t, hd.AddBridge(netlinkx.BridgeSpec{Name: "eth0"}))
	hd.Close()
	th.OK(call("ADD", doomed, "eth0", conf("eth0", `,"vrfname":"red"`)))
	path := doomed.Path()
	destroy()
	c := call("DEL", nil, "eth0", conf("eth0", `,"vrfname":"red"`))
	c.Netns = path
	th.OK(c)
	c.Netns = ""
	th.OK(c)
}

// TestCheck: the interface must be in the VRF, and the VRF's table the
// configured one.
func TestCheck(t *testing.T) {
	t.Parallel()
	th := newHost(t)
	ctr, hc := plugintest.NewCtr(t)
	plugintest.Must(t, hc.AddBridge(netlinkx.BridgeSpec{Name: "eth0"}))
	cfg := conf("eth0", `,"vrfname":"red","table":77`)
	th.OK(call("ADD", ctr, "eth0", cfg))
	th.OK(call("CHECK", ctr, "eth0", cfg))
	th.FailsWith("table", call("CHECK", ctr, "eth0", conf("eth0", `,"vrfname":"red","table":78`)), "VRF red has routing table 77, not 78")
	th.FailsWith("no VRF", call("CHECK", ctr, "eth0", conf("eth0", `,"vrfname":"green"`)), "Link not found")
	th.FailsWith("no prevResult", call("CHECK", ctr, "eth0", `{"cniVersion":"1.0.0","name":"testnet","type":"vrf","vrfname":"red"}`),
		"missing prevResult from earlier plugin")
	plugintest.Must(t, hc.NoMaster("eth0"))
	th.FailsWith("not enslaved", call("CHECK", ctr, "eth0", cfg), "failed to find eth0 associated to vrf red")
}
