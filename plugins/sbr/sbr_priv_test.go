package sbr

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/internal/plugintest"
	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/sysctl"
)

func TestMain(m *testing.M) { plugintest.Main(m) }

// The test world: a container with two interfaces, as a runtime chaining
// sbr after two attachments would leave it.
//
//	ctr eth0 10.1.0.5/24 ── a0 10.1.0.1/24  net "a" (the container's default route; no way on)
//	ctr eth1 10.2.0.5/24 ── b0 10.2.0.1/24  router "b" ── b1 192.0.2.1/24 ── c0 192.0.2.2/24  client "c"
//	         fd00:2::5/64     fd00:2::1/64
//
// A client behind b sends to the container's eth1 address. Without sbr the
// reply follows the container's main table out of eth0 into a, which
// drops it; with sbr it leaves through eth1, where the request came in.
type world struct {
	th        *plugintest.Host
	ctr       *netns.NS
	hc        *netlinkx.Handle
	a, b, cli *netns.NS
	destroy   func() // destroys ctr (DoomedCtr)
}

func newWorld(t *testing.T) *world {
	t.Helper()
	w := &world{th: plugintest.NewHost(t, "sbr")}
	w.ctr, w.destroy = plugintest.DoomedCtr(t, plugintest.NoDAD)
	hc, err := netlinkx.Open(w.ctr)
	plugintest.Must(t, err)
	t.Cleanup(func() { hc.Close() })
	w.hc = hc
	plugintest.Must(t, hc.SetUp("lo"))
	w.a, _ = plugintest.NewCtr(t, plugintest.NoDAD)
	w.b, _ = plugintest.NewCtr(t, plugintest.NoDAD)
	w.cli, _ = plugintest.NewCtr(t, plugintest.NoDAD)
	p := netip.MustParsePrefix
	privtest.Wire(t, w.ctr, "eth0", p("10.1.0.5/24"), w.a, "a0", p("10.1.0.1/24"))
	privtest.Wire(t, w.ctr, "eth1", p("10.2.0.5/24"), w.b, "b0", p("10.2.0.1/24"))
	plugintest.Must(t, hc.AddAddr("eth1", p("fd00:2::5/64"), netlinkx.AddrOpts{NoDAD: true}))
	privtest.Wire(t, w.b, "b1", p("192.0.2.1/24"), w.cli, "c0", p("192.0.2.2/24"))
	plugintest.Must(t, sysctl.Set(w.b, "net/ipv4/ip_forward", "1"))
	plugintest.Must(t, hc.AddRoute(netlinkx.Route{Dst: p("0.0.0.0/0"), Gw: netip.MustParseAddr("10.1.0.1"), LinkIndex: w.link(t, "eth0")}))
	hcli, err := netlinkx.Open(w.cli)
	plugintest.Must(t, err)
	defer hcli.Close()
	plugintest.Must(t, hcli.AddRoute(netlinkx.Route{Dst: p("0.0.0.0/0"), Gw: netip.MustParseAddr("192.0.2.1"), LinkIndex: plugintest.MustLink(t, hcli, "c0").Index}))
	return w
}

func (w *world) link(t *testing.T, name string) int { return plugintest.MustLink(t, w.hc, name).Index }

// prev is the prevResult of eth1's attachment: its addresses, with
// gateways.
const prev = `{"cniVersion":"1.0.0","interfaces":[{"name":"eth1","sandbox":"SANDBOX"}],` +
	`"ips":[{"address":"10.2.0.5/24","gateway":"10.2.0.1","interface":0},{"address":"fd00:2::5/64","gateway":"fd00:2::1","interface":0}]}`

