package dhcp

import (
	"net"
	"net/netip"

	"github.com/nftcni/nftcni/cni"
)

// The RPC between the plugin and the daemon is the reference's, so either
// side can be swapped with the reference binary:
// Go net/rpc over HTTP CONNECT on a Unix socket, gob-encoded. gob matches
// struct fields by name and kind, not by type name, so these types mirror
// the CNI library's skel.CmdArgs and types/100.Result field for field; IP
// values travel as raw 4- or 16-byte slices (net.IP has no gob or binary
// marshaller, so gob sends the bytes).

// Service is the RPC service name; the methods are Service+".Allocate" etc.
const Service = "DHCP"

// RPC method names. Allocate and Release are the reference's; Check and GC
// exist only in our daemon (the plugin falls back when they are missing).
const (
	MethodAllocate = Service + ".Allocate"
	MethodRelease  = Service + ".Release"
	MethodCheck    = Service + ".Check"
	MethodGC       = Service + ".GC"
)

// DefaultSocketPath is where the daemon listens unless told otherwise.
const DefaultSocketPath = "/run/cni/dhcp.sock"

// Args is the argument of every method: the reference's skel.CmdArgs.
type Args struct {
	ContainerID string
	// Netns is absolute (the plugin resolves it); the daemon prefixes it
	// with its -hostprefix.
	Netns         string
	IfName        string
	Args          string // raw CNI_ARGS
	Path          string // CNI_PATH
	NetnsOverride string
	StdinData     []byte // the whole network config
}

// Reply is the result of Allocate and Check: the reference's 1.1.0
// result model.
type Reply struct {
	CNIVersion string
	Interfaces []*ReplyInterface
	IPs        []*ReplyIP
	Routes     []*ReplyRoute
	DNS        ReplyDNS
}

// ReplyInterface mirrors types/100.Interface (never filled by a daemon).
type ReplyInterface struct {
	Name       string
	Mac        string
	Mtu        int
	Sandbox    string
	SocketPath string
	PciID      string
}

// IPNet mirrors net.IPNet.
type IPNet struct {
	IP   []byte
	Mask []byte
}

// ReplyIP mirrors types/100.IPConfig.
type ReplyIP struct {
	Interface *int
	Address   IPNet
	Gateway   []byte
}

// ReplyRoute mirrors types.Route.
type ReplyRoute struct {
	Dst      IPNet
	GW       []byte
	MTU      int
	AdvMSS   int
	Priority int
	Table    *int
	Scope    *int
}

// ReplyDNS mirrors types.DNS.
type ReplyDNS struct {
	Nameservers []string
	Domain      string
	Search      []string
	Options     []string
}

// Empty is the reply of Release and GC (the reference's struct{}).
type Empty struct{}

// ToResult converts a reply to the internal result model. Invalid
// addresses are dropped rather than guessed at.
func (r *Reply) ToResult() *cni.Result {
	out := &cni.Result{CNIVersion: cni.CurrentVersion, DNS: cni.DNS{
		Nameservers: r.DNS.Nameservers, Domain: r.DNS.Domain, Search: r.DNS.Search, Options: r.DNS.Options,
	}}
	for _, i := range r.Interfaces {
		if i != nil {
			out.Interfaces = append(out.Interfaces, &cni.Interface{
				Name: i.Name, Mac: i.Mac, MTU: i.Mtu, Sandbox: i.Sandbox, SocketPath: i.SocketPath, PciID: i.PciID,
			})
		}
	}
	for _, ip := range r.IPs {
		if ip == nil {
			continue
		}
		p, ok := ip.Address.Prefix()
		if !ok {
			continue
		}
		c := &cni.IPConfig{Address: p, Gateway: addrOf(ip.Gateway)}
		if ip.Interface != nil {
			c.Interface = cni.Int(*ip.Interface)
		}
		out.IPs = append(out.IPs, c)
	}
	for _, rt := range r.Routes {
		if rt == nil {
			continue
		}
		dst, ok := rt.Dst.Prefix()
		if !ok {
			continue
		}
		c := &cni.Route{Dst: dst, GW: addrOf(rt.GW), MTU: rt.MTU, AdvMSS: rt.AdvMSS, Priority: rt.Priority}
		if rt.Table != nil {
			c.Table = cni.Int(*rt.Table)
		}
		if rt.Scope != nil {
			c.Scope = cni.Int(*rt.Scope)
		}
		out.Routes = append(out.Routes, c)
	}
	return out
}

// FromResult converts the internal model to a reply.
func FromResult(r *cni.Result) *Reply {
	out := &Reply{CNIVersion: cni.CurrentVersion, DNS: ReplyDNS{
		Nameservers: r.DNS.Nameservers, Domain: r.DNS.Domain, Search: r.DNS.Search, Options: r.DNS.Options,
	}}
	for _, ip := range r.IPs {
		c := &ReplyIP{Address: NetOf(ip.Address), Gateway: bytesOf(ip.Gateway)}
		if ip.Interface != nil {
			c.Interface = cni.Int(*ip.Interface)
		}
		out.IPs = append(out.IPs, c)
	}
	for _, rt := range r.Routes {
		c := &ReplyRoute{Dst: NetOf(rt.Dst), GW: bytesOf(rt.GW), MTU: rt.MTU, AdvMSS: rt.AdvMSS, Priority: rt.Priority}
		if rt.Table != nil {
			c.Table = cni.Int(*rt.Table)
		}
		if rt.Scope != nil {
			c.Scope = cni.Int(*rt.Scope)
		}
		out.Routes = append(out.Routes, c)
	}
	return out
}

// Prefix converts the pair to a prefix with host bits kept; an IPv4-mapped
// address becomes plain IPv4, as the reference prints it.
func (n IPNet) Prefix() (netip.Prefix, bool) {
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, bits := net.IPMask(n.Mask).Size()
	if bits == 0 && len(n.Mask) != 0 {
		return netip.Prefix{}, false // non-canonical mask
	}
	if len(n.Mask) == 0 {
		ones = a.BitLen()
	}
	if a.Is4In6() {
		a = a.Unmap()
		if bits == 128 {
			ones = max(ones-96, 0)
		}
	}
	if ones > a.BitLen() {
		return netip.Prefix{}, false
	}
	return netip.PrefixFrom(a, ones), true
}

// NetOf converts a prefix to the wire pair (4-byte values for IPv4).
func NetOf(p netip.Prefix) IPNet {
	if !p.IsValid() {
		return IPNet{}
	}
	return IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

func bytesOf(a netip.Addr) []byte {
	if !a.IsValid() {
		return nil
	}
	return a.AsSlice()
}

func addrOf(b []byte) netip.Addr {
	a, ok := netip.AddrFromSlice(b)
	if !ok {
		return netip.Addr{}
	}
	return a.Unmap()
}
