package tap

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/internal/plugintest"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/netns"
)

func TestMain(m *testing.M) { plugintest.Main(m) }

// The tap plugin works only inside the container's namespace; the host
// namespace the plugin runs in (plugintest.NewHost) only matters for IPAM.
func newHost(t *testing.T) *plugintest.Host { return plugintest.NewHost(t, "tap") }

// newCtr makes a container namespace with the kernel's defaults (DAD on):
// the plugin itself decides about DAD on the tap.
func newCtr(t *testing.T) (*netns.NS, *netlinkx.Handle) { return plugintest.NewCtr(t) }

// conf is a tap config for network "testnet"; fields are more JSON
// members (starting with a comma).
func conf(version, fields string) string {
	return fmt.Sprintf(`{"cniVersion":%q,"name":"testnet","type":"tap"%s}`, version, fields)
}

func u32(v uint32) *uint32 { return &v }

// TestTapAsConfigured: owner, group, MTU, MAC and multi-queue end up on
// the device whichever of them are given (the reference ignored mtu and
// mac when owner and group were both set), and the printed result is
// exactly the device.
func TestTapAsConfigured(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, fields string
		args         string
		owner, group *uint32
		mtu          int
		mac          string // "" : any
		multiQueue   bool
	}{
		{name: "defaults", mtu: 1500},
		{name: "owner group mtu mac (reference dropped mtu, mac)", fields: `,"owner":1000,"group":1001,"mtu":1300,"mac":"02:00:00:00:00:bb"`,
			owner: u32(1000), group: u32(1001), mtu: 1300, mac: "02:00:00:00:00:bb"},
		{name: "owner only, multiqueue", fields: `,"owner":0,"multiQueue":true,"mtu":9000`, owner: u32(0), mtu: 9000, multiQueue: true},
		{name: "group only", fields: `,"group":42`, group: u32(42), mtu: 1500},
		{name: "mac from CNI_ARGS", fields: `,"mac":"02:00:00:00:00:01"`, args: "MAC=02:00:00:00:00:02", mtu: 1500, mac: "02:00:00:00:00:02"},
		{name: "mac from runtimeConfig", fields: `,"runtimeConfig":{"mac":"02:00:00:00:00:03"},"selinuxContext":"system_u:system_r:svirt_t:s0"`,
			mtu: 1500, mac: "02:00:00:00:00:03"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			th := newHost(t)
			ctr, hc := newCtr(t)
			c := plugintest.Cmd("ADD", ctr, "c1", conf("1.0.0", tt.fields))
			c.Args = tt.args
			out := th.OK(c)

			l := plugintest.MustLink(t, hc, "eth0")
			ti, err := hc.TunInfo("eth0")
			plugintest.Must(t, err)
			if !ti.Tap || !ti.Persist || ti.PI || ti.MultiQueue != tt.multiQueue || ti.Queues != 0 {
				t.Errorf("tun info %+v", ti)
			}
			if !eqPtr(ti.Owner, tt.owner) || !eqPtr(ti.Group, tt.group) {
				t.Errorf("owner %v group %v, want %v %v", show(ti.Owner), show(ti.Group), show(tt.owner), show(tt.group))
			}
			if l.MTU != tt.mtu || !l.Up || (tt.mac != "" && l.MAC.String() != tt.mac) {
				t.Errorf("link %+v", l)
			}
			want := fmt.Sprintf(`{
    "cniVersion": "1.0.0",
    "interfaces": [
        {
            "mac": %q,
            "name": "eth0",
            "sandbox": %q
        }
    ]
}`, l.MAC.String(), ctr.Path())
			if out != want {
				t.Errorf("result\n%s\nwant\n%s", out, want)
			}
			plugintest.WantLinks(t, hc, "lo", "eth0")
		})
	}
}

func eqPtr(a, b *uint32) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

func show(p *uint32) string {
	if p == nil {
		return "none"
	}
	return fmt.Sprint(*p)
}

