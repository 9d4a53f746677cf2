package portmap

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/nft/foreign"
	"github.com/nftcni/nftcni/nft/portmap"
)

// PortMapEntry is one entry of the portMappings capability.
type PortMapEntry struct {
	HostPort      int    `json:"hostPort"`
	ContainerPort int    `json:"containerPort"`
	Protocol      string `json:"protocol"`
	HostIP        string `json:"hostIP,omitempty"`
}

// NetConf is the portmap configuration.
type NetConf struct {
	cni.NetConf
	// Backend: "iptables" or "nftables", both meaning our native
	// nftables; nil when absent.
	Backend              *string   `json:"backend"`
	SNAT                 *bool     `json:"snat"`
	ConditionsV4         *[]string `json:"conditionsV4"`
	ConditionsV6         *[]string `json:"conditionsV6"`
	MasqAll              bool      `json:"masqAll"`
	MarkMasqBit          *int      `json:"markMasqBit"`
	ExternalSetMarkChain *string   `json:"externalSetMarkChain"`
	// NftablesAcceptChains (ours, opt-in) names chains of the host's own
	// nftables ruleset, "<family> <table> <chain>", that get accepts for
	// the mapped connections: a forward chain with policy drop would drop
	// them whatever we DNAT.
	NftablesAcceptChains []string `json:"nftablesAcceptChains"`
	// IptablesForwardAccepts (ours) says when iptables-nft's FORWARD
	// chains get the accepts: "auto" (or ""), where iptables can be used
	// on the host; "always"; "never" (foreign.Use).
	IptablesForwardAccepts string `json:"iptablesForwardAccepts"`
	RuntimeConfig          struct {
		PortMaps []PortMapEntry `json:"portMappings,omitempty"`
	} `json:"runtimeConfig"`
}

// config is a validated configuration.
type config struct {
	*NetConf
	prev     *cni.Result // nil without prevResult
	snat     bool
	cond4    []portmap.Condition
	cond6    []portmap.Condition
	mappings []mapping
	accept   []foreign.Chain // nftablesAcceptChains
	iptables foreign.Use     // iptablesForwardAccepts
}

// mapping is a validated PortMapEntry.
type mapping struct {
	hostIP        netip.Addr // zero: any
	hostPort      uint16
	containerPort uint16
	proto         uint8
}

// loadConf validates stdin in the reference's order: JSON,
// prevResult, snat default, markMasqBit/externalSetMarkChain, backend and
// its options, port numbers. Errors are returned bare; ADD and DEL wrap
// them in "failed to parse config: ", CHECK does not.
func loadConf(stdin []byte, version string) (*config, error) {
	var n NetConf
	if err := json.Unmarshal(stdin, &n); err != nil {
		return nil, fmt.Errorf("failed to parse network configuration: %w", err)
	}
	c := &config{NetConf: &n, snat: true}
	if len(n.RawPrevResult) > 0 {
		prev, err := cni.ParsePrevResult(n.RawPrevResult, version)
		if err != nil {
			return nil, fmt.Errorf("could not parse prevResult: %w", err)
		}
		c.prev = prev
	}
	if n.SNAT != nil {
		c.snat = *n.SNAT
	}
	if n.MarkMasqBit != nil && n.ExternalSetMarkChain != nil {
		return nil, fmt.Errorf("Cannot specify externalSetMarkChain and markMasqBit")
	}
	if bit := n.MarkMasqBit; bit != nil && (*bit < 0 || *bit > 31) {
		return nil, fmt.Errorf("MasqMarkBit must be between 0 and 31")
	}
	if err := c.checkBackend(); err != nil {
		return nil, err
	}
	var err error
	if c.cond4, err = parseConditions("conditionsV4", n.ConditionsV4, false); err != nil {
		return nil, err
	}
	if c.cond6, err = parseConditions("conditionsV6", n.ConditionsV6, true); err != nil {
		return nil, err
	}
	for i, s := range n.NftablesAcceptChains {
		ch, err := foreign.Parse(s)
		if err != nil {
			return nil, cni.Errorf(cni.CodeInvalidNetworkConfig, "nftablesAcceptChains[%d] %v", i, err)
		}
		c.accept = append(c.accept, ch)
	}
	if c.iptables, err = foreign.ParseUse(n.IptablesForwardAccepts); err != nil {
		return nil, cni.Errorf(cni.CodeInvalidNetworkConfig, "iptablesForwardAccepts %v", err)
	}
	for _, e := range n.RuntimeConfig.PortMaps {
		m, err := validate(e)
		if err != nil {
			return nil, err
		}
		c.mappings = append(c.mappings, m)
	}
	return c, nil
}

