package vrf

import (
	"testing"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/internal/plugintest"
	"github.com/nftcni/nftcni/netlinkx"
)

// FuzzConfig feeds any stdin to the vrf config decoder and its prevResult,
// which ADD and CHECK require: never a panic; an accepted config names a
// VRF and no table the kernel reserves (253 to 255); a prevResult
// accepted is there (not null) and, as ADD returns it, prints in the
// config version (plugintest.Prints); the config round-trips
// (plugintest.Fixpoint). The VRF name is not checked as a link name,
// as in the reference: the kernel refuses a bad one when ADD creates it.
func FuzzConfig(f *testing.F) {
	const prev = `{"cniVersion":"1.0.0","interfaces":[{"name":"eth0"}],"ips":[{"address":"10.1.0.5/24","interface":0}]}`
	for _, c := range []string{
		`{"cniVersion":"1.0.0","name":"testnet","type":"vrf","vrfname":"red","prevResult":` + prev + `}`,
		`{"cniVersion":"1.0.0","name":"testnet","type":"vrf","vrfname":"blue","table":1001,"prevResult":` + prev + `}`,
		`{"cniVersion":"1.0.0","name":"testnet","type":"vrf","vrfname":"blue"}`,
		`{"cniVersion":"0.3.1","name":"n","vrfname":"red","prevResult":{"interfaces":[{"name":"eth0"}]}}`,
		`{"cniVersion":"1.0.0","name":"n","vrfname":"red","prevResult":null}`,
		`{"cniVersion":"1.0.0","name":"n","vrfname":"red","prevResult":{"cniVersion":"0.4.0"}}`,
		`{"name":"n","vrfname":"red"}`, `{"name":"n","vrfname":"red","table":1001}`, `{"name":"n","VRFName":"red","Table":7}`,
		`{"name":"n","table":5}`, `{"name":"n","vrfname":"red","table":-1}`, `{"name":"n","vrfname":"red","table":254}`,
		`{"name":"n","vrfname":"red","table":4294967295}`, `{"name":"n","vrfname":"red","table":4294967296}`,
		`{"name":"n","vrfname":"a-name-too-long-for-a-link"}`,
		`null`, `[]`, `{`,
	} {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := loadConf(data)
		if err != nil {
			return
		}
		if c.VRFName == "" || (c.Table != 0 && netlinkx.ReservedTable(int(c.Table))) || (c.Table >= 253 && c.Table <= 255) {
			t.Fatalf("accepted vrf %q table %d", c.VRFName, c.Table)
		}
		plugintest.Fixpoint(t, c, loadConf)
		prev, err := c.prevResult()
		if err != nil {
			return
		}
		if prev == nil {
			t.Fatal("no prevResult and no error")
		}
		if cni.FamilyOf(prev.CNIVersion) != cni.FamilyOf(c.CNIVersion) {
			t.Fatalf("prevResult %q accepted for config %q", prev.CNIVersion, c.CNIVersion)
		}
		plugintest.Prints(t, prev, c.CNIVersion)
	})
}
