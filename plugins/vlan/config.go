package vlan

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/netlinkx"
)

// NetConf is the vlan configuration. Keys
// match case-insensitively, as encoding/json does for the reference.
type NetConf struct {
	cni.NetConf
	Master          string `json:"master"`
	VlanID          int    `json:"vlanId"`
	MTU             int    `json:"mtu"`
	LinkInContainer bool   `json:"linkInContainer"`
}

// isL3 reports whether IPAM is configured; without, the VLAN link is
// layer 2 only.
func (c *NetConf) isL3() bool { return c.IPAM.Type != "" }

// decode reads the config without validating anything: all DEL, CHECK,
// GC and STATUS need.
func decode(stdin []byte) (*NetConf, error) {
	var c NetConf
	if err := json.Unmarshal(stdin, &c); err != nil {
		return nil, fmt.Errorf("failed to load netconf: %w", err)
	}
	return &c, nil
}

// loadConf decodes and validates what ADD needs before any namespace is
// looked at: a master name and a VLAN id. The reference's message says
// 4095 although 4095 is refused.
func loadConf(stdin []byte) (*NetConf, error) {
	c, err := decode(stdin)
	if err != nil {
		return nil, err
	}
	if c.Master == "" {
		return nil, errors.New(`"master" field is required. It specifies the host interface name to create the VLAN for`)
	}
	if c.VlanID < 0 || c.VlanID > 4094 {
		return nil, fmt.Errorf("invalid VLAN ID %d (must be between 0 and 4095 inclusive)", c.VlanID)
	}
	return c, nil
}

// master looks the lower device up in h's namespace and checks the
// configured MTU against it; a missing master is the bare
// `Link not found`, as in the reference.
func (c *NetConf) master(h *netlinkx.Handle) (netlinkx.Link, error) {
	l, err := h.LinkByName(c.Master)
	if err != nil {
		return l, netlinkx.Cause(err)
	}
	if c.MTU < 0 || c.MTU > l.MTU {
		return l, fmt.Errorf("invalid MTU %d, must be [0, master MTU(%d)]", c.MTU, l.MTU)
	}
	return l, nil
}
