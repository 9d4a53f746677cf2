package bridge

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/nftcni/nftcni/internal/plugintest"
	"github.com/nftcni/nftcni/netlinkx"
)

func ifaces(m map[string]any) []any { return m["interfaces"].([]any) }
func iface(m map[string]any, i int) map[string]any {
	return ifaces(m)[i].(map[string]any)
}

// TestCheck: CHECK passes right after ADD (with and without IPAM) and
// fails, with the reference's messages, for each kind of drift.
func TestCheck(t *testing.T) {
	t.Parallel()
	th := newHost(t)
	ctr, hc := plugintest.NewCtr(t)
	cfg := conf("1.0.0", `,"isGateway":true`+plugintest.Static(`[{"dst":"0.0.0.0/0"},{"dst":"192.168.7.0/24","gw":"10.70.0.1"}]`, "10.70.0.2/24"))
	out := th.OK(plugintest.Cmd("ADD", ctr, "chk", cfg))
	var r plugintest.WireResult
	plugintest.Must(t, json.Unmarshal([]byte(out), &r))
	hostVeth := r.Interfaces[1].Name
	cmac := r.Interfaces[2].Mac

	check := plugintest.Cmd("CHECK", ctr, "chk", plugintest.WithPrev(cfg, out))
	th.OK(check)

	// Drift of the prevResult itself (nothing changed in the kernel).
	otherCtr, _ := plugintest.NewCtr(t)
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
		th.FailsWith(tc.name, plugintest.Cmd("CHECK", ctr, "chk", plugintest.WithPrev(cfg, plugintest.EditJSON(t, out, tc.edit))), tc.want)
	}

	// Config drift: promiscMode must equal the bridge's state.
	promCfg := strings.Replace(cfg, `"isGateway":true`, `"isGateway":true,"promiscMode":true`, 1)
	th.FailsWith("promisc", plugintest.Cmd("CHECK", ctr, "chk", plugintest.WithPrev(promCfg, out)),
		"Bridge interface br0 configured Promisc Mode true doesn't match current state: false ")
	th.FailsWith("no prevResult", plugintest.Cmd("CHECK", ctr, "chk", cfg), "Required prevResult missing")

	// Kernel drift.
	plugintest.Must(t, hc.DelAddr("eth0", netip.MustParsePrefix("10.70.0.2/24")))
	th.FailsWith("address removed", check, "Failed to match addr 10.70.0.2/24 on interface eth0")
	plugintest.Must(t, th.H.NoMaster(hostVeth))
	th.FailsWith("port removed", check, "CNI veth created for bridge br0 was not found")
	plugintest.Must(t, hc.DeleteLink("eth0"))
	th.FailsWith("container veth removed", check, "Interface name eth0 not found")
	plugintest.Must(t, th.H.DeleteLink("br0"))
	plugintest.Must(t, th.H.AddVeth(netlinkx.VethSpec{Name: "br0", PeerName: "notbr"}))
	th.FailsWith("bridge replaced", check, "Interface br0 does not have link type of bridge")
	plugintest.Must(t, th.H.DeleteLink("br0"))
	th.FailsWith("bridge removed", check, "Interface name br0 not found")
}

