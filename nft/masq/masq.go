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
//		set masq4 {
//			type ipv4_addr
//			elements = { 10.1.0.5 comment "<owner tag>" }
//		}
//		set masq6 {
//			type ipv6_addr
//			elements = { fd00:1::5 comment "<owner tag>" }
//		}
//		set exempt4 {
//			type ipv4_addr . ipv4_addr
//			flags interval
//			elements = { 10.1.0.0/24 . 10.1.0.5 comment "<owner tag>" }
//		}
//		set exempt6 {
//			type ipv6_addr . ipv6_addr
//			flags interval
//			elements = { fd00:1::/64 . fd00:1::5 comment "<owner tag>" }
//		}
//		set owners {
//			type ifname
//			elements = { "<attachment hash>" comment "<owner tag>" }
//		}
//		chain postrouting {
//			type nat hook postrouting priority srcnat; policy accept;
//			ip daddr 224.0.0.0/4 return comment "nftcni masq v1: multicast"
//			ip6 daddr ff00::/8 return comment "nftcni masq v1: multicast6"
//			ip daddr . ip saddr @exempt4 return comment "nftcni masq v1: own subnet"
//			ip6 daddr . ip6 saddr @exempt6 return comment "nftcni masq v1: own subnet6"
//			ip saddr @masq4 masquerade comment "nftcni masq v1: masquerade"
//			ip6 saddr @masq6 masquerade comment "nftcni masq v1: masquerade6"
//		}
//	}
//
// Why sets rather than the reference's rule per container: a NAT chain is
// walked for the first packet of every connection, so with one rule per
// container its cost grows with the number of containers on the host; here
// it is six rules and at most two set lookups (hash, then pipapo) however
// many there are.
// The rules are static: created once, recognised by their comments (which
// carry a layout version), and re-created only when those differ. All
// per-container state is set elements carrying the owner tag
// (nft.Owner.Tag), so DEL deletes exactly the elements with its tag and GC
// those with the network's hash and no valid attachment's.
//
// "Outside A's subnet" is the pair (destination subnet . source address)
// in an interval set with concatenations: each container contributes the
// range of its own subnet, paired with its own address, so containers of
// different subnets never exempt each other. This needs the pipapo set
// backend (Linux ≥ 5.6, below our 5.10 floor; an older kernel gets a clear
// nft.UnsupportedError).
//
// One table in the inet family rather than ip + ip6: the rules and sets
// per family are independent anyway, and one table keeps Setup a single
// batch with a single existence check.
//
// Every Setup, Teardown and GC is one batch guarded by the ruleset
// generation (nft.Conn.Update): concurrent plugin runs never apply a
// decision to a ruleset they did not read.
//
// The owners set holds one marker per owner (nft.OwnersSet): a Setup of an
// owner without one (a first ADD) reads only the elements for its own
// addresses, one lookup each, instead of all four sets, so its cost does
// not grow with the number of containers; see nft.TaggedTable.Setup. A
// table written by an nftcni without markers: an owner's first Setup after
// the upgrade does not see its own elements for other addresses (a
// re-ADD with a changed address), which then stay until its DEL or GC.
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
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/nft"
)

// Names of our objects; the table name must keep the nft.TablePrefix.
const (
	TableName = "nftcni_masq"
	ChainName = "postrouting"
)

var (
	// store is the component: the table, chain, sets and rules below.
	// Golden tests set its Open to a fake nf_tables.
	store = &nft.TaggedTable{Table: table, Chain: chain, Sets: sets, Rules: rules, Needs: []nft.Feature{nft.ConcatRanges}}

	table = &nftables.Table{Family: nftables.TableFamilyINet, Name: TableName}

	chain = nft.BaseChain(table, ChainName, nftables.ChainTypeNAT, nftables.ChainHookPostrouting, nftables.ChainPriorityNATSource)

	// Addresses are big endian; nft records that in the set's userdata,
	// and so do we.
	masq4 = &nftables.Set{Table: table, Name: "masq4", KeyType: nftables.TypeIPAddr, KeyByteOrder: binaryutil.BigEndian}
	masq6 = &nftables.Set{Table: table, Name: "masq6", KeyType: nftables.TypeIP6Addr, KeyByteOrder: binaryutil.BigEndian}

	exempt4 = &nftables.Set{
		Table: table, Name: "exempt4", Interval: true, Concatenation: true,
		KeyType: nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeIPAddr),
	}
	exempt6 = &nftables.Set{
		Table: table, Name: "exempt6", Interval: true, Concatenation: true,
		KeyType: nftables.MustConcatSetType(nftables.TypeIP6Addr, nftables.TypeIP6Addr),
	}

	sets = []*nftables.Set{masq4, masq6, exempt4, exempt6}
)

