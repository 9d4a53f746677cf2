package firewall

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/xt"

	"github.com/nftcni/nftcni/nft"
)

// foreignChain is an iptables-nft FORWARD chain and the claim set holding
// the addresses of its family.
type foreignChain struct {
	chain  *nftables.Chain
	claims *nftables.Set
}

// foreign are the chains iptables-nft uses for `iptables -A FORWARD` and
// `ip6tables -A FORWARD`. We never create them (package doc).
var foreign = []foreignChain{
	{&nftables.Chain{Table: &nftables.Table{Family: nftables.TableFamilyIPv4, Name: "filter"}, Name: "FORWARD"}, owners4},
	{&nftables.Chain{Table: &nftables.Table{Family: nftables.TableFamilyIPv6, Name: "filter"}, Name: "FORWARD"}, owners6},
}

// rulesPerAddr is how many rules an address gets in a foreign chain.
const rulesPerAddr = 2

// setup gives owner, in f's chain if it exists, the rules for addrs (all of
// f's family). When the owner's claims did not change and it has as many
// rules there as it should, nothing is written; otherwise its rules are
// replaced as a whole (we never compare rule expressions).
func (f foreignChain) setup(tx *nft.Tx, owner nft.Owner, addrs []netip.Addr, claimsChanged bool) error {
	ok, err := chainExists(tx, f.chain)
	if err != nil || !ok {
		return err
	}
	cur, err := tx.Rules(f.chain)
	if err != nil {
		return err
	}
	var mine []nft.Rule
	for _, r := range cur {
		if owner.OwnedBy(r.Comment) {
			mine = append(mine, r)
		}
	}
	if !claimsChanged && len(mine) == rulesPerAddr*len(addrs) {
		return nil
	}
	b := tx.Batch()
	for _, r := range mine {
		b.DeleteForeignRule(f.chain, r.Handle)
	}
	tag := owner.Tag()
	for _, a := range addrs {
		for _, exprs := range f.rules(a) {
			b.InsertForeignRule(&nftables.Rule{Table: f.chain.Table, Chain: f.chain, Exprs: exprs}, tag)
		}
	}
	return nil
}

// remove deletes the rules of f's chain whose comment match selects.
func (f foreignChain) remove(tx *nft.Tx, match func(comment string) bool) error {
	ok, err := chainExists(tx, f.chain)
	if err != nil || !ok {
		return err
	}
	cur, err := tx.Rules(f.chain)
	if err != nil {
		return err
	}
	for _, r := range cur {
		if match(r.Comment) {
			tx.Batch().DeleteForeignRule(f.chain, r.Handle)
		}
	}
	return nil
}

// check verifies that owner has the rules for n addresses in f's chain, if
// that chain exists.
func (f foreignChain) check(tx *nft.Tx, owner nft.Owner, n int) error {
	ok, err := chainExists(tx, f.chain)
	if err != nil || !ok {
		return err
	}
	cur, err := tx.Rules(f.chain)
	if err != nil {
		return err
	}
	got := 0
	for _, r := range cur {
		if owner.OwnedBy(r.Comment) {
			got++
		}
	}
	if got != rulesPerAddr*n {
		return fmt.Errorf("chain %s: %d accept rules of this attachment, want %d", f.describe(), got, rulesPerAddr*n)
	}
	return nil
}

func (f foreignChain) describe() string {
	fam := "ip"
	if f.chain.Table.Family == nftables.TableFamilyIPv6 {
		fam = "ip6"
	}
	return fam + " " + f.chain.Table.Name + " " + f.chain.Name
}

// rules are a's rules, as iptables-nft encodes
//
//	-s a -m comment --comment TAG -j ACCEPT
//	-d a -m conntrack --ctstate RELATED,ESTABLISHED -m comment --comment TAG -j ACCEPT
//
// (the comment is the rule's userdata, added by the batch): address
// matches as payload comparisons, the state as the x_tables conntrack
// match (revision 3), then a counter and the verdict. iptables-nft can
// list and save only rules built from what it knows, so the expressions
// are exactly its own.
func (f foreignChain) rules(a netip.Addr) [][]expr.Any {
	src, dst, n := uint32(ip4Src), uint32(ip4Dst), uint32(4)
	if a.Is6() {
		src, dst, n = ip6Src, ip6Dst, 16
	}
	match := func(off uint32) []expr.Any {
		return []expr.Any{
			&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: n},
			&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: a.AsSlice()},
		}
	}
	tail := []expr.Any{&expr.Counter{}, &expr.Verdict{Kind: expr.VerdictAccept}}
	ctstate := xt.Unknown(conntrackStateInfo(ctStateEstablished | ctStateRelated))
	return [][]expr.Any{
		cat(match(src), tail),
		cat(match(dst), []expr.Any{&expr.Match{Name: "conntrack", Rev: 3, Info: &ctstate}}, tail),
	}
}

// conntrackStateInfo is struct xt_conntrack_mtinfo3 matching only the
// given states (`-m conntrack --ctstate …`): eight address/mask unions
// (8 × 16 bytes), expires min/max (2 × 4), l4proto and four ports
// (5 × 2), match_flags, invert_flags, state_mask, status_mask (4 × 2),
// four port highs (4 × 2) — 162 bytes, 164 with the struct's padding,
// sent padded to 168 (XT_ALIGN). Host byte order, like the kernel's
// struct.
func conntrackStateInfo(states uint16) []byte {
	const (
		matchFlags = 146 // offset of match_flags
		stateMask  = 150 // offset of state_mask
		size       = 168
		flagState  = 1 // XT_CONNTRACK_STATE
	)
	b := make([]byte, size)
	binary.NativeEndian.PutUint16(b[matchFlags:], flagState)
	binary.NativeEndian.PutUint16(b[stateMask:], states)
	return b
}
