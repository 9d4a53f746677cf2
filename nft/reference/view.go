package reference

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/bits"
	"net/netip"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/xt"
	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/nft"
	"github.com/nftcni/nftcni/nft/xtables"
)

// view is what one rule says, in the terms the reference's rules are
// written in: `-s`/`-d` prefixes, `-p` with `--dport`, `--ctstate
// RELATED,ESTABLISHED`, and what it does (accept, jump, DNAT,
// masquerade). It is read from the rule's expressions whether iptables-nft
// spelled them (payload comparisons, x_tables matches and targets) or nft
// did (native ct, nat and masq): the reference writes both.
//
// other counts what the rule does besides: a match on anything else, an
// expression not understood. A rule is taken for one of the reference's by
// its jump target or comment where it has one; the firewall's accepts have
// neither, and are recognised only when other is 0.
type view struct {
	nft.Rule
	src, dst addrMatch
	proto    uint8  // meta l4proto ==, 0: none
	dport    uint16 // th dport ==, 0: none
	ctEstRel bool   // ct state related,established
	verdict  expr.VerdictKind
	hasVerd  bool
	jump     string // jump or goto target
	dnat     netip.AddrPort
	masq     bool
	mports   []uint16 // -m multiport --destination-ports
	in, out  ifMatch  // -i, -o
	other    int
}

// ifMatch is a comparison of the input or output interface's name.
type ifMatch struct {
	name string
	neq  bool
}

func (m ifMatch) set() bool { return m.name != "" }

// addrMatch is a comparison of the source or destination address with a
// prefix.
type addrMatch struct {
	p   netip.Prefix
	neq bool
}

func (m addrMatch) set() bool { return m.p.IsValid() }

func (m addrMatch) String() string {
	if !m.set() {
		return ""
	}
	if m.neq {
		return "! " + m.p.String()
	}
	return m.p.String()
}

// accepts reports whether v ends in accept.
func (v view) accepts() bool { return v.hasVerd && v.verdict == expr.VerdictAccept }

// Offsets in the IPv4 and IPv6 headers.
const (
	ip4Src = 12
	ip4Dst = 16
	ip6Src = 8
	ip6Dst = 24
)

// reg is what a register holds while a rule is read.
type reg struct {
	kind   regKind
	off, n uint32
	mask   []byte
	data   []byte // immediate
}

type regKind int

const (
	regNone    regKind = iota
	regNet             // network header payload
	regTh              // transport header payload
	regL4              // meta l4proto
	regNFProto         // meta nfproto
	regCtState         // ct state
	regIIFName         // meta iifname
	regOIFName         // meta oifname
	regImm             // immediate data
	regOther
)

// readView reads r, a rule of a table of family fam.
func readView(fam nftables.TableFamily, r nft.RuleExprs) view {
	v := view{Rule: r.Rule, other: r.Unknown}
	var nfproto byte
	switch fam {
	case nftables.TableFamilyIPv4:
		nfproto = unix.NFPROTO_IPV4
	case nftables.TableFamilyIPv6:
		nfproto = unix.NFPROTO_IPV6
	}
	regs := map[uint32]*reg{}
	for _, e := range r.Exprs {
		switch e := e.(type) {
		case *expr.Payload:
			switch e.Base {
			case expr.PayloadBaseNetworkHeader:
				regs[e.DestRegister] = &reg{kind: regNet, off: e.Offset, n: e.Len}
			case expr.PayloadBaseTransportHeader:
				regs[e.DestRegister] = &reg{kind: regTh, off: e.Offset, n: e.Len}
			default:
				regs[e.DestRegister] = &reg{kind: regOther}
			}
		case *expr.Meta:
			switch {
			case e.SourceRegister:
				v.other++
			case e.Key == expr.MetaKeyL4PROTO:
				regs[e.Register] = &reg{kind: regL4}
			case e.Key == expr.MetaKeyNFPROTO:
				regs[e.Register] = &reg{kind: regNFProto}
			case e.Key == expr.MetaKeyIIFNAME:
				regs[e.Register] = &reg{kind: regIIFName}
			case e.Key == expr.MetaKeyOIFNAME:
				regs[e.Register] = &reg{kind: regOIFName}
			default:
				regs[e.Register] = &reg{kind: regOther}
			}
		case *expr.Ct:
			if e.Key == expr.CtKeySTATE && !e.SourceRegister {
				regs[e.Register] = &reg{kind: regCtState}
			} else if !e.SourceRegister {
				regs[e.Register] = &reg{kind: regOther}
			} else {
				v.other++
			}
		case *expr.Bitwise:
			if g := regs[e.SourceRegister]; g != nil && e.SourceRegister == e.DestRegister && isZero(e.Xor) {
				g.mask = e.Mask
			} else {
				regs[e.DestRegister] = &reg{kind: regOther}
			}
		case *expr.Immediate:
			regs[e.Register] = &reg{kind: regImm, data: e.Data}
		case *expr.Cmp:
			g := regs[e.Register]
			if g == nil {
				v.other++
				continue
			}
			if !v.cmp(g, e, &nfproto) {
				v.other++
			}
		case *expr.Counter:
		case *expr.Verdict:
			v.hasVerd, v.verdict = true, e.Kind
			if e.Kind == expr.VerdictJump || e.Kind == expr.VerdictGoto {
				v.jump = e.Chain
			}
		case *expr.NAT:
			a, p := regs[e.RegAddrMin], regs[e.RegProtoMin]
			if e.Type != expr.NATTypeDestNAT || a == nil || a.kind != regImm {
				v.other++
				continue
			}
			addr, ok := netip.AddrFromSlice(a.data)
			if !ok {
				v.other++
				continue
			}
			var port uint16
			if p != nil && p.kind == regImm && len(p.data) == 2 {
				port = binary.BigEndian.Uint16(p.data)
			}
			v.dnat = netip.AddrPortFrom(addr, port)
		case *expr.Masq:
			v.masq = true
		case *expr.Match:
			if !v.match(e) {
				v.other++
			}
		case *expr.Target:
			if !v.target(e) {
				v.other++
			}
		default:
			v.other++
		}
	}
	return v
}

