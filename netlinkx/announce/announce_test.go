package announce_test

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/netlinkx/announce"
	"github.com/nftcni/nftcni/netns"
)

var mac = net.HardwareAddr{0x02, 0x42, 0xac, 0x11, 0x00, 0x05}

// arpFrame is the 28-byte payload of a gratuitous ARP request for ip from
// mac: sender and target protocol address both ip, target hardware address
// zero (RFC 5227 §3 "ARP Announcement").
func arpFrame(mac net.HardwareAddr, ip netip.Addr) []byte {
	b := make([]byte, 28)
	binary.BigEndian.PutUint16(b[0:2], 1)      // hardware type: Ethernet
	binary.BigEndian.PutUint16(b[2:4], 0x0800) // protocol type: IPv4
	b[4], b[5] = 6, 4                          // address lengths
	binary.BigEndian.PutUint16(b[6:8], 1)      // operation: request
	copy(b[8:14], mac)
	a := ip.As4()
	copy(b[14:18], a[:])
	copy(b[24:28], a[:])
	return b
}

// naMessage is an unsolicited neighbour advertisement for target from mac:
// Override flag, target link-layer address option, checksum zeroed.
func naMessage(mac net.HardwareAddr, target netip.Addr) []byte {
	b := make([]byte, 32)
	b[0] = 136  // type: neighbour advertisement
	b[4] = 0x20 // flags: Override (not Router, not Solicited)
	t := target.As16()
	copy(b[8:24], t[:])
	b[24], b[25] = 2, 1 // option: target link-layer address, 8 bytes
	copy(b[26:32], mac)
	return b
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// capture opens a packet socket on ifName inside ns that sees every frame.
func capture(t *testing.T, ns *netns.NS, ifName string) int {
	t.Helper()
	var fd int
	err := ns.Do(func() error {
		ifi, err := net.InterfaceByName(ifName)
		if err != nil {
			return err
		}
		proto := uint16(unix.ETH_P_ALL>>8 | (unix.ETH_P_ALL&0xff)<<8) // htons on little endian
		if binary.NativeEndian.Uint16([]byte{0, 1}) == 1 {
			proto = unix.ETH_P_ALL // big endian host
		}
		fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(proto))
		if err != nil {
			return err
		}
		if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: proto, Ifindex: ifi.Index}); err != nil {
			unix.Close(fd)
			return err
		}
		tv := unix.NsecToTimeval(int64(200 * time.Millisecond))
		return unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	})
	must(t, err)
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// icmp6Checksum computes the ICMPv6 checksum over the pseudo-header.
func icmp6Checksum(src, dst []byte, msg []byte) uint16 {
	var sum uint32
	add := func(b []byte) {
		for i := 0; i+1 < len(b); i += 2 {
			sum += uint32(b[i])<<8 | uint32(b[i+1])
		}
		if len(b)%2 == 1 {
			sum += uint32(b[len(b)-1]) << 8
		}
	}
	add(src)
	add(dst)
	var l [8]byte
	binary.BigEndian.PutUint32(l[0:4], uint32(len(msg)))
	l[7] = 58
	add(l[:])
	add(msg)
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return ^uint16(sum)
}

func TestAnnouncementsOnTheWire(t *testing.T) {
	a := privtest.NewNS(t)
	b := privtest.NewNS(t)
	ha, err := netlinkx.Open(a)
	must(t, err)
	defer ha.Close()
	hb, err := netlinkx.Open(b)
	must(t, err)
	defer hb.Close()
	must(t, ha.AddVeth(netlinkx.VethSpec{Name: "a0", PeerName: "b0", PeerNS: b, MAC: mac}))
	must(t, hb.SetUp("b0"))
	must(t, ha.SetUp("a0"))
	v4 := netip.MustParseAddr("10.9.0.2")
	v6 := netip.MustParseAddr("2001:db8::2")
	must(t, ha.AddAddr("a0", netip.PrefixFrom(v4, 24), netlinkx.AddrOpts{}))
	must(t, ha.AddAddr("a0", netip.PrefixFrom(v6, 64), netlinkx.AddrOpts{NoDAD: true}))
	if st, err := ha.WaitOperUp("a0", 2*time.Second, 10*time.Millisecond); err != nil || st != netlinkx.OperUp {
		t.Fatalf("a0 not up: %v %v", st, err)
	}

	fd := capture(t, b, "b0")
	must(t, announce.Addresses(ha, "a0", []netip.Addr{v4, v6, netip.MustParseAddr("fe80::1")}))

	var sawARP, sawNA bool
	deadline := time.Now().Add(3 * time.Second)
	buf := make([]byte, 2048)
	for !(sawARP && sawNA) && time.Now().Before(deadline) {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			continue // timeout: look again until the deadline
		}
		f := buf[:n]
		if n < 14 || !bytes.Equal(f[6:12], mac) {
			continue
		}
		switch binary.BigEndian.Uint16(f[12:14]) {
		case unix.ETH_P_ARP:
			if !bytes.Equal(f[0:6], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}) {
				t.Errorf("ARP not broadcast: % x", f[0:6])
			}
			if !bytes.Equal(f[14:42], arpFrame(mac, v4)) {
				t.Errorf("ARP payload % x", f[14:42])
			}
			sawARP = true
		case unix.ETH_P_IPV6:
			ip6 := f[14:]
			if len(ip6) < 40+32 || ip6[6] != 58 || ip6[40] != 136 {
				continue // MLD reports, router solicitations, ...
			}
			src, dst := ip6[8:24], ip6[24:40]
			msg := ip6[40 : 40+int(binary.BigEndian.Uint16(ip6[4:6]))]
			if !bytes.Equal(msg[8:24], v6.AsSlice()) {
				continue // the link-local address is announced too
			}
			if ip6[7] != 255 {
				t.Errorf("NA hop limit %d, want 255", ip6[7])
			}
			if !bytes.Equal(src, v6.AsSlice()) || !bytes.Equal(dst, netip.MustParseAddr("ff02::1").AsSlice()) {
				t.Errorf("NA %x -> %x", src, dst)
			}
			if icmp6Checksum(src, dst, msg) != 0 {
				t.Errorf("NA checksum wrong")
			}
			withZeroSum := append([]byte(nil), msg...)
			withZeroSum[2], withZeroSum[3] = 0, 0
			if !bytes.Equal(withZeroSum, naMessage(mac, v6)) {
				t.Errorf("NA message % x", msg)
			}
			sawNA = true
		}
	}
	if !sawARP || !sawNA {
		t.Errorf("seen: gratuitous ARP %v, neighbour advertisement %v", sawARP, sawNA)
	}
}

func TestAnnounceErrors(t *testing.T) {
	ns := privtest.NewNS(t)
	h, err := netlinkx.Open(ns)
	must(t, err)
	defer h.Close()
	if err := announce.Addresses(h, "nope0", []netip.Addr{netip.MustParseAddr("10.0.0.1")}); err == nil {
		t.Error("announcing on a missing link succeeded")
	}
	if err := announce.Addresses(h, "lo", []netip.Addr{netip.MustParseAddr("2001:db8::9")}); err == nil || err.Error() != "announcing addresses of lo: not an Ethernet link" {
		t.Errorf("announcing on lo: %v", err)
	}
	// Nothing to announce: no netlink traffic, no error, even for a missing link.
	if err := announce.Addresses(h, "nope0", []netip.Addr{netip.MustParseAddr("fe80::1")}); err != nil {
		t.Errorf("link-local only: %v", err)
	}
}
