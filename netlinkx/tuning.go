package netlinkx

import (
	"encoding/binary"
	"fmt"

	"github.com/jsimonetti/rtnetlink/v2"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Link attributes the tuning plugin reads and restores that Link and the
// setters in link.go do not cover: the all-multicast flag and the transmit
// queue length.

// LinkByNameFlags is LinkByName that also returns the raw ifi_flags (IFF_*),
// for flags Link has no field for, such as IFF_ALLMULTI. One round trip.
func (h *Handle) LinkByNameFlags(name string) (Link, uint32, error) {
	op := fmt.Sprintf("looking up link %q", name)
	if !validName(name) {
		return Link{}, 0, &Error{Op: op, Err: ErrNotFound}
	}
	m, err := h.get(&rtnetlink.LinkMessage{Attributes: &rtnetlink.LinkAttributes{Name: name}}, unix.RTM_GETLINK)
	if err != nil {
		return Link{}, 0, failLink(op, err)
	}
	lm, ok := m.(*rtnetlink.LinkMessage)
	if !ok {
		return Link{}, 0, fail(op, fmt.Errorf("unexpected reply %T", m))
	}
	return toLink(lm), lm.Flags, nil
}

// SetAllMulti turns all-multicast mode on or off, like
// `ip link set allmulticast on|off`.
func (h *Handle) SetAllMulti(name string, on bool) error {
	m := &rtnetlink.LinkMessage{Change: unix.IFF_ALLMULTI}
	state := "off"
	if on {
		m.Flags = unix.IFF_ALLMULTI
		state = "on"
	}
	return h.setLink(fmt.Sprintf("setting all-multicast mode %s on %q", state, name), name, m)
}

// txQLenMsg is an AF_UNSPEC ifinfomsg selecting a link by IFLA_IFNAME and
// carrying IFLA_TXQLEN. rtnetlink/v2 decodes IFLA_TXQLEN but never encodes
// it, so the request is built here; the embedded LinkMessage only makes it
// acceptable to rtnetlink.Conn.
type txQLenMsg struct {
	rtnetlink.LinkMessage
	name string
	qlen uint32
}

func (m *txQLenMsg) MarshalBinary() ([]byte, error) {
	ae := netlink.NewAttributeEncoder()
	ae.String(unix.IFLA_IFNAME, m.name)
	ae.Uint32(unix.IFLA_TXQLEN, m.qlen)
	attrs, err := ae.Encode()
	if err != nil {
		return nil, err
	}
	b := make([]byte, unix.SizeofIfInfomsg, unix.SizeofIfInfomsg+len(attrs))
	b[0] = unix.AF_UNSPEC
	binary.NativeEndian.PutUint32(b[4:8], 0) // no index: IFLA_IFNAME selects
	return append(b, attrs...), nil
}

// SetTxQueueLen sets the link's transmit queue length (0 is valid), like
// `ip link set txqueuelen`.
func (h *Handle) SetTxQueueLen(name string, qlen int) error {
	op := fmt.Sprintf("setting transmit queue length %d on %q", qlen, name)
	if qlen < 0 || uint64(qlen) > uint64(^uint32(0)) {
		return &Error{Op: op, Err: unix.EINVAL}
	}
	if !validName(name) {
		return &Error{Op: op, Err: ErrNotFound}
	}
	if err := h.do(&txQLenMsg{name: name, qlen: uint32(qlen)}, unix.RTM_NEWLINK, 0); err != nil {
		return failLink(op, err)
	}
	return nil
}
