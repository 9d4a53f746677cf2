package firewall

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/nftcni/nftcni/cniruntime"
	"github.com/nftcni/nftcni/firewalld"
	"github.com/nftcni/nftcni/internal/firewalldtest"
	"github.com/nftcni/nftcni/internal/hostfw"
	"github.com/nftcni/nftcni/internal/plugintest"
)

// The firewalld backend against a real firewalld (internal/firewalldtest):
// firewalld runs in the world's host namespace, where every plugin runs,
// with the default zone public — which forwards nothing into or out of
// it — on a private bus the plugins are pointed at.

// fwWorld is a world whose host runs firewalld.
type fwWorld struct {
	*world
	bus   *firewalldtest.Bus
	fw    *firewalldtest.Firewalld // nil until started
	state string                   // firewalldStateDir
}

// newBusWorld is a world with a private system bus, without firewalld yet;
// every plugin the runtime runs is pointed at the bus.
func newBusWorld(t *testing.T) *fwWorld {
	t.Helper()
	w := newWorld(t)
	bus := firewalldtest.StartBus(t, w.th.NS)
	w.rt.Env = append(os.Environ(), bus.Env())
	return &fwWorld{world: w, bus: bus, state: t.TempDir()}
}

func newFirewalldWorld(t *testing.T) *fwWorld {
	t.Helper()
	w := newBusWorld(t)
	w.fw = w.bus.StartFirewalld(t, w.th.NS)
	return w
}

// fields are firewall config members with the world's state directory,
// plus extra.
func (w *fwWorld) fields(extra string) string {
	return fmt.Sprintf(`,"firewalldStateDir":%q`, w.state) + extra
}

// call is a single plugin call on the world's bus.
func (w *fwWorld) call(cmd string, c *ctr, conf string) plugintest.Call {
	call := plugintest.Cmd(cmd, c.ns, c.id, conf)
	call.Extra = append(call.Extra, w.bus.Env())
	return call
}

// pinned is a network like world.network whose host-local ranges hold one
// address each, v4 and v6: the container's addresses are known before ADD.
func (w *fwWorld) pinned(name, bridge, v4, v6, fw string) *cniruntime.NetworkConfigList {
	w.t.Helper()
	list, err := cniruntime.NetworkConfFromBytes([]byte(fmt.Sprintf(`{"cniVersion":"1.1.0","name":%q,"plugins":[`+
		`{"type":"bridge","bridge":%q,"isDefaultGateway":true,"ipam":{"type":"host-local","dataDir":%q,"ranges":[`+
		`[{"subnet":"%s.0/24","rangeStart":"%s.9","rangeEnd":"%s.9"}],[{"subnet":"%s/64","rangeStart":"%s9","rangeEnd":"%s9"}]]}},`+
		`{"type":"firewall"%s}]}`, name, bridge, w.t.TempDir(), v4, v4, v4, v6, v6, v6, fw)))
	plugintest.Must(w.t, err)
	return list
}

// claims lists c's recorded firewalld sources.
func (w *fwWorld) claims(c *ctr) []firewalld.Claim {
	w.t.Helper()
	cl, err := firewalld.Store{Dir: w.state}.Claims(c.owner())
	plugintest.Must(w.t, err)
	return cl
}

// wantSources compares zone's sources in firewalld, in any order.
func (w *fwWorld) wantSources(zone string, want ...string) {
	w.t.Helper()
	got := w.fw.Sources(w.t, zone)
	slices.Sort(got)
	want = slices.Clone(want)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		w.t.Errorf("sources of zone %s: %q, want %q", zone, got, want)
	}
}

func (c *ctr) sources() []string { return []string{c.v4 + "/32", c.v6 + "/128"} }

