package nft

import (
	"testing"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

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
