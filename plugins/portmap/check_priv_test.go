package portmap

import (
	"net/netip"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/internal/hostfw"
	"github.com/nftcni/nftcni/internal/plugintest"
	"github.com/nftcni/nftcni/sysctl"

	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/nft/portmap"
	"github.com/nftcni/nftcni/ownerid"
)

// TestCheckWithoutMappings: CHECK without runtimeConfig.portMappings (what
// `cnitool check` and `nftcni check` send) checks the attachment's own
// recorded mappings instead of failing on them; with the mappings, they
// are compared. Drift of the recorded state is found either way.
func TestCheckWithoutMappings(t *testing.T) {
	w := newWorld(t)
	ctr, prev := w.attach("testnet", "chk")
	conf := pmConf("testnet", webAndDNS, prev, "")
	bare := pmConf("testnet", "", prev, "")
	w.portmapOK("ADD", ctr, "chk", conf)

	w.portmapOK("CHECK", ctr, "chk", bare)
	w.portmapOK("CHECK", ctr, "chk", conf)
	fails := func(what, conf, want string) {
		t.Helper()
		w.checkFails(ctr, "chk", what, conf, want)
	}
	fails("other mappings sent", pmConf("testnet", `[{"hostPort":8080,"containerPort":81,"protocol":"tcp"}]`, prev, ""),
		`missing hostport element in ip nftcni_portmap map \"ports\": tcp . 8080 : 10.88.0.2 . 81`)
	fails("no mappings sent", pmConf("testnet", `[]`, prev, ""), `unexpected hostport element`)

	// The recorded state drifts: a mapping now leads to another address
	// (as if the attachment's address had changed), the hairpin element
	// is gone, route_localnet was switched off.
	own := ownerid.Owner{Network: "testnet", ContainerID: "chk", IfName: "eth0"}
	s := portmap.Spec{Owner: own,
		Mappings: []portmap.Mapping{{HostPort: 8080, Proto: unix.IPPROTO_TCP, Target: netip.MustParseAddrPort("10.88.0.99:80")}},
		Hairpin:  []netip.Prefix{netip.MustParsePrefix("10.88.0.2/24"), netip.MustParsePrefix("fd00:88::2/64")},
	}
	plugintest.Must(t, portmap.Setup(w.host.NS, s))
	fails("mapping to another address", bare, `hostport element in ip nftcni_portmap map \"ports\" forwards to 10.88.0.99, which is not an address of the container [10.88.0.2 fd00:88::2]`)
	s.Mappings[0].Target = netip.MustParseAddrPort("10.88.0.2:80")
	s.Hairpin = s.Hairpin[1:]
	plugintest.Must(t, portmap.Setup(w.host.NS, s))
	fails("hairpin element gone", bare, `missing hostport element in ip nftcni_portmap map \"hairpins\": 10.88.0.2 : jump hairpin_24`)

	w.portmapOK("ADD", ctr, "chk", conf) // repaired
	w.portmapOK("CHECK", ctr, "chk", bare)
	plugintest.Must(t, sysctl.Set(w.host.NS, "net/ipv4/conf/cni0/route_localnet", "0"))
	fails("route_localnet off", bare, `route_localnet is off on cni0`)

	// An attachment without mappings has nothing to check.
	ctr2, prev2 := w.attach("testnet", "nomaps")
	w.portmapOK("ADD", ctr2, "nomaps", pmConf("testnet", "", prev2, ""))
	w.portmapOK("CHECK", ctr2, "nomaps", pmConf("testnet", "", prev2, ""))
}

// checkFails runs CHECK of container id with conf, which must fail with a
// message containing want.
func (w *world) checkFails(ctr *netns.NS, id, what, conf, want string) {
	w.t.Helper()
	o := w.portmap("CHECK", ctr, id, conf)
	if o.Status == 0 {
		w.t.Errorf("%s: CHECK passed", what)
	} else if !strings.Contains(o.Stdout, want) {
		w.t.Errorf("%s: %s\n want a message with %q", what, o.Stdout, want)
	}
}

