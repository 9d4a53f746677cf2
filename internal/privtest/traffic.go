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
// owned by a socket in `to`) and waits for the echo. It reports whether the
// round trip completed within a second; it proves that packets flow both
// ways between the two namespaces.
func UDPRoundTrip(t testing.TB, from, to *netns.NS, dst netip.Addr) bool {
	t.Helper()
	server := listenIn(t, to, "udp", netip.AddrPortFrom(dst, 0).String())
	defer server.Close()
	go func() {
		buf := make([]byte, 64)
		n, peer, err := server.ReadFrom(buf)
		if err == nil {
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
	client.SetDeadline(time.Now().Add(time.Second))
	if _, err := client.Write([]byte("nftcni")); err != nil {
		t.Logf("sending to %s: %v", server.LocalAddr(), err)
		return false
	}
	buf := make([]byte, 64)
	n, err := client.Read(buf)
	if err != nil || string(buf[:n]) != "nftcni" {
		t.Logf("no echo from %s: %v", server.LocalAddr(), err)
		return false
	}
	return true
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
