// Package vlan is the "vlan" plugin: the container's interface is an
// 802.1Q VLAN link on a lower ("master") device of the host, so the
// container sends and receives only frames tagged with the configured VLAN
// id on the master's wire.
//
// It behaves like the reference vlan plugin (same keys, results and
// error texts) except for the deliberate differences listed, with their
// reasons, in README.md.
package vlan

import (
	"context"
	"errors"
	"fmt"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/plugins/internal/ifplugin"
)

// Plugin is the vlan plugin.
var Plugin = &cni.Plugin{
	Name:   "vlan",
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
		return ifplugin.CheckChild(conf.Master, &conf.NetConf, stdin)
	},
}

// ipamOf decodes the config for DEL, GC and STATUS, which call IPAM when
// the config has one (without, the VLAN link is layer 2 only). The config
// is only decoded: unlike the reference, DEL works when the master is gone
// (or its MTU changed), since neither is needed to clean up. vlan keeps no
// state of its own.
func ipamOf(stdin []byte) (string, bool, error) {
	conf, err := decode(stdin)
	if err != nil {
		return "", false, err
	}
	return conf.IPAM.Type, conf.isL3(), nil
}

func cmdAdd(ctx context.Context, a *cni.CmdArgs) (_ *cni.Result, err error) {
	conf, err := loadConf(a.StdinData)
	if err != nil {
		return nil, err
	}
	if err := ifplugin.CheckChild(conf.Master, &conf.NetConf, a.StdinData); err != nil {
		return nil, err
	}
	add, err := ifplugin.BeginAdd("vlan", a)
	if err != nil {
		return nil, err
	}
	defer add.End(&err) // a failed ADD is rolled back

	link, err := add.CreateOnLower(conf.LinkInContainer, "vlan", a.IfName, conf.master,
		func(lh *netlinkx.Handle, master netlinkx.Link, tmp string) error {
			return lh.AddVlan(netlinkx.VlanSpec{
				ChildSpec: netlinkx.ChildSpec{Name: tmp, Parent: master.Index, NS: add.CtrNS, MTU: conf.MTU},
				ID:        conf.VlanID,
			})
		})
	if err != nil {
		return nil, err
	}

	if !conf.isL3() {
		// Layer 2 only: the link, up, and no addresses. The config's DNS
		// is reported all the same, as the reference does.
		if err := add.HC.SetUp(a.IfName); err != nil {
			return nil, fmt.Errorf("failed to set %q UP: %w", a.IfName, netlinkx.Cause(err))
		}
		return &cni.Result{
			CNIVersion: cni.CurrentVersion,
			Interfaces: []*cni.Interface{{Name: a.IfName, Mac: link.MAC.String(), Sandbox: a.Netns}},
			DNS:        conf.DNS.DNS(),
		}, nil
	}

	// IPAM's release is registered only once IPAM ADD succeeded
	// (rollback.Rollback.DelegateAdd says why), so it covers a result
	// without addresses but never a refused reservation.
	typ := conf.IPAM.Type
	result, err := cni.DelegateAdd(ctx, typ, a)
	if err != nil {
		// The reference's wording; a CNI error from the delegate keeps
		// its code and message (the reference turned it into text, code
		// 999).
		return nil, fmt.Errorf("failed to execute IPAM delegate: %w", err)
	}
	add.IPAMReserved(ctx, typ)
	if len(result.IPs) == 0 {
		return nil, errors.New("IPAM plugin returned missing IP config")
	}
	if err := add.ConfigureChild(result, link, a.IfName, a.Netns, false); err != nil {
		return nil, err
	}
	// The config's DNS, even when empty: IPAM's is dropped, as in the
	// reference.
	result.DNS = conf.DNS.DNS()
	result.CNIVersion = cni.CurrentVersion
	return result, nil
}

// cmdCheck verifies the VLAN link described by prevResult: the master exists,
// the container interface is a vlan with the recorded MAC, the configured id
// and (when set) MTU, and its addresses and routes are in place. Messages are
// the reference's, odd ones included.
func cmdCheck(ctx context.Context, a *cni.CmdArgs) error {
	conf, err := decode(a.StdinData)
	if err != nil {
		return err
	}
	ck, err := ifplugin.BeginChildCheck(ctx, a, &conf.NetConf, conf.isL3(), "vlan: Required prevResult missing", nil)
	if err != nil {
		return err
	}
	defer ck.Close()
	lh, done, err := ifplugin.LowerHandle(ck.HC, conf.LinkInContainer)
	if err != nil {
		return err
	}
	_, err = lh.LinkByName(conf.Master)
	done()
	if err != nil {
		return fmt.Errorf("failed to lookup master %q: %w", conf.Master, netlinkx.Cause(err))
	}

	l, err := ck.Link("vlan", checkMsgs)
	if err != nil {
		return err
	}
	if err := ck.MAC(l, checkMsgs); err != nil {
		return err
	}
	id, err := ck.HC.VlanID(l.Name)
	if err != nil {
		return err
	}
	if id != conf.VlanID {
		return fmt.Errorf("Error: Tuning link %s configured promisc is %v, current value is %d", ck.Cont.Name, conf.VlanID, id)
	}
	if conf.MTU != 0 && conf.MTU != l.MTU {
		return fmt.Errorf("Error: Tuning configured MTU of %s is %d, current value is %d", ck.Cont.Name, conf.MTU, l.MTU)
	}
	return ck.AddrsAndRoutes(a.IfName)
}

// checkMsgs are the reference vlan's wording, "vlan: " prefixes where it
// has them.
var checkMsgs = ifplugin.LinkMsgs{
	NoName:   "Container interface name missing in prevResult: %v",
	NotFound: "vlan: Container Interface name in prevResult: %s not found",
	InHost:   "vlan: Error: Container interface %s should not be in host namespace",
	NotKind:  "Error: Container interface %s not of type vlan",
	Mac:      "vlan: Interface %s Mac %s doesn't match container Mac: %s",
}