// TestCheckGateway: with isGateway, CHECK finds each gateway address of
// prevResult on the bridge, with the IP's prefix length: computed (IPv4
// here) or given by IPAM (IPv6 here). The reference does not look, so its
// CHECK passes on a bridge whose gateway is gone and the containers'
// default routes lead nowhere.
func TestCheckGateway(t *testing.T) {
	t.Parallel()
	th := newHost(t)
	ctr, _ := plugintest.NewCtr(t)
	cfg := conf("1.0.0", `,"isGateway":true`+plugintest.Static("", "10.71.0.2/24", "fd00:71::2/64 fd00:71::fe"))
	out := th.OK(plugintest.Cmd("ADD", ctr, "gw", cfg))
	check := plugintest.Cmd("CHECK", ctr, "gw", plugintest.WithPrev(cfg, out))
	th.OK(check)

	for _, tc := range []struct {
		gone, instead netip.Prefix
		want          string
	}{
		{gone: netip.MustParsePrefix("10.71.0.1/24"),
			want: "Failed to match gateway addr 10.71.0.1/24 on bridge br0"},
		{gone: netip.MustParsePrefix("10.71.0.1/24"), instead: netip.MustParsePrefix("10.71.0.1/16"),
			want: "Failed to match gateway addr 10.71.0.1/24 on bridge br0 (br0 has 10.71.0.1/16)"},
		{gone: netip.MustParsePrefix("fd00:71::fe/64"),
			want: "Failed to match gateway addr fd00:71::fe/64 on bridge br0"},
	} {
		plugintest.Must(t, th.H.DelAddr("br0", tc.gone))
		if tc.instead.IsValid() {
			plugintest.Must(t, th.H.AddAddr("br0", tc.instead, nodad))
		}
		th.FailsWith(tc.gone.String()+" removed", check, tc.want)
		if tc.instead.IsValid() {
			plugintest.Must(t, th.H.DelAddr("br0", tc.instead))
		}
		plugintest.Must(t, th.H.AddAddr("br0", tc.gone, nodad))
		th.OK(check)
	}
	// Without isGateway there is no gateway to look for.
	plugintest.Must(t, th.H.DelAddr("br0", netip.MustParsePrefix("10.71.0.1/24")))
	noGW := strings.Replace(cfg, `"isGateway":true`, `"isGateway":false`, 1)
	th.OK(plugintest.Cmd("CHECK", ctr, "gw", plugintest.WithPrev(noGW, out)))
	// isDefaultGateway alone implies isGateway, in CHECK as in ADD.
	defGW := strings.Replace(cfg, `"isGateway":true`, `"isDefaultGateway":true`, 1)
	th.FailsWith("isDefaultGateway, gateway removed", plugintest.Cmd("CHECK", ctr, "gw", plugintest.WithPrev(defGW, out)),
		"Failed to match gateway addr 10.71.0.1/24 on bridge br0")
}

// TestCheckL2Only: a config without IPAM can be checked (the reference
// always fails with "no plugin name provided").
func TestCheckL2Only(t *testing.T) {
	t.Parallel()
	th := newHost(t)
	ctr, hc := plugintest.NewCtr(t)
	cfg := conf("0.4.0", "")
	out := th.OK(plugintest.Cmd("ADD", ctr, "l2", cfg))
	th.OK(plugintest.Cmd("CHECK", ctr, "l2", plugintest.WithPrev(cfg, out)))
	plugintest.Must(t, hc.DeleteLink("eth0"))
	// Without a gateway address the bridge MAC is not pinned and follows
	// its ports, so after port churn the bridge MAC check fails first
	// (reference behaviour, kept).
	e := th.Fail(plugintest.Cmd("CHECK", ctr, "l2", plugintest.WithPrev(cfg, out)))
	if !strings.HasPrefix(e.Msg, "Bridge interface br0 Mac doesn't match: ") {
		t.Errorf("after deleting eth0: %q", e.Msg)
	}
	noBrMAC := plugintest.EditJSON(t, out, func(m map[string]any) { delete(iface(m, 0), "mac") })
	th.FailsWith("after deleting eth0", plugintest.Cmd("CHECK", ctr, "l2", plugintest.WithPrev(cfg, noBrMAC)), "Interface name eth0 not found")
}

// TestCheckVersionFloor: CHECK needs a 0.4.0+ config.
func TestCheckVersionFloor(t *testing.T) {
	t.Parallel()
	th := newHost(t)
	ctr, _ := plugintest.NewCtr(t)
	e := th.Fail(plugintest.Cmd("CHECK", ctr, "v", conf("0.3.1", "")))
	if e.Code != 1 || e.Msg != "config version does not allow CHECK" {
		t.Errorf("%+v", e)
	}
}
