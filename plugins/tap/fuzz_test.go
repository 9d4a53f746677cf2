package tap

import (
	"bytes"
	"net"
	"testing"

	"github.com/nftcni/nftcni/internal/plugintest"
)

// FuzzConfig feeds any stdin and CNI_ARGS to the tap config decoder: never
// a panic; an accepted config has an MTU of at least 0, and its effective
// MAC is runtimeConfig.mac whenever that is set, the top-level mac when
// CNI_ARGS are empty. It round-trips (plugintest.Fixpoint) under the
// same CNI_ARGS, with the same effective MAC: unlike macvlan's, tap's
// decoder does not write the MAC of CNI_ARGS back into the config, so the
// encoding alone does not carry it (and a top-level mac that CNI_ARGS
// override is never parsed: `{"mac":"zz"}` with MAC=02:00:00:00:00:01 is
// accepted, the same config alone is not).
func FuzzConfig(f *testing.F) {
	plugintest.AddSeeds(f, []string{
		`{"cniVersion":"1.0.0","name":"testnet","type":"tap"}`,
		`{"cniVersion":"1.0.0","name":"testnet","type":"tap","bridge":"br0"}`,
		`{"cniVersion":"1.0.0","name":"testnet","type":"tap","multiQueue":true,"owner":4242,"group":0,"mac":"02:00:00:00:00:cc"}`,
		`{"cniVersion":"1.0.0","name":"testnet","type":"tap","mtu":1400,"selinuxContext":"system_u:system_r:container_t:s0","ipam":{"type":"static"}}`,
		`{"name":"n","mac":"02:00:00:00:00:01"}`,
		`{"name":"n","mac":"02:00:00:00:00:01","runtimeConfig":{"mac":"02:00:00:00:00:03"}}`,
		`{"name":"n","MAC":"02:00:00:00:00:04","MultiQueue":true}`,
		`{"name":"n","args":{"cni":{"whatever":1}}}`, `{"name":"n","args":null}`,
		`{"name":"n","mac":"nope"}`, `{"name":"n","mtu":"x"}`, `{"name":"n","mtu":-1}`, `{"name":"n","owner":-1}`,
		`{"name":"n","owner":4294967296}`, `{"name":"n","args":"x"}`,
		`null`, `[]`, `{`,
	}, []string{"", "MAC=02:00:00:00:00:02", "MAC=zz", "IP=10.1.1.1", "IgnoreUnknown=1;IP=10.1.1.1", "MAC=", "MAC=00:00:00:00:fe:80:00:00:00:00:00:00:02:00:5e:10:00:00:00:01"})
	f.Fuzz(func(t *testing.T, data []byte, args string) {
		c, err := loadConf(data, args)
		if err != nil {
			return
		}
		if c.MTU < 0 {
			t.Fatalf("accepted mtu %d", c.MTU)
		}
		want := c.RuntimeConfig.Mac
		if want == "" && args == "" {
			want = c.MAC
		}
		if want != "" {
			hw, err := net.ParseMAC(want)
			if err != nil || !bytes.Equal(hw, c.mac) {
				t.Fatalf("effective MAC %v, want %q (%v)", c.mac, want, err)
			}
		}
		plugintest.Fixpoint(t, c, func(b []byte) (*NetConf, error) {
			again, err := loadConf(b, args)
			if err == nil && !bytes.Equal(again.mac, c.mac) {
				t.Fatalf("effective MAC %v, %v after a round trip", c.mac, again.mac)
			}
			return again, err
		})
	})
}
