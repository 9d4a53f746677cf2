package ipvlan

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/plugins/internal/ifplugin"
)

// NetConf is the ipvlan configuration.
// Keys match case-insensitively, as encoding/json does for the reference.
// There is no MAC option: an ipvlan has its master's MAC.
type NetConf struct {
	cni.NetConf
	// Master is the lower device. "" means: in a chain, the single
	// interface of prevResult; otherwise the device of the default route
	// (of the container's namespace with LinkInContainer).
	Master          string `json:"master"`
	Mode            string `json:"mode"`
	MTU             int    `json:"mtu"`
	LinkInContainer bool   `json:"linkInContainer"`

	mode netlinkx.IPVlanMode
	prev *cni.Result // the parsed prevResult; nil when absent
}

// decode reads the config without validating anything: all DEL, GC and
// STATUS need.
func decode(stdin []byte) (*NetConf, error) {
	var c NetConf
	if err := json.Unmarshal(stdin, &c); err != nil {
		return nil, fmt.Errorf("failed to load netconf: %w", err)
	}
	return &c, nil
}

// loadConf decodes and validates what ADD and CHECK need: the mode, and
// the prevResult of a chain, whose single interface is the master when
// the config names none (ADD only; in CHECK the prevResult is ipvlan's own
// result).
func loadConf(stdin []byte, forAdd bool) (*NetConf, error) {
	c, err := decode(stdin)
	if err != nil {
		return nil, err
	}
	if c.mode, err = modeFromString(c.Mode); err != nil {
		return nil, err
	}
	if !forAdd || c.RawPrevResult == nil {
		return c, nil
	}
	if c.prev, err = c.PrevResult(); err != nil {
		return nil, fmt.Errorf("could not parse prevResult: %w", err)
	}
	if c.Master == "" && c.prev != nil {
		if len(c.prev.Interfaces) != 1 || c.prev.Interfaces[0].Name == "" {
			return nil, errors.New("chained master failure. PrevResult lacks a single named interface")
		}
		c.Master = c.prev.Interfaces[0].Name
	}
	return c, nil
}

func modeFromString(s string) (netlinkx.IPVlanMode, error) {
	switch s {
	case "", "l2":
		return netlinkx.IPVlanL2, nil
	case "l3":
		return netlinkx.IPVlanL3, nil
	case "l3s":
		return netlinkx.IPVlanL3S, nil
	}
	return 0, fmt.Errorf("unknown ipvlan mode: %q", s)
}

// modeName is the config's name of a mode the kernel reports, for CHECK's
// mismatch message; a mode it has no name for (one a later kernel adds) is
// an error naming its number, as the reference words it.
func modeName(m netlinkx.IPVlanMode) (string, error) {
	switch m {
	case netlinkx.IPVlanL2, netlinkx.IPVlanL3, netlinkx.IPVlanL3S:
		return m.String(), nil
	}
	return "", fmt.Errorf("unknown ipvlan mode: %d", uint16(m))
}

// master resolves and looks up the lower device in h's namespace:
// `no default route interface found` without master and default route,
// `failed to lookup master "<m>": <err>` when it does not exist. Unlike
// macvlan and vlan, the MTU is not checked against the master's, as in
// the reference.
func (c *NetConf) master(h *netlinkx.Handle) (netlinkx.Link, error) {
	if c.Master == "" {
		l, err := ifplugin.DefaultMaster(h)
		if err != nil {
			return l, err
		}
		c.Master = l.Name
		return l, nil
	}
	l, err := h.LinkByName(c.Master)
	if err != nil {
		return l, fmt.Errorf("failed to lookup master %q: %w", c.Master, netlinkx.Cause(err))
	}
	return l, nil
}
