package bridge

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/plugins/internal/addrconf"
	"github.com/nftcni/nftcni/plugins/internal/ifplugin"
)

// cmdCheck verifies that the attachment described by prevResult still
// exists: the bridge, the container veth, the host veth
// joining them, with isGateway the gateway addresses on the bridge (or
// its VLAN interface), and the container's addresses and routes. Unlike
// the reference, a layer-2-only config (no IPAM) is checked too instead of
// failing on the missing IPAM type, and the gateway is checked at all.
func cmdCheck(ctx context.Context, a *cni.CmdArgs) error {
	conf, err := loadConf(a.StdinData, a.Args)
	if err != nil {
		return err
	}
	// IPAM CHECK only with IPAM: the reference asks it unconditionally.
	hc, result, err := ifplugin.BeginCheck(ctx, a, &conf.NetConf, conf.isL3(), "Required prevResult missing")
	if err != nil {
		return err
	}
	defer hc.Close()

	// The bridge entry is the last one named like the bridge; the container
	// interface is picked among the others, and its error (no entry with
	// CNI_IFNAME and CNI_NETNS) comes after the bridge's checks.
	var brEntry cni.Interface
	var others []*cni.Interface
	for _, intf := range result.Interfaces {
		if intf.Name == conf.BrName {
			brEntry = *intf
		} else {
			others = append(others, intf)
		}
	}
	contEntry, sandboxErr := addrconf.ContainerInterface(others, a.IfName, a.Netns)

	hh, err := netlinkx.Open(nil)
	if err != nil {
		return err
	}
	defer hh.Close()

	brLink, err := validateInterface(hh, brEntry, false)
	if err != nil {
		return err
	}
	if brLink.Kind != "bridge" {
		return fmt.Errorf("Interface %s does not have link type of bridge", brEntry.Name)
	}
	if brEntry.Mac != "" && brEntry.Mac != brLink.MAC.String() {
		return fmt.Errorf("Bridge interface %s Mac doesn't match: %s", brEntry.Name, brEntry.Mac)
	}
	if brLink.Promisc != conf.PromiscMode {
		return fmt.Errorf("Bridge interface %s configured Promisc Mode %v doesn't match current state: %v ",
			brEntry.Name, conf.PromiscMode, brLink.Promisc)
	}

	if sandboxErr != nil {
		return sandboxErr
	}

	contLink, err := validateInterface(hc, contEntry, true)
	if err != nil {
		return err
	}
	if contLink.Kind != "veth" {
		return fmt.Errorf("Error: Container interface %s not of type veth", contLink.Name)
	}
	if contLink.ParentIndex <= 0 {
		return fmt.Errorf("Unable to obtain veth peer index for veth %s", contLink.Name)
	}
	if contEntry.Mac != "" && contEntry.Mac != contLink.MAC.String() {
		return fmt.Errorf("Interface %s Mac %s doesn't match container Mac: %s", contEntry.Name, contEntry.Mac, contLink.MAC)
	}

	// The host veth: the first veth among the other entries whose peer is
	// the container interface and whose master is the bridge.
	vethFound := false
	for _, intf := range result.Interfaces {
		if intf.Name == brEntry.Name || intf.Name == contEntry.Name {
			continue
		}
		l, err := validateInterface(hh, *intf, false)
		if err != nil {
			return err
		}
		if l.Kind != "veth" {
			continue
		}
		if l.ParentIndex <= 0 {
			return fmt.Errorf("Unable to obtain veth peer index for veth %s", l.Name)
		}
		if l.Index != contLink.ParentIndex || contLink.Index != l.ParentIndex || l.MasterIndex != brLink.Index {
			continue
		}
		if intf.Mac != "" && intf.Mac != l.MAC.String() {
			return fmt.Errorf("Interface %s Mac doesn't match: %s not found", intf.Name, intf.Mac)
		}
		vethFound = true
		break
	}
	if !vethFound {
		return fmt.Errorf("CNI veth created for bridge %s was not found", conf.BrName)
	}
	// isDefaultGateway implies isGateway, as in ADD (addChecks).
	if conf.IsGW || conf.IsDefaultGW {
		if err := checkGateways(hh, conf, result); err != nil {
			return err
		}
	}

	if err := addrconf.CheckAddresses(hc, a.IfName, result.IPs); err != nil {
		return err
	}
	return addrconf.CheckRoutes(hc, result.Routes)
}

// validateInterface looks a prevResult entry up in h's namespace and checks
// it is (or is not) expected in a sandbox.
func validateInterface(h *netlinkx.Handle, intf cni.Interface, inSandbox bool) (netlinkx.Link, error) {
	if intf.Name == "" {
		return netlinkx.Link{}, errors.New("Interface name missing ")
	}
	l, err := h.LinkByName(intf.Name)
	if err != nil {
		return l, fmt.Errorf("Interface name %s not found", intf.Name)
	}
	if inSandbox && intf.Sandbox == "" {
		return l, fmt.Errorf("Interface %s is expected to be in a sandbox", intf.Name)
	}
	if !inSandbox && intf.Sandbox != "" {
		return l, fmt.Errorf("Interface %s should not be in sandbox", intf.Name)
	}
	return l, nil
}

// checkGateways verifies that each gateway address ADD put on the bridge
// (with vlan, on its VLAN interface <bridge>.<vlan>) is still there: for
// every IP of prevResult, its gateway with the IP's prefix length, the
// gateway being the first address of the subnet when prevResult has none
// (as ADD computes it, see calcGateways). Without it the container's
// default route leads nowhere, which the container-side checks cannot see.
func checkGateways(hh *netlinkx.Handle, conf *NetConf, r *cni.Result) error {
	where, name := "bridge", conf.BrName
	if conf.Vlan != 0 {
		where, name = "VLAN interface", fmt.Sprintf("%s.%d", conf.BrName, conf.Vlan)
	}
	addrs, err := hh.Addrs(name, 0)
	if errors.Is(err, netlinkx.ErrNotFound) {
		return fmt.Errorf("Gateway %s %s not found", where, name)
	}
	if err != nil {
		return err
	}
	for _, ip := range r.IPs {
		gw := ip.Gateway
		if !gw.IsValid() {
			gw = ip.Address.Masked().Addr().Next()
		}
		want := netip.PrefixFrom(gw, ip.Address.Bits())
		var problem string
		found := false
		for _, a := range addrs {
			switch {
			case a.Prefix == want && a.DADFailed():
				problem = " (duplicate address detection failed)"
			case a.Prefix == want:
				found = true
			case a.Prefix.Addr() == gw:
				problem = fmt.Sprintf(" (%s has %s)", name, a.Prefix)
			}
		}
		if !found {
			return fmt.Errorf("Failed to match gateway addr %s on %s %s%s", want, where, name, problem)
		}
	}
	return nil
}
