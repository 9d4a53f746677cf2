package addrconf

import (
	"errors"
	"fmt"
	"net"

	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/netlinkx"
)

// The CHECK helpers every interface plugin shares, the counterpart of
// ConfigureInterface. Their messages are
// the reference's, word for word, capitalisation and odd wording included.

// ContainerInterface picks the container interface out of a prevResult's
// interfaces: the last entry named ifName whose sandbox is netns. When
// there is none the zero Interface comes back with the reference's
// sandbox-mismatch error, whose left side is then empty. Callers that check
// other entries first (bridge: its bridge) return that error when they get
// to the container interface.
func ContainerInterface(ifaces []*cni.Interface, ifName, netns string) (cni.Interface, error) {
	var cont cni.Interface
	for _, intf := range ifaces {
		if intf.Name == ifName && intf.Sandbox == netns {
			cont = *intf
		}
	}
	if netns != cont.Sandbox {
		return cont, fmt.Errorf("Sandbox in prevResult %s doesn't match configured netns: %s", cont.Sandbox, netns)
	}
	return cont, nil
}

// CheckAddresses verifies each prevResult address on ifName and that the
// main table has a route to its network (the message says "Gateway"
// although any route to the subnet will do, so a /32 without a subnet
// route fails, as in the reference).
func CheckAddresses(h *netlinkx.Handle, ifName string, ips []*cni.IPConfig) error {
	for _, ip := range ips {
		if _, err := h.LinkByName(ifName); err != nil {
			return fmt.Errorf("Cannot find container link %v", ifName)
		}
		addrs, err := h.Addrs(ifName, 0)
		if err != nil {
			return errors.New("Cannot obtain List of IP Addresses")
		}
		found := false
		for _, ad := range addrs {
			if ad.Prefix.Addr().Unmap() == ip.Address.Addr().Unmap() && ad.Prefix.Bits() == ip.Address.Bits() {
				found = true
				break
			}
		}
		if !found {
			return fmt.Errorf("Failed to match addr %v on interface %v", ip.Address, ifName)
		}
		fam := unix.AF_INET6
		if ip.Address.Addr().Is4() {
			fam = unix.AF_INET
		}
		routes, err := h.Routes(fam, 0)
		if err != nil {
			return fmt.Errorf("Error %v trying to find Gateway %v for interface %v", netlinkx.Cause(err), addrOrNil(ip.Gateway), ifName)
		}
		found = false
		for _, rt := range routes {
			if rt.Dst == ip.Address.Masked() {
				found = true
				break
			}
		}
		if !found {
			return fmt.Errorf("Failed to find Gateway %v for interface %v", addrOrNil(ip.Gateway), ifName)
		}
	}
	return nil
}

// CheckRoutes verifies each prevResult route: a route to the same
// destination (with the same gateway, if one is given) must exist; for a
// default route any default route will do. Routes naming a table are
// looked for in that table — the reference only searched the main table,
// so such routes could never be found.
func CheckRoutes(h *netlinkx.Handle, routes []*cni.Route) error {
	for _, want := range routes {
		if !want.Dst.IsValid() {
			return fmt.Errorf("Invalid static route found %s", routeText(want))
		}
		fam := unix.AF_INET6
		if want.Dst.Addr().Is4() {
			fam = unix.AF_INET
		}
		table := 0
		if want.Table != nil {
			table = *want.Table
		}
		have, err := h.Routes(fam, table)
		if err != nil {
			return fmt.Errorf("Expected Route %s not route table lookup error %v", routeText(want), netlinkx.Cause(err))
		}
		dst := want.Dst.Masked()
		found := false
		for _, rt := range have {
			if rt.Dst != dst {
				continue
			}
			if dst.Bits() == 0 || !want.GW.IsValid() || rt.Gw == want.GW {
				found = true
				break
			}
		}
		if !found {
			return fmt.Errorf("Expected Route %s not found in routing table", routeText(want))
		}
	}
	return nil
}

// routeText renders a route the way the reference's messages print one
// (Go's %+v of its route struct), e.g.
// {Dst:{IP:10.0.0.0 Mask:ffffff00} GW:<nil> MTU:0 AdvMSS:0 Priority:0 Table:<nil> Scope:<nil>}.
func routeText(r *cni.Route) string {
	dst := "{IP:<nil> Mask:<nil>}"
	if r.Dst.IsValid() {
		m := r.Dst.Masked()
		bits := 32
		if m.Addr().Is6() {
			bits = 128
		}
		dst = fmt.Sprintf("{IP:%s Mask:%s}", m.Addr(), net.CIDRMask(m.Bits(), bits).String())
	}
	opt := func(p *int) string {
		if p == nil {
			return "<nil>"
		}
		return fmt.Sprint(*p)
	}
	return fmt.Sprintf("{Dst:%s GW:%s MTU:%d AdvMSS:%d Priority:%d Table:%s Scope:%s}",
		dst, addrOrNil(r.GW), r.MTU, r.AdvMSS, r.Priority, opt(r.Table), opt(r.Scope))
}
