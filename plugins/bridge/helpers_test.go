package bridge

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/userdata"
	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/internal/plugintest"
	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/nft"
)

func TestMain(m *testing.M) { plugintest.Main(m) }

// testHost is a test's own "host" namespace, where the plugin runs.
type testHost struct {
	t  *testing.T
	ns *netns.NS
	h  *netlinkx.Handle
}

// newHost makes a host namespace. Duplicate address detection is off for
// links created there (default/accept_dad=0), so gateway addresses the
// plugin puts on the bridge are usable at once: the tests do not wait for
// DAD unless that is what they test.
func newHost(t *testing.T) *testHost {
	t.Helper()
	ns := privtest.NewNS(t)
	must(t, netlinkx.SetSysctl(ns, "net/ipv6/conf/default/accept_dad", "0"))
	h, err := netlinkx.Open(ns)
	must(t, err)
	t.Cleanup(func() { h.Close() })
	must(t, h.SetUp("lo"))
	return &testHost{t: t, ns: ns, h: h}
}

// newCtr makes a container namespace with lo up.
func newCtr(t *testing.T) (*netns.NS, *netlinkx.Handle) {
	t.Helper()
	ns := privtest.NewNS(t)
	h, err := netlinkx.Open(ns)
	must(t, err)
	t.Cleanup(func() { h.Close() })
	must(t, h.SetUp("lo"))
	return ns, h
}

// doomedCtr makes a container namespace the test destroys itself with
// the returned function (as when a container's namespace vanishes before
// DEL). Nothing else of the test may keep it open.
func doomedCtr(t *testing.T) (ns *netns.NS, destroy func()) {
	t.Helper()
	privtest.Require(t)
	dir := t.TempDir()
	ns, err := netns.New(dir, "doomed")
	must(t, err)
	done := false
	destroy = func() {
		if done {
			return
		}
		done = true
		must(t, ns.Close())
		must(t, netns.Remove(ns.Path()))
	}
	t.Cleanup(destroy)
	return ns, destroy
}

// sleepBrief is one polling step of the tests.
func sleepBrief() { time.Sleep(20 * time.Millisecond) }

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// call builds an invocation for container ctr (nil: CNI_NETNS empty).
func call(cmd string, ctr *netns.NS, id, stdin string) plugintest.Call {
	c := plugintest.Call{Command: cmd, ContainerID: id, IfName: "eth0", Stdin: stdin}
	if ctr != nil {
		c.Netns = ctr.Path()
	}
	return c
}

func (th *testHost) exec(c plugintest.Call) plugintest.Outcome {
	th.t.Helper()
	return plugintest.Exec(th.t, th.ns, "bridge", c)
}

func (th *testHost) ok(c plugintest.Call) string {
	th.t.Helper()
	return plugintest.ExecOK(th.t, th.ns, "bridge", c)
}

func (th *testHost) fail(c plugintest.Call) plugintest.ErrorObject {
	th.t.Helper()
	return plugintest.ExecFail(th.t, th.ns, "bridge", c)
}

// callArgs is call with CNI_ARGS.
func callArgs(cmd string, ctr *netns.NS, id, stdin, args string) plugintest.Call {
	c := call(cmd, ctr, id, stdin)
	c.Args = args
	return c
}

// add runs ADD for ctr and returns the decoded 1.x result.
func (th *testHost) add(ctr *netns.NS, id, stdin string) *wireResult {
	th.t.Helper()
	return th.addCall(call("ADD", ctr, id, stdin))
}

// addCall runs an ADD call and returns the decoded 1.x result.
func (th *testHost) addCall(c plugintest.Call) *wireResult {
	th.t.Helper()
	out := th.ok(c)
	var r wireResult
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		th.t.Fatalf("ADD output %q: %v", out, err)
	}
	return &r
}

// wireResult is a 1.x result as printed.
type wireResult struct {
	CNIVersion string `json:"cniVersion"`
	Interfaces []struct {
		Name    string `json:"name"`
		Mac     string `json:"mac"`
		Sandbox string `json:"sandbox"`
	} `json:"interfaces"`
	IPs []struct {
		Address   string `json:"address"`
		Gateway   string `json:"gateway"`
		Interface *int   `json:"interface"`
	} `json:"ips"`
	Routes []struct {
		Dst string `json:"dst"`
		GW  string `json:"gw"`
	} `json:"routes"`
	DNS *struct {
		Nameservers []string `json:"nameservers"`
		Domain      string   `json:"domain"`
		Search      []string `json:"search"`
	} `json:"dns"`
}

// conf is a bridge config on br0 for network "testnet"; fields are more
// JSON members (starting with a comma), e.g. an "ipam" object.
func conf(version, fields string) string {
	return fmt.Sprintf(`{"cniVersion":%q,"name":"testnet","type":"bridge","bridge":"br0"%s}`, version, fields)
}

