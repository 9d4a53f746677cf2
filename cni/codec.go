package cni

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// Wire shapes, one per result family (protocol.md §7). Field order is the
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

// anyResult is the union of every family's keys, for decoding. JSON keys
// match case-insensitively, as with the reference's decoder.
type anyResult struct {
	CNIVersion *string `json:"cniVersion"`
	Interfaces []struct {
		Name       string `json:"name"`
		Mac        string `json:"mac"`
		MTU        int    `json:"mtu"`
		Sandbox    string `json:"sandbox"`
		SocketPath string `json:"socketPath"`
		PciID      string `json:"pciID"`
	} `json:"interfaces"`
	IPs []struct {
		Version   string  `json:"version"`
		Interface *int    `json:"interface"`
		Address   string  `json:"address"`
		Gateway   *string `json:"gateway"`
	} `json:"ips"`
	Routes []oldRoute `json:"routes"`
	DNS    oldDNS     `json:"dns"`
	IP4    *legInIP   `json:"ip4"`
	IP6    *legInIP   `json:"ip6"`
}

type legInIP struct {
	IP      string     `json:"ip"`
	Gateway *string    `json:"gateway"`
	Routes  []oldRoute `json:"routes"`
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
	return oldDNS{Nameservers: d.Nameservers, Domain: d.Domain, Search: d.Search, Options: d.Options}
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

// Convert returns r as version, applying protocol.md §9: lossless within a
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
			ip.Version = ""
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

func parseOptAddr(s *string) (netip.Addr, error) {
	if s == nil || *s == "" {
		return netip.Addr{}, nil
	}
	return ParseAddr(*s)
}

func parseRoutes(in []oldRoute) ([]*Route, error) {
	var out []*Route
	for _, r := range in {
		rt := &Route{MTU: r.MTU, AdvMSS: r.AdvMSS, Priority: r.Priority, Table: r.Table, Scope: r.Scope}
		if r.Dst != "" {
			p, err := ParsePrefix(r.Dst)
			if err != nil {
				return nil, err
			}
			rt.Dst = p
		}
		if r.GW != "" {
			a, err := ParseAddr(r.GW)
			if err != nil {
				return nil, err
			}
			rt.GW = a
		}
		out = append(out, rt)
	}
	return out, nil
}

// DecodeResult parses data as a result of the declared version's family
// (protocol.md §7.4). The cniVersion inside data must belong to that family;
// when data has none, declared is used for the legacy family only.
func DecodeResult(data []byte, declared string) (*Result, error) {
	fam := FamilyOf(declared)
	if fam == FamilyNone {
		return nil, fmt.Errorf("unsupported CNI result version %q", declared)
	}
	var w anyResult
	if err := json.Unmarshal(data, &w); err != nil {
		return nil, err
	}
	inner := ""
	if w.CNIVersion != nil {
		inner = *w.CNIVersion
	}
	if !contains(fam.versions(), inner) {
		return nil, fmt.Errorf("result type supports %v but unmarshalled CNIVersion is %q", fam.versions(), inner)
	}
	if inner == "" {
		inner = "0.1.0"
	}
	return fromWire(&w, inner, fam)
}

func fromWire(w *anyResult, version string, fam Family) (*Result, error) {
	r := &Result{CNIVersion: version, DNS: DNS{Nameservers: w.DNS.Nameservers, Domain: w.DNS.Domain, Search: w.DNS.Search, Options: w.DNS.Options}}
	if fam == FamilyLegacy {
		for _, blk := range []struct {
			ip  *legInIP
			ver string
		}{{w.IP4, "4"}, {w.IP6, "6"}} {
			if blk.ip == nil {
				continue
			}
			p, err := ParsePrefix(blk.ip.IP)
			if err != nil {
				return nil, err
			}
			gw, err := parseOptAddr(blk.ip.Gateway)
			if err != nil {
				return nil, err
			}
			r.IPs = append(r.IPs, &IPConfig{Address: p, Gateway: gw, Version: blk.ver})
			rts, err := parseRoutes(blk.ip.Routes)
			if err != nil {
				return nil, err
			}
			r.Routes = append(r.Routes, rts...)
		}
		return r, nil
	}
	for _, i := range w.Interfaces {
		iface := &Interface{Name: i.Name, Mac: i.Mac, Sandbox: i.Sandbox}
		if fam == FamilyCurrent {
			iface.MTU, iface.SocketPath, iface.PciID = i.MTU, i.SocketPath, i.PciID
		}
		r.Interfaces = append(r.Interfaces, iface)
	}
	for _, ip := range w.IPs {
		p, err := ParsePrefix(ip.Address)
		if err != nil {
			return nil, err
		}
		gw, err := parseOptAddr(ip.Gateway)
		if err != nil {
			return nil, err
		}
		c := &IPConfig{Interface: ip.Interface, Address: p, Gateway: gw}
		if fam == FamilyMiddle {
			c.Version = ip.Version
		}
		r.IPs = append(r.IPs, c)
	}
	rts, err := parseRoutes(w.Routes)
	if err != nil {
		return nil, err
	}
	r.Routes = rts
	return r, nil
}

// DecodeResultAuto parses a result whose version is taken from its own
// cniVersion key (absent means 0.1.0), like the runtime's cache reader.
func DecodeResultAuto(data []byte) (*Result, error) {
	var probe struct {
		CNIVersion string `json:"cniVersion"`
	}
	if err := json.Unmarshal(data, &probe); err != nil {
		return nil, err
	}
	return DecodeResult(data, probe.CNIVersion)
}

// DecodeDelegateResult parses what a delegated plugin printed on success
// (protocol.md §14.3): its own cniVersion when it has one, else confVersion.
func DecodeDelegateResult(data []byte, confVersion string) (*Result, error) {
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(data, &probe); err != nil {
		return nil, fmt.Errorf("failed to unmarshal raw result: %w", err)
	}
	var ver string
	for k, v := range probe {
		if strings.EqualFold(k, "cniVersion") {
			_ = json.Unmarshal(v, &ver)
		}
	}
	if ver == "" {
		ver = confVersion
		data = injectVersion(probe, confVersion)
	}
	r, err := DecodeResult(data, ver)
	if err != nil {
		return nil, err
	}
	return r, nil
}

func injectVersion(m map[string]json.RawMessage, v string) []byte {
	if m == nil {
		m = map[string]json.RawMessage{}
	}
	for k := range m {
		if strings.EqualFold(k, "cniVersion") {
			delete(m, k)
		}
	}
	b, _ := json.Marshal(v)
	m["cniVersion"] = b
	out, _ := json.Marshal(m)
	return out
}

// ParsePrevResult decodes a config's prevResult per protocol.md §6.4: nil
// when absent or null; parsed with the config version's family, the
// prevResult's own cniVersion winning over the config's.
func ParsePrevResult(raw json.RawMessage, confVersion string) (*Result, error) {
	if len(raw) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		return nil, nil
	}
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(raw, &probe); err != nil {
		return nil, fmt.Errorf("could not parse prevResult: %w", err)
	}
	hasVersion := false
	for k := range probe {
		if strings.EqualFold(k, "cniVersion") {
			hasVersion = true
		}
	}
	data := []byte(raw)
	if !hasVersion {
		data = injectVersion(probe, confVersion)
	}
	declared := confVersion
	if FamilyOf(declared) == FamilyNone {
		return nil, fmt.Errorf("could not parse prevResult: unsupported CNI result version %q", declared)
	}
	r, err := DecodeResult(data, declared)
	if err != nil {
		return nil, fmt.Errorf("could not parse prevResult: %w", err)
	}
	return r, nil
}
