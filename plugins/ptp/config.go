package ptp

import (
	"encoding/json"
	"fmt"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/plugins/internal/vethplugin"
)

// NetConf is the ptp configuration.
type NetConf struct {
	cni.NetConf
	IPMasq bool `json:"ipMasq"`
	// IPMasqBackend is nil when absent or null; "" is a value (and invalid).
	IPMasqBackend *string `json:"ipMasqBackend"`
	MTU           int     `json:"mtu"`
}

// loadConf decodes the config; check is what ADD adds to it.
func loadConf(stdin []byte) (*NetConf, error) {
	var c NetConf
	if err := json.Unmarshal(stdin, &c); err != nil {
		return nil, fmt.Errorf("failed to load netconf: %w", err)
	}
	return &c, nil
}

// check is every offline check ADD makes before it touches anything; the
// Validate hook runs the same.
func (c *NetConf) check(stdin []byte) error {
	if c.IPMasq {
		// The reference finds out only after the container is plumbed.
		if err := vethplugin.CheckMasqBackend(c.IPMasqBackend); err != nil {
			return err
		}
	}
	if c.IPAM.Type == "" {
		// The reference fails later with "no plugin name provided".
		return cni.ConfigError("ipam.type", `ptp needs an IPAM plugin for the container's addresses: add e.g. "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.1.0.0/24"}]]}`)
	}
	return cni.ValidateIPAM(c.IPAM.Type, stdin)
}

// validate is the plugin's offline check (cni.Plugin.Validate).
func validate(stdin []byte) error {
	c, err := loadConf(stdin)
	if err != nil {
		return err
	}
	return c.check(stdin)
}
