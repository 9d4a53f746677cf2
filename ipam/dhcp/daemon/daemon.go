// Package daemon is the dhcp daemon ("dhcp daemon"): a long-running root
// process that owns every DHCP lease of the host's containers. The dhcp
// IPAM plugin asks it over a Unix socket (the reference's net/rpc
// protocol, see ../wire.go) to acquire, check and release leases; it runs
// the DHCPv4 client inside the container's network namespace and renews
// each lease in the background for as long as the container lives.
//
// Unlike the reference it persists leases and resumes them after a
// restart, refuses client-ID collisions, never waits on a dead lease,
// implements GC, and bounds every wait.
package daemon

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"sync"
	"time"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/ipam/dhcp"
	"github.com/nftcni/nftcni/ipam/dhcp/internal/gobrpc"
)

// Config is the daemon's configuration (its command line, main.go).
type Config struct {
	// HostPrefix is prepended to every namespace path a plugin sends (and,
	// in Main, to the socket path): for a daemon running in a container
	// with the host's file system mounted there.
	HostPrefix string
	// StateDir holds the persisted leases; empty: keep them in memory only.
	StateDir string
	// Broadcast sets the broadcast flag on DISCOVER and REQUEST.
	Broadcast bool
	// Timeout is the first wait for an answer in one exchange (doubled
	// for each of its three sends).
	Timeout time.Duration
	// ResendMax caps the pause between attempts of a series.
	ResendMax time.Duration
	// ResendTimeout bounds one acquisition or renewal series.
	ResendTimeout time.Duration
	// Logf receives the daemon's log lines (nil: the log package).
	Logf func(format string, args ...any)
}

// Defaults of the reference daemon's flags.
const (
	DefaultTimeout       = 10 * time.Second
	DefaultResendMax     = 62 * time.Second
	DefaultResendTimeout = 208 * time.Second
	DefaultStateDir      = "/var/lib/cni/dhcp"
)

// handshakeTimeout bounds reading a client's CONNECT request.
const handshakeTimeout = 10 * time.Second

// Daemon holds the leases and serves the RPC.
type Daemon struct {
	cfg    Config
	store  *store
	rpc    *gobrpc.Server
	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // lease loops and connections

	mu        sync.Mutex
	leases    map[string]*lease        // by client ID
	busy      map[string]chan struct{} // client IDs with an operation in progress
	listeners map[net.Listener]bool
	conns     map[net.Conn]bool
	closed    bool
}

// New makes a daemon, loads the persisted leases and resumes their
// maintenance (a lease whose interface is gone is dropped by its loop).
func New(cfg Config) (*Daemon, error) {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.ResendMax <= 0 {
		cfg.ResendMax = DefaultResendMax
	}
	if cfg.ResendTimeout <= 0 {
		cfg.ResendTimeout = DefaultResendTimeout
	}
	if cfg.Logf == nil {
		cfg.Logf = log.Printf
	}
	st, err := openStore(cfg.StateDir)
	if err != nil {
		return nil, err
	}
	d := &Daemon{
		cfg:       cfg,
		store:     st,
		rpc:       gobrpc.NewServer(),
		leases:    map[string]*lease{},
		busy:      map[string]chan struct{}{},
		listeners: map[net.Listener]bool{},
		conns:     map[net.Conn]bool{},
	}
	d.ctx, d.cancel = context.WithCancel(context.Background())
	svc := &service{d}
	gobrpc.Handle(d.rpc, dhcp.Service, "Allocate", svc.Allocate)
	gobrpc.Handle(d.rpc, dhcp.Service, "Release", svc.Release)
	gobrpc.Handle(d.rpc, dhcp.Service, "Check", svc.Check)
	gobrpc.Handle(d.rpc, dhcp.Service, "GC", svc.GC)
	for _, r := range st.load(cfg.Logf) {
		cur, err := leaseFromRecord(r)
		if err != nil {
			cfg.Logf("%s: dropping stored lease: %v", r.ClientID, err)
			_ = st.remove(r.ClientID)
			continue
		}
		d.mu.Lock()
		d.start(&lease{d: d, id: r.ClientID, owner: r.Owner, params: r.Params, cur: cur})
		d.mu.Unlock()
		cfg.Logf("%s: resumed lease of %v", r.ClientID, cur.ACK.YourIPAddr)
	}
	return d, nil
}

// start registers l and starts its loop; call with d.mu held. After Close
// the lease is not started (it stays on disk for the next daemon).
func (d *Daemon) start(l *lease) {
	l.wake = make(chan struct{}, 1)
	l.done = make(chan struct{})
	ctx, cancel := context.WithCancel(d.ctx)
	l.cancel = cancel
	d.leases[l.id] = l
	if d.closed {
		cancel()
		close(l.done)
		return
	}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		l.run(ctx)
	}()
}

