package portmap

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/internal/plugintest"
)

// FuzzConfig feeds any stdin, under every config version, to the portmap
// config parser: never a panic; every accepted mapping has ports in
// 1..65535, one of the three protocols and a host IP that is an address
// or "any"; every condition prints; the config round-trips
// (plugintest.Fixpoint). These are what the nftables rules are built from.
func FuzzConfig(f *testing.F) {
	const maps = `"runtimeConfig":{"portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"tcp"},{"hostPort":53,"containerPort":53,"protocol":"UDP","hostIP":"::ffff:10.0.0.1"},{"hostPort":1,"containerPort":65535,"protocol":"sctp","hostIP":"::"}]}`
	confs := []string{
		`{"cniVersion":"1.0.0","name":"n","type":"portmap"}`,
		`{"cniVersion":"1.0.0","name":"n",` + maps + `,"prevResult":` + prevJSON + `}`,
		`{"cniVersion":"0.4.0","name":"n","snat":false,"masqAll":true,"markMasqBit":31,"prevResult":{"ips":[{"version":"4","address":"10.0.0.2/24"}]}}`,
		`{"name":"n","backend":"iptables","externalSetMarkChain":"X","conditionsV4":["-s","10.0.0.0/8","!","-i","eth0"],"conditionsV6":["--destination fd00::1","-o","br0"]}`,
		`{"name":"n","backend":"nftables","conditionsV4":["ip saddr != 10.1.0.0/16","meta iifname \"eth1\""],"conditionsV6":["ip6","daddr","fd00::/8","oifname","!=","lo"]}`,
		`{"name":"n","conditionsV4":["-s","::ffff:10.0.0.0/104"],"conditionsV6":["ip6","saddr","10.0.0.0/8"]}`,
		`{"name":"n","markMasqBit":13,"externalSetMarkChain":"X"}`,
		`{"name":"n","backend":"pf"}`,
		`{"name":"n","runtimeConfig":{"portMappings":[{"hostPort":0,"containerPort":-1,"protocol":"icmp","hostIP":"fe80::1%eth0"}]}}`,
		`{"name":"n","runtimeConfig":{"portMappings":[{"hostPort":65536,"containerPort":80,"protocol":"tcp","hostIP":"example.com"}]}}`,
		`{"name":"n","prevResult":5}`,
	}
	for _, c := range confs {
		for _, v := range []string{"1.0.0", "0.4.0", "0.3.1", "", "1.1.0"} {
			f.Add([]byte(c), v)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte, version string) {
		c, err := loadConf(data, version)
		if err != nil {
			return
		}
		if len(c.mappings) != len(c.RuntimeConfig.PortMaps) {
			t.Fatalf("%d mappings for %d entries", len(c.mappings), len(c.RuntimeConfig.PortMaps))
		}
		for _, m := range c.mappings {
			if m.hostPort == 0 || m.containerPort == 0 {
				t.Fatalf("accepted port 0: %+v", m)
			}
			switch m.proto {
			case unix.IPPROTO_TCP, unix.IPPROTO_UDP, unix.IPPROTO_SCTP:
			default:
				t.Fatalf("accepted protocol %d", m.proto)
			}
			if m.hostIP.IsValid() && (m.hostIP.Is4In6() || m.hostIP.Zone() != "" || m.hostIP.IsUnspecified()) {
				t.Fatalf("host IP %s not normalised", m.hostIP)
			}
		}
		for _, cond := range append(c.cond4, c.cond6...) {
			_ = cond.String()
		}
		if c.prev != nil {
			containerAddrs(c.prev, "eth0")
		}
		plugintest.Fixpoint(t, c.NetConf, func(b []byte) (*NetConf, error) {
			c2, err := loadConf(b, version)
			if err != nil {
				return nil, err
			}
			return c2.NetConf, nil
		})
	})
}