// static is an "ipam" member for the static IPAM plugin: each address is
// "addr/len" or "addr/len gw".
func static(routes string, addrs ...string) string {
	var items []string
	for _, a := range addrs {
		ad, gw, _ := strings.Cut(a, " ")
		if gw != "" {
			items = append(items, fmt.Sprintf(`{"address":%q,"gateway":%q}`, ad, gw))
		} else {
			items = append(items, fmt.Sprintf(`{"address":%q}`, ad))
		}
	}
	if routes == "" {
		routes = "[]"
	}
	return fmt.Sprintf(`,"ipam":{"type":"static","addresses":[%s],"routes":%s}`, strings.Join(items, ","), routes)
}

// withPrev adds prevResult to a config.
func withPrev(conf, prev string) string {
	return conf[:len(conf)-1] + `,"prevResult":` + prev + "}"
}

func mustLink(t testing.TB, h *netlinkx.Handle, name string) netlinkx.Link {
	t.Helper()
	l, err := h.LinkByName(name)
	must(t, err)
	return l
}

func linkNames(t testing.TB, h *netlinkx.Handle) []string {
	t.Helper()
	links, err := h.Links()
	must(t, err)
	var names []string
	for _, l := range links {
		names = append(names, l.Name)
	}
	slices.Sort(names)
	return names
}

// wantLinks fails unless exactly the named links exist in h's namespace.
func wantLinks(t testing.TB, h *netlinkx.Handle, want ...string) {
	t.Helper()
	slices.Sort(want)
	if got := linkNames(t, h); !slices.Equal(got, want) {
		t.Errorf("links %v, want %v", got, want)
	}
}

func addrStrings(t testing.TB, h *netlinkx.Handle, link string, family int) []string {
	t.Helper()
	addrs, err := h.Addrs(link, family)
	must(t, err)
	var out []string
	for _, a := range addrs {
		if a.Prefix.Addr().IsLinkLocalUnicast() {
			continue
		}
		out = append(out, a.Prefix.String())
	}
	slices.Sort(out)
	return out
}

func sysctl(t testing.TB, ns *netns.NS, key string) string {
	t.Helper()
	v, err := netlinkx.Sysctl(ns, key)
	must(t, err)
	return v
}

// hasRoute reports whether the main table of h's namespace has a route to
// dst (via gw, if valid).
func hasRoute(t testing.TB, h *netlinkx.Handle, dst string, gw string) bool {
	t.Helper()
	p := netip.MustParsePrefix(dst)
	fam := unix.AF_INET
	if p.Addr().Is6() {
		fam = unix.AF_INET6
	}
	rs, err := h.Routes(fam, 0)
	must(t, err)
	for _, r := range rs {
		if r.Dst == p && (gw == "" || r.Gw == netip.MustParseAddr(gw)) {
			return true
		}
	}
	return false
}

// skipIfNotImplemented skips a test whose plugin call failed only because
// an nftables component is still a stub.
func skipIfNotImplemented(t *testing.T, o plugintest.Outcome) {
	t.Helper()
	if o.Status != 0 && strings.Contains(o.Stdout, "not implemented yet") {
		t.Skipf("nftables part not implemented yet: %s", strings.TrimSpace(o.Stdout))
	}
}

// nftOwned counts the nftables set elements and rules in ns whose comment
// is owner's tag, in any table of ours (nftcni_*).
func nftOwned(t *testing.T, ns *netns.NS, owner nft.Owner) int {
	t.Helper()
	c, err := nftables.New(nftables.WithNetNSFd(ns.Fd()))
	must(t, err)
	defer c.CloseLasting()
	tables, err := c.ListTables()
	must(t, err)
	chains, err := c.ListChains()
	must(t, err)
	n := 0
	for _, tb := range tables {
		if !strings.HasPrefix(tb.Name, "nftcni_") {
			continue
		}
		sets, err := c.GetSets(tb)
		must(t, err)
		for _, s := range sets {
			elems, err := c.GetSetElements(s)
			must(t, err)
			for _, e := range elems {
				if owner.OwnedBy(e.Comment) {
					n++
				}
			}
		}
		for _, ch := range chains {
			if ch.Table.Name != tb.Name || ch.Table.Family != tb.Family {
				continue
			}
			rules, err := c.GetRules(tb, ch)
			must(t, err)
			for _, r := range rules {
				if cm, ok := userdata.GetString(r.UserData, userdata.TypeComment); ok && owner.OwnedBy(cm) {
					n++
				}
			}
		}
	}
	return n
}

// nodad adds an address usable at once.
var nodad = netlinkx.AddrOpts{NoDAD: true}

func openHandle(ns *netns.NS) (*netlinkx.Handle, error) { return netlinkx.Open(ns) }