// Serve accepts plugin connections on l until Close, which also closes l.
// Each connection begins with net/rpc's HTTP CONNECT handshake.
func (d *Daemon) Serve(l net.Listener) error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		l.Close()
		return nil
	}
	d.listeners[l] = true
	d.mu.Unlock()
	for {
		c, err := l.Accept()
		if err != nil {
			d.mu.Lock()
			closed := d.closed
			delete(d.listeners, l)
			d.mu.Unlock()
			if closed {
				return nil
			}
			return fmt.Errorf("accepting RPC connections: %w", err)
		}
		d.mu.Lock()
		if d.closed {
			d.mu.Unlock()
			c.Close()
			continue
		}
		d.conns[c] = true
		d.wg.Add(1)
		d.mu.Unlock()
		go func() {
			defer d.wg.Done()
			d.serveConn(c)
			d.mu.Lock()
			delete(d.conns, c)
			d.mu.Unlock()
		}()
	}
}

// serveConn does what net/rpc's HTTP handler does — answer
// "CONNECT /_goRPC_", then speak gob — without an http.Server, so that
// Close can end every connection.
func (d *Daemon) serveConn(c net.Conn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(handshakeTimeout))
	br := bufio.NewReader(c)
	if err := gobrpc.ServerHandshake(br, c); err != nil {
		return
	}
	_ = c.SetDeadline(time.Time{})
	d.rpc.ServeConn(c, br)
}

// Close stops serving, ends every connection and every lease's
// maintenance, and waits for all of it. Leases are not released: they stay
// on disk for the next daemon (the reference forgets them).
func (d *Daemon) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	var ls []net.Listener
	for l := range d.listeners {
		ls = append(ls, l)
	}
	var cs []net.Conn
	for c := range d.conns {
		cs = append(cs, c)
	}
	d.mu.Unlock()
	d.cancel()
	for _, l := range ls {
		l.Close()
	}
	for _, c := range cs {
		c.Close()
	}
	d.wg.Wait()
	return nil
}

// opTimeout bounds one RPC's work: an acquisition series plus the link
// checks around it.
func (d *Daemon) opTimeout() time.Duration { return d.cfg.ResendTimeout + 30*time.Second }

// lockID serialises operations on one client ID (two ADDs for the same
// container, an ADD racing a DEL). Different IDs never wait for each
// other.
func (d *Daemon) lockID(ctx context.Context, id string) (unlock func(), err error) {
	for {
		d.mu.Lock()
		ch, busy := d.busy[id]
		if !busy {
			ch = make(chan struct{})
			d.busy[id] = ch
			d.mu.Unlock()
			return func() {
				d.mu.Lock()
				delete(d.busy, id)
				d.mu.Unlock()
				close(ch)
			}, nil
		}
		d.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for another operation on %s: %w", id, ctx.Err())
		}
	}
}

func (d *Daemon) lookup(id string) *lease {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.leases[id]
}

// forget removes l from the map (if it is still the entry for its ID).
func (d *Daemon) forget(l *lease) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.leases[l.id] == l {
		delete(d.leases, l.id)
	}
}

// allocate returns the lease of the request's client ID, acquiring one
// if there is none. Call with the ID locked.
func (d *Daemon) allocate(ctx context.Context, r *request) (*cni.Result, error) {
	if l := d.lookup(r.clientID); l != nil {
		// A lease counts while it is maintained and its interface is
		// there; an error other than "gone" is no proof of death.
		held := l.alive() && !isGone(l.holds())
		switch {
		case held && l.owner == r.owner:
			l.poke()
			return buildResult(l.current().ACK, r.priority)
		case held:
			return nil, fmt.Errorf("client ID %q is in use by %s; refusing to share its lease with %s",
				r.clientID, l.owner, r.owner)
		}
		// Dead (interface gone, expired) or about to notice: never wait
		// on it, acquire afresh.
		if l.alive() {
			d.cfg.Logf("%s: dropping the lease of %s, whose interface is gone", r.clientID, l.owner)
		}
		l.stop()
		d.forget(l)
		if err := d.store.remove(l.id); err != nil {
			d.cfg.Logf("%s: %v", l.id, err)
		}
	}
	cur, err := d.acquire(ctx, r.owner, r.params)
	if err != nil {
		return nil, err
	}
	l := &lease{d: d, id: r.clientID, owner: r.owner, params: r.params, cur: cur}
	res, err := buildResult(cur.ACK, r.priority)
	if err == nil {
		err = d.store.save(l.record())
	}
	if err != nil {
		if rerr := d.release(r.owner, r.params, cur.ACK); rerr != nil {
			d.cfg.Logf("%s: releasing after a failed ADD: %v", r.clientID, rerr)
		}
		return nil, err
	}
	d.mu.Lock()
	d.start(l)
	d.mu.Unlock()
	d.cfg.Logf("%s: leased %v", r.clientID, cur.ACK.YourIPAddr)
	return res, nil
}

