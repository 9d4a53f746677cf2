package bridge

import (
	"net/netip"
	"testing"

	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/netns"
)

const dualRoutes = `[{"dst":"0.0.0.0/0"},{"dst":"::/0"}]`

// TestTwoContainersReachEachOtherAndGateway: two containers on one bridge
// exchange UDP with each other and with the gateway on the bridge, over
// IPv4 and IPv6.
func TestTwoContainersReachEachOtherAndGateway(t *testing.T) {
	t.Parallel()
	th := newHost(t)
	c1, _ := newCtr(t)
	c2, _ := newCtr(t)
	th.add(c1, "c1", conf("1.0.0", `,"isGateway":true`+static(dualRoutes, "10.22.0.2/24", "fd00:22::2/64")))
	th.add(c2, "c2", conf("1.0.0", `,"isGateway":true`+static(dualRoutes, "10.22.0.3/24", "fd00:22::3/64")))

	// The gateways were computed (network + 1) and put on the bridge.
	if got := addrStrings(t, th.h, "br0", 0); len(got) != 2 || got[0] != "10.22.0.1/24" || got[1] != "fd00:22::1/64" {
		t.Fatalf("bridge addresses %v", got)
	}
	for _, tt := range []struct {
		name     string
		from, to *netns.NS
		dst      string
	}{
		{"c1->c2 v4", c1, c2, "10.22.0.3"},
		{"c2->c1 v4", c2, c1, "10.22.0.2"},
		{"c1->c2 v6", c1, c2, "fd00:22::3"},
		{"c2->c1 v6", c2, c1, "fd00:22::2"},
		{"c1->gw v4", c1, th.ns, "10.22.0.1"},
		{"c2->gw v6", c2, th.ns, "fd00:22::1"},
		{"gw->c2 v4", th.ns, c2, "10.22.0.3"},
		{"gw->c1 v6", th.ns, c1, "fd00:22::2"},
	} {
		if !privtest.UDPRoundTrip(t, tt.from, tt.to, netip.MustParseAddr(tt.dst)) {
			t.Errorf("%s: no UDP round trip", tt.name)
		}
	}
}

// TestPortIsolationTraffic proves the isolated flag with packets: two
// isolated ports cannot talk, an isolated and a non-isolated one can.
func TestPortIsolationTraffic(t *testing.T) {
	t.Parallel()
	th := newHost(t)
	iso1, _ := newCtr(t)
	iso2, _ := newCtr(t)
	open, _ := newCtr(t)
	th.add(iso1, "iso1", conf("1.0.0", `,"portIsolation":true`+static("", "10.30.0.2/24")))
	th.add(iso2, "iso2", conf("1.0.0", `,"portIsolation":true`+static("", "10.30.0.3/24")))
	th.add(open, "open", conf("1.0.0", static("", "10.30.0.4/24")))

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
			c, _ := newCtr(t)
			r := th.add(c, "c", conf("1.0.0", tt.fields))
			p, err := th.h.BridgePort(r.Interfaces[1].Name)
			must(t, err)
			if p.Hairpin != tt.hairpin || p.Isolated != tt.isolation || p.State != netlinkx.BridgePortForwarding {
				t.Errorf("port %+v, want hairpin %v isolated %v forwarding", p, tt.hairpin, tt.isolation)
			}
		})
	}
}
