package addrconf

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/internal/plugintest"
	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/sysctl"
)

// pair makes a host and a container namespace joined by a veth: "host0" on
// the host side (10.1.0.1/24, fd01::1/64, up) and "eth0" in the container,
// unconfigured.
func pair(t *testing.T) (host, ctr *netns.NS, hh, ch *netlinkx.Handle) {
	t.Helper()
	host, ctr = privtest.NewNS(t), privtest.NewNS(t)
	var err error
	if hh, err = netlinkx.Open(host); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hh.Close() })
	if ch, err = netlinkx.Open(ctr); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ch.Close() })
	if err := ch.AddVeth(netlinkx.VethSpec{Name: "eth0", PeerName: "host0", PeerNS: host}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"10.1.0.1/24", "fd01::1/64"} {
		if err := hh.AddAddr("host0", netip.MustParsePrefix(p), netlinkx.AddrOpts{NoDAD: true}); err != nil {
			t.Fatal(err)
		}
	}
	if err := hh.SetUp("host0"); err != nil {
		t.Fatal(err)
	}
	return host, ctr, hh, ch
}

func result() *cni.Result {
	return &cni.Result{
		CNIVersion: cni.CurrentVersion,
		Interfaces: []*cni.Interface{{Name: "host0"}, {Name: "eth0", Sandbox: "/x"}},
		IPs: []*cni.IPConfig{
			{Interface: cni.Int(1), Address: netip.MustParsePrefix("10.1.0.5/24"), Gateway: netip.MustParseAddr("10.1.0.1")},
			{Interface: cni.Int(1), Address: netip.MustParsePrefix("fd01::5/64"), Gateway: netip.MustParseAddr("fd01::1")},
			{Address: netip.MustParsePrefix("192.0.2.9/32")}, // no index: skipped
		},
		Routes: []*cni.Route{
			{Dst: netip.MustParsePrefix("0.0.0.0/0")},
			{Dst: netip.MustParsePrefix("0.0.0.0/0")}, // repeated: applied once
			{Dst: netip.MustParsePrefix("::/0")},
			{Dst: netip.MustParsePrefix("198.51.100.0/24"), GW: netip.MustParseAddr("10.1.0.1"), Priority: 50, Table: cni.Int(100)},
		},
	}
}

func TestConfigureInterface(t *testing.T) {
	host, ctr, _, ch := pair(t)
	if err := ConfigureInterface(ch, "eth0", result()); err != nil {
		t.Fatal(err)
	}
	addrs, err := ch.Addrs("eth0", 0)
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, a := range addrs {
		have[a.Prefix.String()] = true
		if a.Tentative() {
			t.Errorf("%s still tentative after ConfigureInterface (DAD wait)", a.Prefix)
		}
	}
	for _, want := range []string{"10.1.0.5/24", "fd01::5/64"} {
		if !have[want] {
			t.Errorf("address %s missing; have %v", want, have)
		}
	}
	if have["192.0.2.9/32"] {
		t.Error("an IP without an interface index was applied")
	}
	l, _ := ch.LinkByName("eth0")
	if !l.Up {
		t.Error("eth0 not up")
	}
	routes4, _ := ch.Routes(unix.AF_INET, 0)
	routes6, _ := ch.Routes(unix.AF_INET6, 0)
	table100, _ := ch.Routes(unix.AF_INET, 100)
	find := func(rs []netlinkx.Route, dst, gw string) bool {
		for _, r := range rs {
			if r.Dst.String() == dst && r.Gw.String() == gw {
				return true
			}
		}
		return false
	}
	if !find(routes4, "0.0.0.0/0", "10.1.0.1") {
		t.Errorf("IPv4 default route via the first IPv4 gateway missing: %+v", routes4)
	}
	if !find(routes6, "::/0", "fd01::1") {
		t.Errorf("IPv6 default route missing: %+v", routes6)
	}
	if !find(table100, "198.51.100.0/24", "10.1.0.1") || table100[0].Priority != 50 {
		t.Errorf("table 100 route missing or wrong metric: %+v", table100)
	}
	if v, _ := sysctl.Get(ctr, "net/ipv6/conf/eth0/keep_addr_on_down"); v != "1" {
		t.Errorf("keep_addr_on_down = %q", v)
	}
	// Packets flow both ways over both families.
	for _, dst := range []string{"10.1.0.1", "fd01::1"} {
		if !privtest.UDPRoundTrip(t, ctr, host, netip.MustParseAddr(dst)) {
			t.Errorf("container cannot reach host %s", dst)
		}
	}
	if !privtest.UDPRoundTrip(t, host, ctr, netip.MustParseAddr("10.1.0.5")) {
		t.Error("host cannot reach container 10.1.0.5")
	}
}

