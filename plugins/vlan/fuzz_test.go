package vlan

import (
	"testing"

	"github.com/nftcni/nftcni/internal/plugintest"
)

// FuzzConfig feeds any stdin to the vlan config decoder of ADD: never a
// panic; an accepted config names a master and a VLAN id in [0, 4094]
// (4095 is reserved), DEL's and CHECK's decode accept it too and read the
// same, and it round-trips (plugintest.Fixpoint).
func FuzzConfig(f *testing.F) {
	for _, c := range []string{
		`{"cniVersion":"1.0.0","name":"testnet","type":"vlan","master":"up0","vlanId":100}`,
		`{"cniVersion":"1.0.0","name":"testnet","type":"vlan","master":"m0","vlanId":300,"linkInContainer":true,"ipam":{"type":"static"}}`,
		`{"name":"n","master":"eth1"}`,
		`{"name":"n","master":"eth1","vlanId":4094,"mtu":1400,"linkInContainer":true,"ipam":{"type":"static"}}`,
		`{"name":"n","MASTER":"eth1","VLANID":7}`,
		`{"name":"n","master":"eth1","vlanId":0,"mtu":-1}`,
		`{"name":"n","vlanId":5}`, `{"name":"n","master":"eth1","vlanId":4095}`, `{"name":"n","master":"eth1","vlanId":-3}`,
		`{"name":"n","master":"eth1","vlanId":1.5}`, `{"name":"n","master":7}`, `{"name":"n","vlanId":9999}`,
		`{"cniVersion":"1.0.0","name":"testnet","type":"vlan","master":"up0","vlanId":"100"}`,
		`{"name":"n","master":"eth1","vlanId":1e3}`, `{"name":"n","master":"eth1","vlanId":18446744073709551616}`,
		`null`, `[]`, `{`,
	} {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := loadConf(data)
		if err != nil {
			return
		}
		if c.Master == "" || c.VlanID < 0 || c.VlanID > 4094 {
			t.Fatalf("accepted master %q VLAN id %d", c.Master, c.VlanID)
		}
		d, err := decode(data)
		if err != nil || d.Master != c.Master || d.VlanID != c.VlanID || d.MTU != c.MTU || d.LinkInContainer != c.LinkInContainer {
			t.Fatalf("DEL reads %+v %v, ADD %+v", d, err, c)
		}
		plugintest.Fixpoint(t, c, loadConf)
	})
}
