package netlinkx

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/jsimonetti/rtnetlink/v2"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// DevconfRouteLocalnet is the index of route_localnet among an
// interface's IPv4 settings (IPV4_DEVCONF_ROUTE_LOCALNET in linux/ip.h).
const DevconfRouteLocalnet = 26

// IPv4Devconf reads one of link name's IPv4 settings, the values under
// /proc/sys/net/ipv4/conf/<name>/, by its IPV4_DEVCONF index (such as
// DevconfRouteLocalnet), from the link's own RTM_GETLINK answer
// (IFLA_AF_SPEC, AF_INET, IFLA_INET_CONF). Unlike the file it costs the
// same whatever the number of network namespaces on the host: the kernel
// keeps the /proc/sys/net directories of every namespace in one dentry
// hash chain per name, so each component of a path there is compared with
// one entry per namespace that has used it (a container's).
func (h *Handle) IPv4Devconf(name string, index int) (uint32, error) {
	op := fmt.Sprintf("reading IPv4 setting %d of %q", index, name)
	if !validName(name) {
		return 0, &Error{Op: op, Err: ErrNotFound}
	}
	_, raw, err := h.exchange(&rtnetlink.LinkMessage{Attributes: &rtnetlink.LinkAttributes{Name: name}}, unix.RTM_GETLINK, netlink.Request)
	if err != nil {
		return 0, failLink(op, err)
	}
	if len(raw) != 1 || len(raw[0].Data) < unix.SizeofIfInfomsg {
		return 0, fail(op, errors.New("unexpected reply"))
	}
	v, ok, err := inetConf(raw[0].Data[unix.SizeofIfInfomsg:], index)
	if err != nil {
		return 0, fail(op, err)
	}
	if !ok {
		return 0, &Error{Op: op, Err: ErrNotFound}
	}
	return v, nil
}

// inetConf finds setting index in the attributes of an RTM_NEWLINK
// message: IFLA_AF_SPEC { AF_INET { IFLA_INET_CONF: u32 array } }, the
// kernel's inet_fill_link_af.
func inetConf(attrs []byte, index int) (uint32, bool, error) {
	var v uint32
	var found bool
	nested := func(b []byte, typ uint16, fn func([]byte) error) error {
		ad, err := netlink.NewAttributeDecoder(b)
		if err != nil {
			return err
		}
		for ad.Next() {
			if ad.Type() == typ {
				if err := fn(ad.Bytes()); err != nil {
					return err
				}
			}
		}
		return ad.Err()
	}
	err := nested(attrs, unix.IFLA_AF_SPEC, func(b []byte) error {
		return nested(b, unix.AF_INET, func(b []byte) error {
			return nested(b, unix.IFLA_INET_CONF, func(b []byte) error {
				// An array of the settings in index order, from 1.
				if index < 1 || len(b) < index*4 {
					return nil
				}
				v, found = binary.NativeEndian.Uint32(b[(index-1)*4:index*4]), true
				return nil
			})
		})
	})
	return v, found, err
}
