package daemon

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/insomniacslk/dhcp/dhcpv4"

	"github.com/nftcni/nftcni/cni"
)

// scopeLink is RT_SCOPE_LINK, given to classless routes whose router is
// 0.0.0.0 (on-link, RFC 3442).
const scopeLink = 253

// errNoMask is the reference's text for an ACK without option 1.
var errNoMask = errors.New("DHCP option Subnet Mask not found in DHCPACK")

// buildResult turns an ACK into the result the plugin prints:
// one address with the ACK's mask, the
// first router as gateway, routes from option 121 — or else option 33
// followed by a default route — and, unlike the reference, "dns" from
// options 6, 15 and 119.
func buildResult(ack *dhcpv4.DHCPv4, priority int) (*cni.Result, error) {
	mask := ack.SubnetMask()
	if mask == nil {
		return nil, errNoMask
	}
	ones, bits := mask.Size()
	if bits != 32 {
		return nil, fmt.Errorf("DHCPACK carries an invalid subnet mask %v", mask)
	}
	ip, ok := addr4(ack.YourIPAddr)
	if !ok || ip.IsUnspecified() {
		return nil, fmt.Errorf("DHCPACK carries no address (yiaddr %v)", ack.YourIPAddr)
	}
	res := &cni.Result{CNIVersion: cni.CurrentVersion}
	ipc := &cni.IPConfig{Address: netip.PrefixFrom(ip, ones)}
	var router netip.Addr
	if rs := ack.Router(); len(rs) > 0 {
		router, _ = addr4(rs[0])
		ipc.Gateway = router
	}
	res.IPs = []*cni.IPConfig{ipc}

	if classless := ack.ClasslessStaticRoute(); len(classless) > 0 {
		for _, r := range classless {
			dst, ok := prefixOf(r.Dest)
			if !ok {
				continue
			}
			gw, _ := addr4(r.Router)
			rt := &cni.Route{Dst: dst, GW: gw}
			if gw.IsUnspecified() {
				rt.Scope = cni.Int(scopeLink)
			}
			res.Routes = append(res.Routes, rt)
		}
	} else {
		res.Routes = staticRoutes(ack.Options.Get(dhcpv4.OptionStaticRoutingTable))
		if router.IsValid() {
			res.Routes = append(res.Routes, &cni.Route{Dst: netip.PrefixFrom(netip.IPv4Unspecified(), 0), GW: router})
		}
	}
	if priority != 0 {
		for _, rt := range res.Routes {
			rt.Priority = priority
		}
	}

	for _, ns := range ack.DNS() {
		if a, ok := addr4(ns); ok {
			res.DNS.Nameservers = append(res.DNS.Nameservers, a.String())
		}
	}
	res.DNS.Domain = ack.DomainName()
	if l := ack.DomainSearch(); l != nil {
		res.DNS.Search = append(res.DNS.Search, l.Labels...)
	}
	return res, nil
}

// staticRoutes decodes option 33: pairs of destination and router, the
// destination's mask being its classful one (A /8, B /16, C /24). Class
// D and E destinations have none and are skipped.
func staticRoutes(b []byte) []*cni.Route {
	var out []*cni.Route
	for ; len(b) >= 8; b = b[8:] {
		dst := netip.AddrFrom4([4]byte(b[0:4]))
		gw := netip.AddrFrom4([4]byte(b[4:8]))
		var bits int
		switch first := b[0]; {
		case first < 128:
			bits = 8
		case first < 192:
			bits = 16
		case first < 224:
			bits = 24
		default:
			continue
		}
		out = append(out, &cni.Route{Dst: netip.PrefixFrom(dst, bits), GW: gw})
	}
	return out
}

func addr4(ip net.IP) (netip.Addr, bool) {
	v4 := ip.To4()
	if v4 == nil {
		return netip.Addr{}, false
	}
	return netip.AddrFrom4([4]byte(v4)), true
}

func prefixOf(n *net.IPNet) (netip.Prefix, bool) {
	if n == nil {
		return netip.Prefix{}, false
	}
	a, ok := addr4(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, bits := n.Mask.Size()
	if bits != 32 {
		return netip.Prefix{}, false
	}
	return netip.PrefixFrom(a, ones), true
}

// mergeResults joins the results of an attachment's leases, in family
// order: addresses and routes one after the other, name servers and
// search domains without repeats, the first domain name.
func mergeResults(parts []*cni.Result) *cni.Result {
	out := &cni.Result{CNIVersion: cni.CurrentVersion}
	for _, p := range parts {
		out.IPs = append(out.IPs, p.IPs...)
		out.Routes = append(out.Routes, p.Routes...)
		out.DNS.Nameservers = appendNew(out.DNS.Nameservers, p.DNS.Nameservers...)
		out.DNS.Search = appendNew(out.DNS.Search, p.DNS.Search...)
		if out.DNS.Domain == "" {
			out.DNS.Domain = p.DNS.Domain
		}
	}
	return out
}

// appendNew appends the values of vs that list does not hold yet.
func appendNew(list []string, vs ...string) []string {
	for _, v := range vs {
		if !slices.Contains(list, v) {
			list = append(list, v)
		}
	}
	return list
}
