package privtest

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/nftcni/nftcni/netns"
)

// UDPExchange sends one datagram from a socket in `from`, bound to src (the
// zero AddrPort: any address, an ephemeral port), to a server on dst in
// `to`, which echoes it. It reports the source address and port the server
// saw (the zero AddrPort if nothing arrived), and whether the echo came
// back, each within timeout. That tells NAT apart from plain forwarding:
// a masqueraded datagram arrives from the router's address, and the echo
// needs the router's conntrack entry to find its way back.
//
// Pass a fixed source port when a previous exchange between the same
// addresses may have left a conntrack entry (with its NAT decision) behind.
func UDPExchange(t testing.TB, from, to *netns.NS, src netip.AddrPort, dst netip.Addr, timeout time.Duration) (seen netip.AddrPort, echoed bool) {
	t.Helper()
	server := listenIn(t, to, "udp", netip.AddrPortFrom(dst, 0).String())
	defer server.Close()
	peers := make(chan netip.AddrPort, 1)
	go func() {
		defer close(peers)
		buf := make([]byte, 64)
		_ = server.SetReadDeadline(time.Now().Add(timeout))
		n, peer, err := server.ReadFrom(buf)
		if err != nil {
			return
		}
		if ua, ok := peer.(*net.UDPAddr); ok {
			ap := ua.AddrPort()
			peers <- netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
		}
		_, _ = server.WriteTo(buf[:n], peer)
	}()

	var laddr *net.UDPAddr
	if src.IsValid() || src.Port() != 0 {
		laddr = net.UDPAddrFromAddrPort(src)
	}
	var client *net.UDPConn
	err := from.Do(func() (err error) {
		client, err = net.ListenUDP("udp", laddr)
		return err
	})
	if err != nil {
		t.Fatalf("opening a UDP socket on %v in %s: %v", src, from.Path(), err)
	}
	defer client.Close()
	serverAddr := server.LocalAddr().(*net.UDPAddr).AddrPort()
	if _, err := client.WriteToUDPAddrPort([]byte("nftcni"), serverAddr); err != nil {
		t.Logf("sending to %s: %v", serverAddr, err)
	} else {
		_ = client.SetReadDeadline(time.Now().Add(timeout))
		buf := make([]byte, 64)
		n, _, err := client.ReadFromUDPAddrPort(buf)
		echoed = err == nil && string(buf[:n]) == "nftcni"
	}
	// Closing the server ends its read at once if nothing arrived.
	server.Close()
	seen = <-peers
	return seen, echoed
}
