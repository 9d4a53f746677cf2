package foreign

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/internal/hostfw"
	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/nft"
	"github.com/nftcni/nftcni/nft/internal/nfttest"
	"github.com/nftcni/nftcni/ownerid"
	"github.com/nftcni/nftcni/sysctl"
)

// Live tests of the marked layout (marked.go): iptables-nft's FORWARD
// chains hold one shared rule per family, the attachments' accepts are
// elements of table inet nftcni_accept.

// sharedLine is the shared rule as iptables-save prints it.
func sharedLine() string {
	return `-A FORWARD -m mark --mark 0x1000/0x1000 -m comment --comment "` + sharedComment() + `" -j ACCEPT`
}

// marked is what table inet nftcni_accept holds in ns: the lookup sets'
// elements as nft lists them (with a comment if they have one: they should
// not, as several attachments may claim one), and how many claims and
// counts elements each comment has ("" for the counts without one).
type marked struct {
	sets   map[string][]string
	claims map[string]int
	counts map[string]int
}

func readMarked(t *testing.T, ns *netns.NS) marked {
	t.Helper()
	c, err := nft.Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	out := marked{sets: map[string][]string{}, claims: map[string]int{}, counts: map[string]int{}}
	if ok, err := c.TableExists(markTable); err != nil || !ok {
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	for _, s := range []*nftables.Set{from4, from6, replies4, replies6, dnat4, dnat6} {
		els, err := c.Elements(s)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range els {
			r := renderKey(e.Key, s == dnat4 || s == dnat6)
			if e.Comment != "" {
				r += ` comment "` + e.Comment + `"`
			}
			out.sets[s.Name] = append(out.sets[s.Name], r)
		}
		slices.Sort(out.sets[s.Name])
	}
	for _, s := range []struct {
		set *nftables.Set
		n   map[string]int
	}{{claims, out.claims}, {counts, out.counts}} {
		els, err := c.Elements(s.set)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range els {
			s.n[e.Comment]++
		}
	}
	return out
}

// renderKey is a lookup key as nft lists it: "10.1.0.5", or
// "10.1.0.5 . 6 . 80" for a DNAT accept.
func renderKey(k []byte, dnat bool) string {
	n := len(k)
	if dnat {
		n -= 8
	}
	a, _ := netip.AddrFromSlice(k[:n])
	if !dnat {
		return a.String()
	}
	return fmt.Sprintf("%s . %d . %d", a, k[n], int(k[n+4])<<8|int(k[n+5]))
}

// expectShared fails the test unless the iptables-nft FORWARD chains of ns
// (IPv4, IPv6) hold exactly wants[i] rules of ours (owner-tagged), all of
// them the shared rule, and iptables-save and ip6tables-save print it so.
func expectShared(t *testing.T, ns *netns.NS, wants ...int) {
	t.Helper()
	for i, ch := range Iptables {
		want := wants[i]
		n := 0
		exists := true
		update(t, ns, func(tx *nft.Tx) (err error) { exists, err = tx.ChainExists(ch.nft()); return err })
		if !exists {
			if want != 0 {
				t.Errorf("%s: chain missing, want %d shared rule(s)", ch, want)
			}
			continue
		}
		for _, r := range rulesOf(t, ns, ch) {
			if _, ours := ownerid.ParseTag(r.Comment); !ours {
				continue
			}
			if r.Comment != sharedComment() {
				t.Errorf("%s: a rule of ours other than the shared one: %q", ch, r.Comment)
			}
			n++
		}
		if n != want {
			t.Errorf("%s: %d rules of ours, want %d shared one(s)", ch, n, want)
		}
	}
	save := hostfw.IptablesSave(t, ns)
	if got := strings.Count(save, sharedLine()); got != wants[0]+wants[1] {
		t.Errorf("iptables-save and ip6tables-save print the shared rule %d times, want %d:\n%s", got, wants[0]+wants[1], save)
	}
	if wants[0]+wants[1] == 0 && hostfw.WithoutOurs(save) != save {
		t.Errorf("rules of ours left in iptables-save:\n%s", save)
	}
}

func checkAll(ns *netns.NS, m Mark, want []Accept) error {
	c, err := nft.Open(ns)
	if err != nil {
		return err
	}
	defer c.Close()
	return c.Update(func(tx *nft.Tx) error {
		for _, ch := range Iptables {
			if err := Check(tx, ch, m, want); err != nil {
				return err
			}
		}
		return nil
	})
}

func removeAll(t *testing.T, ns *netns.NS, m Mark) {
	t.Helper()
	update(t, ns, func(tx *nft.Tx) error {
		for _, ch := range Iptables {
			if _, err := Remove(tx, ch, m); err != nil {
				return err
			}
		}
		return nil
	})
}

// Sync of firewall and portmap accepts leaves one rule of ours per family
// in FORWARD, the shared one, as iptables-save prints `-m mark`; the
// accepts are lookup elements (untagged: anyone's claims count them), with
// one claim per accept and chain and one count per (mark, chain);
// Check passes, and a second identical Sync writes nothing.
func TestLiveMarkedLayout(t *testing.T) {
	hostfw.Require(t)
	fw, pm := fwMark.comment(), pmMark.comment()
	fwSets := map[string][]string{
		"from4": {"10.1.0.5"}, "replies4": {"10.1.0.5"},
		"from6": {"fd00::5"}, "replies6": {"fd00::5"},
	}
	pmSets := map[string][]string{"dnat4": {"10.1.0.5 . 6 . 80"}, "dnat6": {"fd00::5 . 17 . 53"}}
	type sync struct {
		m    Mark
		want []Accept
	}
	for _, tc := range []struct {
		name   string
		syncs  []sync
		sets   map[string][]string
		claims map[string]int // per comment: one per accept and chain
	}{
		{"firewall", []sync{{fwMark, fwWant}}, fwSets, map[string]int{fw: 4}},
		{"portmap", []sync{{pmMark, pmRepeat}}, pmSets, map[string]int{pm: 2}},
		{"both", []sync{{fwMark, fwWant}, {pmMark, pmRepeat}}, merge(fwSets, pmSets), map[string]int{fw: 4, pm: 2}},
		{"IPv4 only", []sync{{fwMark, fwWant[:2]}}, map[string][]string{"from4": fwSets["from4"], "replies4": fwSets["replies4"]}, map[string]int{fw: 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := privtest.NewNS(t)
			for _, s := range tc.syncs {
				syncAll(t, ns, Iptables, s.m, s.want)
			}
			// The IPv6 chain gets the shared rule only with an IPv6
			// accept (and is not created without one).
			v6 := len(tc.sets["from6"])+len(tc.sets["dnat6"]) > 0
			expectShared(t, ns, 1, btoi(v6))
			if got := hostfw.Compat(t, ns); len(got) != 0 {
				t.Errorf("x_tables compat expressions: %q", got)
			}
			got := readMarked(t, ns)
			for _, name := range []string{"from4", "from6", "replies4", "replies6", "dnat4", "dnat6"} {
				if !slices.Equal(got.sets[name], tc.sets[name]) {
					t.Errorf("set %s:\n got  %q\n want %q", name, got.sets[name], tc.sets[name])
				}
			}
			wantCounts := map[string]int{}
			for cmt := range tc.claims {
				wantCounts[cmt] = 1 + btoi(v6) // one per chain with claims
			}
			for cmt, n := range got.claims {
				if n != tc.claims[cmt] {
					t.Errorf("claims with comment %q: %d, want %d", cmt, n, tc.claims[cmt])
				}
			}
			for cmt, n := range tc.claims {
				if got.claims[cmt] != n {
					t.Errorf("claims with comment %q: %d, want %d", cmt, got.claims[cmt], n)
				}
				if got.counts[cmt] != wantCounts[cmt] {
					t.Errorf("counts with comment %q: %d, want %d", cmt, got.counts[cmt], wantCounts[cmt])
				}
			}
			for _, s := range tc.syncs {
				if err := checkAll(ns, s.m, s.want); err != nil {
					t.Errorf("Check %q: %v", s.m.comment(), err)
				}
			}
			update(t, ns, func(tx *nft.Tx) error {
				for _, s := range tc.syncs {
					for _, ch := range Iptables {
						if err := Sync(tx, ch, s.m, s.want, false); err != nil {
							return err
						}
					}
				}
				if n := tx.Batch().Len(); n != 0 {
					t.Errorf("a second identical Sync writes %d messages, want none", n)
				}
				return nil
			})
		})
	}
}

func merge(a, b map[string][]string) map[string][]string {
	out := map[string][]string{}
	for _, m := range []map[string][]string{a, b} {
		for k, v := range m {
			out[k] = append(out[k], v...)
		}
	}
	return out
}

// An attachment with claims is synced, checked and removed without
// reading FORWARD whole: its claims are found by key, the shared rule
// through the index (index.go). The index is trusted only while it is
// right: after the shared rule was flushed, restored with new handles or
// its table made again, Check tells whether it is there, the next Sync of
// any attachment puts it back (once), and the last Remove takes it out.
func TestLiveMarkedIndex(t *testing.T) {
	hostfw.Require(t)
	other := Mark{Owner: ownerid.Owner{Network: "net1", ContainerID: "beef", IfName: "eth0"}}
	otherWant := []Accept{From(netip.MustParseAddr("10.1.0.6")), From(netip.MustParseAddr("fd00::6"))}
	for _, tc := range []struct {
		name    string
		disturb func(t *testing.T, ns *netns.NS)
		checks  bool // Check passes after the disturbance
		resync  Mark // whose Sync puts the shared rule back
		kept    bool // iptables-nft's tables hold more than FORWARD: kept
		// reindexed: the shared rule was inserted again by the next
		// Sync, so the index is right again (not after a restore, which
		// keeps the rule under a new handle).
		reindexed bool
	}{
		{"untouched", func(*testing.T, *netns.NS) {}, true, fwMark, false, true},
		{"flushed by iptables -F", func(t *testing.T, ns *netns.NS) {
			hostfw.Commands(t, ns, "iptables -F FORWARD\nip6tables -F FORWARD\n")
		}, false, other, false, true},
		{"flushed, the same attachment synced again", func(t *testing.T, ns *netns.NS) {
			hostfw.Commands(t, ns, "iptables -F FORWARD\nip6tables -F FORWARD\n")
		}, false, fwMark, false, true},
		{"iptables-save and iptables-restore", func(t *testing.T, ns *netns.NS) {
			for _, p := range []string{"iptables", "ip6tables"} {
				hostfw.Run(t, ns, hostfw.Run(t, ns, "", p+"-save"), p+"-restore")
			}
		}, true, other, true, false}, // iptables-restore adds INPUT and OUTPUT
		{"table made again", func(t *testing.T, ns *netns.NS) {
			for _, fam := range []string{"ip", "ip6"} {
				hostfw.Run(t, ns, "", "nft", "delete", "table", fam, "filter")
				hostfw.Run(t, ns, "", "nft", "add", "table", fam, "filter")
				hostfw.Run(t, ns, "", "nft", "add", "chain", fam, "filter", "FORWARD", "{ type filter hook forward priority 0; policy drop; }")
				hostfw.Run(t, ns, "", "nft", "add", "rule", fam, "filter", "FORWARD", "counter", "comment", `"someone's"`)
			}
		}, false, other, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := privtest.NewNS(t)
			update(t, ns, func(tx *nft.Tx) error {
				for _, ch := range Iptables {
					if err := Insert(tx, ch, pmMark, pmWant); err != nil {
						return err
					}
				}
				return nil
			})
			reads := chainReads.Load()
			update(t, ns, func(tx *nft.Tx) error { // a new attachment
				for _, ch := range Iptables {
					if err := Insert(tx, ch, fwMark, fwWant[:2]); err != nil {
						return err
					}
				}
				return nil
			})
			syncAll(t, ns, Iptables, fwMark, fwWant) // changed
			syncAll(t, ns, Iptables, fwMark, fwWant) // unchanged
			if err := checkAll(ns, fwMark, fwWant); err != nil {
				t.Errorf("Check: %v", err)
			}
			if n := chainReads.Load() - reads; n != 0 {
				t.Errorf("Insert, Sync and Check of attachments with claims read %d chains whole, want none", n)
			}
			expectShared(t, ns, 1, 1)

			tc.disturb(t, ns)
			if err := checkAll(ns, fwMark, fwWant); (err == nil) != tc.checks {
				t.Errorf("Check after the disturbance: %v, want it to pass: %v", err, tc.checks)
			} else if err != nil && !strings.Contains(err.Error(), "the rule accepting marked packets is missing") {
				t.Errorf("Check after the disturbance: %v, want it to name the missing shared rule", err)
			}
			want := fwWant
			if tc.resync == other {
				want = otherWant
			}
			syncAll(t, ns, Iptables, tc.resync, want)
			expectShared(t, ns, 1, 1)
			if err := checkAll(ns, fwMark, fwWant); err != nil {
				t.Errorf("Check after the next Sync: %v", err)
			}

			reads = chainReads.Load()
			removeAll(t, ns, fwMark)
			if n := chainReads.Load() - reads; n != 0 && tc.reindexed {
				t.Errorf("Remove of an attachment with claims read %d chains whole, want none", n)
			} else if n != 0 {
				t.Logf("Remove read %d chains whole (index not right)", n)
			}
			removeAll(t, ns, other)
			expectShared(t, ns, 1, 1) // portmap's accepts are left
			removeAll(t, ns, pmMark)
			expectShared(t, ns, 0, 0)
			if got := hostfw.Others(t, ns); (got != "") != tc.kept {
				t.Errorf("iptables-nft's tables after the last accept (want them kept: %v):\n%s", tc.kept, got)
			}
			if got := readMarked(t, ns); len(got.sets)+len(got.claims)+len(got.counts) != 0 {
				t.Errorf("table inet %s after the last removal: %+v", markTable.Name, got)
			}
			nfttest.ExpectOwned(t, ns, "owned elements after the last removal")
		})
	}
}

