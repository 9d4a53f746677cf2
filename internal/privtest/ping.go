package privtest

import (
	"bufio"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"

	"github.com/nftcni/nftcni/netns"
)

// Ping sends ICMP echo requests from inside ns to dst and reports whether
// a reply came back within 3 s (the first requests can be lost while
// neighbour discovery runs, so one is sent every 300 ms). It is the
// "ping the gateway" a user would try first.
func Ping(t testing.TB, ns *netns.NS, dst netip.Addr) bool {
	t.Helper()
	network, proto, typ := "ip4:icmp", 1, icmp.Type(ipv4.ICMPTypeEcho)
	if dst.Is6() {
		network, proto, typ = "ip6:ipv6-icmp", 58, ipv6.ICMPTypeEchoRequest
	}
	var c *icmp.PacketConn
	if err := ns.Do(func() (err error) { c, err = icmp.ListenPacket(network, ""); return err }); err != nil {
		t.Fatalf("ICMP socket in %s: %v", ns.Path(), err)
	}
	defer c.Close()
	id := os.Getpid() & 0xffff
	buf := make([]byte, 1500)
	for seq, deadline := 1, time.Now().Add(3*time.Second); time.Now().Before(deadline); seq++ {
		msg, _ := (&icmp.Message{Type: typ, Body: &icmp.Echo{ID: id, Seq: seq, Data: []byte("nftcni")}}).Marshal(nil)
		if _, err := c.WriteTo(msg, &net.IPAddr{IP: dst.AsSlice()}); err != nil {
			time.Sleep(300 * time.Millisecond)
			continue
		}
		_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		for {
			n, peer, err := c.ReadFrom(buf)
			if err != nil {
				break
			}
			m, err := icmp.ParseMessage(proto, buf[:n])
			if err == nil && (m.Type == ipv4.ICMPTypeEchoReply || m.Type == ipv6.ICMPTypeEchoReply) && peer.String() == dst.String() {
				return true
			}
		}
	}
	t.Logf("no ICMP echo reply from %s (from %s)", dst, ns.Path())
	return false
}

// TCPRoundTrip listens on listen inside namespace to, connects to dial
// from namespace from (port 0 in dial: the listener's port; dial differs
// from listen when a port mapping sits between them), sends a line and
// reads back the client address the server saw. It returns that address,
// the zero AddrPort when no answer came within 3 s: seeing the client's own
// address tells plain forwarding from NAT.
func TCPRoundTrip(t testing.TB, from *netns.NS, dial netip.AddrPort, to *netns.NS, listen netip.AddrPort) netip.AddrPort {
	t.Helper()
	var ln net.Listener
	if err := to.Do(func() (err error) {
		ln, err = net.Listen("tcp", listen.String())
		return err
	}); err != nil {
		t.Fatalf("listening on %s in %s: %v", listen, to.Path(), err)
	}
	// The listener's socket is released only once its Accept has returned:
	// Close alone leaves it bound until the accepting goroutine wakes, and
	// a caller listening on the same port right after would get
	// EADDRINUSE. So wait for that goroutine too.
	served := make(chan struct{})
	defer func() { ln.Close(); <-served }()
	if dial.Port() == 0 {
		dial = netip.AddrPortFrom(dial.Addr(), uint16(ln.Addr().(*net.TCPAddr).Port))
	}
	go func() {
		defer close(served)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(3 * time.Second))
		if line, err := bufio.NewReader(c).ReadString('\n'); err == nil && line == "hello\n" {
			_, _ = c.Write([]byte(c.RemoteAddr().String() + "\n"))
		}
	}()
	var c net.Conn
	if err := from.Do(func() (err error) {
		c, err = net.DialTimeout("tcp", dial.String(), 3*time.Second)
		return err
	}); err != nil {
		t.Logf("TCP to %s from %s: %v", dial, from.Path(), err)
		return netip.AddrPort{}
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := c.Write([]byte("hello\n")); err != nil {
		t.Logf("TCP to %s: %v", dial, err)
		return netip.AddrPort{}
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Logf("TCP to %s: no answer: %v", dial, err)
		return netip.AddrPort{}
	}
	seen, err := netip.ParseAddrPort(strings.TrimSpace(line))
	if err != nil {
		t.Logf("TCP to %s: answer %q: %v", dial, line, err)
		return netip.AddrPort{}
	}
	return netip.AddrPortFrom(seen.Addr().Unmap(), seen.Port())
}
