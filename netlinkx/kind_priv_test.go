package netlinkx_test

import (
	"errors"
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/nlerr"
)

// TestDefaultRouteLink: the device of the main table's first default
// route, IPv4 before IPv6; none without one.
func TestDefaultRouteLink(t *testing.T) {
	_, h := newNS(t)
	_, ok, err := h.DefaultRouteLink()
	must(t, err)
	if ok {
		t.Fatal("default route link in a fresh namespace")
	}
	for _, n := range []string{"v4", "v6"} {
		must(t, h.AddVeth(netlinkx.VethSpec{Name: n, PeerName: n + "p"}))
		must(t, h.SetUp(n))
		must(t, h.SetUp(n+"p"))
	}
	must(t, h.AddAddr("v6", netip.MustParsePrefix("fd00:7::2/64"), netlinkx.AddrOpts{NoDAD: true}))
	v6 := mustLink(t, h, "v6")
	must(t, h.AddRoute(netlinkx.Route{Dst: netip.MustParsePrefix("::/0"), Gw: netip.MustParseAddr("fd00:7::1"), LinkIndex: v6.Index}))
	l, ok, err := h.DefaultRouteLink()
	must(t, err)
	if !ok || l.Name != "v6" {
		t.Errorf("IPv6 only: %v %v", l.Name, ok)
	}
	// A default route in another table does not count.
	v4 := mustLink(t, h, "v4")
	must(t, h.AddAddr("v4", netip.MustParsePrefix("10.7.0.2/24"), netlinkx.AddrOpts{}))
	must(t, h.AddRoute(netlinkx.Route{Dst: netip.MustParsePrefix("0.0.0.0/0"), Gw: netip.MustParseAddr("10.7.0.1"), LinkIndex: v4.Index, Table: 100}))
	if l, _, _ := h.DefaultRouteLink(); l.Name != "v6" {
		t.Errorf("table 100 counted: %s", l.Name)
	}
	must(t, h.AddRoute(netlinkx.Route{Dst: netip.MustParsePrefix("0.0.0.0/0"), Gw: netip.MustParseAddr("10.7.0.1"), LinkIndex: v4.Index}))
	if l, _, _ := h.DefaultRouteLink(); l.Name != "v4" {
		t.Errorf("IPv4 first: %s", l.Name)
	}
}

// TestMissingKindError: where the kernel lacks a driver, creating a link
// of that kind says so (instead of a bare "operation not supported"),
// while errors.Is still finds EOPNOTSUPP. Kernels with all the drivers
// skip it.
func TestMissingKindError(t *testing.T) {
	privtest.Require(t)
	_, h := newNS(t)
	must(t, h.AddVeth(netlinkx.VethSpec{Name: "up0", PeerName: "peer0"}))
	up := mustLink(t, h, "up0")
	child := netlinkx.ChildSpec{Name: "c0", Parent: up.Index}
	ran := false
	for _, tt := range []struct {
		kind string
		add  func() error
	}{
		{"dummy", func() error { return h.AddDummy("c0") }},
		{"ipvlan", func() error { return h.AddIPVlan(netlinkx.IPVlanSpec{ChildSpec: child}) }},
		{"vlan", func() error { return h.AddVlan(netlinkx.VlanSpec{ChildSpec: child, ID: 5}) }},
	} {
		err := tt.add()
		if err == nil {
			must(t, h.DeleteLink("c0"))
			continue
		}
		ran = true
		var ke *nlerr.UnsupportedError
		if !errors.As(err, &ke) || ke.What != tt.kind || !errors.Is(err, unix.EOPNOTSUPP) || !errors.Is(err, errors.ErrUnsupported) {
			t.Errorf("%s: %v", tt.kind, err)
		}
		if want := tt.kind + " not supported by this kernel"; !errors.Is(err, unix.EOPNOTSUPP) || ke == nil || ke.Error() != want {
			t.Errorf("%s: %q, want %q", tt.kind, err, want)
		}
	}
	if !ran {
		t.Skip("this kernel has dummy, ipvlan and vlan")
	}
}
