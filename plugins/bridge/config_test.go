package bridge

import (
	"net/netip"
	"reflect"
	"testing"

	"github.com/nftcni/nftcni/cni"
)

// These need no privileges: every config check happens before anything is
// touched.

func TestConfigDefaults(t *testing.T) {
	c, err := loadConf([]byte(`{"cniVersion":"1.0.0","name":"n","type":"bridge"}`), "")
	if err != nil {
		t.Fatal(err)
	}
	if c.BrName != "cni0" || c.IsGW || c.IsDefaultGW || c.ForceAddress || c.IPMasq || c.IPMasqBackend != nil ||
		c.MTU != 0 || c.HairpinMode || c.PromiscMode || c.Vlan != 0 || c.VlanTrunk != nil || c.PreserveDefaultVlan ||
		c.MacSpoofChk || c.EnableDad || c.DisableContainerInterface || c.PortIsolation || c.mac != "" || c.isL3() ||
		c.vlanFiltering() {
		t.Errorf("defaults: %+v", c)
	}
	// Keys match case-insensitively, like encoding/json in the reference.
	c, err = loadConf([]byte(`{"name":"n","BRIDGE":"br7","IsGateway":true,"ipmasq":true,"VLANTRUNK":[]}`), "")
	if err != nil {
		t.Fatal(err)
	}
	if c.BrName != "br7" || !c.IsGW || !c.IPMasq || c.VlanTrunk == nil || c.vlans != nil || !c.vlanFiltering() {
		t.Errorf("case-insensitive keys: %+v", c)
	}
	// isDefaultGateway implies isGateway (ADD only).
	c, _ = loadConf([]byte(`{"name":"n","isDefaultGateway":true}`), "")
	if _, err := c.addChecks(); err != nil || !c.IsGW {
		t.Errorf("isDefaultGateway: IsGW=%v err=%v", c.IsGW, err)
	}
}

func TestConfigErrors(t *testing.T) {
	tests := []struct {
		name, conf, args string
		add              bool // the check is one of ADD's (addChecks)
		want             string
	}{
		{"wrong type", `{"name":"n","mtu":"big"}`, "", false,
			"failed to load netconf: json: cannot unmarshal string into Go struct field NetConf.mtu of type int"},
		{"vlan negative", `{"name":"n","vlan":-1}`, "", false, "invalid VLAN ID -1 (must be between 0 and 4094)"},
		{"vlan too big", `{"name":"n","vlan":4095}`, "", false, "invalid VLAN ID 4095 (must be between 0 and 4094)"},
		{"trunk minID 0", `{"name":"n","vlanTrunk":[{"minID":0,"maxID":10}]}`, "", false, "incorrect trunk minID parameter"},
		{"trunk minID big", `{"name":"n","vlanTrunk":[{"minID":4095,"maxID":4095}]}`, "", false, "incorrect trunk minID parameter"},
		{"trunk maxID big", `{"name":"n","vlanTrunk":[{"minID":1,"maxID":4095}]}`, "", false, "incorrect trunk maxID parameter"},
		{"trunk maxID 0", `{"name":"n","vlanTrunk":[{"minID":1,"maxID":0}]}`, "", false, "incorrect trunk maxID parameter"},
		{"trunk reversed", `{"name":"n","vlanTrunk":[{"minID":20,"maxID":10}]}`, "", false, "minID is greater than maxID in trunk parameter"},
		{"trunk no minID", `{"name":"n","vlanTrunk":[{"maxID":10}]}`, "", false,
			"minID and maxID should be configured simultaneously, minID is missing"},
		{"trunk no maxID", `{"name":"n","vlanTrunk":[{"minID":10}]}`, "", false,
			"minID and maxID should be configured simultaneously, maxID is missing"},
		{"trunk id 0", `{"name":"n","vlanTrunk":[{"id":0}]}`, "", false, "incorrect trunk id parameter"},
		{"trunk id big", `{"name":"n","vlanTrunk":[{"id":5000}]}`, "", false, "incorrect trunk id parameter"},
		{"trunk id bad after range", `{"name":"n","vlanTrunk":[{"minID":1,"maxID":2,"id":-3}]}`, "", false, "incorrect trunk id parameter"},
		{"CNI_ARGS unknown", `{"name":"n"}`, "IP=10.1.1.1", false, `ARGS: unknown args ["IP=10.1.1.1"]`},
		{"CNI_ARGS trailing ;", `{"name":"n"}`, "MAC=02:00:00:00:00:01;", false, `ARGS: invalid pair ""`},
		{"CNI_ARGS bad bool", `{"name":"n"}`, "IgnoreUnknown=yes", false,
			`ARGS: error parsing value of pair "IgnoreUnknown=yes": boolean unmarshal error: invalid input yes`},
		{"ipam and disableContainerInterface", `{"name":"n","disableContainerInterface":true,"ipam":{"type":"static"}}`, "", true,
			"cannot use IPAM when DisableContainerInterface flag is set"},
		{"hairpin and promisc", `{"name":"n","hairpinMode":true,"promiscMode":true}`, "", true,
			"cannot set hairpin mode and promiscuous mode at the same time"},
		{"masq backend empty", `{"name":"n","ipMasq":true,"ipMasqBackend":"","ipam":{"type":"static"}}`, "", true,
			`unknown ipmasq backend ""`},
		{"masq backend unknown", `{"name":"n","ipMasq":true,"ipMasqBackend":"pf","ipam":{"type":"static"}}`, "", true,
			`unknown ipmasq backend "pf"`},
		{"bad runtimeConfig mac", `{"name":"n","runtimeConfig":{"mac":"zz"}}`, "", true,
			"failed to make veth pair: address zz: invalid MAC address"},
		{"bad CNI_ARGS mac", `{"name":"n"}`, "MAC=01:02", true,
			"failed to make veth pair: address 01:02: invalid MAC address"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := loadConf([]byte(tt.conf), tt.args)
			if tt.add {
				if err != nil {
					t.Fatalf("loadConf: %v", err)
				}
				_, err = c.addChecks()
			}
			if err == nil || err.Error() != tt.want {
				t.Errorf("error = %v\n want %s", err, tt.want)
			}
		})
	}
}

