package reference

import (
	"encoding/binary"
	"net"
	"net/netip"
	"testing"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/xt"
	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/nft"
	"github.com/nftcni/nftcni/nft/xtables"
)

func payload(base expr.PayloadBase, off, n uint32) *expr.Payload {
	return &expr.Payload{DestRegister: 1, Base: base, Offset: off, Len: n}
}

func eq(b ...byte) *expr.Cmp  { return &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: b} }
func neq(b ...byte) *expr.Cmp { return &expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: b} }

func ctMask(bits uint32) []byte {
	b := make([]byte, 4)
	binary.NativeEndian.PutUint32(b, bits)
	return b
}

// readView reads the spellings iptables-nft and nft use for the
// reference's rules, the ones Debian's iptables 1.8.9 writes (the live
// tests) and others: native ct state, an x_tables tcp match, DNAT
// revision 0, a partial-byte prefix.
func TestReadView(t *testing.T) {
	t.Parallel()
	net4 := expr.PayloadBaseNetworkHeader
	th := expr.PayloadBaseTransportHeader
	a := netip.MustParseAddr("10.95.0.2")
	for _, c := range []struct {
		name  string
		fam   nftables.TableFamily
		exprs []expr.Any
		want  string
		check func(v view) bool
	}{
		{"iptables-nft -s A -j ACCEPT", nftables.TableFamilyIPv4,
			[]expr.Any{payload(net4, 12, 4), eq(10, 95, 0, 2), &expr.Counter{}, &expr.Verdict{Kind: expr.VerdictAccept}},
			"-s 10.95.0.2/32 -j ACCEPT", func(v view) bool { return isFrom(v, a) && !isRepliesTo(v, a) }},
		{"iptables-nft -d A --ctstate (x_tables)", nftables.TableFamilyIPv4,
			[]expr.Any{payload(net4, 16, 4), eq(10, 95, 0, 2), &expr.Match{Name: "conntrack", Rev: 3, Info: &xt.ConntrackMtinfo3{ConntrackMtinfo2: xt.ConntrackMtinfo2{
				ConntrackMtinfoBase: xt.ConntrackMtinfoBase{MatchFlags: uint16(xt.ConntrackState)}, StateMask: xtables.StateEstablished | xtables.StateRelated}}},
				&expr.Counter{}, &expr.Verdict{Kind: expr.VerdictAccept}},
			"-d 10.95.0.2/32 --ctstate RELATED,ESTABLISHED -j ACCEPT", func(v view) bool { return isRepliesTo(v, a) }},
		{"nft ct state related,established", nftables.TableFamilyIPv4,
			[]expr.Any{payload(net4, 16, 4), eq(10, 95, 0, 2), &expr.Ct{Key: expr.CtKeySTATE, Register: 1},
				&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: ctMask(expr.CtStateBitESTABLISHED | expr.CtStateBitRELATED), Xor: make([]byte, 4)},
				neq(0, 0, 0, 0), &expr.Verdict{Kind: expr.VerdictAccept}},
			"-d 10.95.0.2/32 --ctstate RELATED,ESTABLISHED -j ACCEPT", func(v view) bool { return isRepliesTo(v, a) }},
		{"conntrack with another state is not the firewall's", nftables.TableFamilyIPv4,
			[]expr.Any{payload(net4, 16, 4), eq(10, 95, 0, 2), &expr.Match{Name: "conntrack", Rev: 3, Info: &xt.ConntrackMtinfo3{ConntrackMtinfo2: xt.ConntrackMtinfo2{
				ConntrackMtinfoBase: xt.ConntrackMtinfoBase{MatchFlags: uint16(xt.ConntrackState)}, StateMask: xtables.StateEstablished}}},
				&expr.Verdict{Kind: expr.VerdictAccept}},
			"-d 10.95.0.2/32 -j ACCEPT", func(v view) bool { return !isRepliesTo(v, a) && v.other == 1 }},
		{"older iptables-nft: -p tcp -m tcp --dport, DNAT revision 0", nftables.TableFamilyIPv4,
			[]expr.Any{&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1}, eq(unix.IPPROTO_TCP),
				&expr.Match{Name: "tcp", Info: &xt.Tcp{SrcPorts: [2]uint16{0, 0xffff}, DstPorts: [2]uint16{8080, 8080}}},
				&expr.Target{Name: "DNAT", Info: &xt.NatIPv4MultiRangeCompat{{Flags: uint(xt.NatRangeMapIPs | xt.NatRangeProtoSpecified), MinIP: net.IP{10, 95, 0, 2}, MaxIP: net.IP{10, 95, 0, 2}, MinPort: 80, MaxPort: 80}}}},
			"-p tcp --dport 8080 -j DNAT --to-destination 10.95.0.2:80", nil},
		{"DNAT revision 2, IPv6", nftables.TableFamilyIPv6,
			[]expr.Any{&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1}, eq(unix.IPPROTO_UDP), payload(th, 2, 2), eq(0x1f, 0x90),
				&expr.Target{Name: "DNAT", Rev: 2, Info: &xt.NatRange2{NatRange: xt.NatRange{Flags: uint(xt.NatRangeMapIPs | xt.NatRangeProtoSpecified), MinIP: net.ParseIP("fd95::2"), MaxIP: net.ParseIP("fd95::2"), MinPort: 80, MaxPort: 80}}}},
			"-p udp --dport 8080 -j DNAT --to-destination [fd95::2]:80", nil},
		{"nft dnat to", nftables.TableFamilyIPv4,
			[]expr.Any{&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1}, eq(6), payload(th, 2, 2), eq(0x1f, 0x90),
				&expr.Immediate{Register: 1, Data: []byte{10, 95, 0, 2}}, &expr.Immediate{Register: 2, Data: []byte{0, 80}},
				&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1, RegProtoMin: 2}},
			"-p tcp --dport 8080 -j DNAT --to-destination 10.95.0.2:80", nil},
		{"a prefix on a byte boundary, negated, and masquerade", nftables.TableFamilyIPv4,
			[]expr.Any{payload(net4, 16, 3), neq(10, 95, 0), &expr.Target{Name: "MASQUERADE"}},
			"! -d 10.95.0.0/24 -j MASQUERADE", nil},
		{"a prefix with a mask", nftables.TableFamilyIPv4,
			[]expr.Any{payload(net4, 16, 4), &expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: []byte{240, 0, 0, 0}, Xor: make([]byte, 4)}, neq(224, 0, 0, 0), &expr.Masq{}},
			"! -d 224.0.0.0/4 -j MASQUERADE", nil},
		{"inet: the family comes from meta nfproto", nftables.TableFamilyINet,
			[]expr.Any{&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1}, eq(unix.NFPROTO_IPV6), payload(net4, 8, 16), eq(net.ParseIP("fd95::2")...), &expr.Masq{}},
			"-s fd95::2/128 -j MASQUERADE", nil},
		{"a jump", nftables.TableFamilyIPv4,
			[]expr.Any{payload(net4, 12, 4), eq(10, 95, 0, 2), &expr.Match{Name: "comment"}, &expr.Counter{}, &expr.Verdict{Kind: expr.VerdictJump, Chain: "CNI-x"}},
			"-s 10.95.0.2/32 -j CNI-x", func(v view) bool { return v.other == 0 && !isFrom(v, a) }},
		{"a match it does not know", nftables.TableFamilyIPv4,
			[]expr.Any{payload(net4, 12, 4), eq(10, 95, 0, 2), &expr.Match{Name: "mark"}, &expr.Verdict{Kind: expr.VerdictAccept}},
			"-s 10.95.0.2/32 -j ACCEPT", func(v view) bool { return v.other == 1 && !isFrom(v, a) }},
		{"a mask that is no prefix", nftables.TableFamilyIPv4,
			[]expr.Any{payload(net4, 12, 4), &expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: []byte{255, 0, 255, 0}, Xor: make([]byte, 4)}, eq(10, 0, 0, 0), &expr.Verdict{Kind: expr.VerdictAccept}},
			"-j ACCEPT", func(v view) bool { return v.other == 1 }},
	} {
		v := readView(c.fam, nft.RuleExprs{Exprs: c.exprs})
		if got := v.String(); got != c.want {
			t.Errorf("%s: read as %q, want %q", c.name, got, c.want)
		}
		if c.check != nil && !c.check(v) {
			t.Errorf("%s: %+v", c.name, v)
		}
	}
}