// TestFirewalld: with backend firewalld the container's addresses become
// sources of zone trusted, and its traffic is forwarded where firewalld's
// default zone forwards nothing (a container without the plugin gets
// nothing through; new connections from outside do not reach it either).
// The native table is not used. CHECK fails once a source is gone — taken
// out by hand or by a firewalld reload — and a repeated ADD puts it back.
// DEL removes exactly the attachment's sources, also without prevResult:
// an administrator's source that was there before ADD stays. An
// attachment the reference ADDed loses its sources to our DEL.
func TestFirewalld(t *testing.T) {
	t.Parallel()
	w := newFirewalldWorld(t)
	list := w.network("net1", "br0", "10.70.0.0/24", "fd00:70::/64", fields(w.fields(`,"backend":"firewalld"`)))
	a := w.attach(list, "a")
	b := w.attach(w.network("plain", "br9", "10.79.0.0/24", "fd00:79::/64", nil), "b")

	w.wantSources("trusted", a.sources()...)
	traffic{
		{"a → outside v4", a.ns, w.outside, "192.0.2.2", true},
		{"a → outside v6", a.ns, w.outside, "2001:db8:1::2", true},
		{"outside → a v4 (new)", w.outside, a.ns, a.v4, false},
		{"b → outside v4 (no firewall plugin)", b.ns, w.outside, "192.0.2.2", false},
		{"b → outside v6 (no firewall plugin)", b.ns, w.outside, "2001:db8:1::2", false},
	}.expect(t)
	if tableExists(t, w.th.NS, adminTable) {
		t.Error("the firewalld backend created table inet " + adminTable.Name)
	}

	if err := w.rt.CheckNetworkList(context.Background(), list, a.rtConf); err != nil {
		t.Fatalf("CHECK after ADD: %v", err)
	}
	prev := `{"cniVersion":"1.1.0","ips":[{"address":"` + a.v4 + `/24"},{"address":"` + a.v6 + `/64"}],"interfaces":[{"name":"br0"}]}`
	conf := firewallConf(w.fields(`,"backend":"firewalld"`), prev)
	w.fw.RemoveSource(t, "trusted", a.v4+"/32")
	w.th.FailsWith("CHECK, source removed", w.call("CHECK", a, conf), "firewall: failed to find the address "+a.v4+"/32 in trusted zone")
	if trip(t, a.ns, w.outside, "192.0.2.2") {
		t.Error("a → outside v4 passed without its source in trusted")
	}
	w.th.OK(w.call("ADD", a, conf))
	w.th.OK(w.call("CHECK", a, conf))

	w.fw.Reload(t) // drops every runtime source
	w.wantSources("trusted")
	w.th.FailsWith("CHECK after a reload", w.call("CHECK", a, conf), "firewall: failed to find the address "+a.v4+"/32 in trusted zone")
	w.th.OK(w.call("ADD", a, conf))
	w.wantSources("trusted", a.sources()...)
	if !trip(t, a.ns, w.outside, "2001:db8:1::2") {
		t.Error("a → outside v6 failed after the repeated ADD")
	}

	// A zone firewalld does not know fails ADD and CHECK with code 7
	// naming the key, and ADD records nothing.
	for _, cmd := range []string{"ADD", "CHECK"} {
		e := w.th.Fail(w.call(cmd, b, firewallConf(w.fields(`,"firewalldZone":"nope"`), prev)))
		if want := `firewalldZone "nope": firewalld has no such zone`; e.Code != 7 || e.Msg != want {
			t.Errorf("%s to an unknown zone: code %d %q, want 7 %q", cmd, e.Code, e.Msg, want)
		}
	}
	if cl := w.claims(&ctr{id: b.id, network: "net1"}); len(cl) != 0 {
		t.Errorf("claims after the failed ADD: %+v", cl)
	}

	// d's IPv4 address is a source already: the administrator's.
	w.fw.AddSource(t, "trusted", "10.71.0.9/32")
	d := w.attach(w.pinned("net2", "br1", "10.71.0", "fd00:71::", w.fields(`,"backend":"firewalld"`)), "d")
	if d.v4 != "10.71.0.9" || d.v6 != "fd00:71::9" {
		t.Fatalf("d got %s, %s", d.v4, d.v6)
	}
	want := []firewalld.Claim{{Zone: "trusted", Source: "10.71.0.9/32", Foreign: true}, {Zone: "trusted", Source: "fd00:71::9/128"}}
	if got := w.claims(d); !slices.Equal(got, want) {
		t.Errorf("d's claims %+v, want %+v", got, want)
	}

	// The firewall plugin's DEL alone, without prevResult (the record says
	// what is a's): a keeps its veth and routes, and firewalld rejects its
	// traffic again.
	w.th.OK(w.call("DEL", a, firewallConf(w.fields(`,"backend":"firewalld"`), "")))
	w.wantSources("trusted", "10.71.0.9/32", "fd00:71::9/128")
	if cl := w.claims(a); len(cl) != 0 {
		t.Errorf("a's claims after DEL: %+v", cl)
	}
	if trip(t, a.ns, w.outside, "192.0.2.2") {
		t.Error("a → outside v4 passed after DEL")
	}
	w.detach(a) // the whole chain: the firewall's DEL again, then bridge's
	w.detach(d)
	w.wantSources("trusted", "10.71.0.9/32")

	// b as if ADDed by the reference plugin, whose ADD is addSource for
	// each address and records nothing: our DEL, given prevResult, removes
	// them as the reference's DEL would.
	for _, src := range b.sources() {
		w.fw.AddSource(t, "trusted", src)
	}
	if !trip(t, b.ns, w.outside, "192.0.2.2") {
		t.Error("b → outside failed with its sources in trusted")
	}
	bprev := `{"cniVersion":"1.1.0","ips":[{"address":"` + b.v4 + `/24"},{"address":"` + b.v6 + `/64"}]}`
	w.th.OK(w.call("DEL", b, firewallConf(w.fields(""), bprev)))
	w.wantSources("trusted", "10.71.0.9/32")
}

