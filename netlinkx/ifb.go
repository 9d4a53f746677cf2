package netlinkx

import (
	"fmt"

	"github.com/jsimonetti/rtnetlink/v2"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// IFBSpec describes an IFB (intermediate functional block) device to
// create: a device whose only job is to carry traffic redirected to it by
// a tc action, so that a qdisc on it can shape that traffic.
type IFBSpec struct {
	Name string
	MTU  int // 0: kernel default
	// TxQueueLen is always sent, 0 included: the bandwidth plugin creates
	// its IFBs with 0, as the reference does (its root qdisc is replaced
	// by a TBF right away).
	TxQueueLen int
	Up         bool   // created administratively up
	Alias      string // IFLA_IFALIAS, e.g. an owner tag; "" for none
}

// maxAlias is the kernel's limit for IFLA_IFALIAS (IFALIASZ, 256, with
// its terminating NUL).
const maxAlias = 255

// AddIFB creates an IFB device (name, MTU, queue length, up flag) with one
// RTM_NEWLINK. The kernel ignores IFLA_IFALIAS on creation, so an alias
// takes a second request; if that fails the new device is deleted again.
// An existing link of that name gives an error matching unix.EEXIST.
//
// IFB has no IFLA_INFO_DATA, so unlike bridge it needs no rtnetlink link
// driver of ours: the kind alone selects it. What rtnetlink/v2 lacks here
// is IFLA_TXQLEN and IFLA_IFALIAS on requests (linkExtra).
func (h *Handle) AddIFB(s IFBSpec) error {
	op := fmt.Sprintf("adding ifb %q", s.Name)
	if s.MTU < 0 || s.TxQueueLen < 0 || len(s.Alias) > maxAlias {
		return &Error{Op: op, Err: unix.EINVAL}
	}
	req := &rtnetlink.LinkMessage{
		Family: unix.AF_UNSPEC,
		Attributes: &rtnetlink.LinkAttributes{
			Name: s.Name,
			MTU:  uint32(s.MTU),
			Info: &rtnetlink.LinkInfo{Kind: "ifb"},
		},
	}
	if s.Up {
		req.Flags, req.Change = unix.IFF_UP, unix.IFF_UP
	}
	m := linkExtra{req, func(ae *netlink.AttributeEncoder) {
		ae.Uint32(unix.IFLA_TXQLEN, uint32(s.TxQueueLen))
	}}
	if err := h.do(m, unix.RTM_NEWLINK, netlink.Create|netlink.Excl); err != nil {
		return fail(op, err)
	}
	if s.Alias == "" {
		return nil
	}
	if err := h.SetAlias(s.Name, s.Alias); err != nil {
		_ = h.DeleteLink(s.Name)
		return &Error{Op: op, Err: Cause(err)}
	}
	return nil
}

// SetAlias sets the link's alias (IFLA_IFALIAS, what `ip link show`
// prints as "alias"; at most 255 bytes, "" removes it). It is how we tag
// links we own.
func (h *Handle) SetAlias(name, alias string) error {
	op := fmt.Sprintf("setting alias of %q", name)
	if len(alias) > maxAlias {
		return &Error{Op: op, Err: unix.EINVAL}
	}
	if !validName(name) {
		return &Error{Op: op, Err: ErrNotFound}
	}
	m := linkExtra{&rtnetlink.LinkMessage{
		Family:     unix.AF_UNSPEC,
		Attributes: &rtnetlink.LinkAttributes{Name: name},
	}, func(ae *netlink.AttributeEncoder) {
		ae.String(unix.IFLA_IFALIAS, alias)
	}}
	if err := h.do(m, unix.RTM_NEWLINK, 0); err != nil {
		return failLink(op, err)
	}
	return nil
}

// linkExtra is a link request with attributes rtnetlink/v2 decodes but
// does not encode appended after its own. Embedding the LinkMessage keeps
// it an rtnetlink.Message.
type linkExtra struct {
	*rtnetlink.LinkMessage
	extra func(ae *netlink.AttributeEncoder)
}

func (m linkExtra) MarshalBinary() ([]byte, error) {
	b, err := m.LinkMessage.MarshalBinary()
	if err != nil {
		return nil, err
	}
	ae := netlink.NewAttributeEncoder()
	m.extra(ae)
	x, err := ae.Encode()
	if err != nil {
		return nil, err
	}
	return append(b, x...), nil
}
