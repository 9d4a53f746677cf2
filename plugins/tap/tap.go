// Package tap is the "tap" plugin: a persistent tap device in the
// container's namespace, for a consumer (a VM monitor, a userspace network
// stack) that attaches to it later through /dev/net/tun.
//
// It behaves like the reference tap plugin (same keys, results and
// error texts) except for the deliberate differences listed, with their
// reasons, in README.md: the tap is always made with
// ioctls and netlink, never by exec'ing `ip`, so mtu and mac are always
// honoured, and a tap without carrier never waits for IPv6 duplicate
// address detection.
package tap

import (
	"context"
	"errors"
	"fmt"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/plugins/internal/addrconf"
	"github.com/nftcni/nftcni/plugins/internal/ifplugin"
	"github.com/nftcni/nftcni/sysctl"
)

// Plugin is the tap plugin.
var Plugin = &cni.Plugin{
	Name:   "tap",
	Add:    cmdAdd,
	Del:    cmdDel,
	Check:  cmdCheck,
	GC:     cmdGC,
	Status: cmdStatus,
	Validate: func(stdin []byte) error {
		conf, err := loadConf(stdin, "")
		if err != nil {
			return err
		}
		return conf.check(stdin)
	},
}

func cmdAdd(ctx context.Context, a *cni.CmdArgs) (_ *cni.Result, err error) {
	conf, err := loadConf(a.StdinData, a.Args)
	if err != nil {
		return nil, err
	}
	if err := conf.check(a.StdinData); err != nil {
		return nil, err
	}
	add, err := ifplugin.BeginAdd("tap", a)
	if err != nil {
		return nil, err
	}
	defer add.End(&err) // a failed ADD is rolled back
	hc := add.HC

	if conf.SelinuxContext != "" {
		// The reference labels the `ip` process it execs; we exec nothing
		// (README: "selinuxContext").
		a.Logf("tap: selinuxContext %q accepted; the tap is created by the plugin itself and carries the plugin's label", conf.SelinuxContext)
	}
	// Created under its final name: with IFF_TUN_EXCL an existing link of
	// that name fails the ioctl instead of being attached to, and the
	// namespace is the container's, so no host link can clash. The
	// reference's temporary name and rename add nothing.
	spec := netlinkx.TapSpec{Name: a.IfName, MultiQueue: conf.MultiQueue, Owner: conf.Owner, Group: conf.Group}
	if err := hc.AddTap(spec); err != nil {
		return nil, fmt.Errorf("failed to create tap %q: %w", a.IfName, netlinkx.Cause(err))
	}
	add.LinkCreated(hc, a.IfName)
	if conf.MTU > 0 {
		if err := hc.SetMTU(a.IfName, conf.MTU); err != nil {
			return nil, fmt.Errorf("failed to set MTU %d on tap %q: %w", conf.MTU, a.IfName, netlinkx.Cause(err))
		}
	}
	if conf.mac != nil {
		if err := hc.SetMAC(a.IfName, conf.mac); err != nil {
			return nil, fmt.Errorf("failed to set MAC %s on tap %q: %w", conf.mac, a.IfName, netlinkx.Cause(err))
		}
	}
	if conf.Bridge != "" {
		if _, err := hc.LinkByName(conf.Bridge); err != nil {
			return nil, fmt.Errorf("failed to get bridge %s: %w", conf.Bridge, netlinkx.Cause(err))
		}
		if err := hc.SetMaster(a.IfName, conf.Bridge); err != nil {
			return nil, fmt.Errorf("failed to set tap %s as a port of bridge %s: %w", a.IfName, conf.Bridge, netlinkx.Cause(err))
		}
	}
	if err := hc.SetUp(a.IfName); err != nil {
		return nil, fmt.Errorf("failed to set tap interface up: %w", netlinkx.Cause(err))
	}
	link, err := hc.LinkByName(a.IfName)
	if err != nil {
		return nil, fmt.Errorf("failed to refetch tap %q: %w", a.IfName, netlinkx.Cause(err))
	}

	result := &cni.Result{
		CNIVersion: cni.CurrentVersion,
		Interfaces: []*cni.Interface{{Name: a.IfName, Mac: link.MAC.String(), Sandbox: a.Netns}},
	}
	if conf.isL3() {
		r, err := add.DelegateAdd(ctx, conf.IPAM.Type)
		if err != nil {
			return nil, err
		}
		for _, ip := range r.IPs {
			ip.Interface = cni.Int(0)
		}
		result.IPs, result.Routes = r.IPs, r.Routes
		_ = sysctl.Set(add.CtrNS, "net/ipv4/conf/"+a.IfName+"/arp_notify", "1")
		// A tap has no carrier until its consumer attaches, so duplicate
		// address detection cannot run: the reference waits 5 s for it
		// and leaves the addresses tentative. Off, they are usable now.
		_ = sysctl.Set(add.CtrNS, "net/ipv6/conf/"+a.IfName+"/accept_dad", "0")
		if err := addrconf.ConfigureInterface(hc, a.IfName, result); err != nil {
			return nil, err
		}
	}
	// The config's dns, whatever IPAM said (the reference's quirk, kept).
	result.DNS = conf.DNS.DNS()
	return result, nil
}

// cmdDel releases the addresses and deletes the tap. A
// missing tap or namespace and an empty CNI_NETNS are fine; an IPAM
// failure does not stop the tap's removal, and the errors are returned
// together.
func cmdDel(ctx context.Context, a *cni.CmdArgs) error {
	conf, err := loadConf(a.StdinData, a.Args)
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
		if err := ifplugin.DeleteLink(a.Netns, a.IfName); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// cmdCheck verifies the attachment described by prevResult: the reference
// checks only addresses and routes; we also check that the interface is
// still a tap.
func cmdCheck(ctx context.Context, a *cni.CmdArgs) error {
	conf, err := loadConf(a.StdinData, a.Args)
	if err != nil {
		return err
	}
	hc, result, err := ifplugin.BeginCheck(ctx, a, &conf.NetConf, conf.isL3(), "Required prevResult missing")
	if err != nil {
		return err
	}
	defer hc.Close()
	if _, err := addrconf.ContainerInterface(result.Interfaces, a.IfName, a.Netns); err != nil {
		return err
	}
	if _, err := hc.TunInfo(a.IfName); err != nil {
		return fmt.Errorf("tap: container interface %s: %w", a.IfName, netlinkx.Cause(err))
	}
	if err := addrconf.CheckAddresses(hc, a.IfName, result.IPs); err != nil {
		return err
	}
	return addrconf.CheckRoutes(hc, result.Routes)
}

// cmdGC forwards GC to IPAM, when there is one; the tap plugin holds no
// state of its own.
func cmdGC(ctx context.Context, a *cni.CmdArgs) error {
	conf, err := loadConf(a.StdinData, "")
	if err != nil {
		return err
	}
	if !conf.isL3() {
		return nil
	}
	return cni.DelegateGC(ctx, conf.IPAM.Type, a)
}

// cmdStatus forwards STATUS to IPAM, when there is one.
func cmdStatus(ctx context.Context, a *cni.CmdArgs) error {
	conf, err := loadConf(a.StdinData, "")
	if err != nil {
		return err
	}
	if !conf.isL3() {
		return nil
	}
	return cni.DelegateStatus(ctx, conf.IPAM.Type, a)
}
