package cni

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
)

// Wire shapes, one per result family. Field order is the
// printed key order: struct order for the 0.x families, byte-wise
// alphabetical for 1.x (the reference's printer round-trips through a map).

type curResult struct {
	CNIVersion string     `json:"cniVersion,omitempty"`
	DNS        *curDNS    `json:"dns,omitempty"`
	Interfaces []curIface `json:"interfaces,omitempty"`
	IPs        []curIP    `json:"ips,omitempty"`
	Routes     []curRoute `json:"routes,omitempty"`
}

type curDNS struct {
	Domain      string   `json:"domain,omitempty"`
	Nameservers []string `json:"nameservers,omitempty"`
	Options     []string `json:"options,omitempty"`
	Search      []string `json:"search,omitempty"`
}

type curIface struct {
	Mac        string `json:"mac,omitempty"`
	MTU        int    `json:"mtu,omitempty"`
	Name       string `json:"name"`
	PciID      string `json:"pciID,omitempty"`
	Sandbox    string `json:"sandbox,omitempty"`
	SocketPath string `json:"socketPath,omitempty"`
}

type curIP struct {
	Address   string `json:"address"`
	Gateway   string `json:"gateway,omitempty"`
	Interface *int   `json:"interface,omitempty"`
}

type curRoute struct {
	AdvMSS   int    `json:"advmss,omitempty"`
	Dst      string `json:"dst"`
	GW       string `json:"gw,omitempty"`
	MTU      int    `json:"mtu,omitempty"`
	Priority int    `json:"priority,omitempty"`
	Scope    *int   `json:"scope,omitempty"`
	Table    *int   `json:"table,omitempty"`
}

type midResult struct {
	CNIVersion string     `json:"cniVersion,omitempty"`
	Interfaces []midIface `json:"interfaces,omitempty"`
	IPs        []midIP    `json:"ips,omitempty"`
	Routes     []oldRoute `json:"routes,omitempty"`
	DNS        oldDNS     `json:"dns"`
}

type midIface struct {
	Name    string `json:"name"`
	Mac     string `json:"mac,omitempty"`
	Sandbox string `json:"sandbox,omitempty"`
}

type midIP struct {
	Version   string `json:"version"`
	Interface *int   `json:"interface,omitempty"`
	Address   string `json:"address"`
	Gateway   string `json:"gateway,omitempty"`
}

type oldRoute struct {
	Dst      string `json:"dst"`
	GW       string `json:"gw,omitempty"`
	MTU      int    `json:"mtu,omitempty"`
	AdvMSS   int    `json:"advmss,omitempty"`
	Priority int    `json:"priority,omitempty"`
	Table    *int   `json:"table,omitempty"`
	Scope    *int   `json:"scope,omitempty"`
}

type oldDNS struct {
	Nameservers []string `json:"nameservers,omitempty"`
	Domain      string   `json:"domain,omitempty"`
	Search      []string `json:"search,omitempty"`
	Options     []string `json:"options,omitempty"`
}

type legResult struct {
	CNIVersion string `json:"cniVersion,omitempty"`
	IP4        *legIP `json:"ip4,omitempty"`
	IP6        *legIP `json:"ip6,omitempty"`
	DNS        oldDNS `json:"dns"`
}

type legIP struct {
	IP      string     `json:"ip"`
	Gateway string     `json:"gateway,omitempty"`
	Routes  []oldRoute `json:"routes,omitempty"`
}

// Encode converts r to version and renders it exactly like the reference
// printer: 4-space indent, HTML-safe escaping, no trailing newline.
func Encode(r *Result, version string) ([]byte, error) {
	c, err := Convert(r, version)
	if err != nil {
		return nil, err
	}
	var v any
	switch FamilyOf(version) {
	case FamilyLegacy:
		v = toLegacy(c)
	case FamilyMiddle:
		v = toMiddle(c)
	default:
		v = toCurrent(c)
	}
	return json.MarshalIndent(v, "", "    ")
}

