package bridge

import (
	"strings"
	"testing"

	"github.com/nftcni/nftcni/internal/plugintest"
	"github.com/nftcni/nftcni/ownerid"
)

// gcConf is a 1.1.0 config with a valid-attachments list (nil: no key).
func gcConf(fields string, valid []string) string {
	c := conf("1.1.0", fields)
	if valid == nil {
		return c
	}
	var items []string
	for _, id := range valid {
		items = append(items, `{"containerID":"`+id+`","ifname":"eth0"}`)
	}
	return c[:len(c)-1] + `,"cni.dev/valid-attachments":[` + strings.Join(items, ",") + `]}`
}

// TestGC: GC is forwarded to IPAM and collects the masquerade and
// spoof-check state of attachments that are no longer valid; without a
// list it collects nothing of ours and says so.
func TestGC(t *testing.T) {
	t.Parallel()
	th := newHost(t)
	dir := plugintest.HostLocalStore(t)
	fields := `,"isGateway":true,"ipMasq":true,"macspoofchk":true` + plugintest.HostLocal(dir, "10.90.0.0/24")
	keep, _ := plugintest.NewCtr(t)
	stale, _ := plugintest.NewCtr(t)
	th.OKOrSkip(plugintest.Cmd("ADD", keep, "keep", conf("1.1.0", fields)))
	th.OK(plugintest.Cmd("ADD", stale, "stale", conf("1.1.0", fields)))
	ownKeep := ownerid.Owner{Network: "testnet", ContainerID: "keep", IfName: "eth0"}
	ownStale := ownerid.Owner{Network: "testnet", ContainerID: "stale", IfName: "eth0"}
	if len(plugintest.Reservations(t, dir)) != 2 || plugintest.NFTOwned(t, th.NS, ownKeep) == 0 || plugintest.NFTOwned(t, th.NS, ownStale) == 0 {
		t.Fatalf("after ADD: reservations %v, owned %d/%d", plugintest.Reservations(t, dir), plugintest.NFTOwned(t, th.NS, ownKeep), plugintest.NFTOwned(t, th.NS, ownStale))
	}

	// No list: nothing of ours is collected.
	o := th.Exec(plugintest.Call{Command: "GC", Stdin: gcConf(fields, nil)})
	if o.Status != 0 || !strings.Contains(o.Stderr, "nothing collected") {
		t.Errorf("GC without list: %d %s / %s", o.Status, o.Stdout, o.Stderr)
	}
	if plugintest.NFTOwned(t, th.NS, ownStale) == 0 {
		t.Error("GC without a list collected nftables state")
	}

	o = th.Exec(plugintest.Call{Command: "GC", Stdin: gcConf(fields, []string{"keep"})})
	if o.Status != 0 || o.Stdout != "" {
		t.Fatalf("GC: %d %q %s", o.Status, o.Stdout, o.Stderr)
	}
	if got := plugintest.Reservations(t, dir); len(got) != 1 {
		t.Errorf("reservations after GC %v", got)
	}
	if plugintest.NFTOwned(t, th.NS, ownStale) != 0 || plugintest.NFTOwned(t, th.NS, ownKeep) == 0 {
		t.Errorf("owned after GC: stale %d keep %d", plugintest.NFTOwned(t, th.NS, ownStale), plugintest.NFTOwned(t, th.NS, ownKeep))
	}
	if got := claimOwners(t, th, "br0"); len(got) != 1 || got[0] != "keep" {
		t.Errorf("address claims after GC: %v", got)
	}
}

// TestGCWithoutState: GC of a config without IPAM or nftables features is
// a silent success; older configs are refused by the dispatcher.
func TestGCWithoutState(t *testing.T) {
	t.Parallel()
	th := newHost(t)
	o := th.Exec(plugintest.Call{Command: "GC", Stdin: gcConf("", []string{})})
	if o.Status != 0 || o.Stdout != "" || o.Stderr != "" {
		t.Errorf("GC: %d %q %q", o.Status, o.Stdout, o.Stderr)
	}
	e := th.Fail(plugintest.Call{Command: "GC", Stdin: conf("1.0.0", "")})
	if e.Code != 1 || e.Msg != "config version does not allow GC" {
		t.Errorf("GC on 1.0.0: %+v", e)
	}
}

// TestStatus: forwarded to IPAM when there is one.
func TestStatus(t *testing.T) {
	t.Parallel()
	th := newHost(t)
	for _, tt := range []struct {
		fields, want string
	}{
		{"", ""},
		{plugintest.Static("", "10.91.0.2/24"), ""},
		{`,"ipam":{"type":"no-such-ipam"}`, `failed to find plugin "no-such-ipam" in path [`},
		{`,"vlan":-2`, "invalid VLAN ID -2 (must be between 0 and 4094)"},
	} {
		o := th.Exec(plugintest.Call{Command: "STATUS", Stdin: conf("1.1.0", tt.fields)})
		if tt.want == "" {
			if o.Status != 0 || o.Stdout != "" {
				t.Errorf("%s: %d %s", tt.fields, o.Status, o.Stdout)
			}
			continue
		}
		e := th.Fail(plugintest.Call{Command: "STATUS", Stdin: conf("1.1.0", tt.fields)})
		if !strings.HasPrefix(e.Msg, tt.want) {
			t.Errorf("%s: %q, want prefix %q", tt.fields, e.Msg, tt.want)
		}
	}
}
