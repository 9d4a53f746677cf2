package stress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nftcni/nftcni/cniruntime"
	"github.com/nftcni/nftcni/internal/guest"
	"github.com/nftcni/nftcni/internal/plugintest"
	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/ownerid"
)

func TestMain(m *testing.M) { plugintest.Main(m) }

// Knobs (environment), for longer local runs:
//
//	STRESS_ATTACHMENTS  attachments per run, each added then deleted (default 100: 200 operations)
//	STRESS_WORKERS      operations in flight at most (default 16)
//	STRESS_POOL         addresses per network (default 40)
//
// Inside the test VM, an emulated guest tens of times slower, the defaults
// are 50, 8 and a pool of 20: still more attachments per network than a
// pool has addresses.
func knob(name string, def, inGuest int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	if guest.InGuest() {
		return inGuest
	}
	return def
}

// opTimeout bounds one ADD or DEL through the runtime: a hung plugin fails
// the run instead of the package timing out.
const opTimeout = 90 * time.Second

// network is one CNI network of a run: bridge + host-local + portmap. The
// pool is kept small (poolSize addresses) so that released addresses are
// handed out again within the run: reuse is where a double allocation
// would show.
type network struct {
	name    string
	bridge  string
	dataDir string
	gateway netip.Addr
	subnet  netip.Prefix
	// isGateway puts the gateway address on the bridge. Only one IPv4
	// network of a bridge can (the reference refuses a second IPv4
	// address on the bridge, and so do we).
	isGateway bool
	list      *cniruntime.NetworkConfigList
}

// poolSize is the number of addresses of each network's range: fewer
// than a run's attachments per network.
var poolSize = knob("STRESS_POOL", 40, 20)

func newNetwork(t *testing.T, name, bridge, subnet string, isGateway bool) *network {
	t.Helper()
	p := netip.MustParsePrefix(subnet)
	gw := p.Addr().Next()
	end := gw
	for range poolSize {
		end = end.Next()
	}
	n := &network{name: name, bridge: bridge, dataDir: filepath.Join(t.TempDir(), "ipam"), gateway: gw, subnet: p, isGateway: isGateway}
	conf := fmt.Sprintf(`{"cniVersion":"1.1.0","name":%q,"plugins":[
	  {"type":"bridge","bridge":%q,"isGateway":%v,"ipMasq":true,
	   "ipam":{"type":"host-local","dataDir":%q,"ranges":[[{"subnet":%q,"rangeEnd":%q}]]}},
	  {"type":"portmap","capabilities":{"portMappings":true}}]}`, name, bridge, isGateway, n.dataDir, subnet, end)
	list, err := cniruntime.NetworkConfFromBytes([]byte(conf))
	plugintest.Must(t, err)
	n.list = list
	return n
}

// owner is how a reservation file names its attachment: container ID, CR LF,
// interface name.
func owner(id string) string { return id + "\r\neth0" }

// attachment is one container interface of a run.
type attachment struct {
	id   string
	net  *network
	ns   *netns.NS
	port int
	// Set by ADD.
	addr     netip.Addr
	hostVeth string
}

func (a *attachment) rtConf() *cniruntime.RuntimeConf {
	return &cniruntime.RuntimeConf{ContainerID: a.id, NetNS: a.ns.Path(), IfName: "eth0", CapabilityArgs: map[string]any{
		"portMappings": []map[string]any{{"hostPort": a.port, "containerPort": 80, "protocol": "tcp"}},
	}}
}

func (a *attachment) nftOwner() ownerid.Owner {
	return ownerid.Owner{Network: a.net.name, ContainerID: a.id, IfName: "eth0"}
}

// run is the shared state of one stress run. The invariants are checked
// against what the test itself knows: which attachment holds which address
// right now.
type run struct {
	t       *testing.T
	host    *plugintest.Host
	rt      *cniruntime.Runtime
	nets    []*network
	maxLive int

	mu   sync.Mutex
	cond *sync.Cond
	// pending are not added yet; ready are added and their DEL has not
	// begun.
	pending, ready []*attachment
	// holder maps an address to the attachment that holds it: its ADD
	// returned the address and its DEL has not begun.
	holder map[netip.Addr]*attachment
	// leaving counts the DELs in flight per address: until such a DEL
	// returns, the address may legitimately be handed out again.
	leaving      map[netip.Addr]int
	handedOut    map[netip.Addr]int
	addsInFlight int
	delsInFlight int
	inFlight     int
	maxInFlight  int
	peakLive     int
	adds, dels   int
	stop         bool
}

