// Package static is the "static" IPAM plugin: it hands out exactly the
// addresses its config (or the runtime) names and keeps no state.
//
// It behaves like the reference static plugin, quirks included: CNI_ARGS IP
// entries are appended to the configured list and CNI_ARGS GATEWAY applies
// to those entries only, args.cni.ips replaces the list and
// runtimeConfig.ips replaces it again (dropping any GATEWAY); CHECK only
// catches a gateway mismatch for addresses present in prevResult.
package static

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nftcni/nftcni/cni"
)

// Plugin is the static IPAM plugin. It keeps no state: DEL needs nothing
// and does not even read the config, like the reference; GC has nothing to
// collect; its addresses come from the config, so it is always ready.
var Plugin = &cni.Plugin{
	Name:        "static",
	Add:         cmdAdd,
	Del:         func(context.Context, *cni.CmdArgs) error { return nil },
	Check:       cmdCheck,
	GC:          cni.NothingToCollect,
	NoHostState: true,
	Status:      cni.AlwaysReady,
	Validate:    validate,
	Pools:       pools,
}

func cmdAdd(_ context.Context, a *cni.CmdArgs) (*cni.Result, error) {
	c, err := loadConf(a.StdinData, a.Args)
	if err != nil {
		return nil, err
	}
	r := &cni.Result{CNIVersion: cni.CurrentVersion, Routes: c.routes, DNS: c.dns}
	for _, ad := range c.addrs {
		r.IPs = append(r.IPs, &cni.IPConfig{Address: ad.prefix, Gateway: ad.gateway})
	}
	return r, nil
}

func cmdCheck(_ context.Context, a *cni.CmdArgs) error {
	c, err := loadConf(a.StdinData, a.Args)
	if err != nil {
		return err
	}
	var n struct {
		CNIVersion string          `json:"cniVersion"`
		Prev       json.RawMessage `json:"prevResult"`
	}
	if err := json.Unmarshal(a.StdinData, &n); err != nil {
		return err
	}
	prev, err := cni.ParsePrevResult(n.Prev, n.CNIVersion)
	if err != nil {
		return err
	}
	if prev == nil {
		return errors.New("Required prevResult missing")
	}
	for _, ad := range c.addrs {
		for _, ip := range prev.IPs {
			if ip.Address.Addr() != ad.prefix.Addr() {
				continue
			}
			if ad.gateway.IsValid() && ip.Gateway != ad.gateway {
				return fmt.Errorf("static: Failed to match addr %v on interface %v", ad.prefix.Addr(), a.IfName)
			}
			break
		}
	}
	return nil
}

// validate is the plugin's offline check (cni.Plugin.Validate): the
// config loaded as ADD loads it, CNI_ARGS aside; a mistake names the
// address entry it is about. Which addresses a runtime will add later
// (CNI_ARGS, runtimeConfig.ips) is not known here, so an empty list is
// not a mistake.
func validate(conf []byte) error {
	_, err := loadConf(conf, "")
	if err == nil {
		return nil
	}
	var n netConf
	if json.Unmarshal(conf, &n) == nil && n.IPAM != nil {
		for i, a := range n.IPAM.Addresses {
			if _, perr := cni.ParsePrefix(a.Address); perr != nil {
				return cni.ConfigError(fmt.Sprintf("ipam.addresses[%d].address", i), "%v: write an address with its prefix length, e.g. \"10.10.0.2/24\"", err)
			}
			if a.Gateway != nil && *a.Gateway != "" {
				if _, gerr := cni.ParseAddr(*a.Gateway); gerr != nil {
					return cni.ConfigError(fmt.Sprintf("ipam.addresses[%d].gateway", i), "%v: write one IPv4 or IPv6 address", err)
				}
			}
		}
	}
	return cni.ConfigError("ipam", "%v", err)
}

// pools is the plugin's cni.Plugin.Pools: every configured address.
func pools(conf []byte) ([]cni.Pool, error) {
	c, err := loadConf(conf, "")
	if err != nil {
		return nil, err
	}
	out := make([]cni.Pool, 0, len(c.addrs))
	for _, a := range c.addrs {
		out = append(out, cni.Pool{First: a.prefix.Addr(), Last: a.prefix.Addr()})
	}
	return out, nil
}
