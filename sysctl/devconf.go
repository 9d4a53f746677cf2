package sysctl

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/netns"
)

// Why rtnetlink rather than the files: the kernel keeps the /proc/sys/net
// directories of every network namespace in one dentry hash chain per
// name, so each component of a path there is compared with one entry per
// namespace that has used it (each container's): with 1000 containers an
// access costs about 0.6 ms of CPU. The kernel answers the same settings
// over rtnetlink at a cost that does not depend on the number of
// namespaces. The functions below read (and for one IPv4 setting write)
// them that way; a caller falls back to the file on any error, so a kernel
// or setting they do not cover behaves as before.

// Indexes of an interface's IPv4 settings (IPV4_DEVCONF_* in linux/ip.h;
// they count from 1, IPV4_DEVCONF_FORWARDING).
const (
	IPv4ArpNotify     = 22 // IPV4_DEVCONF_ARP_NOTIFY
	IPv4RouteLocalnet = 26 // IPV4_DEVCONF_ROUTE_LOCALNET
)

// IPv6AcceptRA is the index of accept_ra among an interface's IPv6
// settings (DEVCONF_ACCEPT_RA in linux/ipv6.h; they count from 0,
// DEVCONF_FORWARDING).
const IPv6AcceptRA = 3

// ErrNoSetting: the interface, or the setting, is not there.
var ErrNoSetting = errors.New("no such interface or setting")

// dial opens an rtnetlink socket in ns (nil: the calling thread's).
func dial(ns *netns.NS) (*netlink.Conn, error) {
	cfg := &netlink.Config{}
	if ns != nil {
		cfg.NetNS = ns.Fd()
	}
	return netlink.Dial(unix.NETLINK_ROUTE, cfg)
}

// linkRequest is an RTM_*LINK message's body that names interface ifName
// (ifinfomsg with any family and no index, IFLA_IFNAME) followed by extra
// attributes.
func linkRequest(ifName string, extra func(ae *netlink.AttributeEncoder)) ([]byte, error) {
	ae := netlink.NewAttributeEncoder()
	ae.String(unix.IFLA_IFNAME, ifName)
	if extra != nil {
		extra(ae)
	}
	attrs, err := ae.Encode()
	if err != nil {
		return nil, err
	}
	return append(make([]byte, unix.SizeofIfInfomsg), attrs...), nil
}

// validName refuses what cannot be an interface's name.
func validName(ifName string) bool {
	return ifName != "" && len(ifName) < unix.IFNAMSIZ
}

// linkAttrs returns the attributes of interface ifName's RTM_GETLINK
// answer inside ns.
func linkAttrs(ns *netns.NS, ifName string) ([]byte, error) {
	c, err := dial(ns)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	req, err := linkRequest(ifName, nil)
	if err != nil {
		return nil, err
	}
	msgs, err := c.Execute(netlink.Message{
		Header: netlink.Header{Type: unix.RTM_GETLINK, Flags: netlink.Request},
		Data:   req,
	})
	if errors.Is(err, unix.ENODEV) {
		return nil, ErrNoSetting
	}
	if err != nil {
		return nil, err
	}
	if len(msgs) != 1 || len(msgs[0].Data) < unix.SizeofIfInfomsg {
		return nil, errors.New("unexpected reply")
	}
	return msgs[0].Data[unix.SizeofIfInfomsg:], nil
}

// IPv4Devconf reads one of interface ifName's IPv4 settings inside ns
// (nil: the calling thread's namespace), the values under
// /proc/sys/net/ipv4/conf/<ifName>/, by its IPV4_DEVCONF index (such as
// IPv4RouteLocalnet), from the interface's own RTM_GETLINK answer
// (IFLA_AF_SPEC, AF_INET, IFLA_INET_CONF: an array of the settings in
// index order), at a cost that does not grow with the host's namespaces.
func IPv4Devconf(ns *netns.NS, ifName string, index int) (uint32, error) {
	op := fmt.Sprintf("reading IPv4 setting %d of %q", index, ifName)
	if !validName(ifName) || index < 1 {
		return 0, fmt.Errorf("%s: %w", op, ErrNoSetting)
	}
	attrs, err := linkAttrs(ns, ifName)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", op, err)
	}
	v, err := linkConf(attrs, unix.AF_INET, unix.IFLA_INET_CONF, index-1)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", op, err)
	}
	return v, nil
}

