package bridge

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nftcni/nftcni/internal/plugintest"
)

// hostOnlyBridge checks that the host namespace holds nothing but lo and
// the bridge (the bridge is shared and stays).
func hostOnlyBridge(t *testing.T, th *plugintest.Host) {
	t.Helper()
	plugintest.WantLinks(t, th.H, "lo", "br0")
}

// TestDel: DEL removes the pair, is idempotent, tolerates a vanished
// namespace and an empty CNI_NETNS, and needs no prevResult.
func TestDel(t *testing.T) {
	t.Parallel()
	cfg := conf("1.0.0", `,"isGateway":true`+plugintest.Static("", "10.50.0.2/24"))
	t.Run("twice", func(t *testing.T) {
		t.Parallel()
		th := newHost(t)
		ctr, hc := plugintest.NewCtr(t)
		out := th.OK(plugintest.Cmd("ADD", ctr, "d1", cfg))
		// With prevResult, as a runtime sends it.
		th.OK(plugintest.Cmd("DEL", ctr, "d1", plugintest.WithPrev(cfg, out)))
		plugintest.WantLinks(t, hc, "lo")
		hostOnlyBridge(t, th)
		th.OK(plugintest.Cmd("DEL", ctr, "d1", plugintest.WithPrev(cfg, out)))
		th.OK(plugintest.Cmd("DEL", ctr, "d1", cfg))
		// The bridge keeps its gateway address (shared).
		if got := plugintest.AddrStrings(t, th.H, "br0", 0); len(got) != 1 || got[0] != "10.50.0.1/24" {
			t.Errorf("br0 addresses %v", got)
		}
	})
	t.Run("netns gone", func(t *testing.T) {
		t.Parallel()
		th := newHost(t)
		ctr, destroy := plugintest.DoomedCtr(t)
		th.OK(plugintest.Cmd("ADD", ctr, "d2", cfg))
		path := ctr.Path()
		// Destroying the namespace destroys its veth end, and so the
		// host end.
		destroy()
		th.OK(plugintest.Call{Command: "DEL", ContainerID: "d2", Netns: path, IfName: "eth0", Stdin: cfg})
		plugintest.WaitLinks(t, th.H, "lo", "br0")
	})
	t.Run("empty CNI_NETNS", func(t *testing.T) {
		t.Parallel()
		th := newHost(t)
		ctr, _ := plugintest.NewCtr(t)
		th.OK(plugintest.Cmd("ADD", ctr, "d3", cfg))
		th.OK(plugintest.Cmd("DEL", nil, "d3", cfg))
		// Nothing can be removed in a namespace nobody named: the pair
		// stays (as in the reference), IPAM and nftables state are gone.
		th.OK(plugintest.Cmd("DEL", ctr, "d3", cfg))
		hostOnlyBridge(t, th)
	})
	t.Run("interface gone", func(t *testing.T) {
		t.Parallel()
		th := newHost(t)
		ctr, hc := plugintest.NewCtr(t)
		th.OK(plugintest.Cmd("ADD", ctr, "d4", cfg))
		plugintest.Must(t, hc.DeleteLink("eth0"))
		th.OK(plugintest.Cmd("DEL", ctr, "d4", cfg))
		hostOnlyBridge(t, th)
	})
	t.Run("not a netns", func(t *testing.T) {
		t.Parallel()
		th := newHost(t)
		file := filepath.Join(t.TempDir(), "plain")
		plugintest.Must(t, os.WriteFile(file, nil, 0o644))
		e := th.Fail(plugintest.Call{Command: "DEL", ContainerID: "d5", Netns: file, IfName: "eth0", Stdin: cfg})
		if !strings.HasPrefix(e.Msg, fmt.Sprintf("unknown FS magic on %q: ", file)) {
			t.Errorf("error %+v", e)
		}
	})
	t.Run("bad vlan fails DEL", func(t *testing.T) {
		t.Parallel()
		th := newHost(t)
		ctr, _ := plugintest.NewCtr(t)
		e := th.Fail(plugintest.Cmd("DEL", ctr, "d6", conf("1.0.0", `,"vlan":5000`)))
		if e.Msg != "invalid VLAN ID 5000 (must be between 0 and 4094)" {
			t.Errorf("error %+v", e)
		}
	})
}

// TestDelReleasesHostLocal: DEL releases the host-local reservation in
// every case: normal, namespace gone, empty CNI_NETNS.
func TestDelReleasesHostLocal(t *testing.T) {
	t.Parallel()
	th := newHost(t)
	dir := plugintest.HostLocalStore(t)
	cfg := conf("1.0.0", `,"isGateway":true`+plugintest.HostLocal(dir, "10.51.0.0/24"))
	for i, how := range []string{"normal", "netns gone", "empty netns"} {
		id := fmt.Sprintf("hl%d", i)
		ctr, destroy := plugintest.DoomedCtr(t)
		r := th.Add(ctr, id, cfg)
		if got := plugintest.Reservations(t, dir); len(got) != 1 || got[0]+"/24" != r.IPs[0].Address {
			t.Fatalf("%s: reservations %v after ADD of %s", how, got, r.IPs[0].Address)
		}
		th.OK(plugintest.DelAs(t, how, ctr, destroy, plugintest.Cmd("DEL", ctr, id, cfg)))
		if got := plugintest.Reservations(t, dir); len(got) != 0 {
			t.Errorf("%s: reservations %v after DEL", how, got)
		}
	}
}
