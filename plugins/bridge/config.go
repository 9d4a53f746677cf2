package bridge

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sort"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/plugins/internal/vethplugin"
)

// defaultBridge is the bridge name when the config has none.
const defaultBridge = "cni0"

// NetConf is the bridge plugin's configuration. Keys match case-insensitively,
// as encoding/json does for the reference.
type NetConf struct {
	cni.NetConf
	BrName       string `json:"bridge"`
	IsGW         bool   `json:"isGateway"`
	IsDefaultGW  bool   `json:"isDefaultGateway"`
	ForceAddress bool   `json:"forceAddress"`
	IPMasq       bool   `json:"ipMasq"`
	// IPMasqBackend is nil when absent or null; "" is a value (and invalid).
	IPMasqBackend             *string      `json:"ipMasqBackend"`
	MTU                       int          `json:"mtu"`
	HairpinMode               bool         `json:"hairpinMode"`
	PromiscMode               bool         `json:"promiscMode"`
	Vlan                      int          `json:"vlan"`
	VlanTrunk                 []*vlanTrunk `json:"vlanTrunk"`
	PreserveDefaultVlan       bool         `json:"preserveDefaultVlan"`
	MacSpoofChk               bool         `json:"macspoofchk"`
	EnableDad                 bool         `json:"enabledad"`
	DisableContainerInterface bool         `json:"disableContainerInterface"`
	PortIsolation             bool         `json:"portIsolation"`

	Args struct {
		Cni struct {
			Mac string `json:"mac"`
		} `json:"cni"`
	} `json:"args"`
	RuntimeConfig struct {
		Mac string `json:"mac"`
	} `json:"runtimeConfig"`

	// mac is the effective container MAC ("" = random): CNI_ARGS MAC, then
	// args.cni.mac, then runtimeConfig.mac, the last one set winning.
	mac string
	// vlans is the trunk VID set, sorted and de-duplicated (nil: none).
	vlans []int
}

// vlanTrunk is one vlanTrunk item: a range, a single id, or both.
type vlanTrunk struct {
	MinID *int `json:"minID"`
	MaxID *int `json:"maxID"`
	ID    *int `json:"id"`
}

// isL3 reports whether IPAM is configured; without it the plugin only
// plumbs layer 2.
func (c *NetConf) isL3() bool { return c.IPAM.Type != "" }

// vlanFiltering reports whether a new bridge must filter by VLAN: any
// access VLAN or any vlanTrunk key, even an empty list.
func (c *NetConf) vlanFiltering() bool { return c.Vlan != 0 || c.VlanTrunk != nil }

// loadConf decodes and validates the config and CNI_ARGS, as every command
// does first. Only the checks the reference makes for every command are
// here; ADD adds its own (addChecks).
func loadConf(stdin []byte, envArgs string) (*NetConf, error) {
	c := &NetConf{BrName: defaultBridge}
	if err := json.Unmarshal(stdin, c); err != nil {
		return nil, fmt.Errorf("failed to load netconf: %w", err)
	}
	if c.Vlan < 0 || c.Vlan > 4094 {
		return nil, fmt.Errorf("invalid VLAN ID %d (must be between 0 and 4094)", c.Vlan)
	}
	var err error
	if c.vlans, err = collectVlanTrunk(c.VlanTrunk); err != nil {
		return nil, err
	}
	err = cni.LoadArgs(envArgs, cni.ArgField{Name: "MAC", Set: func(v string) error {
		if v != "" {
			c.mac = v
		}
		return nil
	}})
	if err != nil {
		return nil, err
	}
	if m := c.Args.Cni.Mac; m != "" {
		c.mac = m
	}
	if m := c.RuntimeConfig.Mac; m != "" {
		c.mac = m
	}
	return c, nil
}

