package portmap

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"slices"
	"testing"

	"github.com/google/nftables/binaryutil"
	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/internal/hostfw"
	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/sysctl"

	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/nft"
	"github.com/nftcni/nftcni/nft/foreign"
	"github.com/nftcni/nftcni/nft/internal/nfttest"
	"github.com/nftcni/nftcni/ownerid"
)

// The life of two owners through the Setup paths on the running kernel:
// A fresh with both families; A again with IPv4 only and another port
// (marker with a record: lookups; the old port and the whole IPv6 state,
// marker included, go); B asking for A's port (fast path: the conflict is
// found by lookup); B taking over A's addresses with its own port (fast
// path); both torn down, leaving nothing owned, markers included.
func TestLiveFastAndSlowPaths(t *testing.T) {
	ns := privtest.NewNS(t)
	a := ownerid.Owner{Network: "pm", ContainerID: "aaaa", IfName: "eth0"}
	b := ownerid.Owner{Network: "pm", ContainerID: "bbbb", IfName: "eth0"}
	tcp := func(host uint16, target string) Mapping {
		return Mapping{HostPort: host, Proto: unix.IPPROTO_TCP, Target: netip.MustParseAddrPort(target)}
	}
	expect := func(step string, want ...string) { t.Helper(); nfttest.ExpectOwned(t, ns, step, want...) }
	ta, tb := a.Tag(), b.Tag()
	// The accepts for iptables-nft's FORWARD chains (nft/foreign): in
	// table inet nftcni_accept a claim per DNAT accept and a count per
	// chain, each with the owner's component tag, and the index element
	// of the shared rule in each chain.
	ia, ib := claims(a, 1), claims(b, 1)

	if err := Setup(ns, Spec{Owner: a,
		Mappings: []Mapping{tcp(8080, "10.9.0.5:80"), tcp(8080, "[fd00:9::5]:80")},
		Hairpin:  []netip.Prefix{netip.MustParsePrefix("10.9.0.5/24"), netip.MustParsePrefix("fd00:9::5/64")},
	}); err != nil {
		t.Fatal(err)
	}
	recA := "6:8080>10.9.0.5:80 6:8080>[fd00:9::5]:80 h10.9.0.5/24 hfd00:9::5/64"
	ma := nft.MarkerWith(a, recA).Comment
	expect("A fresh", nfttest.Cat(ia, ia, shared(2), []string{"ip ports " + ta, "ip hairpins " + ta, "ip hairpin_local " + ta, "ip owners " + ma,
		"ip6 ports " + ta, "ip6 hairpins " + ta, "ip6 hairpin_local " + ta, "ip6 owners " + ma})...)

	specA := Spec{Owner: a, Mappings: []Mapping{tcp(8081, "10.9.0.5:80")},
		Hairpin: []netip.Prefix{netip.MustParsePrefix("10.9.0.5/24")}, Localhost: []netip.Addr{netip.MustParseAddr("10.9.0.5")}}
	if err := Setup(ns, specA); err != nil {
		t.Fatal(err)
	}
	ma = nft.MarkerWith(a, record(specA)).Comment
	expect("A again, IPv4 only", nfttest.Cat(ia, shared(1), []string{"ip ports " + ta, "ip hairpins " + ta, "ip hairpin_local " + ta, "ip localhost " + ta, "ip owners " + ma})...)
	if err := Check(ns, specA); err != nil {
		t.Errorf("Check after A's second Setup: %v", err)
	}

	err := Setup(ns, Spec{Owner: b, Mappings: []Mapping{tcp(8081, "10.9.0.7:80")}})
	var ce *ConflictError
	if !errors.As(err, &ce) || ce.HostPort != 8081 || ce.Holder != ta {
		t.Fatalf("B asking for A's port: %v", err)
	}
	expect("after the conflict", nfttest.Cat(ia, shared(1), []string{"ip ports " + ta, "ip hairpins " + ta, "ip hairpin_local " + ta, "ip localhost " + ta, "ip owners " + ma})...)

	specB := Spec{Owner: b, Mappings: []Mapping{tcp(8082, "10.9.0.5:80")},
		Hairpin: []netip.Prefix{netip.MustParsePrefix("10.9.0.5/24")}, Localhost: []netip.Addr{netip.MustParseAddr("10.9.0.5")}}
	if err := Setup(ns, specB); err != nil {
		t.Fatal(err)
	}
	expect("B takes over", nfttest.Cat(ia, ib, shared(1), []string{"ip ports " + ta, "ip ports " + tb, "ip hairpins " + tb, "ip hairpin_local " + tb, "ip localhost " + tb,
		"ip owners " + ma, "ip owners " + nft.MarkerWith(b, record(specB)).Comment})...)

	for _, o := range []ownerid.Owner{a, b} {
		if _, err := Teardown(ns, o, nil); err != nil {
			t.Fatal(err)
		}
	}
	expect("after both Teardowns")
}