// Setup masquerades traffic from addrs (container addresses with their
// prefix length) to anything outside their subnet and not multicast, owned
// by owner, in ns (nil: the process's own namespace).
//
// It is idempotent, and a Setup of the same owner replaces that owner's
// previous addresses. With no addrs it only removes the owner's previous
// addresses (and still makes sure the table exists).
func Setup(ns *netns.NS, owner nft.Owner, addrs []netip.Prefix) error {
	what := "adding masquerade for " + describe(addrs)
	want, err := elements(owner, addrs)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return store.Setup(ns, owner, want, func(s *nftables.Set, e nft.Element) bool { return nft.SameAddress(s, e, want[s]) }, what)
}

// Teardown removes everything owner added. Nothing to remove is success,
// and then nothing is written (no table is created).
func Teardown(ns *netns.NS, owner nft.Owner) error {
	return store.Teardown(ns, owner,
		fmt.Sprintf("removing masquerade of container %s (%s, network %s)", owner.ContainerID, owner.IfName, owner.Network))
}

// GC removes everything of network not owned by one of valid.
func GC(ns *netns.NS, network string, valid []nft.Owner) error {
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

// elements computes owner's wanted elements per set.
func elements(owner nft.Owner, addrs []netip.Prefix) (map[*nftables.Set][]nft.Element, error) {
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
		first, last := sub.Addr().AsSlice(), nft.LastAddr(sub).AsSlice()
		addr := a.AsSlice()
		ms, es := masq4, exempt4
		if a.Is6() {
			ms, es = masq6, exempt6
		}
		want[ms] = append(want[ms], nft.Element{Key: addr, Comment: tag})
		want[es] = append(want[es], nft.Element{
			Key:     nft.Concat(first, addr),
			KeyEnd:  nft.Concat(last, addr),
			Comment: tag,
		})
	}
	return want, nil
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
			Comment: "nftcni masq v1: multicast",
			Exprs: concatExprs(is(unix.NFPROTO_IPV4),
				load(ip4Dst, 1, reg1),
				[]expr.Any{
					&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 1, Mask: []byte{0xf0}, Xor: []byte{0}},
					&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{0xe0}},
					&expr.Verdict{Kind: expr.VerdictReturn},
				}),
		},
		{
			// ip6 daddr ff00::/8 return
			Comment: "nftcni masq v1: multicast6",
			Exprs: concatExprs(is(unix.NFPROTO_IPV6),
				load(ip6Dst, 1, reg1),
				[]expr.Any{
					&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{0xff}},
					&expr.Verdict{Kind: expr.VerdictReturn},
				}),
		},
		{
			// ip daddr . ip saddr @exempt4 return
			Comment: "nftcni masq v1: own subnet",
			Exprs: concatExprs(is(unix.NFPROTO_IPV4),
				load(ip4Dst, 4, reg1), load(ip4Src, 4, reg9),
				[]expr.Any{
					&expr.Lookup{SourceRegister: reg1, SetName: exempt4.Name},
					&expr.Verdict{Kind: expr.VerdictReturn},
				}),
		},
		{
			// ip6 daddr . ip6 saddr @exempt6 return
			Comment: "nftcni masq v1: own subnet6",
			Exprs: concatExprs(is(unix.NFPROTO_IPV6),
				load(ip6Dst, 16, reg1), load(ip6Src, 16, reg2),
				[]expr.Any{
					&expr.Lookup{SourceRegister: reg1, SetName: exempt6.Name},
					&expr.Verdict{Kind: expr.VerdictReturn},
				}),
		},
		{
			// ip saddr @masq4 masquerade
			Comment: "nftcni masq v1: masquerade",
			Exprs: concatExprs(is(unix.NFPROTO_IPV4),
				load(ip4Src, 4, reg1),
				[]expr.Any{
					&expr.Lookup{SourceRegister: reg1, SetName: masq4.Name},
					&expr.Masq{},
				}),
		},
		{
			// ip6 saddr @masq6 masquerade
			Comment: "nftcni masq v1: masquerade6",
			Exprs: concatExprs(is(unix.NFPROTO_IPV6),
				load(ip6Src, 16, reg1),
				[]expr.Any{
					&expr.Lookup{SourceRegister: reg1, SetName: masq6.Name},
					&expr.Masq{},
				}),
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

func concatExprs(parts ...[]expr.Any) []expr.Any {
	var out []expr.Any
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}
