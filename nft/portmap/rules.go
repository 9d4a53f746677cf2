package portmap

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/nft"
)

// Registers as nft numbers them: 1 is the first 16-byte register; 8 + n is
// the n-th 4-byte slot (NFT_REG32_00 + n), where the later fields of a
// concatenation go.
const (
	reg1 = unix.NFT_REG_1
	r32  = unix.NFT_REG32_00
)

// Offsets in the network and transport headers.
const (
	ip4Src, ip4Dst = 12, 16
	ip6Src, ip6Dst = 8, 24
	thDport        = 2
)

// Connection-tracking bits (include/uapi/linux/netfilter/nf_conntrack_common.h
// and nf_tables.h's NF_CT_STATE_BIT).
const (
	ipsDstNAT          = 1 << 5 // IPS_DST_NAT
	ctStateEstablished = 1 << 1 // NF_CT_STATE_BIT(IP_CT_ESTABLISHED)
	ctStateRelated     = 1 << 2
)

func (f *family) addrLen() uint32 {
	if f.v6 {
		return 16
	}
	return 4
}

func (f *family) srcOff() uint32 {
	if f.v6 {
		return ip6Src
	}
	return ip4Src
}

func (f *family) dstOff() uint32 {
	if f.v6 {
		return ip6Dst
	}
	return ip4Dst
}

func (f *family) nfproto() uint32 {
	if f.v6 {
		return unix.NFPROTO_IPV6
	}
	return unix.NFPROTO_IPV4
}

// afterAddr is the 4-byte register slot following an address loaded into
// register 1: where the next field of a concatenation goes.
func (f *family) afterAddr() uint32 { return r32 + f.addrLen()/4 }

// Rule comments name the static rules and carry the layout version:
// change a rule ⇒ change its comment.
const (
	cmtLocal     = "nftcni portmap v1: local destinations"
	cmtLoopback  = "nftcni portmap v1: loopback destinations only from this host"
	cmtCond      = "nftcni portmap v1: conditional mappings"
	cmtHostIP    = "nftcni portmap v1: host-IP mappings"
	cmtAny       = "nftcni portmap v1: mappings"
	cmtHairpin   = "nftcni portmap v2: hairpin masquerade"
	cmtLocalhost = "nftcni portmap v1: localhost masquerade"
	cmtGuard     = "nftcni portmap v1: CVE-2020-8558 guard"
)

// staticRules are ch's rules in family f.
func staticRules(f *family, ch *nftables.Chain) []nft.StaticRule {
	switch ch {
	case f.prerouting:
		return []nft.StaticRule{loopbackOnlyFromHost(f), localRule(f)}
	case f.output:
		return []nft.StaticRule{localRule(f)}
	case f.hostport:
		return hostportRules(f)
	case f.postrouting:
		return postroutingRules(f)
	case f.input:
		return []nft.StaticRule{guardRule()}
	}
	return nil
}

// localRule sends packets to a local address to the hostports chain:
//
//	fib daddr type local jump hostports
func localRule(f *family) nft.StaticRule {
	return nft.StaticRule{Comment: cmtLocal, Exprs: []expr.Any{
		&expr.Fib{Register: reg1, FlagDADDR: true, ResultADDRTYPE: true},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: binaryutil.NativeEndian.PutUint32(unix.RTN_LOCAL)},
		&expr.Verdict{Kind: expr.VerdictJump, Chain: f.hostport.Name},
	}}
}

