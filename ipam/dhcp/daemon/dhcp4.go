package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/nclient4"

	"github.com/nftcni/nftcni/cni"
)

// DHCPv4 timer defaults when the ACK lacks the options.
const (
	defaultLeaseTime = time.Hour
	// T2 at 85 % of the lease, the reference's choice (the RFC says 87.5).
	rebindPercent = 85
	renewPercent  = 50
)

// binding4 is a DHCPv4 lease: the server's OFFER and ACK.
type binding4 struct{ *nclient4.Lease }

func (b binding4) addr() netip.Addr {
	a, _ := addr4(b.ACK.YourIPAddr)
	return a
}

func (b binding4) hwAddr() net.HardwareAddr { return b.ACK.ClientHWAddr }

// timers: expiry = lease time (option 51, default 1 h), T2 = option 59 or
// 85 % of it, T1 = option 58 or 50 %.
func (b binding4) timers() (t1, t2, exp time.Time) {
	ack := b.ACK
	lt := ack.IPAddressLeaseTime(defaultLeaseTime)
	exp = b.CreationTime.Add(lt)
	t2 = b.CreationTime.Add(ack.IPAddressRebindingTime(lt * rebindPercent / 100))
	t1 = b.CreationTime.Add(ack.IPAddressRenewalTime(lt * renewPercent / 100))
	return capTimers(t1, t2, exp)
}

// capTimers orders T1 ≤ T2 ≤ expiry.
func capTimers(t1, t2, exp time.Time) (time.Time, time.Time, time.Time) {
	if t2.After(exp) {
		t2 = exp
	}
	if t1.After(t2) {
		t1 = t2
	}
	return t1, t2, exp
}

func (b binding4) result(s shape) (*cni.Result, error) { return buildResult(b.ACK, s.priority) }

func (b binding4) save(r *record) {
	r.Offer = b.Offer.ToBytes()
	r.ACK = b.ACK.ToBytes()
	r.AckedAt = b.CreationTime
}

// binding4FromRecord decodes a stored DHCPv4 lease.
func binding4FromRecord(r *record) (binding, error) {
	offer, err := dhcpv4.FromBytes(r.Offer)
	if err != nil {
		return nil, fmt.Errorf("decoding stored OFFER: %w", err)
	}
	ack, err := dhcpv4.FromBytes(r.ACK)
	if err != nil {
		return nil, fmt.Errorf("decoding stored ACK: %w", err)
	}
	if ack.MessageType() != dhcpv4.MessageTypeAck {
		return nil, errors.New("stored ACK is not a DHCPACK")
	}
	return binding4{&nclient4.Lease{Offer: offer, ACK: ack, CreationTime: r.AckedAt}}, nil
}

// dhcp4 is the DHCPv4 client (exchange.go).
type dhcp4 struct{ d *Daemon }

func (c dhcp4) acquire(ctx context.Context, o owner, p params) (binding, error) {
	l, err := c.d.acquire(ctx, o, p)
	if err != nil {
		return nil, err
	}
	return binding4{l}, nil
}

func (c dhcp4) renew(ctx context.Context, o owner, p params, b binding, deadline time.Time) (binding, error) {
	l, err := c.d.renew(ctx, o, p, b.(binding4).Lease, deadline)
	if err != nil {
		return nil, err
	}
	return binding4{l}, nil
}

// rebind runs a complete DISCOVER/REQUEST again (REBINDING, as the
// reference does it).
func (c dhcp4) rebind(ctx context.Context, o owner, p params, _ binding, _ time.Time) (binding, error) {
	return c.acquire(ctx, o, p)
}

func (c dhcp4) release(o owner, p params, b binding) error {
	return c.d.release(o, p, b.(binding4).ACK)
}

// expire sets the interface down, as the reference does.
func (c dhcp4) expire(o owner, _ binding) error {
	if err := c.d.setDown(o); err != nil {
		return fmt.Errorf("setting %s down: %w", o.IfName, err)
	}
	return nil
}
