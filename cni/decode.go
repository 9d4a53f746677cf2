package cni

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
)

// Decoding shapes, one per result family: each family's parser reads only
// its own keys, so a key of another family (whatever its type) is ignored,
// as the reference's per-version types do. encoding/json
// matches keys case-insensitively and lets a later duplicate win, like the
// reference's decoder.

type legIn struct {
	IP4 *legIPIn `json:"ip4"`
	IP6 *legIPIn `json:"ip6"`
	DNS oldDNS   `json:"dns"`
}

type legIPIn struct {
	IP      string  `json:"ip"`
	Gateway string  `json:"gateway"`
	Routes  []Route `json:"routes"`
}

type midIn struct {
	Interfaces []midIface `json:"interfaces"`
	IPs        []struct {
		Version   string `json:"version"`
		Interface *int   `json:"interface"`
		Address   string `json:"address"`
		Gateway   string `json:"gateway"`
	} `json:"ips"`
	Routes []Route `json:"routes"`
	DNS    oldDNS  `json:"dns"`
}

type curIn struct {
	Interfaces []curIface `json:"interfaces"`
	IPs        []struct {
		Interface *int   `json:"interface"`
		Address   string `json:"address"`
		Gateway   string `json:"gateway"`
	} `json:"ips"`
	Routes []Route `json:"routes"`
	DNS    oldDNS  `json:"dns"`
}