// hostportRules are the hostports chain's: the conditional chain first,
// then the host-IP map, then the map of any address.
func hostportRules(f *family) []nft.StaticRule {
	after := f.afterAddr()
	return []nft.StaticRule{
		// jump conditional
		{Comment: cmtCond, Exprs: []expr.Any{&expr.Verdict{Kind: expr.VerdictJump, Chain: f.conditional.Name}}},
		// dnat ip to ip daddr . meta l4proto . th dport map @hostip_ports
		{Comment: cmtHostIP, Exprs: []expr.Any{
			&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseNetworkHeader, Offset: f.dstOff(), Len: f.addrLen()},
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: after},
			&expr.Payload{DestRegister: after + 1, Base: expr.PayloadBaseTransportHeader, Offset: thDport, Len: 2},
			&expr.Lookup{SourceRegister: reg1, DestRegister: reg1, IsDestRegSet: true, SetName: f.hostIPPorts.Name},
			&expr.NAT{Type: expr.NATTypeDestNAT, Family: f.nfproto(), RegAddrMin: reg1, RegProtoMin: after, Specified: true},
		}},
		// dnat ip to meta l4proto . th dport map @ports
		{Comment: cmtAny, Exprs: []expr.Any{
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg1},
			&expr.Payload{DestRegister: r32 + 1, Base: expr.PayloadBaseTransportHeader, Offset: thDport, Len: 2},
			&expr.Lookup{SourceRegister: reg1, DestRegister: reg1, IsDestRegSet: true, SetName: f.ports.Name},
			&expr.NAT{Type: expr.NATTypeDestNAT, Family: f.nfproto(), RegAddrMin: reg1, RegProtoMin: after, Specified: true},
		}},
	}
}

// postroutingRules masquerade the connections we DNATed: hairpin, and
// (ip only) localhost clients.
func postroutingRules(f *family) []nft.StaticRule {
	rules := []nft.StaticRule{
		// ct status dnat ip daddr vmap @hairpins
		{Comment: cmtHairpin, Exprs: slices.Concat(ctStatusDNAT(true), []expr.Any{
			&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseNetworkHeader, Offset: f.dstOff(), Len: f.addrLen()},
			&expr.Lookup{SourceRegister: reg1, DestRegister: 0, IsDestRegSet: true, SetName: f.hairpins.Name},
		})},
	}
	if f.localhost != nil {
		// ct status dnat ip saddr 127.0.0.0/8 ip daddr @localhost masquerade
		rules = append(rules, nft.StaticRule{Comment: cmtLocalhost, Exprs: slices.Concat(ctStatusDNAT(true), []expr.Any{
			&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseNetworkHeader, Offset: ip4Src, Len: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{127}},
			&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseNetworkHeader, Offset: ip4Dst, Len: 4},
			&expr.Lookup{SourceRegister: reg1, SetName: f.localhost.Name},
			&expr.Masq{},
		})})
	}
	return rules
}

// guardRule is the input chain's (ip only), kube-proxy's guard for
// CVE-2020-8558:
//
//	iifname != "lo" ip daddr 127.0.0.0/8 ip saddr != 127.0.0.0/8
//	  ct state != { established, related } ct status != dnat drop
func guardRule() nft.StaticRule {
	return nft.StaticRule{Comment: cmtGuard, Exprs: slices.Concat(
		[]expr.Any{
			&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: reg1},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: reg1, Data: nft.IfnameKey("lo")},
			&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseNetworkHeader, Offset: ip4Dst, Len: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{127}},
			&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseNetworkHeader, Offset: ip4Src, Len: 1},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: reg1, Data: []byte{127}},
			&expr.Ct{Register: reg1, Key: expr.CtKeySTATE},
			&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4,
				Mask: binaryutil.NativeEndian.PutUint32(ctStateEstablished | ctStateRelated), Xor: make([]byte, 4)},
			&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: make([]byte, 4)},
		},
		ctStatusDNAT(false),
		[]expr.Any{&expr.Verdict{Kind: expr.VerdictDrop}},
	)}
}

