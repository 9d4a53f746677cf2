package vlan

import (
	"testing"

	"github.com/nftcni/nftcni/internal/plugintest"
)

// TestRepeatedAdd: a repeated ADD of a live attachment fails and leaves
// the live one its address and host-local reservation (needs vlan: runs
// in the VM). Each ADD uses its own VLAN ID (100 + i): the kernel allows
// one link per ID on a master, so with one ID every repeat would be
// refused by the kernel before IPAM is asked.
func TestRepeatedAdd(t *testing.T) {
	t.Parallel()
	plugintest.RepeatedAdds(t, func(t *testing.T) *plugintest.Host { return newTrunk(t).Host }, func(dir string, i int) string {
		return conf("1.0.0", 100+i, plugintest.HostLocal(dir, "10.9.0.0/24"))
	}, nil)
}