// TestResultPerVersion compares the printed layer-3 result with the
// expected text per spec version (testdata/result-*.json; SANDBOX filled
// in). The config's dns is reported, IPAM's is not.
func TestResultPerVersion(t *testing.T) {
	t.Parallel()
	plugintest.ResultPerVersion(t, func(t *testing.T, v string) (string, plugintest.Placeholders) {
		th := newHost(t)
		ctr, _ := newCtr(t)
		ipam := `,"ipam":{"type":"static","addresses":[{"address":"10.1.1.5/24","gateway":"10.1.1.1"}],"routes":[{"dst":"0.0.0.0/0"}],"dns":{"nameservers":["9.9.9.9"]}}`
		out := th.OK(plugintest.Cmd("ADD", ctr, "c0ffee", conf(v, `,"mac":"02:00:00:00:00:bb","dns":{"nameservers":["1.1.1.1"]}`+ipam)))
		return out, plugintest.Placeholders{"SANDBOX", ctr.Path()}
	})
}

// TestPacketsLeaveTheTap: a consumer attached to the tap sees the
// container's traffic: the ARP request for a neighbour comes out of the
// tap with the configured MAC and the IPAM address.
func TestPacketsLeaveTheTap(t *testing.T) {
	t.Parallel()
	for _, mq := range []bool{false, true} {
		t.Run(fmt.Sprint("multiQueue=", mq), func(t *testing.T) {
			t.Parallel()
			th := newHost(t)
			ctr, _ := newCtr(t)
			th.OK(plugintest.Cmd("ADD", ctr, "pk", conf("1.0.0", fmt.Sprintf(`,"multiQueue":%v,"owner":4242,"mac":"02:00:00:00:00:cc"`, mq)+
				plugintest.Static("", "10.2.0.5/24"))))
			fd := attach(t, ctr, "eth0", mq)
			sendUDP(t, ctr, "10.2.0.9:9")
			arp := readARPRequest(t, fd)
			if arp.senderMAC.String() != "02:00:00:00:00:cc" || arp.senderIP != netip.MustParseAddr("10.2.0.5") || arp.targetIP != netip.MustParseAddr("10.2.0.9") {
				t.Errorf("ARP request %+v", arp)
			}
		})
	}
}

// attach opens a queue of the tap in ns, as its consumer would.
func attach(t *testing.T, ns *netns.NS, name string, multiQueue bool) int {
	t.Helper()
	var fd int
	err := ns.Do(func() (err error) {
		fd, err = unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
		return err
	})
	plugintest.Must(t, err)
	t.Cleanup(func() { unix.Close(fd) })
	ifr, err := unix.NewIfreq(name)
	plugintest.Must(t, err)
	flags := uint16(unix.IFF_TAP | unix.IFF_NO_PI)
	if multiQueue {
		flags |= unix.IFF_MULTI_QUEUE
	}
	ifr.SetUint16(flags)
	plugintest.Must(t, unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr))
	return fd
}

// sendUDP sends one datagram from ns.
func sendUDP(t *testing.T, ns *netns.NS, dst string) {
	t.Helper()
	err := ns.Do(func() error {
		c, err := net.Dial("udp", dst)
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write([]byte("nftcni"))
		return err
	})
	plugintest.Must(t, err)
}

type arpPacket struct {
	senderMAC          net.HardwareAddr
	senderIP, targetIP netip.Addr
}

