package reference

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/xt"
	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/nft"
	"github.com/nftcni/nftcni/nft/xtables"
)

// The reference's rules as the programs it runs would encode them:
// iptables-nft for its iptables backends (iptRule), nft for its nftables
// backends and the spoof check (the functions below iptRule). Handing an
// attachment back writes them (create.go).
//
// iptables-nft's encoding matters to the byte: the reference's DEL and
// CHECK find its rules with `iptables -D` and `iptables -C`, which read
// every rule of the chain back into iptables' own terms and compare those
// with the rule given on the command line. A rule written any other way
// would be a rule those commands do not find. encode_test.go compares each
// kind of rule with what iptables-nft itself writes, as the kernel returns
// both. nft's own rules are found by their comments only (the reference
// lists them with `nft -j` and goes by the comment), so they need only do
// what nft's would.

// iptRule is one iptables rule in the terms of the reference's commands.
// Its expressions come in the order iptables-nft writes them: the
// protocol and addresses (iptables' own header fields), the matches in the
// order of the reference's command lines, a counter, the target.
type iptRule struct {
	in, out  string       // -i, -o: "" none
	outNeg   bool         // ! -o
	proto    uint8        // -p: 0 none
	src, dst netip.Prefix // -s, -d: the zero Prefix none (a /0 is none too, as iptables omits it)
	srcNeg   bool         // ! -s
	dstNeg   bool         // ! -d
	dport    uint16       // -p tcp|udp --dport
	comment  string       // -m comment --comment
	mports   []uint16     // -m multiport --destination-ports
	dstLocal bool         // -m addrtype --dst-type LOCAL
	ctEstRel bool         // -m conntrack --ctstate RELATED,ESTABLISHED
	mark     uint32       // -m mark --mark mark/mark (0: none)

	// The target: one of them.
	verdict expr.VerdictKind // -j ACCEPT, DROP, RETURN; or with jump a chain
	jump    string
	dnat    netip.AddrPort // -j DNAT --to-destination
	masq    bool           // -j MASQUERADE
	setMark uint32         // -j MARK --set-xmark mark/mark
}

// String is the rule as iptables -S prints it, roughly: for messages and
// for telling planned rules apart.
func (r iptRule) String() string {
	var s []string
	if r.in != "" {
		s = append(s, "-i "+r.in)
	}
	if r.out != "" {
		s = append(s, neg(r.outNeg)+"-o "+r.out)
	}
	if r.proto != 0 {
		s = append(s, "-p "+nft.ProtoName(r.proto))
	}
	if p := r.src; p.IsValid() && p.Bits() > 0 {
		s = append(s, neg(r.srcNeg)+"-s "+p.String())
	}
	if p := r.dst; p.IsValid() && p.Bits() > 0 {
		s = append(s, neg(r.dstNeg)+"-d "+p.String())
	}
	if r.dport != 0 {
		s = append(s, fmt.Sprintf("--dport %d", r.dport))
	}
	if r.comment != "" {
		s = append(s, fmt.Sprintf("-m comment --comment %q", r.comment))
	}
	if len(r.mports) > 0 {
		ps := make([]string, len(r.mports))
		for i, p := range r.mports {
			ps[i] = fmt.Sprint(p)
		}
		s = append(s, "-m multiport --dports "+strings.Join(ps, ","))
	}
	if r.dstLocal {
		s = append(s, "-m addrtype --dst-type LOCAL")
	}
	if r.ctEstRel {
		s = append(s, "-m conntrack --ctstate RELATED,ESTABLISHED")
	}
	if r.mark != 0 {
		s = append(s, fmt.Sprintf("-m mark --mark %#x/%#x", r.mark, r.mark))
	}
	switch {
	case r.jump != "":
		s = append(s, "-j "+r.jump)
	case r.dnat.IsValid():
		s = append(s, "-j DNAT --to-destination "+r.dnat.String())
	case r.masq:
		s = append(s, "-j MASQUERADE")
	case r.setMark != 0:
		s = append(s, fmt.Sprintf("-j MARK --set-xmark %#x/%#x", r.setMark, r.setMark))
	default:
		s = append(s, "-j "+strings.ToUpper(verdictName(r.verdict)))
	}
	return strings.Join(s, " ")
}

func verdictName(k expr.VerdictKind) string {
	switch k {
	case expr.VerdictAccept:
		return "accept"
	case expr.VerdictDrop:
		return "drop"
	case expr.VerdictReturn:
		return "return"
	}
	return fmt.Sprint(k)
}

