package nft

import (
	"testing"

	"github.com/google/nftables"
)

// DeleteReferenceChain deletes the reference's per-attachment chains and
// refuses every other chain: the shared ones, base chains, anyone's, ours.
func TestDeleteReferenceChainRefuses(t *testing.T) {
	t.Parallel()
	nat := &nftables.Table{Family: nftables.TableFamilyIPv4, Name: "nat"}
	for _, c := range []struct {
		table *nftables.Table
		name  string
		ok    bool
	}{
		{nat, "CNI-e30d516c8208bc6dd27ee420", true},
		{nat, "CNI-DN-e30d516c8208bc6dd27ee", true},
		{&nftables.Table{Family: nftables.TableFamilyBridge, Name: "nat"}, "cni-br-iface-ctr1-eth0-mac", true},
		{nat, "CNI-HOSTPORT-DNAT", false},
		{&nftables.Table{Family: nftables.TableFamilyIPv4, Name: "filter"}, "CNI-FORWARD", false},
		{&nftables.Table{Family: nftables.TableFamilyIPv4, Name: "filter"}, "CNI-ADMIN", false},
		{nat, "POSTROUTING", false},
		{nat, "DOCKER", false},
		{&nftables.Table{Family: nftables.TableFamilyINet, Name: "nftcni_masq"}, "CNI-x", false},
		{nil, "CNI-x", false},
	} {
		b := newBatch()
		b.DeleteReferenceChain(&nftables.Chain{Table: c.table, Name: c.name})
		if ok := b.err == nil; ok != c.ok {
			t.Errorf("%v %s: accepted %v, want %v (%v)", c.table, c.name, ok, c.ok, b.err)
		}
		if c.ok && b.Len() != 2 {
			t.Errorf("%s: %d messages, want 2 (flush, delete)", c.name, b.Len())
		}
	}
}
