// Package bridge is the "bridge" plugin: it attaches a container to a Linux
// bridge in the runtime's network namespace through a veth pair, and
// optionally makes the bridge the container's gateway, masquerades its
// traffic, puts the port on VLANs and filters spoofed source MACs.
//
// It behaves like the reference bridge plugin (same keys, results and
// error texts) except for the deliberate differences listed, with their
// reasons, in README.md: a failed ADD undoes all it did,
// DEL always releases IPAM and the nftables state, GC is implemented, CHECK
// works for layer-2-only configs.
package bridge

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/netlinkx/announce"
	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/nft/macspoof"
	"github.com/nftcni/nftcni/plugins/internal/addrconf"
	"github.com/nftcni/nftcni/plugins/internal/ifplugin"
	"github.com/nftcni/nftcni/plugins/internal/ownertag"
	"github.com/nftcni/nftcni/plugins/internal/rollback"
	"github.com/nftcni/nftcni/plugins/internal/vethplugin"
	"github.com/nftcni/nftcni/sysctl"
)

// Plugin is the bridge plugin.
var Plugin = &cni.Plugin{
	Name:      "bridge",
	Add:       cmdAdd,
	Del:       cmdDel,
	Check:     cmdCheck,
	GC:        cmdGC,
	Status:    cmdStatus,
	Validate:  validate,
	Footprint: footprint,
}

// Port-state wait after ADD: the reference sleeps 0, 50, 500, 1000 and
// 1000 ms between looks (2.55 s in all); we look every 10 ms for as long.
const (
	portWait     = 2550 * time.Millisecond
	portWaitPoll = 10 * time.Millisecond
)

