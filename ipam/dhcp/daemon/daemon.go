// Package daemon is the dhcp daemon ("dhcp daemon"): a long-running root
// process that owns every DHCP lease of the host's containers. The dhcp
// IPAM plugin asks it over a Unix socket (the reference's net/rpc
// protocol, see ../wire.go) to acquire, check and release leases; it runs
// the DHCPv4 and DHCPv6 clients inside the container's network namespace
// and renews each lease in the background for as long as the container
// lives. An attachment has a lease per family its config lists
// (ipam.ipFamilies), each maintained on its own.
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
	"github.com/nftcni/nftcni/ipam/dhcp/gorpc"
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
	rpc    *gorpc.Server
	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // lease loops and connections

	mu        sync.Mutex
	leases    map[key]*lease
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
		rpc:       gorpc.NewServer(),
		leases:    map[key]*lease{},
		busy:      map[string]chan struct{}{},
		listeners: map[net.Listener]bool{},
		conns:     map[net.Conn]bool{},
	}
	d.ctx, d.cancel = context.WithCancel(context.Background())
	s := &service{d}
	d.rpc.Register(dhcp.MethodAllocate, gorpc.Func(s.Allocate))
	d.rpc.Register(dhcp.MethodRelease, gorpc.Func(s.Release))
	d.rpc.Register(dhcp.MethodCheck, gorpc.Func(s.Check))
	d.rpc.Register(dhcp.MethodGC, gorpc.Func(s.GC))
	for _, r := range st.load(cfg.Logf) {
		k := r.key()
		cur, err := bindingFromRecord(r)
		if err != nil {
			cfg.Logf("%s: dropping stored lease: %v", k, err)
			_ = st.remove(k)
			continue
		}
		d.mu.Lock()
		d.start(&lease{d: d, key: k, owner: r.Owner, params: r.Params, cur: cur})
		d.mu.Unlock()
		cfg.Logf("%s: resumed lease of %v", k, cur.addr())
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
	d.leases[l.key] = l
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
// "CONNECT /_goRPC_", then serve the RPC stream — without an http.Server,
// so that Close can end every connection.
func (d *Daemon) serveConn(c net.Conn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(handshakeTimeout))
	br := bufio.NewReader(c)
	if !gorpc.ReadConnect(br, c) {
		return
	}
	_ = c.SetDeadline(time.Time{})
	d.rpc.ServeConn(br, c, c)
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

func (d *Daemon) lookup(k key) *lease {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.leases[k]
}

// forget removes l from the map (if it is still the entry for its key).
func (d *Daemon) forget(l *lease) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.leases[l.key] == l {
		delete(d.leases, l.key)
	}
}

// proto is the client of a family.
func (d *Daemon) proto(f dhcp.Family) proto {
	if f == dhcp.IPv6 {
		return dhcp6{d}
	}
	return dhcp4{d}
}

// allFamilies are the families Release and GC look at, whatever the
// config says now.
var allFamilies = [...]dhcp.Family{dhcp.IPv4, dhcp.IPv6}

// kind names a family's leases in messages ("no DHCP lease ...", as the
// DHCPv4-only daemon said it).
func kind(f dhcp.Family) string {
	if f == dhcp.IPv6 {
		return "DHCPv6"
	}
	return "DHCP"
}

// allocate returns the leases of the request's families as one result,
// acquiring those it lacks — in parallel, so that a dual-stack ADD waits
// for the slower exchange, not for both. Call with the client ID locked.
// When one family fails, the leases this call acquired are released
// again: a failed ADD leaves nothing behind. The error is the first
// family's that failed; another's is logged.
func (d *Daemon) allocate(ctx context.Context, r *request) (*cni.Result, error) {
	n := len(r.families)
	parts, fresh, errs := make([]*cni.Result, n), make([]*lease, n), make([]error, n)
	var wg sync.WaitGroup
	for i, fam := range r.families {
		wg.Add(1)
		go func() {
			defer wg.Done()
			parts[i], fresh[i], errs[i] = d.allocateOne(ctx, r, fam)
		}()
	}
	wg.Wait()
	var first error
	for i, err := range errs {
		switch {
		case err == nil:
		case first == nil:
			first = err
		default:
			d.cfg.Logf("%s: %v", key{id: r.clientID, fam: r.families[i]}, err)
		}
	}
	if first != nil {
		for _, l := range fresh {
			if l != nil {
				d.releaseLease(l)
			}
		}
		return nil, first
	}
	return mergeResults(parts), nil
}

