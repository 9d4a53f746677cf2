// Package xtables encodes and reads the x_tables (iptables-nft
// compatibility) expressions that nftcni's rules in iptables-nft's own
// chains use or find: the conntrack match, written as iptables-nft writes
// `-m conntrack`, and the comment match iptables-restore leaves where a
// rule had a userdata comment. It stands apart from the nftables core, as
// google/nftables keeps its x_tables in xt/; it imports nothing of ours.
package xtables

import (
	"bytes"
	"encoding/binary"
	"net/netip"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/google/nftables/expr"
	"github.com/google/nftables/xt"
)

// Conntrack is the x_tables conntrack match, revision 3, the way
// iptables-nft sends `-m conntrack --ctstate S [--ctproto P] [--ctreplsrc
// A] [--ctreplsrcport N]`. Rules in an iptables-nft chain must use it
// rather than the native `ct` expression: iptables-nft lists and saves only
// what it can parse back into its own options. The kernel side needs the
// modules nft_compat and xt_conntrack (feature nft.XTConntrackMatch).
type Conntrack struct {
	// States are XT_CONNTRACK_STATE bits (StateEstablished, …); a
	// packet matches when its state has any of them.
	States uint16
	// Proto is the connection's layer-4 protocol; 0 matches any.
	Proto uint8
	// ReplySrc, when valid, must be the source address of the
	// connection's reply direction (a full-length mask): for a DNATed
	// connection, the address it was DNATed to.
	ReplySrc netip.Addr
	// ReplySrcPort, when not 0, must be the reply direction's source
	// port: the port it was DNATed to.
	ReplySrcPort uint16
}

// The state bits of --ctstate (XT_CONNTRACK_STATE_BIT and the "virtual"
// states after IP_CT_NUMBER).
const (
	StateEstablished = 1 << 1
	StateRelated     = 1 << 2
	StateDNAT        = 1 << 7
)

// The match_flags bits (XT_CONNTRACK_*).
const (
	xtFlagState        = 1 << 0
	xtFlagProto        = 1 << 1
	xtFlagReplSrc      = 1 << 4
	xtFlagReplSrcPorts = 1 << 10
)

// Offsets in struct xt_conntrack_mtinfo3: eight address/mask unions
// (8 × 16 bytes), expires min/max (2 × 4), l4proto and four ports
// (5 × 2), match_flags, invert_flags, state_mask, status_mask (4 × 2),
// four port highs (4 × 2) — 162 bytes, 164 with the struct's padding,
// sent padded to 168 (XT_ALIGN). Host byte order, like the kernel's
// struct, ports included: revision 3 compares port ranges in host order.
const (
	xtReplSrcAddr     = 64
	xtReplSrcMask     = 80
	xtL4Proto         = 136
	xtReplSrcPort     = 142
	xtMatchFlags      = 146
	xtStateMask       = 150
	xtReplSrcPortHigh = 158
	xtConntrackSize   = 168
)

// Info is the match's struct xt_conntrack_mtinfo3.
func (x Conntrack) Info() []byte {
	b := make([]byte, xtConntrackSize)
	flags := uint16(xtFlagState)
	binary.NativeEndian.PutUint16(b[xtStateMask:], x.States)
	if x.Proto != 0 {
		flags |= xtFlagProto
		binary.NativeEndian.PutUint16(b[xtL4Proto:], uint16(x.Proto))
	}
	if a := x.ReplySrc.Unmap(); a.IsValid() {
		flags |= xtFlagReplSrc
		raw := a.AsSlice()
		copy(b[xtReplSrcAddr:], raw)
		for i := range raw {
			b[xtReplSrcMask+i] = 0xff
		}
	}
	if x.ReplySrcPort != 0 {
		flags |= xtFlagReplSrcPorts
		binary.NativeEndian.PutUint16(b[xtReplSrcPort:], x.ReplySrcPort)
		binary.NativeEndian.PutUint16(b[xtReplSrcPortHigh:], x.ReplySrcPort)
	}
	binary.NativeEndian.PutUint16(b[xtMatchFlags:], flags)
	return b
}

// Match is the rule expression.
func (x Conntrack) Match() *expr.Match {
	info := xt.Unknown(x.Info())
	return &expr.Match{Name: "conntrack", Rev: 3, Info: &info}
}

// Comment is the text of the first x_tables comment match (`-m comment
// --comment "…"`) among a rule's expressions (NFTA_RULE_EXPRESSIONS), ""
// when there is none.
//
// Why: we write comments as userdata, which iptables-save prints as `-m
// comment`; but iptables-restore (1.8.9, Debian 12's) turns them back into
// the x_tables match, so after an iptables-save/iptables-restore round trip
// — what netfilter-persistent does at boot, what an administrator does by
// hand — our accepts in iptables-nft's FORWARD chain carry their owner tag
// only there. Read only for rules without a userdata comment.
func Comment(exprs []byte) string {
	list, err := netlink.NewAttributeDecoder(exprs)
	if err != nil {
		return ""
	}
	for list.Next() {
		e, err := netlink.NewAttributeDecoder(list.Bytes())
		if err != nil {
			return ""
		}
		var name string
		var data []byte
		for e.Next() {
			switch e.Type() {
			case unix.NFTA_EXPR_NAME:
				name = e.String()
			case unix.NFTA_EXPR_DATA:
				data = e.Bytes()
			}
		}
		if name != "match" || data == nil {
			continue
		}
		m, err := netlink.NewAttributeDecoder(data)
		if err != nil {
			return ""
		}
		var match string
		var info []byte
		for m.Next() {
			switch m.Type() {
			case unix.NFTA_MATCH_NAME:
				match = m.String()
			case unix.NFTA_MATCH_INFO:
				info = m.Bytes()
			}
		}
		if match == "comment" {
			// struct xt_comment_info: char comment[256], NUL-terminated.
			if i := bytes.IndexByte(info, 0); i >= 0 {
				info = info[:i]
			}
			return string(info)
		}
	}
	return ""
}
