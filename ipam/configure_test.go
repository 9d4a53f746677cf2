package ipam

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/netns"
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
	if v, _ := netlinkx.Sysctl(ctr, "net/ipv6/conf/eth0/keep_addr_on_down"); v != "1" {
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
	if !errors.Is(err, unix.EEXIST) || err.Error() != `failed to add IP addr {Interface:1 Address:10.1.0.5/24 Gateway:10.1.0.1} to "eth0": file exists` {
		t.Errorf("second apply: %v", err)
	}
}
