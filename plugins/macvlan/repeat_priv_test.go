package macvlan

import (
	"testing"

	"github.com/nftcni/nftcni/internal/plugintest"
)

// TestRepeatedAdd: a repeated ADD of a live attachment fails and leaves
// the live one its address and host-local reservation.
func TestRepeatedAdd(t *testing.T) {
	t.Parallel()
	plugintest.RepeatedAdds(t, func(t *testing.T) *plugintest.Host { return newLAN(t).Host }, func(dir string, _ int) string {
		return conf("1.0.0", plugintest.HostLocal(dir, "10.9.0.0/24"))
	}, nil)
}