func TestConfigureInterfaceErrors(t *testing.T) {
	_, _, _, ch := pair(t)
	r := result()
	r.IPs[0].Interface = cni.Int(0) // names host0, not eth0
	err := ConfigureInterface(ch, "eth0", r)
	if err == nil || err.Error() != `failed to add IP addr {Interface:0 Address:10.1.0.5/24 Gateway:10.1.0.1} to "eth0": invalid interface index` {
		t.Errorf("wrong-index error: %v", err)
	}
	if err := ConfigureInterface(ch, "eth0", &cni.Result{}); err == nil || err.Error() != "no interfaces to configure" {
		t.Errorf("empty interfaces: %v", err)
	}
	if err := ConfigureInterface(ch, "nope0", result()); err == nil || !strings.HasPrefix(err.Error(), `failed to lookup "nope0": `) {
		t.Errorf("missing link: %v", err)
	}
	if err := ConfigureInterface(ch, "eth0", result()); err != nil {
		t.Fatal(err)
	}
	// Applying the same addresses again fails like the reference: file exists.
	err = ConfigureInterface(ch, "eth0", result())
	if !errors.Is(err, unix.EEXIST) || privtest.WithoutKernelReasons(err.Error()) != `failed to add IP addr {Interface:1 Address:10.1.0.5/24 Gateway:10.1.0.1} to "eth0": file exists` {
		t.Errorf("second apply: %v", err)
	}
}

