package daemon

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/ipam/dhcp"
)

// binding is what a server last granted for one lease: immutable, a
// renewal makes a new one. binding4 (DHCPv4) and binding6 (DHCPv6).
type binding interface {
	// addr is the leased address.
	addr() netip.Addr
	// hwAddr is the MAC of the interface the lease was obtained on: an
	// interface of the same name with another MAC is not the lease's.
	hwAddr() net.HardwareAddr
	// timers derives renewal (T1), rebinding (T2) and expiry, capped so
	// that T1 ≤ T2 ≤ expiry even when a server sends odd values.
	timers() (t1, t2, exp time.Time)
	// result is the lease's part of an ADD result.
	result(s shape) (*cni.Result, error)
	// save fills the record's fields of this family.
	save(r *record)
}

// proto is one family's DHCP client (dhcp4, dhcp6): the exchanges a
// lease's life is made of.
type proto interface {
	// acquire obtains a new lease, retrying until -resendtimeout.
	acquire(ctx context.Context, o owner, p params) (binding, error)
	// renew extends b with the server that granted it, until deadline.
	renew(ctx context.Context, o owner, p params, b binding, deadline time.Time) (binding, error)
	// rebind extends b with any server, until deadline.
	rebind(ctx context.Context, o owner, p params, b binding, deadline time.Time) (binding, error)
	// release gives b back to its server.
	release(o owner, p params, b binding) error
	// expire stops the interface from using b, which nobody renewed.
	expire(o owner, b binding) error
}

// key names a lease: the attachment's client ID and the family. An
// attachment has at most one lease per family.
type key struct {
	id  string
	fam dhcp.Family
}

func (k key) String() string {
	if k.fam == dhcp.IPv6 {
		return k.id + " (DHCPv6)"
	}
	return k.id
}

// lease is one DHCP lease and its maintenance goroutine: it renews at T1,
// rebinds after T2, makes the interface stop using the address when the
// lease expires (proto.expire), and ends quietly when the interface or its
// namespace disappears. Nothing here keeps the container's namespace open
// between exchanges.
type lease struct {
	d      *Daemon
	key    key
	owner  owner
	params params // those of key.fam (params.of)

	cur   binding // guarded by d.mu
	ended error   // why maintenance ended on its own; guarded by d.mu

	wake   chan struct{} // buffered: a pending check is never lost nor blocks
	cancel context.CancelFunc
	done   chan struct{} // closed when the goroutine has returned
}

func (l *lease) proto() proto { return l.d.proto(l.key.fam) }

// holds checks that the lease's interface is still there (linkState).
func (l *lease) holds() error {
	return l.d.linkState(l.owner, l.current().hwAddr())
}

func (l *lease) current() binding {
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
			l.d.cfg.Logf("%s: checking the interface: %v", l.key, err)
		}
		cur := l.current()
		t1, t2, exp := cur.timers()
		now := time.Now()
		var nl binding
		var err error
		switch {
		case now.Before(t1): // bound
			if !l.sleep(ctx, t1) {
				return
			}
			continue
		case now.Before(t2): // renewing, until T2 at the latest
			nl, err = l.proto().renew(ctx, l.owner, l.params, cur, earliest(t2, now.Add(l.d.cfg.ResendTimeout)))
		default: // rebinding, until expiry (a full series once expired)
			deadline := now.Add(l.d.cfg.ResendTimeout)
			if exp.After(now) {
				deadline = earliest(exp, deadline)
			}
			nl, err = l.rebind(ctx, cur, deadline)
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
				if derr := l.proto().expire(l.owner, cur); derr != nil {
					l.d.cfg.Logf("%s: %v", l.key, derr)
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

// rebind asks any server to extend the lease, bounded by deadline.
func (l *lease) rebind(ctx context.Context, cur binding, deadline time.Time) (binding, error) {
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	nl, err := l.proto().rebind(ctx, l.owner, l.params, cur, deadline)
	if err != nil {
		return nil, fmt.Errorf("%s: rebinding: %w", l.key, err)
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
func (l *lease) update(nl binding) {
	l.d.mu.Lock()
	old := l.cur
	l.cur = nl
	l.d.mu.Unlock()
	if old.addr() != nl.addr() {
		l.d.cfg.Logf("%s: the server moved the lease from %v to %v", l.key, old.addr(), nl.addr())
	}
	if err := l.d.store.save(l.record()); err != nil {
		l.d.cfg.Logf("%s: %v", l.key, err)
	}
}

// end records why maintenance ended on its own and forgets the lease on
// disk; the entry stays in memory, dead, until ADD, DEL, CHECK or GC
// meets it.
func (l *lease) end(why error) {
	l.d.cfg.Logf("%s: stopped maintaining the lease: %v", l.key, why)
	l.d.mu.Lock()
	l.ended = why
	l.d.mu.Unlock()
	if err := l.d.store.remove(l.key); err != nil {
		l.d.cfg.Logf("%s: %v", l.key, err)
	}
}

// releaseNow gives the lease back unless it has already expired. Call
// after stop.
func (l *lease) releaseNow() {
	cur := l.current()
	if _, _, exp := cur.timers(); !time.Now().Before(exp) {
		return
	}
	if err := l.proto().release(l.owner, l.params, cur); err != nil {
		l.d.cfg.Logf("%s: releasing: %v", l.key, err)
		return
	}
	l.d.cfg.Logf("%s: released %v", l.key, cur.addr())
}

// record is the lease's persisted form.
func (l *lease) record() *record {
	r := &record{Version: recordVersion, ClientID: l.key.id, Owner: l.owner, Params: l.params}
	if l.key.fam != dhcp.IPv4 {
		r.Family = l.key.fam
	}
	l.current().save(r)
	return r
}

// bindingFromRecord rebuilds a lease read from disk.
func bindingFromRecord(r *record) (binding, error) {
	switch r.family() {
	case dhcp.IPv4:
		return binding4FromRecord(r)
	case dhcp.IPv6:
		return binding6FromRecord(r)
	}
	return nil, fmt.Errorf("unknown family %q", r.Family)
}
