package bridge

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/nftcni/nftcni/netlinkx"
)

// editPrev decodes an ADD result, lets fn change it and encodes it again.
func editPrev(t *testing.T, out string, fn func(m map[string]any)) string {
	t.Helper()
	var m map[string]any
	must(t, json.Unmarshal([]byte(out), &m))
	fn(m)
	b, err := json.Marshal(m)
	must(t, err)
	return string(b)
}

func ifaces(m map[string]any) []any { return m["interfaces"].([]any) }
func iface(m map[string]any, i int) map[string]any {
	return ifaces(m)[i].(map[string]any)
}

// TestCheck: CHECK passes right after ADD (with and without IPAM) and
// fails, with the reference's messages, for each kind of drift.
func TestCheck(t *testing.T) {
	t.Parallel()
	th := newHost(t)
	ctr, hc := newCtr(t)
	cfg := conf("1.0.0", `,"isGateway":true`+static(`[{"dst":"0.0.0.0/0"},{"dst":"192.168.7.0/24","gw":"10.70.0.1"}]`, "10.70.0.2/24"))
	out := th.ok(call("ADD", ctr, "chk", cfg))
	var r wireResult
	must(t, json.Unmarshal([]byte(out), &r))
	hostVeth := r.Interfaces[1].Name
	cmac := r.Interfaces[2].Mac

	th.ok(call("CHECK", ctr, "chk", withPrev(cfg, out)))

	// Drift of the prevResult itself (nothing changed in the kernel).
	otherCtr, _ := newCtr(t)
	prevCases := []struct {
		name string
		edit func(m map[string]any)
		want string
	}{
		{"container MAC", func(m map[string]any) { iface(m, 2)["mac"] = "02:00:00:00:00:99" },
			fmt.Sprintf("Interface eth0 Mac 02:00:00:00:00:99 doesn't match container Mac: %s", cmac)},
		{"bridge MAC", func(m map[string]any) { iface(m, 0)["mac"] = "02:00:00:00:00:98" },
			"Bridge interface br0 Mac doesn't match: 02:00:00:00:00:98"},
		{"host veth MAC", func(m map[string]any) { iface(m, 1)["mac"] = "02:00:00:00:00:97" },
			fmt.Sprintf("Interface %s Mac doesn't match: 02:00:00:00:00:97 not found", hostVeth)},
		{"no bridge entry", func(m map[string]any) { m["interfaces"] = ifaces(m)[1:] }, "Interface name missing "},
		{"no host veth entry", func(m map[string]any) { m["interfaces"] = []any{iface(m, 0), iface(m, 2)} },
			"CNI veth created for bridge br0 was not found"},
		{"host veth unknown", func(m map[string]any) { iface(m, 1)["name"] = "vethgone0000" }, "Interface name vethgone0000 not found"},
		{"host veth in sandbox", func(m map[string]any) { iface(m, 1)["sandbox"] = "/x" },
			fmt.Sprintf("Interface %s should not be in sandbox", hostVeth)},
		{"bridge in sandbox", func(m map[string]any) { iface(m, 0)["sandbox"] = "/x" }, "Interface br0 should not be in sandbox"},
		{"sandbox", func(m map[string]any) { iface(m, 2)["sandbox"] = otherCtr.Path() },
			fmt.Sprintf("Sandbox in prevResult  doesn't match configured netns: %s", ctr.Path())},
		{"address", func(m map[string]any) {
			m["ips"].([]any)[0].(map[string]any)["address"] = "10.70.0.9/24"
		}, "Failed to match addr 10.70.0.9/24 on interface eth0"},
		{"route", func(m map[string]any) {
			m["routes"] = append(m["routes"].([]any), map[string]any{"dst": "172.16.0.0/12"})
		}, "Expected Route {Dst:{IP:172.16.0.0 Mask:fff00000} GW:<nil> MTU:0 AdvMSS:0 Priority:0 Table:<nil> Scope:<nil>} not found in routing table"},
		{"route gateway", func(m map[string]any) {
			m["routes"].([]any)[1].(map[string]any)["gw"] = "10.70.0.99"
		}, "Expected Route {Dst:{IP:192.168.7.0 Mask:ffffff00} GW:10.70.0.99 MTU:0 AdvMSS:0 Priority:0 Table:<nil> Scope:<nil>} not found in routing table"},
	}
	for _, tc := range prevCases {
		e := th.fail(call("CHECK", ctr, "chk", withPrev(cfg, editPrev(t, out, tc.edit))))
		if e.Msg != tc.want {
			t.Errorf("%s: %q\n want %q", tc.name, e.Msg, tc.want)
		}
	}

	// Config drift: promiscMode must equal the bridge's state.
	promCfg := strings.Replace(cfg, `"isGateway":true`, `"isGateway":true,"promiscMode":true`, 1)
	e := th.fail(call("CHECK", ctr, "chk", withPrev(promCfg, out)))
	if want := "Bridge interface br0 configured Promisc Mode true doesn't match current state: false "; e.Msg != want {
		t.Errorf("promisc: %q", e.Msg)
	}
	e = th.fail(call("CHECK", ctr, "chk", cfg))
	if e.Msg != "Required prevResult missing" {
		t.Errorf("no prevResult: %q", e.Msg)
	}

	// Kernel drift.
	must(t, hc.DelAddr("eth0", netip.MustParsePrefix("10.70.0.2/24")))
	e = th.fail(call("CHECK", ctr, "chk", withPrev(cfg, out)))
	if e.Msg != "Failed to match addr 10.70.0.2/24 on interface eth0" {
		t.Errorf("address removed: %q", e.Msg)
	}
	must(t, th.h.NoMaster(hostVeth))
	e = th.fail(call("CHECK", ctr, "chk", withPrev(cfg, out)))
	if e.Msg != "CNI veth created for bridge br0 was not found" {
		t.Errorf("port removed: %q", e.Msg)
	}
	must(t, hc.DeleteLink("eth0"))
	e = th.fail(call("CHECK", ctr, "chk", withPrev(cfg, out)))
	if e.Msg != "Interface name eth0 not found" {
		t.Errorf("container veth removed: %q", e.Msg)
	}
	must(t, th.h.DeleteLink("br0"))
	must(t, th.h.AddVeth(netlinkx.VethSpec{Name: "br0", PeerName: "notbr"}))
	e = th.fail(call("CHECK", ctr, "chk", withPrev(cfg, out)))
	if e.Msg != "Interface br0 does not have link type of bridge" {
		t.Errorf("bridge replaced: %q", e.Msg)
	}
	must(t, th.h.DeleteLink("br0"))
	e = th.fail(call("CHECK", ctr, "chk", withPrev(cfg, out)))
	if e.Msg != "Interface name br0 not found" {
		t.Errorf("bridge removed: %q", e.Msg)
	}
}

