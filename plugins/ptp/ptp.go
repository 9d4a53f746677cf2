// Package ptp is the "ptp" plugin: a point-to-point veth between the
// container and the runtime's namespace. The container gets the IPAM
// address and reaches everything through the gateway, which lives as a /32
// (/128) on the host end of the veth; the host routes the container's
// address to that end.
//
// It behaves like the reference ptp plugin (same keys, results and
// error texts) except for the deliberate differences listed, with their
// reasons, in README.md.
package ptp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/nft/masq"
	"github.com/nftcni/nftcni/nft/reference"
	"github.com/nftcni/nftcni/plugins/internal/addrconf"
	"github.com/nftcni/nftcni/plugins/internal/ifplugin"
	"github.com/nftcni/nftcni/plugins/internal/ownertag"
	"github.com/nftcni/nftcni/plugins/internal/refattach"
	"github.com/nftcni/nftcni/plugins/internal/vethplugin"
	"github.com/nftcni/nftcni/sysctl"
)

// Plugin is the ptp plugin.
var Plugin = &cni.Plugin{
	Name:     "ptp",
	Add:      cmdAdd,
	Del:      cmdDel,
	Check:    cmdCheck,
	GC:       cmdGC,
	Status:   cmdStatus,
	Validate: validate,
}

// hostBits is the host-route prefix length of a's family: 32 or 128.
func hostBits(a netip.Addr) int {
	if a.Is4() {
		return 32
	}
	return 128
}

func cmdAdd(ctx context.Context, a *cni.CmdArgs) (_ *cni.Result, err error) {
	conf, err := loadConf(a.StdinData)
	if err != nil {
		return nil, err
	}
	if err := conf.check(a.StdinData); err != nil {
		return nil, err
	}

	// The namespace is opened before IPAM is asked (the reference asks
	// first), so a bad CNI_NETNS costs no allocation.
	add, err := ifplugin.BeginAdd("ptp", a)
	if err != nil {
		return nil, err
	}
	defer add.End(&err) // a failed ADD is rolled back
	hc, hostNS := add.HC, add.HostNS
	hh, err := netlinkx.Open(nil)
	if err != nil {
		return nil, err
	}
	defer hh.Close()

	// The container interface before IPAM (the reference asks IPAM
	// first): a repeated ADD in a live attachment's namespace is then
	// refused by the kernel (eth0 exists) before anything is reserved. A
	// reservation made and then released by the rollback would be released
	// by container ID and interface, which would free the live attachment's
	// address too, when IPAM handed out a second one (a requested address
	// passes host-local's duplicate guard).
	hostVeth, err := hc.CreateVethPair(a.IfName, hostNS, max(conf.MTU, 0), nil)
	if err != nil {
		return nil, err
	}
	add.LinkCreated(hc, a.IfName)

	// Released when a later step fails (and when it returned no address),
	// never when IPAM ADD itself failed: that reservation was not made by
	// this ADD.
	result, err := add.DelegateAdd(ctx, conf.IPAM.Type)
	if err != nil {
		return nil, err
	}
	if conf.IPMasq {
		vethplugin.StartMasq(add.Rollback, ownertag.Of(conf.Name, a), result.IPs) // joined by add.End
	}
	// Every address needs a gateway: it is the only way out of the
	// container. The reference does not check and fails half-way through
	// with an opaque netlink error.
	for _, ip := range result.IPs {
		if !ip.Gateway.IsValid() {
			return nil, fmt.Errorf("IPAM result address %s has no gateway, which ptp requires", ip.Address)
		}
		if ip.Gateway.Is4() != ip.Address.Addr().Is4() {
			return nil, fmt.Errorf("IPAM result address %s has a gateway of another family (%s)", ip.Address, ip.Gateway)
		}
	}

	if err := enableForward(result.IPs); err != nil {
		return nil, fmt.Errorf("Could not enable IP forwarding: %w", err)
	}

	hostLink, err := hh.LinkByName(hostVeth)
	if err != nil {
		return nil, fmt.Errorf("failed to lookup %q in %q: %w", hostVeth, hostNS.Path(), netlinkx.Cause(err))
	}
	if err := hh.SetUp(hostVeth); err != nil {
		return nil, fmt.Errorf("failed to set %q up: %w", hostVeth, netlinkx.Cause(err))
	}
	_ = sysctl.Set(nil, "net/ipv6/conf/"+hostVeth+"/accept_ra", "0")
	contLink, err := hc.LinkByName(a.IfName)
	if err != nil {
		return nil, fmt.Errorf("failed to look up %q: %w", a.IfName, netlinkx.Cause(err))
	}

	for _, ip := range result.IPs {
		ip.Interface = cni.Int(1)
	}
	result.Interfaces = []*cni.Interface{
		{Name: hostVeth, Mac: hostLink.MAC.String()},
		{Name: a.IfName, Mac: contLink.MAC.String(), Sandbox: a.Netns},
	}
	if err := setupContainer(hc, a.IfName, contLink.Index, result); err != nil {
		return nil, err
	}
	if err := setupHost(hh, hostVeth, result); err != nil {
		return nil, err
	}

	if vethplugin.DNSSet(conf.DNS) {
		result.DNS = conf.DNS.DNS()
	}
	result.CNIVersion = cni.CurrentVersion
	return result, nil
}

