package netlinkx_test

import (
	"errors"
	"net"
	"testing"

	"golang.org/x/sys/unix"

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
