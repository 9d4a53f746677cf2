package daemon

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"

	"github.com/insomniacslk/dhcp/dhcpv4"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/ipam/dhcp"
)

// owner identifies who a lease belongs to. The client ID is derived from
// it but truncated, so two owners can share a client ID: the daemon keeps
// the full owner to detect that.
type owner struct {
	ContainerID string `json:"containerID"`
	Network     string `json:"network"`
	IfName      string `json:"ifName"`
	// Netns is the path the plugin sent, before the host prefix.
	Netns string `json:"netns"`
}

// sameAttachment compares everything but the netns path, which a DEL may
// leave empty.
func (o owner) sameAttachment(p owner) bool {
	return o.ContainerID == p.ContainerID && o.Network == p.Network && o.IfName == p.IfName
}

func (o owner) String() string {
	return fmt.Sprintf("container %q, network %q, interface %q, netns %q", o.ContainerID, o.Network, o.IfName, o.Netns)
}

// maxClientID is the longest client ID string: option 61 carries at most
// 255 bytes, one of them the type byte.
const maxClientID = 254

// clientIDOf is the reference's client ID, "<containerID>/<network>/<ifname>",
// truncated to 254 bytes.
func clientIDOf(o owner) string {
	id := o.ContainerID + "/" + o.Network + "/" + o.IfName
	if len(id) > maxClientID {
		id = id[:maxClientID]
	}
	return id
}

// option is one DHCP option we send.
type option struct {
	Code  uint8  `json:"code"`
	Value []byte `json:"value"`
}

// params is everything a lease's DHCP messages carry besides what the
// library fills in; it is persisted with the lease so renewals after a
// daemon restart send the same.
type params struct {
	// ClientID is the option 61 value: type byte 0 and the client ID, or
	// a provided dhcp-client-identifier verbatim.
	ClientID []byte `json:"clientID"`
	// Options are the provided options other than the client ID, in
	// order of first appearance.
	Options []option `json:"options,omitempty"`
	// Request is the Parameter Request List; empty keeps the library's.
	Request []uint8 `json:"request,omitempty"`

	// DUID and IAID identify a DHCPv6 lease (duidOf, iaidOf); only DHCPv6
	// leases keep them.
	DUID []byte `json:"duid,omitempty"`
	IAID uint32 `json:"iaid,omitempty"`
}

// of keeps what family f's messages carry.
func (p params) of(f dhcp.Family) params {
	if f == dhcp.IPv6 {
		return params{DUID: p.DUID, IAID: p.IAID}
	}
	p.DUID, p.IAID = nil, 0
	return p
}

// modifiers turns the parameters into message modifiers, applied after
// the library's own so that ours win (the request list is replaced, not
// extended).
func (p params) modifiers() []dhcpv4.Modifier {
	mods := []dhcpv4.Modifier{dhcpv4.WithOption(dhcpv4.OptGeneric(dhcpv4.OptionClientIdentifier, p.ClientID))}
	for _, o := range p.Options {
		mods = append(mods, dhcpv4.WithOption(dhcpv4.OptGeneric(dhcpv4.GenericOptionCode(o.Code), o.Value)))
	}
	if len(p.Request) > 0 {
		codes := make([]dhcpv4.OptionCode, len(p.Request))
		for i, c := range p.Request {
			codes[i] = dhcpv4.GenericOptionCode(c)
		}
		mods = append(mods, dhcpv4.WithOption(dhcpv4.OptParameterRequestList(codes...)))
	}
	return mods
}

// request is one decoded RPC.
type request struct {
	owner    owner
	clientID string
	params   params
	// families are those to lease, in result order.
	families []dhcp.Family
	shape    shape
}

// shape is what the config says about the result beyond the leases.
type shape struct {
	// priority, when non-zero, is every route's metric.
	priority int
	// prefix6 is the prefix length of a DHCPv6 address (which the
	// protocol does not carry).
	prefix6 int
}

// defaultPrefix6 is the result's prefix length for a DHCPv6 address: the
// length of practically every on-link IPv6 subnet (SLAAC needs it), so
// that neighbours are reachable before, or without, a router
// advertisement.
const defaultPrefix6 = 64

// netConf is what the daemon reads from the network config.
type netConf struct {
	Name string `json:"name"`
	IPAM *struct {
		Provide []struct {
			Option  string `json:"option"`
			Value   string `json:"value"`
			FromArg string `json:"fromArg"`
		} `json:"provide"`
		Request []struct {
			Option      string `json:"option"`
			SkipDefault bool   `json:"skipDefault"`
		} `json:"request"`
		Priority         int      `json:"priority"`
		IPFamilies       []string `json:"ipFamilies"`
		IPv6PrefixLength *int     `json:"ipv6PrefixLength"`
	} `json:"ipam"`
}

