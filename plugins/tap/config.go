package tap

import (
	"encoding/json"
	"fmt"
	"net"

	"github.com/nftcni/nftcni/cni"
)

// NetConf is the tap plugin's configuration. Keys match case-insensitively, as
// encoding/json does for the reference.
type NetConf struct {
	cni.NetConf
	MAC        string `json:"mac"`
	MTU        int    `json:"mtu"`
	MultiQueue bool   `json:"multiQueue"`
	// Owner and Group are nil when absent: the tap is not restricted.
	Owner          *uint32 `json:"owner"`
	Group          *uint32 `json:"group"`
	SelinuxContext string  `json:"selinuxContext"`
	Bridge         string  `json:"bridge"`
	// Args is any object; its contents are ignored, as in the reference.
	Args          *struct{} `json:"args"`
	RuntimeConfig struct {
		Mac string `json:"mac"`
	} `json:"runtimeConfig"`

	// mac is the effective MAC (nil: the kernel's random one): top-level
	// mac, then CNI_ARGS MAC, then runtimeConfig.mac, the last one set
	// winning.
	mac net.HardwareAddr
}

// isL3 reports whether IPAM is configured; without it the tap only gets
// layer 2.
func (c *NetConf) isL3() bool { return c.IPAM.Type != "" }

// loadConf decodes and validates the config and CNI_ARGS, as every
// command does first, so a bad MAC fails before anything is created.
func loadConf(stdin []byte, envArgs string) (*NetConf, error) {
	c := &NetConf{}
	if err := json.Unmarshal(stdin, c); err != nil {
		return nil, fmt.Errorf("failed to load netconf: %w", err)
	}
	if c.MTU < 0 {
		return nil, cni.Errorf(cni.CodeInvalidNetworkConfig, "invalid mtu %d: must not be negative", c.MTU)
	}
	mac := c.MAC
	err := cni.LoadArgs(envArgs, cni.ArgField{Name: "MAC", Set: func(v string) error {
		if v != "" {
			mac = v
		}
		return nil
	}})
	if err != nil {
		return nil, err
	}
	if m := c.RuntimeConfig.Mac; m != "" {
		mac = m
	}
	if mac != "" {
		hw, err := net.ParseMAC(mac)
		if err != nil {
			return nil, fmt.Errorf("invalid args %v for MAC addr: %w", mac, err)
		}
		c.mac = hw
	}
	return c, nil
}

// check is the offline check ADD makes before it creates anything (and
// the Validate hook): the bridge's name, when one is named, and the IPAM
// config.
func (c *NetConf) check(stdin []byte) error {
	if c.Bridge != "" {
		if err := cni.IfNameFits("bridge", c.Bridge); err != nil {
			return err
		}
	}
	return cni.ValidateIPAM(c.IPAM.Type, stdin)
}
