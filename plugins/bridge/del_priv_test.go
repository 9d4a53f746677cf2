package bridge

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nftcni/nftcni/internal/plugintest"
	"github.com/nftcni/nftcni/netlinkx"
)

// hostLocal is an "ipam" member for host-local with its store under dir.
func hostLocal(dir, subnet string) string {
	return fmt.Sprintf(`,"ipam":{"type":"host-local","dataDir":%q,"ranges":[[{"subnet":%q}]]}`, dir, subnet)
}

// reservations lists the addresses host-local holds for network testnet.
func reservations(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(dir, "testnet"))
	if os.IsNotExist(err) {
		return nil
	}
	must(t, err)
	var out []string
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "last_reserved_ip") && e.Name() != "lock" {
			out = append(out, e.Name())
		}
	}
	return out
}

// hostOnlyBridge checks that the host namespace holds nothing but lo and
// the bridge (the bridge is shared and stays).
func hostOnlyBridge(t *testing.T, th *testHost) {
	t.Helper()
	wantLinks(t, th.h, "lo", "br0")
}

// TestDel: DEL removes the pair, is idempotent, tolerates a vanished
// namespace and an empty CNI_NETNS, and needs no prevResult.
func TestDel(t *testing.T) {
	t.Parallel()
	cfg := conf("1.0.0", `,"isGateway":true`+static("", "10.50.0.2/24"))
	t.Run("twice", func(t *testing.T) {
		t.Parallel()
		th := newHost(t)
		ctr, hc := newCtr(t)
		out := th.ok(call("ADD", ctr, "d1", cfg))
		// With prevResult, as a runtime sends it.
		th.ok(call("DEL", ctr, "d1", withPrev(cfg, out)))
		wantLinks(t, hc, "lo")
		hostOnlyBridge(t, th)
		th.ok(call("DEL", ctr, "d1", withPrev(cfg, out)))
		th.ok(call("DEL", ctr, "d1", cfg))
		// The bridge keeps its gateway address (shared).
		if got := addrStrings(t, th.h, "br0", 0); len(got) != 1 || got[0] != "10.50.0.1/24" {
			t.Errorf("br0 addresses %v", got)
		}
	})
	t.Run("netns gone", func(t *testing.T) {
		t.Parallel()
		th := newHost(t)
		ctr, destroy := doomedCtr(t)
		th.ok(call("ADD", ctr, "d2", cfg))
		path := ctr.Path()
		// Destroying the namespace destroys its veth end, and so the
		// host end.
		destroy()
		th.ok(plugintest.Call{Command: "DEL", ContainerID: "d2", Netns: path, IfName: "eth0", Stdin: cfg})
		waitLinks(t, th.h, "lo", "br0")
	})
	t.Run("empty CNI_NETNS", func(t *testing.T) {
		t.Parallel()
		th := newHost(t)
		ctr, _ := newCtr(t)
		th.ok(call("ADD", ctr, "d3", cfg))
		th.ok(call("DEL", nil, "d3", cfg))
		// Nothing can be removed in a namespace nobody named: the pair
		// stays (as in the reference), IPAM and nftables state are gone.
		th.ok(call("DEL", ctr, "d3", cfg))
		hostOnlyBridge(t, th)
	})
	t.Run("interface gone", func(t *testing.T) {
		t.Parallel()
		th := newHost(t)
		ctr, hc := newCtr(t)
		th.ok(call("ADD", ctr, "d4", cfg))
		must(t, hc.DeleteLink("eth0"))
		th.ok(call("DEL", ctr, "d4", cfg))
		hostOnlyBridge(t, th)
	})
	t.Run("not a netns", func(t *testing.T) {
		t.Parallel()
		th := newHost(t)
		file := filepath.Join(t.TempDir(), "plain")
		must(t, os.WriteFile(file, nil, 0o644))
		e := th.fail(plugintest.Call{Command: "DEL", ContainerID: "d5", Netns: file, IfName: "eth0", Stdin: cfg})
		if !strings.HasPrefix(e.Msg, fmt.Sprintf("unknown FS magic on %q: ", file)) {
			t.Errorf("error %+v", e)
		}
	})
	t.Run("bad vlan fails DEL", func(t *testing.T) {
		t.Parallel()
		th := newHost(t)
		ctr, _ := newCtr(t)
		e := th.fail(call("DEL", ctr, "d6", conf("1.0.0", `,"vlan":5000`)))
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
	plugintest.RequirePlugin(t, "host-local")
	dir := t.TempDir()
	cfg := conf("1.0.0", `,"isGateway":true`+hostLocal(dir, "10.51.0.0/24"))
	for i, how := range []string{"normal", "netns gone", "empty netns"} {
		id := fmt.Sprintf("hl%d", i)
		ctr, destroy := doomedCtr(t)
		r := th.add(ctr, id, cfg)
		if got := reservations(t, dir); len(got) != 1 || got[0]+"/24" != r.IPs[0].Address {
			t.Fatalf("%s: reservations %v after ADD of %s", how, got, r.IPs[0].Address)
		}
		path := ctr.Path()
		switch how {
		case "netns gone":
			destroy()
		case "empty netns":
			path = ""
		}
		th.ok(plugintest.Call{Command: "DEL", ContainerID: id, Netns: path, IfName: "eth0", Stdin: cfg})
		if got := reservations(t, dir); len(got) != 0 {
			t.Errorf("%s: reservations %v after DEL", how, got)
		}
	}
}

// waitLinks waits briefly for the kernel to reap links of a destroyed
// namespace, then checks the list.
func waitLinks(t *testing.T, h *netlinkx.Handle, want ...string) {
	t.Helper()
	for range 100 {
		if len(linkNames(t, h)) == len(want) {
			break
		}
		sleepBrief()
	}
	wantLinks(t, h, want...)
}
