// Package vlan is the "vlan" plugin: the container's interface is an
// 802.1Q VLAN link on a lower ("master") device of the host, so the
// container sends and receives only frames tagged with the configured VLAN
// id on the master's wire.
//
// Behaviour follows contract/main-plugins.md §6, with the deliberate
// differences of DESIGN §3 (see README.md).
package vlan

import (
	"context"
	"errors"
	"fmt"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/ipam"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/plugins/internal/vethplugin"
)

// Plugin is the vlan plugin.
var Plugin = &cni.Plugin{
	Name:   "vlan",
	Add:    cmdAdd,
	Del:    cmdDel,
	Check:  cmdCheck,
	GC:     cmdGC,
	Status: cmdStatus,
}

func cmdAdd(ctx context.Context, a *cni.CmdArgs) (_ *cni.Result, err error) {
	conf, err := loadConf(a.StdinData)
	if err != nil {
		return nil, err
	}
	add, err := vethplugin.BeginAdd("vlan", a)
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

	link, err := add.CreateRenamed(add.HC, "vlan", a.IfName, func(tmp string) error {
		return lh.AddVlan(netlinkx.VlanSpec{
			ChildSpec: netlinkx.ChildSpec{Name: tmp, Parent: master.Index, NS: add.CtrNS, MTU: conf.MTU},
			ID:        conf.VlanID,
		})
	})
	if err != nil {
		return nil, err
	}

	// IPAM is required. The release is registered before IPAM ADD runs, so
	// it also covers a failing ADD and a result without addresses.
	typ := conf.IPAM.Type
	if typ != "" {
		add.Push("IPAM", func() error { return cni.DelegateDel(ctx, typ, a) })
	}
	result, err := cni.DelegateAdd(ctx, typ, a)
	if err != nil {
		// The reference's wording; a CNI error from the delegate keeps
		// its code and message (the reference turned it into text, code
		// 999).
		return nil, fmt.Errorf("failed to execute IPAM delegate: %w", err)
	}
	if len(result.IPs) == 0 {
		return nil, errors.New("IPAM plugin returned missing IP config")
	}
	for _, ip := range result.IPs {
		ip.Interface = cni.Int(0)
	}
	result.Interfaces = []*cni.Interface{{Name: a.IfName, Mac: link.MAC.String(), Sandbox: a.Netns}}
	if err := ipam.ConfigureInterface(add.HC, a.IfName, result); err != nil {
		return nil, err
	}
	// The config's DNS, even when empty: IPAM's is dropped, as in the
	// reference.
	result.DNS = conf.DNS.DNS()
	result.CNIVersion = cni.CurrentVersion
	return result, nil
}

// cmdDel releases the addresses, then deletes the VLAN link (contract
// §6.3). The config is only decoded: unlike the reference, DEL works when
// the master is gone (or its MTU changed), since neither is needed to
// clean up. A failing IPAM DEL does not stop the link's removal.
func cmdDel(ctx context.Context, a *cni.CmdArgs) error {
	conf, err := decode(a.StdinData)
	if err != nil {
		return err
	}
	var errs []error
	if err := cni.DelegateDel(ctx, conf.IPAM.Type, a); err != nil {
		errs = append(errs, err)
	}
	if a.Netns != "" {
		if err := vethplugin.DeleteLink(a.Netns, a.IfName); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// cmdCheck verifies the VLAN link described by prevResult (contract
// §6.4): the master exists, the container interface is a vlan with the
// recorded MAC, the configured id and (when set) MTU, and its addresses and
// routes are in place. Messages are the reference's, odd ones included.
func cmdCheck(ctx context.Context, a *cni.CmdArgs) error {
	conf, err := decode(a.StdinData)
	if err != nil {
		return err
	}
	ctrNS, result, err := vethplugin.BeginCheck(ctx, a, &conf.NetConf, true, "vlan: Required prevResult missing")
	if err != nil {
		return err
	}
	defer ctrNS.Close()
	cont, err := ipam.ContainerInterface(result.Interfaces, a.IfName, a.Netns)
	if err != nil {
		return err
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
	_, err = lh.LinkByName(conf.Master)
	done()
	if err != nil {
		return fmt.Errorf("failed to lookup master %q: %w", conf.Master, vethplugin.Unwrap(err))
	}

	if cont.Name == "" {
		return fmt.Errorf("Container interface name missing in prevResult: %v", cont.Name)
	}
	l, err := hc.LinkByName(cont.Name)
	if err != nil {
		return fmt.Errorf("vlan: Container Interface name in prevResult: %s not found", cont.Name)
	}
	if cont.Sandbox == "" {
		return fmt.Errorf("vlan: Error: Container interface %s should not be in host namespace", l.Name)
	}
	if l.Kind != "vlan" {
		return fmt.Errorf("Error: Container interface %s not of type vlan", l.Name)
	}
	if cont.Mac != "" && cont.Mac != l.MAC.String() {
		return fmt.Errorf("vlan: Interface %s Mac %s doesn't match container Mac: %s", cont.Name, cont.Mac, l.MAC)
	}
	id, err := hc.VlanID(l.Name)
	if err != nil {
		return err
	}
	if id != conf.VlanID {
		return fmt.Errorf("Error: Tuning link %s configured promisc is %v, current value is %d", cont.Name, conf.VlanID, id)
	}
	if conf.MTU != 0 && conf.MTU != l.MTU {
		return fmt.Errorf("Error: Tuning configured MTU of %s is %d, current value is %d", cont.Name, conf.MTU, l.MTU)
	}
	if err := ipam.CheckAddresses(hc, a.IfName, result.IPs); err != nil {
		return err
	}
	return ipam.CheckRoutes(hc, result.Routes)
}

// cmdGC forwards GC to IPAM (unconditionally: vlan cannot work without
// IPAM); vlan keeps no state of its own.
func cmdGC(ctx context.Context, a *cni.CmdArgs) error {
	conf, err := decode(a.StdinData)
	if err != nil {
		return err
	}
	return cni.DelegateGC(ctx, conf.IPAM.Type, a)
}

// cmdStatus forwards STATUS to IPAM unconditionally, as the reference.
func cmdStatus(ctx context.Context, a *cni.CmdArgs) error {
	conf, err := decode(a.StdinData)
	if err != nil {
		return err
	}
	return cni.DelegateStatus(ctx, conf.IPAM.Type, a)
}
