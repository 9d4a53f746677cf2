// Package dummy is the "dummy" plugin: the container gets a dummy link — a
// device that drops what it is sent — carrying the IPAM addresses, e.g. a
// stable address for a service inside the container that does not depend
// on any real interface.
//
// Behaviour follows contract/main-plugins.md §9, with the deliberate
// differences of DESIGN §3 (see README.md).
package dummy

import (
	"context"
	"errors"
	"fmt"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/ipam"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/plugins/internal/vethplugin"
)

// Plugin is the dummy plugin.
var Plugin = &cni.Plugin{
	Name:   "dummy",
	Add:    cmdAdd,
	Del:    cmdDel,
	Check:  cmdCheck,
	GC:     cmdGC,
	Status: cmdStatus,
}

// errNoIPAM is the reference's message for a config without ipam.type,
// which ADD and CHECK refuse before doing anything.
var errNoIPAM = errors.New("dummy interface requires an IPAM configuration")

// parseConf decodes the config: dummy has only the standard keys, and
// ignores dns (the result carries IPAM's).
func parseConf(stdin []byte) (*cni.NetConf, error) {
	return cni.DecodeNetConf(stdin, "failed to parse network config")
}

func cmdAdd(ctx context.Context, a *cni.CmdArgs) (_ *cni.Result, err error) {
	conf, err := parseConf(a.StdinData)
	if err != nil {
		return nil, err
	}
	if conf.IPAM.Type == "" {
		return nil, errNoIPAM
	}
	add, err := vethplugin.BeginAdd("dummy", a)
	if err != nil {
		return nil, err
	}
	defer add.End(&err) // a failed ADD is rolled back

	// Made under its final name inside the container's namespace: no
	// temporary name needed, nothing of it is ever in the host's.
	if err := add.HC.AddDummy(a.IfName); err != nil {
		return nil, fmt.Errorf("failed to create dummy: %w", vethplugin.Unwrap(err))
	}
	add.LinkCreated(add.HC, a.IfName)
	link, err := add.HC.LinkByName(a.IfName)
	if err != nil {
		return nil, fmt.Errorf("failed to fetch dummy%q: %w", a.IfName, vethplugin.Unwrap(err))
	}

	result, err := add.DelegateAdd(ctx, conf.IPAM.Type) // released on failure
	if err != nil {
		return nil, err
	}
	for _, ip := range result.IPs {
		ip.Interface = cni.Int(0)
	}
	result.Interfaces = []*cni.Interface{{Name: a.IfName, Mac: link.MAC.String(), Sandbox: a.Netns}}
	if err := ipam.ConfigureInterface(add.HC, a.IfName, result); err != nil {
		return nil, err
	}
	// IPAM's DNS stays; the config's is ignored, as in the reference.
	result.CNIVersion = cni.CurrentVersion
	return result, nil
}

// cmdDel releases the addresses, then deletes the dummy (contract §9.3).
// A failing IPAM DEL does not stop the link's removal; a missing link or
// namespace, or an empty CNI_NETNS, is success.
func cmdDel(ctx context.Context, a *cni.CmdArgs) error {
	conf, err := parseConf(a.StdinData)
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

// cmdCheck verifies the dummy described by prevResult (contract §9.3): it
// exists, is a dummy with the recorded MAC, is up, and carries its
// addresses. Routes are not checked, as in the reference.
func cmdCheck(ctx context.Context, a *cni.CmdArgs) error {
	conf, err := parseConf(a.StdinData)
	if err != nil {
		return err
	}
	if conf.IPAM.Type == "" {
		return errNoIPAM
	}
	ctrNS, result, err := vethplugin.BeginCheck(ctx, a, conf, true, "dummy: Required prevResult missing")
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
	if l.Kind != "dummy" {
		return fmt.Errorf("Error: Container interface %s not of type dummy", l.Name)
	}
	if cont.Mac != "" && cont.Mac != l.MAC.String() {
		return fmt.Errorf("Interface %s Mac %s doesn't match container Mac: %s", cont.Name, cont.Mac, l.MAC)
	}
	if !l.Up {
		return fmt.Errorf("Interface %s is down", cont.Name)
	}
	return ipam.CheckAddresses(hc, a.IfName, result.IPs)
}

// cmdGC forwards GC to IPAM (unconditionally: dummy cannot work without
// IPAM); dummy keeps no state of its own.
func cmdGC(ctx context.Context, a *cni.CmdArgs) error {
	conf, err := parseConf(a.StdinData)
	if err != nil {
		return err
	}
	return cni.DelegateGC(ctx, conf.IPAM.Type, a)
}

// cmdStatus forwards STATUS to IPAM unconditionally, as the reference.
func cmdStatus(ctx context.Context, a *cni.CmdArgs) error {
	conf, err := parseConf(a.StdinData)
	if err != nil {
		return err
	}
	return cni.DelegateStatus(ctx, conf.IPAM.Type, a)
}
