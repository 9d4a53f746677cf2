package netlinkx

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/jsimonetti/rtnetlink/v2"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Route is a routing table entry.
type Route struct {
	Dst       netip.Prefix // required; 0.0.0.0/0 or ::/0 for a default route
	Gw        netip.Addr   // zero: a device route
	Src       netip.Addr   // preferred source (RTA_PREFSRC)
	LinkIndex int          // output device
	// Table 0 means main (254).
	Table int
	// Scope 0 (RT_SCOPE_UNIVERSE) means: link scope for a route with no Gw
	// and a LinkIndex, universe otherwise — what `ip route add` does.
	Scope    uint8
	Priority int   // metric
	Protocol uint8 // 0 means boot (RTPROT_BOOT), as `ip route add`
	Type     uint8 // 0 means unicast (RTN_UNICAST)
	MTU      int   // RTAX_MTU; 0: unset
	AdvMSS   int   // RTAX_ADVMSS; 0: unset
	// OnLink (RTNH_F_ONLINK) takes Gw as on the link even when no route
	// of the link covers it.
	OnLink bool
	Tos    uint8 // the IPv4 TOS the route is for; 0: any
}

// ReservedTable reports the routing tables that are the kernel's own and
// that no plugin may take for itself or empty: default (253), main (254),
// local (255), and 0 (RT_TABLE_UNSPEC), which is no table of its own: in a
// request it means main (here as in the kernel), and the kernel refuses to
// bind a VRF to it.
func ReservedTable(t int) bool {
	switch t {
	case unix.RT_TABLE_UNSPEC, unix.RT_TABLE_DEFAULT, unix.RT_TABLE_MAIN, unix.RT_TABLE_LOCAL:
		return true
	}
	return false
}

func tableOf(t int) int {
	if t == 0 {
		return unix.RT_TABLE_MAIN
	}
	return t
}

// setTable stores a table id the way iproute2 does: in the header when it
// fits in 8 bits, else in RTA_TABLE with the header saying "unspecified".
func setTable(m *rtnetlink.RouteMessage, t int) {
	if t < 256 {
		m.Table = uint8(t)
		return
	}
	m.Table = unix.RT_TABLE_UNSPEC
	m.Attributes.Table = uint32(t)
}

func ipOf(a netip.Addr) net.IP {
	if !a.IsValid() {
		return nil
	}
	return net.IP(a.AsSlice())
}

// routeMsg encodes r. For deletion, unset fields stay wildcards (scope
// RT_SCOPE_NOWHERE, protocol and type 0) so the kernel matches any value.
// With exact (a route as read), scope, protocol and type go as they are,
// without AddRoute's defaults.
func routeMsg(r Route, del, exact bool) (*rtnetlink.RouteMessage, error) {
	if !r.Dst.IsValid() {
		return nil, errors.New("route has no destination")
	}
	dst := r.Dst.Masked()
	m := &rtnetlink.RouteMessage{
		Family:    family(dst.Addr()),
		DstLength: uint8(dst.Bits()),
		Protocol:  r.Protocol,
		Scope:     r.Scope,
		Type:      r.Type,
		Tos:       r.Tos,
		Attributes: rtnetlink.RouteAttributes{
			Gateway:  ipOf(r.Gw),
			Src:      ipOf(r.Src),
			OutIface: uint32(r.LinkIndex),
			Priority: uint32(r.Priority),
		},
	}
	if dst.Bits() > 0 {
		m.Attributes.Dst = ipOf(dst.Addr())
	}
	setTable(m, tableOf(r.Table))
	if r.OnLink {
		m.Flags = unix.RTNH_F_ONLINK
	}
	if r.MTU > 0 || r.AdvMSS > 0 {
		m.Attributes.Metrics = &rtnetlink.RouteMetrics{MTU: uint32(r.MTU), AdvMSS: uint32(r.AdvMSS)}
	}
	if del {
		if m.Scope == unix.RT_SCOPE_UNIVERSE {
			m.Scope = unix.RT_SCOPE_NOWHERE
		}
		return m, nil
	}
	if exact {
		return m, nil
	}
	if m.Protocol == 0 {
		m.Protocol = unix.RTPROT_BOOT
	}
	if m.Type == 0 {
		m.Type = unix.RTN_UNICAST
	}
	if m.Scope == unix.RT_SCOPE_UNIVERSE && !r.Gw.IsValid() && r.LinkIndex != 0 {
		m.Scope = unix.RT_SCOPE_LINK
	}
	return m, nil
}

// describe renders r like `ip route` would, naming the device, for error
// messages.
func (h *Handle) describe(r Route) string {
	var b strings.Builder
	b.WriteString(r.Dst.String())
	if r.Gw.IsValid() {
		b.WriteString(" via " + r.Gw.String())
	}
	if r.LinkIndex != 0 {
		name := fmt.Sprintf("if%d", r.LinkIndex)
		if l, err := h.LinkByIndex(r.LinkIndex); err == nil {
			name = l.Name
		}
		b.WriteString(" dev " + name)
	}
	if t := tableOf(r.Table); t != unix.RT_TABLE_MAIN {
		fmt.Fprintf(&b, " table %d", t)
	}
	if r.Priority != 0 {
		fmt.Fprintf(&b, " metric %d", r.Priority)
	}
	return b.String()
}

