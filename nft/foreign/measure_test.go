package foreign

import (
	"fmt"
	"net/netip"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/internal/hostfw"
	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/nft"
	"github.com/nftcni/nftcni/nft/internal/nfttest"
	"github.com/nftcni/nftcni/ownerid"
)

// TestLiveMeasureAccepts is a measurement, not an assertion: what one
// attachment's accepts in a chain of others cost, process CPU (our work
// and the kernel's in our syscalls), with the accepts of 0, 110, 250 and
// 1000 other attachments there — the firewall's two per address and
// portmap's one per mapping, IPv4, as the bench's full chain leaves them.
// Each round is a first ADD's Insert (the firewall's, then portmap's, a
// commit each) and a DEL's Remove, medians of 30 rounds. In iptables-nft's
// FORWARD chain the accepts are marked (marked.go): the chain holds the
// shared rule alone, the attachments are elements of table inet
// nftcni_accept (lookup elements, claims and counts), so the columns are
// FORWARD's rules and those elements. For comparison, an administrator's
// chain named in nftablesAcceptChains gets native per-address rules (the
// same number of accepts; portmap's native rule is two, one per
// direction). Run with
//
//	NFTCNI_MEASURE=1 go test -count=1 -v -run MeasureAccepts ./nft/foreign
//
// Per-address rules in iptables-nft's FORWARD cost in proportion to the
// rules there: the kernel validates every rule of the table when a rule
// with a verdict is added (an x_tables match costs far more there than
// native expressions) and rebuilds the chain's rule blob on every change
// (docs/performance.md); elements of a set cost neither.
func TestLiveMeasureAccepts(t *testing.T) {
	if os.Getenv("NFTCNI_MEASURE") == "" {
		t.Skip("a measurement; set NFTCNI_MEASURE=1 to run it")
	}
	hostfw.Require(t)
	const rounds = 30
	mark := func(i int) (fw, pm Mark) {
		o := ownerid.Owner{Network: "measure", ContainerID: fmt.Sprintf("c%06d", i), IfName: "eth0"}
		return Mark{Owner: o}, Mark{Owner: o, Component: "portmap"}
	}
	addr := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 50 + byte(i>>16), byte(i >> 8), byte(i)}) }
	fwAccepts := func(i int) []Accept { return []Accept{From(addr(i)), RepliesTo(addr(i))} }
	pmAccepts := func(i int) []Accept { return []Accept{DNATedTo(unix.IPPROTO_TCP, netip.AddrPortFrom(addr(i), 80))} }
	timed := func(ns *netns.NS, fn func(tx *nft.Tx) error) time.Duration {
		c0 := nfttest.ProcessCPU(t)
		update(t, ns, fn)
		return nfttest.ProcessCPU(t) - c0
	}
	median := nfttest.Median
	admin := mustParse(t, "ip fw forwarding")
	for _, where := range []struct {
		name  string
		chain Chain
	}{{"iptables-nft FORWARD", Iptables[0]}, {"admin chain (native)", admin}} {
		for _, n := range []int{0, 110, 250, 1000} {
			ns := privtest.NewNS(t)
			hostfw.Load(t, ns, "table ip fw { chain forwarding { type filter hook forward priority 10; policy accept; }; }")
			c := where.chain
			for i := range n {
				fw, pm := mark(i)
				update(t, ns, func(tx *nft.Tx) error { return Insert(tx, c, fw, fwAccepts(i)) })
				update(t, ns, func(tx *nft.Tx) error { return Insert(tx, c, pm, pmAccepts(i)) })
			}
			rules, elements := len(rulesOf(t, ns, c)), countElements(t, ns)
			var fwIns, pmIns, fwDel, pmDel []time.Duration
			for r := range rounds {
				i := n + 1 + r
				fw, pm := mark(i)
				fwIns = append(fwIns, timed(ns, func(tx *nft.Tx) error { return Insert(tx, c, fw, fwAccepts(i)) }))
				pmIns = append(pmIns, timed(ns, func(tx *nft.Tx) error { return Insert(tx, c, pm, pmAccepts(i)) }))
				pmDel = append(pmDel, timed(ns, func(tx *nft.Tx) error { _, err := Remove(tx, c, pm); return err }))
				fwDel = append(fwDel, timed(ns, func(tx *nft.Tx) error { _, err := Remove(tx, c, fw); return err }))
			}
			t.Logf("%-22s %4d attachments (%4d rules, %5d elements): firewall Insert %v, Remove %v; portmap Insert %v, Remove %v",
				where.name, n, rules, elements, median(fwIns), median(fwDel), median(pmIns), median(pmDel))
		}
	}
}

// countElements is the number of elements in table inet nftcni_accept's
// sets and maps in ns, 0 without the table.
func countElements(t *testing.T, ns *netns.NS) int {
	t.Helper()
	m, n := readMarked(t, ns), 0
	for _, els := range m.sets {
		n += len(els)
	}
	for _, by := range []map[string]int{m.claims, m.counts} {
		for _, k := range by {
			n += k
		}
	}
	return n
}