// hairpinRules are the rule of the hairpin chain of prefix length bits:
// masquerade when the source, masked to bits, is the subnet of the
// destination container (the pair is in hairpin_local). Chain hairpin_0
// is masqAll's: every source masks to the zero address, so its element
// (address . 0.0.0.0) masquerades any client of the address.
func hairpinRules(f *family, bits int) []nft.StaticRule {
	n := f.addrLen()
	mask := nft.PrefixMask(bits, int(n))
	after := f.afterAddr()
	if f.v6 {
		after = unix.NFT_REG_2
	}
	ip := "ip"
	if f.v6 {
		ip = "ip6"
	}
	what := fmt.Sprintf("from the /%d subnet", bits)
	if bits == 0 {
		what = "from any source (masqAll)"
	}
	// ip daddr . ip saddr & <mask> @hairpin_local masquerade
	return []nft.StaticRule{{Comment: fmt.Sprintf("nftcni portmap v2: hairpin %s (%s)", what, ip), Exprs: []expr.Any{
		&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseNetworkHeader, Offset: f.dstOff(), Len: n},
		&expr.Payload{DestRegister: after, Base: expr.PayloadBaseNetworkHeader, Offset: f.srcOff(), Len: n},
		&expr.Bitwise{SourceRegister: after, DestRegister: after, Len: n, Mask: mask, Xor: make([]byte, n)},
		&expr.Lookup{SourceRegister: reg1, SetName: f.hairpinLocal.Name},
		&expr.Masq{},
	}}}
}

// loopbackOnlyFromHost keeps packets to a loopback address that arrive
// from an interface out of the mappings, wildcard and host-IP ones alike:
//
//	ip daddr 127.0.0.0/8 return    (ip6 daddr ::1 return)
//
// A mapping whose hostIP is 127.0.0.1 is meant for this host's own
// clients. Without this rule, a neighbour that routes 127.0.0.0/8 to us
// (CVE-2020-8558) has its packets translated here, before the routing
// decision that would have dropped them as martians, and forwarded to the
// container. Which traffic "comes from this host" is decided by the hook,
// not by a match: the host's own packets are translated in the output
// hook, which sees nothing else, and never reach prerouting as new
// connections (looped back through lo they belong to a connection
// already). Rejected alternatives: `fib saddr type local` trusts the
// source address, which the neighbour chooses (127.0.0.1 or one of our
// addresses; reverse-path filtering only runs after prerouting); `iif lo`
// would be a condition on packets prerouting never translates anyway.
//
// For IPv6 the kernel itself drops packets to ::1 that arrive on any
// interface but lo before any hook (RFC 4291 2.5.3); the rule covers the
// exception it makes for l3mdev (VRF) devices and says the same thing.
func loopbackOnlyFromHost(f *family) nft.StaticRule {
	var ex []expr.Any
	if f.v6 {
		ex = []expr.Any{
			&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseNetworkHeader, Offset: ip6Dst, Len: 16},
			&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: netip.IPv6Loopback().AsSlice()},
		}
	} else {
		ex = []expr.Any{
			&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseNetworkHeader, Offset: ip4Dst, Len: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{127}},
		}
	}
	return nft.StaticRule{Comment: cmtLoopback, Exprs: append(ex, &expr.Verdict{Kind: expr.VerdictReturn})}
}

// ctStatusDNAT matches connections that were (or were not) destination
// NATed: `ct status dnat` / `ct status != dnat`.
func ctStatusDNAT(was bool) []expr.Any {
	op := expr.CmpOpNeq
	if !was {
		op = expr.CmpOpEq
	}
	return []expr.Any{
		&expr.Ct{Register: reg1, Key: expr.CtKeySTATUS},
		&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(ipsDstNAT), Xor: make([]byte, 4)},
		&expr.Cmp{Op: op, Register: reg1, Data: make([]byte, 4)},
	}
}

// CondField is what a Condition tests.
type CondField int

const (
	SrcAddr  CondField = iota // ip saddr / -s
	DstAddr                   // ip daddr / -d
	InIface                   // iifname / -i
	OutIface                  // oifname / -o
)

