// Package masq masquerades traffic leaving a container network: the ipMasq
// option of the bridge and ptp plugins. The
// semantics are the reference's: traffic from container address A/len to
// any destination that is neither multicast nor inside A's own subnet
// leaves with the host's address.
//
// # Data model
//
// One table of ours holds everything, for both address families:
//
//	table inet nftcni_masq {
//		map src4 {
//			type ipv4_addr : verdict
//			elements = { 10.1.0.5 : jump subnet4_24 comment "<owner tag>" }
//		}
//		map src6 {
//			type ipv6_addr : verdict
//			elements = { fd00:1::5 : jump subnet6_64 comment "<owner tag>" }
//		}
//		set local4 {
//			type ipv4_addr . ipv4_addr
//			elements = { 10.1.0.5 . 10.1.0.0 comment "<owner tag>" }
//		}
//		set local6 {
//			type ipv6_addr . ipv6_addr
//			elements = { fd00:1::5 . fd00:1:: comment "<owner tag>" }
//		}
//		set owners {
//			type ifname
//			elements = { "<attachment hash>" comment "<tag hashes> =<addresses>" }
//		}
//		chain postrouting {
//			type nat hook postrouting priority srcnat; policy accept;
//			ip daddr 224.0.0.0/4 return comment "nftcni masq v2: multicast"
//			ip6 daddr ff00::/8 return comment "nftcni masq v2: multicast6"
//			ip saddr vmap @src4 comment "nftcni masq v2: sources"
//			ip6 saddr vmap @src6 comment "nftcni masq v2: sources6"
//		}
//		chain subnet4_24 {
//			ip saddr . ip daddr & 255.255.255.0 @local4 return comment "nftcni masq v2: own /24 subnet"
//			masquerade comment "nftcni masq v2: masquerade"
//		}
//	}
//
// A container address A/len jumps to the chain of its prefix length,
// which returns when the destination masked to len bits is A's subnet
// address (the pair A . subnet is in local4) and masquerades otherwise.
// There is one such chain per prefix length in use (at most 33 for IPv4,
// 129 for IPv6), made by the first Setup that needs it and never removed;
// the rules in them are static too.
//
// Why maps and sets rather than the reference's rule per container: a NAT
// chain is walked for the first packet of every connection, so with one
// rule per container its cost grows with the number of containers on the
// host; here it is four rules in postrouting and two in the subnet chain,
// with two hash lookups, however many there are.
// The rules are static: created once, recognised by their comments (which
// carry a layout version), and re-created only when those differ. All
// per-container state is set elements carrying the owner tag
// (ownerid.Owner.Tag), so DEL deletes exactly the elements with its tag and GC
// those with the network's hash and no valid attachment's.
//
// Why a chain per prefix length rather than the pair (destination subnet
// range . source address) in one interval set, as layout v1 had: such a
// set needs the pipapo backend, and every element added to or removed from
// a pipapo set costs time in proportion to the whole set (measured: one
// add and delete, 2.45 ms with 10 elements, 7.33 ms with 1000, 21.6 ms
// with 4000), which every ADD and DEL paid. Hash sets and maps cost the
// same whatever their size.
//
// One table in the inet family rather than ip + ip6: the rules and sets
// per family are independent anyway, and one table keeps Setup a single
// batch with a single existence check.
//
// Every Setup, Teardown and GC is one batch guarded by the ruleset
// generation (nft.Conn.Update): concurrent plugin runs never apply a
// decision to a ruleset they did not read.
//
// The owners set holds one marker per owner (nft.OwnersSet), whose comment
// records the owner's addresses: a Setup of an owner without one (a first
// ADD) reads only the elements for its own addresses, one lookup each,
// instead of all four sets, and a Teardown, or a repeated Setup, looks up
// the elements the recorded addresses give, so neither grows with the
// number of containers; see nft.TaggedTable. A table of layout v1 keeps its
// sets (masq4, masq6, exempt4, exempt6): DEL of an owner whose marker
// records nothing, and GC, still remove that owner's elements from them.
//
// # Known limit: one address, one owner
//
// An element's key is the address, so the same container address can be
// masqueraded for one owner only. When a Setup brings an address already
// present with another tag, it takes the address over (last writer wins):
// the other owner's elements for that address are replaced, and its later
// Teardown removes nothing of the new owner's. The reference, with one
// rule per container, would keep both. The same address twice on one
// host — two networks with overlapping ranges — cannot route correctly
// anyway (replies to it can only take one route), and taking over is what
// makes a stale element left by a missed DEL harmless. Untagged elements
// someone put into our sets are left alone by Teardown and GC, but taken
// over the same way by a Setup of their address.
package masq

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/nft"
	"github.com/nftcni/nftcni/ownerid"
)

