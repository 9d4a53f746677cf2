package portmap

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/nftcni/nftcni/internal/plugintest"
	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/ownerid"
)

// TestMasqAll proves masqAll with packets: a client outside the host
// reaching a container through a mapping of an attachment with masqAll is
// seen by the container as the host (its address on the bridge, over IPv4
// and IPv6, TCP and UDP), while another attachment of the same network
// without it, and traffic routed straight to the container's address,
// still show the real client. CHECK, with and without the
// mappings sent, tells the two apart; DEL removes it, and an ADD without
// it (or without snat) shows the real client again.
func TestMasqAll(t *testing.T) {
	w := newWorld(t)
	all, prevAll := w.attach("testnet", "masq-all")
	plain, prevPlain := w.attach("testnet", "plain")
	serveTCP(t, all, 80)
	serveUDP(t, all, 53, "")
	serveTCP(t, plain, 80)

	const masqAll = `,"masqAll":true`
	conf := pmConf("testnet", webAndDNS, prevAll, masqAll)
	w.portmapOK("ADD", all, "masq-all", conf)
	w.portmapOK("ADD", plain, "plain", pmConf("testnet", `[{"hostPort":9090,"containerPort":80,"protocol":"tcp"}]`, prevPlain, ""))

	wantPeer(t, "masqAll v4", w.outside, "192.0.2.1:8080", "10.88.0.1")
	wantPeer(t, "masqAll v6", w.outside, "[2001:db8::1]:8080", "fd00:88::1")
	if got, err := exchangeUDP(w.outside, "192.0.2.1:8053"); err != nil || got != "10.88.0.1 ping" {
		t.Errorf("masqAll UDP: %q %v, want the host's bridge address as the peer", got, err)
	}
	if got, err := exchangeUDP(w.outside, "[2001:db8::1]:8053"); err != nil || got != "fd00:88::1 ping" {
		t.Errorf("masqAll UDP v6: %q %v, want the host's bridge address as the peer", got, err)
	}
	wantPeer(t, "without masqAll, same network", w.outside, "192.0.2.1:9090", "192.0.2.2")
	// Hairpin and localhost are masqueraded as before.
	wantPeer(t, "masqAll hairpin", all, "10.88.0.1:8080", "10.88.0.1")
	wantPeer(t, "masqAll localhost", w.host.NS, "127.0.0.1:8080", "10.88.0.1")
	// Only connections through a mapping: routed straight to the
	// container's address, the client keeps its source.
	ho := privtest.Handle(t, w.outside)
	eth0 := plugintest.MustLink(t, ho, "eth0")
	for _, r := range []netlinkx.Route{
		{Dst: netip.MustParsePrefix("10.88.0.0/24"), Gw: netip.MustParseAddr("192.0.2.1"), LinkIndex: eth0.Index},
		{Dst: netip.MustParsePrefix("fd00:88::/64"), Gw: netip.MustParseAddr("2001:db8::1"), LinkIndex: eth0.Index},
	} {
		plugintest.Must(t, ho.AddRoute(r))
	}
	wantPeer(t, "routed straight to the container", w.outside, "10.88.0.2:80", "192.0.2.2")
	wantPeer(t, "routed straight to the container, v6", w.outside, "[fd00:88::2]:80", "2001:db8::2")

	bare := pmConf("testnet", "", prevAll, masqAll)
	checkFails := func(what, id, conf, want string) {
		t.Helper()
		ctr := all
		if id == "plain" {
			ctr = plain
		}
		o := w.portmap("CHECK", ctr, id, conf)
		if o.Status == 0 {
			t.Errorf("%s: CHECK passed", what)
		} else if !strings.Contains(o.Stdout, want) {
			t.Errorf("%s: %s\n want a message with %q", what, o.Stdout, want)
		}
	}
	w.portmapOK("CHECK", all, "masq-all", conf)
	w.portmapOK("CHECK", all, "masq-all", bare)
	const allHairpin = `missing hostport element in ip nftcni_portmap map \"hairpins\": 10.88.0.2 : jump hairpin_24`
	checkFails("masqAll state, config without it", "masq-all", pmConf("testnet", webAndDNS, prevAll, ""), allHairpin)
	checkFails("masqAll state, config without it, no mappings sent", "masq-all", pmConf("testnet", "", prevAll, ""), allHairpin)
	const plainHairpin = `missing hostport element in ip nftcni_portmap map \"hairpins\": 10.88.0.3 : jump hairpin_0`
	checkFails("plain state, config with masqAll", "plain", pmConf("testnet", `[{"hostPort":9090,"containerPort":80,"protocol":"tcp"}]`, prevPlain, masqAll), plainHairpin)
	checkFails("plain state, config with masqAll, no mappings sent", "plain", pmConf("testnet", "", prevPlain, masqAll), plainHairpin)

	own := ownerid.Owner{Network: "testnet", ContainerID: "masq-all", IfName: "eth0"}
	w.portmapOK("DEL", all, "masq-all", bare)
	if n := plugintest.NFTOwned(t, w.host.NS, own); n != 0 {
		t.Errorf("%d owned elements left after DEL", n)
	}
	wantClosed(t, "after DEL", w.outside, "192.0.2.1:8080")
	checkFails("after DEL", "masq-all", conf, "missing hostport element")

	// The same attachment added again: without masqAll the real client
	// shows (nothing of the old state masquerades); switched on by a
	// re-ADD (which replaces the hairpin elements in place) it is masked
	// again; without snat masqAll does nothing, as in the reference.
	for _, step := range []struct{ extra, peer4, peer6 string }{
		{"", "192.0.2.2", "2001:db8::2"},
		{masqAll, "10.88.0.1", "fd00:88::1"},
		{`,"snat":false` + masqAll, "192.0.2.2", "2001:db8::2"},
	} {
		c := pmConf("testnet", webAndDNS, prevAll, step.extra)
		w.portmapOK("ADD", all, "masq-all", c)
		wantPeer(t, "ADD with `"+step.extra+"`", w.outside, "192.0.2.1:8080", step.peer4)
		wantPeer(t, "ADD with `"+step.extra+"` v6", w.outside, "[2001:db8::1]:8080", step.peer6)
		w.portmapOK("CHECK", all, "masq-all", c)
		w.portmapOK("CHECK", all, "masq-all", pmConf("testnet", "", prevAll, step.extra))
	}
	w.portmapOK("DEL", all, "masq-all", bare)
	if n := plugintest.NFTOwned(t, w.host.NS, own); n != 0 {
		t.Errorf("%d owned elements left after the second DEL", n)
	}
	wantPeer(t, "the other attachment after DEL", w.outside, "192.0.2.1:9090", "192.0.2.2")
}