// Condition is one term of the supported conditionsV4/V6 subset: an
// address prefix or an interface name, optionally negated.
type Condition struct {
	Field  CondField
	Negate bool
	Prefix netip.Prefix // SrcAddr, DstAddr
	Name   string       // InIface, OutIface
}

// String prints c in nft syntax.
func (c Condition) String() string {
	op := ""
	if c.Negate {
		op = "!= "
	}
	switch c.Field {
	case SrcAddr, DstAddr:
		kw := "ip"
		if c.Prefix.Addr().Is6() {
			kw = "ip6"
		}
		f := "saddr"
		if c.Field == DstAddr {
			f = "daddr"
		}
		return fmt.Sprintf("%s %s %s%s", kw, f, op, c.Prefix)
	case InIface:
		return fmt.Sprintf("iifname %s%q", op, c.Name)
	}
	return fmt.Sprintf("oifname %s%q", op, c.Name)
}

func condExprs(f *family, c Condition) ([]expr.Any, error) {
	op := expr.CmpOpEq
	if c.Negate {
		op = expr.CmpOpNeq
	}
	switch c.Field {
	case SrcAddr, DstAddr:
		p := c.Prefix.Masked()
		if p.Addr().Is6() != f.v6 {
			return nil, fmt.Errorf("condition %q is not of this family", c)
		}
		off := f.srcOff()
		if c.Field == DstAddr {
			off = f.dstOff()
		}
		load := &expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: f.addrLen()}
		if p.Bits() == p.Addr().BitLen() {
			return []expr.Any{load, &expr.Cmp{Op: op, Register: reg1, Data: p.Addr().AsSlice()}}, nil
		}
		mask := make([]byte, f.addrLen())
		for i := range p.Bits() {
			mask[i/8] |= 0x80 >> (i % 8)
		}
		return []expr.Any{
			load,
			&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: f.addrLen(), Mask: mask, Xor: make([]byte, f.addrLen())},
			&expr.Cmp{Op: op, Register: reg1, Data: p.Addr().AsSlice()},
		}, nil
	case InIface, OutIface:
		key := expr.MetaKeyIIFNAME
		if c.Field == OutIface {
			key = expr.MetaKeyOIFNAME
		}
		return []expr.Any{
			&expr.Meta{Key: key, Register: reg1},
			&expr.Cmp{Op: op, Register: reg1, Data: nft.IfnameKey(c.Name)},
		}, nil
	}
	return nil, fmt.Errorf("unknown condition field %d", c.Field)
}

// conditionalRule is m as a rule of the conditional chain:
//
//	<conditions> [ip daddr <hostIP>] meta l4proto <proto> th dport <hostPort> dnat ip to <addr>:<port>
func conditionalRule(f *family, conds []Condition, m Mapping) (*nftables.Rule, error) {
	var ex []expr.Any
	for _, c := range conds {
		e, err := condExprs(f, c)
		if err != nil {
			return nil, err
		}
		ex = append(ex, e...)
	}
	if m.HostIP.IsValid() {
		ex = append(ex,
			&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseNetworkHeader, Offset: f.dstOff(), Len: f.addrLen()},
			&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: m.HostIP.Unmap().AsSlice()})
	}
	ex = append(ex,
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{m.Proto}},
		&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseTransportHeader, Offset: thDport, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: binary.BigEndian.AppendUint16(nil, m.HostPort)},
		&expr.Immediate{Register: reg1, Data: m.Target.Addr().Unmap().AsSlice()},
		&expr.Immediate{Register: unix.NFT_REG_2, Data: binary.BigEndian.AppendUint16(nil, m.Target.Port())},
		&expr.NAT{Type: expr.NATTypeDestNAT, Family: f.nfproto(), RegAddrMin: reg1, RegProtoMin: unix.NFT_REG_2, Specified: true},
	)
	return &nftables.Rule{Table: f.table, Chain: f.conditional, Exprs: ex}, nil
}