// Names of our objects; the table name must keep the nft.TablePrefix.
const (
	TableName = "nftcni_masq"
	ChainName = "postrouting"
)

var (
	// store is the component: the table, chain, sets and rules below.
	store = &nft.TaggedTable{Table: table, Chain: chain, Sets: sets, Rules: rules,
		Chains: subnetChains, Recompute: recompute, Legacy: legacy}

	table = &nftables.Table{Family: nftables.TableFamilyINet, Name: TableName}

	chain = nft.BaseChain(table, ChainName, nftables.ChainTypeNAT, nftables.ChainHookPostrouting, nftables.ChainPriorityNATSource)

	// Addresses are big endian; nft records that in the set's userdata,
	// and so do we.
	src4 = &nftables.Set{Table: table, Name: "src4", IsMap: true, KeyType: nftables.TypeIPAddr, DataType: nftables.TypeVerdict,
		KeyByteOrder: binaryutil.BigEndian}
	src6 = &nftables.Set{Table: table, Name: "src6", IsMap: true, KeyType: nftables.TypeIP6Addr, DataType: nftables.TypeVerdict,
		KeyByteOrder: binaryutil.BigEndian}
	local4 = &nftables.Set{Table: table, Name: "local4", KeyType: nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeIPAddr)}
	local6 = &nftables.Set{Table: table, Name: "local6", KeyType: nftables.MustConcatSetType(nftables.TypeIP6Addr, nftables.TypeIP6Addr)}

	sets = []*nftables.Set{src4, src6, local4, local6}

	// legacy are layout v1's sets (see the package comment).
	legacy = []*nftables.Set{
		{Table: table, Name: "masq4", KeyType: nftables.TypeIPAddr},
		{Table: table, Name: "masq6", KeyType: nftables.TypeIP6Addr},
		{Table: table, Name: "exempt4", Interval: true, Concatenation: true, KeyType: nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeIPAddr)},
		{Table: table, Name: "exempt6", Interval: true, Concatenation: true, KeyType: nftables.MustConcatSetType(nftables.TypeIP6Addr, nftables.TypeIP6Addr)},
	}
)

// Setup masquerades traffic from addrs (container addresses with their
// prefix length) to anything outside their subnet and not multicast, owned
// by owner, in ns (nil: the process's own namespace).
//
// It is idempotent, and a Setup of the same owner replaces that owner's
// previous addresses. With no addrs it only removes the owner's previous
// addresses (and still makes sure the table exists).
func Setup(ns *netns.NS, owner ownerid.Owner, addrs []netip.Prefix) error {
	what, want, err := setup(owner, addrs)
	if err != nil {
		return err
	}
	return store.Setup(ns, owner, want, record(addrs), takeOver(want), what)
}

// Plan is Setup's plan, for a transaction the caller owns (nft.Plan).
func Plan(owner ownerid.Owner, addrs []netip.Prefix) (nft.Plan, error) {
	what, want, err := setup(owner, addrs)
	if err != nil {
		return nft.Plan{}, err
	}
	return store.Plan(owner, want, record(addrs), takeOver(want), what), nil
}

func setup(owner ownerid.Owner, addrs []netip.Prefix) (what string, want map[*nftables.Set][]nft.Element, err error) {
	what = "adding masquerade for " + describe(addrs)
	if want, err = elements(owner, addrs); err != nil {
		return "", nil, fmt.Errorf("%s: %w", what, err)
	}
	return what, want, nil
}

// takeOver selects, besides the owner's own elements from before, the
// elements for the addresses of want (sameAddress).
func takeOver(want map[*nftables.Set][]nft.Element) func(*nftables.Set, nft.Element) bool {
	return func(s *nftables.Set, e nft.Element) bool { return sameAddress(s, e, want[s]) }
}

