// Package announce tells a link's neighbours about addresses that just
// appeared on it: a gratuitous ARP request for IPv4 and an unsolicited
// neighbour advertisement (RFC 4861 §7.2.6) for IPv6. Peers and switches
// then update stale ARP/neighbour entries and forwarding tables at once
// instead of after their timeouts — what matters when an address moves to a
// new container with a new MAC.
//
// The kernel sends both itself: with net.ipv4.conf.<if>.arp_notify and
// net.ipv6.conf.<if>.ndisc_notify set, a NETDEV_CHANGEADDR event makes it
// announce every usable address of the link (inetdev_event and
// ndisc_netdev_event), and setting a link's MAC address — even to its
// current value — raises that event. We do exactly that over rtnetlink.
//
// Why not build the frames ourselves: sending an ARP frame needs an
// AF_PACKET socket, and closing one always waits for an RCU grace period
// (packet_release calls synchronize_net), about 10 ms here — more than the
// rest of a bridge ADD. The kernel's own announcements cost one netlink
// request.
package announce

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"

	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/sysctl"
)

// Addresses announces the addresses of ifName in h's namespace. addrs says which families to announce: any IPv4
// address enables the gratuitous ARP, any IPv6 address that is not
// link-local the neighbour advertisement. The kernel then announces every
// address of that family on the link that is not tentative.
func Addresses(h *netlinkx.Handle, ifName string, addrs []netip.Addr) error {
	var v4, v6 bool
	for _, a := range addrs {
		v4 = v4 || a.Is4()
		v6 = v6 || a.Is6() && !a.IsLinkLocalUnicast()
	}
	if !v4 && !v6 {
		return nil
	}
	ns := h.NS()
	l, err := h.LinkByName(ifName)
	if err != nil {
		return fmt.Errorf("announcing addresses of %s: %w", ifName, err)
	}
	if len(l.MAC) != 6 || bytes.Equal(l.MAC, make([]byte, 6)) { // lo has a zero 6-byte address
		return fmt.Errorf("announcing addresses of %s: not an Ethernet link", ifName)
	}
	var errs []error
	if v4 {
		errs = append(errs, sysctl.Set(ns, "net/ipv4/conf/"+ifName+"/arp_notify", "1"))
	}
	if v6 {
		errs = append(errs, sysctl.Set(ns, "net/ipv6/conf/"+ifName+"/ndisc_notify", "1"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("announcing addresses of %s: %w", ifName, err)
	}
	if err := h.SetMAC(ifName, l.MAC); err != nil {
		return fmt.Errorf("announcing addresses of %s: %w", ifName, err)
	}
	return nil
}
