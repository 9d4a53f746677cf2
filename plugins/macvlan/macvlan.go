// Package macvlan is the "macvlan" plugin: the container's interface is a
// macvlan on a lower ("master") device of the host — its own MAC on the
// master's wire, so the container appears as one more station on that
// network, without a bridge.
//
// Behaviour follows contract/main-plugins.md §4, with the deliberate
// differences of DESIGN §3 (see README.md).
package macvlan

import (
	"context"
	"errors"
	"fmt"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/ipam"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/plugins/internal/vethplugin"
)

// Plugin is the macvlan plugin.
var Plugin = &cni.Plugin{
	Name:   "macvlan",
	Add:    cmdAdd,
	Del:    cmdDel,
	Check:  cmdCheck,
	GC:     cmdGC,
	Status: cmdStatus,
}

func cmdAdd(ctx context.Context, a *cni.CmdArgs) (_ *cni.Result, err error) {
	conf, err := loadConf(a.StdinData, a.Args)
	if err != nil {
		return nil, err
	}
	add, err := vethplugin.BeginAdd("macvlan", a)
	if err != nil {
		return nil, err
	}
	defer add.End(&err) // a failed ADD is rolled back
	lh, done, err := vethplugin.LowerHandle(add.HC, conf.LinkInContainer)
	if err != nil {
		return nil, err
	}
	defer done()
	master, err := conf.master(lh)
	if err != nil {
		return nil, err
	}

	// Created in the lower device's namespace, straight into the
	// container's (a no-op move with linkInContainer).
	link, err := add.CreateRenamed(add.HC, "macvlan", a.IfName, func(tmp string) error {
		spec := netlinkx.MacvlanSpec{
			ChildSpec:  netlinkx.ChildSpec{Name: tmp, Parent: master.Index, NS: add.CtrNS, MTU: conf.MTU, MAC: conf.mac},
			Mode:       conf.mode,
			BcQueueLen: conf.BcQueueLen,
		}
		return lh.AddMacvlan(spec)
	})
	if err != nil {
		return nil, err
	}
	result := &cni.Result{
		CNIVersion: cni.CurrentVersion,
		Interfaces: []*cni.Interface{{Name: a.IfName, Mac: link.MAC.String(), Sandbox: a.Netns}},
	}

	if conf.isL3() {
		r, err := add.DelegateAdd(ctx, conf.IPAM.Type) // released on failure
		if err != nil {
			return nil, err
		}
		for _, ip := range r.IPs {
			ip.Interface = cni.Int(0)
		}
		result.IPs, result.Routes = r.IPs, r.Routes
		// Announce the addresses when the link comes up (errors ignored,
		// as in the reference).
		_ = netlinkx.SetSysctl(add.CtrNS, "net/ipv4/conf/"+a.IfName+"/arp_notify", "1")
		_ = netlinkx.SetSysctl(add.CtrNS, "net/ipv6/conf/"+a.IfName+"/ndisc_notify", "1")
		if err := ipam.ConfigureInterface(add.HC, a.IfName, result); err != nil {
			return nil, err
		}
	} else if err := add.HC.SetUp(a.IfName); err != nil {
		return nil, fmt.Errorf("failed to set %q UP: %w", a.IfName, vethplugin.Unwrap(err))
	}

	// The config's DNS, even when empty: IPAM's is dropped, as in the
	// reference.
	result.DNS = conf.DNS.DNS()
	return result, nil
}

// cmdDel releases the addresses, then deletes the macvlan (contract
// §4.3). A failing IPAM DEL does not stop the link's removal; the errors
// are returned together. A missing link or namespace, or an empty
// CNI_NETNS, is success.
func cmdDel(ctx context.Context, a *cni.CmdArgs) error {
	conf, err := decode(a.StdinData, "failed to load netConf")
	if err != nil {
		return err
	}
	var errs []error
	if conf.isL3() {
		if err := cni.DelegateDel(ctx, conf.IPAM.Type, a); err != nil {
			errs = append(errs, err)
		}
	}
	if a.Netns != "" {
		if err := vethplugin.DeleteLink(a.Netns, a.IfName); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// cmdCheck verifies the macvlan described by prevResult (contract §4.4):
// the master exists, the container interface is a macvlan of the
// configured mode with the recorded MAC, and its addresses and routes are
// in place. MTU is not compared, as in the reference.
func cmdCheck(ctx context.Context, a *cni.CmdArgs) error {
	conf, err := loadConf(a.StdinData, a.Args)
	if err != nil {
		return err
	}
	ctrNS, result, err := vethplugin.BeginCheck(ctx, a, &conf.NetConf, conf.isL3(), "required prevResult missing")
	if err != nil {
		return err
	}
	defer ctrNS.Close()
	cont, err := ipam.ContainerInterface(result.Interfaces, a.IfName, a.Netns)
	if err != nil {
		return fmt.Errorf("sandbox in prevResult %s doesn't match configured netns: %s", cont.Sandbox, a.Netns)
	}
	hc, err := netlinkx.Open(ctrNS)
	if err != nil {
		return err
	}
	defer hc.Close()
	lh, done, err := vethplugin.LowerHandle(hc, conf.LinkInContainer)
	if err != nil {
		return err
	}
	defer done()
	if _, err := conf.master(lh); err != nil {
		return err
	}

	if cont.Name == "" {
		return fmt.Errorf("container interface name missing in prevResult: %v", cont.Name)
	}
	l, err := hc.LinkByName(cont.Name)
	if err != nil {
		return fmt.Errorf("container Interface name in prevResult: %s not found", cont.Name)
	}
	if cont.Sandbox == "" {
		return fmt.Errorf("error: Container interface %s should not be in host namespace", l.Name)
	}
	if l.Kind != "macvlan" {
		return fmt.Errorf("error: Container interface %s not of type macvlan", l.Name)
	}
	info, err := hc.Macvlan(l.Name)
	if err != nil {
		return err
	}
	if info.Mode != conf.mode {
		return fmt.Errorf("container macvlan mode %s does not match expected value: %s", info.Mode, conf.mode)
	}
	if cont.Mac != "" && cont.Mac != l.MAC.String() {
		return fmt.Errorf("interface %s Mac %s doesn't match container Mac: %s", cont.Name, cont.Mac, l.MAC)
	}
	if err := ipam.CheckAddresses(hc, a.IfName, result.IPs); err != nil {
		return err
	}
	return ipam.CheckRoutes(hc, result.Routes)
}

// cmdGC forwards GC to IPAM, when there is one; macvlan keeps no state of
// its own.
func cmdGC(ctx context.Context, a *cni.CmdArgs) error {
	conf, err := decode(a.StdinData, "failed to load netconf")
	if err != nil || !conf.isL3() {
		return err
	}
	return cni.DelegateGC(ctx, conf.IPAM.Type, a)
}

// cmdStatus forwards STATUS to IPAM, when there is one.
func cmdStatus(ctx context.Context, a *cni.CmdArgs) error {
	conf, err := decode(a.StdinData, "failed to load netconf")
	if err != nil || !conf.isL3() {
		return err
	}
	return cni.DelegateStatus(ctx, conf.IPAM.Type, a)
}
