// Package announce tells a link's neighbours about addresses that just
// appeared on it: a gratuitous ARP request for IPv4 and an unsolicited
// neighbour advertisement (RFC 4861 §7.2.6) for IPv6. Peers and switches
// then update stale ARP/neighbour entries and forwarding tables at once
// instead of after their timeouts — what matters when an address moves to a
// new container with a new MAC.
//
// The frames are built by hand on plain sockets (AF_PACKET for ARP, a raw
// ICMPv6 socket for the advertisement); no external tool or library is
// involved. Sockets are opened inside the target namespace, so the caller's
// thread never changes namespace.
package announce

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/netns"
)

// htons converts a 16-bit value to network byte order for socket calls.
func htons(v uint16) uint16 {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], v)
	return binary.NativeEndian.Uint16(b[:])
}

// inNS runs fn inside ns, or directly when ns is nil.
func inNS(ns *netns.NS, fn func() error) error {
	if ns == nil {
		return fn()
	}
	return ns.Do(fn)
}

// Addresses announces every address in addrs on ifName in ns (nil: the
// calling thread's namespace): a gratuitous ARP for each IPv4 address, an
// unsolicited neighbour advertisement for each IPv6 address that is not
// link-local. It keeps going after a failure and returns all errors joined.
func Addresses(ns *netns.NS, ifName string, addrs []netip.Addr) error {
	var errs []error
	for _, a := range addrs {
		var err error
		switch {
		case a.Is4():
			err = GratuitousARP(ns, ifName, a)
		case a.Is6() && !a.IsLinkLocalUnicast():
			err = UnsolicitedNA(ns, ifName, a)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ARPFrame returns the 28-byte ARP payload of a gratuitous ARP request for
// ip from mac: sender and target protocol address both ip, target hardware
// address zero (RFC 5227 §3 "ARP Announcement").
func ARPFrame(mac net.HardwareAddr, ip netip.Addr) []byte {
	b := make([]byte, 28)
	binary.BigEndian.PutUint16(b[0:2], 1)      // hardware type: Ethernet
	binary.BigEndian.PutUint16(b[2:4], 0x0800) // protocol type: IPv4
	b[4] = 6                                   // hardware address length
	b[5] = 4                                   // protocol address length
	binary.BigEndian.PutUint16(b[6:8], 1)      // operation: request
	copy(b[8:14], mac)
	a := ip.As4()
	copy(b[14:18], a[:])
	// b[18:24]: target hardware address, zero
	copy(b[24:28], a[:])
	return b
}

// GratuitousARP broadcasts a gratuitous ARP request for ip out of ifName.
func GratuitousARP(ns *netns.NS, ifName string, ip netip.Addr) error {
	if !ip.Is4() {
		return fmt.Errorf("gratuitous ARP for %s: not an IPv4 address", ip)
	}
	return inNS(ns, func() error {
		ifi, err := net.InterfaceByName(ifName)
		if err != nil {
			return fmt.Errorf("gratuitous ARP for %s on %s: %w", ip, ifName, err)
		}
		if len(ifi.HardwareAddr) != 6 {
			return fmt.Errorf("gratuitous ARP for %s on %s: not an Ethernet link", ip, ifName)
		}
		// Protocol 0: the socket only sends and never queues received frames.
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("gratuitous ARP for %s on %s: opening packet socket: %w", ip, ifName, err)
		}
		defer unix.Close(fd)
		to := &unix.SockaddrLinklayer{
			Protocol: htons(unix.ETH_P_ARP),
			Ifindex:  ifi.Index,
			Halen:    6,
			Addr:     [8]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
		}
		if err := unix.Sendto(fd, ARPFrame(ifi.HardwareAddr, ip), 0, to); err != nil {
			return fmt.Errorf("gratuitous ARP for %s on %s: %w", ip, ifName, err)
		}
		return nil
	})
}

// allNodes is ff02::1, where unsolicited advertisements go.
var allNodes = netip.MustParseAddr("ff02::1")

// NAMessage returns an ICMPv6 neighbour advertisement for target from mac
// with the Override flag and a target link-layer address option, checksum
// left zero (the kernel fills it in for raw ICMPv6 sockets).
func NAMessage(mac net.HardwareAddr, target netip.Addr) []byte {
	b := make([]byte, 32)
	b[0] = 136 // type: neighbour advertisement
	// b[1] code 0, b[2:4] checksum
	b[4] = 0x20 // flags: Override (not Router, not Solicited)
	t := target.As16()
	copy(b[8:24], t[:])
	b[24] = 2 // option: target link-layer address
	b[25] = 1 // length in units of 8 bytes
	copy(b[26:32], mac)
	return b
}

// UnsolicitedNA sends an unsolicited neighbour advertisement for ip to
// all nodes (ff02::1) out of ifName, with ip as the source address. The
// address must be usable, i.e. not tentative: while duplicate address
// detection runs, advertising it would be wrong anyway.
func UnsolicitedNA(ns *netns.NS, ifName string, ip netip.Addr) error {
	if !ip.Is6() || ip.Is4In6() {
		return fmt.Errorf("neighbour advertisement for %s: not an IPv6 address", ip)
	}
	return inNS(ns, func() error {
		ifi, err := net.InterfaceByName(ifName)
		if err != nil {
			return fmt.Errorf("neighbour advertisement for %s on %s: %w", ip, ifName, err)
		}
		if len(ifi.HardwareAddr) != 6 {
			return fmt.Errorf("neighbour advertisement for %s on %s: not an Ethernet link", ip, ifName)
		}
		fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_ICMPV6)
		if err != nil {
			return fmt.Errorf("neighbour advertisement for %s on %s: opening ICMPv6 socket: %w", ip, ifName, err)
		}
		defer unix.Close(fd)
		// Receive nothing: block every ICMPv6 type.
		var filter unix.ICMPv6Filter
		for i := range filter.Data {
			filter.Data[i] = 0xffffffff
		}
		opts := []struct {
			name string
			set  func() error
		}{
			{"ICMPV6_FILTER", func() error {
				return unix.SetsockoptICMPv6Filter(fd, unix.SOL_ICMPV6, unix.ICMPV6_FILTER, &filter)
			}},
			// Receivers drop neighbour discovery with a hop limit below 255.
			{"IPV6_MULTICAST_HOPS", func() error {
				return unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_HOPS, 255)
			}},
			{"IPV6_MULTICAST_IF", func() error {
				return unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_IF, ifi.Index)
			}},
		}
		for _, o := range opts {
			if err := o.set(); err != nil {
				return fmt.Errorf("neighbour advertisement for %s on %s: %s: %w", ip, ifName, o.name, err)
			}
		}
		if err := unix.Bind(fd, &unix.SockaddrInet6{Addr: ip.As16()}); err != nil {
			return fmt.Errorf("neighbour advertisement for %s on %s: binding the source address: %w", ip, ifName, err)
		}
		to := &unix.SockaddrInet6{Addr: allNodes.As16(), ZoneId: uint32(ifi.Index)}
		if err := unix.Sendto(fd, NAMessage(ifi.HardwareAddr, ip), 0, to); err != nil {
			return fmt.Errorf("neighbour advertisement for %s on %s: %w", ip, ifName, err)
		}
		return nil
	})
}
