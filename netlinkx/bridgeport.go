package netlinkx

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/jsimonetti/rtnetlink/v2"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Bridge-family (AF_BRIDGE) requests: port flags and port VLANs. The kernel
// routes RTM_SETLINK/RTM_DELLINK/RTM_GETLINK with ifi_family AF_BRIDGE to
// the bridge code (rtnl_bridge_setlink and friends), which is what
// `bridge link set` and `bridge vlan` use. rtnetlink/v2 cannot encode these
// (it always writes family 0, which for RTM_DELLINK would delete the link
// itself), so the messages are built here byte by byte.

// Constants of include/uapi/linux/if_bridge.h that x/sys/unix lacks.
const (
	iflaBridgeFlags    = 0 // IFLA_BRIDGE_FLAGS
	iflaBridgeVlanInfo = 2 // IFLA_BRIDGE_VLAN_INFO

	bridgeFlagsMaster = 1 // BRIDGE_FLAGS_MASTER: the request is for the bridge the port belongs to

	bridgeVlanInfoPVID       = 1 << 1 // BRIDGE_VLAN_INFO_PVID
	bridgeVlanInfoUntagged   = 1 << 2 // BRIDGE_VLAN_INFO_UNTAGGED
	bridgeVlanInfoRangeBegin = 1 << 3 // BRIDGE_VLAN_INFO_RANGE_BEGIN
	bridgeVlanInfoRangeEnd   = 1 << 4 // BRIDGE_VLAN_INFO_RANGE_END

	rtextFilterBrVlan = 1 << 1 // RTEXT_FILTER_BRVLAN for IFLA_EXT_MASK
)

// ErrNotBridgePort reports a link that is not enslaved to a bridge.
var ErrNotBridgePort = errors.New("not a bridge port")

// BridgePortState is a port's STP state (IFLA_BRPORT_STATE, BR_STATE_*).
type BridgePortState uint8

// Port states as the kernel numbers them.
const (
	BridgePortDisabled BridgePortState = iota
	BridgePortListening
	BridgePortLearning
	BridgePortForwarding
	BridgePortBlocking
)

var portStateNames = [...]string{"disabled", "listening", "learning", "forwarding", "blocking"}

