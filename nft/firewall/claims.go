package firewall

import (
	"bytes"
	"fmt"
	"net/netip"
	"slices"

	"github.com/google/nftables"

	"github.com/nftcni/nftcni/nft"
)

// claims is a claim set — keys (claimed key . attachment id), one element
// per attachment wanting the key — and the lookup sets derived from it.
type claims struct {
	set     *nftables.Set
	keyLen  int           // bytes of the claimed key; the attachment id follows
	count   *nftables.Set // claims per key (bookkeeping.go)
	derived []derived
}

// derived is a lookup set holding key(k) for every k claimed at least
// once.
type derived struct {
	set *nftables.Set
	key func(k []byte) []byte
}

func same(k []byte) []byte   { return k }
func double(k []byte) []byte { return nft.Concat(k, k) }

func (cs claims) claimed(e nft.Element) []byte {
	if len(e.Key) < cs.keyLen {
		return e.Key
	}
	return e.Key[:cs.keyLen]
}

// plan adds to tx's batch what makes the claim set hold want (claims of
// one owner) and none of the claims drop selects, other than those in
// want; then it brings the derived lookup elements of every key it
// touched in line with the claims left: present while claimed, tagged
// with a claimant (prefer, the owner being set up, if it is one), removed
// once no claim is left — but only lookup elements whose tag drop selects
// or which belonged to a removed claim: an element someone else put there
// without a claim is left alone. It reports whether the claim set changes,
// whether drop selected any claim (had), and the claims left after the
// batch.
func (cs claims) plan(tx *nft.Tx, want []nft.Element, drop func(comment string) bool, prefer string) (changed, had bool, left []nft.Element, err error) {
	cur, err := tx.Elements(cs.set)
	if err != nil {
		return false, false, nil, err
	}
	had = slices.ContainsFunc(cur, func(e nft.Element) bool { return drop(e.Comment) })
	var del, add []nft.Element
	for _, e := range cur {
		wantedAsIs := slices.ContainsFunc(want, func(w nft.Element) bool { return nft.SameElement(e, w) })
		sameKey := slices.ContainsFunc(want, func(w nft.Element) bool { return bytes.Equal(e.Key, w.Key) })
		if !wantedAsIs && (drop(e.Comment) || sameKey) {
			del = append(del, e)
		}
	}
	for i, w := range want {
		dup := slices.ContainsFunc(want[:i], func(o nft.Element) bool { return bytes.Equal(o.Key, w.Key) })
		if !dup && !slices.ContainsFunc(cur, func(e nft.Element) bool { return nft.SameElement(e, w) }) {
			add = append(add, w)
		}
	}
	// The claims after this batch.
	for _, e := range cur {
		if !slices.ContainsFunc(del, func(d nft.Element) bool { return nft.SameElement(e, d) }) {
			left = append(left, e)
		}
	}
	left = append(left, add...)
	removedTags := map[string]bool{}
	for _, d := range del {
		removedTags[d.Comment] = true
	}

	b := tx.Batch()
	b.DeleteElements(cs.set, del)
	b.AddElements(cs.set, add)

	for _, d := range cs.derived {
		curD, err := tx.Elements(d.set)
		if err != nil {
			return false, false, nil, err
		}
		// The lookup keys to look at: those of removed and wanted
		// claims, and those of lookup elements drop selects.
		var touched [][]byte
		touch := func(k []byte) {
			if !slices.ContainsFunc(touched, func(t []byte) bool { return bytes.Equal(t, k) }) {
				touched = append(touched, k)
			}
		}
		for _, e := range del {
			touch(d.key(cs.claimed(e)))
		}
		for _, e := range want { // also repairs a lookup element gone missing
			touch(d.key(cs.claimed(e)))
		}
		for _, e := range curD {
			if drop(e.Comment) {
				touch(e.Key)
			}
		}
		var delD, addD []nft.Element
		for _, k := range touched {
			var claimants []string
			for _, e := range left {
				if bytes.Equal(d.key(cs.claimed(e)), k) {
					claimants = append(claimants, e.Comment)
				}
			}
			i := slices.IndexFunc(curD, func(e nft.Element) bool { return bytes.Equal(e.Key, k) })
			switch {
			case len(claimants) == 0:
				if i >= 0 && (drop(curD[i].Comment) || removedTags[curD[i].Comment]) {
					delD = append(delD, curD[i])
				}
			case i < 0:
				addD = append(addD, nft.Element{Key: k, Comment: pick(claimants, prefer)})
			case !slices.Contains(claimants, curD[i].Comment):
				// Tagged with an owner that no longer claims it (or
				// not tagged at all): hand it to a claimant.
				delD = append(delD, curD[i])
				addD = append(addD, nft.Element{Key: k, Comment: pick(claimants, prefer)})
			}
		}
		b.DeleteElements(d.set, delD)
		b.AddElements(d.set, addD)
	}
	return len(del)+len(add) > 0, had, left, nil
}

func pick(claimants []string, prefer string) string {
	if slices.Contains(claimants, prefer) {
		return prefer
	}
	return claimants[0]
}

// check verifies that every claim of want is present with its tag and that
// the derived lookup elements exist.
func (cs claims) check(tx *nft.Tx, want []nft.Element) error {
	if len(want) == 0 {
		return nil
	}
	cur, err := tx.Elements(cs.set)
	if err != nil {
		return err
	}
	for _, w := range want {
		if !slices.ContainsFunc(cur, func(e nft.Element) bool { return nft.SameElement(e, w) }) {
			return fmt.Errorf("%s: no element for this attachment in set inet %s %s", cs.describe(w), TableName, cs.set.Name)
		}
	}
	for _, d := range cs.derived {
		curD, err := tx.Elements(d.set)
		if err != nil {
			return err
		}
		for _, w := range want {
			k := d.key(cs.claimed(w))
			if !slices.ContainsFunc(curD, func(e nft.Element) bool { return bytes.Equal(e.Key, k) }) {
				return fmt.Errorf("%s: no element in set inet %s %s", cs.describe(w), TableName, d.set.Name)
			}
		}
	}
	return nil
}

// describe names a claim's key for messages: an address or a bridge.
func (cs claims) describe(e nft.Element) string {
	k := cs.claimed(e)
	if cs.set == owners4 || cs.set == owners6 {
		if a, ok := netip.AddrFromSlice(k); ok {
			return "address " + a.String()
		}
	}
	return fmt.Sprintf("bridge %q", string(bytes.TrimRight(k, "\x00")))
}