// Two attachments with the same address (a container re-created before
// the old one's DEL, or two networks): the first Remove keeps the lookup
// elements the other still claims, with the shared rule; the last Remove
// takes them, the shared rule and the iptables-nft tables Sync created.
// Syncs of both in one batch (nftcni reload) count as two.
func TestLiveMarkedSameAddress(t *testing.T) {
	hostfw.Require(t)
	twin := Mark{Owner: ownerid.Owner{Network: "net2", ContainerID: "c0ffee", IfName: "eth0"}}
	for _, oneBatch := range []bool{false, true} {
		t.Run(fmt.Sprintf("one batch %v", oneBatch), func(t *testing.T) {
			ns := privtest.NewNS(t)
			if oneBatch {
				update(t, ns, func(tx *nft.Tx) error {
					for _, m := range []Mark{fwMark, twin} {
						for _, ch := range Iptables {
							if err := Sync(tx, ch, m, fwWant, false); err != nil {
								return err
							}
						}
					}
					return nil
				})
			} else {
				syncAll(t, ns, Iptables, fwMark, fwWant)
				syncAll(t, ns, Iptables, twin, fwWant)
			}
			expectShared(t, ns, 1, 1)
			first := readMarked(t, ns).sets
			if got := first["from4"]; len(got) != 1 || got[0] != "10.1.0.5" {
				t.Errorf("from4 = %q, want one element, untagged", got)
			}
			removeAll(t, ns, fwMark)
			expectShared(t, ns, 1, 1)
			if got := readMarked(t, ns).sets; !slices.Equal(got["from4"], first["from4"]) || !slices.Equal(got["replies6"], first["replies6"]) {
				t.Errorf("after the first Remove: %q, want the elements kept: %q", got, first)
			}
			if err := checkAll(ns, twin, fwWant); err != nil {
				t.Errorf("Check of the other attachment: %v", err)
			}
			if err := checkAll(ns, fwMark, fwWant); err == nil {
				t.Error("Check of the removed attachment passes")
			}
			removeAll(t, ns, twin)
			expectShared(t, ns, 0, 0)
			if got := readMarked(t, ns); len(got.sets)+len(got.claims)+len(got.counts) != 0 {
				t.Errorf("table inet %s after the last removal: %+v", markTable.Name, got)
			}
			if got := hostfw.Others(t, ns); got != "" {
				t.Errorf("iptables-nft's tables after the last removal:\n%s", got)
			}
		})
	}
}

