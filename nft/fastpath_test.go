package nft_test

import (
	"errors"
	"net/netip"
	"slices"
	"testing"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/nft"
	"github.com/nftcni/nftcni/nft/internal/nfttest"
	"github.com/nftcni/nftcni/nft/masq"
	"github.com/nftcni/nftcni/ownerid"
)

func pfx(s string) []netip.Prefix { return []netip.Prefix{netip.MustParsePrefix(s)} }

var (
	masqTable = &nftables.Table{Family: nftables.TableFamilyINet, Name: masq.TableName}
	src4      = &nftables.Set{Table: masqTable, Name: "src4"}
	// A hash set and a concatenated interval set (pipapo) of our own, for
	// the lookup semantics the fast path relies on in either kind.
	testTable = &nftables.Table{Family: nftables.TableFamilyINet, Name: nft.TablePrefix + "test"}
	hash4     = &nftables.Set{Table: testTable, Name: "hash4", KeyType: nftables.TypeIPAddr}
	range4    = &nftables.Set{Table: testTable, Name: "range4", Interval: true, Concatenation: true,
		KeyType: nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeIPAddr)}
)

// fixture fills hash4 with 10.7.0.5 and range4 with 10.7.0.0/24 . 10.7.0.5,
// both tagged as a's, and the owners set with a's marker.
func fixture(t *testing.T, c *nft.Conn, a ownerid.Owner) nft.Element {
	t.Helper()
	exempt := nft.Element{Key: []byte{10, 7, 0, 0, 10, 7, 0, 5}, KeyEnd: []byte{10, 7, 0, 255, 10, 7, 0, 5}, Comment: a.Tag()}
	err := c.Update(func(tx *nft.Tx) error {
		b := tx.Batch()
		b.AddTable(testTable)
		b.AddSet(hash4)
		b.AddSet(range4)
		b.AddSet(nft.OwnersSet(testTable))
		b.AddElements(hash4, []nft.Element{{Key: []byte{10, 7, 0, 5}, Comment: a.Tag()}})
		b.AddElements(range4, []nft.Element{exempt})
		b.AddElements(nft.OwnersSet(testTable), []nft.Element{nft.Marker(a)})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return exempt
}

// Lookup against the running kernel: an exact key of a hash set, a range
// (key and key end) of a concatenated interval set (pipapo), and the
// owners set's marker are found with their comments; absent keys, sets
// and tables are simply not found. The fast path of Setup relies on each.
func TestLiveLookup(t *testing.T) {
	ns := privtest.NewNS(t)
	c, err := nft.Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a := ownerid.Owner{Network: "lk", ContainerID: "aaaa", IfName: "eth0"}
	if els, err := c.Lookup(hash4, []nft.Element{{Key: []byte{10, 7, 0, 5}}}); err != nil || len(els) != 0 {
		t.Fatalf("no table: %v, %v", els, err)
	}
	exempt := fixture(t, c, a)
	masq4, exempt4 := hash4, range4
	for _, tc := range []struct {
		name string
		set  *nftables.Set
		keys []nft.Element
		want []nft.Element
	}{
		{"hash, present", masq4, []nft.Element{{Key: []byte{10, 7, 0, 5}}}, []nft.Element{{Key: []byte{10, 7, 0, 5}, Comment: a.Tag()}}},
		{"hash, absent", masq4, []nft.Element{{Key: []byte{10, 7, 0, 6}}}, nil},
		{"hash, one of two", masq4, []nft.Element{{Key: []byte{10, 7, 0, 6}}, {Key: []byte{10, 7, 0, 5}}}, []nft.Element{{Key: []byte{10, 7, 0, 5}, Comment: a.Tag()}}},
		{"interval, exact range", exempt4, []nft.Element{{Key: exempt.Key, KeyEnd: exempt.KeyEnd}}, []nft.Element{exempt}},
		{"interval, other address", exempt4, []nft.Element{{Key: []byte{10, 7, 0, 0, 10, 7, 0, 6}, KeyEnd: []byte{10, 7, 0, 255, 10, 7, 0, 6}}}, nil},
		{"marker", nft.OwnersSet(testTable), []nft.Element{nft.Marker(a)}, []nft.Element{nft.Marker(a)}},
		{"no such set", &nftables.Set{Table: testTable, Name: "nosuch"}, []nft.Element{{Key: []byte{1, 2, 3, 4}}}, nil},
	} {
		got, err := c.Lookup(tc.set, tc.keys)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if len(got) != len(tc.want) {
			t.Errorf("%s: %d elements %v, want %v", tc.name, len(got), got, tc.want)
			continue
		}
		for i := range got {
			if !nft.SameElement(got[i], tc.want[i]) {
				t.Errorf("%s: got %+v, want %+v", tc.name, got[i], tc.want[i])
			}
		}
	}
}

// The fast path's safety net on the running kernel: an element created
// (NLM_F_EXCL, Batch.CreateElements) with a key the set already holds —
// what a lookup that missed an element would lead to — fails the batch
// with EEXIST in a hash set and with EEXIST or ENOTEMPTY (overlap) in a
// concatenated interval set, where a plain add would succeed and keep the
// existing element's comment.
func TestLiveCreateOfExistingKeyFails(t *testing.T) {
	ns := privtest.NewNS(t)
	c, err := nft.Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a := ownerid.Owner{Network: "cr", ContainerID: "aaaa", IfName: "eth0"}
	fixture(t, c, a)
	masq4, exempt4 := hash4, range4
	for _, tc := range []struct {
		name string
		set  *nftables.Set
		e    nft.Element
		want []error
	}{
		{"hash, same key", masq4, nft.Element{Key: []byte{10, 7, 0, 5}, Comment: "x"}, []error{unix.EEXIST}},
		{"interval, same range", exempt4, nft.Element{Key: []byte{10, 7, 0, 0, 10, 7, 0, 5}, KeyEnd: []byte{10, 7, 0, 255, 10, 7, 0, 5}, Comment: "x"}, []error{unix.EEXIST, unix.ENOTEMPTY}},
		{"interval, overlapping range", exempt4, nft.Element{Key: []byte{10, 7, 0, 0, 10, 7, 0, 5}, KeyEnd: []byte{10, 7, 0, 127, 10, 7, 0, 5}, Comment: "x"}, []error{unix.EEXIST, unix.ENOTEMPTY}},
	} {
		err := c.Update(func(tx *nft.Tx) error {
			tx.Batch().CreateElements(tc.set, []nft.Element{tc.e})
			return nil
		})
		if !slices.ContainsFunc(tc.want, func(w error) bool { return errors.Is(err, w) }) {
			t.Errorf("%s: %v, want one of %v", tc.name, err, tc.want)
		}
	}
	// And the plain add the slow path uses succeeds, keeping the comment.
	if err := c.Update(func(tx *nft.Tx) error {
		tx.Batch().AddElements(masq4, []nft.Element{{Key: []byte{10, 7, 0, 5}, Comment: "x"}})
		return nil
	}); err != nil {
		t.Errorf("plain add of an existing key: %v", err)
	}
	if els, err := c.Lookup(masq4, []nft.Element{{Key: []byte{10, 7, 0, 5}}}); err != nil || len(els) != 1 || els[0].Comment != a.Tag() {
		t.Errorf("after the plain add: %+v, %v", els, err)
	}
}

// The life of two owners through the lookup paths, on the running
// kernel: A's first Setup (no table: nothing read), A again with another
// address (marker with a record: its old elements looked up and
// replaced), B taking over A's address (no marker: fast path, finding A's
// elements by lookup), and both torn down, which leaves nothing owned
// behind, markers included.
func TestLiveFastAndSlowPaths(t *testing.T) {
	ns := privtest.NewNS(t)
	c, err := nft.Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a := ownerid.Owner{Network: "fp", ContainerID: "aaaa", IfName: "eth0"}
	b := ownerid.Owner{Network: "fp", ContainerID: "bbbb", IfName: "eth0"}
	step := func(name string, op func() error, wantFast, wantFallback int64) {
		t.Helper()
		fast0, fb0 := nft.SetupPaths()
		if err := op(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		fast, fb := nft.SetupPaths()
		if fast-fast0 != wantFast || fb-fb0 != wantFallback {
			t.Errorf("%s: %d fast paths, %d fallbacks; want %d, %d", name, fast-fast0, fb-fb0, wantFast, wantFallback)
		}
	}
	step("A fresh", func() error { return masq.Setup(ns, a, pfx("10.8.0.5/24")) }, 0, 0)
	step("A again, other address", func() error { return masq.Setup(ns, a, pfx("10.8.0.6/24")) }, 1, 0)
	got, err := c.Elements(src4)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || netip.AddrFrom4([4]byte(got[0].Key)).String() != "10.8.0.6" || got[0].Comment != a.Tag() {
		t.Errorf("src4 after A's second Setup: %+v", got)
	}
	step("B takes over", func() error { return masq.Setup(ns, b, pfx("10.8.0.6/24")) }, 1, 0)
	nfttest.ExpectOwned(t, ns, "after B's take-over",
		"inet src4 "+b.Tag(), "inet local4 "+b.Tag(),
		"inet owners "+nft.MarkerWith(a, "10.8.0.6/24").Comment, "inet owners "+nft.MarkerWith(b, "10.8.0.6/24").Comment)
	for _, o := range []ownerid.Owner{a, b} {
		if err := masq.Teardown(ns, o); err != nil {
			t.Fatal(err)
		}
	}
	nfttest.ExpectOwned(t, ns, "after both Teardowns")
}

// TestLiveReadCache: with the read cache on, reads answer what the kernel
// holds: the same again while nothing is committed, and what a commit of
// another socket changed right after it.
func TestLiveReadCache(t *testing.T) {
	ns := privtest.NewNS(t)
	c, err := nft.Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a := ownerid.Owner{Network: "rc", ContainerID: "aaaa", IfName: "eth0"}
	fixture(t, c, a)
	defer nft.EnableReadCache()()
	keys := func() []byte {
		t.Helper()
		els, err := c.Elements(hash4)
		if err != nil {
			t.Fatal(err)
		}
		var out []byte
		for _, e := range els {
			out = append(out, e.Key...)
		}
		return out
	}
	first := keys()
	if again := keys(); !slices.Equal(again, first) || len(first) != 4 {
		t.Fatalf("read twice: %v, then %v", first, again)
	}
	other, err := nft.Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := other.Update(func(tx *nft.Tx) error {
		tx.Batch().AddElements(hash4, []nft.Element{{Key: []byte{10, 7, 0, 6}, Comment: a.Tag()}})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if got := keys(); len(got) != 8 {
		t.Fatalf("after another socket's commit the read still says %v", got)
	}
}
