package nft

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/google/nftables"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/nft/xtables"
)

// Element is a set element as we write and read it: the key (for a
// concatenation, the fields each padded to 4 bytes, as the kernel stores
// them), the range end for interval sets with concatenations, and the
// comment — for ours, an owner tag.
type Element struct {
	Key    []byte
	KeyEnd []byte
	// Val is a map element's data (nil in plain sets).
	Val []byte
	// Jump is a verdict map element's data: the chain it jumps to.
	Jump    string
	Comment string
}

// Rule is what we need to know of an existing rule: its handle (to delete
// it) and its comment (to know whose it is). We never identify rules by
// their expressions.
type Rule struct {
	Handle  uint64
	Comment string
}

// NFTA_SET_ELEM_KEY_END (Linux ≥ 5.6) is missing from x/sys/unix.
const nftaSetElemKeyEnd = 10

// FamilyName is the family as nft spells it (inet, ip, ip6, bridge, ...).
func FamilyName(f nftables.TableFamily) string { return familyName(f) }

func familyName(f nftables.TableFamily) string {
	switch f {
	case nftables.TableFamilyINet:
		return "inet"
	case nftables.TableFamilyIPv4:
		return "ip"
	case nftables.TableFamilyIPv6:
		return "ip6"
	case nftables.TableFamilyBridge:
		return "bridge"
	case nftables.TableFamilyNetdev:
		return "netdev"
	case nftables.TableFamilyARP:
		return "arp"
	}
	return fmt.Sprintf("family(%d)", f)
}

// tableExists asks for table t by name.
func (c *Conn) tableExists(t *nftables.Table) (bool, error) {
	return c.exists(unix.NFT_MSG_GETTABLE, t.Family, "table "+t.Name, []netlink.Attribute{
		{Type: unix.NFTA_TABLE_NAME, Data: cstr(t.Name)},
	})
}

// exists sends one non-dump GET of type typ (a table, chain or set by
// name, what) and reports whether the kernel found it: ENOENT is no.
func (c *Conn) exists(typ int, fam nftables.TableFamily, what string, attrs []netlink.Attribute) (bool, error) {
	_, err := c.request(typ, byte(fam), 0, attrs)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, unix.ENOENT):
		return false, nil
	}
	return false, fmt.Errorf("reading %s %s: %w", familyName(fam), what, err)
}

// chainState asks for chain ch by name: whether it exists and, for a base
// chain, the policy it has (nil when the kernel reports none).
func (c *Conn) chainState(ch *nftables.Chain) (bool, *nftables.ChainPolicy, error) {
	msgs, err := c.request(unix.NFT_MSG_GETCHAIN, byte(ch.Table.Family), 0, []netlink.Attribute{
		{Type: unix.NFTA_CHAIN_TABLE, Data: cstr(ch.Table.Name)},
		{Type: unix.NFTA_CHAIN_NAME, Data: cstr(ch.Name)},
	})
	switch {
	case errors.Is(err, unix.ENOENT):
		return false, nil, nil
	case err != nil:
		return false, nil, fmt.Errorf("reading chain %s %s %s: %w", familyName(ch.Table.Family), ch.Table.Name, ch.Name, err)
	}
	for _, m := range msgs {
		if m.Header.Type != msgType(unix.NFT_MSG_NEWCHAIN) {
			continue
		}
		ad, err := netlink.NewAttributeDecoder(m.Data[4:])
		if err != nil {
			return false, nil, fmt.Errorf("decoding chain %s: %w", ch.Name, err)
		}
		ad.ByteOrder = binary.BigEndian
		var policy *nftables.ChainPolicy
		for ad.Next() {
			if ad.Type() == unix.NFTA_CHAIN_POLICY {
				p := nftables.ChainPolicy(ad.Uint32())
				policy = &p
			}
		}
		if err := ad.Err(); err != nil {
			return false, nil, fmt.Errorf("decoding chain %s: %w", ch.Name, err)
		}
		return true, policy, nil
	}
	return true, nil, nil
}

// elements dumps the elements of set s; a missing table or set reads as
// empty.
func (c *Conn) elements(s *nftables.Set) ([]Element, error) {
	msgs, err := c.request(unix.NFT_MSG_GETSETELEM, byte(s.Table.Family), netlink.Dump, []netlink.Attribute{
		{Type: unix.NFTA_SET_ELEM_LIST_TABLE, Data: cstr(s.Table.Name)},
		{Type: unix.NFTA_SET_ELEM_LIST_SET, Data: cstr(s.Name)},
	})
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading elements of set %s %s %s: %w", familyName(s.Table.Family), s.Table.Name, s.Name, err)
	}
	return decodedOnce(msgs, func() ([]Element, error) { return appendElements(nil, s, msgs) })
}