// IPv6Devconf reads one of interface ifName's IPv6 settings inside ns
// (nil: the calling thread's namespace), the values under
// /proc/sys/net/ipv6/conf/<ifName>/, by its DEVCONF index (such as
// IPv6AcceptRA), from the interface's RTM_GETLINK answer (IFLA_AF_SPEC,
// AF_INET6, IFLA_INET6_CONF: an array of signed 32-bit settings in index
// order), at a cost that does not grow with the host's namespaces. An
// interface without IPv6 (disabled on the host, or an MTU below 1280)
// has no such array: ErrNoSetting.
func IPv6Devconf(ns *netns.NS, ifName string, index int) (int32, error) {
	op := fmt.Sprintf("reading IPv6 setting %d of %q", index, ifName)
	if !validName(ifName) || index < 0 {
		return 0, fmt.Errorf("%s: %w", op, ErrNoSetting)
	}
	attrs, err := linkAttrs(ns, ifName)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", op, err)
	}
	v, err := linkConf(attrs, unix.AF_INET6, unix.IFLA_INET6_CONF, index)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", op, err)
	}
	return int32(v), nil
}

// linkConf finds element i (counting from 0) of the 32-bit array confType
// of family's part of an RTM_NEWLINK message's attributes: IFLA_AF_SPEC
// { family { confType: array } }, the kernel's inet_fill_link_af and
// inet6_fill_link_af. ErrNoSetting when the array or the element is
// missing.
func linkConf(attrs []byte, family, confType uint16, i int) (uint32, error) {
	var v uint32
	var found bool
	nested := func(b []byte, typ uint16, fn func([]byte)) error {
		ad, err := netlink.NewAttributeDecoder(b)
		if err != nil {
			return err
		}
		for ad.Next() {
			if ad.Type() == typ {
				fn(ad.Bytes())
			}
		}
		return ad.Err()
	}
	var errs []error
	err := nested(attrs, unix.IFLA_AF_SPEC, func(b []byte) {
		errs = append(errs, nested(b, family, func(b []byte) {
			errs = append(errs, nested(b, confType, func(b []byte) {
				if i >= 0 && len(b) >= (i+1)*4 {
					v, found = binary.NativeEndian.Uint32(b[i*4:(i+1)*4]), true
				}
			}))
		}))
	})
	if err := errors.Join(append(errs, err)...); err != nil {
		return 0, err
	}
	if !found {
		return 0, ErrNoSetting
	}
	return v, nil
}

// ipv4SideEffects are the IPv4 settings whose file write does more than
// store the value (devinet_conf_proc and the forwarding handler): turning
// accept_local or route_localnet off flushes the routing cache, a change of
// bc_forwarding does too, rp_filter, proxy_arp, forwarding and
// ignore_routes_with_linkdown announce the change (RTM_NEWNETCONF), and
// forwarding turns LRO off. A write over rtnetlink only stores the value,
// so these are refused there: they must go through the file.
var ipv4SideEffects = map[int]bool{
	1:  true, // forwarding
	2:  true, // mc_forwarding (its file is read-only)
	3:  true, // proxy_arp
	8:  true, // rp_filter
	23: true, // accept_local
	26: true, // route_localnet
	29: true, // ignore_routes_with_linkdown
	32: true, // bc_forwarding
}

// SetIPv4Devconf writes one of interface ifName's IPv4 settings inside ns
// (nil: the calling thread's namespace) by its IPV4_DEVCONF index, over
// rtnetlink: RTM_SETLINK with IFLA_AF_SPEC { AF_INET { IFLA_INET_CONF {
// index: u32 value } } }, which the kernel stores as a write of the file
// /proc/sys/net/ipv4/conf/<ifName>/<setting> does (inet_set_link_af), at a
// cost that does not grow with the host's namespaces.
//
// Only for settings whose file write has no side effect beyond the value,
// such as arp_notify: the rtnetlink path skips what the file's handler
// does for the others (ipv4SideEffects), which are refused. One difference
// remains: a changed link that is up is announced as changed
// (NETDEV_CHANGE, an RTM_NEWLINK to listeners), as after any RTM_SETLINK;
// on a link that is still down, as a new container interface is, nothing
// is announced.
func SetIPv4Devconf(ns *netns.NS, ifName string, index int, value uint32) error {
	op := fmt.Sprintf("setting IPv4 setting %d of %q", index, ifName)
	if !validName(ifName) || index < 1 {
		return fmt.Errorf("%s: %w", op, ErrNoSetting)
	}
	if ipv4SideEffects[index] {
		return fmt.Errorf("%s: has side effects only its file write has: %w", op, errors.ErrUnsupported)
	}
	req, err := setIPv4DevconfRequest(ifName, index, value)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	c, err := dial(ns)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	defer c.Close()
	_, err = c.Execute(netlink.Message{
		Header: netlink.Header{Type: unix.RTM_SETLINK, Flags: netlink.Request | netlink.Acknowledge},
		Data:   req,
	})
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	return nil
}