func (h *Handle) route(verb string, r Route, typ uint16, flags netlink.HeaderFlags) error {
	return h.routeExact(verb, r, typ, flags, false)
}

func (h *Handle) routeExact(verb string, r Route, typ uint16, flags netlink.HeaderFlags, exact bool) error {
	m, err := routeMsg(r, typ == unix.RTM_DELROUTE, exact)
	if err == nil {
		err = h.do(m, typ, flags)
	}
	if err != nil {
		return fail(verb+" route "+h.describe(r), err)
	}
	return nil
}

// AddRoute adds r; an existing route with the same key (destination, table,
// metric, ...) gives an error matching unix.EEXIST.
func (h *Handle) AddRoute(r Route) error {
	return h.route("adding", r, unix.RTM_NEWROUTE, netlink.Create|netlink.Excl)
}

// AddRouteAsRead adds r as Routes or LinkRoutes read it (from another
// namespace, or before its link left): its scope, protocol and type are
// taken as they are, where AddRoute fills in `ip route add`'s defaults.
// An existing route with the same key gives an error matching unix.EEXIST.
func (h *Handle) AddRouteAsRead(r Route) error {
	return h.routeExact("adding", r, unix.RTM_NEWROUTE, netlink.Create|netlink.Excl, true)
}

// AppendRoute adds r with NLM_F_CREATE alone (no NLM_F_EXCL), as the
// reference's ConfigureIface does: a route differing only in next hop joins
// the existing one (as a multipath sibling for IPv6), while an exactly
// identical route still fails with EEXIST.
func (h *Handle) AppendRoute(r Route) error {
	return h.route("adding", r, unix.RTM_NEWROUTE, netlink.Create)
}

// ReplaceRoute adds r or replaces the route with the same key.
func (h *Handle) ReplaceRoute(r Route) error {
	return h.route("replacing", r, unix.RTM_NEWROUTE, netlink.Create|netlink.Replace)
}

// DelRoute deletes the route matching r; fields left zero match anything. A
// missing route gives an error matching unix.ESRCH.
func (h *Handle) DelRoute(r Route) error {
	return h.route("deleting", r, unix.RTM_DELROUTE, 0)
}

// Routes lists the routes of one table (0: main) for the family
// (unix.AF_INET, unix.AF_INET6, or 0 for both). Cached clones are not
// included. A table that does not exist yet is empty.
func (h *Handle) Routes(family int, table int) ([]Route, error) {
	table = tableOf(table)
	op := fmt.Sprintf("listing routes of table %d", table)
	var out []Route
	for _, fam := range families(family) {
		req := &rtnetlink.RouteMessage{Family: uint8(fam)}
		if h.strict {
			setTable(req, table) // kernel-side filter
		}
		msgs, err := h.dump(req, unix.RTM_GETROUTE)
		if errors.Is(err, unix.ENOENT) && h.strict {
			continue // "FIB table does not exist"
		}
		if err != nil {
			return nil, fail(op, err)
		}
		for _, m := range msgs {
			rm, ok := m.(*rtnetlink.RouteMessage)
			if !ok || int(rm.Family) != fam || rm.Flags&unix.RTM_F_CLONED != 0 {
				continue
			}
			if r := toRoute(rm); r.Table == table {
				out = append(out, r)
			}
		}
	}
	return out, nil
}

// LinkRoutes lists the routes of every table, both families, whose output
// device is the link with the given index: the routes the kernel removes
// when the link leaves the namespace. Cloned routes are left out, and so
// are multipath routes (they have no single output device).
func (h *Handle) LinkRoutes(index int) ([]Route, error) {
	op := fmt.Sprintf("listing routes of link %d", index)
	var out []Route
	for _, fam := range families(0) {
		msgs, err := h.dump(&rtnetlink.RouteMessage{Family: uint8(fam)}, unix.RTM_GETROUTE)
		if err != nil {
			return nil, fail(op, err)
		}
		for _, m := range msgs {
			rm, ok := m.(*rtnetlink.RouteMessage)
			if !ok || int(rm.Family) != fam || rm.Flags&unix.RTM_F_CLONED != 0 || int(rm.Attributes.OutIface) != index {
				continue
			}
			out = append(out, toRoute(rm))
		}
	}
	return out, nil
}

func toRoute(m *rtnetlink.RouteMessage) Route {
	a := &m.Attributes
	dst, _ := netip.AddrFromSlice(a.Dst)
	if !dst.IsValid() {
		dst = netip.IPv4Unspecified()
		if m.Family == unix.AF_INET6 {
			dst = netip.IPv6Unspecified()
		}
	}
	r := Route{
		Dst:       netip.PrefixFrom(dst, int(m.DstLength)),
		LinkIndex: int(a.OutIface),
		Table:     int(m.Table),
		Scope:     m.Scope,
		Priority:  int(a.Priority),
		Protocol:  m.Protocol,
		Type:      m.Type,
		OnLink:    m.Flags&unix.RTNH_F_ONLINK != 0,
		Tos:       m.Tos,
	}
	r.Gw, _ = netip.AddrFromSlice(a.Gateway)
	r.Src, _ = netip.AddrFromSlice(a.Src)
	if a.Table != 0 {
		r.Table = int(a.Table)
	}
	if a.Metrics != nil {
		r.MTU = int(a.Metrics.MTU)
		r.AdvMSS = int(a.Metrics.AdvMSS)
	}
	return r
}
