package loopback

import (
	"bytes"
	"testing"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/internal/plugintest"
)

// FuzzConfig feeds any stdin to the loopback config decoder (the standard
// keys and the prevResult, all ADD reads): never a panic; a prevResult is
// there exactly when the config has one that is not null, is of the
// config version's family, and prints in the config version
// (plugintest.Prints), since a chained ADD returns it unchanged after
// bringing lo up; the config round-trips (plugintest.Fixpoint).
func FuzzConfig(f *testing.F) {
	for _, c := range []string{
		`{"cniVersion":"1.1.0","name":"lo-net","type":"loopback"}`,
		`{"cniVersion":"0.4.0","name":"lo-net","type":"loopback"}`,
		`{"cniVersion":"0.2.0","name":"lo-net","type":"loopback"}`,
		`{"cniVersion":"1.0.0","name":"n","type":"loopback","prevResult":{"cniVersion":"1.0.0","ips":[{"address":"10.9.0.2/24"}]}}`,
		`{"cniVersion":"1.1.0","name":"n","prevResult":{"cniVersion":"0.4.0"}}`,
		`{"cniVersion":"0.3.1","name":"n","prevResult":{"interfaces":[{"name":"lo"}],"ips":[{"version":"4","address":"127.0.0.1/8","interface":0}]}}`,
		`{"cniVersion":"0.2.0","name":"n","prevResult":{"ip4":{"ip":"10.1.0.5/24"}}}`,
		`{"cniVersion":"0.2.0","name":"n","prevResult":{}}`,
		`{"cniVersion":"1.0.0","name":"n","prevResult":null}`,
		`{"cniVersion":"1.0.0","name":"n","prevResult":{"CNIVersion":"1.0.0","cniVersion":""}}`,
		`{"cniVersion":"1.0.0","name":"n","prevResult":{"ips":[{"address":"x"}]}}`,
		`{"cniVersion":"9.9.9","name":"n","prevResult":{}}`,
		`{"cniVersion":5}`, `null`, `[]`, `{`,
	} {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, prev, err := loadConf(data)
		if err != nil {
			return
		}
		if has := len(c.RawPrevResult) != 0 && !bytes.Equal(c.RawPrevResult, []byte("null")); has != (prev != nil) {
			t.Fatalf("prevResult %s parsed as %v", c.RawPrevResult, prev)
		}
		if prev != nil {
			if cni.FamilyOf(prev.CNIVersion) != cni.FamilyOf(c.CNIVersion) {
				t.Fatalf("prevResult %q accepted for config %q", prev.CNIVersion, c.CNIVersion)
			}
			plugintest.Prints(t, prev, c.CNIVersion)
		}
		plugintest.Fixpoint(t, c, func(b []byte) (*cni.NetConf, error) {
			again, _, err := loadConf(b)
			return again, err
		})
	})
}
