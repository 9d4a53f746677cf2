package daemon

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/nclient4"
)

// Timer defaults when the ACK lacks the options.
const (
	defaultLeaseTime = time.Hour
	// T2 at 85 % of the lease, the reference's choice (the RFC says 87.5).
	rebindPercent = 85
	renewPercent  = 50
)

// lease is one DHCP lease and its maintenance goroutine: it renews at T1,
// rebinds (a new DISCOVER) after T2, sets the interface down when the
// lease expires, and ends quietly when the interface or its namespace
// disappears. Nothing here keeps the container's namespace open between
// exchanges.
type lease struct {
	d      *Daemon
	id     string // client ID
	owner  owner
	params params

	cur   *nclient4.Lease // guarded by d.mu
	ended error           // why maintenance ended on its own; guarded by d.mu

	wake   chan struct{} // buffered: a pending check is never lost nor blocks
	cancel context.CancelFunc
	done   chan struct{} // closed when the goroutine has returned
}

// timers derives expiry, T2 and T1 from an ACK, capped so that
// T1 ≤ T2 ≤ expiry even when a server sends odd values.
func timers(l *nclient4.Lease) (t1, t2, exp time.Time) {
	ack := l.ACK
	lt := ack.IPAddressLeaseTime(defaultLeaseTime)
	exp = l.CreationTime.Add(lt)
	t2 = l.CreationTime.Add(ack.IPAddressRebindingTime(lt * rebindPercent / 100))
	t1 = l.CreationTime.Add(ack.IPAddressRenewalTime(lt * renewPercent / 100))
	if t2.After(exp) {
		t2 = exp
	}
	if t1.After(t2) {
		t1 = t2
	}
	return t1, t2, exp
}

// holds checks that the lease's interface is still there (linkState).
func (l *lease) holds() error {
	return l.d.linkState(l.owner, l.current().ACK.ClientHWAddr)
}

func (l *lease) current() *nclient4.Lease {
	l.d.mu.Lock()
	defer l.d.mu.Unlock()
	return l.cur
}

// alive reports whether maintenance still runs.
func (l *lease) alive() bool {
	select {
	case <-l.done:
		return false
	default:
		return true
	}
}

// endReason says why maintenance ended (nil: stopped by us or running).
func (l *lease) endReason() error {
	l.d.mu.Lock()
	defer l.d.mu.Unlock()
	return l.ended
}

// poke makes the loop re-check the interface at once.
func (l *lease) poke() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// stop ends maintenance without releasing and waits for it.
func (l *lease) stop() {
	l.cancel()
	<-l.done
}

// run is the maintenance loop.
func (l *lease) run(ctx context.Context) {
	defer close(l.done)
	for {
		if err := l.checkLink(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			if isGone(err) {
				l.end(fmt.Errorf("interface gone: %w", err))
				return
			}
			l.d.cfg.Logf("%s: checking the interface: %v", l.id, err)
		}
		cur := l.current()
		t1, t2, exp := timers(cur)
		now := time.Now()
		var nl *nclient4.Lease
		var err error
		switch {
		case now.Before(t1): // bound
			if !l.sleep(ctx, t1) {
				return
			}
			continue
		case now.Before(t2): // renewing, until T2 at the latest
			nl, err = l.d.renew(ctx, l.owner, l.params, cur, earliest(t2, now.Add(l.d.cfg.ResendTimeout)))
		default: // rebinding, until expiry (a full series once expired)
			deadline := now.Add(l.d.cfg.ResendTimeout)
			if exp.After(now) {
				deadline = earliest(exp, deadline)
			}
			nl, err = l.rebind(ctx, deadline)
		}
		switch {
		case ctx.Err() != nil:
			return
		case err == nil:
			l.update(nl)
			if !l.pause(ctx) {
				return
			}
		case isGone(err):
			l.end(fmt.Errorf("interface gone: %w", err))
			return
		default:
			l.d.cfg.Logf("%v", err)
			if !time.Now().Before(exp) {
				if derr := l.d.setDown(l.owner); derr != nil {
					l.d.cfg.Logf("%s: setting %s down: %v", l.id, l.owner.IfName, derr)
				}
				l.end(fmt.Errorf("lease expired at %s: %w", exp.Format(time.RFC3339), err))
				return
			}
			// A failure before any exchange (no socket, say) must not
			// turn into a busy loop.
			if !l.pause(ctx) {
				return
			}
		}
	}
}

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// rebind runs a complete DISCOVER/REQUEST again (REBINDING, as the
// reference does it), bounded by deadline.
func (l *lease) rebind(ctx context.Context, deadline time.Time) (*nclient4.Lease, error) {
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	nl, err := l.d.acquire(ctx, l.owner, l.params)
	if err != nil {
		return nil, fmt.Errorf("%s: rebinding: %w", l.id, err)
	}
	return nl, nil
}

