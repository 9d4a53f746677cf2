package ptp

import (
	"testing"

	"github.com/nftcni/nftcni/internal/plugintest"
	"github.com/nftcni/nftcni/plugins/internal/vethplugin"
)

// FuzzConfig feeds any stdin to the ptp config decoder, which every
// command uses and which validates nothing beyond the JSON types, and to
// ADD's backend check: never a panic; the backend ADD accepts for ipMasq
// is absent, "iptables" or "nftables"; an accepted config round-trips
// (plugintest.Fixpoint), the backend's absence included: null and absent
// decode as nil, "" does not.
func FuzzConfig(f *testing.F) {
	for _, c := range []string{
		`{"cniVersion":"1.0.0","name":"testnet","type":"ptp"}`,
		`{"cniVersion":"1.0.0","name":"testnet","type":"ptp","ipMasq":true,"ipMasqBackend":"iptables","ipam":{"type":"static"}}`,
		`{"cniVersion":"1.0.0","name":"testnet","type":"ptp","mtu":1400,"ipam":{"type":"host-local","ranges":[[{"subnet":"10.1.1.0/24"}]]}}`,
		`{"cniVersion":"1.1.0","name":"testnet","type":"ptp","ipMasq":true,"ipam":{"type":"static"},"cni.dev/valid-attachments":[{"containerID":"keep","ifname":"eth0"}]}`,
		`{"cniVersion":"1.1.0","name":"testnet","type":"ptp","ipMasq":true,"cni.dev/attachments":[]}`,
		`{"name":"n","IPMASQ":true,"Mtu":1400,"ipMasqBackend":null}`,
		`{"name":"n","ipMasq":true,"ipMasqBackend":"nftables","dns":{"nameservers":["10.1.1.1"],"search":[]}}`,
		`{"name":"n","ipMasq":true,"ipMasqBackend":""}`, `{"name":"n","ipMasq":true,"ipMasqBackend":"NFTABLES"}`,
		`{"name":"n","mtu":-1}`, `{"name":"n","mtu":"x"}`, `{"name":"n","ipMasq":"yes"}`,
		`null`, `[]`, `{`,
	} {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := loadConf(data)
		if err != nil {
			return
		}
		if err := vethplugin.CheckMasqBackend(c.IPMasqBackend); err == nil && c.IPMasqBackend != nil &&
			*c.IPMasqBackend != "iptables" && *c.IPMasqBackend != "nftables" {
			t.Fatalf("ipMasqBackend %q accepted", *c.IPMasqBackend)
		}
		plugintest.Fixpoint(t, c, func(b []byte) (*NetConf, error) {
			again, err := loadConf(b)
			if err == nil && (again.IPMasqBackend == nil) != (c.IPMasqBackend == nil) {
				t.Fatalf("ipMasqBackend %v, %v after a round trip", c.IPMasqBackend, again.IPMasqBackend)
			}
			return again, err
		})
	})
}