func cmdAdd(ctx context.Context, a *cni.CmdArgs) (_ *cni.Result, err error) {
	conf, err := loadConf(a.StdinData, a.Args)
	if err != nil {
		return nil, err
	}
	// The whole config (IPAM's included) is checked and the container's
	// namespace opened before anything is created: a mistake or a bad
	// CNI_NETNS leaves the host as it was.
	mac, err := conf.check(a.StdinData)
	if err != nil {
		return nil, err
	}
	hh, err := netlinkx.Open(nil)
	if err != nil {
		return nil, err
	}
	defer hh.Close()
	add, err := ifplugin.BeginAdd("bridge", a)
	if err != nil {
		return nil, err
	}
	defer add.End(&err) // a failed ADD is rolled back
	ctrNS, hc := add.CtrNS, add.HC

	br, brIface, created, err := ensureBridge(hh, conf)
	if created {
		add.Push("bridge", func() error { return removeUnusedBridge(hh, conf.BrName) })
	}
	if err != nil {
		return nil, err
	}

	// A gateway bridge's MAC is pinned before this ADD's port joins
	// (pinBridgeMAC): an unpinned bridge takes the lowest of its ports'
	// MACs, so concurrent ADDs would each read, and pin, another one.
	if conf.IsGW && conf.isL3() {
		if err := pinBridgeMAC(hh, &br); err != nil {
			return nil, err
		}
		brIface.Mac = br.MAC.String()
	}

	hostVeth, contIface, err := setupVeth(hh, hc, add.HostNS, a.IfName, conf.MTU, mac)
	if err != nil {
		return nil, err
	}
	contIface.Sandbox = a.Netns
	add.LinkCreated(hc, a.IfName)
	if err := setupPort(hh, conf.BrName, hostVeth, conf.HairpinMode, conf.PortIsolation, conf.Vlan, conf.vlans, conf.PreserveDefaultVlan); err != nil {
		return nil, err
	}
	hostLink, err := hh.LinkByName(hostVeth)
	if err != nil {
		return nil, fmt.Errorf("failed to lookup %q: %w", hostVeth, netlinkx.Cause(err))
	}

	result := &cni.Result{
		CNIVersion: cni.CurrentVersion,
		Interfaces: []*cni.Interface{brIface, {Name: hostVeth, Mac: hostLink.MAC.String()}, contIface},
	}
	own := ownertag.Of(conf.Name, a)

	// IPAM before the MAC spoof check (the reference asks it after): a
	// reused container ID with the same interface name is refused by IPAM
	// before anything tagged with that attachment's owner is replaced, so
	// the rollback never removes a live attachment's filter.
	var ir *cni.Result
	if conf.isL3() {
		if ir, err = add.DelegateAdd(ctx, conf.IPAM.Type); err != nil {
			return nil, err
		}
		// An address in use on this bridge under another network
		// (claims.go) fails the ADD here, before the container has it.
		var addrs []netip.Addr
		for _, ip := range ir.IPs {
			addrs = append(addrs, ip.Address.Addr())
		}
		release, err := claimAddrs(hh, br, own, hostLink, addrs)
		if err != nil {
			return nil, err
		}
		add.Push("address claims", release)
	}

	if conf.MacSpoofChk {
		contMAC, _ := net.ParseMAC(contIface.Mac)
		add.Push("spoof-check", func() error { return macspoof.Teardown(nil, own) })
		if err := macspoof.Setup(nil, own, hostVeth, contMAC); err != nil {
			return nil, fmt.Errorf("failed to setup spoof-check: %w", err)
		}
	}

	if conf.isL3() {
		if err := addL3(a, conf, hh, hc, ctrNS, br, ir, result, add.Rollback); err != nil {
			return nil, err
		}
	} else if !conf.DisableContainerInterface {
		if err := hc.SetUp(a.IfName); err != nil {
			return nil, fmt.Errorf("failed to set %q up: %w", a.IfName, netlinkx.Cause(err))
		}
	}

	if !conf.DisableContainerInterface {
		st, err := hh.WaitOperUp(hostVeth, portWait, portWaitPoll)
		if err != nil {
			return nil, err
		}
		if st != netlinkx.OperUp {
			return nil, fmt.Errorf("bridge port in error state: %s", st)
		}
		announceAddrs(a, hh, hc, hostVeth, result, conf.EnableDad)
	}

	// MACs can change during ADD: the host end's when it joins the bridge,
	// the bridge's when its first port arrives (unless pinned).
	if hostLink, err = hh.LinkByName(hostVeth); err != nil {
		return nil, err
	}
	result.Interfaces[1].Mac = hostLink.MAC.String()
	brLink, err := bridgeByName(hh, conf.BrName)
	if err != nil {
		return nil, err
	}
	brIface.Mac = brLink.MAC.String()

	if vethplugin.DNSSet(conf.DNS) {
		result.DNS = conf.DNS.DNS()
	}
	return result, nil
}

