package nft

import (
	"encoding/binary"
	"fmt"
	"sort"
	"strings"

	"github.com/google/nftables"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/ownerid"
)

// OwnedElement is one set element of ours that carries an owner tag.
type OwnedElement struct {
	Family  string // "inet", "bridge", …
	Table   string
	Set     string
	Comment string
}

func (e OwnedElement) String() string {
	return fmt.Sprintf("%s %s %s: %s", e.Family, e.Table, e.Set, e.Comment)
}

// OwnedElements lists every owner-tagged element in every set of every
// nftcni_* table: the per-attachment state DEL and GC must leave nothing
// of. It is what makes our objects findable (for the demo, for tests, for
// people debugging a node).
func (c *Conn) OwnedElements() ([]OwnedElement, error) {
	tables, err := c.request(unix.NFT_MSG_GETTABLE, unix.AF_UNSPEC, netlink.Dump, nil)
	if err != nil {
		return nil, fmt.Errorf("listing nftables tables in %s: %w", c.where, err)
	}
	var out []OwnedElement
	for _, tm := range tables {
		name := nlString(tm.Data[4:], unix.NFTA_TABLE_NAME)
		if !strings.HasPrefix(name, TablePrefix) {
			continue
		}
		t := &nftables.Table{Name: name, Family: nftables.TableFamily(tm.Data[0])}
		sets, err := c.request(unix.NFT_MSG_GETSET, byte(t.Family), netlink.Dump, []netlink.Attribute{
			{Type: unix.NFTA_SET_TABLE, Data: cstr(name)},
		})
		if err != nil {
			return nil, fmt.Errorf("listing sets of %s %s: %w", familyName(t.Family), name, err)
		}
		for _, sm := range sets {
			set := &nftables.Set{Table: t, Name: nlString(sm.Data[4:], unix.NFTA_SET_NAME)}
			elems, err := c.elements(set)
			if err != nil {
				return nil, err
			}
			for _, e := range elems {
				if _, ok := ownerid.ParseTag(e.Comment); ok {
					out = append(out, OwnedElement{Family: familyName(t.Family), Table: name, Set: set.Name, Comment: e.Comment})
				}
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out, nil
}

// nlString returns the NUL-terminated string attribute typ of b.
func nlString(b []byte, typ uint16) string {
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return ""
	}
	for ad.Next() {
		if ad.Type() == typ {
			return ad.String()
		}
	}
	return ""
}

// nlUint32 returns the big-endian uint32 attribute typ of b.
func nlUint32(b []byte, typ uint16) (uint32, bool) {
	return nlUint(b, typ, (*netlink.AttributeDecoder).Uint32)
}

// nlUint64 returns the big-endian uint64 attribute typ of b.
func nlUint64(b []byte, typ uint16) (uint64, bool) {
	return nlUint(b, typ, (*netlink.AttributeDecoder).Uint64)
}

func nlUint[T uint32 | uint64](b []byte, typ uint16, get func(*netlink.AttributeDecoder) T) (T, bool) {
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return 0, false
	}
	ad.ByteOrder = binary.BigEndian
	for ad.Next() {
		if ad.Type() == typ {
			return get(ad), ad.Err() == nil
		}
	}
	return 0, false
}
