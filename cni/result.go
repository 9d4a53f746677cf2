package cni

import (
	"net/netip"
)

// Result is the internal result model: the spec 1.1.0 shape with netip
// types. Plugins build and read only this; it is converted to the caller's
// version at the edge (Encode) and from any version on the way in (Decode).
type Result struct {
	// CNIVersion is the version the result was decoded from or is meant to
	// be printed as. Conversions within one family are lossless, so the
	// lossy conversion rules apply only across families.
	CNIVersion string
	Interfaces []*Interface
	IPs        []*IPConfig
	Routes     []*Route
	DNS        DNS
}

// Interface is one entry of the result's "interfaces" list.
type Interface struct {
	Name       string
	Mac        string
	MTU        int
	Sandbox    string
	SocketPath string
	PciID      string
}

// IPConfig is one assigned address.
type IPConfig struct {
	// Interface indexes Result.Interfaces; nil means "not bound" (an index
	// of 0 is a real index and is printed).
	Interface *int
	// Address keeps the host bits: 10.1.0.5/24.
	Address netip.Prefix
	Gateway netip.Addr
	// Version is the "version" key of a 0.x result as it was read ("4"/"6",
	// not validated, possibly empty). For results we build it is empty and
	// derived from Address when a 0.x version is printed.
	Version string
	// versionRead records that Version came from a decoded 0.x result, so
	// an empty one stays empty (the reference prints "version": "" and
	// skips such an entry when converting to 0.1.0/0.2.0).
	versionRead bool
}

// Route is one route; Table and Scope are pointers because an explicit 0
// is printed while an absent one is not.
type Route struct {
	Dst      netip.Prefix
	GW       netip.Addr
	MTU      int
	AdvMSS   int
	Priority int
	Table    *int
	Scope    *int
}

// DNS is informational resolver data.
type DNS struct {
	Nameservers []string
	Domain      string
	Search      []string
	Options     []string
}

// IsEmpty reports whether no DNS field is set (1.x results then omit "dns").
func (d DNS) IsEmpty() bool {
	return len(d.Nameservers) == 0 && d.Domain == "" && len(d.Search) == 0 && len(d.Options) == 0
}

// Int returns a pointer to i, for Interface indexes, Table and Scope.
func Int(i int) *int { return &i }

// Clone returns a deep copy, so a plugin can amend a prevResult freely.
func (r *Result) Clone() *Result {
	if r == nil {
		return nil
	}
	out := &Result{CNIVersion: r.CNIVersion, DNS: r.DNS.clone()}
	for _, i := range r.Interfaces {
		c := *i
		out.Interfaces = append(out.Interfaces, &c)
	}
	for _, ip := range r.IPs {
		c := *ip
		if ip.Interface != nil {
			c.Interface = Int(*ip.Interface)
		}
		out.IPs = append(out.IPs, &c)
	}
	for _, rt := range r.Routes {
		c := *rt
		if rt.Table != nil {
			c.Table = Int(*rt.Table)
		}
		if rt.Scope != nil {
			c.Scope = Int(*rt.Scope)
		}
		out.Routes = append(out.Routes, &c)
	}
	return out
}

func (d DNS) clone() DNS {
	return DNS{
		Nameservers: append([]string(nil), d.Nameservers...),
		Domain:      d.Domain,
		Search:      append([]string(nil), d.Search...),
		Options:     append([]string(nil), d.Options...),
	}
}

// ipVersion is the "version" a 0.3.x/0.4.0 result carries for ip.
func (ip *IPConfig) ipVersion() string {
	if ip.Version != "" || ip.versionRead {
		return ip.Version
	}
	if ip.Address.Addr().Unmap().Is4() {
		return "4"
	}
	return "6"
}