// enableForward turns forwarding on for each family among the addresses.
func enableForward(ips []*cni.IPConfig) error {
	v4, v6 := false, false
	for _, ip := range ips {
		if ip.Address.Addr().Is4() {
			v4 = true
		} else {
			v6 = true
		}
	}
	for _, f := range []struct {
		on     bool
		family uint8
	}{{v4, unix.AF_INET}, {v6, unix.AF_INET6}} {
		if !f.on {
			continue
		}
		if err := vethplugin.EnableForward(f.family); err != nil {
			return err
		}
	}
	return nil
}

// setupContainer applies the addresses and IPAM routes, then replaces each
// address's connected route so that everything, the subnet included, goes
// via the gateway:
//
//	<gw>/32 dev <if> scope link src <ip>
//	<subnet> via <gw> dev <if> src <ip>
//
// Two addresses sharing a gateway or a subnet get those routes once (the
// reference fails with "file exists").
func setupContainer(hc *netlinkx.Handle, ifName string, index int, r *cni.Result) error {
	if err := addrconf.ConfigureInterface(hc, ifName, r); err != nil {
		return err
	}
	type key struct {
		dst netip.Prefix
		gw  netip.Addr
	}
	added := map[key]bool{}
	deleted := map[netip.Prefix]bool{}
	for _, ip := range r.IPs {
		subnet := ip.Address.Masked()
		if !deleted[subnet] {
			del := netlinkx.Route{Dst: subnet, LinkIndex: index}
			if err := hc.DelRoute(del); err != nil {
				return fmt.Errorf("failed to delete route %s: %w", routeDesc(del, index), netlinkx.Cause(err))
			}
			deleted[subnet] = true
		}
		gwHost := netip.PrefixFrom(ip.Gateway, hostBits(ip.Gateway))
		for _, rt := range []netlinkx.Route{
			{Dst: gwHost, LinkIndex: index, Scope: unix.RT_SCOPE_LINK, Src: ip.Address.Addr()},
			{Dst: subnet, Gw: ip.Gateway, LinkIndex: index, Src: ip.Address.Addr()},
		} {
			k := key{rt.Dst, rt.Gw}
			if added[k] {
				continue
			}
			if err := hc.AddRoute(rt); err != nil {
				return fmt.Errorf("failed to add route %s: %w", routeDesc(rt, index), netlinkx.Cause(err))
			}
			added[k] = true
		}
	}
	return nil
}

// setupHost puts each gateway on the host end as a /32 (/128) and routes
// each container address to it, scope host as in the reference.
func setupHost(hh *netlinkx.Handle, hostVeth string, r *cni.Result) error {
	l, err := hh.LinkByName(hostVeth)
	if err != nil {
		return fmt.Errorf("failed to lookup %q: %w", hostVeth, netlinkx.Cause(err))
	}
	gwDone := map[netip.Addr]bool{}
	for _, ip := range r.IPs {
		if !gwDone[ip.Gateway] {
			gw := netip.PrefixFrom(ip.Gateway, hostBits(ip.Gateway))
			if err := hh.AddAddr(hostVeth, gw, netlinkx.AddrOpts{NoDAD: true}); err != nil {
				return fmt.Errorf("failed to add IP addr (%#v) to veth: %w", goIPNet(gw), netlinkx.Cause(err))
			}
			gwDone[ip.Gateway] = true
		}
		host := netip.PrefixFrom(ip.Address.Addr(), hostBits(ip.Address.Addr()))
		err := hh.AddRoute(netlinkx.Route{Dst: host, LinkIndex: l.Index, Scope: unix.RT_SCOPE_HOST})
		if err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("failed to add route on host: %w", netlinkx.Cause(err))
		}
	}
	return nil
}

// goIPNet is p as the reference's *net.IPNet, for its %#v message.
func goIPNet(p netip.Prefix) *net.IPNet {
	bits := hostBits(p.Addr())
	return &net.IPNet{IP: net.IP(p.Addr().AsSlice()).To16(), Mask: net.CIDRMask(p.Bits(), bits)}
}

