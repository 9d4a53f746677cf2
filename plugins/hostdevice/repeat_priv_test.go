package hostdevice

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/nftcni/nftcni/internal/plugintest"
	"github.com/nftcni/nftcni/netlinkx"
)

// TestRepeatedAdd: a repeated ADD of a live attachment fails and leaves
// the live one its address, its host-local reservation and its state file
// (what DEL needs to give the device back as it was). Each ADD names its
// own device, hd0 … hd3: veths of the host.
func TestRepeatedAdd(t *testing.T) {
	t.Parallel()
	var state string
	world := func(t *testing.T) *plugintest.Host {
		th := plugintest.NewHost(t, "host-device")
		for i := range 4 {
			plugintest.Must(t, th.H.AddVeth(netlinkx.VethSpec{Name: fmt.Sprint("hd", i), PeerName: fmt.Sprint("hp", i)}))
		}
		state = t.TempDir()
		return th
	}
	plugintest.RepeatedAdds(t, world, func(dir string, i int) string {
		return fmt.Sprintf(`{"cniVersion":"1.0.0","name":"testnet","type":"host-device","stateDir":%q,"device":"hd%d"%s}`,
			state, i, plugintest.HostLocal(dir, "10.74.0.0/24"))
	}, func(t *testing.T, h *plugintest.Host) func(t *testing.T) {
		path := filepath.Join(state, "live:eth0.json")
		before, err := os.ReadFile(path)
		plugintest.Must(t, err)
		return func(t *testing.T) {
			after, err := os.ReadFile(path)
			if err != nil || string(after) != string(before) {
				t.Errorf("the live attachment's state file: %q (%v), was %q", after, err, before)
			}
		}
	})
}