// addL3 is the layer-3 part of ADD once IPAM answered ir: addresses,
// routes, gateway addresses on the bridge, forwarding, masquerade
// (started in the background, joined by ifplugin.Add.End).
func addL3(a *cni.CmdArgs, conf *NetConf, hh, hc *netlinkx.Handle, ctrNS *netns.NS,
	br netlinkx.Link, ir, result *cni.Result, rb *rollback.Rollback) error {
	result.IPs, result.Routes, result.DNS = ir.IPs, ir.Routes, ir.DNS
	if conf.IPMasq {
		vethplugin.StartMasq(rb, ownertag.Of(conf.Name, a), result.IPs)
	}
	gws4, gws6 := calcGateways(result, conf)

	// Container sysctls: errors ignored, as in the reference.
	if conf.EnableDad {
		_ = sysctl.Set(ctrNS, "net/ipv6/conf/"+a.IfName+"/enhanced_dad", "1")
		_ = sysctl.Set(ctrNS, "net/ipv6/conf/"+a.IfName+"/accept_dad", "1")
	} else {
		_ = sysctl.Set(ctrNS, "net/ipv6/conf/"+a.IfName+"/accept_dad", "0")
	}
	_ = sysctl.Set(ctrNS, "net/ipv4/conf/"+a.IfName+"/arp_notify", "1")

	if err := addrconf.ConfigureInterface(hc, a.IfName, result); err != nil {
		return err
	}

	if conf.IsGW {
		// The bridge's MAC was pinned before the port joined
		// (pinBridgeMAC), whichever link carries the gateway.
		var vlanIface *cni.Interface
		for _, fam := range []struct {
			gws    []netip.Prefix
			family uint8
		}{{gws4, unix.AF_INET}, {gws6, unix.AF_INET6}} {
			for _, gw := range fam.gws {
				if conf.Vlan != 0 {
					vl, err := ensureVlanInterface(hh, br, conf.Vlan, conf.PreserveDefaultVlan)
					if err != nil {
						return fmt.Errorf("failed to create vlan interface: %w", err)
					}
					if vlanIface == nil {
						// <bridge>.<vlan> carries the gateway: its MAC
						// is pinned too, once.
						if err := pinMAC(hh, &vl); err != nil {
							return fmt.Errorf("failed to set vlan interface for bridge with addr: %w", err)
						}
						vlanIface = &cni.Interface{Name: vl.Name, Mac: vl.MAC.String()}
						result.Interfaces = append(result.Interfaces, vlanIface)
					}
					if err := ensureAddr(hh, vl.Name, gw, conf.ForceAddress); err != nil {
						return fmt.Errorf("failed to set vlan interface for bridge with addr: %w", err)
					}
				} else if err := ensureAddr(hh, br.Name, gw, conf.ForceAddress); err != nil {
					return fmt.Errorf("failed to set bridge addr: %w", err)
				}
			}
			if len(fam.gws) > 0 {
				if err := vethplugin.EnableForward(fam.family); err != nil {
					return fmt.Errorf("failed to enable forwarding: %w", err)
				}
			}
		}
	}

	return nil
}

// calcGateways fills in gateways and the default route and returns the gateway
// addresses to put on the bridge, per family. Every IP is bound to the
// container interface (index 2).
//
// A default route IPAM already returned counts as present even without a
// gateway: ConfigureInterface installs it via the family's gateway, so
// adding our own would duplicate it (the reference then fails with "file
// exists").
func calcGateways(r *cni.Result, conf *NetConf) (v4, v6 []netip.Prefix) {
	defaultFound := map[bool]bool{} // by "is IPv4"
	for _, ip := range r.IPs {
		ip.Interface = cni.Int(2)
		is4 := ip.Address.Addr().Is4()
		if !ip.Gateway.IsValid() && conf.IsGW {
			ip.Gateway = ip.Address.Masked().Addr().Next()
		}
		if conf.IsDefaultGW && !defaultFound[is4] {
			for _, rt := range r.Routes {
				if rt.Dst.Bits() == 0 && rt.Dst.Addr().Is4() == is4 {
					defaultFound[is4] = true
					break
				}
			}
			if !defaultFound[is4] {
				dst := netip.PrefixFrom(netip.IPv6Unspecified(), 0)
				if is4 {
					dst = netip.PrefixFrom(netip.IPv4Unspecified(), 0)
				}
				r.Routes = append(r.Routes, &cni.Route{Dst: dst, GW: ip.Gateway})
				defaultFound[is4] = true
			}
		}
		if conf.IsGW && ip.Gateway.IsValid() {
			gw := netip.PrefixFrom(ip.Gateway, ip.Address.Bits())
			if is4 {
				v4 = append(v4, gw)
			} else {
				v6 = append(v6, gw)
			}
		}
	}
	return v4, v6
}

// bridgeByName looks the bridge up and makes sure it is one.
func bridgeByName(hh *netlinkx.Handle, name string) (netlinkx.Link, error) {
	l, err := hh.LinkByName(name)
	if err != nil {
		return l, fmt.Errorf("could not lookup %q: %w", name, netlinkx.Cause(err))
	}
	if l.Kind != "bridge" {
		return l, fmt.Errorf("%q already exists but is not a bridge", name)
	}
	return l, nil
}