// cmp applies a comparison of register g to v; false when it is not one
// of the matches v knows.
func (v *view) cmp(g *reg, e *expr.Cmp, nfproto *byte) bool {
	switch g.kind {
	case regNFProto:
		if e.Op != expr.CmpOpEq || len(e.Data) != 1 {
			return false
		}
		*nfproto = e.Data[0]
		return true
	case regL4:
		if e.Op != expr.CmpOpEq || len(e.Data) != 1 || v.proto != 0 {
			return false
		}
		v.proto = e.Data[0]
		return true
	case regTh:
		if g.off != 2 || g.n != 2 || e.Op != expr.CmpOpEq || len(e.Data) != 2 || g.mask != nil || v.dport != 0 {
			return false
		}
		v.dport = binary.BigEndian.Uint16(e.Data)
		return true
	case regIIFName, regOIFName:
		// iptables-nft compares the name with its NUL (-i br0), nft
		// the whole 16 bytes; a prefix match (-i br+) is not read.
		m := &v.in
		if g.kind == regOIFName {
			m = &v.out
		}
		i := bytes.IndexByte(e.Data, 0)
		if m.set() || i <= 0 || !isZero(e.Data[i:]) || g.mask != nil || (e.Op != expr.CmpOpEq && e.Op != expr.CmpOpNeq) {
			return false
		}
		*m = ifMatch{name: string(e.Data[:i]), neq: e.Op == expr.CmpOpNeq}
		return true
	case regCtState:
		want := make([]byte, 4)
		binary.NativeEndian.PutUint32(want, expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED)
		if e.Op == expr.CmpOpNeq && isZero(e.Data) && bytes.Equal(g.mask, want) {
			v.ctEstRel = true
			return true
		}
		return false
	case regNet:
		if e.Op != expr.CmpOpEq && e.Op != expr.CmpOpNeq {
			return false
		}
		m, ok := prefixOf(*nfproto, g, e.Data)
		if !ok {
			return false
		}
		m.neq = e.Op == expr.CmpOpNeq
		var dst *addrMatch
		switch {
		case *nfproto == unix.NFPROTO_IPV4 && g.off == ip4Src, *nfproto == unix.NFPROTO_IPV6 && g.off == ip6Src:
			dst = &v.src
		case *nfproto == unix.NFPROTO_IPV4 && g.off == ip4Dst, *nfproto == unix.NFPROTO_IPV6 && g.off == ip6Dst:
			dst = &v.dst
		default:
			return false
		}
		if dst.set() {
			return false
		}
		*dst = m
		return true
	}
	return false
}

// prefixOf reads a comparison of g, a network header load at an address
// field, with data as a prefix: iptables-nft and nft load only the bytes
// a prefix covers and mask the last one when it is partial.
func prefixOf(nfproto byte, g *reg, data []byte) (addrMatch, bool) {
	full := 4
	base := uint32(ip4Src)
	if nfproto == unix.NFPROTO_IPV6 {
		full, base = 16, ip6Src
	}
	if nfproto != unix.NFPROTO_IPV4 && nfproto != unix.NFPROTO_IPV6 {
		return addrMatch{}, false
	}
	if g.off < base || (g.off-base)%uint32(full) != 0 || g.n == 0 || int(g.n) > full || len(data) != int(g.n) {
		return addrMatch{}, false
	}
	b := make([]byte, full)
	copy(b, data)
	nbits := int(g.n) * 8
	if g.mask != nil {
		if len(g.mask) != int(g.n) {
			return addrMatch{}, false
		}
		nbits = 0
		for i, m := range g.mask {
			if bits.LeadingZeros8(^m) != bits.OnesCount8(m) || (m != 0xff && i < len(g.mask)-1 && !isZero(g.mask[i+1:])) {
				return addrMatch{}, false // not a prefix mask
			}
			nbits += bits.OnesCount8(m)
		}
	}
	a, _ := netip.AddrFromSlice(b)
	p, err := a.Prefix(nbits)
	if err != nil || p.Addr() != a {
		return addrMatch{}, false
	}
	return addrMatch{p: p}, true
}

