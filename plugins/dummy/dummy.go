// Package dummy is the "dummy" plugin: the container gets a dummy link — a
// device that drops what it is sent — carrying the IPAM addresses, e.g. a
// stable address for a service inside the container that does not depend
// on any real interface.
//
// It behaves like the reference dummy plugin (same keys, results and
// error texts) except for the deliberate differences listed, with their
// reasons, in README.md.
package dummy

import (
	"context"
	"fmt"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/plugins/internal/addrconf"
	"github.com/nftcni/nftcni/plugins/internal/ifplugin"
)

// Plugin is the dummy plugin.
var Plugin = &cni.Plugin{
	Name:   "dummy",
	Add:    cmdAdd,
	Del:    func(ctx context.Context, a *cni.CmdArgs) error { return ifplugin.ChildDel(ctx, a, ipamOf) },
	Check:  cmdCheck,
	GC:     func(ctx context.Context, a *cni.CmdArgs) error { return ifplugin.ChildGC(ctx, a, ipamOf) },
	Status: func(ctx context.Context, a *cni.CmdArgs) error { return ifplugin.ChildStatus(ctx, a, ipamOf) },
	Validate: func(stdin []byte) error {
		conf, err := loadConf(stdin)
		if err != nil {
			return err
		}
		if conf.IPAM.Type == "" {
			return errNoIPAM
		}
		return cni.ValidateIPAM(conf.IPAM.Type, stdin)
	},
}

func cmdAdd(ctx context.Context, a *cni.CmdArgs) (_ *cni.Result, err error) {
	conf, err := loadConf(a.StdinData)
	if err != nil {
		return nil, err
	}
	if conf.IPAM.Type == "" {
		return nil, errNoIPAM
	}
	if err := cni.ValidateIPAM(conf.IPAM.Type, a.StdinData); err != nil {
		return nil, err
	}
	add, err := ifplugin.BeginAdd("dummy", a)
	if err != nil {
		return nil, err
	}
	defer add.End(&err) // a failed ADD is rolled back

	// Made under its final name inside the container's namespace: no
	// temporary name needed, nothing of it is ever in the host's.
	if err := add.HC.AddDummy(a.IfName); err != nil {
		return nil, fmt.Errorf("failed to create dummy: %w", netlinkx.Cause(err))
	}
	add.LinkCreated(add.HC, a.IfName)
	link, err := add.HC.LinkByName(a.IfName)
	if err != nil {
		return nil, fmt.Errorf("failed to fetch dummy%q: %w", a.IfName, netlinkx.Cause(err))
	}

	result, err := add.DelegateAdd(ctx, conf.IPAM.Type) // released on failure
	if err != nil {
		return nil, err
	}
	if err := add.ConfigureChild(result, link, a.IfName, a.Netns, false); err != nil {
		return nil, err
	}
	// IPAM's DNS stays; the config's is ignored, as in the reference.
	result.CNIVersion = cni.CurrentVersion
	return result, nil
}

// cmdCheck verifies the dummy described by prevResult: it
// exists, is a dummy with the recorded MAC, is up, and carries its
// addresses. Routes are not checked, as in the reference.
func cmdCheck(ctx context.Context, a *cni.CmdArgs) error {
	conf, err := loadConf(a.StdinData)
	if err != nil {
		return err
	}
	if conf.IPAM.Type == "" {
		return errNoIPAM
	}
	ck, err := ifplugin.BeginChildCheck(ctx, a, conf, true, "dummy: Required prevResult missing", nil)
	if err != nil {
		return err
	}
	defer ck.Close()
	l, err := ck.Link("dummy", checkMsgs)
	if err != nil {
		return err
	}
	if err := ck.MAC(l, checkMsgs); err != nil {
		return err
	}
	if !l.Up {
		return fmt.Errorf("Interface %s is down", ck.Cont.Name)
	}
	return addrconf.CheckAddresses(ck.HC, a.IfName, ck.Result.IPs)
}

// checkMsgs are the reference dummy's wording.
var checkMsgs = ifplugin.LinkMsgs{
	NoName:   "Container interface name missing in prevResult: %v",
	NotFound: "Container Interface name in prevResult: %s not found",
	InHost:   "Error: Container interface %s should not be in host namespace",
	NotKind:  "Error: Container interface %s not of type dummy",
	Mac:      "Interface %s Mac %s doesn't match container Mac: %s",
}
