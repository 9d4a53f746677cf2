package netlinkx_test

import (
	"errors"
	"fmt"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netlinkx"
)

// TestVlan: a VLAN link is created straight into another namespace on a
// lower device of the handle's; its id reads back and it has the lower
// device's MAC. Ids outside 0…4094 are refused before asking the kernel.
func TestVlan(t *testing.T) {
	privtest.RequireLinkKind(t, "vlan")
	_, hh := newNS(t)
	ctr, hc := newNS(t)
	must(t, hh.AddVeth(netlinkx.VethSpec{Name: "up0", PeerName: "peer0"}))
	up := mustLink(t, hh, "up0")
	for _, id := range []int{0, 100, 4094} {
		name := fmt.Sprintf("v%d", id)
		must(t, hh.AddVlan(netlinkx.VlanSpec{ChildSpec: netlinkx.ChildSpec{Name: name, Parent: up.Index, NS: ctr, MTU: 1400}, ID: id}))
		l := mustLink(t, hc, name)
		if l.Kind != "vlan" || l.MTU != 1400 || l.MAC.String() != up.MAC.String() {
			t.Errorf("vlan %d = %+v", id, l)
		}
		got, err := hc.VlanID(name)
		must(t, err)
		if got != id {
			t.Errorf("id %d, want %d", got, id)
		}
	}
	// The same id twice on one lower device: the kernel refuses.
	err := hh.AddVlan(netlinkx.VlanSpec{ChildSpec: netlinkx.ChildSpec{Name: "dup", Parent: up.Index}, ID: 100})
	if !errors.Is(err, unix.EEXIST) {
		t.Errorf("duplicate id: %v", err)
	}
	err = hh.AddVlan(netlinkx.VlanSpec{ChildSpec: netlinkx.ChildSpec{Name: "big", Parent: up.Index}, ID: 4095})
	wantErr(t, err, `adding vlan "big" (id 4095): invalid argument`, unix.EINVAL)
	_, err = hh.VlanID("up0")
	if !errors.Is(err, netlinkx.ErrWrongKind) {
		t.Errorf("VlanID of a veth: %v", err)
	}
}
