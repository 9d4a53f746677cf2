package nft_test

import (
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/nft"
	"github.com/nftcni/nftcni/nft/firewall"
	"github.com/nftcni/nftcni/nft/foreign"
	"github.com/nftcni/nftcni/nft/internal/nfttest"
	"github.com/nftcni/nftcni/nft/masq"
	"github.com/nftcni/nftcni/nft/portmap"
	"github.com/nftcni/nftcni/ownerid"
)

// TestLiveMeasureSetupPaths is a measurement, not an assertion: with 1000
// owners' elements in the masquerade sets of a throwaway namespace, it
// times a first Setup of one more owner (fast path: marker and key
// lookups) against a repeated Setup of an existing owner (recorded path:
// the marker's record gives the owner's elements, looked up; same
// address, so that its batch, like the fast one, deletes nothing and
// closing the socket waits for no RCU grace period, see nft.HoldCloses),
// and logs the medians of wall time and of process CPU time (user+system,
// which includes the kernel's work). Run with
// NFTCNI_MEASURE=1 go test -count=1 -v -run MeasureSetupPaths ./nft
// (NFTCNI_MEASURE_OWNERS=n for another number of owners than 1000).
func TestLiveMeasureSetupPaths(t *testing.T) {
	if os.Getenv("NFTCNI_MEASURE") == "" {
		t.Skip("a measurement; set NFTCNI_MEASURE=1 to run it")
	}
	ns := privtest.NewNS(t)
	owners, rounds := 1000, 50
	if n, err := strconv.Atoi(os.Getenv("NFTCNI_MEASURE_OWNERS")); err == nil && n >= 1 {
		owners = n // to see how each path grows with the number of owners
	}
	addr := func(i int) []netip.Prefix {
		return []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 50 + byte(i>>16), byte(i >> 8), byte(i)}), 24)}
	}
	owner := func(i int) ownerid.Owner {
		return ownerid.Owner{Network: "measure", ContainerID: fmt.Sprintf("c%06d", i), IfName: "eth0"}
	}
	for i := range owners {
		if err := masq.Setup(ns, owner(i), addr(i)); err != nil {
			t.Fatal(err)
		}
	}
	cpu := func() time.Duration { return nfttest.ProcessCPU(t) }
	measure := func(op func(r int) error, after func(r int) error) (wall, proc time.Duration) {
		var ws, cs []time.Duration
		for r := range rounds {
			c0, w0 := cpu(), time.Now()
			if err := op(r); err != nil {
				t.Fatal(err)
			}
			ws, cs = append(ws, time.Since(w0)), append(cs, cpu()-c0)
			if err := after(r); err != nil {
				t.Fatal(err)
			}
		}
		slices.Sort(ws)
		slices.Sort(cs)
		return ws[rounds/2], cs[rounds/2]
	}
	fast0, _ := nft.SetupPaths()
	fw, fc := measure(
		func(r int) error { return masq.Setup(ns, owner(owners+r), addr(owners+r)) },
		func(r int) error { return masq.Teardown(ns, owner(owners+r)) })
	fast1, fb := nft.SetupPaths()
	if fast1-fast0 != int64(rounds) || fb != 0 {
		t.Errorf("%d fast paths (%d fallbacks), want %d", fast1-fast0, fb, rounds)
	}
	sw, sc := measure(
		func(int) error { return masq.Setup(ns, owner(0), addr(0)) },
		func(int) error { return nil })
	if fast2, fb2 := nft.SetupPaths(); fast2-fast1 != int64(rounds) || fb2 != 0 {
		t.Errorf("%d lookup paths (%d fallbacks) for repeated Setups, want %d", fast2-fast1, fb2, rounds)
	}
	t.Logf("%d owners, median of %d: fast path (first Setup of a new owner): wall %v, CPU %v; recorded path (repeated Setup of an owner with a marker): wall %v, CPU %v",
		owners, rounds, fw, fc, sw, sc)
}