// ensureBridge creates the bridge unless it exists.
// An existing bridge's MTU and VLAN filtering are left alone; promiscuous
// mode is only ever turned on. created reports that this call made the
// bridge, also when it fails afterwards, so that a failed ADD can remove
// it (removeUnusedBridge).
func ensureBridge(hh *netlinkx.Handle, conf *NetConf) (br netlinkx.Link, iface *cni.Interface, created bool, err error) {
	name := conf.BrName
	wrap := func(err error) error { return fmt.Errorf("failed to create bridge %q: %w", name, err) }
	mtu := max(conf.MTU, 0)
	if name == "" {
		// The kernel would pick a name of its own ("bridge0").
		return netlinkx.Link{}, nil, false, wrap(fmt.Errorf("could not add %q: %w", name, unix.EINVAL))
	}
	err = hh.AddBridge(netlinkx.BridgeSpec{Name: name, MTU: mtu, VlanFiltering: conf.vlanFiltering()})
	if err != nil && !errors.Is(err, unix.EEXIST) {
		return netlinkx.Link{}, nil, false, wrap(fmt.Errorf("could not add %q: %w", name, netlinkx.Cause(err)))
	}
	created = err == nil
	if conf.PromiscMode {
		if err := hh.SetPromisc(name, true); err != nil {
			return netlinkx.Link{}, nil, created, wrap(fmt.Errorf("could not set promiscuous mode on %q: %w", name, netlinkx.Cause(err)))
		}
	}
	br, err = bridgeByName(hh, name)
	if err != nil {
		return br, nil, created, wrap(err)
	}
	// We own the routes of this interface. Read over rtnetlink first, so
	// that the ADDs after the bridge's first do not touch its file: one
	// under /proc/sys/net/ipv6 costs more the more namespaces the host has
	// (sysctl.IPv6Devconf).
	if v, err := sysctl.IPv6Devconf(nil, name, sysctl.IPv6AcceptRA); err != nil || v != 0 {
		_ = sysctl.Set(nil, "net/ipv6/conf/"+name+"/accept_ra", "0")
	}
	if err := hh.SetUp(name); err != nil {
		return br, nil, created, wrap(netlinkx.Cause(err))
	}
	return br, &cni.Interface{Name: br.Name, Mac: br.MAC.String()}, created, nil
}

