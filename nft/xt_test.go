package nft

import (
	"bytes"
	"net"
	"net/netip"
	"testing"

	"github.com/google/nftables"
	"github.com/google/nftables/xt"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// The conntrack match info is what google/nftables' own encoding of struct
// xt_conntrack_mtinfo3 gives for the same options (the live tests of
// nft/foreign compare it with what the iptables program sends).
func TestXTConntrackInfo(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		x    XTConntrack
		fam  nftables.TableFamily
		want xt.ConntrackMtinfo3
	}{
		{"--ctstate RELATED,ESTABLISHED", XTConntrack{States: XTStateEstablished | XTStateRelated}, nftables.TableFamilyIPv4,
			xt.ConntrackMtinfo3{ConntrackMtinfo2: xt.ConntrackMtinfo2{
				ConntrackMtinfoBase: xt.ConntrackMtinfoBase{MatchFlags: uint16(xt.ConntrackState)},
				StateMask:           XTStateEstablished | XTStateRelated,
			}}},
		{"--ctstate DNAT --ctproto 6 --ctreplsrc 10.1.0.5 --ctreplsrcport 80",
			XTConntrack{States: XTStateDNAT, Proto: 6, ReplySrc: netip.MustParseAddr("10.1.0.5"), ReplySrcPort: 80}, nftables.TableFamilyIPv4,
			xt.ConntrackMtinfo3{
				ConntrackMtinfo2: xt.ConntrackMtinfo2{
					ConntrackMtinfoBase: xt.ConntrackMtinfoBase{
						ReplSrcAddr: net.IP{10, 1, 0, 5}, ReplSrcMask: net.CIDRMask(32, 32),
						L4Proto: 6, ReplSrcPort: 80,
						MatchFlags: uint16(xt.ConntrackState | xt.ConntrackProto | xt.ConntrackReplSrc | xt.ConntrackReplSrcPort),
					},
					StateMask: XTStateDNAT,
				},
				ReplSrcPortHigh: 80,
			}},
		{"--ctstate DNAT --ctproto 17 --ctreplsrc fd00::5 --ctreplsrcport 53",
			XTConntrack{States: XTStateDNAT, Proto: 17, ReplySrc: netip.MustParseAddr("fd00::5"), ReplySrcPort: 53}, nftables.TableFamilyIPv6,
			xt.ConntrackMtinfo3{
				ConntrackMtinfo2: xt.ConntrackMtinfo2{
					ConntrackMtinfoBase: xt.ConntrackMtinfoBase{
						ReplSrcAddr: net.ParseIP("fd00::5"), ReplSrcMask: net.CIDRMask(128, 128),
						L4Proto: 17, ReplSrcPort: 53,
						MatchFlags: uint16(xt.ConntrackState | xt.ConntrackProto | xt.ConntrackReplSrc | xt.ConntrackReplSrcPort),
					},
					StateMask: XTStateDNAT,
				},
				ReplSrcPortHigh: 53,
			}},
	} {
		want, err := xt.Marshal(xt.TableFamily(tt.fam), 3, &tt.want)
		if err != nil {
			t.Fatal(err)
		}
		if got := tt.x.Info(); !bytes.Equal(got, want) {
			t.Errorf("%s: info\n%x\nwant\n%x", tt.name, got, want)
		}
	}
}

// A rule's comment is its userdata's, or else its x_tables comment match's
// (what iptables-restore writes), and nothing for rules with neither.
func TestRuleComment(t *testing.T) {
	t.Parallel()
	attr := func(typ uint16, data []byte) netlink.Attribute { return netlink.Attribute{Type: typ, Data: data} }
	nested := func(typ uint16, attrs ...netlink.Attribute) netlink.Attribute {
		b, err := netlink.MarshalAttributes(attrs)
		if err != nil {
			t.Fatal(err)
		}
		return netlink.Attribute{Type: unix.NLA_F_NESTED | typ, Data: b}
	}
	info := make([]byte, 256) // struct xt_comment_info
	copy(info, "restored tag")
	match := func(name string, info []byte) netlink.Attribute {
		return nested(unix.NFTA_LIST_ELEM, attr(unix.NFTA_EXPR_NAME, cstr("match")),
			nested(unix.NFTA_EXPR_DATA, attr(unix.NFTA_MATCH_NAME, cstr(name)), attr(unix.NFTA_MATCH_REV, []byte{0, 0, 0, 0}), attr(unix.NFTA_MATCH_INFO, info)))
	}
	counter := nested(unix.NFTA_LIST_ELEM, attr(unix.NFTA_EXPR_NAME, cstr("counter")))
	for _, tt := range []struct {
		name  string
		attrs []netlink.Attribute
		want  string
	}{
		{"userdata", []netlink.Attribute{attr(unix.NFTA_RULE_USERDATA, RuleUserData("our tag")), nested(unix.NFTA_RULE_EXPRESSIONS, match("comment", info))}, "our tag"},
		{"x_tables comment match", []netlink.Attribute{nested(unix.NFTA_RULE_EXPRESSIONS, counter, match("conntrack", make([]byte, 168)), match("comment", info))}, "restored tag"},
		{"neither", []netlink.Attribute{nested(unix.NFTA_RULE_EXPRESSIONS, counter, match("conntrack", make([]byte, 168)))}, ""},
		{"truncated info", []netlink.Attribute{nested(unix.NFTA_RULE_EXPRESSIONS, match("comment", []byte("no NUL")))}, "no NUL"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b, err := netlink.MarshalAttributes(append([]netlink.Attribute{attr(unix.NFTA_RULE_TABLE, cstr("filter")), attr(unix.NFTA_RULE_CHAIN, cstr("FORWARD"))}, tt.attrs...))
			if err != nil {
				t.Fatal(err)
			}
			r, _, _, err := decodeRule(netlink.Message{Header: netlink.Header{Type: msgType(unix.NFT_MSG_NEWRULE)}, Data: append(nfgenmsg(unix.NFPROTO_IPV4, 0), b...)})
			if err != nil || r == nil || r.Comment != tt.want {
				t.Fatalf("decodeRule: %+v, %v; want comment %q", r, err, tt.want)
			}
		})
	}
}
