package firewall

import (
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/nft"
)

// Registers as nft numbers them: 1 is the first 16-byte register, 2 the
// second (where the second interface name of a concatenation goes).
const (
	reg1   = 1
	reg2   = 2
	ip4Src = 12 // offsets in the IPv4 header
	ip4Dst = 16
	ip6Src = 8 // offsets in the IPv6 header
	ip6Dst = 24
)

// ctStateEstablished and ctStateRelated are the kernel's state bits
// (NF_CT_STATE_BIT: 1 << (ctinfo + 1)).
const (
	ctStateEstablished = 1 << 1
	ctStateRelated     = 1 << 2
)

// ctEstablishedRelated is the ct state mask of `ct state
// established,related` (host byte order, like the kernel's register).
var ctEstablishedRelated = binaryutil.NativeEndian.PutUint32(ctStateEstablished | ctStateRelated)

// rules are the static rules of the forward chain. Comments name them and
// carry the layout version: change a rule ⇒ change its comment.
func rules() []nft.StaticRule {
	iifname := &expr.Meta{Key: expr.MetaKeyIIFNAME, Register: reg1}
	oifname := &expr.Meta{Key: expr.MetaKeyOIFNAME, Register: reg1}
	pair := []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: reg1},
		&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: reg2},
	}
	return []nft.StaticRule{
		{
			// iifname @bridges oifname @bridges iifname . oifname != @bridge_self drop
			Comment: "nftcni firewall v1: same-bridge",
			Exprs: cat(
				[]expr.Any{iifname, &expr.Lookup{SourceRegister: reg1, SetName: bridges.Name}},
				[]expr.Any{oifname, &expr.Lookup{SourceRegister: reg1, SetName: bridges.Name}},
				pair,
				[]expr.Any{
					&expr.Lookup{SourceRegister: reg1, SetName: bridgeSelf.Name, Invert: true},
					&expr.Verdict{Kind: expr.VerdictDrop},
				}),
		},
		{
			// iifname . oifname @isolated_self drop
			Comment: "nftcni firewall v1: isolated",
			Exprs: cat(pair, []expr.Any{
				&expr.Lookup{SourceRegister: reg1, SetName: isolatedSelf.Name},
				&expr.Verdict{Kind: expr.VerdictDrop},
			}),
		},
		{
			// jump admin-jumps
			Comment: "nftcni firewall v1: admin",
			Exprs:   []expr.Any{&expr.Verdict{Kind: expr.VerdictJump, Chain: AdminJumpsChain}},
		},
		{
			// ip daddr @allow4 ct state established,related accept
			Comment: "nftcni firewall v1: return traffic",
			Exprs:   cat(is(unix.NFPROTO_IPV4), load(ip4Dst, 4), lookup(allow4.Name), established(), accept()),
		},
		{
			// ip saddr @allow4 accept
			Comment: "nftcni firewall v1: from container",
			Exprs:   cat(is(unix.NFPROTO_IPV4), load(ip4Src, 4), lookup(allow4.Name), accept()),
		},
		{
			// ip6 daddr @allow6 ct state established,related accept
			Comment: "nftcni firewall v1: return traffic6",
			Exprs:   cat(is(unix.NFPROTO_IPV6), load(ip6Dst, 16), lookup(allow6.Name), established(), accept()),
		},
		{
			// ip6 saddr @allow6 accept
			Comment: "nftcni firewall v1: from container6",
			Exprs:   cat(is(unix.NFPROTO_IPV6), load(ip6Src, 16), lookup(allow6.Name), accept()),
		},
	}
}

// adminJumpRule is the rule of admin-jumps that jumps to admin chain name.
func adminJumpRule(name string) nft.StaticRule {
	return nft.StaticRule{
		Comment: "nftcni firewall v1: admin chain " + name,
		Exprs:   []expr.Any{&expr.Verdict{Kind: expr.VerdictJump, Chain: name}},
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

// load copies n bytes at off of the network header into register 1.
func load(off, n uint32) []expr.Any {
	return []expr.Any{&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: n}}
}

func lookup(set string) []expr.Any {
	return []expr.Any{&expr.Lookup{SourceRegister: reg1, SetName: set}}
}

// established is `ct state established,related`.
func established() []expr.Any {
	return []expr.Any{
		&expr.Ct{Key: expr.CtKeySTATE, Register: reg1},
		&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4, Mask: ctEstablishedRelated, Xor: []byte{0, 0, 0, 0}},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: reg1, Data: []byte{0, 0, 0, 0}},
	}
}

func accept() []expr.Any { return []expr.Any{&expr.Verdict{Kind: expr.VerdictAccept}} }

func cat(parts ...[]expr.Any) []expr.Any {
	var out []expr.Any
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}
