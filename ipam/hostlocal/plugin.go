// Package hostlocal is the "host-local" IPAM plugin: it hands out addresses
// from configured ranges and records each reservation as a file under
// <dataDir>/<network name>, in the reference plugin's on-disk format.
//
// It behaves like the reference host-local plugin, quirks included. Where
// we differ (no-follow file access, crash-safe reservations, GC and
// STATUS) see README.md.
package hostlocal

import (
	"context"
	"fmt"
	"net/netip"
	"strings"

	"github.com/nftcni/nftcni/cni"
)

// Plugin is the host-local IPAM plugin.
var Plugin = &cni.Plugin{
	Name:     "host-local",
	Add:      cmdAdd,
	Del:      cmdDel,
	Check:    cmdCheck,
	GC:       cmdGC,
	Status:   cmdStatus,
	Validate: validate,
	Pools:    pools,
}

// cmdAdd takes one address from every range set, in list order.
func cmdAdd(_ context.Context, a *cni.CmdArgs) (*cni.Result, error) {
	conf, err := loadConf(a.StdinData, a.Args)
	if err != nil {
		return nil, err
	}
	if err := checkIDFits(a.ContainerID, a.IfName); err != nil {
		return nil, err
	}
	res := &cni.Result{CNIVersion: cni.CurrentVersion}
	if conf.ResolvConf != "" {
		if res.DNS, err = parseResolvConf(conf.ResolvConf); err != nil {
			return nil, err
		}
	}
	st, err := openStore(conf.DataDir, conf.Name)
	if err != nil {
		return nil, err
	}
	defer st.Close()

	// rollback releases the addresses this ADD reserved, and only those:
	// (id, ifname) may hold others from before (a repeated ADD refused by
	// the duplicate guard of a later set, after an earlier set handed out
	// a requested address), and those belong to a live attachment. The
	// reference releases everything of (id, ifname) here.
	var reserved []netip.Addr
	rollback := func() {
		if len(reserved) > 0 {
			_ = st.withLock(func() error { return st.releaseAddrs(a.ContainerID, a.IfName, reserved) })
		}
	}
	pending := append([]netip.Addr(nil), conf.Requested...)
	for idx, set := range conf.Ranges {
		var req netip.Addr
		for k, ip := range pending {
			if set.Contains(ip) {
				req = ip
				pending = append(pending[:k], pending[k+1:]...)
				break
			}
		}
		ipc, err := st.allocate(allocation{
			set: set, idx: idx, id: a.ContainerID, ifname: a.IfName, requested: req, logf: a.Logf,
		})
		if err != nil {
			rollback()
			return nil, fmt.Errorf("failed to allocate for range %d: %w", idx, err)
		}
		reserved = append(reserved, ipc.Address.Addr())
		res.IPs = append(res.IPs, ipc)
	}
	if len(pending) > 0 {
		rollback()
		texts := make([]string, len(pending))
		for i, ip := range pending {
			texts[i] = ip.String()
		}
		return nil, fmt.Errorf("failed to allocate all requested IPs: %s", strings.Join(texts, " "))
	}
	res.Routes = conf.Routes
	return res, nil
}

// cmdDel parses the config like ADD (so it fails like ADD on a broken
// config or CNI_ARGS), then releases the attachment's files once per range
// set, as the reference does. Idempotent.
func cmdDel(_ context.Context, a *cni.CmdArgs) error {
	conf, err := loadConf(a.StdinData, a.Args)
	if err != nil {
		return err
	}
	st, err := openStore(conf.DataDir, conf.Name)
	if err != nil {
		return err
	}
	defer st.Close()
	var errs []string
	for range conf.Ranges {
		if err := st.withLock(func() error { return st.releaseByID(a.ContainerID, a.IfName) }); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if errs != nil {
		return fmt.Errorf("%s", strings.Join(errs, ";"))
	}
	return nil
}

// cmdCheck succeeds when the attachment owns any address in the store;
// like the reference it does not compare with
// prevResult or the configured ranges.
func cmdCheck(_ context.Context, a *cni.CmdArgs) error {
	conf, err := loadConf(a.StdinData, a.Args)
	if err != nil {
		return err
	}
	st, err := openStore(conf.DataDir, conf.Name)
	if err != nil {
		return err
	}
	defer st.Close()
	var found bool
	if err := st.withLock(func() (err error) {
		found, err = st.findByID(a.ContainerID, a.IfName)
		return err
	}); err != nil {
		return err
	}
	if !found {
		return fmt.Errorf("host-local: Failed to find address added by container %v", a.ContainerID)
	}
	return nil
}

// pools is the plugin's cni.Plugin.Pools: every range of every range set,
// from rangeStart to rangeEnd (what ADD may hand out, gateways aside).
func pools(conf []byte) ([]cni.Pool, error) {
	c, err := loadConf(conf, "")
	if err != nil {
		return nil, err
	}
	var out []cni.Pool
	for _, set := range c.Ranges {
		for _, r := range set {
			out = append(out, cni.Pool{First: r.RangeStart, Last: r.RangeEnd})
		}
	}
	return out, nil
}
