package netlinkx

import (
	"encoding/binary"
	"fmt"

	"github.com/jsimonetti/rtnetlink/v2"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// VlanSpec describes an 802.1Q VLAN link to create: frames it sends leave
// its lower device tagged with ID, and it receives the lower device's
// frames carrying that tag. (IFLA_VLAN_PROTOCOL is left out: the kernel's
// default is 802.1Q.)
type VlanSpec struct {
	ChildSpec
	ID int // 0…4094
}

// AddVlan creates a VLAN link on s.Parent. Without the 8021q driver the
// error is an *nlerr.UnsupportedError.
func (h *Handle) AddVlan(s VlanSpec) error {
	op := fmt.Sprintf("adding vlan %q (id %d)", s.Name, s.ID)
	if s.ID < 0 || s.ID > 4094 {
		return &Error{Op: op, Err: unix.EINVAL}
	}
	return h.addKind(op, s.ChildSpec, vlanInfo(s.ID))
}

func vlanInfo(id int) *rtnetlink.LinkInfo {
	return &rtnetlink.LinkInfo{Kind: "vlan", Data: &kindData{
		kind:  "vlan",
		attrs: func(ae *netlink.AttributeEncoder) { ae.Uint16(unix.IFLA_VLAN_ID, uint16(id)) },
	}}
}

// VlanID reads the VLAN id of vlan link name; a link of another kind gives
// an error matching ErrWrongKind.
func (h *Handle) VlanID(name string) (int, error) {
	id := 0
	err := h.kindAttrs(name, "vlan", func(typ uint16, b []byte) {
		if typ == unix.IFLA_VLAN_ID && len(b) == 2 {
			id = int(binary.NativeEndian.Uint16(b))
		}
	})
	return id, err
}