// counts is what a run reports.
type counts struct {
	ops, adds, dels, maxInFlight, peakLive, distinct, reused int
	took                                                     time.Duration
}

func (c counts) String() string {
	return fmt.Sprintf("%d ops (%d ADD, %d DEL), max %d in flight, peak %d live, %d distinct addresses, %d handed out again, %s",
		c.ops, c.adds, c.dels, c.maxInFlight, c.peakLive, c.distinct, c.reused, c.took.Round(time.Millisecond))
}

// stressRun adds and deletes n attachments spread over nets in turn,
// with up to workers operations in flight, in a random interleaving: a
// worker deletes a random live attachment or adds the next one, so DELs run
// while other attachments are being added and the pools wrap around.
func stressRun(t *testing.T, nets []*network, n, workers int) counts {
	t.Helper()
	host := plugintest.NewHost(t, "bridge")
	r := &run{
		t: t, host: host, nets: nets, maxLive: poolSize * 9 / 10,
		rt: &cniruntime.Runtime{Path: []string{plugintest.BinDir(t)}, CacheDir: filepath.Join(t.TempDir(), "cache"),
			HostNS: host.NS, Stderr: io.Discard},
		holder: map[netip.Addr]*attachment{}, leaving: map[netip.Addr]int{}, handedOut: map[netip.Addr]int{},
	}
	r.cond = sync.NewCond(&r.mu)
	// The interleaving is the workers' random choices (seeded from seed)
	// and the scheduler's.
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	// Container namespaces are made up front, on the test's goroutine
	// (privtest fails the test from there); they go when the test ends.
	for i := range n {
		r.pending = append(r.pending, &attachment{
			id:   fmt.Sprintf("stress-%03d", i),
			net:  nets[i%len(nets)],
			ns:   privtest.NewNS(t),
			port: 20000 + i,
		})
	}

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wrng := rand.New(rand.NewPCG(seed, uint64(w)+100))
			for {
				del, a, ok := r.next(wrng)
				if !ok {
					return
				}
				var err error
				if del {
					err = r.del(ctx, a)
				} else {
					err = r.add(ctx, a)
				}
				r.done(del, a, err)
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	if t.Failed() {
		t.FailNow()
	}
	r.final()

	c := counts{ops: r.adds + r.dels, adds: r.adds, dels: r.dels, maxInFlight: r.maxInFlight, peakLive: r.peakLive,
		distinct: len(r.handedOut), took: took}
	for _, k := range r.handedOut {
		c.reused += k - 1
	}
	if c.adds != n || c.dels != n {
		t.Errorf("%d ADD and %d DEL done, want %d each", c.adds, c.dels, n)
	}
	// The pools are smaller than the number of attachments per network, so
	// addresses must have been reused, or the run did not test what it
	// claims.
	if c.reused == 0 && n/len(nets) > poolSize {
		t.Errorf("no address was handed out twice over time: the pools did not wrap around")
	}
	return c
}

// next picks the next operation: DEL of a random live attachment or ADD of the
// next pending one, at random while both are possible. Adds wait while maxLive
// addresses are held (live, being added or being deleted), so that the pools
// never run dry. ok is false once everything was added and deleted (or the run
// stopped on a failure).
func (r *run) next(rng *rand.Rand) (del bool, a *attachment, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		if r.stop {
			return false, nil, false
		}
		// An address is taken from the start of its ADD to the end of
		// its DEL.
		canAdd := len(r.pending) > 0 && len(r.ready)+r.addsInFlight+r.delsInFlight < r.maxLive
		canDel := len(r.ready) > 0
		if canAdd || canDel {
			// One DEL for two ADDs while both are possible: the live
			// set grows to maxLive, then drains.
			del = canDel && (!canAdd || rng.IntN(3) == 0)
			if del {
				i := rng.IntN(len(r.ready))
				a = r.ready[i]
				r.ready = slices.Delete(r.ready, i, i+1)
				if r.holder[a.addr] == a {
					delete(r.holder, a.addr)
				}
				r.leaving[a.addr]++
				r.delsInFlight++
			} else {
				a, r.pending = r.pending[0], r.pending[1:]
				r.addsInFlight++
			}
			r.inFlight++
			r.maxInFlight = max(r.maxInFlight, r.inFlight)
			return del, a, true
		}
		if len(r.pending) == 0 && len(r.ready) == 0 && r.addsInFlight == 0 {
			return false, nil, false
		}
		r.cond.Wait()
	}
}

