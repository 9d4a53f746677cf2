package hostlocal

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/nftcni/nftcni/cni"
)

// TestValidate: the offline check names the key of each mistake (as the
// user wrote it, whatever the assembly order of the range sets), says how
// to fix it, returns code 7, and never touches the store.
func TestValidate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	conf := func(ipam string) string {
		return `{"cniVersion":"1.0.0","name":"net","ipam":{"type":"host-local","dataDir":"` + dir + `"` + ipam + `}}`
	}
	tests := []struct {
		name, conf, want string
	}{
		{"valid", conf(`,"ranges":[[{"subnet":"10.0.0.0/24"}],[{"subnet":"fd00::/64"}]]`), ""},
		{"no ranges", conf(``), `ipam.ranges: no IP ranges specified: add "ranges": [[{"subnet": "10.22.0.0/16"}]] (or the single-range "subnet")`},
		{"subnet /33", conf(`,"ranges":[[{"subnet":"10.0.0.0/33"}]]`),
			`ipam.ranges[0][0].subnet: invalid CIDR address: 10.0.0.0/33: write a network address and a prefix length (IPv4 /0-/32, IPv6 /0-/128), e.g. "10.22.0.0/16"`},
		{"legacy subnet /33", conf(`,"subnet":"10.0.0.0/33"`), `ipam.subnet: invalid CIDR address: 10.0.0.0/33: write a network address and a prefix length (IPv4 /0-/32, IPv6 /0-/128), e.g. "10.22.0.0/16"`},
		{"second set's second range", conf(`,"ranges":[[{"subnet":"10.0.0.0/24"}],[{"subnet":"10.1.0.0/24"},{"subnet":"10.2.0.0/24","rangeEnd":"10.2.0.x"}]]`),
			`ipam.ranges[1][1].rangeEnd: invalid IP address: 10.2.0.x: write one IPv4 or IPv6 address, e.g. "10.22.0.1"`},
		{"host bits", conf(`,"ranges":[[{"subnet":"10.0.0.9/24"}]]`),
			`ipam.ranges[0][0].subnet: Network has host bits set. For a subnet mask of length 24 the network address is 10.0.0.0: write the network address, "10.0.0.0/24"`},
		{"too small", conf(`,"ranges":[[{"subnet":"10.0.0.0/31"}]]`),
			`ipam.ranges[0][0].subnet: Network 10.0.0.0/31 too small to allocate from: use a prefix of /30 or shorter (IPv6: /126 or shorter)`},
		{"no subnet", conf(`,"ranges":[[{"rangeStart":"10.0.0.5"}]]`),
			`ipam.ranges[0][0].subnet: IP <nil> not v4 nor v6: every range needs a subnet, e.g. "subnet": "10.22.0.0/16"`},
		{"bad gateway", conf(`,"ranges":[[{"subnet":"10.0.0.0/24","gateway":"gw"}]]`),
			`ipam.ranges[0][0].gateway: invalid IP address: gw: write one IPv4 or IPv6 address, e.g. "10.22.0.1"`},
		{"rangeStart outside", conf(`,"ranges":[[{"subnet":"10.0.0.0/24","rangeStart":"10.0.1.5"}]]`),
			`ipam.ranges[0][0].rangeStart: RangeStart 10.0.1.5 not in network 10.0.0.0/24: rangeStart must lie in the subnet, at or before rangeEnd`},
		{"gateway outside the subnet", conf(`,"ranges":[[{"subnet":"10.0.0.0/24","gateway":"10.0.1.1"}]]`),
			`ipam.ranges[0][0].gateway: gateway 10.0.1.1 not in network 10.0.0.0/24: the gateway must lie in the subnet, or leave it out for 10.0.0.1`},
		{"rangeStart after the defaulted rangeEnd", conf(`,"subnet":"10.0.0.0/24","rangeStart":"10.0.0.255"`),
			`ipam.rangeStart: RangeStart 10.0.0.255 is after RangeEnd 10.0.0.254 in network 10.0.0.0/24: rangeStart must lie at or before rangeEnd (without rangeEnd: at or before 10.0.0.254)`},
		{"rangeEnd outside", conf(`,"subnet":"10.0.0.0/24","rangeEnd":"10.0.1.5"`),
			`ipam.rangeEnd: RangeEnd 10.0.1.5 not in network 10.0.0.0/24: rangeEnd must lie in the subnet, at or after rangeStart`},
		{"empty set", conf(`,"ranges":[[{"subnet":"10.0.0.0/24"}],[]]`),
			`ipam.ranges[1]: empty range set: give the set at least one range, e.g. [{"subnet": "10.22.0.0/16"}], or remove it`},
		{"mixed families", conf(`,"ranges":[[{"subnet":"10.0.0.0/24"},{"subnet":"fd00::/64"}]]`),
			`ipam.ranges[0][1]: mixed address families: the ranges of one set are all IPv4 or all IPv6; put this range in a set of its own`},
		{"overlap in a set", conf(`,"ranges":[[{"subnet":"10.0.0.0/24"},{"subnet":"10.0.0.0/25"}]]`),
			`ipam.ranges[0][1]: subnets 10.0.0.1-10.0.0.254 and 10.0.0.1-10.0.0.126 overlap: make the ranges of a set disjoint (rangeStart/rangeEnd, or other subnets)`},
		{"overlap across sets, legacy first", conf(`,"subnet":"10.0.0.0/16","ranges":[[{"subnet":"10.1.0.0/24"}],[{"subnet":"10.0.5.0/24"}]]`),
			`ipam.ranges[1]: range set 0 overlaps with 2: its addresses overlap those of ipam; make the range sets disjoint`},
		{"runtime ranges come first", `{"cniVersion":"1.0.0","name":"net","ipam":{"type":"host-local","ranges":[[{"subnet":"10.0.0.0/24"}]]},"runtimeConfig":{"ipRanges":[[{"subnet":"10.0.0.0/16"}]]}}`,
			`ipam.ranges[0]: range set 0 overlaps with 1: its addresses overlap those of runtimeConfig.ipRanges[0]; make the range sets disjoint`},
		{"two per family before 0.3.0", `{"cniVersion":"0.2.0","name":"net","ipam":{"type":"host-local","ranges":[[{"subnet":"10.0.0.0/24"}],[{"subnet":"10.1.0.0/24"}]]}}`,
			`cniVersion: CNI version 0.2.0 does not support more than 1 address per family: use cniVersion "0.3.0" or later, or one range set per family`},
		{"route", conf(`,"subnet":"10.0.0.0/24","routes":[{"dst":"nope"}]`),
			`ipam.routes[0]: invalid CIDR address: nope: write "dst" as a CIDR and "gw" as an address, e.g. {"dst": "0.0.0.0/0", "gw": "10.22.0.1"}`},
		{"type error", conf(`,"subnet":"10.0.0.0/24","routes":[{"dst":"0.0.0.0/0","mtu":"x"}]`),
			`ipam.routes.mtu: json: cannot unmarshal string into Go struct field wireIPAM.ipam.routes.mtu of type int`},
		{"notReadyWhenFull", conf(`,"subnet":"10.0.0.0/24","notReadyWhenFull":true`), ""},
		{"notReadyWhenFull not a bool", conf(`,"subnet":"10.0.0.0/24","notReadyWhenFull":"yes"`),
			`ipam.notReadyWhenFull: json: cannot unmarshal string into Go struct field wireIPAM.ipam.notReadyWhenFull of type bool`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Plugin.Validate([]byte(tt.conf))
			if tt.want == "" {
				if err != nil {
					t.Fatalf("valid config refused: %v", err)
				}
				return
			}
			var e *cni.Error
			if !errors.As(err, &e) || e.Code != cni.CodeInvalidNetworkConfig || e.Msg != tt.want {
				t.Errorf("got %#v\nwant code 7 %q", err, tt.want)
			}
		})
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("store touched: %v", err)
	}
}