// releaseLease stops l, sends DHCPRELEASE and forgets it, on disk too.
func (d *Daemon) releaseLease(l *lease) {
	wasAlive := l.alive()
	l.stop()
	d.forget(l)
	if wasAlive {
		l.releaseNow()
	}
	if err := d.store.remove(l.id); err != nil {
		d.cfg.Logf("%s: %v", l.id, err)
	}
}

// service is what the RPC server publishes as "DHCP". The reference's
// methods are Allocate and Release; Check and GC are ours.
type service struct{ d *Daemon }

func (s *service) begin(a *dhcp.Args, full bool) (*request, context.Context, func(), error) {
	r, err := parseRequest(a, full)
	if err != nil {
		return nil, nil, nil, err
	}
	ctx, cancel := context.WithTimeout(s.d.ctx, s.d.opTimeout())
	unlock, err := s.d.lockID(ctx, r.clientID)
	if err != nil {
		cancel()
		return nil, nil, nil, err
	}
	return r, ctx, func() { unlock(); cancel() }, nil
}

// Allocate acquires or reuses the lease of the caller's client ID (ADD,
// and CHECK of a reference plugin).
func (s *service) Allocate(a *dhcp.Args, reply *dhcp.Reply) error {
	r, ctx, done, err := s.begin(a, true)
	if err != nil {
		return err
	}
	defer done()
	res, err := s.d.allocate(ctx, r)
	if err != nil {
		return err
	}
	*reply = *dhcp.FromResult(res)
	return nil
}

// Release stops maintaining the caller's lease and sends DHCPRELEASE. An
// unknown client ID is success; so is a client ID held by another
// attachment (a collision refused at ADD), which is left alone.
func (s *service) Release(a *dhcp.Args, _ *dhcp.Empty) error {
	r, _, done, err := s.begin(a, false)
	if err != nil {
		return err
	}
	defer done()
	l := s.d.lookup(r.clientID)
	if l == nil {
		return nil
	}
	if !l.owner.sameAttachment(r.owner) {
		s.d.cfg.Logf("%s: not releasing for %s: the lease belongs to %s", r.clientID, r.owner, l.owner)
		return nil
	}
	s.d.releaseLease(l)
	return nil
}

// Check succeeds when the caller's lease exists, is maintained and its
// interface is there; it never acquires (the reference's CHECK, an
// Allocate, acquires a new lease when there is none).
func (s *service) Check(a *dhcp.Args, reply *dhcp.Reply) error {
	r, _, done, err := s.begin(a, true)
	if err != nil {
		return err
	}
	defer done()
	l := s.d.lookup(r.clientID)
	switch {
	case l == nil:
		return fmt.Errorf("no DHCP lease for client ID %q", r.clientID)
	case l.owner != r.owner:
		return fmt.Errorf("client ID %q is in use by %s, not %s", r.clientID, l.owner, r.owner)
	case !l.alive():
		return fmt.Errorf("DHCP lease for client ID %q is no longer maintained: %v", r.clientID, l.endReason())
	}
	// Poked first, so that a lease found dead here ends at once.
	l.poke()
	if err := l.holds(); err != nil {
		return err
	}
	res, err := buildResult(l.current().ACK, r.priority)
	if err != nil {
		return err
	}
	*reply = *dhcp.FromResult(res)
	return nil
}

// GC releases the leases of the config's network whose (container,
// interface) is not in the valid-attachments list. Without a list it
// does nothing.
func (s *service) GC(a *dhcp.Args, _ *dhcp.Empty) error {
	nc, err := cni.DecodeNetConf(a.StdinData, "error parsing netconf")
	if err != nil {
		return err
	}
	atts, ok := nc.Attachments()
	if !ok {
		return nil
	}
	valid := map[cni.Attachment]bool{}
	for _, at := range atts {
		valid[at] = true
	}
	s.d.mu.Lock()
	var stale []string
	for id, l := range s.d.leases {
		if l.owner.Network == nc.Name && !valid[cni.Attachment{ContainerID: l.owner.ContainerID, IfName: l.owner.IfName}] {
			stale = append(stale, id)
		}
	}
	s.d.mu.Unlock()
	ctx, cancel := context.WithTimeout(s.d.ctx, s.d.opTimeout())
	defer cancel()
	var errs []error
	for _, id := range stale {
		unlock, err := s.d.lockID(ctx, id)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		// Re-check under the lock: an ADD may have replaced it.
		if l := s.d.lookup(id); l != nil && l.owner.Network == nc.Name &&
			!valid[cni.Attachment{ContainerID: l.owner.ContainerID, IfName: l.owner.IfName}] {
			s.d.cfg.Logf("%s: GC: releasing the lease of %s", id, l.owner)
			s.d.releaseLease(l)
		}
		unlock()
	}
	return errors.Join(errs...)
}