// Teardown removes everything owner added. Nothing to remove is success,
// and then nothing is written (no table is created).
func Teardown(ns *netns.NS, owner ownerid.Owner) error {
	return store.Teardown(ns, owner,
		fmt.Sprintf("removing masquerade of container %s (%s, network %s)", owner.ContainerID, owner.IfName, owner.Network))
}

// GC removes everything of network not owned by one of valid.
func GC(ns *netns.NS, network string, valid []ownerid.Owner) error {
	return store.GC(ns, network, valid, fmt.Sprintf("collecting stale masquerade of network %s", network))
}

func describe(addrs []netip.Prefix) string {
	if len(addrs) == 0 {
		return "no address"
	}
	s := make([]string, len(addrs))
	for i, a := range addrs {
		s[i] = a.String()
	}
	return strings.Join(s, ", ")
}

// record is what the owner's marker keeps of a Setup: its addresses, from
// which recompute rebuilds the elements.
func record(addrs []netip.Prefix) string {
	s := make([]string, len(addrs))
	for i, a := range addrs {
		s[i] = a.String()
	}
	return strings.Join(s, " ")
}

func recompute(owner ownerid.Owner, rec string) (map[*nftables.Set][]nft.Element, error) {
	var addrs []netip.Prefix
	for _, f := range strings.Fields(rec) {
		p, err := netip.ParsePrefix(f)
		if err != nil {
			return nil, err
		}
		addrs = append(addrs, p)
	}
	return elements(owner, addrs)
}

// sameAddress reports whether e, an element of s, is for the same
// container address as one of want: the address is the whole key of
// src4/src6 and the first half of local4/local6's. The newest attachment
// of an address takes over such an element (a missed DEL's leftover).
func sameAddress(s *nftables.Set, e nft.Element, want []nft.Element) bool {
	addrOf := func(k []byte) []byte {
		if s == local4 || s == local6 {
			return k[:len(k)/2]
		}
		return k
	}
	return slices.ContainsFunc(want, func(w nft.Element) bool { return string(addrOf(e.Key)) == string(addrOf(w.Key)) })
}

// elements computes owner's wanted elements per set.
func elements(owner ownerid.Owner, addrs []netip.Prefix) (map[*nftables.Set][]nft.Element, error) {
	tag := owner.Tag()
	want := map[*nftables.Set][]nft.Element{}
	for _, p := range addrs {
		if !p.IsValid() {
			return nil, fmt.Errorf("invalid address %s", p)
		}
		a := p.Addr().WithZone("")
		bits := p.Bits()
		if a.Is4In6() {
			a = a.Unmap()
			bits = max(bits-96, 0)
		}
		sub := netip.PrefixFrom(a, bits).Masked()
		ss, ls := src4, local4
		if a.Is6() {
			ss, ls = src6, local6
		}
		want[ss] = append(want[ss], nft.Element{Key: a.AsSlice(), Jump: subnetChain(a.Is4(), bits).Name, Comment: tag})
		want[ls] = append(want[ls], nft.Element{Key: nft.Concat(a.AsSlice(), sub.Addr().AsSlice()), Comment: tag})
	}
	return want, nil
}

// subnetChain is the chain of addresses with prefix length bits.
func subnetChain(v4 bool, bits int) *nftables.Chain {
	name := fmt.Sprintf("subnet6_%d", bits)
	if v4 {
		name = fmt.Sprintf("subnet4_%d", bits)
	}
	return &nftables.Chain{Table: table, Name: name}
}

// subnetChains are the chains want's verdict map elements jump to, with
// their rules, each once.
func subnetChains(want map[*nftables.Set][]nft.Element) []nft.ChainRules {
	var out []nft.ChainRules
	for _, s := range []*nftables.Set{src4, src6} {
		for _, e := range want[s] {
			if slices.ContainsFunc(out, func(c nft.ChainRules) bool { return c.Chain.Name == e.Jump }) {
				continue
			}
			v4 := s == src4
			_, n, _ := strings.Cut(e.Jump, "_")
			bits, err := strconv.Atoi(n)
			if err != nil {
				continue // not a chain of ours: elements() names them all
			}
			out = append(out, nft.ChainRules{Chain: subnetChain(v4, bits), Rules: subnetRules(v4, bits)})
		}
	}
	return out
}

