package vmtest_test

import (
	"github.com/nftcni/nftcni/internal/guest"
	"testing"

	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/vmtest"
)

// TestRequire: a test says "run me in the VM" and runs there, from an
// ordinary `go test` on the host. In the guest the kernel has every link
// kind and VLAN filtering, so none of these probes skips there
// (NFTCNI_REQUIRE_KIND_ALL=1 would fail them).
func TestRequire(t *testing.T) {
	vmtest.Require(t)
	if !guest.InGuest() {
		t.Fatal("Require returned on the host")
	}
	for _, kind := range []string{"vlan", "macvlan", "ipvlan", "vrf", "dummy", "veth", "bridge"} {
		privtest.RequireLinkKind(t, kind)
	}
	privtest.RequireBridgeVlanFiltering(t)
}
