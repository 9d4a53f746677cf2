package dummy

import (
	"testing"

	"github.com/nftcni/nftcni/internal/plugintest"
)

// FuzzConfig feeds any stdin to the dummy config decoder, which has only
// the standard keys, and to the IPAM lookup of DEL, GC and STATUS: never a
// panic; both accept and refuse the same configs, and the IPAM DEL, GC and
// STATUS call is the one ADD delegated to; an accepted config round-trips
// (plugintest.Fixpoint).
func FuzzConfig(f *testing.F) {
	for _, c := range []string{
		`{"cniVersion":"1.0.0","name":"testnet","type":"dummy"}`,
		`{"cniVersion":"1.1.0","name":"testnet","type":"dummy","ipam":{"type":"static","addresses":[{"address":"10.1.1.5/24","gateway":"10.1.1.1"}]}}`,
		`{"cniVersion":"1.0.0","name":"testnet","type":"dummy","ipam":{"type":""}}`,
		`{"cniVersion":"1.0.0","name":"testnet","type":"dummy","ipam":{"type":"no-such-ipam"}}`,
		`{"name":"n","IPAM":{"type":"static"},"dns":{"nameservers":["1.1.1.1"]}}`,
		`{"cniVersion":"1.1.0","name":"n","ipam":{"type":"host-local"},"cni.dev/valid-attachments":[{"containerID":"keep","ifname":"eth0"}]}`,
		`{"name":"n","capabilities":{"ips":true},"prevResult":{"cniVersion":"1.0.0"}}`,
		`{"name":"n","ipam":{"type":5}}`, `{"name":"n","ipam":[]}`,
		`null`, `[]`, `{`,
	} {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := loadConf(data)
		typ, ok, ierr := ipamOf(data)
		if err != nil {
			if ierr == nil || ierr.Error() != err.Error() {
				t.Fatalf("ADD refuses (%v), DEL: %v", err, ierr)
			}
			return
		}
		if ierr != nil || !ok || typ != c.IPAM.Type {
			t.Fatalf("ADD delegates to %q, DEL to %q %v %v", c.IPAM.Type, typ, ok, ierr)
		}
		plugintest.Fixpoint(t, c, loadConf)
	})
}