// TestRouteMetrics: a result route's mtu and advmss (spec 1.1; the
// reference ignores them) become the route's metrics. Proven in the
// kernel's route dump and with packets: a datagram that must not be
// fragmented and is larger than the route's mtu is refused with "message
// too long" (while the same size passes on a route without mtu), and a TCP
// connection over the route carries the advmss in its SYN: the host's end
// gets a segment size no larger than that.
func TestRouteMetrics(t *testing.T) {
	host, ctr, hh, ch := pair(t)
	for _, p := range []string{"192.0.2.1/32", "fd02::1/128"} {
		if err := hh.AddAddr("host0", netip.MustParsePrefix(p), netlinkx.AddrOpts{NoDAD: true}); err != nil {
			t.Fatal(err)
		}
	}
	r := result()
	r.Routes = append(r.Routes,
		&cni.Route{Dst: netip.MustParsePrefix("192.0.2.0/24"), MTU: 1300, AdvMSS: 1000},
		&cni.Route{Dst: netip.MustParsePrefix("fd02::/64"), MTU: 1280, AdvMSS: 1100})
	if err := ConfigureInterface(ch, "eth0", r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []struct {
		dst         string
		mtu, advmss int
	}{{"192.0.2.0/24", 1300, 1000}, {"fd02::/64", 1280, 1100}, {"0.0.0.0/0", 0, 0}} {
		rts := plugintest.RoutesTo(t, ch, want.dst)
		if len(rts) != 1 {
			t.Fatalf("routes to %s: %+v", want.dst, rts)
		}
		rt := rts[0]
		if rt.MTU != want.mtu || rt.AdvMSS != want.advmss {
			t.Errorf("route %s: mtu %d advmss %d, want %d %d", want.dst, rt.MTU, rt.AdvMSS, want.mtu, want.advmss)
		}
	}
	for _, tt := range []struct {
		dst      string
		size     int // UDP payload
		tooLarge bool
	}{
		{"192.0.2.1", 1300 - 28, false},
		{"192.0.2.1", 1300 - 28 + 1, true},
		{"10.1.0.1", 1300 - 28 + 1, false}, // no mtu on that route: the link's 1500
		{"fd02::1", 1280 - 48, false},
		{"fd02::1", 1280 - 48 + 1, true},
		{"fd01::1", 1280 - 48 + 1, false},
	} {
		err := sendUnfragmented(t, ctr, host, netip.MustParseAddr(tt.dst), tt.size)
		if tt.tooLarge != errors.Is(err, unix.EMSGSIZE) || (!tt.tooLarge && err != nil) {
			t.Errorf("%d bytes to %s without fragmentation: %v (want message too long: %v)", tt.size, tt.dst, err, tt.tooLarge)
		}
	}
	if mss := peerMSS(t, ctr, host, "192.0.2.1"); mss > 1000 {
		t.Errorf("TCP over the advmss 1000 route: the host's segment size is %d", mss)
	}
	if mss := peerMSS(t, ctr, host, "10.1.0.1"); mss <= 1300 {
		t.Errorf("TCP over a route without advmss: segment size %d, want the link's (the contrast proves nothing)", mss)
	}
	if mss := peerMSS(t, ctr, host, "fd02::1"); mss > 1100 {
		t.Errorf("TCP over the advmss 1100 route: the host's segment size is %d", mss)
	}

	// A value that cannot be a metric is refused before anything changes.
	_, _, _, ch2 := pair(t)
	bad := result()
	bad.Routes = append(bad.Routes, &cni.Route{Dst: netip.MustParsePrefix("192.0.2.0/24"), AdvMSS: -1})
	err := ConfigureInterface(ch2, "eth0", bad)
	if err == nil || err.Error() != "invalid route 192.0.2.0/24: advmss -1 is out of range (0 means unset, at most 4294967295)" {
		t.Errorf("advmss -1: %v", err)
	}
	if addrs, _ := ch2.Addrs("eth0", unix.AF_INET); len(addrs) != 0 {
		t.Errorf("addresses applied before the refusal: %v", addrs)
	}
}

// sendUnfragmented sends size bytes of UDP from a socket in from that
// forbids fragmentation (IP_PMTUDISC_DO, IPV6_DONTFRAG) to dst, where a
// socket in to waits for it. It returns the send error, or an error if
// the datagram did not arrive whole.
func sendUnfragmented(t *testing.T, from, to *netns.NS, dst netip.Addr, size int) error {
	t.Helper()
	var srv net.PacketConn
	if err := to.Do(func() (err error) {
		srv, err = net.ListenPacket("udp", netip.AddrPortFrom(dst, 0).String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	var c *net.UDPConn
	if err := from.Do(func() (err error) {
		c, err = net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(srv.LocalAddr().(*net.UDPAddr).AddrPort()))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		if dst.Is4() {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO)
		} else {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_DONTFRAG, 1)
		}
	}); err != nil || serr != nil {
		t.Fatal(err, serr)
	}
	if _, err := c.Write(make([]byte, size)); err != nil {
		return err
	}
	_ = srv.SetReadDeadline(time.Now().Add(3 * time.Second))
	buf := make([]byte, 2000)
	n, _, err := srv.ReadFrom(buf)
	if err != nil {
		return fmt.Errorf("datagram not received: %w", err)
	}
	if n != size {
		return fmt.Errorf("received %d bytes of %d", n, size)
	}
	return nil
}

// peerMSS connects over TCP from a socket in from to dst in to and returns
// the accepted socket's segment size (TCP_MAXSEG): it is bounded by the
// MSS the connecting side announced in its SYN.
func peerMSS(t *testing.T, from, to *netns.NS, dst string) int {
	t.Helper()
	var ln net.Listener
	if err := to.Do(func() (err error) {
		ln, err = net.Listen("tcp", net.JoinHostPort(dst, "0"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var c net.Conn
	if err := from.Do(func() (err error) { c, err = net.DialTimeout("tcp", ln.Addr().String(), 3*time.Second); return err }); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rc, err := s.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var mss int
	var serr error
	if err := rc.Control(func(fd uintptr) { mss, serr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_MAXSEG) }); err != nil || serr != nil {
		t.Fatal(err, serr)
	}
	return mss
}
