package foreign

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/google/nftables"

	"github.com/nftcni/nftcni/internal/hostfw"
	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/nft"
	"github.com/nftcni/nftcni/ownerid"
)

// Live tests of the marked layout (marked.go): iptables-nft's FORWARD
// chains hold one shared rule per family, the attachments' accepts are
// elements of table inet nftcni_accept.

// sharedLine is the shared rule as iptables-save prints it.
func sharedLine() string {
	return `-A FORWARD -m mark --mark 0x1000/0x1000 -m comment --comment "` + sharedComment() + `" -j ACCEPT`
}

// marked is what table inet nftcni_accept holds in ns: the lookup sets'
// elements as nft lists them, with their comments, and how many claims and
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
			out.sets[s.Name] = append(out.sets[s.Name], renderKey(e.Key, s == dnat4 || s == dnat6)+" "+e.Comment)
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
// accepts are lookup elements carrying their first claimant's comment,
// with one claim per accept and chain and one count per (mark, chain);
// Check passes, and a second identical Sync writes nothing.
func TestLiveMarkedLayout(t *testing.T) {
	hostfw.Require(t)
	fw, pm := fwMark.comment(), pmMark.comment()
	fwSets := map[string][]string{
		"from4": {"10.1.0.5 " + fw}, "replies4": {"10.1.0.5 " + fw},
		"from6": {"fd00::5 " + fw}, "replies6": {"fd00::5 " + fw},
	}
	pmSets := map[string][]string{"dnat4": {"10.1.0.5 . 6 . 80 " + pm}, "dnat6": {"fd00::5 . 17 . 53 " + pm}}
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
