// Package hostdevice is the "host-device" plugin: it moves an existing
// link of the runtime's namespace (selected by name, MAC, kernel device
// path, PCI address or the runtime's device ID) into the container, named
// CNI_IFNAME, and gives it back on DEL under its old name, with the
// addresses and up state it had.
//
// It behaves like the reference host-device plugin (same keys, results and
// error texts) except for the deliberate differences listed, with their
// reasons, in README.md: a failed ADD moves the device
// back and releases IPAM; DEL is idempotent, tolerates a vanished
// namespace and releases IPAM even with an empty CNI_NETNS; GC goes to
// IPAM and collects the device records of stale attachments (gc.go).
package hostdevice

import (
	"context"
	"errors"
	"fmt"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/plugins/internal/addrconf"
	"github.com/nftcni/nftcni/plugins/internal/ifplugin"
)

// Plugin is the host-device plugin.
var Plugin = &cni.Plugin{
	Name:   "host-device",
	Add:    cmdAdd,
	Del:    cmdDel,
	Check:  cmdCheck,
	GC:     cmdGC,
	Status: cmdStatus,
	Validate: func(stdin []byte) error {
		conf, err := loadConf(stdin, sysfsRoot, false)
		if err != nil {
			return err
		}
		return conf.check(stdin)
	},
}

func cmdAdd(ctx context.Context, a *cni.CmdArgs) (_ *cni.Result, err error) {
	conf, err := loadConf(a.StdinData, sysfsRoot, false)
	if err != nil {
		return nil, err
	}
	if err := conf.check(a.StdinData); err != nil {
		return nil, err
	}
	if conf.UseInterfaceNetwork && conf.DPDKMode {
		return nil, errors.New("useInterfaceNetwork is not supported for dpdk-bound devices")
	}
	// Opened first so that it is closed last: the rollback uses it.
	hh, err := netlinkx.Open(nil)
	if err != nil {
		return nil, err
	}
	defer hh.Close()
	add, err := ifplugin.BeginAdd("host-device", a)
	if err != nil {
		return nil, err
	}
	defer add.End(&err) // a failed ADD is rolled back

	iface := &cni.Interface{Name: a.IfName, Sandbox: a.Netns}
	result := &cni.Result{CNIVersion: cni.CurrentVersion, Interfaces: []*cni.Interface{iface}}
	// In DPDK mode the device is bound to a userspace driver: there is no
	// kernel interface to move, only addresses to report.
	var saved *savedDevice
	if !conf.DPDKMode {
		if saved, iface.Mac, err = moveIn(a, add, hh, conf, statePath(conf.StateDir, a.ContainerID, a.IfName)); err != nil {
			return nil, err
		}
	}
	if !conf.isL3() {
		// No dns in a layer-2 result, even when the config has one (the
		// reference's quirk, kept).
		if conf.UseInterfaceNetwork {
			networkResult(result, saved)
		}
		return result, nil
	}
	var r *cni.Result
	if conf.UseInterfaceNetwork {
		// The device's own addresses may be all there is: IPAM may add
		// none.
		if r, err = cni.DelegateAdd(ctx, conf.IPAM.Type, a); err != nil {
			return nil, err
		}
		add.IPAMReserved(ctx, conf.IPAM.Type)
	} else if r, err = add.DelegateAdd(ctx, conf.IPAM.Type); err != nil {
		return nil, err
	}
	for _, ip := range r.IPs {
		ip.Interface = cni.Int(0)
	}
	result.IPs, result.Routes = r.IPs, r.Routes
	if !conf.DPDKMode {
		if err := addrconf.ConfigureInterface(add.HC, a.IfName, result); err != nil {
			return nil, err
		}
	}
	if conf.UseInterfaceNetwork {
		networkResult(result, saved)
	}
	result.DNS = conf.DNS.DNS()
	return result, nil
}

