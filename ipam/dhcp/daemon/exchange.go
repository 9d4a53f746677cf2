package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/nclient4"
	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/netlinkx"
)

// goneError says the lease's namespace or interface no longer exists: the
// container is gone, so there is nothing to renew or release.
type goneError struct{ err error }

func (e *goneError) Error() string { return e.err.Error() }
func (e *goneError) Unwrap() error { return e.err }

func isGone(err error) bool {
	var g *goneError
	return errors.As(err, &g)
}

// openNS opens the namespace at path (host prefix applied by the caller)
// and netlink in it; the handle owns the namespace (h.NS()). A missing
// path, or one that is no longer a namespace (its bind mount was removed),
// is a goneError.
func openNS(path string) (*netlinkx.Handle, error) {
	h, err := netlinkx.OpenPath(path)
	if err == nil {
		return h, nil
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil, &goneError{err}
	}
	var st unix.Statfs_t
	if serr := unix.Statfs(path, &st); serr == nil && st.Type != unix.NSFS_MAGIC && st.Type != unix.PROC_SUPER_MAGIC {
		return nil, &goneError{err}
	}
	return nil, err
}

// linkState checks that the lease's interface still exists and is the one
// the lease was obtained on (same MAC, the DHCP chaddr): a goneError when
// the interface or its namespace no longer exists, or when an interface of
// the same name has replaced it.
func (d *Daemon) linkState(o owner, chaddr net.HardwareAddr) error {
	h, err := openNS(d.cfg.HostPrefix + o.Netns)
	if err != nil {
		return err
	}
	defer h.Close()
	l, err := h.LinkByName(o.IfName)
	if err != nil {
		return lookupError(o.IfName, err)
	}
	if !bytes.Equal(l.MAC, chaddr) {
		return &goneError{fmt.Errorf("interface %q was replaced (MAC %v, the lease is for %v)", o.IfName, l.MAC, chaddr)}
	}
	return nil
}

// lookupError words a failed interface lookup like the reference
// ("error looking up "eth0": Link not found"); a missing link is a
// goneError.
func lookupError(ifname string, err error) error {
	err = fmt.Errorf("error looking up %q: %w", ifname, netlinkx.Cause(err))
	if errors.Is(err, netlinkx.ErrNotFound) {
		return &goneError{err}
	}
	return err
}

// setDown sets the lease's interface down (its lease expired).
func (d *Daemon) setDown(o owner) error {
	h, err := openNS(d.cfg.HostPrefix + o.Netns)
	if err != nil {
		return err
	}
	defer h.Close()
	return h.SetDown(o.IfName)
}

// operUpWait bounds the wait for a freshly set-up interface to carry
// packets.
const operUpWait = 3 * time.Second

// link looks the lease's interface up. With setUp (acquisition, as the
// reference does it) a down interface is set up, and the wait for it to
// carry packets is brief: the exchange's own resends cover anything
// slower.
func (d *Daemon) link(h *netlinkx.Handle, ifname string, setUp bool) (netlinkx.Link, error) {
	l, err := h.LinkByName(ifname)
	if err != nil {
		return l, lookupError(ifname, err)
	}
	if setUp && !l.Up {
		if err := h.SetUp(ifname); err != nil {
			return l, err
		}
		l.OperState = netlinkx.OperDown
	}
	if setUp && l.OperState != netlinkx.OperUp && l.OperState != netlinkx.OperUnknown {
		_, _ = h.WaitOperUp(ifname, min(d.cfg.Timeout, operUpWait), 20*time.Millisecond)
	}
	return l, nil
}