// appendElements decodes the elements of set s in the NEWSETELEM messages
// of a reply and appends them to out.
func appendElements(out []Element, s *nftables.Set, msgs []netlink.Message) ([]Element, error) {
	for _, m := range msgs {
		if m.Header.Type != msgType(unix.NFT_MSG_NEWSETELEM) {
			continue
		}
		els, err := decodeElements(m.Data[4:])
		if err != nil {
			return nil, fmt.Errorf("decoding elements of set %s: %w", s.Name, err)
		}
		out = append(out, els...)
	}
	return out, nil
}

func decodeElements(b []byte) ([]Element, error) {
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return nil, err
	}
	var out []Element
	for ad.Next() {
		if ad.Type() != unix.NFTA_SET_ELEM_LIST_ELEMENTS {
			continue
		}
		ad.Nested(func(list *netlink.AttributeDecoder) error {
			for list.Next() {
				if list.Type() != unix.NFTA_LIST_ELEM {
					continue
				}
				var e Element
				list.Nested(func(el *netlink.AttributeDecoder) error {
					for el.Next() {
						switch el.Type() {
						case unix.NFTA_SET_ELEM_KEY:
							el.Nested(dataValue(&e.Key))
						case nftaSetElemKeyEnd:
							el.Nested(dataValue(&e.KeyEnd))
						case unix.NFTA_SET_ELEM_DATA:
							el.Nested(data(&e.Val, &e.Jump))
						case unix.NFTA_SET_ELEM_USERDATA:
							e.Comment = comment(el.Bytes())
						}
					}
					return nil
				})
				out = append(out, e)
			}
			return nil
		})
	}
	return out, ad.Err()
}

// data reads a map element's nft_data: a value, or a verdict whose chain
// (a jump's or goto's target) goes to jump.
func data(val *[]byte, jump *string) func(*netlink.AttributeDecoder) error {
	return func(ad *netlink.AttributeDecoder) error {
		for ad.Next() {
			switch ad.Type() {
			case unix.NFTA_DATA_VALUE:
				*val = ad.Bytes()
			case unix.NFTA_DATA_VERDICT:
				ad.Nested(func(v *netlink.AttributeDecoder) error {
					for v.Next() {
						if v.Type() == unix.NFTA_VERDICT_CHAIN {
							*jump = v.String()
						}
					}
					return nil
				})
			}
		}
		return nil
	}
}

// dataValue reads NFTA_DATA_VALUE out of a nested nft_data attribute.
func dataValue(dst *[]byte) func(*netlink.AttributeDecoder) error {
	return func(ad *netlink.AttributeDecoder) error {
		for ad.Next() {
			if ad.Type() == unix.NFTA_DATA_VALUE {
				*dst = ad.Bytes()
			}
		}
		return nil
	}
}

// rules dumps the rules of chain ch in order; a missing table or chain
// reads as empty.
func (c *Conn) rules(ch *nftables.Chain) ([]Rule, error) {
	msgs, err := c.ruleMsgs(ch)
	if err != nil {
		return nil, err
	}
	return decodedOnce(msgs, func() ([]Rule, error) {
		var out []Rule
		err := eachRule(ch, msgs, func(r *Rule, _ netlink.Message) { out = append(out, *r) })
		return out, err
	})
}

// ruleMsgs dumps the rules of chain ch: the kernel's reply, none for a
// missing table or chain.
func (c *Conn) ruleMsgs(ch *nftables.Chain) ([]netlink.Message, error) {
	msgs, err := c.request(unix.NFT_MSG_GETRULE, byte(ch.Table.Family), netlink.Dump, []netlink.Attribute{
		{Type: unix.NFTA_RULE_TABLE, Data: cstr(ch.Table.Name)},
		{Type: unix.NFTA_RULE_CHAIN, Data: cstr(ch.Name)},
	})
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading rules of chain %s %s %s: %w", familyName(ch.Table.Family), ch.Table.Name, ch.Name, err)
	}
	return msgs, nil
}

// eachRule calls f for each rule of chain ch in msgs (ruleMsgs' reply),
// in order, with its message.
func eachRule(ch *nftables.Chain, msgs []netlink.Message, f func(r *Rule, m netlink.Message)) error {
	for _, m := range msgs {
		r, table, chain, err := decodeRule(m)
		if err != nil {
			return fmt.Errorf("%w (chain %s)", err, ch.Name)
		}
		// Kernels filter the dump by table and chain; check anyway.
		if r != nil && table == ch.Table.Name && chain == ch.Name {
			f(r, m)
		}
	}
	return nil
}