// match reads an x_tables match: conntrack's state (as iptables-nft
// spells --ctstate), tcp/udp's destination port (older iptables-nft),
// comments (read as the rule's comment already), and the multiport and
// addrtype matches of the reference's entry rules, which say nothing that
// tells one attachment from another.
func (v *view) match(m *expr.Match) bool {
	switch info := m.Info.(type) {
	case *xt.ConntrackMtinfo1:
		return v.ctState(info.MatchFlags, info.InvertFlags, uint16(info.StateMask))
	case *xt.ConntrackMtinfo2:
		return v.ctState(info.MatchFlags, info.InvertFlags, info.StateMask)
	case *xt.ConntrackMtinfo3:
		return v.ctState(info.MatchFlags, info.InvertFlags, info.StateMask)
	case *xt.Tcp:
		return v.xtPorts(unix.IPPROTO_TCP, info.DstPorts, info.SrcPorts, info.InvFlags != 0 || info.FlagsMask != 0 || info.Option != 0)
	case *xt.Udp:
		return v.xtPorts(unix.IPPROTO_UDP, info.DstPorts, info.SrcPorts, info.InvFlags != 0)
	}
	switch m.Name {
	case "multiport":
		v.mports = multiportDests(m)
		return true
	case "comment", "addrtype":
		return true
	}
	return false
}

// multiportDests are the destination ports of a multiport match
// (revision 1, struct xt_multiport_v1: flags, count, ports in host byte
// order); nil for any other.
func multiportDests(m *expr.Match) []uint16 {
	u, ok := m.Info.(*xt.Unknown)
	if !ok || m.Rev != 1 || len(*u) < xtMultiportLen {
		return nil
	}
	b := []byte(*u)
	n := int(b[1])
	if b[0] != xtMultiportDest || n > xtMultiportMax {
		return nil
	}
	out := make([]uint16, n)
	for i := range out {
		out[i] = binary.NativeEndian.Uint16(b[2+2*i:])
	}
	return out
}

func (v *view) ctState(flags, invert, states uint16) bool {
	if flags != uint16(xt.ConntrackState) || invert != 0 || states != xtables.StateEstablished|xtables.StateRelated {
		return false
	}
	v.ctEstRel = true
	return true
}

func (v *view) xtPorts(proto uint8, dst, src [2]uint16, more bool) bool {
	if more || src != [2]uint16{0, 0xffff} || dst[0] != dst[1] || v.dport != 0 {
		return false
	}
	if v.proto != 0 && v.proto != proto {
		return false
	}
	v.dport = dst[0]
	return true
}

// target reads an x_tables target: DNAT (rev 0 for IPv4, 1 and 2) and
// MASQUERADE.
func (v *view) target(t *expr.Target) bool {
	switch t.Name {
	case "MASQUERADE":
		v.masq = true
		return true
	case "DNAT":
	default:
		return false
	}
	var ip []byte
	var port uint16
	var flags uint
	switch info := t.Info.(type) {
	case *xt.NatRange2:
		ip, port, flags = info.MinIP, info.MinPort, info.Flags
	case *xt.NatRange:
		ip, port, flags = info.MinIP, info.MinPort, info.Flags
	case *xt.NatIPv4MultiRangeCompat:
		if len(*info) != 1 {
			return false
		}
		r := (*info)[0]
		ip, port, flags = r.MinIP, r.MinPort, r.Flags
	default:
		return false
	}
	if flags&uint(xt.NatRangeMapIPs) == 0 {
		return false
	}
	a, ok := netip.AddrFromSlice(ip)
	if !ok {
		return false
	}
	if flags&uint(xt.NatRangeProtoSpecified) == 0 {
		port = 0
	}
	v.dnat = netip.AddrPortFrom(a.Unmap(), port)
	return true
}

func isZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// String is the rule as iptables would list it, roughly: for messages.
func (v view) String() string {
	var s []string
	if v.in.set() {
		s = append(s, neg(v.in.neq)+"-i "+v.in.name)
	}
	if v.out.set() {
		s = append(s, neg(v.out.neq)+"-o "+v.out.name)
	}
	if v.src.set() {
		s = append(s, neg(v.src.neq)+"-s "+v.src.p.String())
	}
	if v.dst.set() {
		s = append(s, neg(v.dst.neq)+"-d "+v.dst.p.String())
	}
	if v.proto != 0 {
		s = append(s, "-p "+nft.ProtoName(v.proto))
	}
	if v.dport != 0 {
		s = append(s, fmt.Sprintf("--dport %d", v.dport))
	}
	if v.ctEstRel {
		s = append(s, "--ctstate RELATED,ESTABLISHED")
	}
	switch {
	case v.jump != "":
		s = append(s, "-j "+v.jump)
	case v.dnat.IsValid():
		s = append(s, "-j DNAT --to-destination "+v.dnat.String())
	case v.masq:
		s = append(s, "-j MASQUERADE")
	case v.accepts():
		s = append(s, "-j ACCEPT")
	}
	return strings.Join(s, " ")
}

func neg(b bool) string {
	if b {
		return "! "
	}
	return ""
}