// moveIn finds the device, records its host-side state, moves it into the
// container as CNI_IFNAME and sets it up there; with useInterfaceNetwork
// it gives it its addresses, routes and rules there (applyNetwork). It
// registers moving it back (and removing the record) with the ADD's
// rollback. It returns the record and the device's MAC in the container.
func moveIn(a *cni.CmdArgs, add *ifplugin.Add, hh *netlinkx.Handle, conf *NetConf, state string) (*savedDevice, string, error) {
	dev, err := findDevice(hh, sysfsRoot, conf)
	if err != nil {
		return nil, "", fmt.Errorf("failed to find host device: %w", err)
	}
	saved, err := snapshot(hh, dev)
	if err != nil {
		return nil, "", fmt.Errorf("failed to read the state of %q: %w", dev.Name, netlinkx.Cause(err))
	}
	var rules []netlinkx.Rule
	if conf.UseInterfaceNetwork {
		if rules, err = hostRules(hh, saved.Addrs, saved.Routes); err != nil {
			return nil, "", fmt.Errorf("failed to list rules: %w", netlinkx.Cause(err))
		}
		// Recorded before they are added, so that a DEL after a crash
		// in between removes them too.
		saved.CtrRules = rules
	}
	// A state file from before this ADD belongs to a live attachment of
	// the same container ID and interface name (a repeated ADD): the
	// rollback puts it back instead of removing it.
	restore, err := keepState(state)
	if err != nil {
		return nil, "", err
	}
	saved.Network = conf.Name
	if err := writeState(state, saved); err != nil {
		return nil, "", err
	}
	add.Push("device state", restore)
	m := move{
		from: add.HostNS, to: add.CtrNS, hFrom: hh, hTo: add.HC,
		name: dev.Name, newName: a.IfName, alias: dev.Name, oldAlias: dev.Alias,
	}
	if err := m.run(); err != nil {
		// The device is back where it was, but without its addresses.
		_ = saved.restore(hh)
		return nil, "", fmt.Errorf("failed to move link %w", netlinkx.Cause(err))
	}
	add.Push("moving the device back", func() error { return moveOut(add.HC, add.CtrNS, add.HostNS, hh, a.IfName, &saved) })
	if err := add.HC.SetUp(a.IfName); err != nil {
		return nil, "", fmt.Errorf("failed to set %q up: %w", a.IfName, netlinkx.Cause(err))
	}
	l, err := add.HC.LinkByName(a.IfName)
	if err != nil {
		return nil, "", fmt.Errorf("failed to find %q in container: %w", a.IfName, netlinkx.Cause(err))
	}
	if conf.UseInterfaceNetwork {
		// Only the rules this ADD added are removed, by DEL or, should the
		// ADD fail, by moving the device back (a rule the container had
		// already stays).
		added, err := applyNetwork(add.HC, a.IfName, l.Index, &saved, rules)
		saved.CtrRules = added
		if err != nil {
			return nil, "", err
		}
		if len(added) != len(rules) {
			if err := writeState(state, saved); err != nil {
				return nil, "", err
			}
		}
	}
	return &saved, l.MAC.String(), nil
}

// moveOut gives the container's ifName back to the host: under the name
// its alias (or the saved state) records, with its old alias, addresses
// and up state (from saved, nil when there is none: the reference left
// the device down without addresses). A missing ifName is success: it was
// moved back already.
func moveOut(hc *netlinkx.Handle, ctrNS, hostNS *netns.NS, hh *netlinkx.Handle, ifName string, saved *savedDevice) error {
	l, err := hc.LinkByName(ifName)
	if errors.Is(err, netlinkx.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("failed to find %q in containerNS: %w", ifName, netlinkx.Cause(err))
	}
	orig := l.Alias
	if orig == "" && saved != nil {
		orig = saved.Name
	}
	if orig == "" {
		return fmt.Errorf("failed to find original ifname for %q (alias is not set)", ifName)
	}
	oldAlias := ""
	if saved != nil && saved.Name == orig {
		oldAlias = saved.Alias
		// The rules useInterfaceNetwork added in the container go first:
		// they send the device's addresses to tables that are empty
		// without it.
		if err := delRules(hc, saved.CtrRules); err != nil {
			return fmt.Errorf("removing the rules copied into the container: %w", err)
		}
	}
	m := move{
		from: ctrNS, to: hostNS, hFrom: hc, hTo: hh,
		name: ifName, newName: orig, alias: oldAlias, oldAlias: l.Alias,
	}
	if err := m.run(); err != nil {
		return fmt.Errorf("failed to move %q back to the host as %q: %w", ifName, orig, netlinkx.Cause(err))
	}
	if saved != nil && saved.Name == orig {
		if err := saved.restore(hh); err != nil {
			return fmt.Errorf("restoring %q in the host: %w", orig, err)
		}
	}
	return nil
}