// allocateOne returns the lease of one family and its result, acquiring
// a lease if there is none (then returned as fresh). Call with the client
// ID locked.
func (d *Daemon) allocateOne(ctx context.Context, r *request, fam dhcp.Family) (res *cni.Result, fresh *lease, err error) {
	k := key{id: r.clientID, fam: fam}
	if l := d.lookup(k); l != nil {
		// A lease counts while it is maintained and its interface is
		// there; an error other than "gone" is no proof of death.
		held := l.alive() && !isGone(l.holds())
		switch {
		case held && l.owner == r.owner:
			l.poke()
			res, err := l.current().result(r.shape)
			return res, nil, err
		case held:
			return nil, nil, fmt.Errorf("client ID %q is in use by %s; refusing to share its lease with %s",
				r.clientID, l.owner, r.owner)
		}
		// Dead (interface gone, expired) or about to notice: never wait
		// on it, acquire afresh.
		if l.alive() {
			d.cfg.Logf("%s: dropping the lease of %s, whose interface is gone", k, l.owner)
		}
		l.stop()
		d.forget(l)
		if err := d.store.remove(k); err != nil {
			d.cfg.Logf("%s: %v", k, err)
		}
	}
	p, c := r.params.of(fam), d.proto(fam)
	cur, err := c.acquire(ctx, r.owner, p)
	if err != nil {
		return nil, nil, err
	}
	l := &lease{d: d, key: k, owner: r.owner, params: p, cur: cur}
	res, err = cur.result(r.shape)
	if err == nil {
		err = d.store.save(l.record())
	}
	if err != nil {
		if rerr := c.release(r.owner, p, cur); rerr != nil {
			d.cfg.Logf("%s: releasing after a failed ADD: %v", k, rerr)
		}
		return nil, nil, err
	}
	d.mu.Lock()
	d.start(l)
	d.mu.Unlock()
	d.cfg.Logf("%s: leased %v", k, cur.addr())
	return res, l, nil
}

// releaseLease stops l, gives the lease back and forgets it, on disk too.
func (d *Daemon) releaseLease(l *lease) {
	wasAlive := l.alive()
	l.stop()
	d.forget(l)
	if wasAlive {
		l.releaseNow()
	}
	if err := d.store.remove(l.key); err != nil {
		d.cfg.Logf("%s: %v", l.key, err)
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

// Release stops maintaining the caller's leases (every family's) and
// gives them back. An unknown client ID is success; so is a client ID held
// by another attachment (a collision refused at ADD), which is left alone.
func (s *service) Release(a *dhcp.Args, _ *dhcp.Empty) error {
	r, _, done, err := s.begin(a, false)
	if err != nil {
		return err
	}
	defer done()
	for _, fam := range allFamilies {
		l := s.d.lookup(key{id: r.clientID, fam: fam})
		if l == nil {
			continue
		}
		if !l.owner.sameAttachment(r.owner) {
			s.d.cfg.Logf("%s: not releasing for %s: the lease belongs to %s", l.key, r.owner, l.owner)
			continue
		}
		s.d.releaseLease(l)
	}
	return nil
}

// Check succeeds when the caller has a lease of each of the config's
// families, maintained, and its interface is there; it never acquires
// (the reference's CHECK, an Allocate, acquires a new lease when there is
// none).
func (s *service) Check(a *dhcp.Args, reply *dhcp.Reply) error {
	r, _, done, err := s.begin(a, true)
	if err != nil {
		return err
	}
	defer done()
	var parts []*cni.Result
	for _, fam := range r.families {
		l := s.d.lookup(key{id: r.clientID, fam: fam})
		switch {
		case l == nil:
			return fmt.Errorf("no %s lease for client ID %q", kind(fam), r.clientID)
		case l.owner != r.owner:
			return fmt.Errorf("client ID %q is in use by %s, not %s", r.clientID, l.owner, r.owner)
		case !l.alive():
			return fmt.Errorf("%s lease for client ID %q is no longer maintained: %v", kind(fam), r.clientID, l.endReason())
		}
		// Poked first, so that a lease found dead here ends at once.
		l.poke()
		if err := l.holds(); err != nil {
			return err
		}
		res, err := l.current().result(r.shape)
		if err != nil {
			return err
		}
		parts = append(parts, res)
	}
	*reply = *dhcp.FromResult(mergeResults(parts))
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
	var stale []key
	for k, l := range s.d.leases {
		if l.owner.Network == nc.Name && !valid[cni.Attachment{ContainerID: l.owner.ContainerID, IfName: l.owner.IfName}] {
			stale = append(stale, k)
		}
	}
	s.d.mu.Unlock()
	ctx, cancel := context.WithTimeout(s.d.ctx, s.d.opTimeout())
	defer cancel()
	var errs []error
	for _, k := range stale {
		unlock, err := s.d.lockID(ctx, k.id)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		// Re-check under the lock: an ADD may have replaced it.
		if l := s.d.lookup(k); l != nil && l.owner.Network == nc.Name &&
			!valid[cni.Attachment{ContainerID: l.owner.ContainerID, IfName: l.owner.IfName}] {
			s.d.cfg.Logf("%s: GC: releasing the lease of %s", k, l.owner)
			s.d.releaseLease(l)
		}
		unlock()
	}
	return errors.Join(errs...)
}
