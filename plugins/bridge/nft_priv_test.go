package bridge

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/nftcni/nftcni/internal/plugintest"
	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/ownerid"
)

// withInternet wires an "internet" namespace to the host: host up0 has
// 192.0.2.1/24 and 2001:db8:1::1/64, the internet end .2 / ::2. The
// internet namespace has no route to any container network, so only
// masqueraded traffic can be answered.
func withInternet(t *testing.T, th *plugintest.Host) *netns.NS {
	t.Helper()
	inet := privtest.NewNS(t)
	privtest.Wire(t, th.NS, "up0", netip.MustParsePrefix("192.0.2.1/24"), inet, "down0", netip.MustParsePrefix("192.0.2.2/24"))
	h, err := openHandle(inet)
	plugintest.Must(t, err)
	defer h.Close()
	plugintest.Must(t, h.AddAddr("down0", netip.MustParsePrefix("2001:db8:1::2/64"), nodad))
	plugintest.Must(t, th.H.AddAddr("up0", netip.MustParsePrefix("2001:db8:1::1/64"), nodad))
	plugintest.Must(t, h.SetUp("lo"))
	return inet
}

// TestIPMasq proves masquerading with packets: a container with ipMasq
// reaches the internet namespace under the host's address and gets the
// answer; a container without it arrives with its own address and gets
// none. DEL removes the container's nftables elements.
func TestIPMasq(t *testing.T) {
	t.Parallel()
	th := newHost(t)
	inet := withInternet(t, th)
	masqCtr, _ := plugintest.NewCtr(t)
	plainCtr, _ := plugintest.NewCtr(t)
	cfgMasq := conf("1.0.0", `,"isDefaultGateway":true,"ipMasq":true,"ipMasqBackend":"nftables"`+plugintest.Static("", "10.80.0.2/24", "fd00:80::2/64"))
	th.OKOrSkip(plugintest.Cmd("ADD", masqCtr, "masq", cfgMasq))
	th.Add(plainCtr, "plain", conf("1.0.0", `,"isDefaultGateway":true`+plugintest.Static("", "10.80.0.3/24", "fd00:80::3/64")))
	own := ownerid.Owner{Network: "testnet", ContainerID: "masq", IfName: "eth0"}
	if n := plugintest.NFTOwned(t, th.NS, own); n == 0 {
		t.Error("no nftables state owned by the container after ADD")
	}

	for _, tt := range []struct {
		from     *netns.NS
		dst      string
		wantSeen string
		echoed   bool
	}{
		{masqCtr, "192.0.2.2", "192.0.2.1", true},
		{masqCtr, "2001:db8:1::2", "2001:db8:1::1", true},
		{plainCtr, "192.0.2.2", "10.80.0.3", false},
		{plainCtr, "2001:db8:1::2", "fd00:80::3", false},
	} {
		seen, echoed := privtest.UDPExchange(t, tt.from, inet, netip.AddrPort{}, netip.MustParseAddr(tt.dst), time.Second)
		if seen.Addr().String() != tt.wantSeen || echoed != tt.echoed {
			t.Errorf("to %s: seen from %v, echoed %v; want %s, %v", tt.dst, seen, echoed, tt.wantSeen, tt.echoed)
		}
	}
	// Traffic inside the container subnet is not masqueraded.
	seen, echoed := privtest.UDPExchange(t, masqCtr, plainCtr, netip.AddrPort{}, netip.MustParseAddr("10.80.0.3"), time.Second)
	if seen.Addr().String() != "10.80.0.2" || !echoed {
		t.Errorf("inside the subnet: seen from %v, echoed %v", seen, echoed)
	}

	th.OK(plugintest.Cmd("DEL", masqCtr, "masq", cfgMasq))
	if n := plugintest.NFTOwned(t, th.NS, own); n != 0 {
		t.Errorf("%d nftables objects of the container left after DEL", n)
	}
}

// TestIPMasqDelWithoutNetns: the masquerade state goes with DEL even when
// the namespace is already gone (the reference leaves it behind).
func TestIPMasqDelWithoutNetns(t *testing.T) {
	t.Parallel()
	th := newHost(t)
	ctr, destroy := plugintest.DoomedCtr(t)
	cfg := conf("1.0.0", `,"isGateway":true,"ipMasq":true`+plugintest.Static("", "10.81.0.2/24"))
	th.OKOrSkip(plugintest.Cmd("ADD", ctr, "gone", cfg))
	th.DelNetnsGone(ctr, destroy, ownerid.Owner{Network: "testnet", ContainerID: "gone", IfName: "eth0"}, cfg)
}

// TestMacSpoofChk proves the filter with packets: after the container
// changes its MAC, its frames are dropped at the bridge; a container
// without macspoofchk doing the same still gets through.
func TestMacSpoofChk(t *testing.T) {
	t.Parallel()
	th := newHost(t)
	guarded, hg := plugintest.NewCtr(t)
	free, hf := plugintest.NewCtr(t)
	peerA, _ := plugintest.NewCtr(t)
	peerB, _ := plugintest.NewCtr(t)
	cfgGuard := conf("1.0.0", `,"macspoofchk":true`+plugintest.Static("", "10.82.0.2/24"))
	th.OKOrSkip(plugintest.Cmd("ADD", guarded, "guarded", cfgGuard))
	th.Add(free, "free", conf("1.0.0", plugintest.Static("", "10.82.0.3/24")))
	th.Add(peerA, "peerA", conf("1.0.0", plugintest.Static("", "10.82.0.4/24")))
	th.Add(peerB, "peerB", conf("1.0.0", plugintest.Static("", "10.82.0.5/24")))

	if !privtest.UDPRoundTrip(t, guarded, peerA, netip.MustParseAddr("10.82.0.4")) {
		t.Fatal("guarded container with its own MAC: no round trip")
	}
	// New MACs; each talks to a peer that has never seen it, so no stale
	// neighbour entry is involved.
	plugintest.Must(t, hg.SetMAC("eth0", net.HardwareAddr{0x02, 0x66, 0, 0, 0, 1}))
	plugintest.Must(t, hf.SetMAC("eth0", net.HardwareAddr{0x02, 0x66, 0, 0, 0, 2}))
	if privtest.UDPRoundTrip(t, guarded, peerB, netip.MustParseAddr("10.82.0.5")) {
		t.Error("spoofed source MAC got through the bridge")
	}
	if !privtest.UDPRoundTrip(t, free, peerB, netip.MustParseAddr("10.82.0.5")) {
		t.Error("container without macspoofchk and a new MAC: no round trip")
	}

	own := ownerid.Owner{Network: "testnet", ContainerID: "guarded", IfName: "eth0"}
	if plugintest.NFTOwned(t, th.NS, own) == 0 {
		t.Error("no nftables state owned by the guarded container")
	}
	th.OK(plugintest.Cmd("DEL", guarded, "guarded", cfgGuard))
	if n := plugintest.NFTOwned(t, th.NS, own); n != 0 {
		t.Errorf("%d nftables objects left after DEL", n)
	}
}