// ProtoName is a layer-4 protocol as nft prints it (tcp, udp, sctp).
func ProtoName(p uint8) string {
	switch p {
	case unix.IPPROTO_TCP:
		return "tcp"
	case unix.IPPROTO_UDP:
		return "udp"
	case unix.IPPROTO_SCTP:
		return "sctp"
	}
	return fmt.Sprintf("proto-%d", p)
}

// decodeRule reads handle, comment, table and chain of a NEWRULE message;
// nil for any other message. The comment is the userdata's, as nft and
// we write it, or else an x_tables comment match's (xtables.Comment).
func decodeRule(m netlink.Message) (r *Rule, table, chain string, err error) {
	if m.Header.Type != msgType(unix.NFT_MSG_NEWRULE) {
		return nil, "", "", nil
	}
	ad, err := netlink.NewAttributeDecoder(m.Data[4:])
	if err != nil {
		return nil, "", "", fmt.Errorf("decoding rule: %w", err)
	}
	ad.ByteOrder = binary.BigEndian
	r = &Rule{}
	var exprs []byte
	for ad.Next() {
		switch ad.Type() {
		case unix.NFTA_RULE_TABLE:
			table = ad.String()
		case unix.NFTA_RULE_CHAIN:
			chain = ad.String()
		case unix.NFTA_RULE_HANDLE:
			r.Handle = ad.Uint64()
		case unix.NFTA_RULE_USERDATA:
			r.Comment = comment(ad.Bytes())
		case unix.NFTA_RULE_EXPRESSIONS:
			exprs = ad.Bytes()
		}
	}
	if err := ad.Err(); err != nil {
		return nil, "", "", fmt.Errorf("decoding rule: %w", err)
	}
	if r.Comment == "" && exprs != nil {
		r.Comment = xtables.Comment(exprs)
	}
	return r, table, chain, nil
}

func cstr(s string) []byte { return append([]byte(s), 0) }

// lookup asks for each of keys in set s with one non-dump
// NFT_MSG_GETSETELEM (key, and key end when set), and returns the elements
// the kernel reports, with their comments and map data. A key the set does
// not hold, or a missing table or set, is ENOENT: absent. Any other error
// is returned.
//
// For interval sets the kernel answers with the element containing the
// key, which on some kernels need not have exactly the key and end asked
// for: callers compare what they get (SameElement) rather than assume it.
func (c *Conn) lookup(s *nftables.Set, keys []Element) ([]Element, error) {
	var out []Element
	for _, k := range keys {
		el, err := elementAttrs(k)
		if err != nil {
			return nil, fmt.Errorf("encoding lookup in set %s: %w", s.Name, err)
		}
		msgs, err := c.request(unix.NFT_MSG_GETSETELEM, byte(s.Table.Family), 0, []netlink.Attribute{
			{Type: unix.NFTA_SET_ELEM_LIST_TABLE, Data: cstr(s.Table.Name)},
			{Type: unix.NFTA_SET_ELEM_LIST_SET, Data: cstr(s.Name)},
			{Type: unix.NLA_F_NESTED | unix.NFTA_SET_ELEM_LIST_ELEMENTS, Data: el},
		})
		if errors.Is(err, unix.ENOENT) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("looking up an element of set %s %s %s: %w", familyName(s.Table.Family), s.Table.Name, s.Name, err)
		}
		if out, err = appendElements(out, s, msgs); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// elementAttrs encodes the element list of a lookup: one NFTA_LIST_ELEM
// with the key and, for ranges, the key end.
func elementAttrs(k Element) ([]byte, error) {
	data := func(b []byte) ([]byte, error) {
		return netlink.MarshalAttributes([]netlink.Attribute{{Type: unix.NFTA_DATA_VALUE, Data: b}})
	}
	key, err := data(k.Key)
	if err != nil {
		return nil, err
	}
	attrs := []netlink.Attribute{{Type: unix.NLA_F_NESTED | unix.NFTA_SET_ELEM_KEY, Data: key}}
	if k.KeyEnd != nil {
		end, err := data(k.KeyEnd)
		if err != nil {
			return nil, err
		}
		attrs = append(attrs, netlink.Attribute{Type: unix.NLA_F_NESTED | nftaSetElemKeyEnd, Data: end})
	}
	elem, err := netlink.MarshalAttributes(attrs)
	if err != nil {
		return nil, err
	}
	return netlink.MarshalAttributes([]netlink.Attribute{{Type: unix.NLA_F_NESTED | unix.NFTA_LIST_ELEM, Data: elem}})
}