// checkBackend accepts both backend names (each means our nftables).
// Options belonging to the other backend fail only when a backend is named
// explicitly, with the reference's message: without a name, the reference
// picks a backend by probing the host, and we accept either spelling.
func (c *config) checkBackend() error {
	b := c.Backend
	if b == nil {
		return nil
	}
	var iptOpts, nftOpts []string
	if c.ExternalSetMarkChain != nil {
		iptOpts = append(iptOpts, "externalSetMarkChain")
	}
	for _, cs := range []struct {
		key  string
		list *[]string
	}{{"conditionsV4", c.ConditionsV4}, {"conditionsV6", c.ConditionsV6}} {
		switch conditionStyle(cs.list) {
		case styleIptables:
			iptOpts = append(iptOpts, cs.key)
		case styleNft:
			nftOpts = append(nftOpts, cs.key)
		}
	}
	switch *b {
	case "iptables":
		if len(nftOpts) > 0 {
			return fmt.Errorf("iptables backend was requested but configuration contains nftables-specific options %v", nftOpts)
		}
	case "nftables":
		if len(iptOpts) > 0 {
			return fmt.Errorf("nftables backend was requested but configuration contains iptables-specific options %v", iptOpts)
		}
	default:
		return fmt.Errorf("unrecognized backend %q", *b)
	}
	return nil
}

// validate checks one mapping. The reference checks only that the ports
// are positive; we also refuse ports above 65535, protocols other than
// tcp/udp/sctp (any case) and host IPs that are not addresses, which the
// reference hands to iptables or nft verbatim.
func validate(e PortMapEntry) (mapping, error) {
	var m mapping
	if e.ContainerPort <= 0 || e.ContainerPort > 65535 {
		return m, fmt.Errorf("Invalid container port number: %d", e.ContainerPort)
	}
	if e.HostPort <= 0 || e.HostPort > 65535 {
		return m, fmt.Errorf("Invalid host port number: %d", e.HostPort)
	}
	m.hostPort, m.containerPort = uint16(e.HostPort), uint16(e.ContainerPort)
	switch strings.ToLower(e.Protocol) {
	case "tcp":
		m.proto = unix.IPPROTO_TCP
	case "udp":
		m.proto = unix.IPPROTO_UDP
	case "sctp":
		m.proto = unix.IPPROTO_SCTP
	default:
		return m, fmt.Errorf("Invalid protocol %q for host port %d: must be tcp, udp or sctp", e.Protocol, e.HostPort)
	}
	if e.HostIP != "" {
		a, err := netip.ParseAddr(e.HostIP)
		if err != nil || a.Zone() != "" {
			return m, fmt.Errorf("Invalid hostIP %q for host port %d: not an IP address", e.HostIP, e.HostPort)
		}
		if !a.Unmap().IsUnspecified() {
			m.hostIP = a.Unmap()
		}
	}
	return m, nil
}

// containerAddrs selects the first IPv4 and the first IPv6 address of the
// container interface from prevResult: an address
// qualifies unless its interface index is valid and names another
// interface or a host-side one.
func containerAddrs(r *cni.Result, ifName string) (v4, v6 netip.Prefix) {
	for _, ip := range r.IPs {
		if i := ip.Interface; i != nil && *i >= 0 && *i < len(r.Interfaces) {
			iface := r.Interfaces[*i]
			if iface.Name != ifName || iface.Sandbox == "" {
				continue
			}
		}
		a := ip.Address
		if a.Addr().Unmap().Is4() {
			if !v4.IsValid() {
				v4 = a
			}
		} else if !v6.IsValid() {
			v6 = a
		}
	}
	return v4, v6
}