// The x_tables structures the reference's rules use, as iptables-nft
// sends them (their sizes rounded up to 8 bytes, XT_ALIGN).
const (
	xtCommentLen   = 256 // struct xt_comment_info
	xtMultiportLen = 48  // struct xt_multiport_v1
	xtAddrtypeLen  = 8   // struct xt_addrtype_info_v1
	xtMarkTgLen    = 8   // struct xt_mark_tginfo2
	xtNATRange2Len = 48  // struct nf_nat_range2
	xtNATRangeLen  = 40  // struct nf_nat_range (ip6tables' MASQUERADE)
	xtNATCompatLen = 24  // struct nf_nat_ipv4_multi_range_compat (iptables' MASQUERADE)

	xtMultiportDest   = 1      // XT_MULTIPORT_DESTINATION
	xtMultiportMax    = 15     // XT_MULTI_PORTS
	xtAddrtypeLocal   = 1 << 2 // XT_ADDRTYPE_LOCAL
	natRangeMapIPs    = 1      // NF_NAT_RANGE_MAP_IPS
	natRangeProtoSpec = 2      // NF_NAT_RANGE_PROTO_SPECIFIED
)

func xtMatch(name string, rev uint32, info []byte) *expr.Match {
	u := xt.Unknown(info)
	return &expr.Match{Name: name, Rev: rev, Info: &u}
}

func xtTarget(name string, rev uint32, info []byte) *expr.Target {
	u := xt.Unknown(info)
	return &expr.Target{Name: name, Rev: rev, Info: &u}
}

// addrOffsets are the source and destination offsets in fam's header.
func addrOffsets(fam nftables.TableFamily) (src, dst uint32) {
	if fam == nftables.TableFamilyIPv6 {
		return ip6Src, ip6Dst
	}
	return ip4Src, ip4Dst
}

// iptAddr is iptables-nft's comparison of an address field with p: it
// loads only the bytes the prefix covers when the prefix ends on a byte,
// and else the whole address with a mask.
func iptAddr(off uint32, p netip.Prefix, negate bool) []expr.Any {
	a := p.Masked().Addr().AsSlice()
	mask := net.CIDRMask(p.Bits(), len(a)*8)
	op := expr.CmpOpEq
	if negate {
		op = expr.CmpOpNeq
	}
	if p.Bits()%8 == 0 {
		n := uint32(p.Bits() / 8)
		return []expr.Any{
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: n},
			&expr.Cmp{Op: op, Register: 1, Data: a[:n]},
		}
	}
	n := uint32(len(a))
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: n},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: n, Mask: mask, Xor: make([]byte, n)},
		&expr.Cmp{Op: op, Register: 1, Data: a},
	}
}