// MarshalCompact renders r in version as compact JSON (what a runtime stores
// in its cache or passes on as prevResult).
func MarshalCompact(r *Result, version string) ([]byte, error) {
	b, err := Encode(r, version)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func prefixText(p netip.Prefix) string {
	if !p.IsValid() {
		return "<nil>"
	}
	return p.String()
}

func addrText(a netip.Addr) string {
	if !a.IsValid() {
		return ""
	}
	return a.String()
}

func dnsOld(d DNS) oldDNS {
	return oldDNS(d)
}

func routeOld(rt *Route) oldRoute {
	return oldRoute{Dst: prefixText(rt.Dst), GW: addrText(rt.GW), MTU: rt.MTU, AdvMSS: rt.AdvMSS,
		Priority: rt.Priority, Table: rt.Table, Scope: rt.Scope}
}

func toCurrent(r *Result) *curResult {
	out := &curResult{CNIVersion: r.CNIVersion}
	if !r.DNS.IsEmpty() {
		out.DNS = &curDNS{Domain: r.DNS.Domain, Nameservers: r.DNS.Nameservers, Options: r.DNS.Options, Search: r.DNS.Search}
	}
	for _, i := range r.Interfaces {
		out.Interfaces = append(out.Interfaces, curIface{Mac: i.Mac, MTU: i.MTU, Name: i.Name, PciID: i.PciID, Sandbox: i.Sandbox, SocketPath: i.SocketPath})
	}
	for _, ip := range r.IPs {
		out.IPs = append(out.IPs, curIP{Address: prefixText(ip.Address), Gateway: addrText(ip.Gateway), Interface: ip.Interface})
	}
	for _, rt := range r.Routes {
		out.Routes = append(out.Routes, curRoute{AdvMSS: rt.AdvMSS, Dst: prefixText(rt.Dst), GW: addrText(rt.GW), MTU: rt.MTU,
			Priority: rt.Priority, Scope: rt.Scope, Table: rt.Table})
	}
	return out
}

func toMiddle(r *Result) *midResult {
	out := &midResult{CNIVersion: r.CNIVersion, DNS: dnsOld(r.DNS)}
	for _, i := range r.Interfaces {
		out.Interfaces = append(out.Interfaces, midIface{Name: i.Name, Mac: i.Mac, Sandbox: i.Sandbox})
	}
	for _, ip := range r.IPs {
		out.IPs = append(out.IPs, midIP{Version: ip.ipVersion(), Interface: ip.Interface, Address: prefixText(ip.Address), Gateway: addrText(ip.Gateway)})
	}
	for _, rt := range r.Routes {
		out.Routes = append(out.Routes, routeOld(rt))
	}
	return out
}

// toLegacy renders a result already in legacy form (Convert did the lossy
// part): the first address of each family becomes ip4/ip6 and each route
// joins the block of its destination's family.
func toLegacy(r *Result) *legResult {
	out := &legResult{CNIVersion: r.CNIVersion, DNS: dnsOld(r.DNS)}
	for _, ip := range r.IPs {
		blk := &legIP{IP: prefixText(ip.Address), Gateway: addrText(ip.Gateway)}
		switch ip.ipVersion() {
		case "4":
			if out.IP4 == nil {
				out.IP4 = blk
			}
		case "6":
			if out.IP6 == nil {
				out.IP6 = blk
			}
		}
	}
	for _, rt := range r.Routes {
		if blk := legacyBlock(out, rt.Dst); blk != nil {
			blk.Routes = append(blk.Routes, routeOld(rt))
		}
	}
	return out
}

func legacyBlock(r *legResult, dst netip.Prefix) *legIP {
	if dst.Addr().Unmap().Is4() {
		return r.IP4
	}
	if dst.IsValid() {
		return r.IP6
	}
	return nil
}

// Convert returns r as version, lossless within a
// family, lossy across families.
func Convert(r *Result, to string) (*Result, error) {
	if to == "" {
		to = "0.1.0"
	}
	if !contains(AllVersions, to) {
		return nil, fmt.Errorf("no converter for CNI result version %s to %s", r.CNIVersion, to)
	}
	from := FamilyOf(r.CNIVersion)
	out := r.Clone()
	out.CNIVersion = to
	target := FamilyOf(to)
	if from == target {
		return out, nil
	}
	switch target {
	case FamilyCurrent:
		for _, ip := range out.IPs {
			ip.Version, ip.versionRead = "", false
		}
	case FamilyMiddle:
		for _, i := range out.Interfaces {
			i.MTU, i.SocketPath, i.PciID = 0, "", ""
		}
		for _, ip := range out.IPs {
			ip.Version = ip.ipVersion()
		}
	case FamilyLegacy:
		var ip4, ip6 *IPConfig
		for _, ip := range out.IPs {
			switch ip.ipVersion() {
			case "4":
				if ip4 == nil {
					ip4 = &IPConfig{Address: ip.Address, Gateway: ip.Gateway, Version: "4"}
				}
			case "6":
				if ip6 == nil {
					ip6 = &IPConfig{Address: ip.Address, Gateway: ip.Gateway, Version: "6"}
				}
			}
		}
		if ip4 == nil && ip6 == nil {
			return nil, fmt.Errorf("cannot convert: no valid IP addresses")
		}
		out.IPs = nil
		var r4, r6 []*Route
		for _, ip := range []*IPConfig{ip4, ip6} {
			if ip != nil {
				out.IPs = append(out.IPs, ip)
			}
		}
		for _, rt := range out.Routes {
			stripped := &Route{Dst: rt.Dst, GW: rt.GW}
			if rt.Dst.Addr().Unmap().Is4() {
				if ip4 != nil {
					r4 = append(r4, stripped)
				}
			} else if ip6 != nil && rt.Dst.IsValid() {
				r6 = append(r6, stripped)
			}
		}
		out.Routes = append(r4, r6...)
		out.Interfaces = nil
	}
	return out, nil
}

// ParsePrefix parses CIDR text keeping the host bits. It accepts exactly
// what the reference's net.ParseCIDR-based decoding accepts (a leading zero
// in the length, IPv4-mapped forms) with its error text; IPv4-mapped
// addresses become plain IPv4, as the reference prints them.
func ParsePrefix(s string) (netip.Prefix, error) {
	ip, nw, err := net.ParseCIDR(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	ones, size := nw.Mask.Size()
	a, _ := netip.AddrFromSlice(ip.To16())
	if a.Is4In6() {
		a = a.Unmap()
		if size == 128 {
			ones = max(ones-96, 0)
		}
	}
	return netip.PrefixFrom(a, ones), nil
}

// ParseAddr parses an IP address as net.ParseIP does, with the reference's
// error text; IPv4-mapped addresses become plain IPv4.
func ParseAddr(s string) (netip.Addr, error) {
	ip := net.ParseIP(s)
	if ip == nil {
		return netip.Addr{}, fmt.Errorf("invalid IP address: %s", s)
	}
	a, _ := netip.AddrFromSlice(ip)
	return a.Unmap(), nil
}
