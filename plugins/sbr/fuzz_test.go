package sbr

import (
	"math"
	"slices"
	"testing"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/internal/plugintest"
)

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// FuzzConfig feeds any stdin and interface name to the sbr config decoder
// and to the choice of the prevResult addresses ADD makes for that
// interface: never a panic; an accepted table is in [1, 2^32-1]; accepted
// gateways are at most one IPv4 and one IPv6 address; the
// addresses chosen are those of prevResult, in order, that carry no
// interface index, an index out of range or the index of an interface of
// that name — and a prevResult without any address is refused; the
// prevResult, which ADD returns, is of the config version's family and
// prints in the config version (plugintest.Prints); the config round-trips (plugintest.Fixpoint).
func FuzzConfig(f *testing.F) {
	const prev = `{"cniVersion":"1.0.0","interfaces":[{"name":"eth1","sandbox":"/run/netns/x"}],` +
		`"ips":[{"address":"10.2.0.5/24","gateway":"10.2.0.1","interface":0},{"address":"fd00:2::5/64","gateway":"fd00:2::1","interface":0}]}`
	for _, c := range []string{
		`{"cniVersion":"1.0.0","name":"testnet","type":"sbr","prevResult":` + prev + `}`,
		`{"cniVersion":"1.0.0","name":"testnet","type":"sbr","table":500,"prevResult":` + prev + `}`,
		`{"cniVersion":"1.0.0","name":"n"}`, `{"cniVersion":"1.0.0","name":"n","prevResult":null}`,
		`{"cniVersion":"1.0.0","name":"n","prevResult":{"interfaces":[{"name":"eth1"}]}}`,
		`{"cniVersion":"1.0.0","name":"n","prevResult":{"interfaces":[{"name":"eth0"},{"name":"eth1"}],"ips":[` +
			`{"address":"10.1.0.5/24","interface":0},{"address":"10.2.0.5/24","interface":1},{"address":"10.3.0.5/24"},{"address":"10.4.0.5/24","interface":7}]}}`,
		`{"cniVersion":"1.0.0","name":"n","prevResult":{"interfaces":[{"name":"eth0"}],"ips":[{"address":"10.1.0.5/24","interface":0}]}}`,
		`{"cniVersion":"0.3.1","name":"n","prevResult":{"ips":[{"version":"4","address":"10.1.0.5/24","interface":-1}]}}`,
		`{"cniVersion":"0.2.0","name":"n","prevResult":{"ip4":{"ip":"10.1.0.5/24","gateway":"10.1.0.1"}}}`,
		`{"name":"n","table":"main"}`, `{"name":"n","table":0}`, `{"name":"n","table":-1}`,
		`{"name":"n","table":4294967295}`, `{"name":"n","table":4294967296}`, `{"name":"n","table":null}`,
		`{"name":"n","gateways":["10.0.0.254","fd00::fe"],"addSourceHints":true}`, `{"name":"n","gateways":["::ffff:10.0.0.1"]}`,
		`{"name":"n","gateways":["10.0.0.1","10.0.0.2"]}`, `{"name":"n","gateways":["x"]}`, `{"name":"n","gateways":"10.0.0.1"}`,
		`{"name":"n","addSourceHints":"yes"}`,
		`null`, `[]`, `{`,
	} {
		for _, ifName := range []string{"eth1", "eth0"} {
			f.Add([]byte(c), ifName)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte, ifName string) {
		c, err := loadConf(data)
		if err != nil {
			return
		}
		if c.Table != nil && (*c.Table < 1 || int64(*c.Table) > math.MaxUint32) {
			t.Fatalf("accepted table %d", *c.Table)
		}
		if len(c.Gateways) > 2 || (c.gw4.IsValid() && !c.gw4.Is4()) || (c.gw6.IsValid() && !c.gw6.Is6()) ||
			len(c.Gateways) != btoi(c.gw4.IsValid())+btoi(c.gw6.IsValid()) {
			t.Fatalf("accepted gateways %q as %v %v", c.Gateways, c.gw4, c.gw6)
		}
		plugintest.Fixpoint(t, c, loadConf)
		if cni.ValidateIfName(ifName) != nil {
			return // the dispatcher refuses it before the plugin runs
		}
		ips, err := c.addrs(ifName)
		if err != nil {
			return
		}
		prev, err := c.PrevResult()
		if err != nil || prev == nil || len(prev.IPs) == 0 {
			t.Fatalf("addresses %v chosen from prevResult %v %v", ips, prev, err)
		}
		var want []string
		for _, ip := range prev.IPs {
			if i := ip.Interface; i == nil || *i < 0 || *i >= len(prev.Interfaces) || prev.Interfaces[*i].Name == ifName {
				want = append(want, ip.Address.String())
			}
		}
		var got []string
		for _, ip := range ips {
			got = append(got, ip.Address.String())
		}
		if !slices.Equal(got, want) {
			t.Fatalf("addresses %v for %s, want %v", got, ifName, want)
		}
		if cni.FamilyOf(prev.CNIVersion) != cni.FamilyOf(c.CNIVersion) {
			t.Fatalf("prevResult %q accepted for config %q", prev.CNIVersion, c.CNIVersion)
		}
		plugintest.Prints(t, prev, c.CNIVersion)
	})
}
