package reference

import (
	"net/netip"
	"os"
	"testing"

	"github.com/nftcni/nftcni/internal/hostfw"
	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/nft/masq"
	"github.com/nftcni/nftcni/ownerid"
)

// What Delete adds to every DEL of an attachment the reference never
// made: a table list and, where iptables-nft's tables exist, a few chain
// lookups; no transaction. For scale, the masquerade teardown of one of
// our attachments in the same namespace (one transaction). Root only:
//
//	go test -run '^$' -bench . ./nft/reference/
func BenchmarkDeleteNothing(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root (own network namespaces)")
	}
	a := Attachment{Network: "benchnet", ContainerID: "c0ffee", IfName: "eth0", Parts: Masq | Portmap | Firewall | SpoofCheck,
		Addrs: []netip.Prefix{netip.MustParsePrefix("10.98.0.2/24")}}
	for _, host := range []struct {
		name  string
		setup func(b *testing.B, ns *netns.NS)
	}{
		{"clean host", func(*testing.B, *netns.NS) {}},
		{"host with Docker's iptables-nft rules and the reference's shared chains", func(b *testing.B, ns *netns.NS) {
			hostfw.Commands(b, ns, hostfw.Docker)
			other := refCtr{net: "other", id: "x", ifName: "eth0", addr: netip.MustParsePrefix("10.99.0.2/24"), port: 9000, parts: Masq | Portmap | Firewall}
			hostfw.Run(b, ns, iptablesRestore([]refCtr{other}, false), "iptables-restore", "--noflush")
		}},
	} {
		ns := privtest.NewNS(b)
		host.setup(b, ns)
		b.Run(host.name+"/reference.Delete", func(b *testing.B) {
			for b.Loop() {
				if objs, err := Delete(ns, a); err != nil || len(objs) > 0 {
					b.Fatal(objs, err)
				}
			}
		})
		own := ownerid.Owner{Network: a.Network, ContainerID: a.ContainerID, IfName: a.IfName}
		b.Run(host.name+"/masq.Setup+Teardown (ours, for scale)", func(b *testing.B) {
			for b.Loop() {
				if err := masq.Setup(ns, own, a.Addrs); err != nil {
					b.Fatal(err)
				}
				if err := masq.Teardown(ns, own); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