// exprs is r as iptables-nft encodes it in a table of family fam.
func (r iptRule) exprs(fam nftables.TableFamily) []expr.Any {
	var out []expr.Any
	src, dst := addrOffsets(fam)
	// An interface name is compared with its NUL.
	if r.in != "" {
		out = append(out,
			&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: append([]byte(r.in), 0)})
	}
	if r.out != "" {
		op := expr.CmpOpEq
		if r.outNeg {
			op = expr.CmpOpNeq
		}
		out = append(out,
			&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1},
			&expr.Cmp{Op: op, Register: 1, Data: append([]byte(r.out), 0)})
	}
	if r.proto != 0 {
		out = append(out,
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{r.proto}})
	}
	if p := r.src; p.IsValid() && p.Bits() > 0 {
		out = append(out, iptAddr(src, p, r.srcNeg)...)
	}
	if p := r.dst; p.IsValid() && p.Bits() > 0 {
		out = append(out, iptAddr(dst, p, r.dstNeg)...)
	}
	if r.dport != 0 {
		out = append(out,
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binary.BigEndian.AppendUint16(nil, r.dport)})
	}
	if r.comment != "" {
		info := make([]byte, xtCommentLen)
		copy(info[:xtCommentLen-1], r.comment)
		out = append(out, xtMatch("comment", 0, info))
	}
	if len(r.mports) > 0 {
		info := make([]byte, xtMultiportLen)
		info[0], info[1] = xtMultiportDest, byte(len(r.mports))
		for i, p := range r.mports {
			binary.NativeEndian.PutUint16(info[2+2*i:], p)
		}
		out = append(out, xtMatch("multiport", 1, info))
	}
	if r.dstLocal {
		info := make([]byte, xtAddrtypeLen)
		binary.NativeEndian.PutUint16(info[2:], xtAddrtypeLocal)
		out = append(out, xtMatch("addrtype", 1, info))
	}
	if r.ctEstRel {
		out = append(out, xtables.Conntrack{States: xtables.StateEstablished | xtables.StateRelated}.Match())
	}
	if r.mark != 0 {
		m := binary.NativeEndian.AppendUint32(nil, r.mark)
		out = append(out,
			&expr.Meta{Key: expr.MetaKeyMARK, Register: 1},
			&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: m, Xor: make([]byte, 4)},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: m})
	}
	out = append(out, &expr.Counter{})
	switch {
	case r.jump != "":
		out = append(out, &expr.Verdict{Kind: expr.VerdictJump, Chain: r.jump})
	case r.dnat.IsValid():
		info := make([]byte, xtNATRange2Len)
		binary.NativeEndian.PutUint32(info, natRangeMapIPs|natRangeProtoSpec)
		a := r.dnat.Addr().AsSlice()
		copy(info[4:], a)
		copy(info[20:], a)
		binary.BigEndian.PutUint16(info[36:], r.dnat.Port())
		binary.BigEndian.PutUint16(info[38:], r.dnat.Port())
		out = append(out, xtTarget("DNAT", 2, info))
	case r.masq && fam == nftables.TableFamilyIPv6:
		out = append(out, xtTarget("MASQUERADE", 0, make([]byte, xtNATRangeLen)))
	case r.masq:
		info := make([]byte, xtNATCompatLen)
		binary.NativeEndian.PutUint32(info, 1) // rangesize
		out = append(out, xtTarget("MASQUERADE", 0, info))
	case r.setMark != 0:
		info := make([]byte, xtMarkTgLen)
		binary.NativeEndian.PutUint32(info, r.setMark)
		binary.NativeEndian.PutUint32(info[4:], r.setMark)
		out = append(out, xtTarget("MARK", 2, info))
	default:
		out = append(out, &expr.Verdict{Kind: r.verdict})
	}
	return out
}

// needsProto reports whether r has an x_tables match that wants the
// rule's protocol from NFTA_RULE_COMPAT (multiport refuses any rule
// without TCP, UDP, SCTP or DCCP there).
func (r iptRule) needsProto() bool { return len(r.mports) > 0 }

// nftRule is one rule of the reference's nftables backends or spoof
// check, with its comment.
type nftRule struct {
	exprs   []expr.Any
	comment string
	text    string // as nft lists it, for messages and for telling planned rules apart
}

// nfproto guards an inet-family rule on the address family of a.
func nfproto(a netip.Addr) []expr.Any {
	p := byte(unix.NFPROTO_IPV6)
	if a.Is4() {
		p = unix.NFPROTO_IPV4
	}
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{p}},
	}
}

// nftAddr is nft's comparison of a's family's source or destination
// address with p (a whole address, or a prefix with a mask).
func nftAddr(src bool, p netip.Prefix, op expr.CmpOp) []expr.Any {
	off := uint32(ip4Dst)
	switch {
	case p.Addr().Is4() && src:
		off = ip4Src
	case p.Addr().Is6() && src:
		off = ip6Src
	case p.Addr().Is6():
		off = ip6Dst
	}
	a := p.Masked().Addr().AsSlice()
	n := uint32(len(a))
	out := []expr.Any{&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: n}}
	if p.Bits() < len(a)*8 {
		out = append(out, &expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: n, Mask: net.CIDRMask(p.Bits(), len(a)*8), Xor: make([]byte, n)})
	}
	return append(out, &expr.Cmp{Op: op, Register: 1, Data: a})
}

func ipName(a netip.Addr) string {
	if a.Is4() {
		return "ip"
	}
	return "ip6"
}

// masqRule is the nftables masquerade's rule for address addr of subnet
// net: `ip saddr A ip daddr != N masquerade` (inet table: guarded by the
// family).
func masqRule(addr netip.Addr, net netip.Prefix, comment string) nftRule {
	e := nfproto(addr)
	e = append(e, nftAddr(true, netip.PrefixFrom(addr, addr.BitLen()), expr.CmpOpEq)...)
	e = append(e, nftAddr(false, net, expr.CmpOpNeq)...)
	e = append(e, &expr.Masq{})
	ip := ipName(addr)
	return nftRule{exprs: e, comment: comment, text: fmt.Sprintf("%s saddr %s %s daddr != %s masquerade", ip, addr, ip, net)}
}

