package addrconf

import (
	"net/netip"
	"testing"

	"github.com/nftcni/nftcni/cni"
)

// No privileges needed: message formatting and prevResult selection.

func TestRouteText(t *testing.T) {
	tbl := 100
	tests := []struct {
		r    cni.Route
		want string
	}{
		{cni.Route{Dst: netip.MustParsePrefix("0.0.0.0/0")},
			"{Dst:{IP:0.0.0.0 Mask:00000000} GW:<nil> MTU:0 AdvMSS:0 Priority:0 Table:<nil> Scope:<nil>}"},
		{cni.Route{Dst: netip.MustParsePrefix("10.9.8.7/24"), GW: netip.MustParseAddr("10.9.8.1"), Table: &tbl},
			"{Dst:{IP:10.9.8.0 Mask:ffffff00} GW:10.9.8.1 MTU:0 AdvMSS:0 Priority:0 Table:100 Scope:<nil>}"},
		{cni.Route{Dst: netip.MustParsePrefix("fd00::/64")},
			"{Dst:{IP:fd00:: Mask:ffffffffffffffff0000000000000000} GW:<nil> MTU:0 AdvMSS:0 Priority:0 Table:<nil> Scope:<nil>}"},
	}
	for _, tt := range tests {
		if got := routeText(&tt.r); got != tt.want {
			t.Errorf("routeText = %s\n want %s", got, tt.want)
		}
	}
}

func TestContainerInterface(t *testing.T) {
	ifaces := []*cni.Interface{
		{Name: "br0"},
		{Name: "eth0", Sandbox: "/other", Mac: "02:00:00:00:00:01"},
		{Name: "eth0", Sandbox: "/ns", Mac: "02:00:00:00:00:02"},
		{Name: "eth0", Sandbox: "/ns", Mac: "02:00:00:00:00:03"}, // the last match wins
		{Name: "eth1", Sandbox: "/ns"},
	}
	got, err := ContainerInterface(ifaces, "eth0", "/ns")
	if err != nil || got.Mac != "02:00:00:00:00:03" {
		t.Errorf("eth0 in /ns: %+v %v", got, err)
	}
	got, err = ContainerInterface(ifaces, "eth2", "/ns")
	if err == nil || err.Error() != "Sandbox in prevResult  doesn't match configured netns: /ns" || got != (cni.Interface{}) {
		t.Errorf("eth2 in /ns: %+v %v", got, err)
	}
	if _, err = ContainerInterface(ifaces, "eth0", "/none"); err == nil ||
		err.Error() != "Sandbox in prevResult  doesn't match configured netns: /none" {
		t.Errorf("eth0 in /none: %v", err)
	}
}
