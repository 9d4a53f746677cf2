// Package ipvlan is the "ipvlan" plugin: the container's interface is an
// ipvlan on a lower ("master") device of the host. Unlike macvlan it
// shares the master's MAC; the master hands packets to the right ipvlan by
// MAC and address (l2) or by address alone (l3, l3s), which suits
// networks that allow one MAC per port.
//
// Behaviour follows contract/main-plugins.md §5, with the deliberate
// differences of DESIGN §3 (see README.md).
package ipvlan

import (
	"context"
	"errors"
	"fmt"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/ipam"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/plugins/internal/vethplugin"
)

// Plugin is the ipvlan plugin.
var Plugin = &cni.Plugin{
	Name:   "ipvlan",
	Add:    cmdAdd,
	Del:    cmdDel,
	Check:  cmdCheck,
	GC:     cmdGC,
	Status: cmdStatus,
}

func cmdAdd(ctx context.Context, a *cni.CmdArgs) (_ *cni.Result, err error) {
	conf, err := loadConf(a.StdinData, true)
	if err != nil {
		return nil, err
	}
	add, err := vethplugin.BeginAdd("ipvlan", a)
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

	link, err := add.CreateRenamed(add.HC, "ipvlan", a.IfName, func(tmp string) error {
		return lh.AddIPVlan(netlinkx.IPVlanSpec{
			ChildSpec: netlinkx.ChildSpec{Name: tmp, Parent: master.Index, NS: add.CtrNS, MTU: max(conf.MTU, 0)},
			Mode:      conf.mode,
		})
	})
	if err != nil {
		return nil, err
	}

	// Addresses: a chained prevResult's when there is no IPAM and it has
	// some; IPAM's otherwise (required then: an empty type fails).
	var result *cni.Result
	if conf.IPAM.Type == "" && conf.prev != nil && len(conf.prev.IPs) > 0 {
		result = conf.prev
	} else if result, err = add.DelegateAdd(ctx, conf.IPAM.Type); err != nil {
		return nil, err
	}
	for _, ip := range result.IPs {
		ip.Interface = cni.Int(0)
	}
	// A chain's earlier interfaces are dropped, as in the reference.
	result.Interfaces = []*cni.Interface{{Name: a.IfName, Mac: link.MAC.String(), Sandbox: a.Netns}}
	_ = netlinkx.SetSysctl(add.CtrNS, "net/ipv4/conf/"+a.IfName+"/arp_notify", "1")
	_ = netlinkx.SetSysctl(add.CtrNS, "net/ipv6/conf/"+a.IfName+"/ndisc_notify", "1")
	if err := ipam.ConfigureInterface(add.HC, a.IfName, result); err != nil {
		return nil, err
	}
	// The config's DNS, even when empty: IPAM's (or the chain's) is
	// dropped, as in the reference.
	result.DNS = conf.DNS.DNS()
	result.CNIVersion = cni.CurrentVersion
	return result, nil
}

// cmdDel releases the addresses (when IPAM is configured), then deletes
// the ipvlan (contract §5.3). The config is only decoded: unlike the
// reference, DEL does not look for the master, so it works when the
// master, the default route or the container's namespace is gone.
func cmdDel(ctx context.Context, a *cni.CmdArgs) error {
	conf, err := decode(a.StdinData)
	if err != nil {
		return err
	}
	var errs []error
	if conf.IPAM.Type != "" {
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

// cmdCheck verifies the ipvlan described by prevResult (contract §5.4):
// the configured master exists, the container interface is an ipvlan of
// the configured mode with the recorded MAC, and its addresses and routes
// are in place. With no master configured the master's existence is not
// checked: the kernel removes an ipvlan together with its master, and the
// name ADD found (default route, chained interface) cannot be recovered —
// the reference looked up "" and always failed.
func cmdCheck(ctx context.Context, a *cni.CmdArgs) error {
	conf, err := loadConf(a.StdinData, false)
	if err != nil {
		return err
	}
	ctrNS, result, err := vethplugin.BeginCheck(ctx, a, &conf.NetConf, conf.IPAM.Type != "", "Required prevResult missing")
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
	if conf.Master != "" {
		lh, done, err := vethplugin.LowerHandle(hc, conf.LinkInContainer)
		if err != nil {
			return err
		}
		_, err = conf.master(lh)
		done()
		if err != nil {
			return err
		}
	}

	if cont.Name == "" {
		return fmt.Errorf("Container interface name missing in prevResult: %v", cont.Name)
	}
	l, err := hc.LinkByName(cont.Name)
	if err != nil {
		return fmt.Errorf("Container Interface name in prevResult: %s not found", cont.Name)
	}
	if cont.Sandbox == "" {
		return fmt.Errorf("Error: Container interface %s should not be in host namespace", l.Name)
	}
	if l.Kind != "ipvlan" {
		return fmt.Errorf("Error: Container interface %s not of type ipvlan", l.Name)
	}
	mode, err := hc.IPVlanMode(l.Name)
	if err != nil {
		return err
	}
	if mode != conf.mode {
		return fmt.Errorf("Container IPVlan mode %s does not match expected value: %s", mode, conf.mode)
	}
	if cont.Mac != "" && cont.Mac != l.MAC.String() {
		return fmt.Errorf("Interface %s Mac %s doesn't match container Mac: %s", cont.Name, cont.Mac, l.MAC)
	}
	if err := ipam.CheckAddresses(hc, a.IfName, result.IPs); err != nil {
		return err
	}
	return ipam.CheckRoutes(hc, result.Routes)
}

// cmdGC forwards GC to IPAM, when there is one; ipvlan keeps no state of
// its own.
func cmdGC(ctx context.Context, a *cni.CmdArgs) error {
	conf, err := decode(a.StdinData)
	if err != nil || conf.IPAM.Type == "" {
		return err
	}
	return cni.DelegateGC(ctx, conf.IPAM.Type, a)
}

// cmdStatus forwards STATUS to IPAM, when there is one.
func cmdStatus(ctx context.Context, a *cni.CmdArgs) error {
	conf, err := decode(a.StdinData)
	if err != nil || conf.IPAM.Type == "" {
		return err
	}
	return cni.DelegateStatus(ctx, conf.IPAM.Type, a)
}