// cmdDel releases IPAM (even with an empty CNI_NETNS), then moves the
// device back to the host. A vanished namespace or interface is success:
// the kernel has already sent a physical device back to the initial
// namespace, or destroyed a virtual one. Errors are collected so that
// everything that can be cleaned up is.
func cmdDel(ctx context.Context, a *cni.CmdArgs) error {
	conf, err := loadConf(a.StdinData, sysfsRoot, true)
	if err != nil {
		return err
	}
	var errs []error
	if conf.isL3() {
		if err := cni.DelegateDel(ctx, conf.IPAM.Type, a); err != nil {
			errs = append(errs, err)
		}
	}
	state := statePath(conf.StateDir, a.ContainerID, a.IfName)
	if err := delLink(a, conf, state); err != nil {
		errs = append(errs, err)
	} else if err := removeState(state); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// delLink moves the container's interface back to the host, if there is
// anything to move.
func delLink(a *cni.CmdArgs, conf *NetConf, state string) error {
	if a.Netns == "" || conf.DPDKMode {
		return nil
	}
	hc, err := ifplugin.OpenNetns(a.Netns)
	if errors.Is(err, netns.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer hc.Close()
	hostNS, err := netns.Current()
	if err != nil {
		return err
	}
	defer hostNS.Close()
	hh, err := netlinkx.Open(nil)
	if err != nil {
		return err
	}
	defer hh.Close()
	saved, ok, err := readState(state)
	if err != nil {
		return err
	}
	var sp *savedDevice
	if ok {
		sp = &saved
	}
	return moveOut(hc, hc.NS(), hostNS, hh, a.IfName, sp)
}

// cmdCheck verifies the attachment described by prevResult: the interface is in
// the container with its MAC, and its addresses and routes are in place.
func cmdCheck(ctx context.Context, a *cni.CmdArgs) error {
	conf, err := loadConf(a.StdinData, sysfsRoot, false)
	if err != nil {
		return err
	}
	if conf.DPDKMode {
		// The device is not a netdev in the container: only IPAM and
		// prevResult are checked.
		hc, _, err := ifplugin.BeginCheck(ctx, a, &conf.NetConf, conf.isL3(), "Required prevResult missing")
		if err == nil {
			hc.Close()
		}
		return err
	}
	ck, err := ifplugin.BeginChildCheck(ctx, a, &conf.NetConf, conf.isL3(), "Required prevResult missing", nil)
	if err != nil {
		return err
	}
	defer ck.Close()
	l, err := ck.Link("", checkMsgs) // any kind: the device is whatever the host had
	if err != nil {
		return err
	}
	if err := ck.MAC(l, checkMsgs); err != nil {
		return err
	}
	return ck.AddrsAndRoutes(a.IfName)
}

// checkMsgs are the reference host-device's CHECK texts.
var checkMsgs = ifplugin.LinkMsgs{
	NoName:   "Container interface name missing in prevResult: %v",
	NotFound: "Container Interface name in prevResult: %s not found",
	InHost:   "Error: Container interface %s should not be in host namespace",
	Mac:      "Interface %s Mac %s doesn't match container Mac: %s",
}

// cmdStatus forwards STATUS to IPAM, when there is one; the device itself
// is not looked at, as in the reference.
func cmdStatus(ctx context.Context, a *cni.CmdArgs) error {
	conf, err := cni.DecodeNetConf(a.StdinData, "failed to load netconf")
	if err != nil || conf.IPAM.Type == "" {
		return err
	}
	return cni.DelegateStatus(ctx, conf.IPAM.Type, a)
}