// masqPostrouting are the rules of the nftables masquerade's postrouting
// chain: multicast returns, everything else goes to masq_checks.
func masqPostrouting() []nftRule {
	var out []nftRule
	for _, mc := range []netip.Prefix{multicast(netip.IPv4Unspecified()), multicast(netip.IPv6Unspecified())} {
		e := nfproto(mc.Addr())
		e = append(e, nftAddr(false, mc, expr.CmpOpEq)...)
		e = append(e, &expr.Verdict{Kind: expr.VerdictReturn})
		out = append(out, nftRule{exprs: e, text: fmt.Sprintf("%s daddr %s return", ipName(mc.Addr()), mc)})
	}
	return append(out, nftRule{exprs: []expr.Any{&expr.Verdict{Kind: expr.VerdictGoto, Chain: nftMasqChain}}, text: "goto " + nftMasqChain})
}

// dnatRule is portmap's nftables DNAT of m to `to`: `[ip daddr H] tcp
// dport P dnat to A:P`.
func dnatRule(fam nftables.TableFamily, m Mapping, to netip.AddrPort, comment string) nftRule {
	var e []expr.Any
	text := ""
	if m.HostIP.IsValid() && !m.HostIP.IsUnspecified() {
		h := m.HostIP.Unmap()
		e = append(e, nftAddr(false, netip.PrefixFrom(h, h.BitLen()), expr.CmpOpEq)...)
		text = fmt.Sprintf("%s daddr %s ", ipName(h), h)
	}
	e = append(e,
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{m.Proto}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binary.BigEndian.AppendUint16(nil, m.HostPort)},
		&expr.Immediate{Register: 1, Data: to.Addr().AsSlice()},
		&expr.Immediate{Register: 2, Data: binary.BigEndian.AppendUint16(nil, to.Port())},
		&expr.NAT{Type: expr.NATTypeDestNAT, Family: uint32(fam), RegAddrMin: 1, RegProtoMin: 2, Specified: true},
	)
	return nftRule{exprs: e, comment: comment, text: text + fmt.Sprintf("%s dport %d dnat to %s", nft.ProtoName(m.Proto), m.HostPort, to)}
}

// hairpinRule is portmap's nftables masquerade of connections from src
// to the container's addr: `ip saddr S ip daddr A masquerade`.
func hairpinRule(src netip.Prefix, addr netip.Addr, comment string) nftRule {
	var e []expr.Any
	if src.Bits() > 0 {
		e = append(e, nftAddr(true, src, expr.CmpOpEq)...)
	}
	e = append(e, nftAddr(false, netip.PrefixFrom(addr, addr.BitLen()), expr.CmpOpEq)...)
	e = append(e, &expr.Masq{})
	s := src.String()
	if src.IsSingleIP() {
		s = src.Addr().String()
	}
	ip := ipName(addr)
	return nftRule{exprs: e, comment: comment, text: fmt.Sprintf("%s saddr %s %s daddr %s masquerade", ip, s, ip, addr)}
}

// localJump is `fib daddr type local jump <to>`.
func localJump(to string) nftRule {
	return nftRule{exprs: []expr.Any{
		&expr.Fib{Register: 1, FlagDADDR: true, ResultADDRTYPE: true},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binary.NativeEndian.AppendUint32(nil, unix.RTN_LOCAL)},
		&expr.Verdict{Kind: expr.VerdictJump, Chain: to},
	}, text: "fib daddr type local jump " + to}
}

func jumpRule(to, comment string) nftRule {
	return nftRule{exprs: []expr.Any{&expr.Verdict{Kind: expr.VerdictJump, Chain: to}}, comment: comment, text: "jump " + to}
}

// spoofRules are the spoof check's rules: the PREROUTING jump for the
// host interface, the iface chain's jump to the mac chain, the mac
// chain's return for mac and its drop.
func spoofRules(hostIf string, mac net.HardwareAddr, iface, macChain, comment string) (pre, ifc nftRule, macs []nftRule) {
	pre = nftRule{exprs: []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: nft.IfnameKey(hostIf)},
		&expr.Verdict{Kind: expr.VerdictJump, Chain: iface},
	}, comment: comment, text: fmt.Sprintf("iifname %q jump %s", hostIf, iface)}
	ifc = jumpRule(macChain, comment)
	macs = []nftRule{
		{exprs: []expr.Any{
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseLLHeader, Offset: 6, Len: 6},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: mac},
			&expr.Verdict{Kind: expr.VerdictReturn},
		}, comment: comment, text: "ether saddr " + mac.String() + " return"},
		{exprs: []expr.Any{&expr.Verdict{Kind: expr.VerdictDrop}}, comment: comment, text: "drop"},
	}
	return pre, ifc, macs
}