// Deletion order: rules before chains, each once; rules of a chain that
// goes are not deleted on their own.
func TestDeletionOrder(t *testing.T) {
	t.Parallel()
	ch := chain(nftables.TableFamilyIPv4, "nat", "CNI-x")
	post := chain(nftables.TableFamilyIPv4, "nat", "POSTROUTING")
	objs := deletionOrder([]Object{chainObject(Masq, ch), {Part: Masq, Chain: post, Handle: 5}, chainObject(Masq, ch), {Part: Masq, Chain: post, Handle: 5}})
	if len(objs) != 2 || objs[0].Handle != 5 || !objs[1].IsChain() {
		t.Errorf("deletionOrder: %v", objs)
	}
}

// stale keeps what a valid attachment owns: by container ID for the
// iptables objects (they name no interface), by instance hash for the
// nftables masquerade's.
func TestStale(t *testing.T) {
	t.Parallel()
	ch := chain(nftables.TableFamilyIPv4, "nat", "CNI-x")
	objs := []Object{
		{Part: Masq, Chain: ch, ContainerID: "c1"},
		{Part: Masq, Chain: ch, ContainerID: "c2"},
		{Part: Masq, Chain: ch, Handle: 3, ContainerID: "c1", IfName: "eth0", instance: nftMasqInstance("n", "eth0", "c1")},
		{Part: Masq, Chain: ch, Handle: 4, ContainerID: "c1", IfName: "net1", instance: nftMasqInstance("n", "net1", "c1")},
	}
	got := stale("n", objs, []Key{{ContainerID: "c1", IfName: "eth0"}})
	if len(got) != 2 || got[0].Handle != 4 || got[1].ContainerID != "c2" {
		t.Errorf("stale: %v", got)
	}
}