// TestLiveMeasureGrowth is a measurement, not an assertion: for masq,
// portmap and firewall, the process CPU (user+system: our work and the
// kernel's in our syscalls) of a new owner's Setup, of its CHECK (portmap
// and firewall) and of its Teardown,
// with no other owner and with NFTCNI_MEASURE_OWNERS (default 1000)
// owners in the tables, each owner holding what a bridge attachment with
// ipMasq, one port mapping and the firewall's same-bridge policy holds
// (portmap: route_localnet on the interface towards the containers,
// shared by all; portmap and firewall: marked accepts for iptables-nft's
// FORWARD chain — elements of table inet nftcni_accept and the shared rule
// in FORWARD (nft/foreign, marked.go) — as on a host where iptables can be
// used, whether or not this one has an iptables program: foreign.Use).
// Medians of 30 rounds; run with
// NFTCNI_MEASURE=1 go test -count=1 -v -run MeasureGrowth ./nft
// NFTCNI_MEASURE_ONLY=firewall measures one component;
// NFTCNI_MEASURE_NO_IPTABLES=1 leaves out the accepts for iptables-nft's
// FORWARD chains, which shows what they add (with per-address rules there,
// as before the marked accepts, every rule added made the kernel validate
// every rule its table's base chains reach, and every change of the chain
// made it rebuild the chain's rule blob, both in proportion to the rules
// the chain held: docs/performance.md).
func TestLiveMeasureGrowth(t *testing.T) {
	if os.Getenv("NFTCNI_MEASURE") == "" {
		t.Skip("a measurement; set NFTCNI_MEASURE=1 to run it")
	}
	owners, rounds := 1000, 30
	if n, err := strconv.Atoi(os.Getenv("NFTCNI_MEASURE_OWNERS")); err == nil && n >= 1 {
		owners = n
	}
	prefix := func(i int) netip.Prefix {
		return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 50 + byte(i>>16), byte(i >> 8), byte(i)}), 8)
	}
	owner := func(i int) ownerid.Owner {
		return ownerid.Owner{Network: "measure", ContainerID: fmt.Sprintf("c%06d", i), IfName: "eth0"}
	}
	pmSpec := func(i int) portmap.Spec {
		p := prefix(i)
		return portmap.Spec{Owner: owner(i),
			Mappings:  []portmap.Mapping{{HostPort: uint16(1024 + i), Proto: unix.IPPROTO_TCP, Target: netip.AddrPortFrom(p.Addr(), 80)}},
			Hairpin:   []netip.Prefix{p},
			Localhost: []netip.Addr{p.Addr()},
			Localnet:  []string{"pm0"}}
	}
	fwAttachment := func(i int) firewall.Attachment {
		return firewall.Attachment{Owner: owner(i), Addrs: []netip.Addr{prefix(i).Addr()}, Bridge: "br0", Policy: firewall.PolicySameBridge}
	}
	type component struct {
		name            string
		setup, teardown func(ns *netns.NS, i int) error
		check           func(ns *netns.NS, i int) error // nil: not measured
	}
	comps := []component{
		{"masq",
			func(ns *netns.NS, i int) error { return masq.Setup(ns, owner(i), []netip.Prefix{prefix(i)}) },
			func(ns *netns.NS, i int) error { return masq.Teardown(ns, owner(i)) }, nil},
		{"portmap",
			func(ns *netns.NS, i int) error { return portmap.Setup(ns, pmSpec(i)) },
			func(ns *netns.NS, i int) error { _, err := portmap.Teardown(ns, owner(i), nil); return err },
			func(ns *netns.NS, i int) error { return portmap.Check(ns, pmSpec(i)) }},
		{"firewall",
			func(ns *netns.NS, i int) error { return firewall.Setup(ns, fwAttachment(i)) },
			func(ns *netns.NS, i int) error { return firewall.Teardown(ns, owner(i), nil) },
			func(ns *netns.NS, i int) error { return firewall.Check(ns, fwAttachment(i)) }},
	}
	cpu := func() time.Duration { return nfttest.ProcessCPU(t) }
	reachable := foreign.IptablesReachable
	foreign.IptablesReachable = func() bool { return true }
	t.Cleanup(func() { foreign.IptablesReachable = reachable })
	if os.Getenv("NFTCNI_MEASURE_NO_IPTABLES") != "" {
		saved := foreign.Iptables
		foreign.Iptables = nil
		t.Cleanup(func() { foreign.Iptables = saved })
	}
	for _, c := range comps {
		if only := os.Getenv("NFTCNI_MEASURE_ONLY"); only != "" && only != c.name {
			continue
		}
		for _, n := range []int{0, owners} {
			ns := privtest.NewNS(t)
			privtest.Wire(t, ns, "pm0", netip.Prefix{}, privtest.NewNS(t), "pm0", netip.Prefix{})
			for i := range n {
				if err := c.setup(ns, i); err != nil {
					t.Fatal(err)
				}
			}
			var su, td, ck []time.Duration
			for r := range rounds {
				i := owners + 1 + r
				c0 := cpu()
				if err := c.setup(ns, i); err != nil {
					t.Fatal(err)
				}
				c1 := cpu()
				if c.check != nil {
					if err := c.check(ns, i); err != nil {
						t.Fatal(err)
					}
				}
				c2 := cpu()
				if err := c.teardown(ns, i); err != nil {
					t.Fatal(err)
				}
				su, ck, td = append(su, c1-c0), append(ck, c2-c1), append(td, cpu()-c2)
			}
			t.Logf("%-8s %5d owners: Setup CPU %v, Teardown CPU %v, Check CPU %v", c.name, n, nfttest.Median(su), nfttest.Median(td), nfttest.Median(ck))
		}
	}
}
