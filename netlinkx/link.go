package netlinkx

import (
	"fmt"
	"net"

	"github.com/jsimonetti/rtnetlink/v2"
	"github.com/jsimonetti/rtnetlink/v2/driver"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/netns"
)

// OperState is a link's RFC 2863 operational state (IFLA_OPERSTATE).
type OperState uint8

// Operational states, as the kernel numbers them (IF_OPER_*).
const (
	OperUnknown OperState = iota
	OperNotPresent
	OperDown
	OperLowerLayerDown
	OperTesting
	OperDormant
	OperUp
)

var operNames = [...]string{"unknown", "notpresent", "down", "lowerlayerdown", "testing", "dormant", "up"}

// String returns the state as /sys/class/net/<if>/operstate spells it; the
// bridge plugin's `bridge port in error state: <operstate>` shows it.
func (s OperState) String() string {
	if int(s) < len(operNames) {
		return operNames[s]
	}
	return fmt.Sprintf("operstate(%d)", uint8(s))
}

// Link is a network interface as the kernel reports it.
type Link struct {
	Index       int
	Name        string
	Kind        string // IFLA_INFO_KIND: "veth", "bridge", ...; "" for physical and loopback
	MTU         int
	MAC         net.HardwareAddr
	Up          bool // administratively up (IFF_UP)
	Promisc     bool // IFF_PROMISC
	OperState   OperState
	MasterIndex int // 0: no master
	// ParentIndex is IFLA_LINK: the lower device of a vlan/macvlan/ipvlan,
	// the peer of a veth; it may live in another namespace. 0: none.
	ParentIndex int
	TxQueueLen  int
	Alias       string
}

func toLink(m *rtnetlink.LinkMessage) Link {
	l := Link{
		Index:   int(m.Index),
		Up:      m.Flags&unix.IFF_UP != 0,
		Promisc: m.Flags&unix.IFF_PROMISC != 0,
	}
	a := m.Attributes
	if a == nil {
		return l
	}
	l.Name = a.Name
	l.MTU = int(a.MTU)
	l.MAC = a.Address
	l.OperState = OperState(a.OperationalState)
	l.ParentIndex = int(a.Type) // rtnetlink calls IFLA_LINK "Type"
	if a.Master != nil {
		l.MasterIndex = int(*a.Master)
	}
	if a.TxQueueLen != nil {
		l.TxQueueLen = int(*a.TxQueueLen)
	}
	if a.Alias != nil {
		l.Alias = *a.Alias
	}
	if a.Info != nil {
		l.Kind = a.Info.Kind
	}
	return l
}

// validName reports whether a link could be called name at all; anything
// else cannot exist, so lookups answer ErrNotFound without asking.
func validName(name string) bool {
	return name != "" && len(name) < unix.IFNAMSIZ
}

// LinkByName looks a link up by name in one round trip (RTM_GETLINK with
// IFLA_IFNAME), not by dumping every link.
func (h *Handle) LinkByName(name string) (Link, error) {
	op := fmt.Sprintf("looking up link %q", name)
	if !validName(name) {
		return Link{}, &Error{Op: op, Err: ErrNotFound}
	}
	return h.getLink(op, &rtnetlink.LinkMessage{Attributes: &rtnetlink.LinkAttributes{Name: name}})
}

// LinkByIndex looks a link up by its index.
func (h *Handle) LinkByIndex(index int) (Link, error) {
	op := fmt.Sprintf("looking up link index %d", index)
	if index <= 0 {
		return Link{}, &Error{Op: op, Err: ErrNotFound}
	}
	return h.getLink(op, &rtnetlink.LinkMessage{Index: uint32(index)})
}

func (h *Handle) getLink(op string, req *rtnetlink.LinkMessage) (Link, error) {
	m, err := h.get(req, unix.RTM_GETLINK)
	if err != nil {
		return Link{}, failLink(op, err)
	}
	lm, ok := m.(*rtnetlink.LinkMessage)
	if !ok {
		return Link{}, fail(op, fmt.Errorf("unexpected reply %T", m))
	}
	return toLink(lm), nil
}

// Links lists all links of the namespace.
func (h *Handle) Links() ([]Link, error) {
	msgs, err := h.dump(&rtnetlink.LinkMessage{}, unix.RTM_GETLINK)
	if err != nil {
		return nil, fail("listing links", err)
	}
	links := make([]Link, 0, len(msgs))
	for _, m := range msgs {
		if lm, ok := m.(*rtnetlink.LinkMessage); ok {
			links = append(links, toLink(lm))
		}
	}
	return links, nil
}

// DeleteLink deletes a link by name (one request). A missing link gives an
// error matching ErrNotFound, which DEL tolerates.
func (h *Handle) DeleteLink(name string) error {
	op := fmt.Sprintf("deleting link %q", name)
	if !validName(name) {
		return &Error{Op: op, Err: ErrNotFound}
	}
	req := &rtnetlink.LinkMessage{Attributes: &rtnetlink.LinkAttributes{Name: name}}
	if err := h.do(req, unix.RTM_DELLINK, 0); err != nil {
		return failLink(op, err)
	}
	return nil
}

