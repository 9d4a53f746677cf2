package bridge

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/nftcni/nftcni/netlinkx"
)

// Expected ADD output per spec version, byte for byte, for a dual-stack
// config with isGateway (IPv4 gateway computed, IPv6 one from IPAM), an
// IPAM route and config DNS. BRMAC, VETH, VETHMAC, CMAC and SANDBOX are
// filled in from what the kernel reports afterwards.
var wantResults = map[string]string{
	"0.3.1": `{
    "cniVersion": "0.3.1",
    "interfaces": [
        {
            "name": "br0",
            "mac": "BRMAC"
        },
        {
            "name": "VETH",
            "mac": "VETHMAC"
        },
        {
            "name": "eth0",
            "mac": "CMAC",
            "sandbox": "SANDBOX"
        }
    ],
    "ips": [
        {
            "version": "4",
            "interface": 2,
            "address": "10.22.0.5/16",
            "gateway": "10.22.0.1"
        },
        {
            "version": "6",
            "interface": 2,
            "address": "fd00:22::5/64",
            "gateway": "fd00:22::fe"
        }
    ],
    "routes": [
        {
            "dst": "0.0.0.0/0"
        }
    ],
    "dns": {
        "nameservers": [
            "9.9.9.9"
        ]
    }
}`,
	"1.0.0": `{
    "cniVersion": "1.0.0",
    "dns": {
        "nameservers": [
            "9.9.9.9"
        ]
    },
    "interfaces": [
        {
            "mac": "BRMAC",
            "name": "br0"
        },
        {
            "mac": "VETHMAC",
            "name": "VETH"
        },
        {
            "mac": "CMAC",
            "name": "eth0",
            "sandbox": "SANDBOX"
        }
    ],
    "ips": [
        {
            "address": "10.22.0.5/16",
            "gateway": "10.22.0.1",
            "interface": 2
        },
        {
            "address": "fd00:22::5/64",
            "gateway": "fd00:22::fe",
            "interface": 2
        }
    ],
    "routes": [
        {
            "dst": "0.0.0.0/0"
        }
    ]
}`,
}

func init() {
	wantResults["0.4.0"] = strings.Replace(wantResults["0.3.1"], `"0.3.1"`, `"0.4.0"`, 1)
	wantResults["1.1.0"] = strings.Replace(wantResults["1.0.0"], `"1.0.0"`, `"1.1.0"`, 1)
}

// TestResultPerVersion compares the printed result for 0.3.1, 0.4.0, 1.0.0
// and 1.1.0 configs with the expected text, with names and MACs read back
// from the kernel: interface order bridge, host veth, container, and every
// IP bound to index 2.
func TestResultPerVersion(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"0.3.1", "0.4.0", "1.0.0", "1.1.0"} {
		t.Run(v, func(t *testing.T) {
			t.Parallel()
			th := newHost(t)
			ctr, hc := newCtr(t)
			out := th.ok(call("ADD", ctr, "c0ffee", conf(v, `,"isGateway":true,"dns":{"nameservers":["9.9.9.9"]}`+
				static(`[{"dst":"0.0.0.0/0"}]`, "10.22.0.5/16", "fd00:22::5/64 fd00:22::fe"))))

			br := mustLink(t, th.h, "br0")
			var veth netlinkx.Link
			links, err := th.h.Links()
			must(t, err)
			for _, l := range links {
				if l.Kind == "veth" {
					if veth.Name != "" {
						t.Fatalf("two veths in the host: %s, %s", veth.Name, l.Name)
					}
					veth = l
				}
			}
			if veth.MasterIndex != br.Index || len(veth.Name) != 12 || !strings.HasPrefix(veth.Name, "veth") {
				t.Errorf("host veth %+v", veth)
			}
			cont := mustLink(t, hc, "eth0")
			want := strings.NewReplacer(
				"BRMAC", br.MAC.String(),
				"VETHMAC", veth.MAC.String(),
				"VETH", veth.Name,
				"CMAC", cont.MAC.String(),
				"SANDBOX", ctr.Path(),
			).Replace(wantResults[v])
			if out != want {
				t.Errorf("result\n%s\nwant\n%s", out, want)
			}
		})
	}
}

// TestResultL2Only: without IPAM the result has only the interfaces, the
// container interface is up and the host port forwards.
func TestResultL2Only(t *testing.T) {
	t.Parallel()
	th := newHost(t)
	ctr, hc := newCtr(t)
	out := th.ok(call("ADD", ctr, "l2", conf("1.0.0", "")))
	var m map[string]json.RawMessage
	must(t, json.Unmarshal([]byte(out), &m))
	if len(m) != 2 || m["cniVersion"] == nil || m["interfaces"] == nil {
		t.Errorf("L2 result keys: %s", out)
	}
	if l := mustLink(t, hc, "eth0"); !l.Up {
		t.Errorf("eth0 not up: %+v", l)
	}
	// A 0.2.0 config cannot express an L2 result (no IP), as in the
	// reference.
	ctr2, _ := newCtr(t)
	e := th.fail(call("ADD", ctr2, "l2b", conf("0.2.0", "")))
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
		ctr, _ := newCtr(t)
		out := th.ok(call("ADD", ctr, "dns"+string(rune('a'+i)), conf("1.0.0", tt.conf+strings.Replace(ipamDNS, "%d", string(rune('2'+i)), 1))))
		var m map[string]any
		must(t, json.Unmarshal([]byte(out), &m))
		var want any
		must(t, json.Unmarshal([]byte(tt.want), &want))
		ga, _ := json.Marshal(m["dns"])
		gb, _ := json.Marshal(want)
		if string(ga) != string(gb) {
			t.Errorf("%q: dns %s, want %s", tt.conf, ga, gb)
		}
	}
}
