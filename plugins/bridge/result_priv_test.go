package bridge

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/nftcni/nftcni/internal/plugintest"
)

// TestResultPerVersion compares the printed result for 0.3.1, 0.4.0, 1.0.0
// and 1.1.0 configs with the expected text (testdata/result-*.json), with
// names and MACs read back from the kernel: interface order bridge, host
// veth, container, and every IP bound to index 2. The config is dual-stack
// with isGateway (IPv4 gateway computed, IPv6 one from IPAM), an IPAM
// route and config DNS; BRMAC, VETH, VETHMAC, CMAC and SANDBOX are filled
// in from what the kernel reports afterwards.
func TestResultPerVersion(t *testing.T) {
	t.Parallel()
	plugintest.ResultPerVersion(t, func(t *testing.T, v string) (string, plugintest.Placeholders) {
		th := newHost(t)
		ctr, hc := plugintest.NewCtr(t)
		out := th.OK(plugintest.Cmd("ADD", ctr, "c0ffee", conf(v, `,"isGateway":true,"dns":{"nameservers":["9.9.9.9"]}`+
			plugintest.Static(`[{"dst":"0.0.0.0/0"}]`, "10.22.0.5/16", "fd00:22::5/64 fd00:22::fe"))))

		br := plugintest.MustLink(t, th.H, "br0")
		veth := plugintest.OnlyVeth(t, th.H)
		if veth.MasterIndex != br.Index || len(veth.Name) != 12 || !strings.HasPrefix(veth.Name, "veth") {
			t.Errorf("host veth %+v", veth)
		}
		cont := plugintest.MustLink(t, hc, "eth0")
		return out, plugintest.Placeholders{
			"BRMAC", br.MAC.String(),
			"VETHMAC", veth.MAC.String(),
			"VETH", veth.Name,
			"CMAC", cont.MAC.String(),
			"SANDBOX", ctr.Path(),
		}
	})
}

// TestResultL2Only: without IPAM the result has only the interfaces, the
// container interface is up and the host port forwards.
func TestResultL2Only(t *testing.T) {
	t.Parallel()
	th := newHost(t)
	ctr, hc := plugintest.NewCtr(t)
	out := th.OK(plugintest.Cmd("ADD", ctr, "l2", conf("1.0.0", "")))
	var m map[string]json.RawMessage
	plugintest.Must(t, json.Unmarshal([]byte(out), &m))
	if len(m) != 2 || m["cniVersion"] == nil || m["interfaces"] == nil {
		t.Errorf("L2 result keys: %s", out)
	}
	if l := plugintest.MustLink(t, hc, "eth0"); !l.Up {
		t.Errorf("eth0 not up: %+v", l)
	}
	// A 0.2.0 config cannot express an L2 result (no IP), as in the
	// reference.
	ctr2, _ := plugintest.NewCtr(t)
	e := th.Fail(plugintest.Cmd("ADD", ctr2, "l2b", conf("0.2.0", "")))
	if e.Msg != "cannot convert: no valid IP addresses" {
		t.Errorf("0.2.0 L2: %+v", e)
	}
}

// TestResultDNS: config dns replaces IPAM's entirely when any field is set,
// else IPAM's is passed on.
func TestResultDNS(t *testing.T) {
	t.Parallel()
	th := newHost(t)
	ipamDNS := `,"ipam":{"type":"static","addresses":[{"address":"10.40.0.%d/24"}],"dns":{"nameservers":["10.40.0.1"],"domain":"ipam.example"}}`
	for i, tt := range []struct {
		conf string
		want string
	}{
		{"", `{"nameservers":["10.40.0.1"],"domain":"ipam.example"}`},
		{`,"dns":{"search":["cfg.example"]}`, `{"search":["cfg.example"]}`},
		{`,"dns":{"nameservers":[]}`, `null`},
	} {
		ctr, _ := plugintest.NewCtr(t)
		out := th.OK(plugintest.Cmd("ADD", ctr, "dns"+string(rune('a'+i)), conf("1.0.0", tt.conf+strings.Replace(ipamDNS, "%d", string(rune('2'+i)), 1))))
		var m map[string]any
		plugintest.Must(t, json.Unmarshal([]byte(out), &m))
		var want any
		plugintest.Must(t, json.Unmarshal([]byte(tt.want), &want))
		ga, _ := json.Marshal(m["dns"])
		gb, _ := json.Marshal(want)
		if string(ga) != string(gb) {
			t.Errorf("%q: dns %s, want %s", tt.conf, ga, gb)
		}
	}
}
