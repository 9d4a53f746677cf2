package vrf

import (
	"encoding/json"
	"fmt"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/netlinkx"
)

// NetConf is the vrf configuration.
type NetConf struct {
	cni.NetConf
	VRFName string `json:"vrfname"`
	// Table is the VRF's routing table; 0: chosen when the VRF is created.
	Table uint32 `json:"table"`
}

// loadConf decodes and checks the config, naming the key at fault.
func loadConf(stdin []byte) (*NetConf, error) {
	var c NetConf
	if err := json.Unmarshal(stdin, &c); err != nil {
		return nil, fmt.Errorf("failed to parse network configuration: %w", err)
	}
	if c.VRFName == "" {
		return nil, cni.Errorf(cni.CodeInvalidNetworkConfig, "configuration is expected to have a valid vrf name")
	}
	// 0 means "choose one" (freeTable); a VRF bound to one of the kernel's
	// own tables would route through the main or local table.
	if c.Table != 0 && netlinkx.ReservedTable(int(c.Table)) {
		return nil, cni.Errorf(cni.CodeInvalidNetworkConfig, "invalid table %d: the kernel reserves tables 253 to 255", c.Table)
	}
	return &c, nil
}

// addCheck is what ADD (and the Validate hook) checks beyond loadConf
// before touching the container: the VRF is a link, and the kernel would
// refuse a longer name only once the container is half set up. DEL does
// not check it: a VRF with such a name never existed.
func (c *NetConf) addCheck() error {
	return cni.IfNameFits("vrfname", c.VRFName)
}
