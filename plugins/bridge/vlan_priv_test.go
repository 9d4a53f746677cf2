package bridge

import (
	"encoding/json"
	"net"
	"net/netip"
	"slices"
	"testing"

	"github.com/nftcni/nftcni/internal/plugintest"
	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netlinkx"
)

// These need a kernel with bridge VLAN filtering (CONFIG_BRIDGE_VLAN_FILTERING,
// which needs 802.1Q); they skip elsewhere and run in the VM.

func portVlans(t *testing.T, th *plugintest.Host, port string) []netlinkx.BridgeVlan {
	t.Helper()
	v, err := th.H.BridgeVlans(port)
	plugintest.Must(t, err)
	return v
}

func wantVlans(t *testing.T, th *plugintest.Host, port string, want ...netlinkx.BridgeVlan) {
	t.Helper()
	if got := portVlans(t, th, port); !slices.Equal(got, want) {
		t.Errorf("%s VLANs %+v, want %+v", port, got, want)
	}
}

// TestVlanAccessPort: vlan makes the host veth an access port of that
// VLAN (default VLAN removed unless preserveDefaultVlan); containers on
// one VLAN talk, across VLANs they do not.
func TestVlanAccessPort(t *testing.T) {
	privtest.RequireBridgeVlanFiltering(t)
	t.Parallel()
	th := newHost(t)
	a, _ := plugintest.NewCtr(t)
	b, _ := plugintest.NewCtr(t)
	other, _ := plugintest.NewCtr(t)
	ra := th.Add(a, "a", conf("1.0.0", `,"vlan":100`+plugintest.Static("", "10.110.0.2/24")))
	th.Add(b, "b", conf("1.0.0", `,"vlan":100,"preserveDefaultVlan":true`+plugintest.Static("", "10.110.0.3/24")))
	rb := th.Add(other, "o", conf("1.0.0", `,"vlan":200`+plugintest.Static("", "10.110.0.4/24")))

	on, err := th.H.BridgeVlanFiltering("br0")
	plugintest.Must(t, err)
	if !on {
		t.Error("br0 does not filter VLANs")
	}
	wantVlans(t, th, ra.Interfaces[1].Name, netlinkx.BridgeVlan{VID: 100, PVID: true, Untagged: true})
	wantVlans(t, th, rb.Interfaces[1].Name, netlinkx.BridgeVlan{VID: 200, PVID: true, Untagged: true})

	if !privtest.UDPRoundTrip(t, a, b, netip.MustParseAddr("10.110.0.3")) {
		t.Error("same VLAN: no round trip")
	}
	if privtest.UDPRoundTrip(t, a, other, netip.MustParseAddr("10.110.0.4")) {
		t.Error("across VLANs: round trip")
	}
}

// TestVlanPreserveDefault: with preserveDefaultVlan the kernel's default
// VLAN 1 stays (it stops being the PVID when the access VLAN becomes it).
func TestVlanPreserveDefault(t *testing.T) {
	privtest.RequireBridgeVlanFiltering(t)
	t.Parallel()
	th := newHost(t)
	c, _ := plugintest.NewCtr(t)
	r := th.Add(c, "p", conf("1.0.0", `,"vlan":100,"preserveDefaultVlan":true`))
	wantVlans(t, th, r.Interfaces[1].Name,
		netlinkx.BridgeVlan{VID: 1, Untagged: true}, netlinkx.BridgeVlan{VID: 100, PVID: true, Untagged: true})
}

// TestVlanTrunk: trunk VIDs are tagged members, VLAN 1 is the native
// (PVID, untagged) one; a trunk VID equal to vlan overrides the access
// entry (reference behaviour).
func TestVlanTrunk(t *testing.T) {
	privtest.RequireBridgeVlanFiltering(t)
	t.Parallel()
	th := newHost(t)
	c1, _ := plugintest.NewCtr(t)
	r1 := th.Add(c1, "t1", conf("1.0.0", `,"vlanTrunk":[{"minID":10,"maxID":12},{"id":20},{"id":11}]`))
	wantVlans(t, th, r1.Interfaces[1].Name,
		netlinkx.BridgeVlan{VID: 1, PVID: true, Untagged: true},
		netlinkx.BridgeVlan{VID: 10}, netlinkx.BridgeVlan{VID: 11}, netlinkx.BridgeVlan{VID: 12}, netlinkx.BridgeVlan{VID: 20})

	c2, _ := plugintest.NewCtr(t)
	r2 := th.Add(c2, "t2", conf("1.0.0", `,"vlan":100,"vlanTrunk":[{"id":100},{"id":200}]`))
	wantVlans(t, th, r2.Interfaces[1].Name, netlinkx.BridgeVlan{VID: 100}, netlinkx.BridgeVlan{VID: 200})

	// An empty trunk list turns filtering on and configures nothing.
	th2 := newHost(t)
	c3, _ := plugintest.NewCtr(t)
	r3 := th2.Add(c3, "t3", conf("1.0.0", `,"vlanTrunk":[]`))
	if on, err := th2.H.BridgeVlanFiltering("br0"); err != nil || !on {
		t.Errorf("vlanTrunk []: filtering %v %v", on, err)
	}
	wantVlans(t, th2, r3.Interfaces[1].Name, netlinkx.BridgeVlan{VID: 1, PVID: true, Untagged: true})
}

