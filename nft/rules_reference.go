package nft

import (
	"fmt"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// The reference plugins' objects.
//
// Hosts that ran the reference plugins (containernetworking/plugins) before
// nftcni hold their per-attachment objects: iptables-nft chains named after
// the network and container (`CNI-<hash>`, `CNI-DN-<hash>`), the rules that
// jump to them, per-address accepts in `CNI-FORWARD`, rules in their own
// nftables tables (`cni_plugins_masquerade`, `cni_hostport`) and the bridge
// spoof-check chains. Our DEL, CHECK and GC must see them and DEL and GC
// remove them (package nft/reference knows their layout). None of them
// carries an owner tag of ours, so this file adds a second narrow exception
// to "our tables only" (the first is rules_foreign.go):
//
//   - reading a rule's expressions (Tx.RulesWithExprs), because the
//     reference's rules are told apart by what they match and where they
//     jump — the firewall's accepts carry no comment at all;
//   - deleting a chain of someone else's table, but only one with a name
//     the reference gives its per-attachment chains
//     (ReferenceChainPrefixes), with every rule in it
//     (Batch.DeleteReferenceChain); its rules and the rules jumping to it
//     go by handle (Batch.DeleteForeignRule), read in the same Update.
//
// Tables and the reference's shared chains (CNI-HOSTPORT-DNAT, CNI-FORWARD,
// `cni_hostport`'s chains, …) are never deleted: the reference leaves them
// too, and other attachments may use them.

// RuleExprs is a rule with its expressions decoded: what the reference's
// rules, identified by what they do, are read as. Expressions google/nftables
// cannot decode are left out; Unknown counts them, so that a caller never
// mistakes a rule it only partly read for one it understood.
type RuleExprs struct {
	Rule
	Exprs   []expr.Any
	Unknown int
}

// RulesWithExprs reads the rules of ch, in order, with their handles,
// comments and expressions; a missing table or chain reads as empty.
func (tx *Tx) RulesWithExprs(ch *nftables.Chain) ([]RuleExprs, error) { return tx.c.rulesWithExprs(ch) }

// RulesWithExprs is Tx.RulesWithExprs outside an Update (CHECK).
func (c *Conn) RulesWithExprs(ch *nftables.Chain) ([]RuleExprs, error) { return c.rulesWithExprs(ch) }

func (c *Conn) rulesWithExprs(ch *nftables.Chain) ([]RuleExprs, error) {
	msgs, err := c.ruleMsgs(ch)
	if err != nil {
		return nil, err
	}
	// Not through the read cache (decodedOnce): it keeps one decoding
	// per reply, the plain rules'.
	var out []RuleExprs
	err = eachRule(ch, msgs, func(r *Rule, m netlink.Message) {
		re := RuleExprs{Rule: *r}
		re.Exprs, re.Unknown = decodeExprs(m.Data[0], ruleExprsAttr(m.Data[4:]))
		out = append(out, re)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ruleExprsAttr is the NFTA_RULE_EXPRESSIONS attribute of a rule message's
// attributes.
func ruleExprsAttr(b []byte) []byte {
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return nil
	}
	for ad.Next() {
		if ad.Type() == unix.NFTA_RULE_EXPRESSIONS {
			return ad.Bytes()
		}
	}
	return nil
}

// decodeExprs decodes a rule's expression list with google/nftables, one
// expression at a time so that one it does not know (or whose data is not
// what it expects) is counted, not fatal.
func decodeExprs(fam byte, list []byte) (out []expr.Any, unknown int) {
	ad, err := netlink.NewAttributeDecoder(list)
	if err != nil {
		return nil, 1
	}
	for ad.Next() {
		e, ok := decodeExpr(fam, ad.Bytes())
		if !ok {
			unknown++
			continue
		}
		out = append(out, e)
	}
	if ad.Err() != nil {
		unknown++
	}
	return out, unknown
}

func decodeExpr(fam byte, b []byte) (expr.Any, bool) {
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return nil, false
	}
	var name string
	var data []byte
	for ad.Next() {
		switch ad.Type() {
		case unix.NFTA_EXPR_NAME:
			name = ad.String()
		case unix.NFTA_EXPR_DATA:
			data = ad.Bytes()
		}
	}
	e := exprOf(name)
	if e == nil {
		return nil, false
	}
	if err := expr.Unmarshal(fam, data, e); err != nil {
		return nil, false
	}
	// A verdict is an immediate into the verdict register, which
	// google/nftables decodes as an Immediate without data.
	if imm, ok := e.(*expr.Immediate); ok && imm.Register == unix.NFT_REG_VERDICT && len(imm.Data) == 0 {
		v := &expr.Verdict{}
		if err := expr.Unmarshal(fam, data, v); err != nil {
			return nil, false
		}
		return v, true
	}
	return e, true
}

// exprOf is an empty expression of the kind name, for the kinds the
// reference's rules (and iptables-nft's spelling of them) use; nil for any
// other.
func exprOf(name string) expr.Any {
	switch name {
	case "payload":
		return &expr.Payload{}
	case "cmp":
		return &expr.Cmp{}
	case "bitwise":
		return &expr.Bitwise{}
	case "meta":
		return &expr.Meta{}
	case "ct":
		return &expr.Ct{}
	case "immediate":
		return &expr.Immediate{}
	case "counter":
		return &expr.Counter{}
	case "match":
		return &expr.Match{}
	case "target":
		return &expr.Target{}
	case "nat":
		return &expr.NAT{}
	case "masq":
		return &expr.Masq{}
	case "fib":
		return &expr.Fib{}
	case "lookup":
		return &expr.Lookup{}
	}
	return nil
}

// Tables lists every table of every family: one dump, whose size grows
// with the number of tables, not with their content. It is the cheap
// first look of a DEL for the reference's objects: no table of theirs, no
// further read.
func (tx *Tx) Tables() ([]*nftables.Table, error) { return tx.c.tables() }

// Tables is Tx.Tables outside an Update.
func (c *Conn) Tables() ([]*nftables.Table, error) { return c.tables() }

func (c *Conn) tables() ([]*nftables.Table, error) {
	msgs, err := c.request(unix.NFT_MSG_GETTABLE, unix.AF_UNSPEC, netlink.Dump, nil)
	if err != nil {
		return nil, fmt.Errorf("listing nftables tables in %s: %w", c.where, err)
	}
	var out []*nftables.Table
	for _, m := range msgs {
		if m.Header.Type != msgType(unix.NFT_MSG_NEWTABLE) {
			continue
		}
		out = append(out, &nftables.Table{Family: nftables.TableFamily(m.Data[0]), Name: nlString(m.Data[4:], unix.NFTA_TABLE_NAME)})
	}
	return out, nil
}

// ReferenceChainPrefixes start the names of the reference plugins'
// per-attachment chains: the masquerade chain `CNI-<hash>`, portmap's
// `CNI-DN-<hash>` (and the `CNI-SN-<hash>` of versions before 0.7), and
// the bridge spoof-check chains `cni-br-iface-<container>-<ifname>[-mac]`.
// Batch.DeleteReferenceChain deletes no other chain.
var ReferenceChainPrefixes = []string{"CNI-", "cni-br-iface-"}

// referenceSharedChains are the reference's chains that start like a
// per-attachment one but are shared by every attachment: never deleted.
var referenceSharedChains = []string{"CNI-HOSTPORT-DNAT", "CNI-HOSTPORT-SETMARK", "CNI-HOSTPORT-MASQ", "CNI-HOSTPORT-SNAT", "CNI-FORWARD", "CNI-ADMIN", "CNI-ISOLATION-STAGE-1", "CNI-ISOLATION-STAGE-2"}

// DeleteReferenceChain deletes ch, a per-attachment chain of the
// reference plugins in a table that is not ours, and every rule in it:
// the rules are flushed first, then the chain goes. The caller saw ch in
// the same Update and deletes, earlier in the batch, every rule that
// jumps to it (the kernel refuses to delete a chain still jumped to, and
// the whole batch with it).
func (b *Batch) DeleteReferenceChain(ch *nftables.Chain) {
	if ch.Table == nil || strings.HasPrefix(ch.Table.Name, TablePrefix) {
		b.fail(fmt.Errorf("nftables: DeleteReferenceChain is for the reference's chains, not %v", ch.Table))
		return
	}
	ok := false
	for _, p := range ReferenceChainPrefixes {
		ok = ok || strings.HasPrefix(ch.Name, p)
	}
	for _, s := range referenceSharedChains {
		ok = ok && ch.Name != s
	}
	if !ok {
		b.fail(fmt.Errorf("nftables: refusing to delete chain %s %s %s: not a per-attachment chain of the reference plugins", familyName(ch.Table.Family), ch.Table.Name, ch.Name))
		return
	}
	b.rec.FlushChain(&nftables.Chain{Table: ch.Table, Name: ch.Name})
	b.rec.DelChain(&nftables.Chain{Table: ch.Table, Name: ch.Name})
	b.n += 2
}
