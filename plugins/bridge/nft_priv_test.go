package bridge

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/nft"
)

// withInternet wires an "internet" namespace to the host: host up0 has
// 192.0.2.1/24 and 2001:db8:1::1/64, the internet end .2 / ::2. The
// internet namespace has no route to any container network, so only
// masqueraded traffic can be answered.
func withInternet(t *testing.T, th *testHost) *netns.NS {
	t.Helper()
	inet := privtest.NewNS(t)
	privtest.Wire(t, th.ns, "up0", netip.MustParsePrefix("192.0.2.1/24"), inet, "down0", netip.MustParsePrefix("192.0.2.2/24"))
	h, err := openHandle(inet)
	must(t, err)
	defer h.Close()
	must(t, h.AddAddr("down0", netip.MustParsePrefix("2001:db8:1::2/64"), nodad))
	must(t, th.h.AddAddr("up0", netip.MustParsePrefix("2001:db8:1::1/64"), nodad))
	must(t, h.SetUp("lo"))
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
	masqCtr, _ := newCtr(t)
	plainCtr, _ := newCtr(t)
	cfgMasq := conf("1.0.0", `,"isDefaultGateway":true,"ipMasq":true,"ipMasqBackend":"nftables"`+static("", "10.80.0.2/24", "fd00:80::2/64"))
	o := th.exec(call("ADD", masqCtr, "masq", cfgMasq))
	skipIfNotImplemented(t, o)
	if o.Status != 0 {
		t.Fatalf("ADD: %s %s", o.Stdout, o.Stderr)
	}
	th.add(plainCtr, "plain", conf("1.0.0", `,"isDefaultGateway":true`+static("", "10.80.0.3/24", "fd00:80::3/64")))
	own := nft.Owner{Network: "testnet", ContainerID: "masq", IfName: "eth0"}
	if n := nftOwned(t, th.ns, own); n == 0 {
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

	th.ok(call("DEL", masqCtr, "masq", cfgMasq))
	if n := nftOwned(t, th.ns, own); n != 0 {
		t.Errorf("%d nftables objects of the container left after DEL", n)
	}
}

// TestIPMasqDelWithoutNetns: the masquerade state goes with DEL even when
// the namespace is already gone (the reference leaves it behind).
func TestIPMasqDelWithoutNetns(t *testing.T) {
	t.Parallel()
	th := newHost(t)
	ctr, destroy := doomedCtr(t)
	cfg := conf("1.0.0", `,"isGateway":true,"ipMasq":true`+static("", "10.81.0.2/24"))
	o := th.exec(call("ADD", ctr, "gone", cfg))
	skipIfNotImplemented(t, o)
	if o.Status != 0 {
		t.Fatalf("ADD: %s", o.Stdout)
	}
	own := nft.Owner{Network: "testnet", ContainerID: "gone", IfName: "eth0"}
	if nftOwned(t, th.ns, own) == 0 {
		t.Fatal("no nftables state after ADD")
	}
	path := ctr.Path()
	destroy()
	c := call("DEL", nil, "gone", cfg)
	c.Netns = path
	th.ok(c)
	if n := nftOwned(t, th.ns, own); n != 0 {
		t.Errorf("%d nftables objects left", n)
	}
}

// TestMacSpoofChk proves the filter with packets: after the container
// changes its MAC, its frames are dropped at the bridge; a container
// without macspoofchk doing the same still gets through.
func TestMacSpoofChk(t *testing.T) {
	t.Parallel()
	th := newHost(t)
	guarded, hg := newCtr(t)
	free, hf := newCtr(t)
	peerA, _ := newCtr(t)
	peerB, _ := newCtr(t)
	cfgGuard := conf("1.0.0", `,"macspoofchk":true`+static("", "10.82.0.2/24"))
	o := th.exec(call("ADD", guarded, "guarded", cfgGuard))
	skipIfNotImplemented(t, o)
	if o.Status != 0 {
		t.Fatalf("ADD: %s", o.Stdout)
	}
	th.add(free, "free", conf("1.0.0", static("", "10.82.0.3/24")))
	th.add(peerA, "peerA", conf("1.0.0", static("", "10.82.0.4/24")))
	th.add(peerB, "peerB", conf("1.0.0", static("", "10.82.0.5/24")))

	if !privtest.UDPRoundTrip(t, guarded, peerA, netip.MustParseAddr("10.82.0.4")) {
		t.Fatal("guarded container with its own MAC: no round trip")
	}
	// New MACs; each talks to a peer that has never seen it, so no stale
	// neighbour entry is involved.
	must(t, hg.SetMAC("eth0", net.HardwareAddr{0x02, 0x66, 0, 0, 0, 1}))
	must(t, hf.SetMAC("eth0", net.HardwareAddr{0x02, 0x66, 0, 0, 0, 2}))
	if privtest.UDPRoundTrip(t, guarded, peerB, netip.MustParseAddr("10.82.0.5")) {
		t.Error("spoofed source MAC got through the bridge")
	}
	if !privtest.UDPRoundTrip(t, free, peerB, netip.MustParseAddr("10.82.0.5")) {
		t.Error("container without macspoofchk and a new MAC: no round trip")
	}

	own := nft.Owner{Network: "testnet", ContainerID: "guarded", IfName: "eth0"}
	if nftOwned(t, th.ns, own) == 0 {
		t.Error("no nftables state owned by the guarded container")
	}
	th.ok(call("DEL", guarded, "guarded", cfgGuard))
	if n := nftOwned(t, th.ns, own); n != 0 {
		t.Errorf("%d nftables objects left after DEL", n)
	}
}
