package macvlan

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/plugins/internal/ifplugin"
)

// NetConf is the macvlan configuration.
// Keys match case-insensitively, as encoding/json does for the reference.
type NetConf struct {
	cni.NetConf
	// Master is the lower device; "" means the device of the default route
	// (of the container's namespace with LinkInContainer).
	Master          string `json:"master"`
	Mode            string `json:"mode"`
	MTU             int    `json:"mtu"`
	Mac             string `json:"mac"`
	LinkInContainer bool   `json:"linkInContainer"`
	BcQueueLen      uint32 `json:"bcqueuelen"`
	RuntimeConfig   struct {
		Mac string `json:"mac"`
	} `json:"runtimeConfig"`

	mode netlinkx.MacvlanMode
	// mac is the effective MAC (nil: random): top-level mac, then CNI_ARGS
	// MAC, then runtimeConfig.mac, the last one set winning.
	mac net.HardwareAddr
}

// isL3 reports whether IPAM is configured; without it the macvlan is only
// brought up.
func (c *NetConf) isL3() bool { return c.IPAM.Type != "" }

// decode reads the config without validating anything: all DEL needs.
// The reference words its decode error differently for DEL ("netConf").
func decode(stdin []byte, prefix string) (*NetConf, error) {
	var c NetConf
	if err := json.Unmarshal(stdin, &c); err != nil {
		return nil, fmt.Errorf("%s: %w", prefix, err)
	}
	return &c, nil
}

// loadConf decodes and validates what ADD and CHECK need before any
// namespace is looked at: CNI_ARGS, the MAC precedence, the mode and the
// MAC's syntax. The reference checks the last two only while creating the
// link; the messages are the same.
func loadConf(stdin []byte, envArgs string) (*NetConf, error) {
	c, err := decode(stdin, "failed to load netconf")
	if err != nil {
		return nil, err
	}
	err = cni.LoadArgs(envArgs, cni.ArgField{Name: "MAC", Set: func(v string) error {
		if v != "" {
			c.Mac = v
		}
		return nil
	}})
	if err != nil {
		return nil, err
	}
	if m := c.RuntimeConfig.Mac; m != "" {
		c.Mac = m
	}
	if c.mode, err = modeFromString(c.Mode); err != nil {
		return nil, err
	}
	if c.Mac != "" {
		if c.mac, err = net.ParseMAC(c.Mac); err != nil {
			return nil, fmt.Errorf("invalid args %v for MAC addr: %w", c.Mac, err)
		}
	}
	return c, nil
}

func modeFromString(s string) (netlinkx.MacvlanMode, error) {
	switch s {
	case "", "bridge":
		return netlinkx.MacvlanBridge, nil
	case "private":
		return netlinkx.MacvlanPrivate, nil
	case "vepa":
		return netlinkx.MacvlanVEPA, nil
	case "passthru":
		return netlinkx.MacvlanPassthru, nil
	}
	return 0, fmt.Errorf("unknown macvlan mode: %q", s)
}

// modeName is the config's name of a mode the kernel reports, for CHECK's
// mismatch message. A mode no config can ask for is an error naming it by
// number, as the reference v1.10.0 words it — with the reference's
// numbers, which are its netlink library's, not the kernel's: source is 5,
// and a mode that library does not know (one a later kernel adds) 0.
func modeName(m netlinkx.MacvlanMode) (string, error) {
	switch m {
	case netlinkx.MacvlanBridge, netlinkx.MacvlanPrivate, netlinkx.MacvlanVEPA, netlinkx.MacvlanPassthru:
		return m.String(), nil
	case netlinkx.MacvlanSource:
		return "", errors.New("unknown macvlan mode: 5")
	}
	return "", errors.New("unknown macvlan mode: 0")
}

// master resolves and looks up the lower device in h's namespace and
// checks the configured MTU against it. Messages as the reference's: a
// missing master is the bare `Link not found`.
func (c *NetConf) master(h *netlinkx.Handle) (netlinkx.Link, error) {
	var l netlinkx.Link
	if c.Master == "" {
		dl, err := ifplugin.DefaultMaster(h)
		if err != nil {
			return l, err
		}
		c.Master, l = dl.Name, dl
	} else {
		var err error
		if l, err = h.LinkByName(c.Master); err != nil {
			return l, netlinkx.Cause(err)
		}
	}
	if c.MTU < 0 || c.MTU > l.MTU {
		return l, fmt.Errorf("invalid MTU %d, must be [0, master MTU(%d)]", c.MTU, l.MTU)
	}
	return l, nil
}
