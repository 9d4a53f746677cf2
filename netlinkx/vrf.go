package netlinkx

import (
	"errors"
	"fmt"

	"github.com/jsimonetti/rtnetlink/v2"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// VRF devices (kind "vrf") bind a routing table to an L3 master device:
// links enslaved to it route through that table. rtnetlink/v2 has no
// driver for them, so the one attribute that matters, IFLA_VRF_TABLE, is
// encoded and decoded here.

// ErrNotVRF reports a link that exists but is not a VRF device.
var ErrNotVRF = errors.New("not a VRF device")

// VRF is a VRF device and its routing table.
type VRF struct {
	Link
	Table uint32
}

// AddVRF creates a VRF device bound to table. An existing link of that name
// gives an error matching unix.EEXIST; on a kernel without the vrf driver
// (CONFIG_NET_VRF) the error is an *nlerr.UnsupportedError.
func (h *Handle) AddVRF(name string, table uint32) error {
	op := fmt.Sprintf("adding VRF %q (table %d)", name, table)
	req := &rtnetlink.LinkMessage{Attributes: &rtnetlink.LinkAttributes{
		Name: name,
		Info: &rtnetlink.LinkInfo{Kind: "vrf", Data: &vrfData{table: table}},
	}}
	if err := h.do(req, unix.RTM_NEWLINK, netlink.Create|netlink.Excl); err != nil {
		return failCreate(op, "vrf", err)
	}
	return nil
}

// VRFByName returns the VRF device called name: ErrNotFound when there is
// no such link, ErrNotVRF when it is another kind of link.
func (h *Handle) VRFByName(name string) (VRF, error) {
	op := fmt.Sprintf("looking up VRF %q", name)
	if !validName(name) {
		return VRF{}, &Error{Op: op, Err: ErrNotFound}
	}
	m, err := h.get(&rtnetlink.LinkMessage{Attributes: &rtnetlink.LinkAttributes{Name: name}}, unix.RTM_GETLINK)
	if err != nil {
		return VRF{}, failLink(op, err)
	}
	lm, ok := m.(*rtnetlink.LinkMessage)
	if !ok {
		return VRF{}, fail(op, fmt.Errorf("unexpected reply %T", m))
	}
	v, ok := toVRF(lm)
	if !ok {
		return VRF{}, &Error{Op: op, Err: ErrNotVRF}
	}
	return v, nil
}

// VRFs lists the VRF devices of the namespace.
func (h *Handle) VRFs() ([]VRF, error) {
	msgs, err := h.dump(&rtnetlink.LinkMessage{}, unix.RTM_GETLINK)
	if err != nil {
		return nil, fail("listing links", err)
	}
	var out []VRF
	for _, m := range msgs {
		if lm, ok := m.(*rtnetlink.LinkMessage); ok {
			if v, ok := toVRF(lm); ok {
				out = append(out, v)
			}
		}
	}
	return out, nil
}

func toVRF(m *rtnetlink.LinkMessage) (VRF, bool) {
	if m.Attributes == nil || m.Attributes.Info == nil || m.Attributes.Info.Kind != "vrf" {
		return VRF{}, false
	}
	v := VRF{Link: toLink(m)}
	var data []byte
	switch d := m.Attributes.Info.Data.(type) {
	case *rtnetlink.LinkData:
		data = d.Data
	case *vrfData:
		return VRF{Link: v.Link, Table: d.table}, true
	}
	if ad, err := netlink.NewAttributeDecoder(data); err == nil {
		for ad.Next() {
			if ad.Type() == unix.IFLA_VRF_TABLE {
				v.Table = ad.Uint32()
			}
		}
	}
	return v, true
}

// vrfData encodes the VRF's IFLA_INFO_DATA. Like bridgeData it is not
// registered globally: only our requests use it.
type vrfData struct {
	table uint32
}

var _ rtnetlink.LinkDriver = (*vrfData)(nil)

func (d *vrfData) New() rtnetlink.LinkDriver { return &vrfData{} }
func (d *vrfData) Kind() string              { return "vrf" }

func (d *vrfData) Encode(ae *netlink.AttributeEncoder) error {
	ae.Uint32(unix.IFLA_VRF_TABLE, d.table)
	return nil
}

func (d *vrfData) Decode(ad *netlink.AttributeDecoder) error {
	for ad.Next() {
		if ad.Type() == unix.IFLA_VRF_TABLE {
			d.table = ad.Uint32()
		}
	}
	return ad.Err()
}