// legacyRules inserts m's per-address rules for want into iptables-nft's
// FORWARD chains as an earlier version did (Chain.Rules), with their index
// elements or without (a crash between the two commits, or a version
// before the index).
func legacyRules(t *testing.T, ns *netns.NS, m Mark, want []Accept, indexed bool) {
	t.Helper()
	update(t, ns, func(tx *nft.Tx) error {
		for _, c := range Iptables {
			if _, err := ensure(tx, c, true); err != nil {
				return err
			}
			rules := c.encode(want)
			if indexed {
				insert(tx, c, m, rules)
				continue
			}
			for _, exprs := range rules {
				tx.Batch().InsertForeignRule(&nftables.Rule{Table: c.Table, Chain: c.nft(), Exprs: exprs}, m.comment())
			}
		}
		return nil
	})
}

// legacyCount is how many rules of m iptables-nft's FORWARD chains hold.
func legacyCount(t *testing.T, ns *netns.NS, m Mark) int {
	t.Helper()
	n := 0
	for _, ch := range Iptables {
		for _, r := range rulesOf(t, ns, ch) {
			n += btoi(m.Has(r.Comment))
		}
	}
	return n
}

// Upgrade: an attachment with per-address rules of an earlier version and
// no claims passes Check; its Remove removes those rules (and only its
// own), its Sync replaces them by claims; then, with the last accept, the
// tables go as before.
func TestLiveMarkedUpgrade(t *testing.T) {
	hostfw.Require(t)
	for _, indexed := range []bool{true, false} {
		for _, op := range []string{"Remove", "Sync"} {
			t.Run(fmt.Sprintf("%s indexed %v", op, indexed), func(t *testing.T) {
				ns := privtest.NewNS(t)
				legacyRules(t, ns, fwMark, fwWant, indexed)
				legacyRules(t, ns, pmMark, pmWant, indexed)
				if n := legacyCount(t, ns, fwMark); n != 4 {
					t.Fatalf("%d legacy rules of the firewall, want 4", n)
				}
				if err := checkAll(ns, fwMark, fwWant); err != nil {
					t.Errorf("Check of the legacy rules: %v", err)
				}
				switch op {
				case "Remove":
					removeAll(t, ns, fwMark)
					if got := readMarked(t, ns); len(got.claims) != 0 {
						t.Errorf("Remove made claims: %+v", got)
					}
				case "Sync":
					syncAll(t, ns, Iptables, fwMark, fwWant)
					if n := legacyCount(t, ns, fwMark); n != 0 {
						t.Errorf("%d legacy rules of the firewall left after its Sync", n)
					}
					if n := legacyCount(t, ns, sharedMark); n != 2 {
						t.Errorf("%d shared rules after Sync, want one per family", n)
					}
					if err := checkAll(ns, fwMark, fwWant); err != nil {
						t.Errorf("Check after Sync: %v", err)
					}
					if got := readMarked(t, ns); got.claims[fwMark.comment()] != 4 {
						t.Errorf("claims after Sync: %v, want 4 of the firewall's", got.claims)
					}
					removeAll(t, ns, fwMark)
				}
				if n := legacyCount(t, ns, fwMark); n != 0 {
					t.Errorf("%d legacy rules of the firewall left after %s", n, op)
				}
				if n := legacyCount(t, ns, pmMark); n != 2 {
					t.Errorf("%d legacy rules of portmap, want its 2 untouched", n)
				}
				if n := legacyCount(t, ns, sharedMark); n != 0 {
					t.Errorf("%d shared rules left after the firewall's last accept", n)
				}
				removeAll(t, ns, pmMark)
				if got := hostfw.Others(t, ns); got != "" {
					t.Errorf("iptables-nft's tables after the last removal:\n%s", got)
				}
				nfttest.ExpectOwned(t, ns, "owned elements after the last removal")
			})
		}
	}
}