// done records the end of an operation; a failure stops the run.
func (r *run) done(del bool, a *attachment, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.inFlight--
	if del {
		r.leaving[a.addr]--
		if r.leaving[a.addr] == 0 {
			delete(r.leaving, a.addr)
		}
		r.dels++
		r.delsInFlight--
	} else {
		r.addsInFlight--
	}
	if err != nil {
		op := "ADD"
		if del {
			op = "DEL"
		}
		r.t.Errorf("%s %s (%s): %v", op, a.id, a.net.name, err)
		r.stop = true
	}
	r.cond.Broadcast()
}

// add runs ADD and checks the result against the live attachments: the
// address must be nobody else's and be reserved in a's name.
func (r *run) add(ctx context.Context, a *attachment) error {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	res, err := r.rt.AddNetworkList(ctx, a.net.list, a.rtConf())
	if err != nil {
		return err
	}
	if len(res.IPs) != 1 || !a.net.subnet.Contains(res.IPs[0].Address.Addr()) {
		return fmt.Errorf("result addresses %v, want one in %s", res.IPs, a.net.subnet)
	}
	a.addr = res.IPs[0].Address.Addr()
	for _, in := range res.Interfaces {
		if in.Sandbox == "" && in.Name != a.net.bridge {
			a.hostVeth = in.Name
		}
	}
	if a.hostVeth == "" {
		return fmt.Errorf("result names no host veth: %+v", res.Interfaces)
	}
	// Before a becomes deletable: its reservation is in the store.
	if err := reservedFor(a); err != nil {
		return err
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	if h := r.holder[a.addr]; h != nil {
		return fmt.Errorf("got %s, which %s holds (no DEL begun): handed out twice", a.addr, h.id)
	}
	r.holder[a.addr] = a
	r.handedOut[a.addr]++
	r.ready = append(r.ready, a)
	r.adds++
	r.peakLive = max(r.peakLive, len(r.ready))
	return nil
}

// del checks that a is still whole (its reservation was not lost while
// others came and went), runs DEL, and checks that nothing of a is left:
// host veth, container interface, reservation, nftables elements and
// rules, cache entry.
func (r *run) del(ctx context.Context, a *attachment) error {
	if err := reservedFor(a); err != nil {
		return fmt.Errorf("before DEL: %w", err)
	}
	if _, err := r.host.H.LinkByName(a.hostVeth); err != nil {
		return fmt.Errorf("before DEL: host veth: %w", err)
	}
	if err := nftOwned(r.host.NS, a, true); err != nil {
		return fmt.Errorf("before DEL: %w", err)
	}

	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	if err := r.rt.DelNetworkList(ctx, a.net.list, a.rtConf()); err != nil {
		return err
	}

	if _, err := r.host.H.LinkByName(a.hostVeth); !errors.Is(err, netlinkx.ErrNotFound) {
		return fmt.Errorf("after DEL: host veth %s: %v", a.hostVeth, err)
	}
	if err := onlyLo(a.ns); err != nil {
		return fmt.Errorf("after DEL: %w", err)
	}
	if err := nftOwned(r.host.NS, a, false); err != nil {
		return fmt.Errorf("after DEL: %w", err)
	}
	files, err := storeFiles(a.net)
	if err != nil {
		return err
	}
	for name, content := range files {
		if strings.TrimSpace(content) == owner(a.id) {
			return fmt.Errorf("after DEL: reservation %s of %s left", name, a.id)
		}
	}
	if atts, err := r.rt.GetCachedAttachments(a.id); err != nil || len(atts) != 0 {
		return fmt.Errorf("after DEL: cache entries %v (%v)", atts, err)
	}
	return nil
}

// reservedFor checks that host-local's file for a's address names a.
func reservedFor(a *attachment) error {
	b, err := os.ReadFile(filepath.Join(a.net.dataDir, a.net.name, a.addr.String()))
	if err != nil {
		return fmt.Errorf("reservation of %s for %s: %w", a.addr, a.id, err)
	}
	if string(b) != owner(a.id) {
		return fmt.Errorf("reservation of %s holds %q, want %q", a.addr, b, owner(a.id))
	}
	return nil
}

// nftOwned checks that a has nftables state (want) or none. A dump that
// raced with another plugin's change may come back short, so a missing
// state is read again before it counts.
func nftOwned(host *netns.NS, a *attachment, want bool) error {
	var tagged []string
	var err error
	for range 3 {
		if tagged, err = plugintest.NFTTagged(host, a.nftOwner().OwnedBy); err == nil && (len(tagged) > 0) == want {
			return nil
		}
		plugintest.SleepBrief()
	}
	if err != nil {
		return fmt.Errorf("listing nftables: %w", err)
	}
	return fmt.Errorf("%d nftables objects of %s, want some: %v", len(tagged), a.id, want)
}

// onlyLo checks that the container namespace has nothing but lo left.
func onlyLo(ns *netns.NS) error {
	h, err := netlinkx.Open(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	links, err := h.Links()
	if err != nil {
		return err
	}
	if len(links) != 1 || links[0].Name != "lo" {
		return fmt.Errorf("container links %+v, want lo only", links)
	}
	return nil
}

// storeFiles reads every file of the network's host-local directory.
func storeFiles(n *network) (map[string]string, error) {
	dir := filepath.Join(n.dataDir, n.name)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if errors.Is(err, os.ErrNotExist) {
			continue // released meanwhile
		}
		if err != nil {
			return nil, err
		}
		out[e.Name()] = string(b)
	}
	return out, nil
}

// final checks that the host is back to empty: only lo and the bridges,
// the bridges carrying only the gateway addresses, no nftables object of
// any network, no reservation, no cache entry, and lo alone in every
// container.
func (r *run) final() {
	t := r.t
	t.Helper()
	want := []string{"lo"}
	gateways := map[string][]string{}
	for _, n := range r.nets {
		if !slices.Contains(want, n.bridge) {
			want = append(want, n.bridge)
		}
		if n.isGateway {
			gateways[n.bridge] = append(gateways[n.bridge], netip.PrefixFrom(n.gateway, n.subnet.Bits()).String())
		}
		if k := plugintest.NFTNetwork(t, r.host.NS, n.name); k != 0 {
			t.Errorf("network %s: %d nftables objects left", n.name, k)
		}
		if left := plugintest.ReservationsOf(t, n.dataDir, n.name); len(left) != 0 {
			t.Errorf("network %s: reservations left: %v", n.name, left)
		}
	}
	plugintest.WantLinks(t, r.host.H, want...)
	for br, gws := range gateways {
		slices.Sort(gws)
		if got := plugintest.AddrStrings(t, r.host.H, br, 0); !slices.Equal(got, gws) {
			t.Errorf("bridge %s addresses %v, want the gateways %v", br, got, gws)
		}
	}
	if atts, err := r.rt.GetCachedAttachments(""); err != nil || len(atts) != 0 {
		t.Errorf("cache entries left: %d (%v)", len(atts), err)
	}
}

// TestParallelOneNetwork: ADD and DEL mixed in parallel on one network.
func TestParallelOneNetwork(t *testing.T) {
	privtest.Require(t)
	plugintest.RequirePlugin(t, "portmap")
	nets := []*network{newNetwork(t, "stress-one", "stressbr0", "10.91.0.0/24", true)}
	c := stressRun(t, nets, knob("STRESS_ATTACHMENTS", 100, 50), knob("STRESS_WORKERS", 16, 8))
	t.Logf("stress, one network: %s", c)
}

// TestParallelTwoNetworksOneBridge: the same with two networks (own names,
// subnets and IPAM stores) attached to one bridge, their operations
// interleaved. The second network is not the bridge's gateway: a bridge
// takes one IPv4 gateway address only.
func TestParallelTwoNetworksOneBridge(t *testing.T) {
	privtest.Require(t)
	plugintest.RequirePlugin(t, "portmap")
	nets := []*network{
		newNetwork(t, "stress-a", "stressbr0", "10.92.0.0/24", true),
		newNetwork(t, "stress-b", "stressbr0", "10.93.0.0/24", false),
	}
	c := stressRun(t, nets, knob("STRESS_ATTACHMENTS", 100, 50), knob("STRESS_WORKERS", 16, 8))
	t.Logf("stress, two networks on one bridge: %s", c)
}