// collectVlanTrunk validates the trunk items and returns the VID set,
// sorted ascending. An item may name a range and an id at once. A JSON
// null item, which crashes the reference, counts as an empty item.
func collectVlanTrunk(items []*vlanTrunk) ([]int, error) {
	set := map[int]bool{}
	for _, it := range items {
		if it == nil {
			continue
		}
		switch {
		case it.MinID != nil && it.MaxID != nil:
			lo, hi := *it.MinID, *it.MaxID
			if lo <= 0 || lo > 4094 {
				return nil, errors.New("incorrect trunk minID parameter")
			}
			if hi <= 0 || hi > 4094 {
				return nil, errors.New("incorrect trunk maxID parameter")
			}
			if hi < lo {
				return nil, errors.New("minID is greater than maxID in trunk parameter")
			}
			for v := lo; v <= hi; v++ {
				set[v] = true
			}
		case it.MinID == nil && it.MaxID != nil:
			return nil, errors.New("minID and maxID should be configured simultaneously, minID is missing")
		case it.MinID != nil && it.MaxID == nil:
			return nil, errors.New("minID and maxID should be configured simultaneously, maxID is missing")
		}
		if it.ID != nil {
			if *it.ID <= 0 || *it.ID > 4094 {
				return nil, errors.New("incorrect trunk id parameter")
			}
			set[*it.ID] = true
		}
	}
	if len(set) == 0 {
		return nil, nil
	}
	vlans := make([]int, 0, len(set))
	for v := range set {
		vlans = append(vlans, v)
	}
	sort.Ints(vlans)
	return vlans, nil
}

// addChecks are the validations ADD makes before touching anything. The
// reference checks the masquerade backend and parses the MAC only when it
// gets to them, after the container is already plumbed; the messages are
// the same here, but nothing has been changed when they appear.
func (c *NetConf) addChecks() (net.HardwareAddr, error) {
	if c.DisableContainerInterface && c.isL3() {
		return nil, errors.New("cannot use IPAM when DisableContainerInterface flag is set")
	}
	if c.IsDefaultGW {
		c.IsGW = true
	}
	if c.HairpinMode && c.PromiscMode {
		return nil, errors.New("cannot set hairpin mode and promiscuous mode at the same time")
	}
	if c.IPMasq && c.isL3() {
		if err := vethplugin.CheckMasqBackend(c.IPMasqBackend); err != nil {
			return nil, err
		}
	}
	if c.mac == "" {
		return nil, nil
	}
	mac, err := net.ParseMAC(c.mac)
	if err != nil {
		return nil, fmt.Errorf("failed to make veth pair: %w", err)
	}
	return mac, nil
}

// check is every offline check ADD makes before it touches anything:
// addChecks, the names of the links ADD creates, and the IPAM config (of
// an IPAM plugin in this binary). It returns the container MAC (nil:
// random). The Validate hook runs the same checks.
func (c *NetConf) check(stdin []byte) (net.HardwareAddr, error) {
	mac, err := c.addChecks()
	if err != nil {
		return nil, err
	}
	if c.BrName != "" { // "" keeps the reference's kernel error in ensureBridge
		if err := cni.IfNameFits("bridge", c.BrName); err != nil {
			return nil, err
		}
	}
	if c.isL3() && c.IsGW && c.Vlan != 0 {
		// The VLAN gateway interface is named <bridge>.<vlan>.
		if name := fmt.Sprintf("%s.%d", c.BrName, c.Vlan); len(name) > 15 {
			return nil, cni.ConfigError("bridge", "with vlan %d and isGateway the bridge's gateway interface is %q, %d bytes long; Linux allows at most 15: choose a bridge name of at most %d bytes",
				c.Vlan, name, len(name), 15-(len(name)-len(c.BrName)))
		}
	}
	if err := cni.ValidateIPAM(c.IPAM.Type, stdin); err != nil {
		return nil, err
	}
	return mac, nil
}

// validate is the plugin's offline check (cni.Plugin.Validate).
// footprint is the plugin's cni.Plugin.Footprint: its bridge, shared
// with every network that names it, and the addresses its IPAM hands out
// there (claims.go: an ADD refuses one that is in use on the bridge under
// another network).
func footprint(stdin []byte) (*cni.Footprint, error) {
	c, err := loadConf(stdin, "")
	if err != nil {
		return nil, err
	}
	f := &cni.Footprint{Kind: "bridge", Name: c.BrName}
	if c.IPAM.Type != "" {
		if f.Pools, err = cni.IPAMPools(c.IPAM.Type, stdin); err != nil {
			return nil, err
		}
	}
	return f, nil
}

func validate(stdin []byte) error {
	c, err := loadConf(stdin, "")
	if err != nil {
		return err
	}
	_, err = c.check(stdin)
	return err
}