// sharedTag is the comment of the one rule of ours in each iptables-nft
// FORWARD chain: it accepts what table inet nftcni_accept marked.
const sharedTag = "98d28d7ce706381e:effb6c9e37d86e32 nftcni-marked-accepts"

// claims are o's elements in table inet nftcni_accept for one
// iptables-nft FORWARD chain where it has k DNAT accepts, as
// nfttest.Owned lists them: k claims and their count.
func claims(o ownerid.Owner, k int) []string {
	tag := o.ComponentTag(component)
	out := []string{"inet counts " + tag}
	for range k {
		out = append(out, "inet claims "+tag)
	}
	return out
}

// shared are the index elements of the shared rules in n iptables-nft
// FORWARD chains, as nfttest.Owned lists them.
func shared(n int) []string {
	var out []string
	for range n {
		out = append(out, "inet rules "+sharedTag)
	}
	return out
}

// localnetWorld is a namespace with interfaces pm0 and pm1 (veth ends
// whose peers live in another namespace) and two owners with localhost
// forwarding.
type localnetWorld struct {
	t    *testing.T
	ns   *netns.NS
	a, b ownerid.Owner
}

func newLocalnetWorld(t *testing.T) *localnetWorld {
	ns, peer := privtest.NewNS(t), privtest.NewNS(t)
	for _, n := range []string{"pm0", "pm1"} {
		privtest.Wire(t, ns, n, netip.Prefix{}, peer, n, netip.Prefix{})
	}
	return &localnetWorld{t: t, ns: ns,
		a: ownerid.Owner{Network: "pm", ContainerID: "aaaa", IfName: "eth0"},
		b: ownerid.Owner{Network: "pm", ContainerID: "bbbb", IfName: "eth0"}}
}

func (w *localnetWorld) spec(o ownerid.Owner, addr string, ifaces ...string) Spec {
	a := netip.MustParseAddr(addr)
	return Spec{Owner: o,
		Mappings:  []Mapping{{HostPort: 8080 + uint16(a.As4()[3]), Proto: unix.IPPROTO_TCP, Target: netip.AddrPortFrom(a, 80)}},
		Localhost: []netip.Addr{a}, Localnet: ifaces}
}

func (w *localnetWorld) setup(s Spec) {
	w.t.Helper()
	if err := Setup(w.ns, s); err != nil {
		w.t.Fatal(err)
	}
}

func (w *localnetWorld) teardown(o ownerid.Owner) Removed {
	w.t.Helper()
	r, err := Teardown(w.ns, o, nil)
	if err != nil {
		w.t.Fatal(err)
	}
	return r
}

func (w *localnetWorld) setSysctl(ifName, v string) {
	w.t.Helper()
	if err := sysctl.Set(w.ns, localnetSysctl(ifName), v); err != nil {
		w.t.Fatal(err)
	}
}

// expect checks route_localnet of pm0 and pm1 and the interfaces with a
// prior value recorded.
func (w *localnetWorld) expect(step, pm0, pm1 string, priors ...string) {
	w.t.Helper()
	for _, c := range []struct{ name, want string }{{"pm0", pm0}, {"pm1", pm1}} {
		got, err := sysctl.Get(w.ns, localnetSysctl(c.name))
		if err != nil {
			w.t.Fatal(err)
		}
		if got != c.want {
			w.t.Errorf("%s: route_localnet of %s is %s, want %s", step, c.name, got, c.want)
		}
	}
	c, err := nft.Open(w.ns)
	if err != nil {
		w.t.Fatal(err)
	}
	defer c.Close()
	els, err := c.Elements(fam4.localnetPrior)
	if err != nil {
		w.t.Fatal(err)
	}
	got := []string{}
	for _, e := range els {
		got = append(got, fmt.Sprintf("%s=%d", bytes.TrimRight(e.Key, "\x00"), binaryutil.NativeEndian.Uint32(e.Val)))
	}
	slices.Sort(got)
	if want := append([]string{}, priors...); !slices.Equal(got, want) {
		w.t.Errorf("%s: localnet_prior holds %q, want %q", step, got, want)
	}
}