// UnmarshalJSON decodes a route as configs and results spell it, with the
// reference's error texts. Like the reference, an absent dst is tolerated
// but an empty or null one is an invalid CIDR; an empty gw means none.
func (r *Route) UnmarshalJSON(b []byte) error {
	var w struct {
		Dst      json.RawMessage `json:"dst"`
		GW       string          `json:"gw"`
		MTU      int             `json:"mtu"`
		AdvMSS   int             `json:"advmss"`
		Priority int             `json:"priority"`
		Table    *int            `json:"table"`
		Scope    *int            `json:"scope"`
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*r = Route{MTU: w.MTU, AdvMSS: w.AdvMSS, Priority: w.Priority, Table: w.Table, Scope: w.Scope}
	if w.Dst != nil {
		var dst string
		if err := json.Unmarshal(w.Dst, &dst); err != nil {
			return err
		}
		p, err := ParsePrefix(dst)
		if err != nil {
			return err
		}
		r.Dst = p
	}
	if w.GW != "" {
		a, err := ParseAddr(w.GW)
		if err != nil {
			return err
		}
		r.GW = a
	}
	return nil
}

func routePtrs(in []Route) []*Route {
	var out []*Route
	for i := range in {
		out = append(out, &in[i])
	}
	return out
}

func parseOptAddr(s string) (netip.Addr, error) {
	if s == "" {
		return netip.Addr{}, nil
	}
	return ParseAddr(s)
}

// parseIPConfig parses one ips entry of a 0.3.x or later result.
func parseIPConfig(address, gateway string, iface *int) (*IPConfig, error) {
	p, err := ParsePrefix(address)
	if err != nil {
		return nil, err
	}
	gw, err := parseOptAddr(gateway)
	if err != nil {
		return nil, err
	}
	return &IPConfig{Interface: iface, Address: p, Gateway: gw}, nil
}

// DecodeResult parses data as a result of the declared version's family.
// The cniVersion inside data must belong to that
// family; an absent one is accepted (as 0.1.0) only by the legacy family.
func DecodeResult(data []byte, declared string) (*Result, error) {
	fam := FamilyOf(declared)
	if fam == FamilyNone {
		return nil, fmt.Errorf("unsupported CNI result version %q", declared)
	}
	var probe struct {
		CNIVersion string `json:"cniVersion"`
	}
	if err := json.Unmarshal(data, &probe); err != nil {
		return nil, err
	}
	inner := probe.CNIVersion
	if !contains(fam.versions(), inner) {
		return nil, fmt.Errorf("result type supports %v but unmarshalled CNIVersion is %q", fam.versions(), inner)
	}
	if inner == "" {
		inner = "0.1.0"
	}
	switch fam {
	case FamilyLegacy:
		return decodeLegacy(data, inner)
	case FamilyMiddle:
		return decodeMiddle(data, inner)
	default:
		return decodeCurrent(data, inner)
	}
}

func decodeLegacy(data []byte, version string) (*Result, error) {
	var w legIn
	if err := json.Unmarshal(data, &w); err != nil {
		return nil, err
	}
	r := &Result{CNIVersion: version, DNS: w.DNS.model()}
	for _, blk := range []struct {
		ip  *legIPIn
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
		r.IPs = append(r.IPs, &IPConfig{Address: p, Gateway: gw, Version: blk.ver, versionRead: true})
		r.Routes = append(r.Routes, routePtrs(blk.ip.Routes)...)
	}
	return r, nil
}

func decodeMiddle(data []byte, version string) (*Result, error) {
	var w midIn
	if err := json.Unmarshal(data, &w); err != nil {
		return nil, err
	}
	r := &Result{CNIVersion: version, DNS: w.DNS.model(), Routes: routePtrs(w.Routes)}
	for _, i := range w.Interfaces {
		r.Interfaces = append(r.Interfaces, &Interface{Name: i.Name, Mac: i.Mac, Sandbox: i.Sandbox})
	}
	for _, ip := range w.IPs {
		c, err := parseIPConfig(ip.Address, ip.Gateway, ip.Interface)
		if err != nil {
			return nil, err
		}
		c.Version, c.versionRead = ip.Version, true
		r.IPs = append(r.IPs, c)
	}
	return r, nil
}

func decodeCurrent(data []byte, version string) (*Result, error) {
	var w curIn
	if err := json.Unmarshal(data, &w); err != nil {
		return nil, err
	}
	r := &Result{CNIVersion: version, DNS: w.DNS.model(), Routes: routePtrs(w.Routes)}
	for _, i := range w.Interfaces {
		r.Interfaces = append(r.Interfaces, &Interface{Name: i.Name, Mac: i.Mac, MTU: i.MTU, Sandbox: i.Sandbox, SocketPath: i.SocketPath, PciID: i.PciID})
	}
	for _, ip := range w.IPs {
		c, err := parseIPConfig(ip.Address, ip.Gateway, ip.Interface)
		if err != nil {
			return nil, err
		}
		r.IPs = append(r.IPs, c)
	}
	return r, nil
}

func (d oldDNS) model() DNS {
	return DNS(d)
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

// DecodeDelegateResult parses what a delegated plugin printed on success.
// Like the reference, only the exact key "cniVersion"
// with a non-empty string counts; otherwise confVersion is injected under
// that key and the document re-serialised (sorted keys) before parsing.
func DecodeDelegateResult(data []byte, confVersion string) (*Result, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("failed to unmarshal raw result: %w", err)
	}
	var ver string
	if raw, ok := m["cniVersion"]; ok && json.Unmarshal(raw, &ver) == nil && ver != "" {
		return DecodeResult(data, ver)
	}
	if m == nil {
		m = map[string]json.RawMessage{}
	}
	m["cniVersion"], _ = json.Marshal(confVersion)
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("failed to unmarshal raw result: %w", err)
	}
	return DecodeResult(b, confVersion)
}

// ParsePrevResult decodes a config's prevResult: nil
// when absent or null. As the reference does, the object gets the key
// "CNIVersion" set to the config version unless that exact key holds a
// non-empty value, is re-serialised with sorted keys (so among keys that
// differ only in case the last in byte order wins) and parsed with the
// config version's family.
func ParsePrevResult(raw json.RawMessage, confVersion string) (*Result, error) {
	if len(raw) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		return nil, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("could not parse prevResult: %w", err)
	}
	if v, ok := m["CNIVersion"]; !ok || string(v) == `""` {
		m["CNIVersion"], _ = json.Marshal(confVersion)
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("could not parse prevResult: %w", err)
	}
	r, err := DecodeResult(b, confVersion)
	if err != nil {
		return nil, fmt.Errorf("could not parse prevResult: %w", err)
	}
	return r, nil
}
