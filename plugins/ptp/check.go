package ptp

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

// cmdCheck verifies the container side of the attachment described by
// prevResult (contract §2.5): the container veth, its addresses and
// routes. The host side is not examined, as in the reference.
func cmdCheck(ctx context.Context, a *cni.CmdArgs) error {
	conf, err := loadConf(a.StdinData)
	if err != nil {
		return err
	}
	ctrNS, err := netns.Open(a.Netns)
	if err != nil {
		return fmt.Errorf("failed to open netns %q: %w", a.Netns, err)
	}
	defer ctrNS.Close()
	if err := cni.DelegateCheck(ctx, conf.IPAM.Type, a); err != nil {
		return err
	}
	if conf.RawPrevResult == nil {
		return errors.New("ptp: Required prevResult missing")
	}
	result, err := conf.PrevResult()
	if err != nil {
		return err
	}
	if result == nil {
		return errors.New("ptp: Required prevResult missing")
	}
	var contEntry cni.Interface
	for _, intf := range result.Interfaces {
		if intf.Name == a.IfName && intf.Sandbox == a.Netns {
			contEntry = *intf
		}
	}
	if a.Netns != contEntry.Sandbox {
		return fmt.Errorf("Sandbox in prevResult %s doesn't match configured netns: %s", contEntry.Sandbox, a.Netns)
	}

	hc, err := netlinkx.Open(ctrNS)
	if err != nil {
		return err
	}
	defer hc.Close()
	if contEntry.Name == "" {
		return fmt.Errorf("Container interface name missing in prevResult: %v", contEntry.Name)
	}
	l, err := hc.LinkByName(contEntry.Name)
	if err != nil {
		return fmt.Errorf("ptp: Container Interface name in prevResult: %s not found", contEntry.Name)
	}
	if contEntry.Sandbox == "" {
		return fmt.Errorf("ptp: Error: Container interface %s should not be in host namespace", l.Name)
	}
	if l.Kind != "veth" {
		return fmt.Errorf("Error: Container interface %s not of type veth/p2p", l.Name)
	}
	if contEntry.Mac != "" && contEntry.Mac != l.MAC.String() {
		return fmt.Errorf("ptp: Interface %s Mac %s doesn't match container Mac: %s", contEntry.Name, contEntry.Mac, l.MAC)
	}
	if err := checkAddrs(hc, a.IfName, result.IPs); err != nil {
		return err
	}
	return checkRoutes(hc, result.Routes)
}

// The address and route checks below are the same as the bridge plugin's
// (contract §11.9).

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
