package nft

import (
	"fmt"
	"slices"
	"strings"

	"github.com/google/nftables"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/ownerid"
)

// Rules in chains that are not ours.
//
// Everything else in this package refuses to write outside our own
// nftcni_* tables. Two components need a narrow exception: in nftables an
// accept in our table does not stop a drop in another table's base chain
// on the same hook, so an iptables-nft `filter FORWARD` chain with a DROP
// policy (Docker, kube-proxy) or an administrator's own forward chain with
// one drops our containers' packets whatever our tables accept. The
// firewall and portmap therefore put accept rules for their attachments
// into those chains (package nft/foreign). The exception is kept small:
//
//   - rules, and only owner-tagged ones (ownerid.ParseTag must accept the
//     comment); deletions go by the handle of a rule read in the same
//     Update, whose tag the caller checked;
//   - no table, chain or set of someone else's is ever modified or
//     deleted; the one thing created is iptables-nft's own FORWARD chain
//     (CreateIptablesForward), exactly as iptables-nft would create it,
//     when it does not exist yet: a DROP policy set on it later must find
//     our rules already there. Its table is deleted again
//     (DeleteIptablesFilter) only with the last rule in it and only when
//     it holds nothing else (BareIptablesFilter): a table that filters
//     nothing and that iptables cannot tell from no table.

func (c *Conn) chainExists(ch *nftables.Chain) (bool, error) {
	return c.exists(unix.NFT_MSG_GETCHAIN, ch.Table.Family, "chain "+ch.Table.Name+" "+ch.Name, []netlink.Attribute{
		{Type: unix.NFTA_CHAIN_TABLE, Data: cstr(ch.Table.Name)},
		{Type: unix.NFTA_CHAIN_NAME, Data: cstr(ch.Name)},
	})
}

// InsertForeignRule inserts r at the head of its chain, which may belong
// to a table that is not ours (see above), with tag, an owner tag, as its
// comment. The chain must have been seen by Tx.ChainExists in the same
// Update. The kernel echoes the rule with its handle once the batch is
// committed (Tx.Echoed).
func (b *Batch) InsertForeignRule(r *nftables.Rule, tag string) {
	if _, ok := ownerid.ParseTag(tag); !ok {
		b.fail(fmt.Errorf("nftables: refusing a rule without an owner tag in chain %s %s %s", familyName(r.Table.Family), r.Table.Name, r.Chain.Name))
		return
	}
	if len(tag) > ownerid.MaxCommentLen {
		b.fail(fmt.Errorf("nftables: rule comment longer than %d bytes", ownerid.MaxCommentLen))
		return
	}
	if isIptablesFilter(r.Table) {
		u := b.iptablesUse(r.Table.Family)
		if u.deleted {
			b.fail(fmt.Errorf("nftables: a rule into %s %s after this batch deleted the table", familyName(r.Table.Family), r.Table.Name))
			return
		}
		u.written = true
	}
	r.UserData = RuleUserData(tag)
	b.rec.InsertRule(r)
	b.echo = append(b.echo, b.n)
	b.n++
}

// DeleteForeignRule deletes the rule with handle h from ch, which may
// belong to a table that is not ours. The caller read the rule, and its
// owner tag, in the same Update.
func (b *Batch) DeleteForeignRule(ch *nftables.Chain, h uint64) {
	if err := b.rec.DelRule(&nftables.Rule{Table: ch.Table, Chain: ch, Handle: h}); err != nil {
		b.fail(err)
		return
	}
	b.n++
}

// iptablesPriority is the priority iptables-nft gives the filter table's
// base chains (NF_IP_PRI_FILTER).
var iptablesPriority = nftables.ChainPriorityFilter

// IptablesForward is the FORWARD chain of iptables-nft's filter table of
// family fam (ip or ip6), defined as iptables-nft defines it: type filter,
// hook forward, priority 0, policy accept.
func IptablesForward(fam nftables.TableFamily) *nftables.Chain {
	accept := nftables.ChainPolicyAccept
	return &nftables.Chain{
		Table: &nftables.Table{Family: fam, Name: "filter"}, Name: "FORWARD",
		Type: nftables.ChainTypeFilter, Hooknum: nftables.ChainHookForward, Priority: iptablesPriority, Policy: &accept,
	}
}

