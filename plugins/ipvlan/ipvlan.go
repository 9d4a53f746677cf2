// Package ipvlan is the "ipvlan" plugin: the container's interface is an
// ipvlan on a lower ("master") device of the host. Unlike macvlan it
// shares the master's MAC; the master hands packets to the right ipvlan by
// MAC and address (l2) or by address alone (l3, l3s), which suits
// networks that allow one MAC per port.
//
// It behaves like the reference ipvlan plugin (same keys, results and
// error texts) except for the deliberate differences listed, with their
// reasons, in README.md.
package ipvlan

import (
	"context"
	"fmt"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/plugins/internal/ifplugin"
)

// Plugin is the ipvlan plugin.
var Plugin = &cni.Plugin{
	Name:   "ipvlan",
	Add:    cmdAdd,
	Del:    func(ctx context.Context, a *cni.CmdArgs) error { return ifplugin.ChildDel(ctx, a, ipamOf) },
	Check:  cmdCheck,
	GC:     func(ctx context.Context, a *cni.CmdArgs) error { return ifplugin.ChildGC(ctx, a, ipamOf) },
	Status: func(ctx context.Context, a *cni.CmdArgs) error { return ifplugin.ChildStatus(ctx, a, ipamOf) },
	Validate: func(stdin []byte) error {
		conf, err := loadConf(stdin, true)
		if err != nil {
			return err
		}
		return ifplugin.CheckChild(conf.Master, &conf.NetConf, stdin)
	},
}

// ipamOf decodes the config for DEL, GC and STATUS: IPAM
// is called only when configured. The config is only decoded: unlike the
// reference, DEL does not look for the master, so it works when the
// master, the default route or the container's namespace is gone. ipvlan
// keeps no state of its own.
func ipamOf(stdin []byte) (string, bool, error) {
	conf, err := decode(stdin)
	if err != nil {
		return "", false, err
	}
	return conf.IPAM.Type, conf.IPAM.Type != "", nil
}

func cmdAdd(ctx context.Context, a *cni.CmdArgs) (_ *cni.Result, err error) {
	conf, err := loadConf(a.StdinData, true)
	if err != nil {
		return nil, err
	}
	if err := ifplugin.CheckChild(conf.Master, &conf.NetConf, a.StdinData); err != nil {
		return nil, err
	}
	add, err := ifplugin.BeginAdd("ipvlan", a)
	if err != nil {
		return nil, err
	}
	defer add.End(&err) // a failed ADD is rolled back

	link, err := add.CreateOnLower(conf.LinkInContainer, "ipvlan", a.IfName, conf.master,
		func(lh *netlinkx.Handle, master netlinkx.Link, tmp string) error {
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
	if err := add.ConfigureChild(result, link, a.IfName, a.Netns, true); err != nil {
		return nil, err
	}
	// The config's DNS, even when empty: IPAM's (or the chain's) is
	// dropped, as in the reference.
	result.DNS = conf.DNS.DNS()
	result.CNIVersion = cni.CurrentVersion
	return result, nil
}

// cmdCheck verifies the ipvlan described by prevResult:
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
	ck, err := ifplugin.BeginChildCheck(ctx, a, &conf.NetConf, conf.IPAM.Type != "", "Required prevResult missing", nil)
	if err != nil {
		return err
	}
	defer ck.Close()
	if conf.Master != "" {
		lh, done, err := ifplugin.LowerHandle(ck.HC, conf.LinkInContainer)
		if err != nil {
			return err
		}
		_, err = conf.master(lh)
		done()
		if err != nil {
			return err
		}
	}

	l, err := ck.Link("ipvlan", checkMsgs)
	if err != nil {
		return err
	}
	mode, err := ck.HC.IPVlanMode(l.Name)
	if err != nil {
		return err
	}
	if mode != conf.mode {
		cur, err := modeName(mode)
		if err != nil {
			return err
		}
		return fmt.Errorf("Container IPVlan mode %s does not match expected value: %s", cur, conf.mode)
	}
	if err := ck.MAC(l, checkMsgs); err != nil {
		return err
	}
	return ck.AddrsAndRoutes(a.IfName)
}

// checkMsgs are the reference ipvlan's wording.
var checkMsgs = ifplugin.LinkMsgs{
	NoName:   "Container interface name missing in prevResult: %v",
	NotFound: "Container Interface name in prevResult: %s not found",
	InHost:   "Error: Container interface %s should not be in host namespace",
	NotKind:  "Error: Container interface %s not of type ipvlan",
	Mac:      "Interface %s Mac %s doesn't match container Mac: %s",
}