// minGap is the least time between two exchange series of a lease: a
// server sending T1 = 0, a lease shorter than its round trip, or a
// failure before anything was sent must not make us loop.
const minGap = time.Second

// pause waits minGap; false when ctx ended.
func (l *lease) pause(ctx context.Context) bool {
	return l.sleep(ctx, time.Now().Add(minGap))
}

// sleep waits until t; a poke cuts it short. It reports false when ctx
// ended.
func (l *lease) sleep(ctx context.Context, t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-l.wake:
	case <-ctx.Done():
		return false
	}
	return true
}

// checkLink confirms the interface still exists. Transient errors are
// retried after 1, 2, 4, 8, 16, 16 ... s, for at most -resendtimeout.
func (l *lease) checkLink(ctx context.Context) error {
	deadline := time.Now().Add(l.d.cfg.ResendTimeout)
	wait := time.Second
	for {
		err := l.holds()
		if err == nil || isGone(err) || !time.Now().Add(wait).Before(deadline) {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
		wait = min(2*wait, 16*time.Second)
	}
}

// update installs a renewed or rebound lease and persists it.
func (l *lease) update(nl *nclient4.Lease) {
	l.d.mu.Lock()
	old := l.cur
	l.cur = nl
	l.d.mu.Unlock()
	if !old.ACK.YourIPAddr.Equal(nl.ACK.YourIPAddr) {
		l.d.cfg.Logf("%s: the server moved the lease from %v to %v", l.id, old.ACK.YourIPAddr, nl.ACK.YourIPAddr)
	}
	if err := l.d.store.save(l.record()); err != nil {
		l.d.cfg.Logf("%s: %v", l.id, err)
	}
}

// end records why maintenance ended on its own and forgets the lease on
// disk; the entry stays in memory, dead, until ADD, DEL, CHECK or GC
// meets it.
func (l *lease) end(why error) {
	l.d.cfg.Logf("%s: stopped maintaining the lease: %v", l.id, why)
	l.d.mu.Lock()
	l.ended = why
	l.d.mu.Unlock()
	if err := l.d.store.remove(l.id); err != nil {
		l.d.cfg.Logf("%s: %v", l.id, err)
	}
}

// releaseNow sends DHCPRELEASE unless the lease has already expired.
// Call after stop.
func (l *lease) releaseNow() {
	cur := l.current()
	if _, _, exp := timers(cur); !time.Now().Before(exp) {
		return
	}
	if err := l.d.release(l.owner, l.params, cur.ACK); err != nil {
		l.d.cfg.Logf("%s: sending DHCPRELEASE: %v", l.id, err)
		return
	}
	l.d.cfg.Logf("%s: released %v", l.id, cur.ACK.YourIPAddr)
}

// record is the lease's persisted form.
func (l *lease) record() *record {
	cur := l.current()
	return &record{
		Version:  recordVersion,
		ClientID: l.id,
		Owner:    l.owner,
		Params:   l.params,
		Offer:    cur.Offer.ToBytes(),
		ACK:      cur.ACK.ToBytes(),
		AckedAt:  cur.CreationTime,
	}
}

// leaseFromRecord rebuilds a lease read from disk.
func leaseFromRecord(r *record) (*nclient4.Lease, error) {
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
	return &nclient4.Lease{Offer: offer, ACK: ack, CreationTime: r.AckedAt}, nil
}
