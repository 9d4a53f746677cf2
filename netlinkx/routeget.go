package netlinkx

import (
	"fmt"
	"net/netip"

	"github.com/jsimonetti/rtnetlink/v2"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// RouteTo asks the kernel which route a packet to dst would take (`ip route
// get <dst>`): the answer's LinkIndex is the output device.
func (h *Handle) RouteTo(dst netip.Addr) (Route, error) {
	fam := uint8(unix.AF_INET)
	if dst.Is6() && !dst.Is4In6() {
		fam = unix.AF_INET6
	}
	dst = dst.Unmap()
	req := &rtnetlink.RouteMessage{
		Family:     fam,
		DstLength:  uint8(dst.BitLen()),
		Attributes: rtnetlink.RouteAttributes{Dst: ipOf(dst)},
	}
	msgs, _, err := h.exchange(req, unix.RTM_GETROUTE, netlink.Request)
	if err != nil {
		return Route{}, fail(fmt.Sprintf("looking up the route to %s", dst), err)
	}
	for _, m := range msgs {
		if rm, ok := m.(*rtnetlink.RouteMessage); ok {
			return toRoute(rm), nil
		}
	}
	return Route{}, fail(fmt.Sprintf("looking up the route to %s", dst), unix.ENETUNREACH)
}
