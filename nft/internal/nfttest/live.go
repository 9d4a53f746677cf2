package nfttest

import (
	"slices"
	"testing"

	"github.com/google/nftables"

	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/nft"
)

// Live reads a component's state back from the kernel in live tests: its
// table's existence and its sets' elements, each rendered as `nft list`
// shows it, so tests compare readable strings.
type Live struct {
	Table *nftables.Table
	Sets  []*nftables.Set
	// Key renders an element's key (and range end) as nft lists it; the
	// comment is appended by Read.
	Key func(s *nftables.Set, e nft.Element) string
}

// Read reads the sets in ns: set name → rendered elements, sorted.
func (l Live) Read(t testing.TB, ns *netns.NS) map[string][]string {
	t.Helper()
	c, err := nft.Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	out := map[string][]string{}
	for _, s := range l.Sets {
		els, err := c.Elements(s)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range els {
			r := l.Key(s, e)
			if e.Comment != "" {
				r += ` comment "` + e.Comment + `"`
			}
			out[s.Name] = append(out[s.Name], r)
		}
		slices.Sort(out[s.Name])
	}
	return out
}

// Expect fails the test unless each set in ns holds exactly want[set name]
// (in any order; nil and missing mean empty).
func (l Live) Expect(t testing.TB, ns *netns.NS, want map[string][]string) {
	t.Helper()
	got := l.Read(t, ns)
	for _, s := range l.Sets {
		slices.Sort(want[s.Name])
		if !slices.Equal(got[s.Name], want[s.Name]) {
			t.Errorf("set %s:\n got  %q\n want %q", s.Name, got[s.Name], want[s.Name])
		}
	}
}

// TableExists reports whether the table exists in ns.
func (l Live) TableExists(t testing.TB, ns *netns.NS) bool {
	t.Helper()
	c, err := nft.Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ok, err := c.TableExists(l.Table)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// CreatesNothing runs ops (a component's Teardown and GC of state that was
// never set up) in a fresh namespace, each of which must succeed, and fails
// the test if they created the table: nothing to remove writes nothing.
func (l Live) CreatesNothing(t *testing.T, ops ...func(ns *netns.NS) error) {
	t.Helper()
	ns := privtest.NewNS(t)
	for _, op := range ops {
		if err := op(ns); err != nil {
			t.Fatal(err)
		}
	}
	if l.TableExists(t, ns) {
		t.Error("Teardown/GC of nothing created the table")
	}
}

// Owned lists the owner-tagged elements of every table of ours in ns
// (nft.Conn.OwnedElements), each as "<family> <set> <comment>", sorted:
// what live tests compare to check that DEL and GC leave nothing behind.
func Owned(t testing.TB, ns *netns.NS) []string {
	t.Helper()
	c, err := nft.Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	els, err := c.OwnedElements()
	if err != nil {
		t.Fatal(err)
	}
	out := []string{}
	for _, e := range els {
		out = append(out, e.Family+" "+e.Set+" "+e.Comment)
	}
	slices.Sort(out)
	return out
}

// ExpectOwned fails the test unless Owned(ns) is want, in any order.
func ExpectOwned(t testing.TB, ns *netns.NS, step string, want ...string) {
	t.Helper()
	got := Owned(t, ns)
	want = append([]string{}, want...)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("%s:\n got  %q\n want %q", step, got, want)
	}
}
