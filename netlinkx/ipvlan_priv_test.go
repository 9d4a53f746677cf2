package netlinkx_test

import (
	"errors"
	"testing"

	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netlinkx"
)

// TestIPVlan: ipvlans in each mode, created straight into another
// namespace on a lower device of the handle's, share its MAC; the mode
// reads back.
func TestIPVlan(t *testing.T) {
	privtest.RequireLinkKind(t, "ipvlan")
	_, hh := newNS(t)
	ctr, hc := newNS(t)
	must(t, hh.AddVeth(netlinkx.VethSpec{Name: "up0", PeerName: "peer0"}))
	for _, tt := range []struct {
		name string
		mode netlinkx.IPVlanMode
	}{{"iv-l2", netlinkx.IPVlanL2}, {"iv-l3", netlinkx.IPVlanL3}, {"iv-l3s", netlinkx.IPVlanL3S}} {
		// One lower device has one mode: each mode gets its own.
		lower := "up-" + tt.mode.String()
		must(t, hh.AddVeth(netlinkx.VethSpec{Name: lower, PeerName: "p-" + tt.mode.String()}))
		must(t, hh.AddIPVlan(netlinkx.IPVlanSpec{ChildSpec: netlinkx.ChildSpec{Name: tt.name, Parent: mustLink(t, hh, lower).Index, NS: ctr, MTU: 1400}, Mode: tt.mode}))
		l := mustLink(t, hc, tt.name)
		if l.Kind != "ipvlan" || l.MTU != 1400 || l.MAC.String() != mustLink(t, hh, lower).MAC.String() {
			t.Errorf("%s = %+v", tt.name, l)
		}
		got, err := hc.IPVlanMode(tt.name)
		must(t, err)
		if got != tt.mode {
			t.Errorf("%s mode %v, want %v", tt.name, got, tt.mode)
		}
	}
	_, err := hh.IPVlanMode("up0")
	if !errors.Is(err, netlinkx.ErrWrongKind) {
		t.Errorf("IPVlanMode of a veth: %v", err)
	}
}