// Registers as nft numbers them (and `nft --debug` prints them): 1 is the
// first 16-byte register, 2 the second; 9 is the second 4-byte slot of
// register 1's space (NFT_REG32_01), where a concatenation's second IPv4
// field goes.
const (
	reg1   = 1
	reg2   = 2
	reg9   = unix.NFT_REG32_01
	ip4Src = 12 // offsets in the IPv4 header
	ip4Dst = 16
	ip6Src = 8 // offsets in the IPv6 header
	ip6Dst = 24
)

// rules are the static rules of the postrouting chain. Comments name them
// and carry the layout version: change a rule ⇒ change its comment.
func rules() []nft.StaticRule {
	return []nft.StaticRule{
		{
			// ip daddr 224.0.0.0/4 return
			Comment: "nftcni masq v2: multicast",
			Exprs: slices.Concat(is(unix.NFPROTO_IPV4),
				load(ip4Dst, 1, reg1),
				[]expr.Any{
					&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 1, Mask: []byte{0xf0}, Xor: []byte{0}},
					&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{0xe0}},
					&expr.Verdict{Kind: expr.VerdictReturn},
				}),
		},
		{
			// ip6 daddr ff00::/8 return
			Comment: "nftcni masq v2: multicast6",
			Exprs: slices.Concat(is(unix.NFPROTO_IPV6),
				load(ip6Dst, 1, reg1),
				[]expr.Any{
					&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{0xff}},
					&expr.Verdict{Kind: expr.VerdictReturn},
				}),
		},
		{
			// ip saddr vmap @src4
			Comment: "nftcni masq v2: sources",
			Exprs: slices.Concat(is(unix.NFPROTO_IPV4),
				load(ip4Src, 4, reg1),
				[]expr.Any{&expr.Lookup{SourceRegister: reg1, DestRegister: 0, IsDestRegSet: true, SetName: src4.Name}}),
		},
		{
			// ip6 saddr vmap @src6
			Comment: "nftcni masq v2: sources6",
			Exprs: slices.Concat(is(unix.NFPROTO_IPV6),
				load(ip6Src, 16, reg1),
				[]expr.Any{&expr.Lookup{SourceRegister: reg1, DestRegister: 0, IsDestRegSet: true, SetName: src6.Name}}),
		},
	}
}

// subnetRules are the rules of the chain for prefix length bits: return
// when the destination is in the source's subnet, masquerade otherwise.
// Only addresses of the chain's family jump to it, so they need no family
// match.
func subnetRules(v4 bool, bits int) []nft.StaticRule {
	n, src, dst, after, set := uint32(4), uint32(ip4Src), uint32(ip4Dst), uint32(reg9), local4.Name
	if !v4 {
		n, src, dst, after, set = 16, ip6Src, ip6Dst, reg2, local6.Name
	}
	mask := nft.PrefixMask(bits, int(n))
	return []nft.StaticRule{
		{
			// ip saddr . ip daddr & <mask> @local4 return
			Comment: fmt.Sprintf("nftcni masq v2: own /%d subnet", bits),
			Exprs: slices.Concat(load(src, n, reg1), load(dst, n, after),
				[]expr.Any{
					&expr.Bitwise{SourceRegister: after, DestRegister: after, Len: n, Mask: mask, Xor: make([]byte, n)},
					&expr.Lookup{SourceRegister: reg1, SetName: set},
					&expr.Verdict{Kind: expr.VerdictReturn},
				}),
		},
		{
			// masquerade
			Comment: "nftcni masq v2: masquerade",
			Exprs:   []expr.Any{&expr.Masq{}},
		},
	}
}

// is matches the packet's family in the inet table (`meta nfproto ipv4`,
// which nft adds implicitly before any `ip`/`ip6` match).
func is(proto byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: reg1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{proto}},
	}
}

// load copies n bytes at off of the network header into reg.
func load(off, n, reg uint32) []expr.Any {
	return []expr.Any{&expr.Payload{DestRegister: reg, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: n}}
}
