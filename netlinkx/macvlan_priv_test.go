package netlinkx_test

import (
	"errors"
	"net"
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netlinkx"
)

// TestMacvlan: a macvlan is created straight into another namespace on a
// lower device of the handle's, with the mode, MTU, MAC and broadcast queue
// asked for, and its mode reads back.
func TestMacvlan(t *testing.T) {
	_, hh := newNS(t)
	ctr, hc := newNS(t)
	must(t, hh.AddVeth(netlinkx.VethSpec{Name: "up0", PeerName: "peer0"}))
	up := mustLink(t, hh, "up0")
	mac := net.HardwareAddr{0x02, 0, 0, 0, 0, 0x42}
	for _, tt := range []struct {
		name string
		mode netlinkx.MacvlanMode
	}{
		{"mv-bridge", netlinkx.MacvlanBridge},
		{"mv-private", netlinkx.MacvlanPrivate},
		{"mv-vepa", netlinkx.MacvlanVEPA},
	} {
		must(t, hh.AddMacvlan(netlinkx.MacvlanSpec{
			ChildSpec: netlinkx.ChildSpec{Name: tt.name, Parent: up.Index, NS: ctr, MTU: 1400, MAC: mac},
			Mode:      tt.mode, BcQueueLen: 100,
		}))
		mac[5]++
		if _, err := hh.LinkByName(tt.name); !errors.Is(err, netlinkx.ErrNotFound) {
			t.Errorf("%s visible in the lower device's namespace: %v", tt.name, err)
		}
		l := mustLink(t, hc, tt.name)
		if l.Kind != "macvlan" || l.MTU != 1400 || l.MAC.String() == up.MAC.String() {
			t.Errorf("%s = %+v", tt.name, l)
		}
		got, err := hc.Macvlan(tt.name)
		must(t, err)
		if got.Mode != tt.mode || got.BcQueueLen != 100 {
			t.Errorf("%s: %+v, want mode %v, queue 100", tt.name, got, tt.mode)
		}
	}
	if l := mustLink(t, hc, "mv-bridge"); l.MAC.String() != "02:00:00:00:00:42" {
		t.Errorf("MAC %s", l.MAC)
	}

	// Passthru inherits the lower device's MAC, and there can be only one,
	// on a lower device without other macvlans.
	must(t, hh.AddVeth(netlinkx.VethSpec{Name: "up1", PeerName: "peer1"}))
	up1 := mustLink(t, hh, "up1")
	must(t, hh.AddMacvlan(netlinkx.MacvlanSpec{ChildSpec: netlinkx.ChildSpec{Name: "pt0", Parent: up1.Index}, Mode: netlinkx.MacvlanPassthru}))
	if l := mustLink(t, hh, "pt0"); l.MAC.String() != up1.MAC.String() {
		t.Errorf("passthru MAC %s, lower device %s", l.MAC, up1.MAC)
	}
	err := hh.AddMacvlan(netlinkx.MacvlanSpec{ChildSpec: netlinkx.ChildSpec{Name: "pt1", Parent: up1.Index}, Mode: netlinkx.MacvlanPassthru})
	if !errors.Is(err, unix.EINVAL) {
		t.Errorf("second passthru: %v", err)
	}

	// Errors: missing lower device, name clash, reading another kind.
	err = hh.AddMacvlan(netlinkx.MacvlanSpec{ChildSpec: netlinkx.ChildSpec{Name: "x0", Parent: 4242}})
	wantErr(t, err, `adding macvlan "x0": Link not found`, netlinkx.ErrNotFound)
	err = hh.AddMacvlan(netlinkx.MacvlanSpec{ChildSpec: netlinkx.ChildSpec{Name: "up0", Parent: up.Index}})
	if !errors.Is(err, unix.EEXIST) {
		t.Errorf("name clash: %v", err)
	}
	_, err = hh.Macvlan("up0")
	wantErr(t, err, `reading macvlan attributes of "up0": link is of another kind`, netlinkx.ErrWrongKind)
	_, err = hh.Macvlan("nope0")
	wantErr(t, err, `reading macvlan attributes of "nope0": Link not found`, netlinkx.ErrNotFound)
}

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
		var ke *netlinkx.KindUnsupportedError
		if !errors.As(err, &ke) || ke.Kind != tt.kind || !errors.Is(err, unix.EOPNOTSUPP) {
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
