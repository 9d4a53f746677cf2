package nft

import (
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"

	"github.com/nftcni/nftcni/ownerid"
)

// OwnersSetName is the set of owner markers every table of ours holds.
const OwnersSetName = "owners"

// OwnersSet is table's set of owner markers: one element per owner that
// has state in the table, keyed by ownerid.Owner.AttachmentHash and carrying the
// owner tag as comment like every other element.
//
// Why: a Setup must replace the owner's previous elements, which are found
// only by their comment, so without the marker every Setup dumps every set
// it writes to — O(attachments on the host). With it, one exact GET tells
// whether the owner has anything here at all; when it has not (every first
// ADD), Setup needs only the elements with the keys it wants (Tx.Lookup),
// and its cost no longer grows with the number of attachments.
//
// The key is 16 bytes of hex text, typed ifname so that `nft list` shows
// it as a string. DEL and GC remove the marker with the owner's other
// elements, by its comment: it must be in the list of sets they walk.
func OwnersSet(table *nftables.Table) *nftables.Set {
	return &nftables.Set{Table: table, Name: OwnersSetName, KeyType: nftables.TypeIFName, KeyByteOrder: binaryutil.NativeEndian}
}

// Marker is owner's element in the owners set (OwnersSet).
func Marker(o ownerid.Owner) Element {
	return Element{Key: []byte(o.AttachmentHash()), Comment: o.Tag()}
}

// MarkerWith is owner's marker carrying record: what the component needs
// to recompute the elements of the owner's last Setup (its addresses, its
// port mappings), so that Teardown, and a repeated Setup, look up exactly
// those elements instead of reading whole sets. The record replaces the
// container ID after the tag's hashes, behind "=" (which no container ID
// starts with): `<h(network)>:<h(attachment)> =<record>`. A record that
// would make the comment longer than ownerid.MaxCommentLen is left out:
// the marker is then the plain one, and Teardown reads whole sets.
func MarkerWith(o ownerid.Owner, record string) Element {
	e, _ := MarkerOfTag(o.Tag(), record)
	return e
}

// MarkerOfTag is MarkerWith for the owner whose tag is tag, for callers
// that know owners only by the tags they read (a component recomputing
// every owner's marker from its elements); ok is false when tag is not
// an owner tag.
func MarkerOfTag(tag, record string) (e Element, ok bool) {
	p, ok := ownerid.ParseTag(tag)
	if !ok {
		return Element{}, false
	}
	e = Element{Key: []byte(p.Attachment), Comment: tag}
	if c := p.Network + ":" + p.Attachment + " =" + record; record != "" && len(c) <= ownerid.MaxCommentLen {
		e.Comment = c
	}
	return e, true
}

// MarkerRecord is the record in owner's marker among cur (as read by
// OwnerMarker); ok is false when owner has no marker there, or one
// without a record.
func MarkerRecord(o ownerid.Owner, cur []Element) (record string, ok bool) {
	for _, e := range cur {
		if o.OwnedBy(e.Comment) {
			_, rest, _ := strings.Cut(e.Comment, " ")
			return strings.CutPrefix(rest, "=")
		}
	}
	return "", false
}

// OwnerMarker reads owner's marker in the owners set of table. cur is
// what the set holds at the marker's key (to be passed to
// Batch.ReplaceElements), mine whether that is owner's marker: then owner
// may have elements in the table's sets and Setup takes the slow path,
// reading them all; otherwise it has none written by this version, and
// Setup takes the fast path. A marker with the same key and another tag
// (another network's attachment with the same hash) is in cur but not
// mine: Setup takes the slow path and takes the key over.
func (tx *Tx) OwnerMarker(table *nftables.Table, owner ownerid.Owner) (cur []Element, mine bool, err error) {
	cur, err = tx.Lookup(OwnersSet(table), []Element{Marker(owner)})
	if err != nil {
		return nil, false, err
	}
	for _, e := range cur {
		if owner.OwnedBy(e.Comment) {
			return cur, true, nil
		}
	}
	return cur, false, nil
}
