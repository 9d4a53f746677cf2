package firewall

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"

	"github.com/nftcni/nftcni/nft"
	"github.com/nftcni/nftcni/ownerid"
)

// Bookkeeping: Setup and Teardown without reading the claim sets.
//
// Whether a lookup element goes when a claim goes depends on the other
// claims of its key, and a hash set cannot be asked for "any other
// element starting with this key": so every Setup and Teardown used to
// read the claim sets whole, and with a thousand attachments that was most
// of their CPU. Two things derived from the claims answer it instead:
//
//	set owners { type ifname; elements = { "<attachment hash>" comment "<h(network)>:<h(attachment)> =10.1.0.5 fd00::5 s=br0" } }
//	map counts4 { type ipv4_addr : integer; elements = { 10.1.0.5 : 1 } }
//	map counts6 { type ipv6_addr : integer; … }
//	map bridge_counts { type ifname : integer; elements = { "br0" : 12 } }
//	map isolated_counts { type ifname : integer; … }
//
// the owner marker of every owner with claims, recording what it claimed
// (its addresses, sorted, and its policed bridge: "s=" same-bridge, "i="
// isolated), and per claimed key the number of claims. With them:
//
//   - a Setup whose owner has no marker (every first ADD) has no claims:
//     it creates its claims with NLM_F_EXCL, counts them, adds the lookup
//     elements of keys no one claimed, and its marker, looking up only its
//     own keys;
//   - a Setup whose owner's marker records exactly what it wants (a
//     repeated ADD, `nftcni reload` with nothing lost) looks its claims,
//     their counts and lookup elements up, and writes nothing when they
//     are there: whole reads of the claim sets made every such Setup cost
//     in proportion to the host's attachments;
//   - a Teardown recomputes the owner's claims from its marker's record,
//     deletes them, counts down, and deletes a lookup element when its
//     count reaches 0 (and it is the owner's); a lookup element tagged with
//     the owner whose key others still claim must be handed to one of them,
//     which needs the claim set: that Teardown, like anything unexpected
//     (a claim the record gives but the set lacks, a count that does not
//     fit), runs again the old way.
//
// The old way — whole reads, a Setup of an owner that has a marker, GC —
// recomputes the markers and counts of every owner and key from the claims
// it read, so it also brings tables of earlier versions (claims without
// either) up to date; until the first such run has made the owners set,
// everything runs the old way. Counts carry no owner tag: they are the
// table's, like its chains, and a key's count goes when it reaches 0.
// An earlier nftcni writing into the same table after this one (a rollback)
// would not keep counts; the next run the old way repairs them.

var (
	markers        = nft.OwnersSet(table)
	counts4        = countMap("counts4", nftables.TypeIPAddr, binaryutil.BigEndian)
	counts6        = countMap("counts6", nftables.TypeIP6Addr, binaryutil.BigEndian)
	bridgeCounts   = countMap("bridge_counts", nftables.TypeIFName, binaryutil.NativeEndian)
	isolatedCounts = countMap("isolated_counts", nftables.TypeIFName, binaryutil.NativeEndian)

	bookkeeping = []*nftables.Set{markers, counts4, counts6, bridgeCounts, isolatedCounts}
)

func countMap(name string, key nftables.SetDatatype, order binaryutil.ByteOrder) *nftables.Set {
	return &nftables.Set{Table: table, Name: name, IsMap: true, KeyType: key, KeyByteOrder: order, DataType: nftables.TypeInteger}
}

// lookupRuns counts the Setups and Teardowns planned by lookups, and
// those of them that had to run again the old way: live tests check with
// them that the lookup paths are taken.
var lookupRuns struct{ tried, fellBack atomic.Int64 }

// errSlow: a lookup path met something only the whole claim sets can
// settle; the Update runs again the old way.
var errSlow = errors.New("firewall bookkeeping: needs the whole claim sets")

// record is what a's marker records: its addresses, sorted, and its
// policed bridge.
func record(a Attachment) string {
	var parts []string
	for _, ad := range a.Addrs {
		parts = append(parts, ad.Unmap().WithZone("").String())
	}
	slices.Sort(parts)
	parts = slices.Compact(parts)
	switch a.Policy {
	case PolicySameBridge:
		parts = append(parts, "s="+a.Bridge)
	case PolicyIsolated:
		parts = append(parts, "i="+a.Bridge)
	}
	return strings.Join(parts, " ")
}