// removeUnusedBridge deletes the bridge name, made by a failed ADD, unless
// it has ports by now: another ADD that found it in the meantime keeps it
// (one that has not enslaved its port yet fails to and reports that). The
// ADD's own port is already gone: its veth was deleted before (rollback
// runs last first). A bridge already gone is fine.
func removeUnusedBridge(hh *netlinkx.Handle, name string) error {
	br, err := hh.LinkByName(name)
	if errors.Is(err, netlinkx.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	links, err := hh.Links()
	if err != nil {
		return err
	}
	for _, l := range links {
		if l.MasterIndex == br.Index {
			return nil
		}
	}
	if err := hh.DeleteLink(name); err != nil && !errors.Is(err, netlinkx.ErrNotFound) {
		return fmt.Errorf("removing bridge %q created by this ADD: %w", name, err)
	}
	return nil
}

// setupVeth creates the pair from inside the container's namespace with
// the host end placed straight in the host's, sets the host end up and
// returns its name and the container interface.
func setupVeth(hh, hc *netlinkx.Handle, hostNS *netns.NS, ifName string, mtu int, mac net.HardwareAddr) (string, *cni.Interface, error) {
	peer, err := hc.CreateVethPair(ifName, hostNS, max(mtu, 0), mac)
	if err != nil {
		return "", nil, err
	}
	cont, err := hc.LinkByName(ifName)
	if err != nil {
		_ = hc.DeleteLink(ifName)
		return "", nil, fmt.Errorf("failed to make veth pair: %w", netlinkx.Cause(err))
	}
	if err := hh.SetUp(peer); err != nil {
		_ = hc.DeleteLink(ifName)
		return "", nil, fmt.Errorf("failed to set %q up: %w", peer, netlinkx.Cause(err))
	}
	_ = sysctl.Set(nil, "net/ipv6/conf/"+peer+"/accept_ra", "0")
	return peer, &cni.Interface{Name: ifName, Mac: cont.MAC.String()}, nil
}

// setupPort enslaves a host-side veth end to the bridge and configures the
// port: hairpin and isolation flags (always written) and VLANs.
func setupPort(hh *netlinkx.Handle, brName, port string, hairpin, isolated bool, vlan int, trunk []int, preserveDefault bool) error {
	if err := hh.SetMaster(port, brName); err != nil {
		return fmt.Errorf("failed to connect %q to bridge %s: %w", port, brName, netlinkx.Cause(err))
	}
	if err := hh.SetHairpin(port, hairpin); err != nil {
		return fmt.Errorf("failed to setup hairpin mode for %s: %w", port, netlinkx.Cause(err))
	}
	if err := hh.SetPortIsolated(port, isolated); err != nil {
		return fmt.Errorf("failed to set port isolation for %s: %w", port, netlinkx.Cause(err))
	}
	if (vlan != 0 || len(trunk) > 0) && !preserveDefault {
		vlans, err := hh.BridgeVlans(port)
		if err == nil {
			for _, v := range vlans {
				if err = hh.BridgeVlanDel(port, v.VID); err != nil {
					break
				}
			}
		}
		if err != nil {
			return fmt.Errorf("failed to remove default vlan on interface %q: %w", port, netlinkx.Cause(err))
		}
	}
	if vlan != 0 {
		if err := hh.BridgeVlanAdd(port, netlinkx.BridgeVlan{VID: uint16(vlan), PVID: true, Untagged: true}); err != nil {
			return fmt.Errorf("failed to setup vlan tag on interface %q: %w", port, netlinkx.Cause(err))
		}
	}
	for _, v := range trunk {
		if err := hh.BridgeVlanAdd(port, netlinkx.BridgeVlan{VID: uint16(v)}); err != nil {
			return fmt.Errorf("failed to setup vlan tag on interface %q: %w", port, netlinkx.Cause(err))
		}
	}
	if vlan == 0 && len(trunk) > 0 {
		// The native VLAN of a trunk port.
		if err := hh.BridgeVlanAdd(port, netlinkx.BridgeVlan{VID: 1, PVID: true, Untagged: true}); err != nil {
			return fmt.Errorf("failed to setup vlan tag on interface %q: %w", port, netlinkx.Cause(err))
		}
	}
	return nil
}

// ensureVlanInterface returns the VLAN gateway interface <bridge>.<vlan>,
// creating it when missing: one end of a veth pair in the host namespace
// whose other end is an access port of the VLAN. The pair
// is shared by every container of the VLAN and never removed.
func ensureVlanInterface(hh *netlinkx.Handle, br netlinkx.Link, vlan int, preserveDefault bool) (netlinkx.Link, error) {
	name := fmt.Sprintf("%s.%d", br.Name, vlan)
	l, err := hh.LinkByName(name)
	if err == nil {
		return l, nil
	}
	if !errors.Is(err, netlinkx.ErrNotFound) {
		return l, fmt.Errorf("failed to find interface %q: %w", name, netlinkx.Cause(err))
	}
	fail := func(err error) (netlinkx.Link, error) {
		return netlinkx.Link{}, fmt.Errorf("faild to create vlan gateway %q: %w", name, err)
	}
	peer, err := hh.CreateVethPair(name, nil, br.MTU, nil)
	if err != nil {
		return fail(err)
	}
	if err := hh.SetUp(peer); err != nil {
		return fail(fmt.Errorf("failed to set %q up: %w", peer, netlinkx.Cause(err)))
	}
	_ = sysctl.Set(nil, "net/ipv6/conf/"+peer+"/accept_ra", "0")
	if err := setupPort(hh, br.Name, peer, false, false, vlan, nil, preserveDefault); err != nil {
		return fail(err)
	}
	if err := hh.SetUp(name); err != nil {
		return netlinkx.Link{}, fmt.Errorf("failed to up %q: %w", name, netlinkx.Cause(err))
	}
	if l, err = hh.LinkByName(name); err != nil {
		return l, fmt.Errorf("failed to lookup %q: %w", name, netlinkx.Cause(err))
	}
	return l, nil
}

// ensureAddr puts gateway address gw on link, unless it has it already;
// any other IPv4 address, or an overlapping IPv6 one, is a conflict that
// forceAddress resolves by deleting it. The link's MAC is the caller's to
// pin (pinBridgeMAC for the bridge, before the port joins; pinMAC for a
// VLAN interface) — also when the address was there already (a bridge an
// administrator or another tool gave the gateway address, or an ADD killed
// after adding it), as the reference does since v1.10.0: a gateway whose
// MAC follows the bridge's ports changes it as containers come and go,
// and the containers' neighbour entries for the gateway go stale.
func ensureAddr(hh *netlinkx.Handle, link string, gw netip.Prefix, force bool) error {
	fam := unix.AF_INET6
	if gw.Addr().Is4() {
		fam = unix.AF_INET
	}
	addrs, err := hh.Addrs(link, fam)
	if err != nil {
		return fmt.Errorf("could not get list of IP addresses: %w", netlinkx.Cause(err))
	}
	want := gw.String()
	found := false
	for _, a := range addrs {
		if a.Prefix.String() == want {
			found = true
			break
		}
		if fam == unix.AF_INET || a.Prefix.Masked().Contains(gw.Addr()) || gw.Masked().Contains(a.Prefix.Addr()) {
			if !force {
				return fmt.Errorf("%q already has an IP address different from %v", link, want)
			}
			if err := hh.DelAddr(link, a.Prefix); err != nil {
				return fmt.Errorf("could not remove IP address from %q: %w", link, netlinkx.Cause(err))
			}
		}
	}
	if !found {
		// No DAD for the gateway: IPAM never hands it out, and with DAD
		// the container's IPv6 default route is unusable for the first ~2 s.
		if err := hh.AddAddr(link, gw, netlinkx.AddrOpts{NoDAD: true}); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("could not add IP address %s to %q: %w", want, link, netlinkx.Cause(err))
		}
	}
	return nil
}

