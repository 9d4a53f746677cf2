package bridge

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/nftcni/nftcni/internal/plugintest"
	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/ownerid"
)

// sharedConf is a network on bridge brs0 with masquerade and a default
// route, host-local in dir: the copy-paste mistake is two of these with
// different names and the same subnet.
func sharedConf(name, dir, subnet string) string {
	return fmt.Sprintf(`{"cniVersion":"1.1.0","name":%q,"type":"bridge","bridge":"brs0","isGateway":true,"isDefaultGateway":true,"ipMasq":true%s}`,
		name, plugintest.HostLocal(dir, subnet))
}

// TestSharedBridgeOverlap: two networks on one bridge whose host-local
// ranges overlap (a copied conflist). The second network's IPAM hands out
// the address the first network's container holds; its ADD is refused
// naming both networks and leaves nothing, its next ADD gets an address
// free on the bridge, and neither the failed ADD's DEL nor the second
// container's DEL cuts the first container off: its egress (masqueraded
// to an outside namespace, which has no route back to the containers)
// and CHECK keep working.
func TestSharedBridgeOverlap(t *testing.T) {
	t.Parallel()
	plugintest.RequirePlugin(t, "host-local")
	th := newHost(t)
	outside, _ := plugintest.NewCtr(t)
	privtest.Wire(t, th.NS, "up0", netip.MustParsePrefix("192.0.2.1/24"), outside, "eth0", netip.MustParsePrefix("192.0.2.2/24"))
	dir := t.TempDir()
	first := sharedConf("first", dir, "10.68.0.0/24")
	copied := sharedConf("copied", dir, "10.68.0.0/24")
	a1, ha1 := plugintest.NewCtr(t)
	out1 := th.OK(plugintest.Cmd("ADD", a1, "a1", first))
	if !strings.Contains(out1, `"address": "10.68.0.2/24"`) {
		t.Fatalf("first container: %s", out1)
	}
	works := func(when string) {
		t.Helper()
		if !privtest.Ping(t, a1, netip.MustParseAddr("192.0.2.2")) {
			t.Errorf("%s: the first network's container lost its egress", when)
		}
		th.OK(plugintest.Cmd("CHECK", a1, "a1", plugintest.WithPrev(first, out1)))
		if got := plugintest.AddrStrings(t, ha1, "eth0", 2); len(got) != 1 || got[0] != "10.68.0.2/24" {
			t.Errorf("%s: first container's addresses %v", when, got)
		}
	}
	works("before")

	b1, hb1 := plugintest.NewCtr(t)
	e := th.Fail(plugintest.Cmd("ADD", b1, "b1", copied))
	want := `address 10.68.0.2 is in use on bridge "brs0" by network "first" (container a1, interface eth0); network "copied" hands out addresses that overlap on the same bridge: give each network on a bridge a range of its own (` + "`nftcni validate`" + ` names such networks)`
	if e.Msg != want || e.Code != 7 {
		t.Errorf("refused ADD: code %d %q\nwant code 7 %q", e.Code, e.Msg, want)
	}
	plugintest.WantLinks(t, hb1, "lo")
	if got := plugintest.ReservationsOf(t, dir, "copied"); len(got) != 0 {
		t.Errorf("the refused ADD left reservations %v", got)
	}
	th.OK(plugintest.Cmd("DEL", b1, "b1", copied)) // the runtime's DEL after a failed ADD
	works("after the refused ADD and its DEL")

	b2, _ := plugintest.NewCtr(t)
	r2 := th.Add(b2, "b2", copied)
	if r2.IPs[0].Address != "10.68.0.3/24" {
		t.Errorf("second network's container got %s, want the next free address", r2.IPs[0].Address)
	}
	if !privtest.Ping(t, b2, netip.MustParseAddr("192.0.2.2")) {
		t.Error("the second network's container has no egress")
	}
	th.OK(plugintest.Cmd("DEL", b2, "b2", copied))
	works("after the second network's DEL")

	// The first network's next container is not refused for the
	// address the second network released.
	a2, _ := plugintest.NewCtr(t)
	if r := th.Add(a2, "a2", first); r.IPs[0].Address != "10.68.0.3/24" {
		t.Errorf("first network's second container got %s", r.IPs[0].Address)
	}
	if got := claimOwners(t, th, "brs0"); len(got) != 2 || got[0] != "a1" || got[1] != "a2" {
		t.Errorf("address claims: %v", got)
	}
	th.OK(plugintest.Cmd("DEL", a2, "a2", first))
	th.OK(plugintest.Cmd("DEL", a1, "a1", first))
	if got := claimOwners(t, th, "brs0"); len(got) != 0 {
		t.Errorf("address claims after every DEL: %v", got)
	}
}

