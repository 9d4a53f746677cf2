package bridge

import (
	"testing"

	"github.com/nftcni/nftcni/internal/plugintest"
	"github.com/nftcni/nftcni/netlinkx"
)

// TestAddOnBridgeThatLostItsPorts is the crash suite's finding
// (reliability/crash): an ADD killed after creating the bridge but before
// pinning its MAC, then DEL, leaves a bridge without ports whose MAC the
// kernel has reset to zero. The next ADD failed with "could not set
// bridge's mac: cannot assign requested address" for every container from
// then on. It must succeed, pin a real MAC, and keep it when that
// container goes.
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
	th.OK(plugintest.Cmd("DEL", ctr, "c1", cfg))
	if mac := plugintest.MustLink(t, th.H, "br0").MAC; mac.String() != pinned.String() {
		t.Errorf("br0 MAC %s after its only port left, want the pinned %s", mac, pinned)
	}
}
