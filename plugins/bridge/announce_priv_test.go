package bridge

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/internal/plugintest"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/netns"
)

// captureOn opens a packet socket seeing every frame on ifName in ns.
func captureOn(t *testing.T, ns *netns.NS, ifName string) int {
	t.Helper()
	proto := uint16(unix.ETH_P_ALL>>8 | (unix.ETH_P_ALL&0xff)<<8) // htons, little endian
	if binary.NativeEndian.Uint16([]byte{0, 1}) == 1 {
		proto = unix.ETH_P_ALL
	}
	var fd int
	plugintest.Must(t, ns.Do(func() error {
		ifi, err := net.InterfaceByName(ifName)
		if err != nil {
			return err
		}
		if fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(proto)); err != nil {
			return err
		}
		if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: proto, Ifindex: ifi.Index}); err != nil {
			return err
		}
		tv := unix.NsecToTimeval(int64(100 * time.Millisecond))
		return unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	}))
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// TestAnnouncesAddresses: after ADD the bridge sees a gratuitous ARP for
// the container's IPv4 address and an unsolicited neighbour advertisement
// (which the kernel does not send by itself here) for its IPv6 address,
// from the container's MAC.
func TestAnnouncesAddresses(t *testing.T) {
	t.Parallel()
	th := newHost(t)
	plugintest.Must(t, th.H.AddBridge(netlinkx.BridgeSpec{Name: "br0"}))
	plugintest.Must(t, th.H.SetUp("br0"))
	fd := captureOn(t, th.NS, "br0")
	ctr, hc := plugintest.NewCtr(t)
	th.Add(ctr, "ann", conf("1.0.0", plugintest.Static("", "10.95.0.2/24", "fd00:95::2/64")))
	mac := plugintest.MustLink(t, hc, "eth0").MAC
	v4 := netip.MustParseAddr("10.95.0.2").As4()
	v6 := netip.MustParseAddr("fd00:95::2").As16()

	var sawARP, sawNA bool
	buf := make([]byte, 2048)
	for deadline := time.Now().Add(3 * time.Second); !(sawARP && sawNA) && time.Now().Before(deadline); {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil || n < 14 || !bytes.Equal(buf[6:12], mac) {
			continue
		}
		f := buf[14:n]
		switch binary.BigEndian.Uint16(buf[12:14]) {
		case unix.ETH_P_ARP:
			if len(f) >= 28 && bytes.Equal(f[14:18], v4[:]) && bytes.Equal(f[24:28], v4[:]) {
				sawARP = true
			}
		case unix.ETH_P_IPV6:
			if len(f) >= 40+24 && f[6] == 58 && f[40] == 136 && bytes.Equal(f[48:64], v6[:]) {
				sawNA = true
			}
		}
	}
	if !sawARP || !sawNA {
		t.Errorf("seen on the bridge: gratuitous ARP %v, neighbour advertisement %v", sawARP, sawNA)
	}
}
