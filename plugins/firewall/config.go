package firewall

import (
	"encoding/json"
	"fmt"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/nft/firewall"
	"github.com/nftcni/nftcni/nft/foreign"
)

// NetConf is the firewall configuration.
type NetConf struct {
	cni.NetConf
	Backend                string `json:"backend"`
	IptablesAdminChainName string `json:"iptablesAdminChainName"`
	// FirewalldZone is the zone the firewalld backend puts the
	// container's addresses in; "" means trusted.
	FirewalldZone string `json:"firewalldZone"`
	IngressPolicy string `json:"ingressPolicy"`
	// NftablesAcceptChains (ours, opt-in) names chains of the host's own
	// nftables ruleset, "<family> <table> <chain>", that get the
	// container's accepts: a forward chain with policy drop would drop
	// its packets whatever our table accepts.
	NftablesAcceptChains []string `json:"nftablesAcceptChains"`
	// IptablesForwardAccepts (ours) says when iptables-nft's FORWARD
	// chains get the container's accepts: "auto" (or ""), where iptables
	// can be used on the host; "always"; "never" (foreign.Use).
	IptablesForwardAccepts string `json:"iptablesForwardAccepts"`
	// FirewalldStateDir is ours: where the firewalld backend records the
	// sources it added; "" means firewalld.DefaultStateDir.
	FirewalldStateDir string `json:"firewalldStateDir"`
}

// The reference's ingressPolicy values.
const (
	policyOpen       = "open"
	policySameBridge = "same-bridge"
	policyIsolated   = "isolated"
)

// maxAdminChainLen bounds iptablesAdminChainName: the reference's limit
// is iptables' 28; nft allows longer names, and the jump's comment must
// stay within nft's 128 bytes.
const maxAdminChainLen = 64

func loadConf(stdin []byte) (*NetConf, error) {
	var c NetConf
	if err := json.Unmarshal(stdin, &c); err != nil {
		return nil, fmt.Errorf("failed to load netconf: %w", err)
	}
	return &c, nil
}

// policy parses ingressPolicy with the reference's error text.
func policy(c *NetConf) (firewall.Policy, error) {
	switch c.IngressPolicy {
	case "", policyOpen:
		return firewall.PolicyOpen, nil
	case policySameBridge:
		return firewall.PolicySameBridge, nil
	case policyIsolated:
		return firewall.PolicyIsolated, nil
	}
	return firewall.PolicyOpen, fmt.Errorf("unknown ingress policy: %q", c.IngressPolicy)
}

// adminChain checks iptablesAdminChainName; "" means the default.
func adminChain(c *NetConf) (string, error) {
	name := c.IptablesAdminChainName
	if name == "" {
		return firewall.DefaultAdminChain, nil
	}
	if len(name) > maxAdminChainLen {
		return "", cni.Errorf(cni.CodeInvalidNetworkConfig, "iptablesAdminChainName %q is too long (at most %d bytes)", name, maxAdminChainLen)
	}
	for _, r := range name {
		if r <= ' ' || r > '~' || r == '"' {
			return "", cni.Errorf(cni.CodeInvalidNetworkConfig, "iptablesAdminChainName %q: only printable ASCII without spaces or quotes is allowed", name)
		}
	}
	if firewall.ReservedChain(name) {
		return "", cni.Errorf(cni.CodeInvalidNetworkConfig, "iptablesAdminChainName %q is the name of one of the firewall's own chains", name)
	}
	return name, nil
}

// acceptChains parses nftablesAcceptChains: the chains that parse, and
// the first mistake (code 7, naming the entry).
func acceptChains(c *NetConf) ([]foreign.Chain, error) {
	var out []foreign.Chain
	var first error
	for i, s := range c.NftablesAcceptChains {
		ch, err := foreign.Parse(s)
		if err != nil {
			if first == nil {
				first = cni.Errorf(cni.CodeInvalidNetworkConfig, "nftablesAcceptChains[%d] %v", i, err)
			}
			continue
		}
		out = append(out, ch)
	}
	return out, first
}

// iptablesUse parses iptablesForwardAccepts (code 7, naming the key).
func iptablesUse(c *NetConf) (foreign.Use, error) {
	u, err := foreign.ParseUse(c.IptablesForwardAccepts)
	if err != nil {
		return u, cni.Errorf(cni.CodeInvalidNetworkConfig, "iptablesForwardAccepts %v", err)
	}
	return u, nil
}