// TestCheckL2Only: a config without IPAM can be checked (the reference
// always fails with "no plugin name provided").
func TestCheckL2Only(t *testing.T) {
	t.Parallel()
	th := newHost(t)
	ctr, hc := newCtr(t)
	cfg := conf("0.4.0", "")
	out := th.ok(call("ADD", ctr, "l2", cfg))
	th.ok(call("CHECK", ctr, "l2", withPrev(cfg, out)))
	must(t, hc.DeleteLink("eth0"))
	// Without a gateway address the bridge MAC is not pinned and follows
	// its ports, so after port churn the bridge MAC check fails first
	// (reference behaviour, kept).
	e := th.fail(call("CHECK", ctr, "l2", withPrev(cfg, out)))
	if !strings.HasPrefix(e.Msg, "Bridge interface br0 Mac doesn't match: ") {
		t.Errorf("after deleting eth0: %q", e.Msg)
	}
	noBrMAC := editPrev(t, out, func(m map[string]any) { delete(iface(m, 0), "mac") })
	e = th.fail(call("CHECK", ctr, "l2", withPrev(cfg, noBrMAC)))
	if e.Msg != "Interface name eth0 not found" {
		t.Errorf("after deleting eth0: %q", e.Msg)
	}
}

// TestCheckVersionFloor: CHECK needs a 0.4.0+ config.
func TestCheckVersionFloor(t *testing.T) {
	t.Parallel()
	th := newHost(t)
	ctr, _ := newCtr(t)
	e := th.fail(call("CHECK", ctr, "v", conf("0.3.1", "")))
	if e.Code != 1 || e.Msg != "config version does not allow CHECK" {
		t.Errorf("%+v", e)
	}
}
