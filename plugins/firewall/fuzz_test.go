package firewall

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/internal/plugintest"
	"github.com/nftcni/nftcni/nft/firewall"
)

// FuzzConfig feeds any stdin to the firewall config decoder and computes
// the attachment ADD would install: never a panic; what goes into the
// nftables batch is bounded — an admin chain name of at most 64 printable
// bytes that is not one of ours, a bridge name of 1 to 15 bytes whenever
// a policy other than open applies; a firewalldStateDir accepted is
// absolute; the config round-trips (plugintest.Fixpoint).
func FuzzConfig(f *testing.F) {
	for _, fields := range []string{
		"", `,"backend":"firewalld"`, `,"backend":"iptables","firewalldZone":"z"`,
		`,"ingressPolicy":"same-bridge"`, `,"ingressPolicy":"isolated"`, `,"ingressPolicy":"closed"`,
		`,"iptablesAdminChainName":"MY-ADMIN"`, `,"iptablesAdminChainName":"MY ADMIN"`, `,"iptablesAdminChainName":"forward"`,
		`,"iptablesAdminChainName":"` + strings.Repeat("A", 65) + `"`, `,"backend":5`,
		`,"backend":"firewalld","firewalldZone":"internal","firewalldStateDir":"/run/x"`, `,"firewalldStateDir":"rel/dir"`,
	} {
		for _, prev := range []string{"", bridgePrev, noIfPrev, `{"cniVersion":"1.0.0","interfaces":[{"name":""}],"ips":[{"address":"10.1.0.5/24"}]}`,
			`{"cniVersion":"1.0.0","interfaces":[{"name":"a-very-long-bridge-name"}],"ips":[{"address":"10.1.0.5/24"}]}`, `{"ips":[{"address":"nope"}]}`} {
			f.Add([]byte(conf("1.0.0", fields, prev)))
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := loadConf(data)
		if err != nil {
			return
		}
		plugintest.Fixpoint(t, c, loadConf)
		if checkBackend(c, &cni.CmdArgs{}) == nil && c.FirewalldStateDir != "" && !filepath.IsAbs(c.FirewalldStateDir) {
			t.Fatalf("firewalldStateDir %q accepted", c.FirewalldStateDir)
		}
		prev, err := prevResult(c)
		if err != nil {
			return
		}
		at, err := attachment(c, &cni.CmdArgs{ContainerID: "c1", IfName: "eth0"}, prev)
		if err != nil {
			return
		}
		if n := at.AdminChain; len(n) == 0 || len(n) > maxAdminChainLen || strings.ContainsAny(n, " \"") ||
			(n != firewall.DefaultAdminChain && firewall.ReservedChain(n)) {
			t.Fatalf("admin chain %q accepted", n)
		}
		if at.Policy != firewall.PolicyOpen && (at.Bridge == "" || len(at.Bridge) > 15) {
			t.Fatalf("policy %v with bridge %q", at.Policy, at.Bridge)
		}
	})
}