// routeDesc renders a route like the reference's messages do (its netlink
// library's route String()).
func routeDesc(r netlinkx.Route, index int) string {
	src, gw := "<nil>", "<nil>"
	if r.Src.IsValid() {
		src = r.Src.String()
	}
	if r.Gw.IsValid() {
		gw = r.Gw.String()
	}
	return fmt.Sprintf("{Ifindex: %d Dst: %s Src: %s Gw: %s Flags: [] Table: 0 Realm: 0}", index, r.Dst, src, gw)
}

// cmdCheck verifies the container side of the attachment described by
// prevResult: the container veth, its addresses and
// routes. The host side is not examined, as in the reference.
func cmdCheck(ctx context.Context, a *cni.CmdArgs) error {
	conf, err := loadConf(a.StdinData)
	if err != nil {
		return err
	}
	// IPAM CHECK unconditionally, as in the reference.
	hc, result, err := ifplugin.BeginCheck(ctx, a, &conf.NetConf, true, "ptp: Required prevResult missing")
	if err != nil {
		return err
	}
	defer hc.Close()
	contEntry, err := addrconf.ContainerInterface(result.Interfaces, a.IfName, a.Netns)
	if err != nil {
		return err
	}

	if contEntry.Name == "" {
		return fmt.Errorf("Container interface name missing in prevResult: %v", contEntry.Name)
	}
	l, err := hc.LinkByName(contEntry.Name)
	if err != nil {
		return fmt.Errorf("ptp: Container Interface name in prevResult: %s not found", contEntry.Name)
	}
	if contEntry.Sandbox == "" {
		return fmt.Errorf("ptp: Error: Container interface %s should not be in host namespace", l.Name)
	}
	if l.Kind != "veth" {
		return fmt.Errorf("Error: Container interface %s not of type veth/p2p", l.Name)
	}
	if contEntry.Mac != "" && contEntry.Mac != l.MAC.String() {
		return fmt.Errorf("ptp: Interface %s Mac %s doesn't match container Mac: %s", contEntry.Name, contEntry.Mac, l.MAC)
	}
	if err := addrconf.CheckAddresses(hc, a.IfName, result.IPs); err != nil {
		return err
	}
	return addrconf.CheckRoutes(hc, result.Routes)
}

// cmdDel releases the addresses, removes the veth pair (the host address
// and routes go with it) and the masquerade state. IPAM
// first, as in the reference, but a failure there does not stop the rest:
// everything that can be cleaned up is, and the errors are returned
// together. Unlike the reference, the masquerade state is removed by owner
// even when the interface or the namespace is already gone — ours, and the
// reference plugins' of an attachment they made before nftcni replaced
// them (nft/reference).
func cmdDel(ctx context.Context, a *cni.CmdArgs) error {
	conf, err := loadConf(a.StdinData)
	if err != nil {
		return err
	}
	// IPAM first, then the link, as in the reference (bridge deletes the
	// link first).
	var errs []error
	if err := cni.DelegateDel(ctx, conf.IPAM.Type, a); err != nil {
		errs = append(errs, err)
	}
	// The masquerade teardown overlaps the link deletion (see
	// ifplugin.DeleteLinkAfter).
	var masqErr, refErr error
	var teardown func() // nil: no nftables state to remove
	if conf.IPMasq {
		teardown = func() {
			masqErr = masq.Teardown(nil, ownertag.Of(conf.Name, a))
			_, refErr = refattach.Delete(a, "ptp", refattach.Of(conf.Name, a, reference.Masq, nil))
		}
	}
	if err := ifplugin.DeleteLinkAfter(a.Netns, a.IfName, teardown); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(append(errs, masqErr, refErr)...)
}

// cmdGC forwards GC to IPAM and collects masquerade state of this network
// — ours and the reference plugins' — that belongs to none of the valid
// attachments; without a valid list,
// nothing of ours is collected.
func cmdGC(ctx context.Context, a *cni.CmdArgs) error {
	conf, err := loadConf(a.StdinData)
	if err != nil {
		return err
	}
	var errs []error
	if err := cni.DelegateGC(ctx, conf.IPAM.Type, a); err != nil {
		errs = append(errs, err)
	}
	if conf.IPMasq {
		atts, ok := conf.Attachments()
		if !ok {
			a.Logf("ptp: GC without cni.dev/valid-attachments: nothing collected")
			return errors.Join(errs...)
		}
		if err := masq.GC(nil, conf.Name, ownertag.Valid(conf.Name, atts)); err != nil {
			errs = append(errs, err)
		}
		if err := refattach.GC(a, "ptp", conf.Name, reference.Masq, atts); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// cmdStatus forwards STATUS to IPAM (unconditionally, as the reference:
// ptp cannot work without IPAM).
func cmdStatus(ctx context.Context, a *cni.CmdArgs) error {
	conf, err := loadConf(a.StdinData)
	if err != nil {
		return err
	}
	return cni.DelegateStatus(ctx, conf.IPAM.Type, a)
}