// route_localnet on the kernel: set while an interface has attachments
// with localhost forwarding, given back (to whatever it was, 1 included)
// when the last one goes, also when an attachment moves to another
// interface; Check sees it switched off by hand.
func TestLiveLocalnet(t *testing.T) {
	w := newLocalnetWorld(t)
	w.setSysctl("pm1", "1") // an administrator's setting, to be kept
	w.expect("start", "0", "1")

	w.setup(w.spec(w.a, "10.9.0.5", "pm0", "pm1"))
	w.expect("A on pm0 and pm1", "1", "1", "pm0=0", "pm1=1")
	w.setup(w.spec(w.b, "10.9.0.7", "pm0"))
	w.expect("B on pm0 too", "1", "1", "pm0=0", "pm1=1")
	if err := Check(w.ns, w.spec(w.b, "10.9.0.7", "pm0")); err != nil {
		t.Errorf("Check B: %v", err)
	}
	w.setSysctl("pm0", "0")
	if err := Check(w.ns, w.spec(w.b, "10.9.0.7", "pm0")); err == nil || err.Error() != "route_localnet is off on pm0: localhost clients cannot reach the container's host ports" {
		t.Errorf("Check with route_localnet off by hand: %v", err)
	}
	w.setSysctl("pm0", "1")

	w.teardown(w.a)
	w.expect("A gone: pm1 back to the administrator's 1, pm0 still B's", "1", "1", "pm0=0")
	w.teardown(w.b)
	w.expect("B gone: pm0 back to 0", "0", "1")
	nfttest.ExpectOwned(t, w.ns, "after both Teardowns")

	// An attachment moving (its re-ADD finds it routed elsewhere) gives
	// the old interface back.
	w.setSysctl("pm1", "0")
	w.setup(w.spec(w.a, "10.9.0.5", "pm0"))
	w.expect("A on pm0", "1", "0", "pm0=0")
	w.setup(w.spec(w.a, "10.9.0.5", "pm1"))
	w.expect("A moved to pm1", "0", "1", "pm1=0")
	if _, err := GC(w.ns, "pm", nil); err != nil {
		t.Fatal(err)
	}
	w.expect("after GC", "0", "0")
}

// What a plugin killed half-way leaves behind, built by hand, and how the
// next operation finishes the job: no state ever leaves route_localnet on
// without a record of its prior value, and the prior value is never lost.
func TestLiveLocalnetAfterCrash(t *testing.T) {
	t.Run("ADD killed after its commit, before setting route_localnet", func(t *testing.T) {
		w := newLocalnetWorld(t)
		sysctlFakes.Store(w.ns, sysctlAccess{get: kernelSysctls.get,
			set: func(*netns.NS, string, string) error { return nil }}) // the write never happens
		err := Setup(w.ns, w.spec(w.a, "10.9.0.5", "pm0"))
		sysctlFakes.Delete(w.ns)
		if err != nil {
			t.Fatal(err)
		}
		w.expect("killed ADD", "0", "0", "pm0=0")
		w.teardown(w.a) // the runtime's DEL after the failed ADD
		w.expect("its DEL", "0", "0")
		nfttest.ExpectOwned(t, w.ns, "after its DEL")
	})
	t.Run("DEL killed after restoring, before its commit", func(t *testing.T) {
		w := newLocalnetWorld(t)
		w.setup(w.spec(w.a, "10.9.0.5", "pm0"))
		w.setSysctl("pm0", "0") // the restore that happened
		w.expect("killed DEL", "0", "0", "pm0=0")
		// Another ADD on pm0 before the DEL is retried: the prior value
		// recorded is still the one from before nftcni.
		w.setup(w.spec(w.b, "10.9.0.7", "pm0"))
		w.expect("another ADD", "1", "0", "pm0=0")
		w.teardown(w.a)
		w.expect("the retried DEL", "1", "0", "pm0=0")
		w.teardown(w.b)
		w.expect("the other's DEL", "0", "0")
	})
	// The Setup committed its accepts in others' chains too (an
	// administrator's opted-in chain, and iptables-nft's FORWARD chain,
	// created for them): they go as well.
	t.Run("failing to set route_localnet undoes the ADD", func(t *testing.T) {
		hostfw.Require(t)
		w := newLocalnetWorld(t)
		hostfw.Load(t, w.ns, hostfw.AdminFilter)
		theirs := hostfw.Others(t, w.ns)
		admin, err := foreign.Parse("inet filter forward")
		if err != nil {
			t.Fatal(err)
		}
		s := w.spec(w.a, "10.9.0.5", "pm0")
		s.AcceptChains = []foreign.Chain{admin}
		sysctlFakes.Store(w.ns, sysctlAccess{get: kernelSysctls.get,
			set: func(ns *netns.NS, name, v string) error {
				if v == "1" {
					return fs.ErrPermission
				}
				return kernelSysctls.set(ns, name, v)
			}})
		err = Setup(w.ns, s)
		sysctlFakes.Delete(w.ns)
		if err == nil || err.Error() != "unable to enable route_localnet: permission denied" {
			t.Errorf("Setup: %v", err)
		}
		w.expect("after the failed Setup", "0", "0")
		nfttest.ExpectOwned(t, w.ns, "after the failed Setup")
		hostfw.Diff(t, "others' ruleset after the failed Setup", theirs, hostfw.Others(t, w.ns))
		if n := hostfw.OursInOthers(t, w.ns); n != 0 {
			t.Errorf("%d rules of ours left in others' chains after the failed Setup", n)
		}
	})
}