// optionCode is the code of an option name the reference accepts besides
// decimal codes. (A switch, not a map: a package-level map is built at
// the start of every exec of the binary, whichever plugin it is.)
func optionCode(name string) (uint8, bool) {
	switch name {
	case "subnet-mask":
		return 1, true
	case "routers":
		return 3, true
	case "host-name":
		return 12, true
	case "vendor-class-identifier":
		return 60, true
	case "dhcp-client-identifier":
		return 61, true
	case "user-class":
		return 77, true
	}
	return 0, false
}

// parseOption turns an option name or decimal code into a code, with the
// reference's error text.
func parseOption(name string) (uint8, error) {
	if c, ok := optionCode(name); ok {
		return c, nil
	}
	c, err := strconv.ParseUint(name, 10, 8)
	if err != nil {
		return 0, fmt.Errorf("Can not parse option %q: Can not parse option: %w", name, err)
	}
	return uint8(c), nil
}

// defaultRequest is appended to the configured request list unless an
// entry says skipDefault: the reference's routers and subnet mask, then
// (ours) DNS servers, domain name and domain search, which fill the
// result's "dns".
var defaultRequest = []uint8{3, 1, 6, 15, 119}

// parseRequest decodes an RPC argument. With
// full unset only the owner is derived (Release needs nothing else, so a
// config whose options no longer parse can still be deleted).
func parseRequest(a *dhcp.Args, full bool) (*request, error) {
	var c netConf
	if err := json.Unmarshal(a.StdinData, &c); err != nil {
		return nil, fmt.Errorf("error parsing netconf: %w", err)
	}
	r := &request{owner: owner{ContainerID: a.ContainerID, Network: c.Name, IfName: a.IfName, Netns: a.Netns}}
	r.clientID = clientIDOf(r.owner)
	r.params.ClientID = append([]byte{0}, r.clientID...)
	r.params.DUID = duidOf(r.owner.ContainerID)
	r.params.IAID = iaidOf(r.owner.IfName)
	r.families = []dhcp.Family{dhcp.IPv4}
	r.shape.prefix6 = defaultPrefix6
	if !full {
		return r, nil
	}
	if c.IPAM == nil {
		r.params.Request = defaultRequest
		return r, nil
	}
	r.shape.priority = c.IPAM.Priority
	fams, err := dhcp.Families(c.IPAM.IPFamilies)
	if err != nil {
		return nil, err
	}
	r.families = fams
	if n := c.IPAM.IPv6PrefixLength; n != nil {
		if *n < 1 || *n > 128 {
			return nil, fmt.Errorf("ipam.ipv6PrefixLength: %d is not a prefix length (1-128)", *n)
		}
		r.shape.prefix6 = *n
	}

	args := map[string]string{}
	for _, kv := range cni.ParseArgsLenient(a.Args) {
		args[kv[0]] = kv[1]
	}
	set := func(code uint8, v string) {
		if code == 61 {
			// Overrides the generated client ID on every message,
			// DHCPRELEASE included (the reference sends the generated
			// one there, which a server keyed by client ID cannot match
			// to the lease).
			r.params.ClientID = []byte(v)
			return
		}
		for i := range r.params.Options {
			if r.params.Options[i].Code == code {
				r.params.Options[i].Value = []byte(v)
				return
			}
		}
		r.params.Options = append(r.params.Options, option{Code: code, Value: []byte(v)})
	}
	for _, p := range c.IPAM.Provide {
		code, err := parseOption(p.Option)
		if err != nil {
			return nil, err
		}
		if len(p.Value) > 255 {
			return nil, fmt.Errorf("value too long for option %q: %q", p.Option, p.Value)
		}
		if p.Value != "" {
			set(code, p.Value)
		}
		if p.FromArg != "" {
			v, ok := args[p.FromArg]
			if ok && len(v) > 255 {
				return nil, fmt.Errorf("value too long for option %q: %q", p.Option, v)
			}
			if ok && v != "" {
				set(code, v)
			}
		}
	}
	skip := false
	for _, q := range c.IPAM.Request {
		code, err := parseOption(q.Option)
		if err != nil {
			return nil, err
		}
		skip = skip || q.SkipDefault
		if !slices.Contains(r.params.Request, code) {
			r.params.Request = append(r.params.Request, code)
		}
	}
	if !skip {
		for _, code := range defaultRequest {
			if !slices.Contains(r.params.Request, code) {
				r.params.Request = append(r.params.Request, code)
			}
		}
	}
	return r, nil
}
