package bridge

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/nftcni/nftcni/internal/plugintest"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/netns"
)

// The helpers shared with the ptp tests are in internal/plugintest
// (host.go, conf.go, kernel.go); these are the bridge's own. Container
// namespaces are plugintest.NewCtr's, with the kernel's DAD defaults: the
// plugin sets accept_dad on the container interface itself.

func TestMain(m *testing.M) { plugintest.Main(m) }

// newHost makes a host namespace for the bridge plugin. Duplicate address
// detection is off for links created there, so gateway addresses the
// plugin puts on the bridge are usable at once: the tests do not wait for
// DAD unless that is what they test.
func newHost(t *testing.T) *plugintest.Host { return plugintest.NewHost(t, "bridge") }

// conf is a bridge config on br0 for network "testnet"; fields are more
// JSON members (starting with a comma), e.g. an "ipam" object.
func conf(version, fields string) string {
	return fmt.Sprintf(`{"cniVersion":%q,"name":"testnet","type":"bridge","bridge":"br0"%s}`, version, fields)
}

// callArgs is plugintest.Cmd with CNI_ARGS.
func callArgs(cmd string, ctr *netns.NS, id, stdin, args string) plugintest.Call {
	c := plugintest.Cmd(cmd, ctr, id, stdin)
	c.Args = args
	return c
}

// hasRoute reports whether the main table of h's namespace has a route to
// dst (via gw, if not empty).
func hasRoute(t testing.TB, h *netlinkx.Handle, dst string, gw string) bool {
	t.Helper()
	for _, r := range plugintest.RoutesTo(t, h, dst) {
		if gw == "" || r.Gw == netip.MustParseAddr(gw) {
			return true
		}
	}
	return false
}

// nodad adds an address usable at once.
var nodad = netlinkx.AddrOpts{NoDAD: true}

func openHandle(ns *netns.NS) (*netlinkx.Handle, error) { return netlinkx.Open(ns) }
