// Package foreign keeps accept rules of ours in chains that are not ours,
// so that other owners' drop policies do not cut our containers off.
//
// In nftables every base chain on a hook sees the packet, and a drop in any
// of them is final: an accept in one of our tables does not override
// another table's DROP policy. Hosts have such policies:
//
//   - iptables-nft's `filter FORWARD` chain (`ip filter FORWARD`, `ip6
//     filter FORWARD`), set to DROP by Docker and kube-proxy
//     (`iptables -P FORWARD DROP`) when they start — often after our
//     containers exist;
//   - an administrator's own forward chain with policy drop (`table inet
//     filter { chain forward { … policy drop; } }` on a hardened host).
//
// So the firewall and portmap plugins put their attachments' accepts into
// those chains themselves:
//
//   - the iptables-nft FORWARD chains (Iptables), wherever iptables can
//     be used on the host (Use, use.go: Setup callers ask Use.Protects;
//     an nftables-only host gets nothing of iptables-nft's). There the
//     accepts are marked (marked.go): each chain gets one rule for
//     everyone, `-m mark --mark 0x1000/0x1000 -j ACCEPT` in iptables'
//     words, and the attachments' addresses are elements of our table
//     inet nftcni_accept, whose chain just before iptables-nft's marks the
//     packets that rule lets through. A rule per attachment there would
//     make every ADD and DEL cost grow with the attachments on the host:
//     the kernel validates the whole table on each rule inserted and
//     rebuilds the chain's rule blob on each change. When the chain does
//     not exist, it is created — with its table if need be — exactly as
//     iptables-nft creates it (type filter, hook forward, priority 0,
//     policy accept), so that a DROP policy set later lands on a chain
//     that already holds the rule, and iptables keeps working on it. The
//     rule is spelled as iptables-nft spells `-m mark` (native meta
//     expressions, a counter), so `iptables -L`, `iptables-save` and
//     Docker's and kube-proxy's own iptables calls keep working.
//   - the chains an administrator names (nftablesAcceptChains), opt-in:
//     native nft rules per address (Chain.Rules); such a chain must exist
//     and is never created.
//
// Every rule of ours in a named chain is inserted at the chain's head and
// carries its attachment's owner tag, with the component's name when it
// is not the firewall's (Mark); in nftcni_accept the claims carry them:
// DEL removes exactly its component's accepts of the attachment, GC the
// stale ones of the network wherever they are, CHECK counts them. The
// shared rule in iptables-nft's chain goes with the last claim for that
// chain. No rule, chain, table or policy of anyone else is ever modified
// or deleted; nothing is created besides the iptables-nft FORWARD chain
// (and table). That table goes again with the last rule in it, when it
// holds nothing but its empty FORWARD chain with policy accept — a table
// that filters nothing and that iptables shows exactly as no table; with
// anything of anyone's in it (Docker's chains, a DROP policy) it stays as
// it is.
//
// Rules are found by their comments; reading a chain that holds everyone's
// costs in proportion to the rules on the host, so an index of handles
// (index.go, table `inet nftcni_foreign`) lets Sync and Remove find an
// attachment's rules, and the shared rule, without it whenever the index
// is right.
//
// Upgrades: an attachment of an earlier version has per-address rules in
// iptables-nft's chains (the x_tables conntrack match for replies). They
// go at its next Sync (through the index, else one read of the chain),
// its DEL, or GC; until then CHECK accepts them.
//
// Exception: a kernel without the x_tables conntrack match (nft_compat,
// xt_conntrack — small embedded kernels) cannot run iptables-nft's own
// conntrack rules, Docker's included; there a missing FORWARD chain is not
// created.
package foreign

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/nft"
	"github.com/nftcni/nftcni/nft/xtables"
	"github.com/nftcni/nftcni/ownerid"
)

// Chain is a chain of someone else's that gets accept rules of ours.
type Chain struct {
	Table *nftables.Table
	Name  string
	// Iptables marks iptables-nft's FORWARD chains: rules spelled as
	// iptables-nft spells them, the chain created when missing. Other
	// chains get native nft rules and must exist.
	Iptables bool
}

