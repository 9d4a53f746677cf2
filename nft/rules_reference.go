package nft

import (
	"encoding/binary"
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
func (r Reader) RulesWithExprs(ch *nftables.Chain) ([]RuleExprs, error) {
	return r.c.rulesWithExprs(ch)
}

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
func (r Reader) Tables() ([]*nftables.Table, error) { return r.c.tables() }

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

// Handing attachments back (`nftcni handback`, before nftcni is removed):
// the reference plugins that come back delete an attachment only by what
// their own ADD would have made, so its state is written again in their
// layout — their iptables-nft chains and rules, encoded as iptables-nft
// encodes them, or their nftables tables — before ours is removed. This
// is the third narrow exception, and it only ever adds:
//
//   - tables and chains are created only where the caller saw them
//     missing in the same Update, with NLM_F_EXCL (if one appeared
//     meanwhile the batch fails rather than touch it), and only in the
//     reference's tables (referenceTable): iptables-nft's nat and filter
//     tables, the reference's own nftables tables, bridge nat; a base
//     chain of iptables-nft's tables only as iptables-nft defines it
//     (IptablesBaseChain);
//   - rules only into chains of the reference's (per-attachment and
//     shared names, every chain of its own nftables tables), and into a
//     base chain only when they jump to one of those.
//
// Nothing is modified or deleted here.

// referenceTable reports whether t is a table the reference plugins
// write to.
func referenceTable(t *nftables.Table) bool {
	if t == nil {
		return false
	}
	switch t.Family {
	case nftables.TableFamilyIPv4, nftables.TableFamilyIPv6:
		return t.Name == "nat" || t.Name == "filter" || t.Name == referenceHostportTable
	case nftables.TableFamilyINet:
		return t.Name == referenceMasqTable
	case nftables.TableFamilyBridge:
		return t.Name == "nat"
	}
	return false
}

// The reference's own nftables tables (its nftables backends).
const (
	referenceMasqTable     = "cni_plugins_masquerade"
	referenceHostportTable = "cni_hostport"
)

// iptablesTable reports whether t is one of iptables-nft's tables.
func iptablesTable(t *nftables.Table) bool {
	return (t.Family == nftables.TableFamilyIPv4 || t.Family == nftables.TableFamilyIPv6) && (t.Name == "nat" || t.Name == "filter")
}

// referenceChain reports whether ch is a chain of the reference's: one of
// its nftables tables', or one named as it names its chains.
func referenceChain(ch *nftables.Chain) bool {
	if ch.Table.Name == referenceMasqTable || ch.Table.Name == referenceHostportTable {
		return true
	}
	for _, p := range ReferenceChainPrefixes {
		if strings.HasPrefix(ch.Name, p) {
			return true
		}
	}
	return false
}

// IptablesBaseChain is base chain name of iptables-nft's table (nat or
// filter) of family fam, defined as iptables-nft defines it (hook,
// type, priority, policy accept); nil for a name that is none of them.
func IptablesBaseChain(fam nftables.TableFamily, table, name string) *nftables.Chain {
	type def struct {
		hook *nftables.ChainHook
		prio *nftables.ChainPriority
	}
	var defs map[string]def
	typ := nftables.ChainTypeFilter
	switch table {
	case "nat":
		typ = nftables.ChainTypeNAT
		defs = map[string]def{
			"PREROUTING":  {nftables.ChainHookPrerouting, nftables.ChainPriorityNATDest},
			"INPUT":       {nftables.ChainHookInput, nftables.ChainPriorityNATSource},
			"OUTPUT":      {nftables.ChainHookOutput, nftables.ChainPriorityNATDest},
			"POSTROUTING": {nftables.ChainHookPostrouting, nftables.ChainPriorityNATSource},
		}
	case "filter":
		defs = map[string]def{
			"INPUT":   {nftables.ChainHookInput, nftables.ChainPriorityFilter},
			"FORWARD": {nftables.ChainHookForward, nftables.ChainPriorityFilter},
			"OUTPUT":  {nftables.ChainHookOutput, nftables.ChainPriorityFilter},
		}
	}
	d, ok := defs[name]
	if !ok || (fam != nftables.TableFamilyIPv4 && fam != nftables.TableFamilyIPv6) {
		return nil
	}
	accept := nftables.ChainPolicyAccept
	return &nftables.Chain{
		Table: &nftables.Table{Family: fam, Name: table}, Name: name,
		Type: typ, Hooknum: d.hook, Priority: d.prio, Policy: &accept,
	}
}

// commentAttr is a table's or chain's comment as nft stores it: one TLV
// of type 0 (NFTNL_UDATA_TABLE_COMMENT, NFTNL_UDATA_CHAIN_COMMENT).
func commentAttr(typ uint16, comment string) []netlink.Attribute {
	if comment == "" {
		return nil
	}
	return []netlink.Attribute{{Type: typ, Data: RuleUserData(comment)}}
}

// The userdata attributes of tables and chains (NFTA_TABLE_USERDATA,
// NFTA_CHAIN_USERDATA).
const (
	nftaTableUserdata = 6
	nftaChainUserdata = 12
)

// CreateReferenceTable creates t, one of the reference's tables, which
// the caller saw missing in the same Update (NLM_F_EXCL). comment, when
// not "", is the table's comment as nft stores it (the reference's own
// nftables tables have one; iptables-nft's have none).
func (b *Batch) CreateReferenceTable(t *nftables.Table, comment string) {
	if !referenceTable(t) {
		b.fail(fmt.Errorf("nftables: refusing to create table %v: not one of the reference plugins' tables", t))
		return
	}
	b.excl = append(b.excl, b.n)
	if a := commentAttr(nftaTableUserdata, comment); a != nil {
		b.extra = append(b.extra, extraAttrs{b.n, a})
	}
	b.rec.AddTable(&nftables.Table{Family: t.Family, Name: t.Name})
	b.n++
}

// CreateReferenceChain creates ch in one of the reference's tables, which
// the caller saw missing in the same Update (NLM_F_EXCL). A base chain in
// an iptables-nft table must be the one IptablesBaseChain defines; a
// regular chain there must have a name of the reference's (or be an admin
// chain the configuration names: admin). comment as for
// CreateReferenceTable.
func (b *Batch) CreateReferenceChain(ch *nftables.Chain, comment string, admin bool) {
	if !referenceTable(ch.Table) {
		b.fail(fmt.Errorf("nftables: refusing to create chain %s in table %v: not one of the reference plugins' tables", ch.Name, ch.Table))
		return
	}
	if iptablesTable(ch.Table) {
		if ch.Hooknum != nil {
			want := IptablesBaseChain(ch.Table.Family, ch.Table.Name, ch.Name)
			if want == nil || *want.Hooknum != *ch.Hooknum || *want.Priority != *ch.Priority || want.Type != ch.Type {
				b.fail(fmt.Errorf("nftables: refusing to create base chain %s %s %s: not as iptables-nft defines it", familyName(ch.Table.Family), ch.Table.Name, ch.Name))
				return
			}
		} else if !referenceChain(ch) && !admin {
			b.fail(fmt.Errorf("nftables: refusing to create chain %s %s %s: not a chain of the reference plugins", familyName(ch.Table.Family), ch.Table.Name, ch.Name))
			return
		}
	}
	b.excl = append(b.excl, b.n)
	if a := commentAttr(nftaChainUserdata, comment); a != nil {
		b.extra = append(b.extra, extraAttrs{b.n, a})
	}
	b.rec.AddChain(ch)
	b.n++
}

// AddReferenceRule adds r to its chain in one of the reference's tables:
// appended, or at the head when head. The chain must be the reference's
// (referenceChain), or a base chain r jumps from to one of the
// reference's. comment is stored as nft stores comments (the reference's
// nftables rules); iptables-nft's comments are x_tables matches, part of
// r. proto, when not 0, is the rule's layer-4 protocol for x_tables
// matches that need one (multiport, tcp), as iptables-nft sends it
// (NFTA_RULE_COMPAT).
func (b *Batch) AddReferenceRule(r *nftables.Rule, head bool, comment string, proto uint8) {
	if !referenceTable(r.Table) {
		b.fail(fmt.Errorf("nftables: refusing a rule in table %v: not one of the reference plugins' tables", r.Table))
		return
	}
	if !referenceChain(r.Chain) {
		jumps := false
		for _, e := range r.Exprs {
			if v, ok := e.(*expr.Verdict); ok && (v.Kind == expr.VerdictJump || v.Kind == expr.VerdictGoto) {
				jumps = referenceChain(&nftables.Chain{Table: r.Table, Name: v.Chain})
			}
		}
		if !jumps {
			b.fail(fmt.Errorf("nftables: refusing a rule in chain %s %s %s: neither a chain of the reference plugins nor a jump to one", familyName(r.Table.Family), r.Table.Name, r.Chain.Name))
			return
		}
	}
	if !b.setComment(r, comment) {
		return
	}
	if proto != 0 {
		compat, err := netlink.MarshalAttributes([]netlink.Attribute{
			{Type: unix.NFTA_RULE_COMPAT_PROTO, Data: binary.BigEndian.AppendUint32(nil, uint32(proto))},
			{Type: unix.NFTA_RULE_COMPAT_FLAGS, Data: binary.BigEndian.AppendUint32(nil, 0)},
		})
		if err != nil {
			b.fail(err)
			return
		}
		b.extra = append(b.extra, extraAttrs{b.n, []netlink.Attribute{{Type: unix.NLA_F_NESTED | unix.NFTA_RULE_COMPAT, Data: compat}}})
	}
	if head {
		b.rec.InsertRule(r)
	} else {
		b.rec.AddRule(r)
	}
	b.n++
}
