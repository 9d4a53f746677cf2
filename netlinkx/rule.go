package netlinkx

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/jsimonetti/rtnetlink/v2"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Rule is a policy routing rule (`ip rule`): packets matching the selector
// (only the source prefix is modelled) are looked up in Table. Rules of
// other kinds (goto, blackhole, fwmark selectors, ...) are listed too, with
// the fields they do not have left zero; Action tells them apart.
type Rule struct {
	Family int          // unix.AF_INET or unix.AF_INET6; 0 on add: Src's family
	Src    netip.Prefix // zero: from all
	Table  int
	// Priority orders the rules. 0 on add lets the kernel choose one just
	// below the first rule after the local rule (what `ip rule add` does
	// without `priority`); on read 0 is the local rule's.
	Priority int
	Action   uint8 // unix.FR_ACT_*; 0 on add: FR_ACT_TO_TBL (lookup)
	// Selectors other than Src set on the rule (iif, oif, fwmark, ...): such
	// a rule does not match every packet from Src.
	OtherSelectors bool
	// Raw is the rule as Rules read it, every selector and attribute
	// included (its RTM_NEWRULE body), for AddRuleAsRead and
	// DelRuleAsRead; nil in a rule made by hand.
	Raw []byte `json:",omitempty"`
}

// Lookup reports whether the rule sends packets to a table (`lookup`).
func (r Rule) Lookup() bool { return r.Action == unix.FR_ACT_TO_TBL }

func (r Rule) String() string {
	var b strings.Builder
	if r.Priority != 0 {
		fmt.Fprintf(&b, "%d: ", r.Priority)
	}
	b.WriteString("from ")
	if r.Src.IsValid() {
		b.WriteString(r.Src.String())
	} else {
		b.WriteString("all")
	}
	if r.Action == 0 || r.Lookup() {
		fmt.Fprintf(&b, " lookup %d", r.Table)
	} else {
		fmt.Fprintf(&b, " action %d", r.Action)
	}
	return b.String()
}

func ruleMsg(r Rule) (*rtnetlink.RuleMessage, error) {
	fam := r.Family
	if r.Src.IsValid() {
		sf := int(family(r.Src.Addr()))
		if fam != 0 && fam != sf {
			return nil, errors.New("rule source of another family")
		}
		fam = sf
	}
	if fam == 0 {
		return nil, errors.New("rule has no family")
	}
	m := &rtnetlink.RuleMessage{
		Family:     uint8(fam),
		Action:     r.Action,
		Attributes: &rtnetlink.RuleAttributes{},
	}
	if m.Action == 0 {
		m.Action = unix.FR_ACT_TO_TBL
	}
	if r.Src.IsValid() {
		src := r.Src.Masked()
		ip := net.IP(src.Addr().AsSlice())
		m.SrcLength = uint8(src.Bits())
		m.Attributes.Src = &ip
	}
	if r.Table != 0 {
		t := uint32(r.Table)
		m.Attributes.Table = &t
		if r.Table < 256 {
			m.Table = uint8(r.Table)
		}
	}
	if r.Priority != 0 {
		p := uint32(r.Priority)
		m.Attributes.Priority = &p
	}
	return m, nil
}

// AddRule adds r. An identical rule (same priority and selector) gives an
// error matching unix.EEXIST; with Priority 0 the kernel picks a new
// priority, so the same rule can be added twice.
func (h *Handle) AddRule(r Rule) error {
	m, err := ruleMsg(r)
	if err == nil {
		err = h.do(m, unix.RTM_NEWRULE, netlink.Create|netlink.Excl)
	}
	if err != nil {
		return fail("adding rule "+r.String(), err)
	}
	return nil
}

// DelRule deletes the first rule matching r; zero Table and Priority match
// any. A missing rule gives an error matching unix.ENOENT.
func (h *Handle) DelRule(r Rule) error {
	m, err := ruleMsg(r)
	if err == nil {
		err = h.do(m, unix.RTM_DELRULE, 0)
	}
	if err != nil {
		return fail("deleting rule "+r.String(), err)
	}
	return nil
}

// AddRuleAsRead adds r as Rules read it (from another namespace, say),
// with every selector it has. An identical rule gives an error matching
// unix.EEXIST.
func (h *Handle) AddRuleAsRead(r Rule) error {
	return h.ruleAsRead("adding", r, unix.RTM_NEWRULE, netlink.Create|netlink.Excl)
}

// DelRuleAsRead deletes the rule r, as Rules read it: the one with all its
// selectors, not the first one with its source and table. A missing rule
// gives an error matching unix.ENOENT.
func (h *Handle) DelRuleAsRead(r Rule) error {
	return h.ruleAsRead("deleting", r, unix.RTM_DELRULE, 0)
}

func (h *Handle) ruleAsRead(verb string, r Rule, typ uint16, flags netlink.HeaderFlags) error {
	op := verb + " rule " + r.String()
	if r.Raw == nil {
		return &Error{Op: op, Err: errors.New("rule not read from the kernel")}
	}
	var m rtnetlink.RuleMessage
	if err := m.UnmarshalBinary(r.Raw); err != nil {
		return &Error{Op: op, Err: err}
	}
	if err := h.do(&m, typ, flags); err != nil {
		return fail(op, err)
	}
	return nil
}

// Rules lists the policy routing rules of the family (unix.AF_INET,
// unix.AF_INET6, or 0 for both), in the kernel's order.
func (h *Handle) Rules(family int) ([]Rule, error) {
	var out []Rule
	for _, fam := range families(family) {
		msgs, err := h.dump(&rtnetlink.RuleMessage{Family: uint8(fam)}, unix.RTM_GETRULE)
		if err != nil {
			return nil, fail("listing rules", err)
		}
		for _, m := range msgs {
			rm, ok := m.(*rtnetlink.RuleMessage)
			if !ok || int(rm.Family) != fam {
				continue
			}
			r := toRule(rm)
			if r.Raw, err = rm.MarshalBinary(); err != nil {
				return nil, fail("listing rules", err)
			}
			out = append(out, r)
		}
	}
	return out, nil
}

func toRule(m *rtnetlink.RuleMessage) Rule {
	r := Rule{Family: int(m.Family), Table: int(m.Table), Action: m.Action}
	a := m.Attributes
	if a == nil {
		return r
	}
	if a.Table != nil {
		r.Table = int(*a.Table)
	}
	if a.Priority != nil {
		r.Priority = int(*a.Priority)
	}
	if a.Src != nil {
		if ip, ok := netip.AddrFromSlice(*a.Src); ok {
			r.Src = netip.PrefixFrom(ip.Unmap(), int(m.SrcLength))
		}
	}
	r.OtherSelectors = m.DstLength != 0 || m.TOS != 0 || a.IIFName != nil || a.OIFName != nil ||
		(a.FwMark != nil && *a.FwMark != 0) || a.UIDRange != nil || a.SPortRange != nil ||
		a.DPortRange != nil || a.IPProto != nil || a.L3MDev != nil || m.Flags&unix.FIB_RULE_INVERT != 0
	return r
}