// Iptables are iptables-nft's FORWARD chains, IPv4 and IPv6.
var Iptables = []Chain{iptablesForward(nftables.TableFamilyIPv4), iptablesForward(nftables.TableFamilyIPv6)}

func iptablesForward(fam nftables.TableFamily) Chain {
	ch := nft.IptablesForward(fam)
	return Chain{Table: ch.Table, Name: ch.Name, Iptables: true}
}

// String is the chain as nft names it: "inet filter forward".
func (c Chain) String() string {
	return nft.FamilyName(c.Table.Family) + " " + c.Table.Name + " " + c.Name
}

func (c Chain) nft() *nftables.Chain { return &nftables.Chain{Table: c.Table, Name: c.Name} }

// maxName is the kernel's limit for table and chain names (NFT_NAME_MAXLEN,
// 256 with the terminating NUL).
const maxName = 255

// iptablesTables are the tables iptables-nft manages; rules there must be
// spelled its way, which rules in named chains are not.
var iptablesTables = []string{"filter", "nat", "mangle", "raw", "security"}

// Parse reads a chain named the way nft names it, "<family> <table>
// <chain>", family ip, ip6 or inet (the families with a forward hook that
// can match addresses). Our own tables and iptables-nft's are refused: the
// first need no accept, the FORWARD chain of the second gets rules anyway.
func Parse(s string) (Chain, error) {
	f := strings.Fields(s)
	if len(f) != 3 {
		return Chain{}, fmt.Errorf("%q: want \"<family> <table> <chain>\", e.g. \"inet filter forward\"", s)
	}
	var fam nftables.TableFamily
	switch f[0] {
	case "ip":
		fam = nftables.TableFamilyIPv4
	case "ip6":
		fam = nftables.TableFamilyIPv6
	case "inet":
		fam = nftables.TableFamilyINet
	default:
		return Chain{}, fmt.Errorf("%q: family %q is not one of ip, ip6, inet", s, f[0])
	}
	for _, name := range f[1:] {
		if len(name) > maxName {
			return Chain{}, fmt.Errorf("%q: name longer than %d bytes", s, maxName)
		}
		for _, r := range name {
			if r <= ' ' || r > '~' || r == '"' {
				return Chain{}, fmt.Errorf("%q: only printable ASCII without quotes is allowed in names", s)
			}
		}
	}
	if strings.HasPrefix(f[1], nft.TablePrefix) {
		return Chain{}, fmt.Errorf("%q: table %s is one of nftcni's own", s, f[1])
	}
	if fam != nftables.TableFamilyINet && slices.Contains(iptablesTables, f[1]) {
		return Chain{}, fmt.Errorf("%q: %s %s is iptables-nft's table (its FORWARD chain gets the attachment's rules without being named)", s, f[0], f[1])
	}
	return Chain{Table: &nftables.Table{Family: fam, Name: f[1]}, Name: f[2]}, nil
}

// fits reports whether a's family is one c's rules can match.
func (c Chain) fits(a netip.Addr) bool {
	switch c.Table.Family {
	case nftables.TableFamilyIPv4:
		return a.Is4()
	case nftables.TableFamilyIPv6:
		return a.Is6()
	}
	return true
}

type kind int

const (
	from kind = iota
	repliesTo
	dnatTo
)

// Accept is what one of our rules lets through, independent of how a chain
// spells it (Chain.Rules).
type Accept struct {
	kind  kind
	addr  netip.Addr
	proto uint8
	port  uint16
}

// From accepts the packets of addr (the firewall's `-s addr -j ACCEPT`).
func From(addr netip.Addr) Accept { return Accept{kind: from, addr: addr.Unmap().WithZone("")} }

// RepliesTo accepts the packets to addr of established and related
// connections (the firewall's `-d addr -m conntrack --ctstate
// RELATED,ESTABLISHED -j ACCEPT`).
func RepliesTo(addr netip.Addr) Accept {
	return Accept{kind: repliesTo, addr: addr.Unmap().WithZone("")}
}

// DNATedTo accepts both directions of connections of protocol proto that
// were DNATed to `to`: a port mapping's traffic, whose first packet is new
// and so not covered by RepliesTo.
func DNATedTo(proto uint8, to netip.AddrPort) Accept {
	return Accept{kind: dnatTo, addr: to.Addr().Unmap().WithZone(""), proto: proto, port: to.Port()}
}

