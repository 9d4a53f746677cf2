package ptp

import (
	"testing"

	"github.com/nftcni/nftcni/internal/plugintest"
)

// TestRepeatedAdd: ptp asks IPAM before it makes the veth, so a repeated
// ADD in the live attachment's own namespace is refused by host-local
// ("duplicate allocation"); that refusal must not release the live
// address, nor remove the live attachment's masquerade.
func TestRepeatedAdd(t *testing.T) {
	t.Parallel()
	plugintest.RepeatedAdds(t, newHost, func(dir string, _ int) string {
		return conf("1.0.0", `,"ipMasq":true`+plugintest.HostLocal(dir, "10.71.0.0/24"))
	}, plugintest.KeepsNFT)
}