// setLink changes an existing link addressed by name: RTM_NEWLINK without
// NLM_F_CREATE modifies the link IFLA_IFNAME names, in one round trip.
func (h *Handle) setLink(op, name string, m *rtnetlink.LinkMessage) error {
	if !validName(name) {
		return &Error{Op: op, Err: ErrNotFound}
	}
	if m.Attributes == nil {
		m.Attributes = &rtnetlink.LinkAttributes{}
	}
	m.Attributes.Name = name
	if err := h.do(m, unix.RTM_NEWLINK, 0); err != nil {
		return failLink(op, err)
	}
	return nil
}

// SetUp sets the link administratively up.
func (h *Handle) SetUp(name string) error {
	return h.setLink(fmt.Sprintf("setting %q up", name), name,
		&rtnetlink.LinkMessage{Flags: unix.IFF_UP, Change: unix.IFF_UP})
}

// SetDown sets the link administratively down.
func (h *Handle) SetDown(name string) error {
	return h.setLink(fmt.Sprintf("setting %q down", name), name,
		&rtnetlink.LinkMessage{Change: unix.IFF_UP})
}

// SetPromisc turns promiscuous mode on or off, like `ip link set promisc`.
func (h *Handle) SetPromisc(name string, on bool) error {
	m := &rtnetlink.LinkMessage{Change: unix.IFF_PROMISC}
	state := "off"
	if on {
		m.Flags = unix.IFF_PROMISC
		state = "on"
	}
	return h.setLink(fmt.Sprintf("setting promiscuous mode %s on %q", state, name), name, m)
}

// SetMTU sets the link's MTU.
func (h *Handle) SetMTU(name string, mtu int) error {
	op := fmt.Sprintf("setting MTU %d on %q", mtu, name)
	if mtu <= 0 {
		return &Error{Op: op, Err: unix.EINVAL}
	}
	return h.setLink(op, name, &rtnetlink.LinkMessage{
		Attributes: &rtnetlink.LinkAttributes{MTU: uint32(mtu)},
	})
}

// SetMAC sets the link's hardware address.
func (h *Handle) SetMAC(name string, mac net.HardwareAddr) error {
	op := fmt.Sprintf("setting MAC %s on %q", mac, name)
	if len(mac) == 0 {
		return &Error{Op: op, Err: unix.EINVAL}
	}
	return h.setLink(op, name, &rtnetlink.LinkMessage{
		Attributes: &rtnetlink.LinkAttributes{Address: mac},
	})
}

// SetMaster enslaves the link to master (e.g. a bridge).
func (h *Handle) SetMaster(name, master string) error {
	op := fmt.Sprintf("setting master of %q to %q", name, master)
	ml, err := h.LinkByName(master)
	if err != nil {
		return err // names the master as the missing link
	}
	idx := uint32(ml.Index)
	return h.setLink(op, name, &rtnetlink.LinkMessage{
		Attributes: &rtnetlink.LinkAttributes{Master: &idx},
	})
}

// NoMaster releases the link from its master.
func (h *Handle) NoMaster(name string) error {
	var zero uint32
	return h.setLink(fmt.Sprintf("releasing %q from its master", name), name,
		&rtnetlink.LinkMessage{Attributes: &rtnetlink.LinkAttributes{Master: &zero}})
}

// Rename renames a link. The kernel refuses to rename a link that is up.
func (h *Handle) Rename(oldName, newName string) error {
	op := fmt.Sprintf("renaming %q to %q", oldName, newName)
	l, err := h.LinkByName(oldName)
	if err != nil {
		return &Error{Op: op, Err: Cause(err)}
	}
	// With an index, IFLA_IFNAME is the new name rather than the selector.
	req := &rtnetlink.LinkMessage{
		Index:      uint32(l.Index),
		Attributes: &rtnetlink.LinkAttributes{Name: newName},
	}
	if err := h.do(req, unix.RTM_NEWLINK, 0); err != nil {
		return failLink(op, err)
	}
	return nil
}

// MoveToNS moves the link into another namespace, keeping its name. Its
// index may change there; look it up again by name.
func (h *Handle) MoveToNS(name string, ns *netns.NS) error {
	if ns == nil {
		return &Error{Op: fmt.Sprintf("moving %q to another netns", name), Err: unix.EINVAL}
	}
	return h.setLink(fmt.Sprintf("moving %q to netns %q", name, ns.Path()), name,
		&rtnetlink.LinkMessage{Attributes: &rtnetlink.LinkAttributes{
			NetNS: rtnetlink.NetNSForFD(uint32(ns.Fd())),
		}})
}

