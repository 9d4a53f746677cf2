package sbr

import (
	"net/netip"
	"testing"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/internal/plugintest"
)

func TestConfigAndAddrs(t *testing.T) {
	for _, tt := range []struct {
		name, conf string
		want       []string
		code       uint
		err        string
	}{
		{name: "no prevResult", conf: `{"cniVersion":"1.0.0","name":"n"}`, code: cni.CodeInternal, err: "This plugin must be called as chained plugin"},
		{name: "null prevResult", conf: `{"cniVersion":"1.0.0","name":"n","prevResult":null}`, code: cni.CodeInternal, err: "This plugin must be called as chained plugin"},
		{name: "no addresses", conf: `{"cniVersion":"1.0.0","name":"n","prevResult":{"interfaces":[{"name":"eth1"}]}}`, code: cni.CodeInternal,
			err: "No IP addresses supplied on interface: eth1"},
		{name: "index picks", conf: `{"cniVersion":"1.0.0","name":"n","prevResult":{"interfaces":[{"name":"eth0"},{"name":"eth1"}],"ips":[
			{"address":"10.1.0.5/24","interface":0},{"address":"10.2.0.5/24","interface":1},{"address":"10.3.0.5/24"},{"address":"10.4.0.5/24","interface":7}]}}`,
			want: []string{"10.2.0.5/24", "10.3.0.5/24", "10.4.0.5/24"}},
		{name: "none of ours is fine", conf: `{"cniVersion":"1.0.0","name":"n","prevResult":{"interfaces":[{"name":"eth0"}],"ips":[{"address":"10.1.0.5/24","interface":0}]}}`},
		{name: "table type", conf: `{"name":"n","table":"main"}`, code: cni.CodeInternal,
			err: "failed to parse network configuration: json: cannot unmarshal string into Go struct field NetConf.table of type int"},
		{name: "table zero", conf: `{"name":"n","table":0}`, code: cni.CodeInvalidNetworkConfig, err: "invalid table 0: must be between 1 and 4294967295"},
		{name: "table too big", conf: `{"name":"n","table":4294967296}`, code: cni.CodeInvalidNetworkConfig, err: "invalid table 4294967296: must be between 1 and 4294967295"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := loadConf([]byte(tt.conf))
			var ips []*cni.IPConfig
			if err == nil {
				ips, err = c.addrs("eth1")
			}
			if plugintest.ConfError(t, err, tt.code, tt.err) {
				return
			}
			var got []string
			for _, ip := range ips {
				got = append(got, ip.Address.String())
			}
			if len(got) != len(tt.want) {
				t.Fatalf("addresses %v, want %v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("addresses %v, want %v", got, tt.want)
				}
			}
		})
	}
}

// TestGatewaysConfig: `gateways` takes one address per family, with the
// reference's texts, as config errors (code 7).
func TestGatewaysConfig(t *testing.T) {
	for _, tt := range []struct {
		gateways string
		gw4, gw6 string
		err      string
	}{
		{gateways: `[]`},
		{gateways: `["10.0.0.254"]`, gw4: "10.0.0.254"},
		{gateways: `["fd00::fe","10.0.0.254"]`, gw4: "10.0.0.254", gw6: "fd00::fe"},
		{gateways: `["::ffff:10.0.0.254"]`, gw4: "10.0.0.254"},
		{gateways: `["10.0.0.1","fd00::1","10.0.0.2"]`, err: "gateways list cannot contain more than 2 entries (one IPv4, one IPv6)"},
		{gateways: `["fd00::1","fd00::2"]`, err: "gateways list contains multiple IPv6 addresses: fd00::1 and fd00::2"},
		{gateways: `["10.0.0.256"]`, err: "invalid static gateway IP address: 10.0.0.256"},
		{gateways: `["fe80::1%eth0"]`, err: "invalid static gateway IP address: fe80::1%eth0"},
		{gateways: `[""]`, err: "invalid static gateway IP address: "},
	} {
		c, err := loadConf([]byte(`{"name":"n","gateways":` + tt.gateways + `}`))
		if tt.err != "" {
			if e := cni.AsError(err); err == nil || e.Code != cni.CodeInvalidNetworkConfig || e.Msg != tt.err {
				t.Errorf("%s: %v, want code 7 %q", tt.gateways, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tt.gateways, err)
			continue
		}
		str := func(a netip.Addr) string {
			if !a.IsValid() {
				return ""
			}
			return a.String()
		}
		if str(c.gw4) != tt.gw4 || str(c.gw6) != tt.gw6 {
			t.Errorf("%s: %q %q, want %q %q", tt.gateways, str(c.gw4), str(c.gw6), tt.gw4, tt.gw6)
		}
	}
	// The configured gateway of the family wins; the other family keeps
	// its prevResult gateway.
	c, err := loadConf([]byte(`{"name":"n","gateways":["10.0.0.254"]}`))
	if err != nil {
		t.Fatal(err)
	}
	a := netip.MustParseAddr
	for _, tt := range []struct {
		ip     cni.IPConfig
		want   string
		static bool
	}{
		{cni.IPConfig{Address: netip.MustParsePrefix("10.0.0.5/24"), Gateway: a("10.0.0.1")}, "10.0.0.254", true},
		{cni.IPConfig{Address: netip.MustParsePrefix("10.0.0.5/24")}, "10.0.0.254", true},
		{cni.IPConfig{Address: netip.MustParsePrefix("fd00::5/64"), Gateway: a("fd00::1")}, "fd00::1", false},
		{cni.IPConfig{Address: netip.MustParsePrefix("fd00::5/64")}, "invalid IP", false},
	} {
		if gw, static := c.gateway(&tt.ip); gw.String() != tt.want || static != tt.static {
			t.Errorf("%s: %v %v, want %s %v", tt.ip.Address, gw, static, tt.want, tt.static)
		}
	}
}