// readARPRequest reads frames from the tap until an ARP request comes
// (other frames, e.g. IPv6 router solicitations, are skipped); it gives up
// after 5 s.
func readARPRequest(t *testing.T, fd int) arpPacket {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	buf := make([]byte, 2048)
	for time.Now().Before(deadline) {
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(pfd, 200)
		if err == unix.EINTR || n == 0 {
			continue
		}
		plugintest.Must(t, err)
		n, err = unix.Read(fd, buf)
		plugintest.Must(t, err)
		f := buf[:n]
		// Ethernet: dst 6, src 6, type 2; ARP for IPv4 over Ethernet: 28.
		if n < 42 || binary.BigEndian.Uint16(f[12:14]) != 0x0806 || binary.BigEndian.Uint16(f[20:22]) != 1 {
			continue
		}
		a := f[14:]
		return arpPacket{
			senderMAC: net.HardwareAddr(append([]byte(nil), a[8:14]...)),
			senderIP:  netip.AddrFrom4([4]byte(a[14:18])),
			targetIP:  netip.AddrFrom4([4]byte(a[24:28])),
		}
	}
	t.Fatal("no ARP request came out of the tap")
	return arpPacket{}
}

// TestIPv6NoDADWait: with an IPv6 gateway the reference waits out its
// 5 s DAD timeout on a tap (no carrier, so DAD never finishes) and leaves
// the address tentative. Here the address is usable when ADD returns and
// the default route is in place.
func TestIPv6NoDADWait(t *testing.T) {
	t.Parallel()
	th := newHost(t)
	ctr, hc := newCtr(t)
	th.OK(plugintest.Cmd("ADD", ctr, "v6", conf("1.0.0", plugintest.Static(`[{"dst":"::/0"}]`, "fd00:3::5/64 fd00:3::1"))))
	addrs, err := hc.Addrs("eth0", unix.AF_INET6)
	plugintest.Must(t, err)
	found := false
	for _, a := range addrs {
		if a.Prefix.String() == "fd00:3::5/64" {
			found = true
			if a.Tentative() {
				t.Errorf("address still tentative: %+v", a)
			}
		}
	}
	if !found {
		t.Errorf("addresses %+v", addrs)
	}
	if rs := plugintest.RoutesTo(t, hc, "::/0"); len(rs) != 1 || rs[0].Gw != netip.MustParseAddr("fd00:3::1") {
		t.Errorf("default routes %+v", rs)
	}
}

// TestBridge: the tap is enslaved to a bridge inside the container's
// namespace.
func TestBridge(t *testing.T) {
	t.Parallel()
	th := newHost(t)
	ctr, hc := newCtr(t)
	plugintest.Must(t, hc.AddBridge(netlinkx.BridgeSpec{Name: "br0"}))
	th.OK(plugintest.Cmd("ADD", ctr, "br", conf("1.0.0", `,"bridge":"br0"`)))
	if l := plugintest.MustLink(t, hc, "eth0"); l.MasterIndex != plugintest.MustLink(t, hc, "br0").Index {
		t.Errorf("tap master %d", l.MasterIndex)
	}
}

// TestFailedAddLeavesNothing: a failing ADD removes the tap and releases
// the address; an interface that already had the name is left alone.
func TestFailedAddLeavesNothing(t *testing.T) {
	t.Parallel()
	dir := plugintest.HostLocalStore(t)
	hl := plugintest.HostLocal(dir, "10.4.0.0/24")
	for _, tt := range []struct {
		name, fields string
		code         uint
		msg          string
		existing     bool // eth0 exists before ADD
	}{
		{name: "no such bridge", fields: `,"bridge":"nobr"` + hl, code: 999, msg: "failed to get bridge nobr: Link not found"},
		{name: "mtu too big", fields: `,"mtu":100000` + hl, code: 999, msg: `failed to set MTU 100000 on tap "eth0": invalid argument`},
		{name: "multicast mac", fields: `,"mac":"01:00:00:00:00:01"` + hl, code: 999,
			msg: `failed to set MAC 01:00:00:00:00:01 on tap "eth0": cannot assign requested address`},
		{name: "IPAM without addresses", fields: plugintest.Static(""), code: 999, msg: "IPAM plugin returned missing IP config"},
		{name: "unreachable route", fields: plugintest.Static(`[{"dst":"192.168.0.0/16","gw":"10.99.0.1"}]`, "10.4.1.5/24"), code: 999,
			msg: "failed to add route '192.168.0.0/16 via 10.99.0.1 dev eth0 metric 0 (Scope: 0, Table: 0)': network is unreachable"},
		{name: "name taken", fields: hl, existing: true, code: 999, msg: `failed to create tap "eth0": device or resource busy`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			th := newHost(t)
			ctr, hc := newCtr(t)
			want := []string{"lo"}
			if tt.existing {
				plugintest.Must(t, hc.AddBridge(netlinkx.BridgeSpec{Name: "eth0"}))
				want = append(want, "eth0")
			}
			e := th.Fail(plugintest.Cmd("ADD", ctr, "f", conf("1.0.0", tt.fields)))
			if e.Code != tt.code || e.Msg != tt.msg {
				t.Errorf("error %d %q\n want %d %q", e.Code, e.Msg, tt.code, tt.msg)
			}
			plugintest.WantLinks(t, hc, want...)
			if got := plugintest.Reservations(t, dir); len(got) != 0 {
				t.Errorf("reservations %v", got)
			}
		})
	}
}

