package netlinkx

import (
	"errors"
	"fmt"

	"github.com/jsimonetti/rtnetlink/v2"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/crashpoint"
	"github.com/nftcni/nftcni/netns"
)

// Tap devices cannot be created over rtnetlink (the tun driver refuses
// RTM_NEWLINK); they are made with ioctls on /dev/net/tun, in the namespace
// of the thread that opens it, and made persistent so they outlive the
// file descriptor. Everything else about them (MTU, MAC, name, up) is plain
// netlink afterwards.

// tunDevice is the tun/tap clone device.
const tunDevice = "/dev/net/tun"

// TapSpec describes a persistent tap device to create.
type TapSpec struct {
	Name       string
	MultiQueue bool // IFF_MULTI_QUEUE: a consumer can attach several queues
	VnetHdr    bool // IFF_VNET_HDR; consumers choose again when they attach
	// Owner and Group restrict who may attach (TUNSETOWNER, TUNSETGROUP);
	// nil: anyone with CAP_NET_ADMIN, the kernel's default.
	Owner, Group *uint32
}

// AddTap creates a persistent tap device in h's namespace. The device is
// created with IFF_NO_PI (no packet-information header, as `ip tuntap`
// does) and IFF_TUN_EXCL, so an existing link of that name gives an error
// matching unix.EBUSY instead of being attached to. If any step fails the
// device is gone again: a tun device that is not persistent disappears with
// its last file descriptor.
func (h *Handle) AddTap(s TapSpec) error {
	op := fmt.Sprintf("adding tap %q", s.Name)
	if !validName(s.Name) {
		return &Error{Op: op, Err: unix.EINVAL}
	}
	var fd int
	err := inNS(h.ns, func() (err error) {
		// The device lands in the namespace of the opening thread.
		fd, err = unix.Open(tunDevice, unix.O_RDWR|unix.O_CLOEXEC, 0)
		return err
	})
	if err != nil {
		return &Error{Op: op, Err: fmt.Errorf("opening %s: %w", tunDevice, err)}
	}
	defer unix.Close(fd)

	ifr, err := unix.NewIfreq(s.Name)
	if err != nil {
		return &Error{Op: op, Err: err}
	}
	flags := uint16(unix.IFF_TAP | unix.IFF_NO_PI | unix.IFF_TUN_EXCL)
	if s.MultiQueue {
		flags |= unix.IFF_MULTI_QUEUE
	}
	if s.VnetHdr {
		flags |= unix.IFF_VNET_HDR
	}
	ifr.SetUint16(flags)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		return &Error{Op: op, Err: err}
	}
	if s.Owner != nil {
		if err := unix.IoctlSetInt(fd, unix.TUNSETOWNER, int(*s.Owner)); err != nil {
			return &Error{Op: fmt.Sprintf("setting owner %d of tap %q", *s.Owner, s.Name), Err: err}
		}
	}
	if s.Group != nil {
		if err := unix.IoctlSetInt(fd, unix.TUNSETGROUP, int(*s.Group)); err != nil {
			return &Error{Op: fmt.Sprintf("setting group %d of tap %q", *s.Group, s.Name), Err: err}
		}
	}
	crashpoint.Hit("tap:persist:before")
	if err := unix.IoctlSetInt(fd, unix.TUNSETPERSIST, 1); err != nil {
		return &Error{Op: fmt.Sprintf("making tap %q persistent", s.Name), Err: err}
	}
	crashpoint.Hit("tap:persist:after")
	return nil
}

// TunInfo is what the kernel reports about a tun or tap device.
type TunInfo struct {
	Tap          bool    // a tap (Ethernet frames), not a tun (IP packets)
	Owner, Group *uint32 // nil: not restricted
	PI           bool    // packets carry the 4-byte packet-information header
	VnetHdr      bool
	Persist      bool
	MultiQueue   bool
	Queues       int // attached queues (file descriptors)
}

// ErrNotTun reports a link that is not a tun or tap device.
var ErrNotTun = errors.New("not a tun/tap device")

// TunInfo reads the tun driver's attributes of the link (kernels ≥ 4.15
// report them over netlink).
func (h *Handle) TunInfo(name string) (TunInfo, error) {
	op := fmt.Sprintf("reading tun attributes of %q", name)
	if !validName(name) {
		return TunInfo{}, &Error{Op: op, Err: ErrNotFound}
	}
	m, err := h.get(&rtnetlink.LinkMessage{Attributes: &rtnetlink.LinkAttributes{Name: name}}, unix.RTM_GETLINK)
	if err != nil {
		return TunInfo{}, failLink(op, err)
	}
	lm, ok := m.(*rtnetlink.LinkMessage)
	if !ok || lm.Attributes == nil || lm.Attributes.Info == nil || lm.Attributes.Info.Kind != "tun" {
		return TunInfo{}, &Error{Op: op, Err: ErrNotTun}
	}
	raw, ok := lm.Attributes.Info.Data.(*rtnetlink.LinkData)
	if !ok {
		return TunInfo{}, &Error{Op: op, Err: fmt.Errorf("unexpected driver data %T", lm.Attributes.Info.Data)}
	}
	var ti TunInfo
	ad, err := netlink.NewAttributeDecoder(raw.Data)
	if err != nil {
		return TunInfo{}, &Error{Op: op, Err: err}
	}
	for ad.Next() {
		switch ad.Type() {
		case unix.IFLA_TUN_TYPE:
			ti.Tap = ad.Uint8() == unix.IFF_TAP
		case unix.IFLA_TUN_OWNER:
			v := ad.Uint32()
			ti.Owner = &v
		case unix.IFLA_TUN_GROUP:
			v := ad.Uint32()
			ti.Group = &v
		case unix.IFLA_TUN_PI:
			ti.PI = ad.Uint8() != 0
		case unix.IFLA_TUN_VNET_HDR:
			ti.VnetHdr = ad.Uint8() != 0
		case unix.IFLA_TUN_PERSIST:
			ti.Persist = ad.Uint8() != 0
		case unix.IFLA_TUN_MULTI_QUEUE:
			ti.MultiQueue = ad.Uint8() != 0
		case unix.IFLA_TUN_NUM_QUEUES:
			ti.Queues = int(ad.Uint32())
		}
	}
	if err := ad.Err(); err != nil {
		return TunInfo{}, &Error{Op: op, Err: err}
	}
	return ti, nil
}

// inNS runs fn inside ns, or directly when ns is nil: a tun device lands
// in the namespace of the thread that opens /dev/net/tun.
func inNS(ns *netns.NS, fn func() error) error {
	if ns == nil {
		return fn()
	}
	return ns.Do(fn)
}