// CreateIptablesForward creates the FORWARD chain of iptables-nft's filter
// table of family fam — and, with addTable, the table — as
// `iptables-nft -L FORWARD` would (IptablesForward). The chain is created
// with NLM_F_EXCL (`nft create chain`): if it appeared in the meantime the
// batch fails rather than touch it (re-sending an existing base chain
// would reset its policy). The table is sent only when the caller saw it
// missing in the same Update; the generation guard makes sure it still is.
// A batch creates it once: plans of several components in one batch
// (nft.Plan: the firewall's and portmap's) each find it missing.
func (b *Batch) CreateIptablesForward(fam nftables.TableFamily, addTable bool) {
	if fam != nftables.TableFamilyIPv4 && fam != nftables.TableFamilyIPv6 {
		b.fail(fmt.Errorf("nftables: iptables-nft has no filter table in family %s", familyName(fam)))
		return
	}
	u := b.iptablesUse(fam)
	if u.created {
		return // another plan of this batch creates it
	}
	u.created, u.written = true, true
	ch := IptablesForward(fam)
	if addTable {
		b.rec.AddTable(ch.Table)
		b.n++
	}
	b.excl = append(b.excl, b.n)
	b.rec.AddChain(ch)
	b.n++
}

// BareIptablesFilter reports whether iptables-nft's filter table of family
// fam exists and holds nothing but a FORWARD chain with policy accept: no
// other chain, no set. Such a table filters nothing, and iptables shows it
// exactly as it shows no table (it lists its built-in chains either way).
func (tx *Tx) BareIptablesFilter(fam nftables.TableFamily) (bool, error) {
	t := IptablesForward(fam).Table
	chains, err := tx.c.request(unix.NFT_MSG_GETCHAIN, byte(fam), netlink.Dump, []netlink.Attribute{
		{Type: unix.NFTA_CHAIN_TABLE, Data: cstr(t.Name)},
	})
	if err != nil {
		return false, fmt.Errorf("reading chains of %s %s: %w", familyName(fam), t.Name, err)
	}
	forward := false
	for _, m := range chains {
		if m.Header.Type != msgType(unix.NFT_MSG_NEWCHAIN) {
			continue
		}
		// Chain dumps are not filtered by table on every kernel.
		if nlString(m.Data[4:], unix.NFTA_CHAIN_TABLE) != t.Name {
			continue
		}
		if nlString(m.Data[4:], unix.NFTA_CHAIN_NAME) != "FORWARD" || forward {
			return false, nil
		}
		forward = true
		p, ok := nlUint32(m.Data[4:], unix.NFTA_CHAIN_POLICY)
		if !ok || nftables.ChainPolicy(p) != nftables.ChainPolicyAccept {
			return false, nil
		}
	}
	if !forward {
		return false, nil
	}
	sets, err := tx.c.request(unix.NFT_MSG_GETSET, byte(fam), netlink.Dump, []netlink.Attribute{
		{Type: unix.NFTA_SET_TABLE, Data: cstr(t.Name)},
	})
	if err != nil {
		return false, fmt.Errorf("reading sets of %s %s: %w", familyName(fam), t.Name, err)
	}
	for _, m := range sets {
		if m.Header.Type == msgType(unix.NFT_MSG_NEWSET) && nlString(m.Data[4:], unix.NFTA_SET_TABLE) == t.Name {
			return false, nil
		}
	}
	return true, nil
}

// DeleteIptablesFilter deletes iptables-nft's filter table of family fam,
// which the caller saw bare (Tx.BareIptablesFilter) in the same Update and
// whose FORWARD chain's last rules — ours — the same batch deletes: what
// CreateIptablesForward made, once nothing of anyone's is left in it. Not
// when another plan of the same batch creates it or puts rules into it;
// and a rule into it after its deletion fails the batch.
func (b *Batch) DeleteIptablesFilter(fam nftables.TableFamily) {
	if fam != nftables.TableFamilyIPv4 && fam != nftables.TableFamilyIPv6 {
		b.fail(fmt.Errorf("nftables: iptables-nft has no filter table in family %s", familyName(fam)))
		return
	}
	u := b.iptablesUse(fam)
	if u.written {
		return // another plan of this batch puts rules into it
	}
	u.deleted = true
	b.rec.DelTable(IptablesForward(fam).Table)
	b.n++
}