// openClient opens a DHCP client on the lease's interface. The packet
// socket is created on a thread inside the container's namespace, then
// used from anywhere. It is per exchange, never kept between them: an open
// socket holds its namespace alive, and a lease must not keep a dead
// container's namespace (and veth) around.
//
// setUp brings a down interface up (link). src, when valid, is the source
// address of what is sent (DHCPRELEASE must come from the leased address:
// a server's kernel drops unicast from 0.0.0.0 as martian); otherwise
// 0.0.0.0, which only broadcasts may use.
func (d *Daemon) openClient(o owner, setUp bool, src net.IP) (*nclient4.Client, error) {
	h, err := openNS(d.cfg.HostPrefix + o.Netns)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	l, err := d.link(h, o.IfName, setUp)
	if err != nil {
		return nil, err
	}
	var conn net.PacketConn
	err = h.NS().Do(func() error {
		c, err := nclient4.NewRawUDPConn(o.IfName, nclient4.ClientPort)
		if err != nil {
			return err
		}
		conn = c
		if b, ok := c.(*nclient4.BroadcastRawUDPConn); ok && src != nil {
			conn = nclient4.NewBroadcastUDPConn(b.PacketConn, &net.UDPAddr{IP: src, Port: nclient4.ClientPort})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("opening DHCP socket on %q: %w", o.IfName, err)
	}
	c, err := nclient4.NewWithConn(conn, l.MAC,
		nclient4.WithTimeout(d.cfg.Timeout), nclient4.WithRetry(exchangeSends))
	if err != nil {
		conn.Close()
		return nil, err
	}
	return c, nil
}

// exchangeSends is how often one exchange sends its message, the wait
// doubling each time (10, 20, 40 s with the default -timeout).
const exchangeSends = 3

// errNoMoreTries ends an attempt series that ran out of time.
var errNoMoreTries = errors.New("no more tries")

// backoff is the pause after failed attempt n (0-based) of a series:
// 2 s four times, then 8, 16, 32 s ..., doubling until it reaches max;
// each with ±1 s of jitter so that leases do not move in lock step.
func backoff(n int, max time.Duration) time.Duration {
	d := 2 * time.Second
	if n >= 4 {
		d = 8 * time.Second
		for i := 4; i < n && d < max; i++ {
			d *= 2
		}
	}
	return d + time.Duration(rand.Int64N(int64(2*time.Second))) - time.Second
}

// series runs attempt until it succeeds, ctx ends or deadline passes,
// pausing between attempts (backoff). Each attempt gets a context that
// ends at the deadline.
func (d *Daemon) series(ctx context.Context, deadline time.Time, attempt func(context.Context) error) error {
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	for n := 0; ; n++ {
		err := attempt(ctx)
		if err == nil {
			return nil
		}
		if isGone(err) {
			return err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%w: %w", errNoMoreTries, err)
		}
		d.cfg.Logf("%v", err)
		t := time.NewTimer(backoff(n, d.cfg.ResendMax))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w: %w", errNoMoreTries, err)
		}
	}
}

// acquire runs DISCOVER, OFFER, REQUEST, ACK on the lease's interface,
// retrying until -resendtimeout.
func (d *Daemon) acquire(ctx context.Context, o owner, p params) (*nclient4.Lease, error) {
	c, err := d.openClient(o, true, nil)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	mods := p.modifiers()
	if d.cfg.Broadcast {
		mods = append(mods, dhcpv4.WithBroadcast(true))
	}
	var lease *nclient4.Lease
	err = d.series(ctx, time.Now().Add(d.cfg.ResendTimeout), func(ctx context.Context) error {
		l, err := c.Request(ctx, mods...)
		if err != nil {
			return fmt.Errorf("%s: acquiring a lease: %w", clientIDOf(o), err)
		}
		lease = l
		return nil
	})
	return lease, err
}

// renew sends REQUESTs with ciaddr set (RENEWING) until deadline.
func (d *Daemon) renew(ctx context.Context, o owner, p params, cur *nclient4.Lease, deadline time.Time) (*nclient4.Lease, error) {
	c, err := d.openClient(o, false, nil)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	var lease *nclient4.Lease
	err = d.series(ctx, deadline, func(ctx context.Context) error {
		l, err := c.Renew(ctx, cur, p.modifiers()...)
		if err != nil {
			return fmt.Errorf("%s: renewing: %w", clientIDOf(o), err)
		}
		lease = l
		return nil
	})
	return lease, err
}

// release sends one DHCPRELEASE for the lease, from the leased address
// to the server that granted it. It is a single datagram with no answer:
// if it is lost the lease simply expires on the server.
func (d *Daemon) release(o owner, p params, ack *dhcpv4.DHCPv4) error {
	c, err := d.openClient(o, false, ack.YourIPAddr)
	if err != nil {
		return err
	}
	defer c.Close()
	return c.Release(&nclient4.Lease{ACK: ack},
		dhcpv4.WithOption(dhcpv4.OptGeneric(dhcpv4.OptionClientIdentifier, p.ClientID)))
}