// VethSpec describes a veth pair to create.
type VethSpec struct {
	Name     string           // end created in the handle's namespace
	PeerName string           // other end, created directly in PeerNS
	PeerNS   *netns.NS        // nil: the handle's namespace
	MTU      int              // both ends; 0: kernel default
	MAC      net.HardwareAddr // Name end only; nil: random
	// PeerTxQueueLen is the peer's transmit queue length; nil: the
	// kernel's default (1000).
	PeerTxQueueLen *uint32
}

// AddVeth creates a veth pair with a single RTM_NEWLINK: Name here and
// PeerName straight inside PeerNS, so the peer is never visible, even
// briefly, in the wrong namespace and no move is needed. A name clash on
// either side gives an error matching unix.EEXIST.
func (h *Handle) AddVeth(s VethSpec) error {
	op := fmt.Sprintf("adding veth %q (peer %q)", s.Name, s.PeerName)
	if s.MTU < 0 {
		return &Error{Op: op, Err: unix.EINVAL}
	}
	peer := &rtnetlink.LinkMessage{Attributes: &rtnetlink.LinkAttributes{
		Name: s.PeerName,
		MTU:  uint32(s.MTU),
	}}
	if s.PeerNS != nil {
		peer.Attributes.NetNS = rtnetlink.NetNSForFD(uint32(s.PeerNS.Fd()))
	}
	var data rtnetlink.LinkDriver = &driver.Veth{PeerInfo: peer}
	if s.PeerTxQueueLen != nil {
		qlen := *s.PeerTxQueueLen
		data = &vethPeerExtra{peer: linkExtra{peer, func(ae *netlink.AttributeEncoder) {
			ae.Uint32(unix.IFLA_TXQLEN, qlen)
		}}}
	}
	req := &rtnetlink.LinkMessage{Attributes: &rtnetlink.LinkAttributes{
		Name:    s.Name,
		MTU:     uint32(s.MTU),
		Address: s.MAC,
		Info:    &rtnetlink.LinkInfo{Kind: "veth", Data: data},
	}}
	if err := h.do(req, unix.RTM_NEWLINK, netlink.Create|netlink.Excl); err != nil {
		return fail(op, err)
	}
	return nil
}

// vethPeerExtra is the veth driver's data with attributes rtnetlink/v2
// does not encode on the peer (IFLA_TXQLEN).
type vethPeerExtra struct{ peer linkExtra }

func (d *vethPeerExtra) New() rtnetlink.LinkDriver { return &vethPeerExtra{} }
func (d *vethPeerExtra) Kind() string              { return "veth" }

func (d *vethPeerExtra) Encode(ae *netlink.AttributeEncoder) error {
	b, err := d.peer.MarshalBinary()
	if err != nil {
		return err
	}
	ae.Bytes(1, b) // VETH_INFO_PEER
	return nil
}

func (d *vethPeerExtra) Decode(*netlink.AttributeDecoder) error { return nil }

// BridgeSpec describes a bridge to create.
type BridgeSpec struct {
	Name          string
	MTU           int              // 0: kernel default
	MAC           net.HardwareAddr // nil: kernel's choice
	VlanFiltering bool             // IFLA_BR_VLAN_FILTERING at creation
}

// AddBridge creates a bridge. An existing link of that name gives an error
// matching unix.EEXIST; the caller decides whether that is fine.
func (h *Handle) AddBridge(s BridgeSpec) error {
	op := fmt.Sprintf("adding bridge %q", s.Name)
	if s.MTU < 0 {
		return &Error{Op: op, Err: unix.EINVAL}
	}
	info := &rtnetlink.LinkInfo{Kind: "bridge"}
	if s.VlanFiltering {
		info.Data = &bridgeData{vlanFiltering: true}
	}
	req := &rtnetlink.LinkMessage{Attributes: &rtnetlink.LinkAttributes{
		Name:    s.Name,
		MTU:     uint32(s.MTU),
		Address: s.MAC,
		Info:    info,
	}}
	if err := h.do(req, unix.RTM_NEWLINK, netlink.Create|netlink.Excl); err != nil {
		return fail(op, err)
	}
	return nil
}

// bridgeData encodes the bridge's IFLA_INFO_DATA, which rtnetlink/v2 has no
// driver for. It is not registered globally: only our requests use it, and
// replies keep rtnetlink's raw LinkData.
type bridgeData struct {
	vlanFiltering bool
}

var _ rtnetlink.LinkDriver = (*bridgeData)(nil)

func (d *bridgeData) New() rtnetlink.LinkDriver { return &bridgeData{} }
func (d *bridgeData) Kind() string              { return "bridge" }

func (d *bridgeData) Encode(ae *netlink.AttributeEncoder) error {
	if d.vlanFiltering {
		ae.Uint8(unix.IFLA_BR_VLAN_FILTERING, 1)
	}
	return nil
}

func (d *bridgeData) Decode(*netlink.AttributeDecoder) error { return nil }
