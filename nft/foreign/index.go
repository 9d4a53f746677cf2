package foreign

import (
	"encoding/binary"
	"slices"
	"sync/atomic"

	"github.com/google/nftables"

	"github.com/nftcni/nftcni/nft"
	"github.com/nftcni/nftcni/ownerid"
)

// The index: where our rules in each chain are, by handle.
//
//	table inet nftcni_foreign {
//		map rules {
//			type ifname . ifname : ifname . ifname . ifname . ifname
//			elements = { "<h(rule comment)>" . "<h(chain)>" : <table handle, rule handles> comment "<rule comment>" }
//		}
//	}
//
// Finding a mark's rules by their comment means dumping the chain, whose
// size is everyone's rules: with a thousand attachments, each with its
// accepts in iptables-nft's FORWARD chain, that dump was most of a
// firewall Setup's or Teardown's CPU. So each (chain, mark) gets one index
// element: the handle of the chain's table and the handles of the mark's
// rules there, as the kernel echoed them after the commit that inserted
// them (nft.Tx.Then). A reader trusts it only if the table still has that
// handle (a table deleted and created again starts its rule handles anew)
// and every rule it names still exists with exactly the mark's comment
// (one non-dump GETRULE each); then those are the mark's rules, since every
// batch that inserts or deletes them also replaces or deletes the element.
// Anything else — no element, a rule gone (`iptables -F`, an
// iptables-restore), a comment that differs, more rules than fit — and the
// chain is read whole, as before; the element is rewritten the next time
// rules are inserted. It is written in a batch of its own after the rules
// are committed (their handles exist only then), so a crash in between
// leaves rules without an element: read whole.
//
// Elements carry the rule comment, an owner tag: DEL removes the mark's
// element with its rules, GC those of stale owners, and nft.OwnedElements
// lists them like every other owner-tagged element.

var (
	indexTable = &nftables.Table{Family: nftables.TableFamilyINet, Name: nft.TablePrefix + "foreign"}
	indexMap   = &nftables.Set{
		Table: indexTable, Name: "rules", IsMap: true,
		KeyType:  nftables.MustConcatSetType(nftables.TypeIFName, nftables.TypeIFName),
		DataType: nftables.MustConcatSetType(nftables.TypeIFName, nftables.TypeIFName, nftables.TypeIFName, nftables.TypeIFName),
	}
)

// indexSlots is how many rule handles an element holds: its data is 64
// bytes (NFT_DATA_VALUE_MAXLEN), the table's handle and seven rules'.
const indexSlots = 7

func indexKey(c Chain, m Mark) nft.Element {
	return nft.Element{Key: nft.Concat([]byte(ownerid.ShortHash(m.comment())), []byte(ownerid.ShortHash(c.String())))}
}

// indexed is m's index element for c, if any: the elements at its key
// (to delete) and, when the element is m's and still right, the handles
// of m's rules in c.
func indexed(tx *nft.Tx, c Chain, m Mark) (cur []nft.Element, handles []uint64, ok bool, err error) {
	cur, err = tx.Lookup(indexMap, []nft.Element{indexKey(c, m)})
	if err != nil || len(cur) != 1 || cur[0].Comment != m.comment() || len(cur[0].Val) != 8*(1+indexSlots) {
		return cur, nil, false, err
	}
	val := cur[0].Val
	th, tok, err := tx.TableHandle(c.Table)
	if err != nil || !tok || th != binary.BigEndian.Uint64(val) {
		return cur, nil, false, err
	}
	for i := 1; i <= indexSlots; i++ {
		if h := binary.BigEndian.Uint64(val[8*i:]); h != 0 {
			handles = append(handles, h)
		}
	}
	for _, h := range handles {
		r, ok, err := tx.RuleByHandle(c.nft(), h)
		if err != nil || !ok || r.Comment != m.comment() {
			return cur, nil, false, err
		}
	}
	if len(handles) > 0 {
		indexHits.Add(1)
	}
	return cur, handles, len(handles) > 0, nil
}

// indexHits counts the index elements found right: tests check with it
// that Sync and Remove took the index, not the chain dump.
var indexHits atomic.Int64

// unindex deletes m's index element among cur (as indexed read them) in
// the batch.
func unindex(tx *nft.Tx, m Mark, cur []nft.Element) {
	for _, e := range cur {
		if e.Comment == m.comment() {
			tx.Batch().DeleteElements(indexMap, []nft.Element{e})
		}
	}
}

// indexAfter has the rules for m that this batch inserts into c indexed by
// a second batch once they are committed (nft.Tx.Then).
func indexAfter(tx *nft.Tx, c Chain, m Mark) {
	tx.Then(func(next *nft.Tx) error {
		var hs []uint64
		for _, r := range next.Echoed() {
			if r.Chain.Table.Family == c.Table.Family && r.Chain.Table.Name == c.Table.Name && r.Chain.Name == c.Name && r.Comment == m.comment() {
				hs = append(hs, r.Handle)
			}
		}
		return writeIndex(next, c, m, hs)
	})
}

// writeIndex adds to tx's batch the index element saying that m's rules
// in c have the handles hs (replacing the element at its key, whoever's),
// unless there are none or more than fit.
func writeIndex(tx *nft.Tx, c Chain, m Mark, hs []uint64) error {
	if len(hs) == 0 || len(hs) > indexSlots || slices.Contains(hs, 0) {
		return nil
	}
	th, ok, err := tx.TableHandle(c.Table)
	if err != nil || !ok {
		return err
	}
	val := binary.BigEndian.AppendUint64(nil, th)
	for i := range indexSlots {
		var h uint64
		if i < len(hs) {
			h = hs[i]
		}
		val = binary.BigEndian.AppendUint64(val, h)
	}
	cur, err := tx.Lookup(indexMap, []nft.Element{indexKey(c, m)})
	if err != nil {
		return err
	}
	b := tx.Batch()
	b.AddTable(indexTable)
	b.AddSet(indexMap)
	b.DeleteElements(indexMap, cur) // whoever's: the key is m's now
	e := indexKey(c, m)
	e.Val, e.Comment = val, m.comment()
	b.AddElements(indexMap, []nft.Element{e})
	return nil
}

// unindexWhere deletes the index elements whose comment match selects
// (GC).
func unindexWhere(tx *nft.Tx, match func(comment string) bool) error {
	all, err := tx.Elements(indexMap)
	if err != nil {
		return err
	}
	var del []nft.Element
	for _, e := range all {
		if match(e.Comment) {
			del = append(del, e)
		}
	}
	tx.Batch().DeleteElements(indexMap, del)
	return nil
}
