package bridge

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/nftcni/nftcni/internal/plugintest"
	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/internal/storetest"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/ownerid"
)

// TestFailedAddLeavesNothing: whatever step fails, ADD takes back all it
// did for the container — its veth pair, its IPAM reservation, its
// nftables state — and the bridge it created, which has no ports.
func TestFailedAddLeavesNothing(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		fields string
		msg    string // exact, or a regexp when it starts with ^
	}{
		{"bad vlan", `,"vlan":5000`, "invalid VLAN ID 5000 (must be between 0 and 4094)"},
		{"bad vlanTrunk", `,"vlanTrunk":[{"minID":5,"maxID":1}]`, "minID is greater than maxID in trunk parameter"},
		{"hairpin and promisc", `,"hairpinMode":true,"promiscMode":true`,
			"cannot set hairpin mode and promiscuous mode at the same time"},
		{"ipam and disableContainerInterface", `,"disableContainerInterface":true` + plugintest.Static("", "10.60.0.2/24"),
			"cannot use IPAM when DisableContainerInterface flag is set"},
		{"masq backend", `,"ipMasq":true,"ipMasqBackend":""` + plugintest.Static("", "10.60.0.2/24"), `unknown ipmasq backend ""`},
		{"bad mac", `,"runtimeConfig":{"mac":"nope"}`, "failed to make veth pair: address nope: invalid MAC address"},
		{"ipam missing", `,"ipam":{"type":"no-such-ipam"}`, `^failed to find plugin "no-such-ipam" in path \[.*\]$`},
		{"ipam no addresses", plugintest.Static(""), "IPAM plugin returned missing IP config"},
		{"IPAM fails before the spoof-check", `,"macspoofchk":true,"ipMasq":true` + plugintest.Static(""), "IPAM plugin returned missing IP config"},
		{"spoof-check and masquerade set up, then a route fails", `,"macspoofchk":true,"ipMasq":true` + plugintest.Static(`[{"dst":"192.168.0.0/16","gw":"10.99.0.1"}]`, "10.60.0.2/24"),
			`^failed to add route '192\.168\.0\.0/16 via 10\.99\.0\.1 dev eth0 .*': network is unreachable$`},
		{"unreachable IPAM route", plugintest.Static(`[{"dst":"192.168.0.0/16","gw":"10.99.0.1"}]`, "10.60.0.2/24"),
			`^failed to add route '192\.168\.0\.0/16 via 10\.99\.0\.1 dev eth0 .*': network is unreachable$`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			th := newHost(t)
			ctr, hc := plugintest.NewCtr(t)
			e := th.Fail(plugintest.Cmd("ADD", ctr, "f", conf("1.0.0", tt.fields)))
			matchMsg(t, e.Msg, tt.msg)
			plugintest.WantLinks(t, hc, "lo")
			if n := plugintest.NFTOwned(t, th.NS, ownerid.Owner{Network: "testnet", ContainerID: "f", IfName: "eth0"}); n != 0 {
				t.Errorf("%d nftables objects left", n)
			}
			plugintest.WantLinks(t, th.H, "lo")
		})
	}
}

func matchMsg(t *testing.T, got, want string) {
	t.Helper()
	if strings.HasPrefix(want, "^") {
		if !regexp.MustCompile(want).MatchString(got) {
			t.Errorf("error %q, want match %s", got, want)
		}
	} else if got != want {
		t.Errorf("error %q\n want %q", got, want)
	}
}

