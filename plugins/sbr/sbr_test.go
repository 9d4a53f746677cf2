package sbr

import (
	"net/netip"
	"testing"

	"github.com/nftcni/nftcni/netlinkx"
)

// No privileges needed: which routes go with an address.

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