// GC (RemoveEverywhere) removes the claims of the stale attachments it
// selects, with the lookup elements no one else claims, and leaves other
// attachments' and other networks' alone; with the last claims goes the
// shared rule.
func TestLiveMarkedGC(t *testing.T) {
	hostfw.Require(t)
	stale := Mark{Owner: ownerid.Owner{Network: "net1", ContainerID: "dead", IfName: "eth0"}}
	staleWant := []Accept{From(netip.MustParseAddr("10.1.0.7")), RepliesTo(netip.MustParseAddr("fd00::7"))}
	net2 := Mark{Owner: ownerid.Owner{Network: "net2", ContainerID: "c0ffee", IfName: "eth0"}}
	net2Want := []Accept{From(netip.MustParseAddr("10.2.0.5"))}
	ns := privtest.NewNS(t)
	syncAll(t, ns, Iptables, fwMark, fwWant)
	syncAll(t, ns, Iptables, pmMark, pmWant)
	syncAll(t, ns, Iptables, stale, staleWant)
	syncAll(t, ns, Iptables, stale, staleWant)
	syncAll(t, ns, Iptables, net2, net2Want)
	gc := func(match func(string) bool) {
		update(t, ns, func(tx *nft.Tx) error { _, err := RemoveEverywhere(tx, match); return err })
	}
	// GC of net1 with c0ffee valid: dead is stale.
	gc(ownerid.StaleFunc("net1", []ownerid.Owner{owner}))
	got := readMarked(t, ns)
	if got.claims[stale.comment()]+got.counts[stale.comment()] != 0 {
		t.Errorf("the stale attachment's claims are left: %+v", got)
	}
	if got.claims[fwMark.comment()] != 4 || got.claims[pmMark.comment()] != 2 || got.claims[net2.comment()] != 1 {
		t.Errorf("claims of valid attachments after GC: %v", got.claims)
	}
	for _, set := range []string{"from4", "replies6"} {
		for _, e := range got.sets[set] {
			if e == "10.1.0.7" || e == "fd00::7" {
				t.Errorf("set %s keeps the stale address: %q", set, got.sets[set])
			}
		}
	}
	if want := []string{"10.1.0.5", "10.2.0.5"}; !slices.Equal(got.sets["from4"], want) {
		t.Errorf("from4 after GC: %q, want %q", got.sets["from4"], want)
	}
	expectShared(t, ns, 1, 1)
	for _, m := range []Mark{fwMark, net2} {
		want := map[Mark][]Accept{fwMark: fwWant, net2: net2Want}[m]
		if err := checkAll(ns, m, want); err != nil {
			t.Errorf("Check of %q after GC: %v", m.comment(), err)
		}
	}
	// All of net1 stale: net2's claim keeps the IPv4 shared rule; the
	// IPv6 chain has no claims left.
	gc(ownerid.StaleFunc("net1", nil))
	expectShared(t, ns, 1, 0)
	got = readMarked(t, ns)
	if want := []string{"10.2.0.5"}; !slices.Equal(got.sets["from4"], want) || len(got.sets) != 1 {
		t.Errorf("sets after net1's GC: %q, want only from4 %q", got.sets, want)
	}
	gc(ownerid.StaleFunc("net2", nil))
	expectShared(t, ns, 0, 0)
	if got := readMarked(t, ns); len(got.sets)+len(got.claims)+len(got.counts) != 0 {
		t.Errorf("table inet %s after the last GC: %+v", markTable.Name, got)
	}
	if got := hostfw.Others(t, ns); got != "" {
		t.Errorf("iptables-nft's tables after the last GC:\n%s", got)
	}
	nfttest.ExpectOwned(t, ns, "owned elements after the last GC")
}

