package dhcp_test

import (
	"bytes"
	"encoding/gob"
	"net"
	"net/netip"
	"reflect"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/ipam/dhcp"
)

// gobCopy encodes from and decodes the bytes into to, as net/rpc does
// between a client and a server built on different types.
func gobCopy(t *testing.T, from, to any) {
	t.Helper()
	var b bytes.Buffer
	if err := gob.NewEncoder(&b).Encode(from); err != nil {
		t.Fatal(err)
	}
	if err := gob.NewDecoder(&b).Decode(to); err != nil {
		t.Fatal(err)
	}
}

// TestWireCompat: our reply type and the CNI library's result (what the
// reference plugin and daemon use) decode each other's gob, field for
// field, including 16-byte IPv4 values and optional ints.
func TestWireCompat(t *testing.T) {
	res := &cni.Result{
		CNIVersion: cni.CurrentVersion,
		IPs: []*cni.IPConfig{{
			Address: netip.MustParsePrefix("10.1.2.3/24"),
			Gateway: netip.MustParseAddr("10.1.2.1"),
		}},
		Routes: []*cni.Route{
			{Dst: netip.MustParsePrefix("0.0.0.0/0"), GW: netip.MustParseAddr("10.1.2.1"), Priority: 5},
			{Dst: netip.MustParsePrefix("10.9.0.0/16"), GW: netip.MustParseAddr("0.0.0.0"), Scope: cni.Int(253), Table: cni.Int(100)},
		},
		DNS: cni.DNS{Nameservers: []string{"10.1.2.53"}, Domain: "example.test", Search: []string{"a.test"}},
	}

	// Ours → the library's.
	var ref current.Result
	gobCopy(t, dhcp.FromResult(res), &ref)
	scope, table := 253, 100
	want := current.Result{
		CNIVersion: "1.1.0",
		IPs: []*current.IPConfig{{
			Address: net.IPNet{IP: net.IP{10, 1, 2, 3}, Mask: net.CIDRMask(24, 32)},
			Gateway: net.IP{10, 1, 2, 1},
		}},
		Routes: []*types.Route{
			{Dst: net.IPNet{IP: net.IP{0, 0, 0, 0}, Mask: net.CIDRMask(0, 32)}, GW: net.IP{10, 1, 2, 1}, Priority: 5},
			{Dst: net.IPNet{IP: net.IP{10, 9, 0, 0}, Mask: net.CIDRMask(16, 32)}, GW: net.IP{0, 0, 0, 0}, Scope: &scope, Table: &table},
		},
		DNS: types.DNS{Nameservers: []string{"10.1.2.53"}, Domain: "example.test", Search: []string{"a.test"}},
	}
	if !reflect.DeepEqual(ref, want) {
		t.Errorf("library decoded\n%+v\nwant\n%+v", ref, want)
	}

	// The library's → ours, with the 16-byte IPv4 values net.ParseIP makes.
	_, ipn, _ := net.ParseCIDR("10.1.2.0/24")
	ipn.IP = net.ParseIP("10.1.2.3")
	ref.IPs[0].Address = *ipn
	ref.IPs[0].Gateway = net.ParseIP("10.1.2.1")
	var ours dhcp.Reply
	gobCopy(t, &ref, &ours)
	got := ours.ToResult()
	if !reflect.DeepEqual(got, res) {
		t.Errorf("ours decoded\n%+v\nwant\n%+v", got, res)
	}
}

func TestIPNetPrefix(t *testing.T) {
	tests := []struct {
		n    dhcp.IPNet
		want string // "" for invalid
	}{
		{dhcp.IPNet{IP: net.IP{10, 0, 0, 1}, Mask: net.CIDRMask(8, 32)}, "10.0.0.1/8"},
		{dhcp.IPNet{IP: net.ParseIP("10.0.0.1"), Mask: net.CIDRMask(8, 32)}, "10.0.0.1/8"},
		{dhcp.IPNet{IP: net.ParseIP("10.0.0.1"), Mask: net.CIDRMask(104, 128)}, "10.0.0.1/8"},
		{dhcp.IPNet{IP: net.ParseIP("2001:db8::1"), Mask: net.CIDRMask(64, 128)}, "2001:db8::1/64"},
		{dhcp.IPNet{IP: net.IP{10, 0, 0, 1}}, "10.0.0.1/32"},
		{dhcp.IPNet{IP: net.IP{10, 0, 0, 1}, Mask: net.IPMask{255, 0, 255, 0}}, ""},
		{dhcp.IPNet{IP: net.IP{10, 0, 1}, Mask: net.CIDRMask(8, 32)}, ""},
		{dhcp.IPNet{IP: net.IP{10, 0, 0, 1}, Mask: net.CIDRMask(64, 128)}, ""},
	}
	for _, tt := range tests {
		p, ok := tt.n.Prefix()
		got := ""
		if ok {
			got = p.String()
		}
		if got != tt.want {
			t.Errorf("%v/%v: %q, want %q", tt.n.IP, tt.n.Mask, got, tt.want)
		}
	}
}