// claimOwners lists the container IDs of the address claims on bridge in
// th's namespace (claims.go), one per claim, sorted; a claim without its
// owner file, or an owner file without a claim, fails the test.
func claimOwners(t *testing.T, th *plugintest.Host, bridge string) []string {
	t.Helper()
	dir := filepath.Join(privtest.BridgeClaimsDir(th.NS), bridge)
	ents, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var ids []string
	unclaimed := map[string]bool{}
	for _, e := range ents {
		if n := e.Name(); strings.HasPrefix(n, "owner.") {
			unclaimed[n] = true
		}
	}
	for _, e := range ents {
		n := e.Name()
		if _, err := netip.ParseAddr(n); err != nil {
			continue
		}
		c, ok := readClaim(filepath.Join(dir, n))
		if !ok {
			t.Errorf("claim %s unreadable", n)
			continue
		}
		ids = append(ids, c.ContainerID)
		f := ownerFile(ownerid.Owner{Network: c.Network, ContainerID: c.ContainerID, IfName: c.IfName})
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("claim %s without its owner file", n)
		}
		delete(unclaimed, f)
	}
	for f := range unclaimed {
		t.Errorf("owner file %s without a claim", f)
	}
	sort.Strings(ids)
	return ids
}

// TestSharedBridgeLeftoverOfTheSameNetwork: a claim of the network's own
// whose veth is gone (a container that died without DEL, or the record of
// an earlier namespace with the same identity: /run outlives namespaces)
// is taken over by the network's next container with that address, so
// that another network handing the address out is refused as for a live
// claim. Kept, it let the other network's ADD through: one address, two
// containers.
func TestSharedBridgeLeftoverOfTheSameNetwork(t *testing.T) {
	t.Parallel()
	plugintest.RequirePlugin(t, "host-local")
	th := newHost(t)
	dir := filepath.Join(privtest.BridgeClaimsDir(th.NS), "brs0")
	plugintest.Must(t, os.MkdirAll(dir, 0o700))
	t.Cleanup(func() { os.RemoveAll(dir) })
	plugintest.Must(t, os.WriteFile(filepath.Join(dir, "10.68.0.2"),
		[]byte(`{"network":"first","containerId":"dead","ifName":"eth0","hostVeth":"vethdead","hostIndex":999}`), 0o600))
	store := t.TempDir()
	a1, _ := plugintest.NewCtr(t)
	th.OK(plugintest.Cmd("ADD", a1, "a1", sharedConf("first", store, "10.68.0.0/24")))
	if got := claimOwners(t, th, "brs0"); len(got) != 1 || got[0] != "a1" {
		t.Errorf("claims after the first network's ADD: %v, want a1's", got)
	}
	b1, _ := plugintest.NewCtr(t)
	if e := th.Fail(plugintest.Cmd("ADD", b1, "b1", sharedConf("copied", store, "10.68.0.0/24"))); e.Code != 7 {
		t.Errorf("second network's ADD of the same address: code %d %q", e.Code, e.Msg)
	}
}

// TestClaimsDirIsPrivtests: the directory the tests read claims from, and
// remove with their namespace (privtest.BridgeClaimsDir), is the plugin's.
func TestClaimsDirIsPrivtests(t *testing.T) {
	ns := privtest.NewNS(t)
	var got string
	if err := ns.Do(func() (err error) {
		got, err = claimsDir("br0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(privtest.BridgeClaimsDir(ns), "br0"); got != want {
		t.Errorf("claimsDir in the test's namespace = %s, privtest says %s", got, want)
	}
}