// TestBadConfig: config errors come out with their code and a message
// naming the field, before anything is created.
func TestBadConfig(t *testing.T) {
	t.Parallel()
	th := newHost(t)
	ctr, hc := newCtr(t)
	for _, tt := range []struct {
		name, fields, args string
		code               uint
		msg                string
	}{
		{name: "mac", fields: `,"mac":"02:00"`, code: 999, msg: "invalid args 02:00 for MAC addr: address 02:00: invalid MAC address"},
		{name: "mtu", fields: `,"mtu":-5`, code: 7, msg: "invalid mtu -5: must not be negative"},
		{name: "owner type", fields: `,"owner":"root"`, code: 999,
			msg: "failed to load netconf: json: cannot unmarshal string into Go struct field NetConf.owner of type uint32"},
		{name: "CNI_ARGS", args: "FOO=1", code: 999, msg: `ARGS: unknown args ["FOO=1"]`},
	} {
		c := plugintest.Cmd("ADD", ctr, "bad", conf("1.0.0", tt.fields))
		c.Args = tt.args
		e := th.Fail(c)
		if e.Code != tt.code || e.Msg != tt.msg {
			t.Errorf("%s: error %d %q\n want %d %q", tt.name, e.Code, e.Msg, tt.code, tt.msg)
		}
	}
	plugintest.WantLinks(t, hc, "lo")
}

// TestDel: idempotent, tolerant of a vanished namespace or interface and
// of an empty CNI_NETNS; IPAM is released in each case and nothing is
// left.
func TestDel(t *testing.T) {
	t.Parallel()
	th := newHost(t)
	dir := plugintest.HostLocalStore(t)
	cfg := conf("1.0.0", plugintest.HostLocal(dir, "10.5.0.0/24"))
	for i, how := range []string{"twice", "netns gone", "interface gone", "empty netns"} {
		id := fmt.Sprint("d", i)
		ctr, destroy := plugintest.DoomedCtr(t)
		out := th.OK(plugintest.Cmd("ADD", ctr, id, cfg))
		if len(plugintest.Reservations(t, dir)) != 1 {
			t.Fatalf("%s: reservations %v", how, plugintest.Reservations(t, dir))
		}
		c := plugintest.DelAs(t, how, ctr, destroy, plugintest.Cmd("DEL", ctr, id, plugintest.WithPrev(cfg, out)))
		th.OK(c)
		if how == "twice" {
			th.OK(c)
			h, err := netlinkx.Open(ctr)
			plugintest.Must(t, err)
			plugintest.WantLinks(t, h, "lo")
			h.Close()
		}
		if got := plugintest.Reservations(t, dir); len(got) != 0 {
			t.Errorf("%s: reservations %v", how, got)
		}
		destroy()
	}
	// Layer 2 only: no IPAM to release, DEL still deletes the tap.
	ctr, hc := newCtr(t)
	th.OK(plugintest.Cmd("ADD", ctr, "l2", conf("1.0.0", "")))
	th.OK(plugintest.Cmd("DEL", ctr, "l2", conf("1.0.0", "")))
	th.OK(plugintest.Cmd("DEL", ctr, "l2", conf("1.0.0", "")))
	plugintest.WantLinks(t, hc, "lo")
}

