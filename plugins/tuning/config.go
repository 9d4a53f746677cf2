package tuning

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"

	"github.com/nftcni/nftcni/cni"
)

// DefaultDataDir is where backups live unless the config's dataDir says
// otherwise (the reference's directory: upgrade-compatible both ways).
const DefaultDataDir = "/run/cni/tuning"

// TuningConf is the tuning configuration. The type names
// TuningConf, IPAMArgs and sysctlCheck are the reference's, so that JSON
// type errors read the same ("Go struct field TuningConf.mtu of type int").
type TuningConf struct {
	cni.NetConf
	DataDir string            `json:"dataDir"`
	SysCtl  map[string]string `json:"sysctl"`
	Mac     string            `json:"mac"`
	// Promisc only ever turns promiscuous mode on; false means "leave it".
	Promisc bool `json:"promisc"`
	MTU     int  `json:"mtu"`
	// TxQLen and Allmulti are tri-state: nil leaves the link alone.
	TxQLen   *int  `json:"txQLen"`
	Allmulti *bool `json:"allmulti"`

	RuntimeConfig struct {
		Mac string `json:"mac"`
	} `json:"runtimeConfig"`
	Args *struct {
		A *IPAMArgs `json:"cni"`
	} `json:"args"`
}

// IPAMArgs is `args.cni`: per-attachment overrides of the config.
type IPAMArgs struct {
	SysCtl   *map[string]string `json:"sysctl"`
	Mac      *string            `json:"mac"`
	Promisc  *bool              `json:"promisc"`
	MTU      *int               `json:"mtu"`
	Allmulti *bool              `json:"allmulti"`
	TxQLen   *int               `json:"txQLen"`
}

// loadConf decodes the config and applies the overrides in the reference's
// precedence: mac < CNI_ARGS MAC < runtimeConfig.mac < args.cni.mac; every
// other field: config < args.cni. CNI_ARGS is strict (unknown keys fail
// unless IgnoreUnknown), on every command, as in the reference.
func loadConf(stdin []byte, envArgs string) (*TuningConf, error) {
	var c TuningConf
	if err := json.Unmarshal(stdin, &c); err != nil {
		return nil, fmt.Errorf("failed to load netconf: %w", err)
	}
	if c.DataDir == "" {
		c.DataDir = DefaultDataDir
	}
	var argMAC string
	if err := cni.LoadArgs(envArgs, cni.ArgField{Name: "MAC", Set: func(v string) error { argMAC = v; return nil }}); err != nil {
		return nil, err
	}
	if argMAC != "" {
		c.Mac = argMAC
	}
	if c.RuntimeConfig.Mac != "" {
		c.Mac = c.RuntimeConfig.Mac
	}
	if c.Args == nil || c.Args.A == nil {
		return &c, nil
	}
	o := c.Args.A
	if o.SysCtl != nil {
		// The reference writes into a nil map (and crashes) when the
		// config has no sysctl object of its own.
		if c.SysCtl == nil {
			c.SysCtl = map[string]string{}
		}
		for k, v := range *o.SysCtl {
			c.SysCtl[k] = v
		}
	}
	if o.Mac != nil {
		c.Mac = *o.Mac
	}
	if o.Promisc != nil {
		c.Promisc = *o.Promisc
	}
	if o.MTU != nil {
		c.MTU = *o.MTU
	}
	if o.Allmulti != nil {
		c.Allmulti = o.Allmulti
	}
	if o.TxQLen != nil {
		c.TxQLen = o.TxQLen
	}
	return &c, nil
}

// changesLink reports whether the config asks for any link attribute, and
// so for a backup.
func (c *TuningConf) changesLink() bool {
	return c.Mac != "" || c.MTU != 0 || c.Promisc || c.Allmulti != nil || c.TxQLen != nil
}

// parseMAC parses the configured MAC with the reference's message.
func parseMAC(s string) (net.HardwareAddr, error) {
	mac, err := net.ParseMAC(s)
	if err != nil {
		return nil, fmt.Errorf("invalid args %v for MAC addr: %v", s, err)
	}
	return mac, nil
}

// validateLink checks the link fields before anything is changed. The
// reference hands negative values to the kernel as huge unsigned numbers
// (and a bad MAC is found only after the sysctls are written).
func (c *TuningConf) validateLink() error {
	if c.Mac != "" {
		if _, err := parseMAC(c.Mac); err != nil {
			return err
		}
	}
	if c.MTU < 0 {
		return fmt.Errorf("invalid mtu %d: must not be negative", c.MTU)
	}
	if c.TxQLen != nil && (*c.TxQLen < 0 || int64(*c.TxQLen) > int64(^uint32(0))) {
		return fmt.Errorf("invalid txQLen %d: must be between 0 and %d", *c.TxQLen, ^uint32(0))
	}
	return nil
}

// sortedKeys returns the sysctl keys in byte order: the order they are
// checked and written in (the reference's is random).
func (c *TuningConf) sortedKeys() []string {
	keys := make([]string, 0, len(c.SysCtl))
	for k := range c.SysCtl {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// sysctlCheck is what the duplicate-key check decodes first, as the
// reference does, so that a non-string value fails with its message.
type sysctlCheck struct {
	SysCtl map[string]string `json:"sysctl"`
}

var errDuplicateSysctl = errors.New("duplicated sysctl keys are not allowed")

// checkDuplicateSysctls fails when a key repeats inside the top-level sysctl
// object — or across several top-level keys that match "sysctl"
// case-insensitively, which encoding/json would merge (ADD and CHECK only).
// Duplicates inside args.cni.sysctl are not looked at.
func checkDuplicateSysctls(stdin []byte) error {
	var probe sysctlCheck
	if err := json.Unmarshal(stdin, &probe); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(stdin))
	if _, err := dec.Token(); err != nil { // {
		return err
	}
	seen := map[string]bool{}
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return err
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return err
		}
		if k, _ := kt.(string); !strings.EqualFold(k, "sysctl") {
			continue
		}
		if err := objectKeys(raw, func(k string) error {
			if seen[k] {
				return errDuplicateSysctl
			}
			seen[k] = true
			return nil
		}); err != nil {
			return err
		}
	}
	return nil
}

// objectKeys calls fn for each key of a JSON object, in order, duplicates
// included; anything but an object has no keys.
func objectKeys(raw json.RawMessage, fn func(string) error) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil
	}
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return err
		}
		if err := fn(kt.(string)); err != nil {
			return err
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return err
		}
	}
	return nil
}
