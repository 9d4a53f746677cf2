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
// name, so a component of a path there may be compared with one entry per
// namespace that has used it (each container's). Measured with 1000
// bridge attachments on one host (Linux 6.18), a file under
// /proc/sys/net/ipv6 cost 0.15-0.17 ms of CPU per access against
// 0.01-0.03 ms with one; the IPv4 files measured (ip_forward, an
// interface's arp_notify) stayed at 0.01-0.03 ms. The kernel answers the
// same settings over rtnetlink at 0.04-0.07 ms of CPU whatever the number
// of namespaces (a socket opened and closed per call), so the settings an
// ADD reads on every call under net/ipv6 are read here; a caller falls
// back to the file on any error, so a kernel or setting these do not
// cover behaves as before. Writing over rtnetlink (RTM_SETLINK with
// IFLA_INET_CONF) is possible for IPv4 settings only, whose files do not
// grow, and costs more than the file: not offered.

// IPv4RouteLocalnet is the index of route_localnet among an interface's
// IPv4 settings (IPV4_DEVCONF_ROUTE_LOCALNET in linux/ip.h; they count
// from 1, IPV4_DEVCONF_FORWARDING).
const IPv4RouteLocalnet = 26

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

// linkRequest is an RTM_GETLINK message's body that names interface
// ifName: ifinfomsg with any family and no index, IFLA_IFNAME.
func linkRequest(ifName string) ([]byte, error) {
	ae := netlink.NewAttributeEncoder()
	ae.String(unix.IFLA_IFNAME, ifName)
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
	req, err := linkRequest(ifName)
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
// index order), at a cost that does not grow with the host's namespaces
// (nft/portmap reads route_localnet so).
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