// Offsets in the IPv4 and IPv6 headers and the transport header.
const (
	ip4Src  = 12
	ip4Dst  = 16
	ip6Src  = 8
	ip6Dst  = 24
	thSport = 0
	thDport = 2
	reg1    = 1
)

// ipsDstNAT is IPS_DST_NAT, the conntrack status bit of `ct status dnat`.
const ipsDstNAT = 1 << 5

// Rules are a's rules as c spells them. In iptables-nft chains:
//
//	-s A -j ACCEPT
//	-d A -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
//	-m conntrack --ctstate DNAT --ctproto P --ctreplsrc A --ctreplsrcport N -j ACCEPT
//
// encoded exactly as iptables-nft encodes them: address matches as
// payload comparisons, the state as the x_tables conntrack match, then a
// counter and the verdict (the comment is the rule's userdata, added by
// the batch). Elsewhere, native nft:
//
//	ip saddr A accept
//	ip daddr A ct state established,related accept
//	ip daddr A tcp dport N ct status dnat accept
//	ip saddr A tcp sport N ct status dnat accept
//
// (ip6 for IPv6, udp or sctp as the protocol is; `meta nfproto` first in
// inet tables, as nft adds it). The
// native DNAT accept is two rules, one per direction: nft can compare the
// reply tuple's address only with a direction our encoder cannot send.
func (c Chain) Rules(a Accept) [][]expr.Any {
	src, dst, n := uint32(ip4Src), uint32(ip4Dst), uint32(4)
	if a.addr.Is6() {
		src, dst, n = ip6Src, ip6Dst, 16
	}
	addr := func(off uint32) []expr.Any {
		return []expr.Any{
			&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: n},
			&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: a.addr.AsSlice()},
		}
	}
	accept := []expr.Any{&expr.Verdict{Kind: expr.VerdictAccept}}
	if c.Iptables {
		tail := append([]expr.Any{&expr.Counter{}}, accept...)
		switch a.kind {
		case from:
			return [][]expr.Any{cat(addr(src), tail)}
		case repliesTo:
			x := xtables.Conntrack{States: xtables.StateEstablished | xtables.StateRelated}
			return [][]expr.Any{cat(addr(dst), []expr.Any{x.Match()}, tail)}
		}
		x := xtables.Conntrack{States: xtables.StateDNAT, Proto: a.proto, ReplySrc: a.addr, ReplySrcPort: a.port}
		return [][]expr.Any{cat([]expr.Any{x.Match()}, tail)}
	}
	var head []expr.Any
	if c.Table.Family == nftables.TableFamilyINet {
		proto := byte(unix.NFPROTO_IPV4)
		if a.addr.Is6() {
			proto = unix.NFPROTO_IPV6
		}
		head = []expr.Any{
			&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: reg1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{proto}},
		}
	}
	switch a.kind {
	case from:
		return [][]expr.Any{cat(head, addr(src), accept)}
	case repliesTo:
		return [][]expr.Any{cat(head, addr(dst), ctBits(expr.CtKeySTATE, expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED), accept)}
	}
	port := func(off uint32) []expr.Any {
		return []expr.Any{
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{a.proto}},
			&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseTransportHeader, Offset: off, Len: 2},
			&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{byte(a.port >> 8), byte(a.port)}},
		}
	}
	dnat := ctBits(expr.CtKeySTATUS, ipsDstNAT)
	return [][]expr.Any{
		cat(head, addr(dst), port(thDport), dnat, accept),
		cat(head, addr(src), port(thSport), dnat, accept),
	}
}

// ctBits is `ct <key> & bits != 0` (`ct state established,related`, `ct
// status dnat`): the register holds the value in host byte order.
func ctBits(key expr.CtKey, bits uint32) []expr.Any {
	mask := make([]byte, 4)
	binary.NativeEndian.PutUint32(mask, bits)
	return []expr.Any{
		&expr.Ct{Key: key, Register: reg1},
		&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4, Mask: mask, Xor: []byte{0, 0, 0, 0}},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: reg1, Data: []byte{0, 0, 0, 0}},
	}
}

