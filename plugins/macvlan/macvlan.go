// Package macvlan is the "macvlan" plugin: the container's interface is a
// macvlan on a lower ("master") device of the host — its own MAC on the
// master's wire, so the container appears as one more station on that
// network, without a bridge.
//
// It behaves like the reference macvlan plugin (same keys, results and
// error texts) except for the deliberate differences listed, with their
// reasons, in README.md.
package macvlan

import (
	"context"
	"fmt"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/plugins/internal/ifplugin"
)

// Plugin is the macvlan plugin.
var Plugin = &cni.Plugin{
	Name: "macvlan",
	Add:  cmdAdd,
	Del: func(ctx context.Context, a *cni.CmdArgs) error {
		return ifplugin.ChildDel(ctx, a, ipamOf("failed to load netConf"))
	},
	Check: cmdCheck,
	GC: func(ctx context.Context, a *cni.CmdArgs) error {
		return ifplugin.ChildGC(ctx, a, ipamOf("failed to load netconf"))
	},
	Status: func(ctx context.Context, a *cni.CmdArgs) error {
		return ifplugin.ChildStatus(ctx, a, ipamOf("failed to load netconf"))
	},
	Validate: func(stdin []byte) error {
		conf, err := loadConf(stdin, "")
		if err != nil {
			return err
		}
		return ifplugin.CheckChild(conf.Master, &conf.NetConf, stdin)
	},
}

// ipamOf decodes the config for DEL, GC and STATUS, with
// the reference's message prefix for each: IPAM is called only when
// configured, as macvlan works without (L2 only). DEL releases the
// addresses, then deletes the macvlan; a missing link or namespace, or an
// empty CNI_NETNS, is success. macvlan keeps no state of its own.
func ipamOf(prefix string) ifplugin.IPAMOf {
	return func(stdin []byte) (string, bool, error) {
		conf, err := decode(stdin, prefix)
		if err != nil {
			return "", false, err
		}
		return conf.IPAM.Type, conf.isL3(), nil
	}
}

func cmdAdd(ctx context.Context, a *cni.CmdArgs) (_ *cni.Result, err error) {
	conf, err := loadConf(a.StdinData, a.Args)
	if err != nil {
		return nil, err
	}
	if err := ifplugin.CheckChild(conf.Master, &conf.NetConf, a.StdinData); err != nil {
		return nil, err
	}
	add, err := ifplugin.BeginAdd("macvlan", a)
	if err != nil {
		return nil, err
	}
	defer add.End(&err) // a failed ADD is rolled back

	// Created in the lower device's namespace, straight into the
	// container's (a no-op move with linkInContainer).
	link, err := add.CreateOnLower(conf.LinkInContainer, "macvlan", a.IfName, conf.master,
		func(lh *netlinkx.Handle, master netlinkx.Link, tmp string) error {
			return lh.AddMacvlan(netlinkx.MacvlanSpec{
				ChildSpec:  netlinkx.ChildSpec{Name: tmp, Parent: master.Index, NS: add.CtrNS, MTU: conf.MTU, MAC: conf.mac},
				Mode:       conf.mode,
				BcQueueLen: conf.BcQueueLen,
			})
		})
	if err != nil {
		return nil, err
	}
	result := &cni.Result{CNIVersion: cni.CurrentVersion}

	if conf.isL3() {
		r, err := add.DelegateAdd(ctx, conf.IPAM.Type) // released on failure
		if err != nil {
			return nil, err
		}
		result.IPs, result.Routes = r.IPs, r.Routes
		if err := add.ConfigureChild(result, link, a.IfName, a.Netns, true); err != nil {
			return nil, err
		}
	} else {
		result.Interfaces = []*cni.Interface{{Name: a.IfName, Mac: link.MAC.String(), Sandbox: a.Netns}}
		if err := add.HC.SetUp(a.IfName); err != nil {
			return nil, fmt.Errorf("failed to set %q UP: %w", a.IfName, netlinkx.Cause(err))
		}
	}

	// The config's DNS, even when empty: IPAM's is dropped, as in the
	// reference.
	result.DNS = conf.DNS.DNS()
	return result, nil
}

// cmdCheck verifies the macvlan described by prevResult:
// the master exists, the container interface is a macvlan of the
// configured mode with the recorded MAC, and its addresses and routes are
// in place. MTU is not compared, as in the reference.
func cmdCheck(ctx context.Context, a *cni.CmdArgs) error {
	conf, err := loadConf(a.StdinData, a.Args)
	if err != nil {
		return err
	}
	ck, err := ifplugin.BeginChildCheck(ctx, a, &conf.NetConf, conf.isL3(), "required prevResult missing",
		func(cont cni.Interface, _ error) error {
			return fmt.Errorf("sandbox in prevResult %s doesn't match configured netns: %s", cont.Sandbox, a.Netns)
		})
	if err != nil {
		return err
	}
	defer ck.Close()
	lh, done, err := ifplugin.LowerHandle(ck.HC, conf.LinkInContainer)
	if err != nil {
		return err
	}
	defer done()
	if _, err := conf.master(lh); err != nil {
		return err
	}

	l, err := ck.Link("macvlan", checkMsgs)
	if err != nil {
		return err
	}
	info, err := ck.HC.Macvlan(l.Name)
	if err != nil {
		return err
	}
	if info.Mode != conf.mode {
		cur, err := modeName(info.Mode)
		if err != nil {
			return err
		}
		return fmt.Errorf("container macvlan mode %s does not match expected value: %s", cur, conf.mode)
	}
	if err := ck.MAC(l, checkMsgs); err != nil {
		return err
	}
	return ck.AddrsAndRoutes(a.IfName)
}

// checkMsgs are the reference macvlan's wording (lower case, unlike
// ipvlan's).
var checkMsgs = ifplugin.LinkMsgs{
	NoName:   "container interface name missing in prevResult: %v",
	NotFound: "container Interface name in prevResult: %s not found",
	InHost:   "error: Container interface %s should not be in host namespace",
	NotKind:  "error: Container interface %s not of type macvlan",
	Mac:      "interface %s Mac %s doesn't match container Mac: %s",
}