// parseRecord reads record back into the attachment fields it records.
func parseRecord(rec string) (Attachment, error) {
	var a Attachment
	for _, f := range strings.Fields(rec) {
		if p, br, ok := strings.Cut(f, "="); ok {
			switch p {
			case "s":
				a.Policy = PolicySameBridge
			case "i":
				a.Policy = PolicyIsolated
			default:
				return Attachment{}, fmt.Errorf("firewall record %q: unknown %q", rec, f)
			}
			a.Bridge = br
			continue
		}
		ad, err := netip.ParseAddr(f)
		if err != nil {
			return Attachment{}, fmt.Errorf("firewall record %q: %w", rec, err)
		}
		a.Addrs = append(a.Addrs, ad)
	}
	return a, nil
}

// count is the count of claimed key k in m, with the element read (to
// replace).
func count(tx *nft.Tx, m *nftables.Set, k []byte) (uint32, []nft.Element, error) {
	cur, err := tx.Lookup(m, []nft.Element{{Key: k}})
	if err != nil || len(cur) == 0 {
		return 0, nil, err
	}
	if len(cur) != 1 || len(cur[0].Val) != 4 {
		return 0, nil, errSlow
	}
	return binary.BigEndian.Uint32(cur[0].Val), cur, nil
}

// setCount replaces cur, the count element of k read by count, with n
// (none for 0).
func setCount(b *nft.Batch, m *nftables.Set, k []byte, cur []nft.Element, n uint32) {
	b.DeleteElements(m, cur)
	if n > 0 {
		b.AddElements(m, []nft.Element{{Key: k, Val: binary.BigEndian.AppendUint32(nil, n)}})
	}
}

// uniqueKeys drops claims whose key an earlier one has.
func uniqueKeys(want []nft.Element) []nft.Element {
	var out []nft.Element
	for _, w := range want {
		if !slices.ContainsFunc(out, func(o nft.Element) bool { return bytes.Equal(o.Key, w.Key) }) {
			out = append(out, w)
		}
	}
	return out
}

// counted reports whether the table keeps markers and counts (see above),
// and owner's marker key holds nothing (markers: what it holds).
func counted(tx *nft.Tx, owner ownerid.Owner) (ok bool, marks []nft.Element, err error) {
	if ok, err = tx.TableExists(table); err != nil || !ok {
		return false, nil, err
	}
	if ok, err = tx.SetExists(markers); err != nil || !ok {
		return false, nil, err
	}
	marks, err = tx.Lookup(markers, []nft.Element{nft.Marker(owner)})
	return true, marks, err
}

// setupFast adds the claims want of a's owner, which has no marker and so
// no claims, by lookups (see above).
func setupFast(tx *nft.Tx, a Attachment, want map[*nftables.Set][]nft.Element) error {
	lookupRuns.tried.Add(1)
	b, tag := tx.Batch(), a.Owner.Tag()
	claimed := false
	for _, cs := range claimSets {
		for _, w := range uniqueKeys(want[cs.set]) {
			claimed = true
			b.CreateElements(cs.set, []nft.Element{w})
			k := cs.claimed(w)
			n, cur, err := count(tx, cs.count, k)
			if err != nil {
				return err
			}
			setCount(b, cs.count, k, cur, n+1)
			for _, d := range cs.derived {
				dk := d.key(k)
				got, err := tx.Lookup(d.set, []nft.Element{{Key: dk}})
				if err != nil {
					return err
				}
				switch {
				case len(got) == 0:
					b.CreateElements(d.set, []nft.Element{{Key: dk, Comment: tag}})
				case n == 0 && got[0].Comment != tag:
					// There without a claim: handed to this claimant.
					b.DeleteElements(d.set, got)
					b.AddElements(d.set, []nft.Element{{Key: dk, Comment: tag}})
				}
			}
		}
	}
	if claimed {
		b.CreateElements(markers, []nft.Element{nft.MarkerWith(a.Owner, record(a))})
	}
	return nil
}

// setupSame checks, by lookups, that the claims want — which the owner's
// marker records — are in place with their counts and lookup elements, so
// that a Setup repeating the one the marker records writes nothing (see
// above). Anything missing is errSlow: the old way repairs it.
func setupSame(tx *nft.Tx, want map[*nftables.Set][]nft.Element) error {
	lookupRuns.tried.Add(1)
	for _, cs := range claimSets {
		for _, w := range uniqueKeys(want[cs.set]) {
			got, err := tx.Lookup(cs.set, []nft.Element{w})
			if err != nil {
				return err
			}
			if len(got) != 1 || !nft.SameElement(got[0], w) {
				return errSlow
			}
			k := cs.claimed(w)
			if n, _, err := count(tx, cs.count, k); err != nil || n == 0 {
				return cmp.Or(err, errSlow)
			}
			for _, d := range cs.derived {
				got, err := tx.Lookup(d.set, []nft.Element{{Key: d.key(k)}})
				if err != nil {
					return err
				}
				if len(got) != 1 {
					return errSlow
				}
			}
		}
	}
	return nil
}