// TestFailedAddAfterIPAM: the gateway step fails after IPAM allocated an
// address and the container was fully configured (the bridge already has
// another IPv4 gateway); ADD removes the container's pair and releases the
// address, and the first container is untouched.
func TestFailedAddAfterIPAM(t *testing.T) {
	t.Parallel()
	th := newHost(t)
	first, _ := plugintest.NewCtr(t)
	r1 := th.Add(first, "first", conf("1.0.0", `,"isGateway":true`+plugintest.Static("", "10.61.0.2/24")))

	ipamConf := plugintest.Static("", "10.62.0.5/24")
	dir := t.TempDir()
	useHostLocal := plugintest.HasPlugin(t, "host-local")
	if useHostLocal {
		ipamConf = plugintest.HostLocal(dir, "10.62.0.0/24")
	}
	ctr, hc := plugintest.NewCtr(t)
	e := th.Fail(plugintest.Cmd("ADD", ctr, "second", conf("1.0.0", `,"isGateway":true`+ipamConf)))
	want := `failed to set bridge addr: "br0" already has an IP address different from 10.62.0.1/24`
	if e.Msg != want {
		t.Errorf("error %q\n want %q", e.Msg, want)
	}
	plugintest.WantLinks(t, hc, "lo")
	plugintest.WantLinks(t, th.H, "lo", "br0", r1.Interfaces[1].Name)
	if got := plugintest.AddrStrings(t, th.H, "br0", 0); len(got) != 1 || got[0] != "10.61.0.1/24" {
		t.Errorf("br0 addresses %v", got)
	}
	if useHostLocal {
		if got := plugintest.Reservations(t, dir); len(got) != 0 {
			t.Errorf("host-local still holds %v", got)
		}
	} else {
		t.Log("host-local not in this build: IPAM release not observable with static")
	}

	// forceAddress replaces the conflicting gateway instead.
	ctr3, _ := plugintest.NewCtr(t)
	th.Add(ctr3, "third", conf("1.0.0", `,"isGateway":true,"forceAddress":true`+plugintest.Static("", "10.63.0.5/24")))
	if got := plugintest.AddrStrings(t, th.H, "br0", 0); len(got) != 1 || got[0] != "10.63.0.1/24" {
		t.Errorf("br0 addresses after forceAddress %v", got)
	}
}

// TestAddInterfaceExists: CNI_IFNAME already exists in the container (a
// second network on the same name); ADD fails naming CNI_IFNAME and the
// fix, leaves the existing interface alone and leaves nothing in the host
// (the bridge it made has no ports and is removed; the reference, and this
// plugin before, left a new bridge behind).
func TestAddInterfaceExists(t *testing.T) {
	t.Parallel()
	th := newHost(t)
	ctr, hc := plugintest.NewCtr(t)
	plugintest.Must(t, hc.AddVeth(netlinkx.VethSpec{Name: "eth0", PeerName: "mine0"}))
	before := plugintest.MustLink(t, hc, "eth0")
	e := th.Fail(plugintest.Cmd("ADD", ctr, "x", conf("1.0.0", `,"ipMasq":true,"macspoofchk":true`+plugintest.Static("", "10.64.0.2/24"))))
	want := `CNI_IFNAME "eth0" already exists in the container's network namespace (another network attached under the same name?): give each network of the container its own interface name, e.g. CNI_IFNAME=eth1`
	matchMsg(t, e.Msg, want)
	if after := plugintest.MustLink(t, hc, "eth0"); after.Index != before.Index {
		t.Errorf("eth0 replaced: %+v", after)
	}
	plugintest.WantLinks(t, hc, "lo", "eth0", "mine0")
	plugintest.Untouched(t, th, "lo")
}

// TestDefaultGatewayWithIPAMDefaultRoute: isDefaultGateway plus an IPAM
// default route without a gateway works (the reference fails with "file
// exists") and the result lists the route once.
func TestDefaultGatewayWithIPAMDefaultRoute(t *testing.T) {
	t.Parallel()
	th := newHost(t)
	ctr, hc := plugintest.NewCtr(t)
	r := th.Add(ctr, "dg", conf("1.0.0", `,"isDefaultGateway":true`+plugintest.Static(`[{"dst":"0.0.0.0/0"}]`, "10.65.0.2/24")))
	if len(r.Routes) != 1 || r.Routes[0].Dst != "0.0.0.0/0" {
		t.Errorf("routes %+v", r.Routes)
	}
	if !hasRoute(t, hc, "0.0.0.0/0", "10.65.0.1") {
		t.Error("no default route via the gateway")
	}
}