func cat(parts ...[]expr.Any) []expr.Any {
	var out []expr.Any
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// encode is the rules of the accepts of want that fit c, duplicates once.
func (c Chain) encode(want []Accept) [][]expr.Any {
	var out [][]expr.Any
	for _, a := range fitting(c, want) {
		out = append(out, c.Rules(a)...)
	}
	return out
}

// Mark says whose rules are whose: an attachment's, and which component's.
// The firewall's rules carry the plain owner tag (Component ""), others
// ownerid.Owner.ComponentTag, so that the firewall's DEL of an attachment does
// not remove its portmap's rules in the same chain, and the reverse.
type Mark struct {
	Owner     ownerid.Owner
	Component string
}

func (m Mark) comment() string {
	if m.Component == "" {
		return m.Owner.Tag()
	}
	return m.Owner.ComponentTag(m.Component)
}

// Has reports whether comment marks a rule of m.
func (m Mark) Has(comment string) bool {
	return m.Owner.OwnedBy(comment) && ownerid.TagComponent(comment) == m.Component
}

// Of narrows match, a test of owner tags (ownerid.Owner.OwnedBy, ownerid.Stale),
// to component's rules.
func Of(component string, match func(comment string) bool) func(comment string) bool {
	return func(comment string) bool { return match(comment) && ownerid.TagComponent(comment) == component }
}

// Reader reads a ruleset: *nft.Tx inside an Update, *nft.Conn for CHECK.
type Reader interface {
	TableExists(t *nftables.Table) (bool, error)
	ChainExists(ch *nftables.Chain) (bool, error)
	Rules(ch *nftables.Chain) ([]nft.Rule, error)
	Require(f nft.Feature) error
	IptablesInUse() (bool, error)
}

// creatable reports whether Sync creates c, an iptables-nft chain found
// missing, and whether its table must be created too: yes when the table
// is missing, or when it is iptables-nft's own (it has an INPUT or OUTPUT
// chain: iptables-nft creates its built-in chains one by one, as they are
// used); not in a table of that name that is someone's native one, and
// not on a kernel without the x_tables conntrack match.
func creatable(r Reader, c Chain) (create, addTable bool, err error) {
	has, err := r.TableExists(c.Table)
	if err != nil {
		return false, false, err
	}
	if has {
		builtin := false
		for _, name := range []string{"INPUT", "OUTPUT"} {
			ok, err := r.ChainExists(&nftables.Chain{Table: c.Table, Name: name})
			if err != nil {
				return false, false, err
			}
			builtin = builtin || ok
		}
		if !builtin {
			return false, false, nil
		}
	}
	switch err := r.Require(nft.XTConntrackMatch); {
	case errors.Is(err, errors.ErrUnsupported):
		return false, false, nil
	case err != nil:
		return false, false, err
	}
	return true, !has, nil
}

// Sync makes m's rules in c the rules of the accepts of want that fit c's
// family, at the chain's head. When m already has as many rules there as
// it should and changed is false (the caller's own state for these
// accepts did not change), nothing is written; otherwise m's rules are
// replaced as a whole (rules are never compared by content). m's rules
// are found through the index (index.go) when it is right, by reading the
// chain otherwise. A missing iptables-nft chain is created when there is
// something to put in it (see creatable); a missing named chain fails.
// In iptables-nft's chains m's accepts are claims instead (marked.go:
// markedSync), compared by content, and only what changed is written.
func Sync(tx *nft.Tx, c Chain, m Mark, want []Accept, changed bool) error {
	if c.Iptables {
		return markedSync(tx, c, m, want, true)
	}
	rules := c.encode(want)
	exists, err := ensure(tx, c, len(rules) > 0)
	if err != nil || !exists {
		return err
	}
	idx, mine, indexOK, err := indexed(tx, c, m)
	if err != nil {
		return err
	}
	var cur []nft.Rule // read only without the index, or to prune
	if !indexOK || len(rules) == 0 {
		if cur, err = readChain(tx, c); err != nil {
			return err
		}
		mine = nil
		for _, r := range cur {
			if m.Has(r.Comment) {
				mine = append(mine, r.Handle)
			}
		}
	}
	if !changed && len(mine) == len(rules) {
		return nil
	}
	b := tx.Batch()
	for _, h := range mine {
		b.DeleteForeignRule(c.nft(), h)
	}
	unindex(tx, m, idx)
	insert(tx, c, m, rules)
	if len(rules) == 0 {
		return prune(tx, c, len(cur), len(mine))
	}
	return nil
}

// insert puts rules at c's head for m and has them indexed.
func insert(tx *nft.Tx, c Chain, m Mark, rules [][]expr.Any) {
	if len(rules) == 0 {
		return
	}
	for _, exprs := range rules {
		tx.Batch().InsertForeignRule(&nftables.Rule{Table: c.Table, Chain: c.nft(), Exprs: exprs}, m.comment())
	}
	indexAfter(tx, c, m)
}

// Insert puts m's rules for the accepts of want that fit c's family at
// the chain's head without reading the chain, which costs in proportion
// to its rules: for an m the caller knows to have no rule in c (the rules
// are written and removed in the same batches as the caller's own state,
// and the caller has none). A missing chain is handled as by Sync. In
// iptables-nft's chains it claims m's accepts (markedSync) without looking
// for an earlier version's rules of m.
func Insert(tx *nft.Tx, c Chain, m Mark, want []Accept) error {
	if c.Iptables {
		return markedSync(tx, c, m, want, false)
	}
	rules := c.encode(want)
	if len(rules) == 0 {
		return nil
	}
	exists, err := ensure(tx, c, true)
	if err != nil || !exists {
		return err
	}
	insert(tx, c, m, rules)
	return nil
}

// ensure reports whether c exists or is created in this batch: a missing
// iptables-nft chain is created when there is something to put in it
// (see creatable); a missing named chain fails.
func ensure(tx *nft.Tx, c Chain, something bool) (bool, error) {
	exists, err := tx.ChainExists(c.nft())
	if err != nil || exists {
		return exists, err
	}
	if !c.Iptables {
		return false, fmt.Errorf("chain %s (nftablesAcceptChains) not found", c)
	}
	if !something {
		return false, nil
	}
	create, addTable, err := creatable(tx, c)
	if err != nil || !create {
		return false, err
	}
	tx.Batch().CreateIptablesForward(c.Table.Family, addTable)
	return true, nil
}

// prune deletes the iptables-nft filter table of c when this batch
// deletes every rule its FORWARD chain had (had of them, removed by us)
// and the table holds nothing else (nft.Tx.BareIptablesFilter): what Sync
// created goes with the last rule in it, and iptables shows the host as
// before. A table with anything of anyone's besides stays as it is.
func prune(tx *nft.Tx, c Chain, had, removed int) error {
	if !c.Iptables || removed == 0 || removed != had {
		return nil
	}
	bare, err := tx.BareIptablesFilter(c.Table.Family)
	if err != nil || !bare {
		return err
	}
	tx.Batch().DeleteIptablesFilter(c.Table.Family)
	return nil
}

// Remove deletes m's rules in c, found through the index when it is right
// (index.go), by reading the chain otherwise; a missing chain has none. In
// iptables-nft's chains it deletes m's claims (markedRemove), and the
// per-address rules of an earlier version when m has no claims.
func Remove(tx *nft.Tx, c Chain, m Mark) (int, error) {
	if c.Iptables {
		if n, marked, err := markedRemove(tx, c, m); err != nil || marked {
			return n, err
		}
	}
	ok, err := tx.ChainExists(c.nft())
	if err != nil {
		return 0, err
	}
	idx, mine, indexOK, err := indexed(tx, c, m)
	if err != nil {
		return 0, err
	}
	unindex(tx, m, idx)
	if !ok {
		return 0, nil
	}
	if indexOK {
		for _, h := range mine {
			tx.Batch().DeleteForeignRule(c.nft(), h)
		}
		return len(mine), pruneIfOnly(tx, c, mine)
	}
	cur, err := readChain(tx, c)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, r := range cur {
		if m.Has(r.Comment) {
			tx.Batch().DeleteForeignRule(c.nft(), r.Handle)
			n++
		}
	}
	return n, prune(tx, c, len(cur), n)
}

// pruneIfOnly is prune for a batch that deletes the rules with handles
// removed from c without having read c: the table goes when it is bare
// and c holds no other rule, which a partial read tells
// (nft.Tx.HasRuleBesides).
func pruneIfOnly(tx *nft.Tx, c Chain, removed []uint64) error {
	if !c.Iptables || len(removed) == 0 {
		return nil
	}
	bare, err := tx.BareIptablesFilter(c.Table.Family)
	if err != nil || !bare {
		return err
	}
	other, err := tx.HasRuleBesides(c.nft(), removed)
	if err != nil || other {
		return err
	}
	tx.Batch().DeleteIptablesFilter(c.Table.Family)
	return nil
}

// RemoveEverywhere deletes every rule, in any table not ours, and every
// marked claim (markedGC), whose comment match selects: GC, which finds
// rules left in chains the configuration no longer names.
func RemoveEverywhere(tx *nft.Tx, match func(comment string) bool) (int, error) {
	all, err := tx.AllRules()
	if err != nil {
		return 0, err
	}
	n := 0
	had, removed := map[Chain]int{}, map[Chain]int{}
	for _, r := range all {
		c := chainOf(r.Chain)
		had[c]++
		if match(r.Comment) {
			tx.Batch().DeleteForeignRule(r.Chain, r.Handle)
			removed[c]++
			n++
		}
	}
	for _, c := range Iptables {
		if err := prune(tx, c, had[c], removed[c]); err != nil {
			return 0, err
		}
	}
	if err := markedGC(tx, match); err != nil {
		return 0, err
	}
	return n, unindexWhere(tx, match)
}

// chainOf is ch as a Chain, one of Iptables when it is one of theirs.
func chainOf(ch *nftables.Chain) Chain {
	for _, c := range Iptables {
		if c.Table.Family == ch.Table.Family && c.Table.Name == ch.Table.Name && c.Name == ch.Name {
			return c
		}
	}
	return Chain{Table: ch.Table, Name: ch.Name}
}

// readChain reads c's rules, whose number is everyone's: what the index
// spares.
func readChain(r Reader, c Chain) ([]nft.Rule, error) {
	chainReads.Add(1)
	return r.Rules(c.nft())
}

// chainReads counts the chains read whole: tests check with it that Sync,
// Remove and Check took the index.
var chainReads atomic.Int64

// Check verifies that m has in c as many rules as Sync(want) gives it; in
// iptables-nft's chains, read inside an Update, the claims, their lookup
// elements and the shared rule (markedCheck), or an earlier version's
// rules for an m without claims.
// A missing iptables-nft chain that Sync would have created fails too:
// the attachment would lose its traffic to a DROP policy set later. Read
// inside an Update (r a *nft.Tx), m's rules are found through the index
// when it is right, as by Sync and Remove; otherwise, and outside one,
// the chain is read and m's rules counted.
func Check(r Reader, c Chain, m Mark, want []Accept) error {
	if tx, ok := r.(*nft.Tx); ok && c.Iptables {
		if marked, err := markedCheck(tx, c, m, want); err != nil || marked {
			return err
		}
	}
	n := len(c.encode(want))
	exists, err := r.ChainExists(c.nft())
	if err != nil {
		return err
	}
	if !exists {
		if !c.Iptables {
			return fmt.Errorf("chain %s (nftablesAcceptChains) not found", c)
		}
		if n == 0 {
			return nil
		}
		create, _, err := creatable(r, c)
		if err != nil {
			return err
		}
		if create {
			return fmt.Errorf("chain %s not found: want %d accept rules of this attachment there", c, n)
		}
		return nil
	}
	if tx, ok := r.(*nft.Tx); ok && n > 0 {
		_, handles, ok, err := indexed(tx, c, m)
		if err != nil {
			return err
		}
		if ok && len(handles) == n {
			return nil
		}
	}
	cur, err := readChain(r, c)
	if err != nil {
		return err
	}
	got := 0
	for _, x := range cur {
		if m.Has(x.Comment) {
			got++
		}
	}
	if got != n {
		return fmt.Errorf("chain %s: %d accept rules of this attachment, want %d", c, got, n)
	}
	return nil
}
