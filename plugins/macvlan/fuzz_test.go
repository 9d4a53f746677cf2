package macvlan

import (
	"testing"

	"github.com/nftcni/nftcni/internal/plugintest"
)

// FuzzConfig feeds any stdin and CNI_ARGS to the macvlan config decoder,
// the one of the child-link plugins (macvlan, ipvlan, vlan, tap) with the
// most to decode: the mode and the MAC in three places with a precedence.
// Never a panic; the mode decoded is the one named; the config
// round-trips (plugintest.Fixpoint, which for macvlan also proves the
// effective MAC, CNI_ARGS' included, is kept in the decoded config).
func FuzzConfig(f *testing.F) {
	plugintest.AddSeeds(f, []string{
		`{"cniVersion":"1.0.0","name":"n","type":"macvlan","master":"eth0"}`,
		`{"name":"n","mode":"private","mtu":1400,"mac":"02:00:00:00:00:01","linkInContainer":true,"bcqueuelen":100}`,
		`{"name":"n","mode":"passthru","runtimeConfig":{"mac":"02:00:00:00:00:03"}}`,
		`{"name":"n","MODE":"vepa","Mac":"00:00:5e:00:53:01:02:03"}`,
		`{"name":"n","mode":"nope"}`, `{"name":"n","mac":"zz"}`, `{"name":"n","bcqueuelen":-1}`,
	}, []string{"", "MAC=02:00:00:00:00:02", "IgnoreUnknown=1;MAC=", "MAC=00:00:00:00:fe:80:00:00:00:00:00:00:02:00:5e:10:00:00:00:01", "IP=1.2.3.4"})
	f.Fuzz(func(t *testing.T, data []byte, args string) {
		c, err := loadConf(data, args)
		if err != nil {
			return
		}
		if c.mac != nil && c.Mac == "" {
			t.Fatalf("MAC %v without its text", c.mac)
		}
		if m, err := modeFromString(c.Mode); err != nil || m != c.mode {
			t.Fatalf("mode %q: %v %v", c.Mode, m, err)
		}
		plugintest.Fixpoint(t, c, func(b []byte) (*NetConf, error) { return loadConf(b, "") })
	})
}