// TestFirewalldGC: GC of a network removes the sources of its attachments
// that are not valid, and nothing of another network's; without a list,
// nothing.
func TestFirewalldGC(t *testing.T) {
	t.Parallel()
	w := newFirewalldWorld(t)
	fw := fields(w.fields(`,"backend":"firewalld"`))
	net1 := w.network("net1", "br0", "10.72.0.0/24", "fd00:72::/64", fw)
	a, b := w.attach(net1, "a"), w.attach(net1, "b")
	c := w.attach(w.network("net2", "br1", "10.73.0.0/24", "fd00:73::/64", fw), "c")
	all := slices.Concat(a.sources(), b.sources(), c.sources())
	w.wantSources("trusted", all...)

	gc := func(valid []string) plugintest.Call {
		conf := gcConf("net1", valid)
		conf = strings.TrimSuffix(conf, "}") + w.fields("") + "}"
		return plugintest.Call{Command: "GC", Stdin: conf, Extra: []string{w.bus.Env()}}
	}
	w.th.OK(gc(nil))
	w.wantSources("trusted", all...)
	w.th.OK(gc([]string{"b"}))
	w.wantSources("trusted", slices.Concat(b.sources(), c.sources())...)
	traffic{
		{"a → outside v4 (collected)", a.ns, w.outside, "192.0.2.2", false},
		{"b → outside v4", b.ns, w.outside, "192.0.2.2", true},
		{"c → outside v6", c.ns, w.outside, "2001:db8:1::2", true},
	}.expect(t)
	w.th.OK(gc([]string{}))
	w.wantSources("trusted", c.sources()...)
}