// pinBridgeMAC pins gateway bridge br's MAC (pinMAC) before this ADD's
// port joins, under the bridge's lock (lockClaims) and as the bridge has it
// then, and records it in br.
//
// Why before the port joins: until it is pinned, the bridge's MAC follows
// its ports. ADDs that start together on a new bridge each read its MAC
// before their port joins, and one that read it after another's port had
// joined pinned that port's MAC over the first pin, after the other ADDs
// had put the first in their results: their CHECK failed from the start
// ("Bridge interface … Mac doesn't match", and `nftcni list` showed them
// drifted). With every gateway ADD pinning first, no port joins an
// unpinned bridge, so its MAC does not move. Why the lock and the second
// read: a bridge whose last port left before it was ever pinned has the
// zero MAC, for which each ADD would draw a random one of its own; under
// the lock the first draws it and the others read it. Pinned before the
// port joins, the bridge also never takes the port's MAC, from which its
// IPv6 link-local address would be derived if its carrier came back
// first (a matter of the kernel's link watch).
func pinBridgeMAC(hh *netlinkx.Handle, br *netlinkx.Link) error {
	_, unlock, err := lockClaims(br.Name, true)
	if err != nil {
		return fmt.Errorf("locking bridge %q: %w", br.Name, err)
	}
	defer unlock()
	now, err := bridgeByName(hh, br.Name)
	if err != nil {
		return err
	}
	*br = now
	return pinMAC(hh, br)
}

