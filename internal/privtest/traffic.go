package privtest

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/nftcni/nftcni/netns"
)

// listenIn opens a socket inside ns; the socket stays in that namespace
// whichever thread uses it afterwards.
func listenIn(t testing.TB, ns *netns.NS, network, addr string) net.PacketConn {
	t.Helper()
	var pc net.PacketConn
	err := ns.Do(func() (err error) {
		pc, err = net.ListenPacket(network, addr)
		return err
	})
	if err != nil {
		t.Fatalf("listening on %s in %s: %v", addr, ns.Path(), err)
	}
	return pc
}

// UDPRoundTrip sends a datagram from a socket in `from` to dst (an address
// owned by a socket in `to`) and waits for the echo. It reports whether a
// round trip completed within 1.5 s: the datagram is sent up to three times,
// 500 ms apart, because the first one can be lost while neighbour discovery
// runs on a loaded machine. It proves that packets flow both ways between
// the two namespaces.
func UDPRoundTrip(t testing.TB, from, to *netns.NS, dst netip.Addr) bool {
	t.Helper()
	server := listenIn(t, to, "udp", netip.AddrPortFrom(dst, 0).String())
	defer server.Close()
	go func() {
		buf := make([]byte, 64)
		for {
			n, peer, err := server.ReadFrom(buf)
			if err != nil {
				return // closed
			}
			server.WriteTo(buf[:n], peer)
		}
	}()
	var client net.Conn
	err := from.Do(func() (err error) {
		client, err = net.Dial("udp", server.LocalAddr().String())
		return err
	})
	if err != nil {
		t.Logf("dialing %s from %s: %v", server.LocalAddr(), from.Path(), err)
		return false
	}
	defer client.Close()
	buf := make([]byte, 64)
	for attempt := 0; attempt < 3; attempt++ {
		if _, err = client.Write([]byte("nftcni")); err != nil {
			time.Sleep(500 * time.Millisecond) // e.g. ECONNREFUSED from an earlier ICMP error
			continue
		}
		client.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		var n int
		if n, err = client.Read(buf); err == nil && string(buf[:n]) == "nftcni" {
			return true
		}
	}
	t.Logf("no echo from %s: %v", server.LocalAddr(), err)
	return false
}

// Trip is a UDP round trip a test expects to work: from a socket in From
// to address Dst, served in To.
type Trip struct {
	Name     string
	From, To *netns.NS
	Dst      string
}

// RoundTrips fails the test for every trip without a UDP round trip
// (UDPRoundTrip).
func RoundTrips(t testing.TB, trips []Trip) {
	t.Helper()
	for _, tt := range trips {
		if !UDPRoundTrip(t, tt.From, tt.To, netip.MustParseAddr(tt.Dst)) {
			t.Errorf("%s: no UDP round trip", tt.Name)
		}
	}
}