// conf is an sbr config with prevResult (if not "") and more fields.
func (w *world) conf(prevResult, fields string) string {
	c := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"testnet","type":"sbr"%s}`, fields)
	if prevResult != "" {
		c = plugintest.WithPrev(c, strings.ReplaceAll(prevResult, "SANDBOX", w.ctr.Path()))
	}
	return c
}

// call is an invocation for eth1.
func (w *world) call(cmd, stdin string) plugintest.Call {
	c := plugintest.Cmd(cmd, w.ctr, "sbr1", stdin)
	c.IfName = "eth1"
	return c
}

// reachable reports a UDP round trip from the client to the container's
// eth1 address.
func (w *world) reachable(t *testing.T) bool {
	t.Helper()
	return privtest.UDPRoundTrip(t, w.cli, w.ctr, netip.MustParseAddr("10.2.0.5"))
}

// ourRules lists the container's rules with a source, as text.
func (w *world) ourRules(t *testing.T) []string {
	t.Helper()
	rules, err := w.hc.Rules(0)
	plugintest.Must(t, err)
	var out []string
	for _, r := range rules {
		if r.Src.IsValid() {
			out = append(out, fmt.Sprintf("from %s lookup %d", r.Src, r.Table))
		}
	}
	slices.Sort(out)
	return out
}

// routes lists a table's routes as text (dst [via gw] dev), sorted.
func (w *world) routes(t *testing.T, table int) []string {
	t.Helper()
	rs, err := w.hc.Routes(0, table)
	plugintest.Must(t, err)
	var out []string
	for _, r := range rs {
		l, err := w.hc.LinkByIndex(r.LinkIndex)
		plugintest.Must(t, err)
		s := r.Dst.String()
		if r.Gw.IsValid() {
			s += " via " + r.Gw.String()
		}
		out = append(out, s+" dev "+l.Name)
	}
	slices.Sort(out)
	return out
}

func wantList(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("%s:\n %q\nwant\n %q", what, got, want)
	}
}

// TestRepliesLeaveByTheirInterface proves sbr with packets: a client
// behind eth1's router gets no answer from the container before sbr, gets
// one after ADD, and none again after DEL. The tables, rules and the main
// table are exactly as expected: only the routes that belong to eth1's
// addresses left the main table (an address not in prevResult keeps its
// route there; the reference moved every route of the interface), and
// eth0 is untouched.
func TestRepliesLeaveByTheirInterface(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	// An address the runtime did not give: its route is not sbr's to move.
	plugintest.Must(t, w.hc.AddAddr("eth1", netip.MustParsePrefix("10.3.0.5/24"), netlinkx.AddrOpts{}))
	if w.reachable(t) {
		t.Fatal("the client is answered before sbr: the test proves nothing")
	}
	cfg := w.conf(prev, "")
	out := w.th.OK(w.call("ADD", cfg))
	// prevResult printed unchanged.
	want := fmt.Sprintf(`{
    "cniVersion": "1.0.0",
    "interfaces": [
        {
            "name": "eth1",
            "sandbox": %q
        }
    ],
    "ips": [
        {
            "address": "10.2.0.5/24",
            "gateway": "10.2.0.1",
            "interface": 0
        },
        {
            "address": "fd00:2::5/64",
            "gateway": "fd00:2::1",
            "interface": 0
        }
    ]
}`, w.ctr.Path())
	if out != want {
		t.Errorf("result\n%s\nwant\n%s", out, want)
	}
	if !w.reachable(t) {
		t.Error("no answer to the client after sbr ADD")
	}
	if !privtest.UDPRoundTrip(t, w.ctr, w.a, netip.MustParseAddr("10.1.0.1")) {
		t.Error("eth0 broken by sbr")
	}
	wantList(t, "rules", w.ourRules(t), "from 10.2.0.5/32 lookup 100", "from fd00:2::5/128 lookup 101")
	// Routes with neither source nor gateway (the IPv6 ones here) belong
	// to every address, as in the reference.
	wantList(t, "table 100", w.routes(t, 100), "0.0.0.0/0 via 10.2.0.1 dev eth1", "10.2.0.0/24 dev eth1", "fd00:2::/64 dev eth1", "fe80::/64 dev eth1")
	wantList(t, "table 101", w.routes(t, 101), "::/0 via fd00:2::1 dev eth1", "fd00:2::/64 dev eth1", "fe80::/64 dev eth1")
	wantList(t, "main", w.routes(t, 0), "0.0.0.0/0 via 10.1.0.1 dev eth0", "10.1.0.0/24 dev eth0", "10.3.0.0/24 dev eth1", "fe80::/64 dev eth0")
	w.th.OK(w.call("CHECK", cfg))

	// A second ADD changes nothing (the reference added a new table).
	w.th.OK(w.call("ADD", cfg))
	wantList(t, "rules after a second ADD", w.ourRules(t), "from 10.2.0.5/32 lookup 100", "from fd00:2::5/128 lookup 101")

	w.th.OK(w.call("DEL", cfg))
	wantList(t, "rules after DEL", w.ourRules(t))
	wantList(t, "table 100 after DEL", w.routes(t, 100))
	wantList(t, "table 101 after DEL", w.routes(t, 101))
	if w.reachable(t) {
		t.Error("client still answered after DEL")
	}
}

// TestConfiguredTable: with `table` sbr only adds the source rules, once
// (the reference duplicated them on a repeated ADD), and moves no route.
func TestConfiguredTable(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	before := w.routes(t, 0)
	cfg := w.conf(prev, `,"table":500`)
	w.th.OK(w.call("ADD", cfg))
	w.th.OK(w.call("ADD", cfg))
	wantList(t, "rules", w.ourRules(t), "from 10.2.0.5/32 lookup 500", "from fd00:2::5/128 lookup 500")
	wantList(t, "main", w.routes(t, 0), before...)
	w.th.OK(w.call("CHECK", cfg))
	w.th.FailsWith("other table", w.call("CHECK", w.conf(prev, `,"table":501`)), `sbr: no rule "from 10.2.0.5/32 lookup 501"`)
	// DEL with another table leaves these rules alone.
	w.th.OK(w.call("DEL", w.conf(prev, `,"table":501`)))
	wantList(t, "rules", w.ourRules(t), "from 10.2.0.5/32 lookup 500", "from fd00:2::5/128 lookup 500")
	w.th.OK(w.call("DEL", cfg))
	wantList(t, "rules after DEL", w.ourRules(t))
	wantList(t, "main after DEL", w.routes(t, 0), before...)
}

// TestTableSelection: tables referenced by existing rules are skipped;
// the first free id from 100 up is taken.
func TestTableSelection(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	for _, r := range []netlinkx.Rule{
		{Family: unix.AF_INET, Table: 100, Priority: 1000},
		{Family: unix.AF_INET6, Table: 102, Priority: 1000},
	} {
		plugintest.Must(t, w.hc.AddRule(r))
	}
	w.th.OK(w.call("ADD", w.conf(prev, "")))
	wantList(t, "rules", w.ourRules(t), "from 10.2.0.5/32 lookup 101", "from fd00:2::5/128 lookup 103")
}

// TestCheck: CHECK really checks (the reference's always succeeded).
func TestCheck(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	cfg := w.conf(prev, "")
	w.th.OK(w.call("ADD", cfg))
	w.th.OK(w.call("CHECK", cfg))
	w.th.FailsWith("no prevResult", w.call("CHECK", w.conf("", "")), "This plugin must be called as chained plugin")

	plugintest.Must(t, w.hc.DelRoute(netlinkx.Route{Dst: netip.MustParsePrefix("::/0"), Table: 101}))
	w.th.FailsWith("default route gone", w.call("CHECK", cfg), "sbr: table 101 of fd00:2::5 has no default route via fd00:2::1 dev eth1")
	plugintest.Must(t, w.hc.DelRoute(netlinkx.Route{Dst: netip.MustParsePrefix("10.2.0.0/24"), Table: 100}))
	w.th.FailsWith("subnet route gone", w.call("CHECK", cfg), "sbr: table 100 of 10.2.0.5 has no route to 10.2.0.0/24 dev eth1")
	plugintest.Must(t, w.hc.DelRule(netlinkx.Rule{Src: netip.MustParsePrefix("10.2.0.5/32"), Table: 100}))
	w.th.FailsWith("rule gone", w.call("CHECK", cfg), `sbr: no rule "from 10.2.0.5/32 lookup <table>"`)
	plugintest.Must(t, w.hc.DeleteLink("eth1"))
	w.th.FailsWith("interface gone", w.call("CHECK", cfg), "Cannot find network interface eth1: Link not found")
}

// TestFailedAddLeavesNothing: when a step fails, the rules and table
// routes added so far are removed and the main table is as before.
func TestFailedAddLeavesNothing(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ name, prev, ifName, msg string }{
		{"unreachable gateway (second address)", `{"cniVersion":"1.0.0","interfaces":[{"name":"eth1"}],` +
			`"ips":[{"address":"10.2.0.5/24","gateway":"10.2.0.1","interface":0},{"address":"fd00:2::5/64","gateway":"fd00:99::1","interface":0}]}`,
			"eth1", "Failed to add default route to fd00:99::1: replacing route ::/0 via fd00:99::1 dev eth1 table 101: no route to host"},
		{"no such interface", prev, "eth9", "Cannot find network interface eth9: Link not found"},
		{"no addresses", `{"cniVersion":"1.0.0","interfaces":[{"name":"eth1"}]}`, "eth1", "No IP addresses supplied on interface: eth1"},
		{"no prevResult", "", "eth1", "This plugin must be called as chained plugin"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t)
			before := w.routes(t, 0)
			c := w.call("ADD", w.conf(tt.prev, ""))
			c.IfName = tt.ifName
			w.th.FailsWith(tt.name, c, tt.msg)
			wantList(t, "rules", w.ourRules(t))
			wantList(t, "table 100", w.routes(t, 100))
			wantList(t, "table 101", w.routes(t, 101))
			wantList(t, "main", w.routes(t, 0), before...)
		})
	}
}

// TestDel: idempotent; succeeds with a vanished namespace or an empty
// CNI_NETNS (the reference failed, or created a stray file at the
// namespace path); with the interface gone, the prevResult's addresses
// still find the rules.
func TestDel(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"twice", "netns gone", "interface gone", "empty netns"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t)
			cfg := w.conf(prev, "")
			w.th.OK(w.call("ADD", cfg))
			path := w.ctr.Path()
			c := w.call("DEL", cfg)
			switch how {
			case "netns gone":
				w.destroy()
			case "interface gone":
				plugintest.Must(t, w.hc.DeleteLink("eth1"))
			case "empty netns":
				c.Netns = ""
			}
			w.th.OK(c)
			w.th.OK(c)
			switch how {
			case "netns gone":
				if _, err := netns.Open(path); err == nil {
					t.Error("DEL created something at the namespace path")
				}
			case "empty netns":
			default:
				wantList(t, "rules", w.ourRules(t))
				wantList(t, "table 100", w.routes(t, 100))
			}
		})
	}
}
