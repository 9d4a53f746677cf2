// Package conntrack deletes connection-tracking entries over ctnetlink
// (NETLINK_NETFILTER, subsystem NFNL_SUBSYS_CTNETLINK).
//
// portmap needs exactly one operation: forget the UDP flows addressed to a
// host port, so that the next datagram is NATed afresh to whichever
// container now holds the port (a UDP "connection" otherwise lives on in
// conntrack, pinned to its old DNAT target, as long as datagrams keep
// coming). The kernel can delete one entry by its original tuple, or flush
// the whole table; there is no "delete where port = P". So, like the
// reference, we dump the table, pick the entries, and delete each by the
// tuple the kernel gave us, echoed back byte for byte.
//
// The ctnetlink message and attribute numbers are those of
// linux/netfilter/nfnetlink_conntrack.h; x/sys/unix does not carry them.
// (ti-mo/conntrack would be the library for this, but it is not available
// through this project's module proxy; the two operations here are small.)
package conntrack

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/nlerr"
)

const (
	subsysCTNetlink = 1 // NFNL_SUBSYS_CTNETLINK
	msgGet          = 1 // IPCTNL_MSG_CT_GET
	msgDelete       = 2 // IPCTNL_MSG_CT_DELETE

	ctaTupleOrig = 1  // CTA_TUPLE_ORIG
	ctaZone      = 18 // CTA_ZONE

	ctaTupleProto = 2 // CTA_TUPLE_PROTO

	ctaProtoNum     = 1 // CTA_PROTO_NUM
	ctaProtoDstPort = 3 // CTA_PROTO_DST_PORT
)

// Family is an address family: unix.AF_INET or unix.AF_INET6.
type Family uint8

// DeleteUDPToPorts deletes, in ns (nil: the caller's), every conntrack
// entry of family whose original direction is UDP to one of ports,
// whatever the addresses. It reports how many it deleted. An entry that
// vanished between the dump and the delete is not an error.
func DeleteUDPToPorts(ns *netns.NS, family Family, ports []uint16) (int, error) {
	if len(ports) == 0 {
		return 0, nil
	}
	cfg := &netlink.Config{}
	if ns != nil {
		cfg.NetNS = ns.Fd()
	}
	c, err := netlink.Dial(unix.NETLINK_NETFILTER, cfg)
	if err != nil {
		return 0, fmt.Errorf("opening conntrack socket: %w", nlerr.Plain(err))
	}
	defer c.Close()
	nlerr.ExtAck(c)

	msgs, err := c.Execute(netlink.Message{
		Header: netlink.Header{Type: msgType(msgGet), Flags: netlink.Request | netlink.Dump},
		Data:   nfgenmsg(family),
	})
	if err != nil {
		return 0, fmt.Errorf("listing conntrack entries: %w", nlerr.Plain(err))
	}
	want := map[uint16]bool{}
	for _, p := range ports {
		want[p] = true
	}
	deleted := 0
	var errs []error
	for _, m := range msgs {
		if len(m.Data) < 4 {
			continue
		}
		orig, zone, ok := udpTo(m.Data[4:], want)
		if !ok {
			continue
		}
		attrs := []netlink.Attribute{{Type: ctaTupleOrig | unix.NLA_F_NESTED, Data: orig}}
		if zone != nil {
			attrs = append(attrs, netlink.Attribute{Type: ctaZone, Data: zone})
		}
		data, err := netlink.MarshalAttributes(attrs)
		if err != nil {
			return deleted, err
		}
		_, err = c.Execute(netlink.Message{
			Header: netlink.Header{Type: msgType(msgDelete), Flags: netlink.Request | netlink.Acknowledge},
			Data:   append(nfgenmsg(family), data...),
		})
		switch {
		case err == nil:
			deleted++
		case errors.Is(err, unix.ENOENT):
		default:
			errs = append(errs, nlerr.Plain(err))
		}
	}
	if len(errs) > 0 {
		return deleted, fmt.Errorf("deleting conntrack entries: %w", errors.Join(errs...))
	}
	return deleted, nil
}

// udpTo parses one conntrack entry and returns its original tuple (as the
// raw nested attribute payload) and zone when it is UDP to a port in want.
func udpTo(b []byte, want map[uint16]bool) (orig, zone []byte, ok bool) {
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return nil, nil, false
	}
	for ad.Next() {
		switch ad.Type() {
		case ctaTupleOrig:
			orig = ad.Bytes()
		case ctaZone:
			zone = ad.Bytes()
		}
	}
	if ad.Err() != nil || orig == nil {
		return nil, nil, false
	}
	proto, port, found := protoPort(orig)
	if !found || proto != unix.IPPROTO_UDP || !want[port] {
		return nil, nil, false
	}
	return orig, zone, true
}

// protoPort reads the protocol number and destination port out of a tuple.
func protoPort(tuple []byte) (proto uint8, port uint16, ok bool) {
	ad, err := netlink.NewAttributeDecoder(tuple)
	if err != nil {
		return 0, 0, false
	}
	var p []byte
	for ad.Next() {
		if ad.Type() == ctaTupleProto {
			p = ad.Bytes()
		}
	}
	if ad.Err() != nil || p == nil {
		return 0, 0, false
	}
	pd, err := netlink.NewAttributeDecoder(p)
	if err != nil {
		return 0, 0, false
	}
	gotProto, gotPort := false, false
	for pd.Next() {
		switch pd.Type() {
		case ctaProtoNum:
			if b := pd.Bytes(); len(b) == 1 {
				proto, gotProto = b[0], true
			}
		case ctaProtoDstPort:
			if b := pd.Bytes(); len(b) == 2 {
				port, gotPort = binary.BigEndian.Uint16(b), true
			}
		}
	}
	return proto, port, pd.Err() == nil && gotProto && gotPort
}

func msgType(t int) netlink.HeaderType { return netlink.HeaderType(subsysCTNetlink<<8 | t) }

// nfgenmsg is struct nfgenmsg: family, version NFNETLINK_V0, resource id 0.
func nfgenmsg(f Family) []byte { return []byte{byte(f), unix.NFNETLINK_V0, 0, 0} }
