package sysctl

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/netns"
)

// IPv4RouteLocalnet is the index of route_localnet among an interface's
// IPv4 settings (IPV4_DEVCONF_ROUTE_LOCALNET in linux/ip.h).
const IPv4RouteLocalnet = 26

// ErrNoSetting: the interface, or the setting, is not there.
var ErrNoSetting = errors.New("no such interface or setting")

// IPv4Devconf reads one of interface ifName's IPv4 settings inside ns
// (nil: the calling thread's namespace), the values under
// /proc/sys/net/ipv4/conf/<ifName>/, by its IPV4_DEVCONF index (such as
// IPv4RouteLocalnet), from the interface's own RTM_GETLINK answer
// (IFLA_AF_SPEC, AF_INET, IFLA_INET_CONF: an array of the settings in
// index order). Unlike the file it costs the same whatever the number of
// network namespaces on the host: the kernel keeps the /proc/sys/net
// directories of every namespace in one dentry hash chain per name, so
// each component of a path there is compared with one entry per namespace
// that has used it (each container's).
func IPv4Devconf(ns *netns.NS, ifName string, index int) (uint32, error) {
	op := fmt.Sprintf("reading IPv4 setting %d of %q", index, ifName)
	if ifName == "" || len(ifName) >= unix.IFNAMSIZ || index < 1 {
		return 0, fmt.Errorf("%s: %w", op, ErrNoSetting)
	}
	cfg := &netlink.Config{}
	if ns != nil {
		cfg.NetNS = ns.Fd()
	}
	c, err := netlink.Dial(unix.NETLINK_ROUTE, cfg)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", op, err)
	}
	defer c.Close()
	ae := netlink.NewAttributeEncoder()
	ae.String(unix.IFLA_IFNAME, ifName)
	attrs, err := ae.Encode()
	if err != nil {
		return 0, fmt.Errorf("%s: %w", op, err)
	}
	msgs, err := c.Execute(netlink.Message{
		Header: netlink.Header{Type: unix.RTM_GETLINK, Flags: netlink.Request},
		Data:   append(make([]byte, unix.SizeofIfInfomsg), attrs...), // ifinfomsg: any family, by name
	})
	if errors.Is(err, unix.ENODEV) {
		return 0, fmt.Errorf("%s: %w", op, ErrNoSetting)
	}
	if err != nil {
		return 0, fmt.Errorf("%s: %w", op, err)
	}
	if len(msgs) != 1 || len(msgs[0].Data) < unix.SizeofIfInfomsg {
		return 0, fmt.Errorf("%s: unexpected reply", op)
	}
	v, ok, err := inetConf(msgs[0].Data[unix.SizeofIfInfomsg:], index)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", op, err)
	}
	if !ok {
		return 0, fmt.Errorf("%s: %w", op, ErrNoSetting)
	}
	return v, nil
}

// inetConf finds setting index in the attributes of an RTM_NEWLINK
// message: IFLA_AF_SPEC { AF_INET { IFLA_INET_CONF: u32 array } }, the
// kernel's inet_fill_link_af.
func inetConf(attrs []byte, index int) (uint32, bool, error) {
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
		errs = append(errs, nested(b, unix.AF_INET, func(b []byte) {
			errs = append(errs, nested(b, unix.IFLA_INET_CONF, func(b []byte) {
				if len(b) >= index*4 {
					v, found = binary.NativeEndian.Uint32(b[(index-1)*4:index*4]), true
				}
			}))
		}))
	})
	return v, found, errors.Join(append(errs, err)...)
}
