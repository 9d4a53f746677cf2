package nft_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/nft"
	"github.com/nftcni/nftcni/nft/masq"
	"github.com/nftcni/nftcni/ownerid"
)

func TestOwnedElements(t *testing.T) {
	ns := privtest.NewNS(t)
	c, err := nft.Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got, err := c.OwnedElements(); err != nil || len(got) != 0 {
		t.Fatalf("empty namespace: %v, %v", got, err)
	}
	o := ownerid.Owner{Network: "inv", ContainerID: "c1", IfName: "eth0"}
	if err := masq.Setup(ns, o, []netip.Prefix{netip.MustParsePrefix("10.5.0.2/24")}); err != nil {
		t.Fatal(err)
	}
	got, err := c.OwnedElements()
	if err != nil {
		t.Fatal(err)
	}
	// One address: one element in src4, one in local4, and the owner's
	// marker in owners (sorted by set name: local4, owners, src4).
	if len(got) != 3 || !strings.HasPrefix(got[0].String(), "inet nftcni_masq ") || got[0].Comment != o.Tag() ||
		got[1].Set != nft.OwnersSetName || got[1].Comment != nft.MarkerWith(o, "10.5.0.2/24").Comment {
		t.Fatalf("owned elements after Setup: %v", got)
	}
	if err := masq.Teardown(ns, o); err != nil {
		t.Fatal(err)
	}
	if got, err := c.OwnedElements(); err != nil || len(got) != 0 {
		t.Fatalf("after Teardown: %v, %v", got, err)
	}
}
