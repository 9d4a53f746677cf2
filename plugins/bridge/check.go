package bridge

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/netns"
)

// cmdCheck verifies that the attachment described by prevResult still
// exists (contract §1.9): the bridge, the container veth, the host veth
// joining them, and the container's addresses and routes. Unlike the
// reference, a layer-2-only config (no IPAM) is checked too instead of
// failing on the missing IPAM type.
func cmdCheck(ctx context.Context, a *cni.CmdArgs) error {
	conf, err := loadConf(a.StdinData, a.Args)
	if err != nil {
		return err
	}
	ctrNS, err := netns.Open(a.Netns)
	if err != nil {
		return fmt.Errorf("failed to open netns %q: %w", a.Netns, err)
	}
	defer ctrNS.Close()

	if conf.isL3() {
		if err := cni.DelegateCheck(ctx, conf.IPAM.Type, a); err != nil {
			return err
		}
	}
	if conf.RawPrevResult == nil {
		return errors.New("Required prevResult missing")
	}
	result, err := conf.PrevResult()
	if err != nil {
		return err
	}
	if result == nil {
		return errors.New("Required prevResult missing")
	}

	var brEntry, contEntry cni.Interface
	for _, intf := range result.Interfaces {
		if intf.Name == conf.BrName {
			brEntry = *intf
		} else if intf.Name == a.IfName && intf.Sandbox == a.Netns {
			contEntry = *intf
		}
	}

	hh, err := netlinkx.Open(nil)
	if err != nil {
		return err
	}
	defer hh.Close()
	hc, err := netlinkx.Open(ctrNS)
	if err != nil {
		return err
	}
	defer hc.Close()

	brLink, err := validateInterface(hh, brEntry, false)
	if err != nil {
		return err
	}
	if brLink.Kind != "bridge" {
		return fmt.Errorf("Interface %s does not have link type of bridge", brEntry.Name)
	}
	if brEntry.Mac != "" && brEntry.Mac != brLink.MAC.String() {
		return fmt.Errorf("Bridge interface %s Mac doesn't match: %s", brEntry.Name, brEntry.Mac)
	}
	if brLink.Promisc != conf.PromiscMode {
		return fmt.Errorf("Bridge interface %s configured Promisc Mode %v doesn't match current state: %v ",
			brEntry.Name, conf.PromiscMode, brLink.Promisc)
	}

	if a.Netns != contEntry.Sandbox {
		return fmt.Errorf("Sandbox in prevResult %s doesn't match configured netns: %s", contEntry.Sandbox, a.Netns)
	}

	contLink, err := validateInterface(hc, contEntry, true)
	if err != nil {
		return err
	}
	if contLink.Kind != "veth" {
		return fmt.Errorf("Error: Container interface %s not of type veth", contLink.Name)
	}
	if contLink.ParentIndex <= 0 {
		return fmt.Errorf("Unable to obtain veth peer index for veth %s", contLink.Name)
	}
	if contEntry.Mac != "" && contEntry.Mac != contLink.MAC.String() {
		return fmt.Errorf("Interface %s Mac %s doesn't match container Mac: %s", contEntry.Name, contEntry.Mac, contLink.MAC)
	}

	// The host veth: the first veth among the other entries whose peer is
	// the container interface and whose master is the bridge.
	vethFound := false
	for _, intf := range result.Interfaces {
		if intf.Name == brEntry.Name || intf.Name == contEntry.Name {
			continue
		}
		l, err := validateInterface(hh, *intf, false)
		if err != nil {
			return err
		}
		if l.Kind != "veth" {
			continue
		}
		if l.ParentIndex <= 0 {
			return fmt.Errorf("Unable to obtain veth peer index for veth %s", l.Name)
		}
		if l.Index != contLink.ParentIndex || contLink.Index != l.ParentIndex || l.MasterIndex != brLink.Index {
			continue
		}
		if intf.Mac != "" && intf.Mac != l.MAC.String() {
			return fmt.Errorf("Interface %s Mac doesn't match: %s not found", intf.Name, intf.Mac)
		}
		vethFound = true
		break
	}
	if !vethFound {
		return fmt.Errorf("CNI veth created for bridge %s was not found", conf.BrName)
	}

	if err := checkAddrs(hc, a.IfName, result.IPs); err != nil {
		return err
	}
	return checkRoutes(hc, result.Routes)
}

// validateInterface looks a prevResult entry up in h's namespace and checks
// it is (or is not) expected in a sandbox.
func validateInterface(h *netlinkx.Handle, intf cni.Interface, inSandbox bool) (netlinkx.Link, error) {
	if intf.Name == "" {
		return netlinkx.Link{}, errors.New("Interface name missing ")
	}
	l, err := h.LinkByName(intf.Name)
	if err != nil {
		return l, fmt.Errorf("Interface name %s not found", intf.Name)
	}
	if inSandbox && intf.Sandbox == "" {
		return l, fmt.Errorf("Interface %s is expected to be in a sandbox", intf.Name)
	}
	if !inSandbox && intf.Sandbox != "" {
		return l, fmt.Errorf("Interface %s should not be in sandbox", intf.Name)
	}
	return l, nil
}

// checkAddrs verifies each prevResult address on ifName and that the main
// table has a route to its network (contract §11.9; the message says
// "Gateway" although any route to the subnet will do).
func checkAddrs(h *netlinkx.Handle, ifName string, ips []*cni.IPConfig) error {
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
			return fmt.Errorf("Error %v trying to find Gateway %v for interface %v", unwrap(err), ipOrNil(ip.Gateway), ifName)
		}
		found = false
		for _, rt := range routes {
			if rt.Dst == ip.Address.Masked() {
				found = true
				break
			}
		}
		if !found {
			return fmt.Errorf("Failed to find Gateway %v for interface %v", ipOrNil(ip.Gateway), ifName)
		}
	}
	return nil
}

// checkRoutes verifies each prevResult route: a route to the same
// destination (with the same gateway, if one is given) must exist; for a
// default route any default route will do. Routes naming a table are
// looked for in that table — the reference only searched the main table,
// so such routes could never be found.
func checkRoutes(h *netlinkx.Handle, routes []*cni.Route) error {
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
			return fmt.Errorf("Expected Route %s not route table lookup error %v", routeText(want), unwrap(err))
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

func ipOrNil(a netip.Addr) string {
	if !a.IsValid() {
		return "<nil>"
	}
	return a.String()
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
		dst, ipOrNil(r.GW), r.MTU, r.AdvMSS, r.Priority, opt(r.Table), opt(r.Scope))
}