func (s BridgePortState) String() string {
	if int(s) < len(portStateNames) {
		return portStateNames[s]
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// BridgePort is a bridge port's configuration as the kernel reports it.
type BridgePort struct {
	State    BridgePortState
	Hairpin  bool // IFLA_BRPORT_MODE: frames may leave through the port they came in
	Isolated bool // IFLA_BRPORT_ISOLATED: no forwarding to other isolated ports
	Learning bool // IFLA_BRPORT_LEARNING: source MACs are learned
}

// BridgePortSettings changes port flags; nil fields are left alone.
type BridgePortSettings struct {
	Hairpin  *bool
	Isolated *bool
	Learning *bool
}

// bridgeMsg is an ifinfomsg of family AF_BRIDGE with raw attributes. It
// embeds rtnetlink.LinkMessage only to be accepted by rtnetlink.Conn; its
// own MarshalBinary is what goes on the wire.
type bridgeMsg struct {
	rtnetlink.LinkMessage
	index int
	attrs []byte
}

func (m *bridgeMsg) MarshalBinary() ([]byte, error) {
	b := make([]byte, unix.SizeofIfInfomsg, unix.SizeofIfInfomsg+len(m.attrs))
	b[0] = unix.AF_BRIDGE
	binary.NativeEndian.PutUint32(b[4:8], uint32(m.index))
	return append(b, m.attrs...), nil
}

func boolU8(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

// encodePortSettings builds IFLA_PROTINFO (nested) with the given flags.
func encodePortSettings(s BridgePortSettings) ([]byte, error) {
	ae := netlink.NewAttributeEncoder()
	ae.Nested(unix.IFLA_PROTINFO, func(nae *netlink.AttributeEncoder) error {
		if s.Hairpin != nil {
			nae.Uint8(unix.IFLA_BRPORT_MODE, boolU8(*s.Hairpin))
		}
		if s.Learning != nil {
			nae.Uint8(unix.IFLA_BRPORT_LEARNING, boolU8(*s.Learning))
		}
		if s.Isolated != nil {
			nae.Uint8(unix.IFLA_BRPORT_ISOLATED, boolU8(*s.Isolated))
		}
		return nil
	})
	return ae.Encode()
}

// SetBridgePort changes the flags of a bridge port (the link must already
// be enslaved to a bridge), like `bridge link set dev <name> hairpin on`.
func (h *Handle) SetBridgePort(name string, s BridgePortSettings) error {
	op := fmt.Sprintf("setting bridge port flags of %q", name)
	l, err := h.LinkByName(name)
	if err != nil {
		return &Error{Op: op, Err: Cause(err)}
	}
	if l.MasterIndex == 0 {
		return &Error{Op: op, Err: ErrNotBridgePort}
	}
	attrs, err := encodePortSettings(s)
	if err != nil {
		return fail(op, err)
	}
	if err := h.do(&bridgeMsg{index: l.Index, attrs: attrs}, unix.RTM_SETLINK, 0); err != nil {
		return failLink(op, err)
	}
	return nil
}

// SetHairpin sets or clears the port's hairpin flag.
func (h *Handle) SetHairpin(name string, on bool) error {
	return h.SetBridgePort(name, BridgePortSettings{Hairpin: &on})
}

// SetPortIsolated sets or clears the port's isolated flag.
func (h *Handle) SetPortIsolated(name string, on bool) error {
	return h.SetBridgePort(name, BridgePortSettings{Isolated: &on})
}

// BridgePort reads the port configuration of a link enslaved to a bridge,
// from the bridge-port data of an ordinary link query (one round trip).
func (h *Handle) BridgePort(name string) (BridgePort, error) {
	op := fmt.Sprintf("reading bridge port %q", name)
	if !validName(name) {
		return BridgePort{}, &Error{Op: op, Err: ErrNotFound}
	}
	m, err := h.get(&rtnetlink.LinkMessage{Attributes: &rtnetlink.LinkAttributes{Name: name}}, unix.RTM_GETLINK)
	if err != nil {
		return BridgePort{}, failLink(op, err)
	}
	lm, ok := m.(*rtnetlink.LinkMessage)
	if !ok || lm.Attributes == nil || lm.Attributes.Info == nil || lm.Attributes.Info.SlaveKind != "bridge" {
		return BridgePort{}, &Error{Op: op, Err: ErrNotBridgePort}
	}
	raw, ok := lm.Attributes.Info.SlaveData.(*rtnetlink.LinkData)
	if !ok {
		return BridgePort{}, fail(op, fmt.Errorf("unexpected bridge port data %T", lm.Attributes.Info.SlaveData))
	}
	p, err := decodeBridgePort(raw.Data)
	if err != nil {
		return BridgePort{}, fail(op, err)
	}
	return p, nil
}

func decodeBridgePort(b []byte) (BridgePort, error) {
	var p BridgePort
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return p, err
	}
	for ad.Next() {
		switch ad.Type() {
		case unix.IFLA_BRPORT_STATE:
			p.State = BridgePortState(ad.Uint8())
		case unix.IFLA_BRPORT_MODE:
			p.Hairpin = ad.Uint8() != 0
		case unix.IFLA_BRPORT_ISOLATED:
			p.Isolated = ad.Uint8() != 0
		case unix.IFLA_BRPORT_LEARNING:
			p.Learning = ad.Uint8() != 0
		}
	}
	return p, ad.Err()
}

// BridgeVlan is one VLAN entry of a bridge port.
type BridgeVlan struct {
	VID      uint16
	PVID     bool // untagged ingress frames are classified into this VLAN
	Untagged bool // egress frames of this VLAN leave without a tag
}

// encodeVlanInfo builds IFLA_AF_SPEC with BRIDGE_FLAGS_MASTER and one
// bridge_vlan_info {u16 flags; u16 vid}.
func encodeVlanInfo(v BridgeVlan) ([]byte, error) {
	var flags uint16
	if v.PVID {
		flags |= bridgeVlanInfoPVID
	}
	if v.Untagged {
		flags |= bridgeVlanInfoUntagged
	}
	info := make([]byte, 4)
	binary.NativeEndian.PutUint16(info[0:2], flags)
	binary.NativeEndian.PutUint16(info[2:4], v.VID)
	ae := netlink.NewAttributeEncoder()
	ae.Nested(unix.IFLA_AF_SPEC, func(nae *netlink.AttributeEncoder) error {
		nae.Uint16(iflaBridgeFlags, bridgeFlagsMaster)
		nae.Bytes(iflaBridgeVlanInfo, info)
		return nil
	})
	return ae.Encode()
}

func validVID(vid uint16) bool { return vid >= 1 && vid <= 4094 }

func (h *Handle) bridgeVlanRequest(op, port string, v BridgeVlan, typ uint16) error {
	if !validVID(v.VID) {
		return &Error{Op: op, Err: unix.EINVAL}
	}
	l, err := h.LinkByName(port)
	if err != nil {
		return &Error{Op: op, Err: Cause(err)}
	}
	attrs, err := encodeVlanInfo(v)
	if err != nil {
		return fail(op, err)
	}
	if err := h.do(&bridgeMsg{index: l.Index, attrs: attrs}, typ, 0); err != nil {
		return failLink(op, err)
	}
	return nil
}

// BridgeVlanAdd adds a VLAN to a bridge port (on the bridge side, like
// `bridge vlan add dev <port> vid <v> [pvid] [untagged] master`). Adding a
// VLAN that is present replaces its flags. Bridges without VLAN filtering
// support in the kernel answer EOPNOTSUPP.
func (h *Handle) BridgeVlanAdd(port string, v BridgeVlan) error {
	op := fmt.Sprintf("adding VLAN %d to bridge port %q", v.VID, port)
	return h.bridgeVlanRequest(op, port, v, unix.RTM_SETLINK)
}

// BridgeVlanDel removes a VLAN from a bridge port. The kernel does not
// report a VLAN the port does not have.
func (h *Handle) BridgeVlanDel(port string, vid uint16) error {
	op := fmt.Sprintf("deleting VLAN %d from bridge port %q", vid, port)
	return h.bridgeVlanRequest(op, port, BridgeVlan{VID: vid}, unix.RTM_DELLINK)
}

// BridgeVlans lists the VLANs of a bridge port (or, for a bridge device,
// of the bridge itself), ascending by VID. The kernel only answers this as
// part of a dump over all bridge ports; the port's entries are picked out.
func (h *Handle) BridgeVlans(port string) ([]BridgeVlan, error) {
	op := fmt.Sprintf("listing VLANs of %q", port)
	l, err := h.LinkByName(port)
	if err != nil {
		return nil, &Error{Op: op, Err: Cause(err)}
	}
	ae := netlink.NewAttributeEncoder()
	ae.Uint32(unix.IFLA_EXT_MASK, rtextFilterBrVlan)
	attrs, err := ae.Encode()
	if err != nil {
		return nil, fail(op, err)
	}
	req := &bridgeMsg{attrs: attrs}
	raw, err := retryDump(func() ([]netlink.Message, bool, error) {
		_, raw, err := h.exchange(req, unix.RTM_GETLINK, netlink.Request|netlink.Dump)
		if err != nil {
			return nil, false, err
		}
		return raw, interrupted(raw), nil
	})
	if err != nil {
		return nil, fail(op, err)
	}
	var out []BridgeVlan
	for _, m := range raw {
		if m.Header.Type != unix.RTM_NEWLINK || len(m.Data) < unix.SizeofIfInfomsg {
			continue
		}
		if m.Data[0] != unix.AF_BRIDGE || int(binary.NativeEndian.Uint32(m.Data[4:8])) != l.Index {
			continue
		}
		vlans, err := decodeVlanEntries(m.Data[unix.SizeofIfInfomsg:])
		if err != nil {
			return nil, fail(op, err)
		}
		out = append(out, vlans...)
	}
	return out, nil
}

// decodeVlanEntries reads the IFLA_AF_SPEC of one bridge dump entry,
// expanding ranges (RANGE_BEGIN … RANGE_END) into single VIDs.
func decodeVlanEntries(b []byte) ([]BridgeVlan, error) {
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return nil, err
	}
	var out []BridgeVlan
	for ad.Next() {
		if ad.Type() != unix.IFLA_AF_SPEC {
			continue
		}
		spec, err := netlink.NewAttributeDecoder(ad.Bytes())
		if err != nil {
			return nil, err
		}
		var begin *BridgeVlan
		for spec.Next() {
			if spec.Type() != iflaBridgeVlanInfo {
				continue
			}
			info := spec.Bytes()
			if len(info) < 4 {
				return nil, fmt.Errorf("short bridge_vlan_info (%d bytes)", len(info))
			}
			flags := binary.NativeEndian.Uint16(info[0:2])
			v := BridgeVlan{
				VID:      binary.NativeEndian.Uint16(info[2:4]),
				PVID:     flags&bridgeVlanInfoPVID != 0,
				Untagged: flags&bridgeVlanInfoUntagged != 0,
			}
			switch {
			case flags&bridgeVlanInfoRangeBegin != 0:
				begin = &v
			case flags&bridgeVlanInfoRangeEnd != 0 && begin != nil:
				for vid := begin.VID; vid <= v.VID && vid != 0; vid++ {
					out = append(out, BridgeVlan{VID: vid, PVID: begin.PVID, Untagged: begin.Untagged})
					if vid == 0xffff {
						break
					}
				}
				begin = nil
			default:
				out = append(out, v)
			}
		}
		if err := spec.Err(); err != nil {
			return nil, err
		}
	}
	return out, ad.Err()
}

// BridgeVlanFiltering reports whether the bridge filters by VLAN
// (IFLA_BR_VLAN_FILTERING).
func (h *Handle) BridgeVlanFiltering(bridge string) (bool, error) {
	op := fmt.Sprintf("reading bridge options of %q", bridge)
	if !validName(bridge) {
		return false, &Error{Op: op, Err: ErrNotFound}
	}
	m, err := h.get(&rtnetlink.LinkMessage{Attributes: &rtnetlink.LinkAttributes{Name: bridge}}, unix.RTM_GETLINK)
	if err != nil {
		return false, failLink(op, err)
	}
	lm, ok := m.(*rtnetlink.LinkMessage)
	if !ok || lm.Attributes == nil || lm.Attributes.Info == nil || lm.Attributes.Info.Kind != "bridge" {
		return false, fail(op, errors.New("not a bridge"))
	}
	raw, ok := lm.Attributes.Info.Data.(*rtnetlink.LinkData)
	if !ok {
		return false, fail(op, fmt.Errorf("unexpected bridge data %T", lm.Attributes.Info.Data))
	}
	ad, err := netlink.NewAttributeDecoder(raw.Data)
	if err != nil {
		return false, fail(op, err)
	}
	on := false
	for ad.Next() {
		if ad.Type() == unix.IFLA_BR_VLAN_FILTERING {
			on = ad.Uint8() != 0
		}
	}
	if err := ad.Err(); err != nil {
		return false, fail(op, err)
	}
	return on, nil
}