// routed builds container ⇄ host (router) ⇄ outside: addresses of both
// families, routes both ways, forwarding on in host, and in host a port
// mapping's DNAT (host 192.0.2.1:8080 → container 10.99.0.5:80) and
// iptables' FORWARD policy set to DROP (Docker's, kube-proxy's).
func routed(t *testing.T) (container, host, outside *netns.NS) {
	t.Helper()
	container, host, outside = privtest.NewNS(t), privtest.NewNS(t), privtest.NewNS(t)
	privtest.Wire(t, host, "to-c", netip.MustParsePrefix("10.99.0.1/24"), container, "eth0", netip.MustParsePrefix("10.99.0.5/24"))
	privtest.Wire(t, host, "to-o", netip.MustParsePrefix("192.0.2.1/24"), outside, "eth0", netip.MustParsePrefix("192.0.2.2/24"))
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	noDAD := netlinkx.AddrOpts{NoDAD: true}
	hc, hh, ho := privtest.Handle(t, container), privtest.Handle(t, host), privtest.Handle(t, outside)
	must(hc.AddAddr("eth0", netip.MustParsePrefix("fd00:99::5/64"), noDAD))
	must(hh.AddAddr("to-c", netip.MustParsePrefix("fd00:99::1/64"), noDAD))
	must(hh.AddAddr("to-o", netip.MustParsePrefix("2001:db8::1/64"), noDAD))
	must(ho.AddAddr("eth0", netip.MustParsePrefix("2001:db8::2/64"), noDAD))
	for _, ns := range []*netns.NS{container, host, outside} {
		must(privtest.Handle(t, ns).SetUp("lo"))
	}
	must(hc.AddRoute(netlinkx.Route{Dst: netip.MustParsePrefix("0.0.0.0/0"), Gw: netip.MustParseAddr("10.99.0.1")}))
	must(hc.AddRoute(netlinkx.Route{Dst: netip.MustParsePrefix("::/0"), Gw: netip.MustParseAddr("fd00:99::1")}))
	must(ho.AddRoute(netlinkx.Route{Dst: netip.MustParsePrefix("10.99.0.0/24"), Gw: netip.MustParseAddr("192.0.2.1")}))
	must(ho.AddRoute(netlinkx.Route{Dst: netip.MustParsePrefix("fd00:99::/64"), Gw: netip.MustParseAddr("2001:db8::1")}))
	must(sysctl.Set(host, "net/ipv4/ip_forward", "1"))
	must(sysctl.Set(host, "net/ipv6/conf/all/forwarding", "1"))
	hostfw.Load(t, host, "table ip pm { chain pre { type nat hook prerouting priority dstnat; tcp dport 8080 dnat to 10.99.0.5:80; }; }")
	// A packet leaving the router with the bit set would carry our mark
	// into whatever comes after the forward hook.
	hostfw.Load(t, host, "table inet leak { chain post { type filter hook postrouting priority 0; meta mark & 0x1000 == 0x1000 counter; }; }")
	hostfw.Commands(t, host, "iptables -P FORWARD DROP\nip6tables -P FORWARD DROP\n")
	return container, host, outside
}

