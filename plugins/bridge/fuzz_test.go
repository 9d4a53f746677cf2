package bridge

import (
	"slices"
	"testing"

	"github.com/nftcni/nftcni/internal/plugintest"
)

// FuzzConfig feeds any stdin and CNI_ARGS to the bridge config decoder and
// ADD's pre-checks: never a panic; an accepted config has a sorted,
// duplicate-free trunk of valid VIDs, a valid access VLAN, and round-trips
// (plugintest.Fixpoint).
func FuzzConfig(f *testing.F) {
	plugintest.AddSeeds(f, []string{
		`{"cniVersion":"1.0.0","name":"n","type":"bridge"}`,
		`{"name":"n","BRIDGE":"br7","IsGateway":true,"ipmasq":true,"VLANTRUNK":[]}`,
		`{"name":"n","isDefaultGateway":true,"ipam":{"type":"host-local","subnet":"10.0.0.0/24"}}`,
		`{"name":"n","vlanTrunk":[{"id":30},{"minID":10,"maxID":12},{"minID":11,"maxID":13,"id":2},{"id":30}]}`,
		`{"name":"n","vlanTrunk":[null,{"id":7}],"vlan":4094}`,
		`{"name":"n","vlanTrunk":[{"minID":1,"maxID":4094}]}`,
		`{"name":"n","ipMasq":true,"ipMasqBackend":"","ipam":{"type":"static"}}`,
		`{"name":"n","disableContainerInterface":true,"ipam":{"type":"static"}}`,
		`{"name":"n","hairpinMode":true,"promiscMode":true}`,
		`{"name":"n","args":{"cni":{"mac":"02:00:00:00:00:02"}},"runtimeConfig":{"mac":"zz"}}`,
		`{"name":"n","mtu":"big"}`, `null`, `[]`, `{`,
	}, []string{"", "MAC=02:00:00:00:00:01", "IgnoreUnknown=1;K8S_POD_NAME=x", "MAC=01:02;", "IP=10.1.1.1"})
	f.Fuzz(func(t *testing.T, data []byte, args string) {
		c, err := loadConf(data, args)
		if err != nil {
			return
		}
		if c.Vlan < 0 || c.Vlan > 4094 {
			t.Fatalf("accepted access VLAN %d", c.Vlan)
		}
		if !slices.IsSorted(c.vlans) || len(slices.Compact(slices.Clone(c.vlans))) != len(c.vlans) {
			t.Fatalf("trunk not a sorted set: %v", c.vlans)
		}
		for _, v := range c.vlans {
			if v < 1 || v > 4094 {
				t.Fatalf("accepted trunk VID %d", v)
			}
		}
		plugintest.Fixpoint(t, c, func(b []byte) (*NetConf, error) { return loadConf(b, "") })
		mac, err := c.addChecks()
		if err == nil && mac == nil && c.mac != "" {
			t.Fatalf("MAC %q accepted but not parsed", c.mac)
		}
	})
}