// TestVlanUnsupportedKernel: on a kernel without VLAN filtering, a VLAN
// config fails at bridge creation with the reference's text and leaves
// nothing.
func TestVlanUnsupportedKernel(t *testing.T) {
	t.Parallel()
	th := newHost(t)
	if err := th.H.AddBridge(netlinkx.BridgeSpec{Name: "probe0", VlanFiltering: true}); err == nil {
		t.Skip("kernel supports VLAN filtering")
	}
	for i, f := range []string{`,"vlan":100`, `,"vlanTrunk":[]`} {
		ctr, hc := plugintest.NewCtr(t)
		e := th.Fail(plugintest.Cmd("ADD", ctr, fmt.Sprint("v", i), conf("1.0.0", f)))
		if e.Msg != `failed to create bridge "br0": could not add "br0": operation not supported` {
			t.Errorf("%s: %q", f, e.Msg)
		}
		plugintest.WantLinks(t, hc, "lo")
	}
	plugintest.WantLinks(t, th.H, "lo")
}

// TestFailedAddDuplicateAddress: IPAM hands out an address the bridge
// already holds; with enabledad, duplicate address detection catches it
// while ADD waits for DAD, and ADD takes everything back.
func TestFailedAddDuplicateAddress(t *testing.T) {
	t.Parallel()
	th := newHost(t)
	first, _ := plugintest.NewCtr(t)
	r1 := th.Add(first, "first", conf("1.0.0", `,"isGateway":true`+plugintest.Static("", "fd00:66::2/64")))
	ctr, hc := plugintest.NewCtr(t)
	e := th.Fail(plugintest.Cmd("ADD", ctr, "dup", conf("1.0.0", `,"enabledad":true`+plugintest.Static("", "fd00:66::1/64 fd00:66::fe"))))
	want := `failed to settle addresses for "eth0": link eth0 has address fd00:66::1 in DADFAILED state`
	if e.Msg != want {
		t.Errorf("error %q\n want %q", e.Msg, want)
	}
	plugintest.WantLinks(t, hc, "lo")
	plugintest.WantLinks(t, th.H, "lo", "br0", r1.Interfaces[1].Name)
}

// TestFailedAddFullStore: host-local's store has one free page left, which
// its reservation takes; writing the last-reserved hint then fails with
// ENOSPC. The failed ADD leaves nothing: no link, no reservation, no owner
// link (it left both after IPAM DEL stopped following a failed IPAM ADD,
// until host-local undid its own claim; ipam/hostlocal tests every level).
func TestFailedAddFullStore(t *testing.T) {
	t.Parallel()
	plugintest.RequirePlugin(t, "host-local")
	th := newHost(t)
	root := privtest.SmallFS(t, 16)
	dir := filepath.Join(root, "data")
	ctr, hc := plugintest.NewCtr(t)
	th.Add(ctr, "before", conf("1.0.0", plugintest.HostLocal(dir, "10.67.0.0/24"))) // store and hints exist
	th.OK(plugintest.Cmd("DEL", ctr, "before", conf("1.0.0", plugintest.HostLocal(dir, "10.67.0.0/24"))))
	storetest.LeaveFree(t, root, 1)
	e := th.Fail(plugintest.Cmd("ADD", ctr, "full", conf("1.0.0", plugintest.HostLocal(dir, "10.67.0.0/24"))))
	matchMsg(t, e.Msg, `^failed to allocate for range 0: .*: no space left on device$`)
	plugintest.WantLinks(t, hc, "lo")
	plugintest.WantLinks(t, th.H, "lo", "br0") // made by the first ADD, kept by its DEL
	if got := plugintest.Reservations(t, dir); len(got) != 0 {
		t.Errorf("host-local still holds %v", got)
	}
	if got := storetest.Files(t, filepath.Join(dir, "testnet")); len(got) != 2 { // lock, last_reserved_ip.0
		t.Errorf("store holds %v", got)
	}
}
