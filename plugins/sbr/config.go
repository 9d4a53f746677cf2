package sbr

import (
	"encoding/json"
	"fmt"
	"math"
	"net/netip"

	"github.com/nftcni/nftcni/cni"
)

// NetConf is the sbr configuration.
type NetConf struct {
	cni.NetConf
	// Table, when set, is a table the operator manages: sbr only adds the
	// source rules pointing at it, and moves no routes.
	Table *int `json:"table"`
	// Gateways holds at most one IPv4 and one IPv6 address; each replaces,
	// in the tables sbr builds, the prevResult gateway of every address of
	// its family (the next hop the operator knows better than IPAM, e.g.
	// a router that is not the subnet's .1).
	Gateways []string `json:"gateways"`
	// AddSourceHints keeps the interface's on-link routes in the main
	// table, each subnet route with the address as preferred source, so
	// that a socket with no source bound still reaches the interface's
	// subnets, from the address the runtime gave.
	AddSourceHints bool `json:"addSourceHints"`

	gw4, gw6 netip.Addr // parsed Gateways
}

// loadConf decodes and checks the config (ADD, CHECK and Validate); DEL
// reads it with decodeConf, which judges no value.
func loadConf(stdin []byte) (*NetConf, error) {
	c, err := decodeConf(stdin)
	if err != nil {
		return nil, err
	}
	if !c.validTable() {
		return nil, cni.Errorf(cni.CodeInvalidNetworkConfig, "invalid table %d: must be between 1 and %d", *c.Table, uint32(math.MaxUint32))
	}
	if err := c.parseGateways(); err != nil {
		return nil, err
	}
	return c, nil
}

// decodeConf decodes the config without judging its values: what DEL
// reads, which must not fail on a mistake that only ADD can act on.
func decodeConf(stdin []byte) (*NetConf, error) {
	var c NetConf
	if err := json.Unmarshal(stdin, &c); err != nil {
		return nil, fmt.Errorf("failed to parse network configuration: %w", err)
	}
	return &c, nil
}

// validTable reports whether the table, if set, is one the kernel can have.
func (c *NetConf) validTable() bool {
	return c.Table == nil || (*c.Table > 0 && int64(*c.Table) <= math.MaxUint32)
}

// parseGateways checks `gateways` with the reference's texts (which name
// the key), but as a config error (code 7) and whatever the other keys:
// the reference looked at it only in an ADD without `table`.
func (c *NetConf) parseGateways() error {
	if len(c.Gateways) > 2 {
		return cni.Errorf(cni.CodeInvalidNetworkConfig, "gateways list cannot contain more than 2 entries (one IPv4, one IPv6)")
	}
	for _, s := range c.Gateways {
		a, err := netip.ParseAddr(s)
		if err != nil || a.Zone() != "" {
			return cni.Errorf(cni.CodeInvalidNetworkConfig, "invalid static gateway IP address: %s", s)
		}
		have, fam := &c.gw6, "IPv6"
		if a = a.Unmap(); a.Is4() {
			have, fam = &c.gw4, "IPv4"
		}
		if have.IsValid() {
			return cni.Errorf(cni.CodeInvalidNetworkConfig, "gateways list contains multiple %s addresses: %s and %s", fam, *have, s)
		}
		*have = a
	}
	return nil
}
