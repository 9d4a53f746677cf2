package netlinkx

import (
	"errors"
	"fmt"
	"net"

	"github.com/jsimonetti/rtnetlink/v2"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/nlerr"
)

// Link kinds: what creating and reading a link of a given kind share
// (macvlan, ipvlan, vlan, vrf and dummy each in a file of its own), links
// stacked on a lower device in particular: creating one straight into
// another namespace, reading back its kind-specific attributes, finding the
// default-route device a plugin falls back to as the lower device, and a
// clear error when the kernel has no driver for a kind (failCreate). rtnetlink/v2 has
// no drivers for these kinds, so their IFLA_INFO_DATA is encoded here; the
// encoders are not registered with rtnetlink, so replies keep the raw
// bytes, which the readers decode.

// ChildSpec describes a link stacked on a lower device.
type ChildSpec struct {
	Name string
	// Parent is the lower device's index in the handle's namespace.
	Parent int
	// NS is the namespace the link is created in (nil: the handle's). The
	// kernel creates it there directly, still bound to Parent, so it is
	// never visible in the handle's namespace.
	NS  *netns.NS
	MTU int              // 0: the lower device's
	MAC net.HardwareAddr // nil: the kernel's choice
}

// kindData is the IFLA_INFO_DATA of one of our create requests.
type kindData struct {
	kind  string
	attrs func(ae *netlink.AttributeEncoder)
}

var _ rtnetlink.LinkDriver = (*kindData)(nil)

func (d *kindData) New() rtnetlink.LinkDriver { return &kindData{kind: d.kind} }
func (d *kindData) Kind() string              { return d.kind }

func (d *kindData) Encode(ae *netlink.AttributeEncoder) error {
	if d.attrs != nil {
		d.attrs(ae)
	}
	return nil
}

func (d *kindData) Decode(*netlink.AttributeDecoder) error { return nil }

// failCreate is fail for link creation: EOPNOTSUPP becomes an
// *nlerr.UnsupportedError naming the kind ("vlan not supported by this
// kernel", matching errors.ErrUnsupported and still EOPNOTSUPP) when the
// kernel says the kind is unknown (extended ack "Unknown device type"), or
// when it gave no reason at all: the kernel has no driver for it (not
// built, module missing). A driver's own EOPNOTSUPP (e.g. a vlan on a
// device that cannot carry VLANs) keeps the errno, with the kernel's
// reason.
func failCreate(op, kind string, err error) error {
	if errors.Is(err, unix.EOPNOTSUPP) {
		if msg := nlerr.Message(err); msg == "" || msg == "Unknown device type" {
			return &Error{Op: op, Err: &nlerr.UnsupportedError{What: kind, Err: unix.EOPNOTSUPP}}
		}
	}
	return fail(op, err)
}

// kindMsg is the RTM_NEWLINK request creating a link of info's kind from
// s (Parent 0: no lower device).
func kindMsg(s ChildSpec, info *rtnetlink.LinkInfo) *rtnetlink.LinkMessage {
	attrs := &rtnetlink.LinkAttributes{
		Name:    s.Name,
		MTU:     uint32(s.MTU),
		Address: s.MAC,
		Type:    uint32(s.Parent), // IFLA_LINK
		Info:    info,
	}
	if s.NS != nil {
		attrs.NetNS = rtnetlink.NetNSForFD(uint32(s.NS.Fd()))
	}
	return &rtnetlink.LinkMessage{Family: unix.AF_UNSPEC, Attributes: attrs}
}

// addKind creates a link of info's kind from s. A name clash gives an
// error matching unix.EEXIST; a missing Parent one matching ErrNotFound.
func (h *Handle) addKind(op string, s ChildSpec, info *rtnetlink.LinkInfo) error {
	if s.MTU < 0 || s.Parent < 0 || !validName(s.Name) {
		return &Error{Op: op, Err: unix.EINVAL}
	}
	if err := h.do(kindMsg(s, info), unix.RTM_NEWLINK, netlink.Create|netlink.Excl); err != nil {
		if errors.Is(err, unix.ENODEV) && s.Parent != 0 {
			return &Error{Op: op, Err: ErrNotFound}
		}
		return failCreate(op, info.Kind, err)
	}
	return nil
}

// ErrWrongKind reports a link that is not of the kind a reader expects.
var ErrWrongKind = errors.New("link is of another kind")

// kindAttrs looks name up and returns the attributes of its IFLA_INFO_DATA,
// which must be of kind: want receives each attribute's type and payload.
func (h *Handle) kindAttrs(name, kind string, want func(typ uint16, b []byte)) error {
	op := fmt.Sprintf("reading %s attributes of %q", kind, name)
	if !validName(name) {
		return &Error{Op: op, Err: ErrNotFound}
	}
	m, err := h.get(&rtnetlink.LinkMessage{Attributes: &rtnetlink.LinkAttributes{Name: name}}, unix.RTM_GETLINK)
	if err != nil {
		return failLink(op, err)
	}
	lm, ok := m.(*rtnetlink.LinkMessage)
	if !ok || lm.Attributes == nil || lm.Attributes.Info == nil || lm.Attributes.Info.Kind != kind {
		return &Error{Op: op, Err: ErrWrongKind}
	}
	raw, _ := lm.Attributes.Info.Data.(*rtnetlink.LinkData)
	if raw == nil || len(raw.Data) == 0 {
		return nil
	}
	ad, err := netlink.NewAttributeDecoder(raw.Data)
	if err != nil {
		return fail(op, err)
	}
	for ad.Next() {
		want(ad.Type(), ad.Bytes())
	}
	if err := ad.Err(); err != nil {
		return fail(op, err)
	}
	return nil
}

// DefaultRouteLink returns the device of the first default route of the
// main table, IPv4 before IPv6: where the macvlan and ipvlan plugins put
// their links when the config names no master. ok is false when there is
// no such route.
func (h *Handle) DefaultRouteLink() (l Link, ok bool, err error) {
	for _, fam := range []int{unix.AF_INET, unix.AF_INET6} {
		routes, err := h.Routes(fam, 0)
		if err != nil {
			return Link{}, false, err
		}
		for _, r := range routes {
			if r.Dst.Bits() != 0 || r.LinkIndex == 0 || (r.Type != 0 && r.Type != unix.RTN_UNICAST) {
				continue
			}
			l, err := h.LinkByIndex(r.LinkIndex)
			if err != nil {
				return Link{}, false, err
			}
			return l, true, nil
		}
	}
	return Link{}, false, nil
}