func TestConfigAccepted(t *testing.T) {
	for _, conf := range []string{
		// Masquerade backends: both names mean native nftables; absent
		// and null mean the default.
		`{"name":"n","ipMasq":true,"ipMasqBackend":"iptables","ipam":{"type":"static"}}`,
		`{"name":"n","ipMasq":true,"ipMasqBackend":"nftables","ipam":{"type":"static"}}`,
		`{"name":"n","ipMasq":true,"ipMasqBackend":null,"ipam":{"type":"static"}}`,
		// Not checked when masquerade does not run (reference behaviour).
		`{"name":"n","ipMasqBackend":"pf","ipam":{"type":"static"}}`,
		`{"name":"n","ipMasq":true,"ipMasqBackend":"pf"}`,
		// A JSON null trunk item (the reference crashes) counts as empty.
		`{"name":"n","vlanTrunk":[null,{"id":7}]}`,
		`{"name":"n","vlan":0}`, `{"name":"n","vlan":4094}`,
		`{"name":"n","disableContainerInterface":true}`,
		`{"name":"n","hairpinMode":true}`, `{"name":"n","promiscMode":true}`,
	} {
		c, err := loadConf([]byte(conf), "")
		if err == nil {
			_, err = c.addChecks()
		}
		if err != nil {
			t.Errorf("%s: %v", conf, err)
		}
	}
}

func TestVlanTrunkCollection(t *testing.T) {
	c, err := loadConf([]byte(`{"name":"n","vlanTrunk":[{"id":30},{"minID":10,"maxID":12},{"minID":11,"maxID":13,"id":2},{"id":30}]}`), "")
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{2, 10, 11, 12, 13, 30}; !reflect.DeepEqual(c.vlans, want) {
		t.Errorf("vlans = %v, want %v", c.vlans, want)
	}
	c, _ = loadConf([]byte(`{"name":"n","vlanTrunk":[{}]}`), "")
	if c.vlans != nil || !c.vlanFiltering() {
		t.Errorf("empty item: vlans %v filtering %v", c.vlans, c.vlanFiltering())
	}
}

