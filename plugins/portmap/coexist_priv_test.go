package portmap

import (
	"net/netip"
	"testing"

	"github.com/nftcni/nftcni/internal/hostfw"
	"github.com/nftcni/nftcni/internal/plugintest"
	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/ownerid"
)

// TestForwardDrop: portmap without the firewall plugin (bridge and
// portmap, as a Kubernetes node chains them) on a host where Docker's
// iptables-nft rules set the FORWARD policy to DROP — built before the
// container is added, and after. The drop is real (the container's own
// new connections to the outside are dropped: that is the firewall
// plugin's to let through), yet the host port keeps working from outside
// over IPv4 and IPv6, where the reference, which adds no filter rule,
// loses it. CHECK passes in both orders; DEL leaves Docker's ruleset as it
// was and no rule of ours anywhere.
func TestForwardDrop(t *testing.T) {
	for _, late := range []bool{false, true} {
		name := "Docker before ADD"
		if late {
			name = "Docker after ADD"
		}
		t.Run(name, func(t *testing.T) {
			hostfw.Require(t)
			w := newWorld(t)
			ho := privtest.Handle(t, w.outside)
			plugintest.Must(t, ho.AddRoute(netlinkx.Route{Dst: netip.MustParsePrefix("10.88.0.0/24"), Gw: netip.MustParseAddr("192.0.2.1")}))
			host := w.host.NS
			var theirs, saved string
			docker := func() {
				hostfw.Commands(t, host, hostfw.Docker)
				theirs, saved = hostfw.Others(t, host), hostfw.WithoutOurs(hostfw.IptablesSave(t, host))
			}
			if !late {
				docker()
			}
			ctr, prev := w.attach("testnet", "ctr1")
			serveTCP(t, ctr, 80)
			// Docker publishes host port 8080 itself.
			conf := pmConf("testnet", `[{"hostPort":8081,"containerPort":80,"protocol":"tcp"}]`, prev, "")
			w.portmapOK("ADD", ctr, "ctr1", conf)
			w.portmapOK("CHECK", ctr, "ctr1", conf)
			if late {
				docker()
				w.portmapOK("CHECK", ctr, "ctr1", conf)
			}

			wantPeer(t, "outside v4", w.outside, "192.0.2.1:8081", "192.0.2.2")
			wantPeer(t, "outside v6", w.outside, "[2001:db8::1]:8081", "2001:db8::2")
			if privtest.TCPRoundTrip(t, ctr, netip.MustParseAddrPort("192.0.2.2:0"), w.outside, netip.MustParseAddrPort("192.0.2.2:0")).IsValid() {
				t.Error("the container's own connection to the outside passed Docker's DROP policy: the situation is not what it claims")
			}

			w.portmapOK("DEL", ctr, "ctr1", pmConf("testnet", "", prev, ""))
			if n := plugintest.NFTOwned(t, host, ownerid.Owner{Network: "testnet", ContainerID: "ctr1", IfName: "eth0"}); n != 0 {
				t.Errorf("%d objects left in our tables", n)
			}
			if n := hostfw.OursInOthers(t, host); n != 0 {
				t.Errorf("%d rules of ours left in Docker's tables", n)
			}
			hostfw.Diff(t, "Docker's nftables ruleset", theirs, hostfw.Others(t, host))
			hostfw.Diff(t, "iptables-save", saved, hostfw.IptablesSave(t, host))
			wantClosed(t, "after DEL", w.outside, "192.0.2.1:8081")
		})
	}
}