// TestCheckForwardAccepts: CHECK, with and without portMappings, checks
// the attachment's accepts for iptables-nft's FORWARD chains (its claims
// and lookup elements in table inet nftcni_accept, the shared rule in
// each chain) and in the nftablesAcceptChains, so accepts lost to a flush
// fail it, and a repeated ADD repairs them. With conditionsV4 the IPv4
// mappings are rules, which CHECK without portMappings does not decode:
// it cannot know their accepts and leaves the chains IPv4 packets pass
// unchecked, but still checks ip6tables-nft's chain; with portMappings,
// everything is checked.
func TestCheckForwardAccepts(t *testing.T) {
	hostfw.Require(t)
	w := newWorld(t)
	host := w.host.NS
	hostfw.Load(t, host, hostfw.AdminFilter)
	ctr, prev := w.attach("testnet", "fwd")
	optIn := `,"nftablesAcceptChains":["inet filter forward"]`
	conf, bare := pmConf("testnet", webAndDNS, prev, optIn), pmConf("testnet", "", prev, optIn)
	w.portmapOK("ADD", ctr, "fwd", conf)
	w.portmapOK("CHECK", ctr, "fwd", conf)
	w.portmapOK("CHECK", ctr, "fwd", bare)

	hostfw.Commands(t, host, "iptables -F FORWARD")
	for _, c := range []string{conf, bare} {
		w.checkFails(ctr, "fwd", "ip filter FORWARD flushed", c, `chain ip filter FORWARD: the rule accepting marked packets is missing`)
	}
	w.portmapOK("ADD", ctr, "fwd", conf)
	w.portmapOK("CHECK", ctr, "fwd", bare)
	hostfw.Commands(t, host, "nft delete element inet nftcni_accept dnat4 { 10.88.0.2 . tcp . 80 }")
	for _, c := range []string{conf, bare} {
		w.checkFails(ctr, "fwd", "lookup element deleted", c, `table inet nftcni_accept: set dnat4 lacks 10.88.0.2`)
	}
	w.portmapOK("ADD", ctr, "fwd", conf)
	w.portmapOK("CHECK", ctr, "fwd", bare)
	hostfw.Commands(t, host, "nft flush chain inet filter forward")
	for _, c := range []string{conf, bare} {
		// Two mappings to each of two addresses, two native rules each.
		w.checkFails(ctr, "fwd", "inet filter forward flushed", c, `chain inet filter forward: 0 accept rules of this attachment, want 8`)
	}
	w.portmapOK("ADD", ctr, "fwd", conf)

	cond := `,"conditionsV4":["-s","192.0.2.2/32"]` + optIn
	conf, bare = pmConf("testnet", webAndDNS, prev, cond), pmConf("testnet", "", prev, cond)
	w.portmapOK("ADD", ctr, "fwd", conf)
	w.portmapOK("CHECK", ctr, "fwd", conf)
	w.portmapOK("CHECK", ctr, "fwd", bare)
	hostfw.Commands(t, host, "iptables -F FORWARD")
	w.checkFails(ctr, "fwd", "conditionsV4, ip filter FORWARD flushed", conf, `chain ip filter FORWARD: the rule accepting marked packets is missing`)
	w.portmapOK("CHECK", ctr, "fwd", bare)
	hostfw.Commands(t, host, "ip6tables -F FORWARD")
	w.checkFails(ctr, "fwd", "conditionsV4, ip6 filter FORWARD flushed", bare, `chain ip6 filter FORWARD: the rule accepting marked packets is missing`)

	w.portmapOK("DEL", ctr, "fwd", bare)
	if n := hostfw.OursInOthers(t, host); n != 0 {
		t.Errorf("%d rules of ours left in others' tables after DEL", n)
	}
}