// teardownFast removes the claims that owner's marker (mark) records, by
// lookups (see above).
func teardownFast(tx *nft.Tx, owner ownerid.Owner, mark []nft.Element) error {
	lookupRuns.tried.Add(1)
	rec, ok := nft.MarkerRecord(owner, mark)
	if !ok {
		return errSlow
	}
	a, err := parseRecord(rec)
	if err != nil {
		return errSlow
	}
	a.Owner = owner
	want, err := wanted(a)
	if err != nil {
		return errSlow
	}
	b := tx.Batch()
	for _, cs := range claimSets {
		for _, w := range uniqueKeys(want[cs.set]) {
			got, err := tx.Lookup(cs.set, []nft.Element{w})
			if err != nil {
				return err
			}
			if len(got) != 1 || !owner.OwnedBy(got[0].Comment) {
				return errSlow
			}
			b.DeleteElements(cs.set, got)
			k := cs.claimed(w)
			n, cur, err := count(tx, cs.count, k)
			if err != nil {
				return err
			}
			if n == 0 {
				return errSlow
			}
			setCount(b, cs.count, k, cur, n-1)
			for _, d := range cs.derived {
				got, err := tx.Lookup(d.set, []nft.Element{{Key: d.key(k)}})
				if err != nil {
					return err
				}
				mine := len(got) == 1 && owner.OwnedBy(got[0].Comment)
				switch {
				case n == 1 && mine:
					b.DeleteElements(d.set, got)
				case n > 1 && (len(got) == 0 || mine):
					return errSlow // to be handed to another claimant, or repaired
				}
			}
		}
	}
	b.DeleteElements(markers, mark)
	return nil
}

// syncBookkeeping makes the markers and counts those of left, the claims
// per claim set after the batch (see above): the old way's last step.
// Maps, not nested scans: with a thousand owners this runs on every
// Setup and Teardown the old way.
func syncBookkeeping(tx *nft.Tx, left map[*nftables.Set][]nft.Element) error {
	b := tx.Batch()
	owners := map[string]*Attachment{} // by claim tag
	var order []string
	for _, cs := range claimSets {
		n := map[string]uint32{}
		for _, e := range left[cs.set] {
			k := cs.claimed(e)
			n[string(k)]++
			o := owners[e.Comment]
			if o == nil {
				o = &Attachment{}
				owners[e.Comment] = o
				order = append(order, e.Comment)
			}
			switch cs.set {
			case owners4, owners6:
				if ad, ok := netip.AddrFromSlice(k); ok {
					o.Addrs = append(o.Addrs, ad)
				}
			case bridgeOwners:
				o.Bridge = string(bytes.TrimRight(k, "\x00"))
				if o.Policy == PolicyOpen {
					o.Policy = PolicySameBridge
				}
			case isolatedOwners:
				o.Bridge = string(bytes.TrimRight(k, "\x00"))
				o.Policy = PolicyIsolated
			}
		}
		cur, err := tx.Elements(cs.count)
		if err != nil {
			return err
		}
		var del, add []nft.Element
		for _, e := range cur {
			if len(e.Val) == 4 && n[string(e.Key)] == binary.BigEndian.Uint32(e.Val) {
				delete(n, string(e.Key)) // right as it is
				continue
			}
			del = append(del, e)
		}
		for _, k := range slices.Sorted(maps.Keys(n)) { // a stable batch
			add = append(add, nft.Element{Key: []byte(k), Val: binary.BigEndian.AppendUint32(nil, n[k])})
		}
		b.DeleteElements(cs.count, del)
		b.AddElements(cs.count, add)
	}
	want := map[string]string{} // marker key → comment
	for _, tag := range order {
		if e, ok := nft.MarkerOfTag(tag, record(*owners[tag])); ok {
			if _, dup := want[string(e.Key)]; !dup {
				want[string(e.Key)] = e.Comment
			}
		}
	}
	cur, err := tx.Elements(markers)
	if err != nil {
		return err
	}
	var del, add []nft.Element
	for _, e := range cur {
		if c, ok := want[string(e.Key)]; ok && c == e.Comment && e.Val == nil {
			delete(want, string(e.Key))
			continue
		}
		del = append(del, e)
	}
	for _, k := range slices.Sorted(maps.Keys(want)) {
		add = append(add, nft.Element{Key: []byte(k), Comment: want[k]})
	}
	b.DeleteElements(markers, del)
	b.AddElements(markers, add)
	return nil
}