// TestFirewalldIngressPolicy: under firewalld an ingress policy is still
// enforced by our table (as the reference keeps iptables for it): two
// same-bridge networks cannot reach each other though firewalld accepts
// both, and DEL takes the bridge claims back. firewalld decides what is
// forwarded, so no accept of ours goes into anyone else's chain: the
// policed networks name an nftablesAcceptChains chain this host does not
// have, which ADD and CHECK do not look for, and no rule of ours is found
// outside our tables.
func TestFirewalldIngressPolicy(t *testing.T) {
	t.Parallel()
	hostfw.Require(t)
	w := newFirewalldWorld(t)
	sb := fields(w.fields(`,"backend":"firewalld","ingressPolicy":"same-bridge","nftablesAcceptChains":["inet filter forward"]`))
	x := w.attach(w.network("net1", "br0", "10.74.0.0/24", "fd00:74::/64", sb), "x")
	y := w.attach(w.network("net2", "br1", "10.75.0.0/24", "fd00:75::/64", sb), "y")
	o := w.attach(w.network("net3", "br2", "10.76.0.0/24", "fd00:76::/64", fields(w.fields(`,"backend":"firewalld"`))), "o")
	traffic{
		{"x → outside v4", x.ns, w.outside, "192.0.2.2", true},
		{"x → y v4 (other policed bridge)", x.ns, y.ns, y.v4, false},
		{"y → x v6 (other policed bridge)", y.ns, x.ns, x.v6, false},
		{"o → x v4 (bridge without policy)", o.ns, x.ns, x.v4, true},
	}.expect(t)
	if n := hostfw.OursInOthers(t, w.th.NS); n != 0 {
		t.Errorf("%d rules of ours in others' chains under firewalld", n)
	}
	prev := `{"cniVersion":"1.1.0","ips":[{"address":"` + x.v4 + `/24"}],"interfaces":[{"name":"br0"}]}`
	w.th.OK(w.call("CHECK", x, firewallConf(w.fields(`,"backend":"firewalld","ingressPolicy":"same-bridge","nftablesAcceptChains":["inet filter forward"]`), prev)))
	for _, c := range []*ctr{x, y, o} {
		w.detach(c)
		if n := owned(t, w.th.NS, c.owner()); n != 0 {
			t.Errorf("%s: %d nftables objects left after DEL", c.id, n)
		}
	}
	w.wantSources("trusted")
}

// TestFirewalldDefaultBackend: without "backend", the native backend is
// used while firewalld is not on the system bus, and firewalld once it
// is. "backend":"firewalld" without firewalld fails and leaves nothing.
// DEL cleans up what either backend added, whichever is chosen then, also
// once firewalld has stopped.
func TestFirewalldDefaultBackend(t *testing.T) {
	t.Parallel()
	w := newBusWorld(t)
	list := w.network("net1", "br0", "10.77.0.0/24", "fd00:77::/64", fields(w.fields("")))
	n := w.attach(list, "n")
	if plugintest.NFTOwned(t, w.th.NS, n.owner()) == 0 {
		t.Error("no native nftables state for n, added while firewalld was not running")
	}
	if _, err := os.Stat(w.state + "/sources.json"); !os.IsNotExist(err) {
		t.Errorf("firewalld state written without firewalld: %v", err)
	}

	prev := `{"cniVersion":"1.1.0","ips":[{"address":"10.77.0.50/24"}]}`
	e := w.th.Fail(w.call("ADD", &ctr{ns: n.ns, id: "x"}, firewallConf(w.fields(`,"backend":"firewalld"`), prev)))
	if !strings.Contains(e.Msg, "10.77.0.50/32") || !strings.Contains(e.Msg, "org.fedoraproject.FirewallD1") {
		t.Errorf("ADD with backend firewalld and no firewalld: %q", e.Msg)
	}
	if cl := w.claims(&ctr{id: "x", network: "net1"}); len(cl) != 0 {
		t.Errorf("claims left by the failed ADD: %+v", cl)
	}

	w.fw = w.bus.StartFirewalld(t, w.th.NS)
	f := w.attach(list, "f")
	w.wantSources("trusted", f.sources()...)
	if k := plugintest.NFTOwned(t, w.th.NS, f.owner()); k != 0 {
		t.Errorf("%d native nftables objects for f, added with firewalld running", k)
	}
	if !trip(t, f.ns, w.outside, "192.0.2.2") {
		t.Error("f → outside failed")
	}
	w.detach(n)
	if k := plugintest.NFTOwned(t, w.th.NS, n.owner()); k != 0 {
		t.Errorf("%d native nftables objects of n left after DEL", k)
	}

	// firewalld stops, its runtime sources with it: DEL (now choosing the
	// native backend) succeeds and drops f's record.
	w.fw.Stop(t)
	w.detach(f)
	if cl := w.claims(f); len(cl) != 0 {
		t.Errorf("f's claims after DEL with firewalld stopped: %+v", cl)
	}
}