// TestVlanGatewayInterface: with vlan and isGateway the gateway address
// goes on <bridge>.<vlan>, one end of a veth pair whose other end is an
// access port of the VLAN; it is listed as a fourth interface, shared by
// the VLAN's containers, and reachable from them.
func TestVlanGatewayInterface(t *testing.T) {
	privtest.RequireBridgeVlanFiltering(t)
	t.Parallel()
	th := newHost(t)
	c1, _ := plugintest.NewCtr(t)
	c2, _ := plugintest.NewCtr(t)
	cfg := conf("1.0.0", `,"vlan":100,"isDefaultGateway":true`+plugintest.Static("", "10.120.0.2/24"))
	out1 := th.OK(plugintest.Cmd("ADD", c1, "g1", cfg))
	r1 := &plugintest.WireResult{}
	plugintest.Must(t, json.Unmarshal([]byte(out1), r1))
	r2 := th.Add(c2, "g2", conf("1.0.0", `,"vlan":100,"isDefaultGateway":true`+plugintest.Static("", "10.120.0.3/24")))

	for _, r := range []*plugintest.WireResult{r1, r2} {
		if len(r.Interfaces) != 4 || r.Interfaces[3].Name != "br0.100" || r.Interfaces[3].Sandbox != "" {
			t.Fatalf("interfaces %+v", r.Interfaces)
		}
		if *r.IPs[0].Interface != 2 {
			t.Errorf("ip bound to %d", *r.IPs[0].Interface)
		}
	}
	gw := plugintest.MustLink(t, th.H, "br0.100")
	if r1.Interfaces[3].Mac != gw.MAC.String() || !gw.Up {
		t.Errorf("br0.100 %+v, result MAC %s", gw, r1.Interfaces[3].Mac)
	}
	if got := plugintest.AddrStrings(t, th.H, "br0.100", 0); !slices.Equal(got, []string{"10.120.0.1/24"}) {
		t.Errorf("br0.100 addresses %v", got)
	}
	if got := plugintest.AddrStrings(t, th.H, "br0", 0); len(got) != 0 {
		t.Errorf("br0 addresses %v", got)
	}
	// The gateway pair's port: an access port of VLAN 100.
	br := plugintest.MustLink(t, th.H, "br0")
	links, err := th.H.Links()
	plugintest.Must(t, err)
	ports := 0
	for _, l := range links {
		if l.MasterIndex == br.Index {
			ports++
			if l.Index == gw.ParentIndex {
				wantVlans(t, th, l.Name, netlinkx.BridgeVlan{VID: 100, PVID: true, Untagged: true})
			}
		}
	}
	if ports != 3 {
		t.Errorf("%d bridge ports, want 3 (two containers, one gateway pair)", ports)
	}
	if !privtest.UDPRoundTrip(t, c1, th.NS, netip.MustParseAddr("10.120.0.1")) {
		t.Error("container -> VLAN gateway: no round trip")
	}
	if !privtest.UDPRoundTrip(t, c2, c1, netip.MustParseAddr("10.120.0.2")) {
		t.Error("container -> container on the VLAN: no round trip")
	}

	// CHECK looks for the gateway there.
	check := plugintest.Cmd("CHECK", c1, "g1", plugintest.WithPrev(cfg, out1))
	th.OK(check)
	// The bridge's MAC is pinned: a port with a lower MAC than any of its
	// ports joining (the next container's, say) leaves it, and CHECK,
	// which compares it with prevResult's, passes.
	plugintest.Must(t, th.H.AddVeth(netlinkx.VethSpec{Name: "low0", PeerName: "low1", MAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}}))
	plugintest.Must(t, th.H.SetMaster("low0", "br0"))
	th.OK(check)
	plugintest.Must(t, th.H.DelAddr("br0.100", netip.MustParsePrefix("10.120.0.1/24")))
	th.FailsWith("gateway removed", check, "Failed to match gateway addr 10.120.0.1/24 on VLAN interface br0.100")
}