// setIPv4DevconfRequest is SetIPv4Devconf's RTM_SETLINK body.
func setIPv4DevconfRequest(ifName string, index int, value uint32) ([]byte, error) {
	return linkRequest(ifName, func(ae *netlink.AttributeEncoder) {
		ae.Nested(unix.IFLA_AF_SPEC, func(ae *netlink.AttributeEncoder) error {
			ae.Nested(unix.AF_INET, func(ae *netlink.AttributeEncoder) error {
				ae.Nested(unix.IFLA_INET_CONF, func(ae *netlink.AttributeEncoder) error {
					ae.Uint32(uint16(index), value)
					return nil
				})
				return nil
			})
			return nil
		})
	})
}

// EnableArpNotify sets arp_notify of interface ifName inside ns (nil: the
// calling thread's namespace) to 1, so the kernel announces the link's
// IPv4 addresses when it comes up or changes its MAC address: over
// rtnetlink (SetIPv4Devconf), or through the file
// /proc/sys/net/ipv4/conf/<ifName>/arp_notify when that fails. The error
// is the file's. For links not yet up: see SetIPv4Devconf.
func EnableArpNotify(ns *netns.NS, ifName string) error {
	if SetIPv4Devconf(ns, ifName, IPv4ArpNotify, 1) == nil {
		return nil
	}
	return Set(ns, "net/ipv4/conf/"+ifName+"/arp_notify", "1")
}

// AllForwarding reads a family's (unix.AF_INET or unix.AF_INET6)
// forwarding setting of the namespace ns (nil: the calling thread's), the
// value of /proc/sys/net/ipv4/ip_forward or
// /proc/sys/net/ipv6/conf/all/forwarding, from the kernel's RTM_GETNETCONF
// answer for NETCONFA_IFINDEX_ALL (its NETCONFA_FORWARDING), at a cost
// that does not grow with the host's namespaces. A family the kernel does
// not run (IPv6 disabled at boot) fails.
func AllForwarding(ns *netns.NS, family uint8) (int32, error) {
	op := fmt.Sprintf("reading forwarding of family %d", family)
	c, err := dial(ns)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", op, err)
	}
	defer c.Close()
	msgs, err := c.Execute(netlink.Message{
		Header: netlink.Header{Type: unix.RTM_GETNETCONF, Flags: netlink.Request},
		Data:   netconfRequest(family),
	})
	if err != nil {
		return 0, fmt.Errorf("%s: %w", op, err)
	}
	if len(msgs) != 1 {
		return 0, fmt.Errorf("%s: unexpected reply", op)
	}
	v, err := netconfForwarding(msgs[0].Data)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", op, err)
	}
	return v, nil
}

// RTM_GETNETCONF's attributes (linux/netconf.h).
const (
	netconfaIfindex    = 1 // NETCONFA_IFINDEX, s32
	netconfaForwarding = 2 // NETCONFA_FORWARDING, s32
)

// netconfHeader is the size of struct netconfmsg (one byte, the family)
// padded to netlink's alignment: the attributes start after it.
const netconfHeader = 4

// netconfRequest is AllForwarding's RTM_GETNETCONF body: netconfmsg with
// the family, then NETCONFA_IFINDEX = NETCONFA_IFINDEX_ALL (-1), as
// `ip netconf show` sends it.
func netconfRequest(family uint8) []byte {
	b := make([]byte, netconfHeader, netconfHeader+8)
	b[0] = family
	b = binary.NativeEndian.AppendUint16(b, 8) // nla_len
	b = binary.NativeEndian.AppendUint16(b, netconfaIfindex)
	return binary.NativeEndian.AppendUint32(b, ^uint32(0)) // -1
}

// netconfForwarding takes NETCONFA_FORWARDING (s32) from an
// RTM_NEWNETCONF message's body.
func netconfForwarding(data []byte) (int32, error) {
	if len(data) < netconfHeader {
		return 0, errors.New("short netconf message")
	}
	ad, err := netlink.NewAttributeDecoder(data[netconfHeader:])
	if err != nil {
		return 0, err
	}
	var v int32
	found := false
	for ad.Next() {
		if ad.Type() == netconfaForwarding && len(ad.Bytes()) == 4 {
			v, found = int32(ad.Uint32()), true
		}
	}
	if err := ad.Err(); err != nil {
		return 0, err
	}
	if !found {
		return 0, ErrNoSetting
	}
	return v, nil
}
