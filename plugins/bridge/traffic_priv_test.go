package bridge

import (
	"net/netip"
	"testing"

	"github.com/nftcni/nftcni/internal/plugintest"
	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netlinkx"
)

const dualRoutes = `[{"dst":"0.0.0.0/0"},{"dst":"::/0"}]`

// TestTwoContainersReachEachOtherAndGateway: two containers on one bridge
// exchange UDP with each other and with the gateway on the bridge, over
// IPv4 and IPv6.
func TestTwoContainersReachEachOtherAndGateway(t *testing.T) {
	t.Parallel()
	th := newHost(t)
	c1, _ := plugintest.NewCtr(t)
	c2, _ := plugintest.NewCtr(t)
	th.Add(c1, "c1", conf("1.0.0", `,"isGateway":true`+plugintest.Static(dualRoutes, "10.22.0.2/24", "fd00:22::2/64")))
	th.Add(c2, "c2", conf("1.0.0", `,"isGateway":true`+plugintest.Static(dualRoutes, "10.22.0.3/24", "fd00:22::3/64")))

	// The gateways were computed (network + 1) and put on the bridge.
	if got := plugintest.AddrStrings(t, th.H, "br0", 0); len(got) != 2 || got[0] != "10.22.0.1/24" || got[1] != "fd00:22::1/64" {
		t.Fatalf("bridge addresses %v", got)
	}
	privtest.RoundTrips(t, []privtest.Trip{
		{Name: "c1->c2 v4", From: c1, To: c2, Dst: "10.22.0.3"},
		{Name: "c2->c1 v4", From: c2, To: c1, Dst: "10.22.0.2"},
		{Name: "c1->c2 v6", From: c1, To: c2, Dst: "fd00:22::3"},
		{Name: "c2->c1 v6", From: c2, To: c1, Dst: "fd00:22::2"},
		{Name: "c1->gw v4", From: c1, To: th.NS, Dst: "10.22.0.1"},
		{Name: "c2->gw v6", From: c2, To: th.NS, Dst: "fd00:22::1"},
		{Name: "gw->c2 v4", From: th.NS, To: c2, Dst: "10.22.0.3"},
		{Name: "gw->c1 v6", From: th.NS, To: c1, Dst: "fd00:22::2"},
	})
}

// TestPortIsolationTraffic proves the isolated flag with packets: two
// isolated ports cannot talk, an isolated and a non-isolated one can.
func TestPortIsolationTraffic(t *testing.T) {
	t.Parallel()
	th := newHost(t)
	iso1, _ := plugintest.NewCtr(t)
	iso2, _ := plugintest.NewCtr(t)
	open, _ := plugintest.NewCtr(t)
	th.Add(iso1, "iso1", conf("1.0.0", `,"portIsolation":true`+plugintest.Static("", "10.30.0.2/24")))
	th.Add(iso2, "iso2", conf("1.0.0", `,"portIsolation":true`+plugintest.Static("", "10.30.0.3/24")))
	th.Add(open, "open", conf("1.0.0", plugintest.Static("", "10.30.0.4/24")))

	if privtest.UDPRoundTrip(t, iso1, iso2, netip.MustParseAddr("10.30.0.3")) {
		t.Error("two isolated ports exchanged packets")
	}
	if !privtest.UDPRoundTrip(t, iso1, open, netip.MustParseAddr("10.30.0.4")) {
		t.Error("isolated -> non-isolated: no round trip")
	}
	if !privtest.UDPRoundTrip(t, open, iso2, netip.MustParseAddr("10.30.0.3")) {
		t.Error("non-isolated -> isolated: no round trip")
	}
}

// TestPortFlags: hairpin and isolation are written on the host veth's
// port, on or off, and the port forwards after ADD.
func TestPortFlags(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name      string
		fields    string
		hairpin   bool
		isolation bool
	}{
		{"defaults", "", false, false},
		{"hairpin", `,"hairpinMode":true`, true, false},
		{"isolation", `,"portIsolation":true`, false, true},
		{"both", `,"hairpinMode":true,"portIsolation":true`, true, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			th := newHost(t)
			c, _ := plugintest.NewCtr(t)
			r := th.Add(c, "c", conf("1.0.0", tt.fields))
			p, err := th.H.BridgePort(r.Interfaces[1].Name)
			plugintest.Must(t, err)
			if p.Hairpin != tt.hairpin || p.Isolated != tt.isolation || p.State != netlinkx.BridgePortForwarding {
				t.Errorf("port %+v, want hairpin %v isolated %v forwarding", p, tt.hairpin, tt.isolation)
			}
		})
	}
}
