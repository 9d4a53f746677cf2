package sbr

import (
	"net/netip"
	"testing"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/netlinkx"
)

// No privileges needed: config checks, which prevResult addresses are the
// interface's, and which routes go with an address.

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
			if tt.err != "" {
				if err == nil {
					t.Fatalf("no error, want %q", tt.err)
				}
				if e := cni.AsError(err); e.Code != tt.code || e.Msg != tt.err {
					t.Errorf("error %d %q\n want %d %q", e.Code, e.Msg, tt.code, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
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

func TestBelongs(t *testing.T) {
	p := netip.MustParsePrefix("10.2.0.5/24")
	a := netip.MustParseAddr
	for _, tt := range []struct {
		name string
		r    netlinkx.Route
		want bool
	}{
		{"connected route, source inside", netlinkx.Route{Src: a("10.2.0.5")}, true},
		{"another address's route", netlinkx.Route{Src: a("10.3.0.5")}, false},
		{"gateway inside", netlinkx.Route{Gw: a("10.2.0.1")}, true},
		{"gateway outside", netlinkx.Route{Gw: a("10.9.0.1")}, false},
		{"either inside will do", netlinkx.Route{Src: a("10.3.0.5"), Gw: a("10.2.0.1")}, true},
		{"neither (IPv6 link-local)", netlinkx.Route{}, true},
	} {
		if got := belongs(tt.r, p); got != tt.want {
			t.Errorf("%s: %v", tt.name, got)
		}
	}
}