// TestCheck: success right after ADD; drift is reported.
func TestCheck(t *testing.T) {
	t.Parallel()
	th := newHost(t)
	ctr, hc := newCtr(t)
	cfg := conf("1.0.0", plugintest.Static(`[{"dst":"0.0.0.0/0"}]`, "10.6.0.5/24 10.6.0.1"))
	out := th.OK(plugintest.Cmd("ADD", ctr, "chk", cfg))
	check := plugintest.Cmd("CHECK", ctr, "chk", plugintest.WithPrev(cfg, out))
	th.OK(check)

	edit := func(fn func(m map[string]any)) string { return plugintest.EditJSON(t, out, fn) }
	for _, tc := range []struct{ name, prev, want string }{
		{"sandbox", edit(func(m map[string]any) { m["interfaces"].([]any)[0].(map[string]any)["sandbox"] = "/other" }),
			"Sandbox in prevResult  doesn't match configured netns: " + ctr.Path()},
		{"address", edit(func(m map[string]any) { m["ips"].([]any)[0].(map[string]any)["address"] = "10.6.0.9/24" }),
			"Failed to match addr 10.6.0.9/24 on interface eth0"},
		{"route", edit(func(m map[string]any) { m["routes"] = []any{map[string]any{"dst": "10.77.0.0/16"}} }),
			"Expected Route {Dst:{IP:10.77.0.0 Mask:ffff0000} GW:<nil> MTU:0 AdvMSS:0 Priority:0 Table:<nil> Scope:<nil>} not found in routing table"},
	} {
		th.FailsWith(tc.name, plugintest.Cmd("CHECK", ctr, "chk", plugintest.WithPrev(cfg, tc.prev)), tc.want)
	}
	th.FailsWith("no prevResult", plugintest.Cmd("CHECK", ctr, "chk", cfg), "Required prevResult missing")
	// The tap replaced by something else.
	plugintest.Must(t, hc.DeleteLink("eth0"))
	plugintest.Must(t, hc.AddBridge(netlinkx.BridgeSpec{Name: "eth0"}))
	th.FailsWith("not a tap", check, `tap: container interface eth0: not a tun/tap device`)
}

// TestGCAndStatus: both go to IPAM when there is one, and succeed without.
func TestGCAndStatus(t *testing.T) {
	t.Parallel()
	th := newHost(t)
	dir := plugintest.HostLocalStore(t)
	fields := plugintest.HostLocal(dir, "10.8.0.0/24")
	keep, _ := newCtr(t)
	stale, _ := newCtr(t)
	th.OK(plugintest.Cmd("ADD", keep, "keep", conf("1.1.0", fields)))
	th.OK(plugintest.Cmd("ADD", stale, "stale", conf("1.1.0", fields)))
	gc := conf("1.1.0", fields+`,"cni.dev/valid-attachments":[{"containerID":"keep","ifname":"eth0"}]`)
	th.OK(plugintest.Call{Command: "GC", Stdin: gc})
	if got := plugintest.Reservations(t, dir); len(got) != 1 {
		t.Errorf("reservations after GC %v", got)
	}
	th.OK(plugintest.Call{Command: "STATUS", Stdin: conf("1.1.0", fields)})
	th.OK(plugintest.Call{Command: "GC", Stdin: conf("1.1.0", "")})
	th.OK(plugintest.Call{Command: "STATUS", Stdin: conf("1.1.0", "")})
}
