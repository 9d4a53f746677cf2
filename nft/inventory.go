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

// RemoveEmptyTables deletes, in one batch, each nftcni_* table that holds
// nothing of anyone: no set has an element, and every rule is one of our
// static rules (its comment starts with "nftcni "), so that an
// administrator's rules in the firewall's admin chain keep their table.
// It returns the tables it deleted ("inet nftcni_masq"). Tables are
// otherwise never deleted (an empty one costs nothing, and the next ADD
// needs it); this is for `nftcni handback`, when nftcni is being removed.
func (c *Conn) RemoveEmptyTables() ([]string, error) {
	var gone []string
	err := c.Update(func(tx *Tx) error {
		gone = gone[:0]
		tables, err := c.request(unix.NFT_MSG_GETTABLE, unix.AF_UNSPEC, netlink.Dump, nil)
		if err != nil {
			return fmt.Errorf("listing nftables tables in %s: %w", c.where, err)
		}
		for _, tm := range tables {
			name := nlString(tm.Data[4:], unix.NFTA_TABLE_NAME)
			if tm.Header.Type != msgType(unix.NFT_MSG_NEWTABLE) || !strings.HasPrefix(name, TablePrefix) {
				continue
			}
			t := &nftables.Table{Name: name, Family: nftables.TableFamily(tm.Data[0])}
			empty, err := c.holdsNothing(t)
			if err != nil {
				return err
			}
			if empty {
				tx.b.rec.DelTable(t)
				tx.b.n++
				gone = append(gone, familyName(t.Family)+" "+name)
			}
		}
		return nil
	})
	return gone, err
}

// holdsNothing reports whether table t has no set element and no rule but
// our static ones.
func (c *Conn) holdsNothing(t *nftables.Table) (bool, error) {
	sets, err := c.request(unix.NFT_MSG_GETSET, byte(t.Family), netlink.Dump, []netlink.Attribute{
		{Type: unix.NFTA_SET_TABLE, Data: cstr(t.Name)},
	})
	if err != nil {
		return false, fmt.Errorf("listing sets of %s %s: %w", familyName(t.Family), t.Name, err)
	}
	for _, sm := range sets {
		if nlString(sm.Data[4:], unix.NFTA_SET_TABLE) != t.Name {
			continue
		}
		elems, err := c.elements(&nftables.Set{Table: t, Name: nlString(sm.Data[4:], unix.NFTA_SET_NAME)})
		if err != nil || len(elems) > 0 {
			return false, err
		}
	}
	chains, err := c.request(unix.NFT_MSG_GETCHAIN, byte(t.Family), netlink.Dump, []netlink.Attribute{
		{Type: unix.NFTA_CHAIN_TABLE, Data: cstr(t.Name)},
	})
	if err != nil {
		return false, fmt.Errorf("listing chains of %s %s: %w", familyName(t.Family), t.Name, err)
	}
	for _, cm := range chains {
		if cm.Header.Type != msgType(unix.NFT_MSG_NEWCHAIN) || nlString(cm.Data[4:], unix.NFTA_CHAIN_TABLE) != t.Name {
			continue
		}
		rules, err := c.rules(&nftables.Chain{Table: t, Name: nlString(cm.Data[4:], unix.NFTA_CHAIN_NAME)})
		if err != nil {
			return false, err
		}
		for _, r := range rules {
			if !strings.HasPrefix(r.Comment, "nftcni ") {
				return false, nil
			}
		}
	}
	return true, nil
}