// pinMAC sets link l's MAC to the one it had when looked up (before this
// ADD attached its port), and records it in l: a bridge's MAC then no
// longer follows its ports.
// A bridge whose last port left before it was ever pinned has the zero
// MAC, which cannot be set; it gets a random locally administered unicast
// MAC instead, as the kernel gives a new bridge and as the reference does
// since v1.10.0 (no neighbour can hold the zero MAC, so nothing goes
// stale). Taking the new port's MAC would do as well, but would give the
// bridge, and the link-local address made from its MAC, the same as one
// container's host-side veth.
func pinMAC(hh *netlinkx.Handle, l *netlinkx.Link) error {
	mac := l.MAC
	if len(mac) == 0 {
		return nil
	}
	if isZeroMAC(mac) {
		mac = make(net.HardwareAddr, 6)
		if _, err := rand.Read(mac); err != nil {
			return fmt.Errorf("failed to generate random MAC address: %w", err)
		}
		mac[0] = mac[0]&^0x01 | 0x02 // unicast, locally administered
	}
	if err := hh.SetMAC(l.Name, mac); err != nil {
		return fmt.Errorf("could not set bridge's mac: %w", netlinkx.Cause(err))
	}
	l.MAC = mac // what the result reports
	return nil
}

// isZeroMAC reports an all-zero hardware address (an empty one is not).
func isZeroMAC(mac net.HardwareAddr) bool {
	for _, b := range mac {
		if b != 0 {
			return false
		}
	}
	return len(mac) > 0
}

// announceAddrs sends a gratuitous ARP / unsolicited neighbour
// advertisement for the container's addresses once its port forwards, so
// neighbours that cached the address under an earlier container's MAC
// learn the new one at once. Best effort: problems only reach stderr.
func announceAddrs(a *cni.CmdArgs, hh, hc *netlinkx.Handle, hostVeth string, r *cni.Result, dad bool) {
	if len(r.IPs) == 0 {
		return
	}
	// The port forwards as soon as the kernel has seen its carrier; the
	// operstate we waited for is set just before.
	deadline := time.Now().Add(500 * time.Millisecond)
	for {
		p, err := hh.BridgePort(hostVeth)
		if err != nil || p.State == netlinkx.BridgePortForwarding || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The kernel announces no tentative address. Without DAD (the
	// default: accept_dad 0) an address added before the link had carrier
	// is tentative only until the kernel's DAD work sees the carrier and
	// clears the flag, which under load can come after the port forwards:
	// wait for that, briefly. With enableDad real DAD runs for a second or
	// more; those addresses are not announced.
	var tentative map[netip.Addr]bool
	for deadline = time.Now().Add(time.Second); ; time.Sleep(5 * time.Millisecond) {
		tentative = map[netip.Addr]bool{}
		if addrs, err := hc.Addrs(a.IfName, unix.AF_INET6); err == nil {
			for _, ad := range addrs {
				if ad.Tentative() {
					tentative[ad.Prefix.Addr()] = true
				}
			}
		}
		waiting := false
		for _, ip := range r.IPs {
			waiting = waiting || tentative[ip.Address.Addr()]
		}
		if !waiting || dad || time.Now().After(deadline) {
			break
		}
	}
	var list []netip.Addr
	for _, ip := range r.IPs {
		if ad := ip.Address.Addr(); !tentative[ad] {
			list = append(list, ad)
		}
	}
	if err := announce.Addresses(hc, a.IfName, list); err != nil {
		a.Logf("bridge: announcing addresses: %v", err)
	}
}
