package bridge

import (
	"fmt"
	"testing"

	"github.com/nftcni/nftcni/internal/plugintest"
	"github.com/nftcni/nftcni/netlinkx"
)

// TestRepeatedAdd: a repeated ADD of a live attachment (same netns, or the
// container ID reused in another one) fails and leaves the live one its
// address, its host-local reservation and its MAC spoof check and
// masquerade; the address is not handed out again.
func TestRepeatedAdd(t *testing.T) {
	t.Parallel()
	plugintest.RepeatedAdds(t, newHost, func(dir string, _ int) string {
		return conf("1.0.0", `,"isGateway":true,"macspoofchk":true,"ipMasq":true`+plugintest.HostLocal(dir, "10.70.0.0/24"))
	}, plugintest.KeepsNFT)
}

// TestFailedAddRemovesNewBridge: a bridge the failing ADD created, and
// that has no ports when it fails, is removed, whatever failed; a bridge
// that existed before (even one without ports) stays.
func TestFailedAddRemovesNewBridge(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name     string
		fields   string
		netns    string // CNI_NETNS instead of the container's
		existing bool   // the container already has eth0
	}{
		{name: "interface exists", fields: plugintest.Static("", "10.75.0.2/24"), existing: true},
		{name: "bad CNI_NETNS", fields: plugintest.Static("", "10.75.0.2/24"), netns: "/nonexistent/netns"},
		{name: "ipam missing", fields: `,"ipam":{"type":"no-such-ipam"}`},
		{name: "ipam fails", fields: `,"ipam":{"type":"host-local","ranges":[[{"subnet":"10.75.0.0/33"}]]}`},
		{name: "ipam no addresses", fields: plugintest.Static("")},
	} {
		for _, before := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/bridge before %v", tt.name, before), func(t *testing.T) {
				t.Parallel()
				th := newHost(t)
				if before {
					plugintest.Must(t, th.H.AddBridge(netlinkx.BridgeSpec{Name: "br0"}))
				}
				ctr, hc := plugintest.NewCtr(t)
				if tt.existing {
					plugintest.Must(t, hc.AddVeth(netlinkx.VethSpec{Name: "eth0", PeerName: "mine0"}))
				}
				c := plugintest.Cmd("ADD", ctr, "f", conf("1.0.0", tt.fields))
				if tt.netns != "" {
					c.Netns = tt.netns
				}
				e := th.Fail(c)
				t.Logf("ADD: %s", e.Msg)
				if before {
					plugintest.WantLinks(t, th.H, "lo", "br0")
				} else {
					plugintest.WantLinks(t, th.H, "lo")
				}
			})
		}
	}
}