// iptablesUse is what a batch does to iptables-nft's filter table of one
// family.
type iptablesUse struct {
	created bool // its FORWARD chain (CreateIptablesForward)
	written bool // created, or rules inserted (InsertForeignRule)
	deleted bool // the table (DeleteIptablesFilter)
}

func (b *Batch) iptablesUse(fam nftables.TableFamily) *iptablesUse {
	if b.iptables == nil {
		b.iptables = map[nftables.TableFamily]*iptablesUse{}
	}
	if b.iptables[fam] == nil {
		b.iptables[fam] = &iptablesUse{}
	}
	return b.iptables[fam]
}

// isIptablesFilter reports whether t is iptables-nft's filter table.
func isIptablesFilter(t *nftables.Table) bool {
	return (t.Family == nftables.TableFamilyIPv4 || t.Family == nftables.TableFamilyIPv6) && t.Name == IptablesForward(t.Family).Table.Name
}

// ChainRule is a rule read by Tx.AllRules, with its chain.
type ChainRule struct {
	Chain *nftables.Chain
	Rule
}

// AllRules reads every rule of every table that is not ours (nftcni_*),
// in every family: one dump, whose size grows with the host's ruleset, so
// only GC uses it, to find rules of ours wherever they are.
func (tx *Tx) AllRules() ([]ChainRule, error) {
	msgs, err := tx.c.request(unix.NFT_MSG_GETRULE, unix.AF_UNSPEC, netlink.Dump, nil)
	if err != nil {
		return nil, fmt.Errorf("reading all rules: %w", err)
	}
	var out []ChainRule
	for _, m := range msgs {
		r, table, chain, err := decodeRule(m)
		if err != nil {
			return nil, err
		}
		if r == nil || strings.HasPrefix(table, TablePrefix) {
			continue
		}
		out = append(out, ChainRule{
			Chain: &nftables.Chain{Table: &nftables.Table{Family: nftables.TableFamily(m.Data[0]), Name: table}, Name: chain},
			Rule:  *r,
		})
	}
	return out, nil
}

// iptablesTableNames are the tables iptables-nft keeps, in family ip and
// ip6, and iptablesChainNames the names it gives their base chains.
var (
	iptablesTableNames = []string{"filter", "nat", "mangle", "raw", "security"}
	iptablesChainNames = []string{"FORWARD", "INPUT", "OUTPUT", "PREROUTING", "POSTROUTING"}
)

// IptablesInUse reports whether iptables-nft has a table in ns: an ip or
// ip6 table named as one of iptables' (filter, nat, mangle, raw,
// security) that holds a chain named as one of its built-in chains
// (FORWARD, INPUT, …). Someone's native `table ip nat` with lowercase
// chains, like the tables of a distribution's /etc/nftables.conf, is not
// iptables-nft's. One table dump, and a chain by name for a table whose
// name matches.
func (r Reader) IptablesInUse() (bool, error) { return r.c.iptablesInUse() }

func (c *Conn) iptablesInUse() (bool, error) {
	msgs, err := c.request(unix.NFT_MSG_GETTABLE, unix.AF_UNSPEC, netlink.Dump, nil)
	if err != nil {
		return false, fmt.Errorf("reading tables: %w", err)
	}
	for _, m := range msgs {
		if m.Header.Type != msgType(unix.NFT_MSG_NEWTABLE) || len(m.Data) < 4 {
			continue
		}
		fam := nftables.TableFamily(m.Data[0])
		name := nlString(m.Data[4:], unix.NFTA_TABLE_NAME)
		if fam != nftables.TableFamilyIPv4 && fam != nftables.TableFamilyIPv6 || !slices.Contains(iptablesTableNames, name) {
			continue
		}
		t := &nftables.Table{Family: fam, Name: name}
		for _, ch := range iptablesChainNames {
			ok, err := c.chainExists(&nftables.Chain{Table: t, Name: ch})
			if err != nil || ok {
				return ok, err
			}
		}
	}
	return false, nil
}
