package vlan

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"testing"

	"github.com/nftcni/nftcni/internal/plugintest"
	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/netns"
)

// Layer-2 vlan: a config without ipam (the reference accepts one since
// v1.10.0). The link comes up without addresses; the container brings its
// own (DHCP inside the container, a static address, or only IPv6
// link-local).

// wire is a host namespace holding m1 and m2, the two ends of one wire
// (a veth pair): VLAN links on m1 and on m2 share the wire's VLANs. Two
// masters are needed for two containers on one VLAN, as a master carries
// each id once.
func wire(t *testing.T) *plugintest.Host {
	t.Helper()
	privtest.RequireLinkKind(t, "vlan")
	th := plugintest.NewHost(t, "vlan")
	plugintest.Must(t, th.H.AddVeth(netlinkx.VethSpec{Name: "m1", PeerName: "m2"}))
	plugintest.Must(t, th.H.SetUp("m1"))
	plugintest.Must(t, th.H.SetUp("m2"))
	return th
}

// l2conf is a vlan config without ipam on master; fields are more JSON
// members (starting with a comma).
func l2conf(version, master string, id int, fields string) string {
	return fmt.Sprintf(`{"cniVersion":%q,"name":"testnet","type":"vlan","master":%q,"vlanId":%d%s}`, version, master, id, fields)
}

// TestLayer2: the VLAN link is up with no address (but the kernel's
// link-local one), and the result lists the interface only. Containers on
// VLAN 100 — one on each end of the wire — exchange packets with addresses
// they give themselves (as DHCP inside the container, or an administrator,
// would); one on VLAN 200, in the same subnet, reaches neither. CHECK
// passes without IPAM; DEL deletes the link and can be repeated.
func TestLayer2(t *testing.T) {
	t.Parallel()
	th := wire(t)
	a, ha := newCtr(t)
	b, hb := newCtr(t)
	c, hc := newCtr(t)
	outA := th.OK(plugintest.Cmd("ADD", a, "a", l2conf("1.0.0", "m1", 100, "")))
	th.OK(plugintest.Cmd("ADD", b, "b", l2conf("1.0.0", "m2", 100, "")))
	th.OK(plugintest.Cmd("ADD", c, "c", l2conf("1.0.0", "m1", 200, "")))

	var r map[string]json.RawMessage
	plugintest.Must(t, json.Unmarshal([]byte(outA), &r))
	if len(r) != 2 || r["cniVersion"] == nil || r["interfaces"] == nil {
		t.Errorf("layer-2 result: %s", outA)
	}
	for name, h := range map[string]*netlinkx.Handle{"a": ha, "b": hb, "c": hc} {
		l := plugintest.MustLink(t, h, "eth0")
		if l.Kind != "vlan" || !l.Up {
			t.Errorf("%s: eth0 %+v", name, l)
		}
		if got := plugintest.AddrStrings(t, h, "eth0", 0); len(got) != 0 {
			t.Errorf("%s: addresses %v", name, got)
		}
		privtest.WaitOperUp(t, h, "eth0")
	}
	if id, err := ha.VlanID("eth0"); err != nil || id != 100 {
		t.Errorf("a: VLAN id %d %v", id, err)
	}

	for _, s := range []struct {
		h    *netlinkx.Handle
		addr string
	}{{ha, "10.70.0.1/24"}, {hb, "10.70.0.2/24"}, {hc, "10.70.0.3/24"}} {
		plugintest.Must(t, s.h.AddAddr("eth0", netip.MustParsePrefix(s.addr), netlinkx.AddrOpts{}))
	}
	privtest.RoundTrips(t, []privtest.Trip{
		{Name: "a->b", From: a, To: b, Dst: "10.70.0.2"},
		{Name: "b->a", From: b, To: a, Dst: "10.70.0.1"},
	})
	for _, tt := range []struct {
		name     string
		from, to *netns.NS
		dst      string
	}{{"c->b", c, b, "10.70.0.2"}, {"b->c", b, c, "10.70.0.3"}} {
		if privtest.UDPRoundTrip(t, tt.from, tt.to, netip.MustParseAddr(tt.dst)) {
			t.Errorf("%s: round trip across VLANs", tt.name)
		}
	}

	th.OK(plugintest.Cmd("CHECK", a, "a", plugintest.WithPrev(l2conf("1.0.0", "m1", 100, ""), outA)))
	th.FailsWith("CHECK without prevResult", plugintest.Cmd("CHECK", a, "a", l2conf("1.0.0", "m1", 100, "")), "vlan: Required prevResult missing")
	del := plugintest.Cmd("DEL", a, "a", l2conf("1.0.0", "m1", 100, ""))
	th.OK(del)
	plugintest.WantLinks(t, ha, "lo")
	th.OK(del)
	plugintest.WantLinks(t, th.H, "lo", "m1", "m2")
}

// TestLayer2ResultPerVersion: the layer-2 result per spec version
// (testdata/result-l2-*.json): the interface and the config's DNS. 0.2.0
// and older cannot express a result without an address, as with the
// reference.
func TestLayer2ResultPerVersion(t *testing.T) {
	t.Parallel()
	plugintest.ResultPerVersionAs(t, "result-l2", func(t *testing.T, v string) (string, plugintest.Placeholders) {
		th := wire(t)
		ctr, hc := newCtr(t)
		out := th.OK(plugintest.Cmd("ADD", ctr, "l2", l2conf(v, "m1", 100, `,"dns":{"nameservers":["1.1.1.1"]}`)))
		return out, plugintest.Placeholders{"CMAC", plugintest.MustLink(t, hc, "eth0").MAC.String(), "SANDBOX", ctr.Path()}
	})
	th := wire(t)
	ctr, _ := newCtr(t)
	th.FailsWith("0.2.0", plugintest.Cmd("ADD", ctr, "l2", l2conf("0.2.0", "m1", 100, "")), "cannot convert: no valid IP addresses")
}

// TestLayer2GCAndStatus: without IPAM, GC and STATUS have nothing to ask
// and succeed.
func TestLayer2GCAndStatus(t *testing.T) {
	t.Parallel()
	th := wire(t)
	th.OK(plugintest.Call{Command: "GC", Stdin: l2conf("1.1.0", "m1", 100, `,"cni.dev/valid-attachments":[]`)})
	th.OK(plugintest.Call{Command: "STATUS", Stdin: l2conf("1.1.0", "m1", 100, "")})
}