// Packets through a router whose iptables FORWARD policy is DROP: the
// container's own traffic and the replies pass with the firewall's
// accepts, new connections from outside do not, a port mapping's
// connections pass with portmap's, and after Remove nothing passes again.
func TestLiveMarkedTraffic(t *testing.T) {
	hostfw.Require(t)
	container, host, outside := routed(t)
	port := uint16(40000)
	exchange := func(from, to *netns.NS, src, dst string) bool {
		port++
		_, echoed := privtest.UDPExchange(t, from, to, netip.AddrPortFrom(netip.MustParseAddr(src), port), netip.MustParseAddr(dst), 700*time.Millisecond)
		return echoed
	}
	mapped := func() bool {
		got := privtest.TCPRoundTrip(t, outside, netip.MustParseAddrPort("192.0.2.1:8080"), container, netip.MustParseAddrPort("10.99.0.5:80"))
		return got.IsValid()
	}
	fw := []Accept{From(netip.MustParseAddr("10.99.0.5")), RepliesTo(netip.MustParseAddr("10.99.0.5")),
		From(netip.MustParseAddr("fd00:99::5")), RepliesTo(netip.MustParseAddr("fd00:99::5"))}
	pm := []Accept{DNATedTo(unix.IPPROTO_TCP, netip.MustParseAddrPort("10.99.0.5:80"))}
	// noMap: the port mapping is not tried (a failed TCP round trip
	// takes 3 s; "firewall's accepts" is the step that shows it fails).
	type want struct{ out4, out6, in4, mapped, noMap bool }
	expect := func(step string, w want) {
		t.Helper()
		for _, tt := range []struct {
			name string
			got  func() bool
			want bool
		}{
			{"container → outside (IPv4)", func() bool { return exchange(container, outside, "10.99.0.5", "192.0.2.2") }, w.out4},
			{"container → outside (IPv6)", func() bool { return exchange(container, outside, "fd00:99::5", "2001:db8::2") }, w.out6},
			{"outside → container, a new connection", func() bool { return exchange(outside, container, "192.0.2.2", "10.99.0.5") }, w.in4},
			{"outside → host:8080 → container:80", mapped, w.mapped},
		} {
			if w.noMap && tt.want == w.mapped && strings.HasPrefix(tt.name, "outside → host") {
				continue
			}
			if got := tt.got(); got != tt.want {
				t.Errorf("%s: %s passes: %v, want %v", step, tt.name, got, tt.want)
			}
		}
	}
	expect("before Sync", want{noMap: true})
	syncAll(t, host, Iptables, fwMark, fw)
	expect("firewall's accepts", want{out4: true, out6: true})
	syncAll(t, host, Iptables, pmMark, pm)
	expect("and portmap's", want{out4: true, out6: true, mapped: true})
	removeAll(t, host, fwMark)
	expect("firewall's removed", want{mapped: true})
	removeAll(t, host, pmMark)
	expect("all removed", want{})
	if out := hostfw.Run(t, host, "", "nft", "list", "chain", "inet", "leak", "post"); !strings.Contains(out, "counter packets 0 bytes 0") {
		t.Errorf("packets left the router with the mark bit set:\n%s", out)
	}
}