// An address's hairpin state is its hairpins element (address : jump
// hairpin_<prefix length>) and its hairpin_local element (address .
// subnet address); masqAll's is at prefix length 0 (address . 0.0.0.0).
// A stale element of another owner at another prefix length (a missed
// DEL) has another hairpin_local key: the new owner's Setup finds it
// through the hairpins element it replaces and removes it, in either
// direction, so that no element of the old owner stays to be removed by
// nobody but GC.
func TestLiveMasqAllTakesOver(t *testing.T) {
	ns := privtest.NewNS(t)
	a := ownerid.Owner{Network: "pm", ContainerID: "aaaa", IfName: "eth0"}
	b := ownerid.Owner{Network: "pm", ContainerID: "bbbb", IfName: "eth0"}
	spec := func(o ownerid.Owner, port uint16, masqAll bool) Spec {
		return Spec{Owner: o, MasqAll: masqAll,
			Mappings: []Mapping{{HostPort: port, Proto: unix.IPPROTO_TCP, Target: netip.MustParseAddrPort("10.9.0.5:80")}},
			Hairpin:  []netip.Prefix{netip.MustParsePrefix("10.9.0.5/24")},
		}
	}
	ta, tb := a.Tag(), b.Tag()
	ia, ib := nfttest.Cat(claims(a, 1), shared(1)), claims(b, 1)
	sa1, sb, sa2 := spec(a, 8080, false), spec(b, 8081, true), spec(a, 8082, false)
	marker := func(s Spec) string { return nft.MarkerWith(s.Owner, record(s)).Comment }
	for _, step := range []struct {
		s    Spec
		what string
		want []string
	}{
		{sa1, "a", nfttest.Cat(ia, []string{"ip ports " + ta, "ip hairpins " + ta, "ip hairpin_local " + ta, "ip owners " + marker(sa1)})},
		{sb, "b took the address over with masqAll", nfttest.Cat(ia, ib, []string{"ip ports " + ta, "ip ports " + tb,
			"ip hairpins " + tb, "ip hairpin_local " + tb, "ip owners " + marker(sa1), "ip owners " + marker(sb)})},
		{sa2, "a took the address back", nfttest.Cat(ia, ib, []string{"ip ports " + ta, "ip ports " + tb,
			"ip hairpins " + ta, "ip hairpin_local " + ta, "ip owners " + marker(sa2), "ip owners " + marker(sb)})},
	} {
		if err := Setup(ns, step.s); err != nil {
			t.Fatalf("Setup of %s (masqAll %v): %v", step.s.Owner.ContainerID, step.s.MasqAll, err)
		}
		if err := Check(ns, step.s); err != nil {
			t.Errorf("Check of %s (masqAll %v): %v", step.s.Owner.ContainerID, step.s.MasqAll, err)
		}
		nfttest.ExpectOwned(t, ns, step.what, step.want...)
	}
}
