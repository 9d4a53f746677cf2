package netlinkx

import (
	"encoding/binary"
	"fmt"

	"github.com/jsimonetti/rtnetlink/v2"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// IPVlanMode is an ipvlan's mode (IFLA_IPVLAN_MODE, IPVLAN_MODE_*): where
// the lower device hands packets to the right ipvlan, by MAC (l2) or by
// address (l3; l3s also runs the slave's netfilter hooks).
type IPVlanMode uint16

// IPVlan modes, as the kernel numbers them.
const (
	IPVlanL2  IPVlanMode = 0
	IPVlanL3  IPVlanMode = 1
	IPVlanL3S IPVlanMode = 2
)

// String returns the mode as the CNI config spells it.
func (m IPVlanMode) String() string {
	switch m {
	case IPVlanL2:
		return "l2"
	case IPVlanL3:
		return "l3"
	case IPVlanL3S:
		return "l3s"
	}
	return fmt.Sprintf("mode(%d)", uint16(m))
}

// IPVlanSpec describes an ipvlan to create. Its flag is always 0 (bridge:
// ipvlans of one lower device reach each other), as the reference's. The
// kernel ignores ChildSpec.MAC: an ipvlan has its lower device's MAC.
type IPVlanSpec struct {
	ChildSpec
	Mode IPVlanMode
}

// AddIPVlan creates an ipvlan on s.Parent. Without the ipvlan driver the
// error is an *nlerr.UnsupportedError.
func (h *Handle) AddIPVlan(s IPVlanSpec) error {
	return h.addKind(fmt.Sprintf("adding ipvlan %q", s.Name), s.ChildSpec, ipvlanInfo(s))
}

func ipvlanInfo(s IPVlanSpec) *rtnetlink.LinkInfo {
	return &rtnetlink.LinkInfo{Kind: "ipvlan", Data: &kindData{
		kind: "ipvlan",
		attrs: func(ae *netlink.AttributeEncoder) {
			ae.Uint16(unix.IFLA_IPVLAN_MODE, uint16(s.Mode))
			ae.Uint16(unix.IFLA_IPVLAN_FLAGS, 0) // bridge
		},
	}}
}

// IPVlanMode reads the mode of ipvlan name; a link of another kind gives an
// error matching ErrWrongKind.
func (h *Handle) IPVlanMode(name string) (IPVlanMode, error) {
	var mode IPVlanMode
	err := h.kindAttrs(name, "ipvlan", func(typ uint16, b []byte) {
		if typ == unix.IFLA_IPVLAN_MODE && len(b) == 2 {
			mode = IPVlanMode(binary.NativeEndian.Uint16(b))
		}
	})
	return mode, err
}
