package sbr

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/internal/plugintest"
	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/sysctl"
)

// Tests of the keys the reference added in v1.10.0: `gateways` and
// `addSourceHints`.

// mainWithSrc lists the main table's routes of dev as text with their
// preferred source (dst dev [src]), sorted.
func mainWithSrc(t *testing.T, h *netlinkx.Handle, dev string) []string {
	t.Helper()
	rs, err := h.Routes(0, 0)
	plugintest.Must(t, err)
	idx := plugintest.MustLink(t, h, dev).Index
	var out []string
	for _, r := range rs {
		if r.LinkIndex != idx {
			continue
		}
		s := r.Dst.String()
		if r.Gw.IsValid() {
			s += " via " + r.Gw.String()
		}
		s += " dev " + dev
		if r.Src.IsValid() {
			s += " src " + r.Src.String()
		}
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// TestSourceHints: the runtime's address 10.2.0.7 is a secondary address
// of eth1 (10.2.0.5 came first, so the kernel's connected route prefers
// it). Without addSourceHints, sbr moves the connected route into the
// address's table and a socket with no source bound can no longer reach
// eth1's own subnet (its packets follow the default route out of eth0).
// With addSourceHints the subnet route stays in main, with 10.2.0.7 as
// preferred source: the router sees the datagram come from the runtime's
// address, and replies to the client behind the router still leave through
// eth1 (the source-based part still works). A gateway route of eth1 leaves
// main either way; CHECK notices a hint that is gone.
func TestSourceHints(t *testing.T) {
	t.Parallel()
	prev7 := `{"cniVersion":"1.0.0","interfaces":[{"name":"eth1","sandbox":"SANDBOX"}],` +
		`"ips":[{"address":"10.2.0.7/24","gateway":"10.2.0.1","interface":0},{"address":"fd00:2::5/64","gateway":"fd00:2::1","interface":0}]}`
	setup := func(t *testing.T) *world {
		w := newWorld(t)
		plugintest.Must(t, w.hc.AddAddr("eth1", netip.MustParsePrefix("10.2.0.7/24"), netlinkx.AddrOpts{}))
		hb := privtest.Handle(t, w.b)
		plugintest.Must(t, hb.AddAddr("b0", netip.MustParsePrefix("fd00:2::1/64"), netlinkx.AddrOpts{NoDAD: true}))
		plugintest.Must(t, w.hc.AddRoute(netlinkx.Route{Dst: netip.MustParsePrefix("198.51.100.0/24"),
			Gw: netip.MustParseAddr("10.2.0.1"), LinkIndex: w.link(t, "eth1")}))
		return w
	}
	// fromCtr sends from the container, no source bound, to the router's
	// address on eth1's subnet, and returns the source the router saw.
	fromCtr := func(t *testing.T, w *world, dst string) netip.Addr {
		seen, echoed := privtest.UDPExchange(t, w.ctr, w.b, netip.AddrPort{}, netip.MustParseAddr(dst), time.Second)
		if !echoed {
			return netip.Addr{}
		}
		return seen.Addr()
	}
	before := func(t *testing.T, w *world) {
		if got := fromCtr(t, w, "10.2.0.1"); got != netip.MustParseAddr("10.2.0.5") {
			t.Fatalf("before sbr the router sees %v, want the kernel's primary 10.2.0.5: the test proves nothing", got)
		}
	}

	t.Run("without", func(t *testing.T) {
		t.Parallel()
		w := setup(t)
		before(t, w)
		w.th.OK(w.call("ADD", w.conf(prev7, "")))
		if got := fromCtr(t, w, "10.2.0.1"); got.IsValid() {
			t.Errorf("without addSourceHints the subnet is still reached by destination (from %v): the contrast proves nothing", got)
		}
		wantList(t, "main", mainWithSrc(t, w.hc, "eth1"))
	})

	t.Run("with", func(t *testing.T) {
		t.Parallel()
		w := setup(t)
		before(t, w)
		cfg := w.conf(prev7, `,"addSourceHints":true`)
		w.th.OK(w.call("ADD", cfg))
		if got := fromCtr(t, w, "10.2.0.1"); got != netip.MustParseAddr("10.2.0.7") {
			t.Errorf("with addSourceHints the router sees %v, want 10.2.0.7", got)
		}
		if got := fromCtr(t, w, "fd00:2::1"); got != netip.MustParseAddr("fd00:2::5") {
			t.Errorf("IPv6: the router sees %v, want fd00:2::5", got)
		}
		if !privtest.UDPRoundTrip(t, w.cli, w.ctr, netip.MustParseAddr("10.2.0.7")) {
			t.Error("the client behind the router is not answered: source-based routing broken by the hints")
		}
		// Kernel state: the on-link routes stay in main with the hint (the
		// IPv6 one in place, at the kernel's metric, so it is the one
		// used); the gateway route left main for the table.
		wantList(t, "main", mainWithSrc(t, w.hc, "eth1"),
			"10.2.0.0/24 dev eth1 src 10.2.0.7", "fd00:2::/64 dev eth1 src fd00:2::5", "fe80::/64 dev eth1")
		for dst, src := range map[string]string{"10.2.0.99": "10.2.0.7", "fd00:2::99": "fd00:2::5"} {
			r, err := w.hc.RouteTo(netip.MustParseAddr(dst))
			plugintest.Must(t, err)
			if r.Src.String() != src || r.LinkIndex != w.link(t, "eth1") {
				t.Errorf("route to %s: src %v dev %d, want src %s dev eth1", dst, r.Src, r.LinkIndex, src)
			}
		}
		wantList(t, "rules", w.ourRules(t), "from 10.2.0.7/32 lookup 100", "from fd00:2::5/128 lookup 101")
		wantList(t, "table 100", w.routes(t, 100), "0.0.0.0/0 via 10.2.0.1 dev eth1", "10.2.0.0/24 dev eth1",
			"198.51.100.0/24 via 10.2.0.1 dev eth1", "fd00:2::/64 dev eth1", "fe80::/64 dev eth1")
		w.th.OK(w.call("CHECK", cfg))

		// A repeated ADD changes nothing.
		w.th.OK(w.call("ADD", cfg))
		wantList(t, "main after a second ADD", mainWithSrc(t, w.hc, "eth1"),
			"10.2.0.0/24 dev eth1 src 10.2.0.7", "fd00:2::/64 dev eth1 src fd00:2::5", "fe80::/64 dev eth1")
		wantList(t, "rules after a second ADD", w.ourRules(t), "from 10.2.0.7/32 lookup 100", "from fd00:2::5/128 lookup 101")

		// The hint gone: CHECK says so.
		plugintest.Must(t, w.hc.ReplaceRoute(netlinkx.Route{Dst: netip.MustParsePrefix("10.2.0.0/24"), Src: netip.MustParseAddr("10.2.0.5"),
			LinkIndex: w.link(t, "eth1"), Protocol: unix.RTPROT_KERNEL}))
		w.th.FailsWith("hint gone", w.call("CHECK", cfg), "sbr: the main table has no route to 10.2.0.0/24 dev eth1 src 10.2.0.7")

		w.th.OK(w.call("DEL", cfg))
		wantList(t, "rules after DEL", w.ourRules(t))
		wantList(t, "table 100 after DEL", w.routes(t, 100))
	})
}

// gwWorld is the world of the `gateways` key: the container's only
// interface eth1 is on a switched segment with two routers. b (10.2.0.1,
// fd00:2::1, the IPAM gateway: the container's main default routes point
// at it) does not forward; g (10.2.0.254, fd00:2::fe) does, and the client
// sits behind it.
//
//	ctr eth1 10.2.0.5/24 fd00:2::5/64 ── [bridge in b: 10.2.0.1 fd00:2::1] ── g0 10.2.0.254 fd00:2::fe ── g1 ── cli c0 192.0.2.2 2001:db8:c::2
//
// The client's requests come in through g; whether the container answers
// depends on which router its table sends the replies to.
type gwWorld struct {
	*world
	g *netns.NS
}

func newGWWorld(t *testing.T) *gwWorld {
	t.Helper()
	p, a := netip.MustParsePrefix, netip.MustParseAddr
	w := &world{th: plugintest.NewHost(t, "sbr")}
	w.ctr, w.destroy = plugintest.DoomedCtr(t, plugintest.NoDAD)
	w.hc = privtest.Handle(t, w.ctr)
	plugintest.Must(t, w.hc.SetUp("lo"))
	var hb *netlinkx.Handle
	w.b, hb = plugintest.NewCtr(t, plugintest.NoDAD)
	g, hg := plugintest.NewCtr(t, plugintest.NoDAD)
	var hcli *netlinkx.Handle
	w.cli, hcli = plugintest.NewCtr(t, plugintest.NoDAD)

	plugintest.Must(t, hb.AddBridge(netlinkx.BridgeSpec{Name: "br"}))
	privtest.Wire(t, w.ctr, "eth1", p("10.2.0.5/24"), w.b, "p0", netip.Prefix{})
	privtest.Wire(t, g, "g0", p("10.2.0.254/24"), w.b, "p1", netip.Prefix{})
	for _, port := range []string{"p0", "p1"} {
		plugintest.Must(t, hb.SetMaster(port, "br"))
	}
	for _, ad := range []string{"10.2.0.1/24", "fd00:2::1/64"} {
		plugintest.Must(t, hb.AddAddr("br", p(ad), netlinkx.AddrOpts{NoDAD: true}))
	}
	plugintest.Must(t, hb.SetUp("br"))
	plugintest.Must(t, w.hc.AddAddr("eth1", p("fd00:2::5/64"), netlinkx.AddrOpts{NoDAD: true}))
	plugintest.Must(t, hg.AddAddr("g0", p("fd00:2::fe/64"), netlinkx.AddrOpts{NoDAD: true}))

	privtest.Wire(t, g, "g1", p("192.0.2.1/24"), w.cli, "c0", p("192.0.2.2/24"))
	plugintest.Must(t, hg.AddAddr("g1", p("2001:db8:c::1/64"), netlinkx.AddrOpts{NoDAD: true}))
	plugintest.Must(t, hcli.AddAddr("c0", p("2001:db8:c::2/64"), netlinkx.AddrOpts{NoDAD: true}))
	plugintest.Must(t, sysctl.Set(g, "net/ipv4/ip_forward", "1"))
	plugintest.Must(t, sysctl.Set(g, "net/ipv6/conf/all/forwarding", "1"))
	c0 := plugintest.MustLink(t, hcli, "c0").Index
	plugintest.Must(t, hcli.AddRoute(netlinkx.Route{Dst: p("0.0.0.0/0"), Gw: a("192.0.2.1"), LinkIndex: c0}))
	plugintest.Must(t, hcli.AddRoute(netlinkx.Route{Dst: p("::/0"), Gw: a("2001:db8:c::1"), LinkIndex: c0}))

	// The container's main table, as IPAM leaves it: defaults via b.
	eth1 := plugintest.MustLink(t, w.hc, "eth1").Index
	plugintest.Must(t, w.hc.AddRoute(netlinkx.Route{Dst: p("0.0.0.0/0"), Gw: a("10.2.0.1"), LinkIndex: eth1}))
	plugintest.Must(t, w.hc.AddRoute(netlinkx.Route{Dst: p("::/0"), Gw: a("fd00:2::1"), LinkIndex: eth1}))
	return &gwWorld{world: w, g: g}
}

// answered reports, per family, whether the client gets an answer from
// the container.
func (w *gwWorld) answered(t *testing.T) (v4, v6 bool) {
	t.Helper()
	return privtest.UDPRoundTrip(t, w.cli, w.ctr, netip.MustParseAddr("10.2.0.5")),
		privtest.UDPRoundTrip(t, w.cli, w.ctr, netip.MustParseAddr("fd00:2::5"))
}

// TestGateways proves `gateways` with packets: with the prevResult
// gateways (b) the replies to a client behind g are lost, with
// "gateways": [g's addresses] they reach it. The tables hold the
// configured gateways (a main-table default route via the prevResult
// gateway is not copied over them), the main defaults via b left main as
// routes sbr moved, and CHECK checks the configured gateway.
func TestGateways(t *testing.T) {
	t.Parallel()
	const gws = `,"gateways":["10.2.0.254","fd00:2::fe"]`
	t.Run("prevResult gateways", func(t *testing.T) {
		t.Parallel()
		w := newGWWorld(t)
		w.th.OK(w.call("ADD", w.conf(prev, "")))
		if v4, v6 := w.answered(t); v4 || v6 {
			t.Fatalf("the client is answered through b (IPv4 %v, IPv6 %v): the test proves nothing", v4, v6)
		}
		wantList(t, "table 100", w.routes(t, 100), "0.0.0.0/0 via 10.2.0.1 dev eth1", "10.2.0.0/24 dev eth1", "fd00:2::/64 dev eth1", "fe80::/64 dev eth1")
		w.th.FailsWith("CHECK for the other gateways", w.call("CHECK", w.conf(prev, gws)),
			"sbr: table 100 of 10.2.0.5 has no default route via 10.2.0.254 dev eth1")
	})
	t.Run("configured gateways", func(t *testing.T) {
		t.Parallel()
		w := newGWWorld(t)
		cfg := w.conf(prev, gws)
		w.th.OK(w.call("ADD", cfg))
		v4, v6 := w.answered(t)
		if !v4 || !v6 {
			t.Errorf("client answered: IPv4 %v, IPv6 %v; want both", v4, v6)
		}
		wantList(t, "rules", w.ourRules(t), "from 10.2.0.5/32 lookup 100", "from fd00:2::5/128 lookup 101")
		wantList(t, "table 100", w.routes(t, 100), "0.0.0.0/0 via 10.2.0.254 dev eth1", "10.2.0.0/24 dev eth1", "fd00:2::/64 dev eth1", "fe80::/64 dev eth1")
		wantList(t, "table 101", w.routes(t, 101), "::/0 via fd00:2::fe dev eth1", "fd00:2::/64 dev eth1", "fe80::/64 dev eth1")
		wantList(t, "main", w.routes(t, 0))
		w.th.OK(w.call("CHECK", cfg))
		w.th.FailsWith("CHECK for the prevResult gateways", w.call("CHECK", w.conf(prev, "")),
			"sbr: table 100 of 10.2.0.5 has no default route via 10.2.0.1 dev eth1")
		w.th.OK(w.call("ADD", cfg))
		wantList(t, "table 100 after a second ADD", w.routes(t, 100), "0.0.0.0/0 via 10.2.0.254 dev eth1", "10.2.0.0/24 dev eth1", "fd00:2::/64 dev eth1", "fe80::/64 dev eth1")
		w.th.OK(w.call("DEL", cfg))
		wantList(t, "rules after DEL", w.ourRules(t))
		wantList(t, "table 100 after DEL", w.routes(t, 100))
		wantList(t, "table 101 after DEL", w.routes(t, 101))
	})
	t.Run("one family", func(t *testing.T) {
		t.Parallel()
		w := newGWWorld(t)
		w.th.OK(w.call("ADD", w.conf(prev, `,"gateways":["fd00:2::fe"]`)))
		if v4, v6 := w.answered(t); v4 || !v6 {
			t.Errorf("client answered: IPv4 %v (want false: its gateway is prevResult's), IPv6 %v (want true)", v4, v6)
		}
		wantList(t, "table 100", w.routes(t, 100), "0.0.0.0/0 via 10.2.0.1 dev eth1", "10.2.0.0/24 dev eth1", "fd00:2::/64 dev eth1", "fe80::/64 dev eth1")
	})
}

// TestGatewaysRefused: a bad `gateways` is a config error (code 7) before
// anything is done, with or without `table`.
func TestGatewaysRefused(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	for _, tt := range []struct{ fields, msg string }{
		{`,"gateways":["10.2.0.254","10.2.0.253"]`, "gateways list contains multiple IPv4 addresses: 10.2.0.254 and 10.2.0.253"},
		{`,"gateways":["gw"],"table":500`, "invalid static gateway IP address: gw"},
	} {
		e := w.th.Fail(w.call("ADD", w.conf(prev, tt.fields)))
		if e.Code != 7 || e.Msg != tt.msg {
			t.Errorf("%s: code %d %q, want 7 %q", tt.fields, e.Code, e.Msg, tt.msg)
		}
	}
	wantList(t, "rules", w.ourRules(t))
	wantList(t, "main", w.routes(t, 0), "0.0.0.0/0 via 10.1.0.1 dev eth0", "10.1.0.0/24 dev eth0", "10.2.0.0/24 dev eth1",
		"fd00:2::/64 dev eth1", "fe80::/64 dev eth0", "fe80::/64 dev eth1")
}

// TestDelIgnoresADDOnlyMistakes: a config whose `gateways` ADD refuses
// still DELs what an earlier ADD set up, and one with a `table` the
// kernel cannot have (no ADD can have used it) DELs nothing and succeeds:
// a failed DEL would stop the runtime's DEL of the chain before the
// interface plugin's, and leak the attachment.
func TestDelIgnoresADDOnlyMistakes(t *testing.T) {
	t.Parallel()
	prev := `{"cniVersion":"1.0.0","interfaces":[{"name":"eth1","sandbox":"SANDBOX"}],` +
		`"ips":[{"address":"10.2.0.5/24","gateway":"10.2.0.1","interface":0}]}`
	w := newWorld(t)
	w.th.OK(w.call("ADD", w.conf(prev, "")))
	wantList(t, "rules after ADD", w.ourRules(t), "from 10.2.0.5/32 lookup 100")
	bad := w.conf(prev, `,"gateways":["10.2.0.254","10.2.0.253"]`)
	w.th.FailsWith("ADD with two IPv4 gateways", w.call("ADD", bad), "gateways list contains multiple IPv4 addresses: 10.2.0.254 and 10.2.0.253")
	w.th.OK(w.call("DEL", w.conf(prev, `,"table":-1`)))
	wantList(t, "rules after a DEL with table -1", w.ourRules(t), "from 10.2.0.5/32 lookup 100")
	w.th.OK(w.call("DEL", bad))
	wantList(t, "rules after DEL", w.ourRules(t))
	wantList(t, "table 100 after DEL", w.routes(t, 100))
}
