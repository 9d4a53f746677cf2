package bandwidth

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nftcni/nftcni/internal/plugintest"
	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/netns"
)

// TestRateLimits measures the limits with packets: a TCP bulk transfer
// between the container and a peer namespace routed through the host, in
// each direction, must run within ±20% of the configured rate. The two
// directions get different rates, so each is seen to use its own. The
// rates are modest (a few Mbit/s) so a loaded two-core machine sustains
// them; the goodput is TCP payload, which is about 96% of what TBF counts
// (Ethernet, IP and TCP headers of 1500-byte frames).
func TestRateLimits(t *testing.T) {
	if testing.Short() {
		t.Skip("measures for about 10 s")
	}
	const (
		ingressRate = 8000000 // bits/s, towards the container
		egressRate  = 4000000 // bits/s, out of the container
		burst       = 524288  // bits (64 KiB) each
		tolerance   = 0.20
	)
	e := newEnv(t)
	peer := privtest.NewNS(t)
	privtest.Wire(t, e.th.NS, "up0", netip.MustParsePrefix("192.0.2.1/24"), peer, "down0", netip.MustParsePrefix("192.0.2.2/24"))
	hp := privtest.Handle(t, peer)
	down, err := hp.LinkByName("down0")
	plugintest.Must(t, err)
	plugintest.Must(t, hp.AddRoute(netlinkx.Route{Dst: netip.MustParsePrefix("10.1.1.0/24"), Gw: netip.MustParseAddr("192.0.2.1"), LinkIndex: down.Index}))

	c := e.plumb(nil, "rate", "1.0.0", 5)
	e.th.OK(c.call("ADD", conf("1.0.0", fmt.Sprintf(`,"ingressRate":%d,"ingressBurst":%d,"egressRate":%d,"egressBurst":%d`,
		ingressRate, burst, egressRate, burst))))
	privtest.WaitOperUp(t, e.th.H, c.veth.Name)

	for _, tt := range []struct {
		name     string
		from, to *netns.NS
		dst      string
		rate     float64
	}{
		{"ingress (peer to container)", peer, c.ns, "10.1.1.5", ingressRate},
		{"egress (container to peer)", c.ns, peer, "192.0.2.2", egressRate},
	} {
		got := goodput(t, tt.from, tt.to, netip.MustParseAddr(tt.dst), time.Second, 3*time.Second)
		dev := got/tt.rate - 1
		t.Logf("%s: configured %.2f Mbit/s, measured %.2f Mbit/s (%+.1f%%)", tt.name, tt.rate/1e6, got/1e6, dev*100)
		if dev < -tolerance || dev > tolerance {
			t.Errorf("%s: measured %.2f Mbit/s, want %.2f ± %.0f%%", tt.name, got/1e6, tt.rate/1e6, tolerance*100)
		}
	}
}

// goodput runs a TCP bulk transfer from a socket in `from` to a server on
// dst in `to`, and returns the payload rate the server received, in
// bits/s, over window after warm (counted from the first byte): the
// initial burst and the queue filling up fall into the warm-up.
func goodput(t *testing.T, from, to *netns.NS, dst netip.Addr, warm, window time.Duration) float64 {
	t.Helper()
	var ln net.Listener
	plugintest.Must(t, to.Do(func() (err error) {
		ln, err = net.Listen("tcp", netip.AddrPortFrom(dst, 0).String())
		return err
	}))
	defer ln.Close()

	var received atomic.Int64
	first := make(chan struct{})
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			close(first)
			return
		}
		defer conn.Close()
		buf := make([]byte, 64<<10)
		once := false
		for {
			n, err := conn.Read(buf)
			received.Add(int64(n))
			if n > 0 && !once {
				once = true
				close(first)
			}
			if err != nil {
				if !once {
					close(first)
				}
				return
			}
		}
	}()

	var conn net.Conn
	plugintest.Must(t, from.Do(func() (err error) {
		conn, err = net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
		return err
	}))
	sent := make(chan error, 1)
	go func() {
		buf := make([]byte, 64<<10)
		for {
			if _, err := conn.Write(buf); err != nil {
				sent <- err
				return
			}
		}
	}()
	defer func() {
		conn.Close()
		if err := <-sent; err != nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, io.EOF) {
			t.Logf("sender: %v", err)
		}
	}()

	select {
	case <-first:
	case <-time.After(5 * time.Second):
		t.Fatalf("no data from %s to %s within 5 s", from.Path(), dst)
	}
	time.Sleep(warm)
	b0, t0 := received.Load(), time.Now()
	time.Sleep(window)
	b1, t1 := received.Load(), time.Now()
	return float64(b1-b0) * 8 / t1.Sub(t0).Seconds()
}