func TestMACPrecedence(t *testing.T) {
	const (
		fromArgs    = "02:00:00:00:00:01"
		fromCNI     = "02:00:00:00:00:02"
		fromRuntime = "02:00:00:00:00:03"
	)
	tests := []struct {
		conf, args, want string
	}{
		{`{"name":"n"}`, "", ""},
		{`{"name":"n"}`, "MAC=" + fromArgs, fromArgs},
		{`{"name":"n"}`, "IgnoreUnknown=1;K8S_POD_NAME=x;MAC=" + fromArgs, fromArgs},
		{`{"name":"n","args":{"cni":{"mac":"` + fromCNI + `"}}}`, "MAC=" + fromArgs, fromCNI},
		{`{"name":"n","args":{"cni":{"mac":"` + fromCNI + `"}},"runtimeConfig":{"mac":"` + fromRuntime + `"}}`, "MAC=" + fromArgs, fromRuntime},
		{`{"name":"n","runtimeConfig":{"mac":"` + fromRuntime + `"}}`, "", fromRuntime},
	}
	for _, tt := range tests {
		c, err := loadConf([]byte(tt.conf), tt.args)
		if err != nil {
			t.Fatalf("%s %s: %v", tt.conf, tt.args, err)
		}
		mac, err := c.addChecks()
		if err != nil {
			t.Fatal(err)
		}
		got := ""
		if mac != nil {
			got = mac.String()
		}
		if got != tt.want {
			t.Errorf("%s %s: mac %q, want %q", tt.conf, tt.args, got, tt.want)
		}
	}
}

func TestCalcGateways(t *testing.T) {
	p := netip.MustParsePrefix
	a := netip.MustParseAddr
	result := func() *cni.Result {
		return &cni.Result{
			IPs: []*cni.IPConfig{
				{Address: p("10.22.0.5/16")},
				{Address: p("fd00:22::5/64"), Gateway: a("fd00:22::fe")},
				{Address: p("10.23.0.5/24"), Gateway: a("10.23.0.9")},
			},
			Routes: []*cni.Route{{Dst: p("0.0.0.0/0")}},
		}
	}

	// isGateway: computed gateway for the IP without one, gateways listed.
	r := result()
	v4, v6 := calcGateways(r, &NetConf{IsGW: true})
	if r.IPs[0].Gateway != a("10.22.0.1") || r.IPs[1].Gateway != a("fd00:22::fe") || r.IPs[2].Gateway != a("10.23.0.9") {
		t.Errorf("gateways: %v %v %v", r.IPs[0].Gateway, r.IPs[1].Gateway, r.IPs[2].Gateway)
	}
	for _, ip := range r.IPs {
		if ip.Interface == nil || *ip.Interface != 2 {
			t.Errorf("%s bound to %v, want 2", ip.Address, ip.Interface)
		}
	}
	if !reflect.DeepEqual(v4, []netip.Prefix{p("10.22.0.1/16"), p("10.23.0.9/24")}) || !reflect.DeepEqual(v6, []netip.Prefix{p("fd00:22::fe/64")}) {
		t.Errorf("bridge gateways: %v %v", v4, v6)
	}
	if len(r.Routes) != 1 {
		t.Errorf("routes changed without isDefaultGateway: %d", len(r.Routes))
	}

	// isDefaultGateway: IPAM's gateway-less IPv4 default route counts
	// (no duplicate); IPv6 gets one via the first IPv6 gateway.
	r = result()
	calcGateways(r, &NetConf{IsGW: true, IsDefaultGW: true})
	if len(r.Routes) != 2 || r.Routes[1].Dst != p("::/0") || r.Routes[1].GW != a("fd00:22::fe") {
		t.Errorf("default routes: %+v %+v", r.Routes[0], r.Routes[len(r.Routes)-1])
	}

	// Without isGateway nothing is computed.
	r = result()
	v4, v6 = calcGateways(r, &NetConf{})
	if r.IPs[0].Gateway.IsValid() || v4 != nil || v6 != nil {
		t.Errorf("without isGateway: gw %v, %v %v", r.IPs[0].Gateway, v4, v6)
	}
}
