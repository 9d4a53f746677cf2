package netlinkx

import (
	"encoding/binary"
	"fmt"

	"github.com/jsimonetti/rtnetlink/v2"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// MacvlanMode is a macvlan's mode (IFLA_MACVLAN_MODE, MACVLAN_MODE_*).
type MacvlanMode uint32

// Macvlan modes, as the kernel numbers them.
const (
	MacvlanPrivate  MacvlanMode = 1
	MacvlanVEPA     MacvlanMode = 2
	MacvlanBridge   MacvlanMode = 4
	MacvlanPassthru MacvlanMode = 8
	MacvlanSource   MacvlanMode = 16
)

// String returns the mode as `ip link` and the CNI config spell it.
func (m MacvlanMode) String() string {
	switch m {
	case MacvlanPrivate:
		return "private"
	case MacvlanVEPA:
		return "vepa"
	case MacvlanBridge:
		return "bridge"
	case MacvlanPassthru:
		return "passthru"
	case MacvlanSource:
		return "source"
	}
	return fmt.Sprintf("mode(%d)", uint32(m))
}

// MacvlanSpec describes a macvlan to create.
type MacvlanSpec struct {
	ChildSpec
	Mode MacvlanMode // 0: the kernel's default (vepa)
	// BcQueueLen is the broadcast/multicast receive queue length; 0: the
	// kernel's default. Kernels before 5.11 reject it.
	BcQueueLen uint32
}

// AddMacvlan creates a macvlan on s.Parent.
func (h *Handle) AddMacvlan(s MacvlanSpec) error {
	return h.addKind(fmt.Sprintf("adding macvlan %q", s.Name), s.ChildSpec, macvlanInfo(s))
}

func macvlanInfo(s MacvlanSpec) *rtnetlink.LinkInfo {
	return &rtnetlink.LinkInfo{Kind: "macvlan", Data: &kindData{
		kind: "macvlan",
		attrs: func(ae *netlink.AttributeEncoder) {
			if s.Mode != 0 {
				ae.Uint32(unix.IFLA_MACVLAN_MODE, uint32(s.Mode))
			}
			if s.BcQueueLen > 0 {
				ae.Uint32(unix.IFLA_MACVLAN_BC_QUEUE_LEN, s.BcQueueLen)
			}
		},
	}}
}

// MacvlanInfo is what Macvlan reads back of a macvlan.
type MacvlanInfo struct {
	Mode       MacvlanMode
	BcQueueLen uint32 // as requested; 0: not reported (kernels before 5.11)
}

// Macvlan reads the macvlan attributes of link name; a link of another
// kind gives an error matching ErrWrongKind.
func (h *Handle) Macvlan(name string) (MacvlanInfo, error) {
	var info MacvlanInfo
	err := h.kindAttrs(name, "macvlan", func(typ uint16, b []byte) {
		if len(b) != 4 {
			return
		}
		switch typ {
		case unix.IFLA_MACVLAN_MODE:
			info.Mode = MacvlanMode(binary.NativeEndian.Uint32(b))
		case unix.IFLA_MACVLAN_BC_QUEUE_LEN:
			info.BcQueueLen = binary.NativeEndian.Uint32(b)
		}
	})
	return info, err
}
