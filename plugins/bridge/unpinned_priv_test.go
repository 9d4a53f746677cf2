package bridge

import (
	"net"
	"net/netip"
	"testing"

	"github.com/nftcni/nftcni/internal/plugintest"
	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netlinkx"
)

// TestAddOnBridgeThatLostItsPorts is the crash suite's finding
// (reliability/crash): an ADD killed after creating the bridge but before
// pinning its MAC, then DEL, leaves a bridge without ports whose MAC the
// kernel has reset to zero. The next ADD failed with "could not set
// bridge's mac: cannot assign requested address" for every container from
// then on. It must succeed, pin a random locally administered unicast MAC
// of the bridge's own (as the reference does since v1.10.0: not the new
// port's), and keep it when that container goes.
func TestAddOnBridgeThatLostItsPorts(t *testing.T) {
	t.Parallel()
	th := newHost(t)
	// The state the killed ADD and its DEL leave: br0 created, a port
	// attached and removed again, no gateway address, MAC never set.
	plugintest.Must(t, th.H.AddBridge(netlinkx.BridgeSpec{Name: "br0"}))
	plugintest.Must(t, th.H.AddVeth(netlinkx.VethSpec{Name: "tmp0", PeerName: "tmp1"}))
	plugintest.Must(t, th.H.SetMaster("tmp0", "br0"))
	plugintest.Must(t, th.H.DeleteLink("tmp0"))
	if mac := plugintest.MustLink(t, th.H, "br0").MAC; mac.String() != "00:00:00:00:00:00" {
		t.Fatalf("precondition: br0 MAC %s, want the zero MAC of a bridge that lost its ports", mac)
	}

	dir := plugintest.HostLocalStore(t)
	cfg := conf("1.0.0", `,"isGateway":true`+plugintest.HostLocal(dir, "10.52.0.0/24"))
	ctr, _ := plugintest.NewCtr(t)
	th.Add(ctr, "c1", cfg)
	pinned := plugintest.MustLink(t, th.H, "br0").MAC
	if pinned.String() == "00:00:00:00:00:00" {
		t.Fatal("br0 still has the zero MAC after ADD")
	}
	if pinned[0]&0x03 != 0x02 {
		t.Errorf("br0 MAC %s: not a locally administered unicast MAC", pinned)
	}
	if port := plugintest.OnlyVeth(t, th.H); port.MAC.String() == pinned.String() {
		t.Errorf("br0 pinned to its port's MAC %s", pinned)
	}
	th.OK(plugintest.Cmd("DEL", ctr, "c1", cfg))
	if mac := plugintest.MustLink(t, th.H, "br0").MAC; mac.String() != pinned.String() {
		t.Errorf("br0 MAC %s after its only port left, want the pinned %s", mac, pinned)
	}
}

// TestAddPinsBridgeWithGatewayAlready: a bridge that carries the gateway
// address already but whose MAC was never set (an administrator's, or
// another tool's) is pinned by ADD too, as the reference does since
// v1.10.0 (v1.9.1 and nftcni before left its MAC following its ports).
// When a port with a lower MAC joins and the port whose MAC it had leaves,
// the bridge keeps its MAC: the container's CHECK, which compares the
// bridge's MAC with its prevResult, keeps passing, and the container still
// reaches its gateway.
func TestAddPinsBridgeWithGatewayAlready(t *testing.T) {
	t.Parallel()
	th := newHost(t)
	plugintest.Must(t, th.H.AddBridge(netlinkx.BridgeSpec{Name: "br0"}))
	plugintest.Must(t, th.H.AddVeth(netlinkx.VethSpec{Name: "adm0", PeerName: "adm1"}))
	plugintest.Must(t, th.H.SetMAC("adm0", net.HardwareAddr{0x02, 0, 0, 0, 0, 0x50}))
	plugintest.Must(t, th.H.SetMaster("adm0", "br0"))
	plugintest.Must(t, th.H.AddAddr("br0", netip.MustParsePrefix("10.52.0.1/24"), nodad))
	plugintest.Must(t, th.H.SetUp("br0"))
	if mac := plugintest.MustLink(t, th.H, "br0").MAC.String(); mac != "02:00:00:00:00:50" {
		t.Fatalf("precondition: br0 MAC %s, want its port's 02:00:00:00:00:50", mac)
	}

	dir := plugintest.HostLocalStore(t)
	cfg := conf("1.0.0", `,"isGateway":true`+plugintest.HostLocal(dir, "10.52.0.0/24"))
	ctr, _ := plugintest.NewCtr(t)
	out := th.OK(plugintest.Cmd("ADD", ctr, "c1", cfg))

	// Port churn: a lower MAC joins, the port whose MAC the bridge had
	// leaves.
	plugintest.Must(t, th.H.AddVeth(netlinkx.VethSpec{Name: "low0", PeerName: "low1"}))
	plugintest.Must(t, th.H.SetMAC("low0", net.HardwareAddr{0x02, 0, 0, 0, 0, 0x01}))
	plugintest.Must(t, th.H.SetMaster("low0", "br0"))
	plugintest.Must(t, th.H.DeleteLink("adm0"))
	if mac := plugintest.MustLink(t, th.H, "br0").MAC.String(); mac != "02:00:00:00:00:50" {
		t.Errorf("br0 MAC %s after port churn, want the pinned 02:00:00:00:00:50", mac)
	}
	th.OK(plugintest.Cmd("CHECK", ctr, "c1", plugintest.WithPrev(cfg, out)))
	if !privtest.Ping(t, ctr, netip.MustParseAddr("10.52.0.1")) {
		t.Error("the container does not reach its gateway")
	}
}
