package crash

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/nftcni/nftcni/crashpoint"
	"github.com/nftcni/nftcni/internal/guest"
	"github.com/nftcni/nftcni/internal/plugintest"
	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/ownerid"
)

// Knobs (environment), for longer local runs:
//
//	CRASH_RANDOM  crashes at random steps per chain after the sweep (default 4)
//	CRASH_SEED    seed of those random steps (default: time-based, logged)
//	CRASH_FULL=1  the cold sweep, the repeated-ADD sweep and the DEL and GC
//	              sweeps for every chain, not only where the default runs
//	              them (about 1470 crashes instead of 700)
//	CRASH_LIST=1  only list each chain's crash points
func knob(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v >= 0 {
		return v
	}
	return def
}

func TestMain(m *testing.M) { plugintest.Main(m) }

// network is every chain's network name: each chain has its own host
// namespace, store and cache, so they cannot meet.
const network = "testnet"

// chain is one network configuration list under test. In conf, STORE is
// replaced by the host-local store and TUNING by the tuning backup
// directory.
type chain struct {
	name    string
	plugins string         // the list's "plugins" members
	caps    map[string]any // runtime capability arguments
	bridge  string         // host bridge the chain creates ("" none)
	gateway string         // address the plugin puts in the host namespace
	kinds   []string       // link kinds the kernel must support
	noIface bool           // IPAM alone: no interface to check
	// deep chains also get the cold sweep and the repeated-ADD sweep by
	// default: the composite ones, whose steps include the others'.
	deep bool
	// delGC chains also get the DEL and GC sweeps by default: together
	// they run every plugin's DEL and GC (bridge with ipMasq and
	// macspoofchk, portmap, firewall, bandwidth, tuning, ptp with
	// ipMasq, host-local delegated by both).
	delGC bool
}

const hostLocal = `"ipam":{"type":"host-local","dataDir":"STORE","ranges":[[{"subnet":"10.91.0.0/24"}]]}`

func bridgeChain(name, bridgeKeys string, more ...string) chain {
	p := `{"type":"bridge","bridge":"crash0","isGateway":true` + bridgeKeys + `,` + hostLocal + `}`
	for _, m := range more {
		p += "," + m
	}
	return chain{name: name, plugins: p, bridge: "crash0", gateway: "10.91.0.1/24", caps: portCaps(18080)}
}

// portCaps maps hostPort to the container's port 80 (used by the chains
// with portmap, which refuses a host port another attachment maps).
func portCaps(hostPort int) map[string]any {
	return map[string]any{"portMappings": []map[string]any{{"hostPort": hostPort, "containerPort": 80, "protocol": "tcp"}}}
}

const (
	portmap   = `{"type":"portmap","capabilities":{"portMappings":true}}`
	firewall  = `{"type":"firewall"}`
	bandwidth = `{"type":"bandwidth","ingressRate":8000000,"ingressBurst":800000,"egressRate":8000000,"egressBurst":800000}`
	tuning    = `{"type":"tuning","dataDir":"TUNING","mtu":1400,"promisc":true,"sysctl":{"net.ipv4.conf.eth0.arp_notify":"1"}}`
)

func chains() []chain {
	bw := bridgeChain("bridge+bandwidth", "", bandwidth)
	bw.kinds = []string{"ifb"}
	full := bridgeChain("bridge+all", `,"ipMasq":true,"macspoofchk":true`, portmap, firewall, bandwidth, tuning)
	full.kinds = []string{"ifb"}
	full.deep, full.delGC = true, true
	return []chain{
		bridgeChain("bridge", ""),
		bridgeChain("bridge+ipMasq", `,"ipMasq":true`),
		bridgeChain("bridge+macspoofchk", `,"macspoofchk":true`),
		bridgeChain("bridge+portmap", `,"ipMasq":true`, portmap),
		bridgeChain("bridge+firewall", "", firewall),
		bw,
		bridgeChain("bridge+tuning", "", tuning),
		full,
		{name: "ptp+ipMasq", plugins: `{"type":"ptp","ipMasq":true,` + hostLocal + `}`, gateway: "10.91.0.1/32", deep: true, delGC: true},
		{name: "host-local", plugins: `{"type":"host-local",` + hostLocal + `}`, noIface: true, deep: true},
	}
}

// kind is the operation a crash interrupts.
type kind int

const (
	kindAdd kind = iota
	kindDel
	kindGC
	kinds
)

func (k kind) String() string { return [...]string{"ADD", "DEL", "GC"}[k] }

// counts holds a number per kind.
type counts [kinds]int

func (c *counts) add(o counts) {
	for k := range c {
		c[k] += o[k]
	}
}

func (c counts) total() (n int) {
	for _, v := range c {
		n += v
	}
	return n
}

// minCrashes is the CI promise (issues 7 and 12): a default run injects at
// least this many crashes into each kind of operation.
var minCrashes = counts{kindAdd: 500, kindDel: 35, kindGC: 40}

// tally is the whole run's account, printed at the end.
type tally struct {
	mu        sync.Mutex
	points    map[string]int // chain → crash points of its sweeps
	crashes   counts
	leftovers counts
	refused   int // repeated ADDs refused (cleanly) until DEL ran
	lines     []string
}

func (ta *tally) add(crashes, leftovers counts, refused int) {
	ta.mu.Lock()
	defer ta.mu.Unlock()
	ta.crashes.add(crashes)
	ta.leftovers.add(leftovers)
	ta.refused += refused
}

// TestCrashRecovery is the suite: for every chain, every crash point of
// ADD, then random ones.
func TestCrashRecovery(t *testing.T) {
	privtest.Require(t)
	if guest.InGuest() {
		t.Skip("runs on the host only: it builds a crashpoint binary with the go tool, which the VM lacks, and needs minutes")
	}
	bin := plugintest.BinDirTags(t, "nftcni_crashpoints")
	random := knob("CRASH_RANDOM", 4)
	full := os.Getenv("CRASH_FULL") == "1"
	seed := uint64(knob("CRASH_SEED", int(time.Now().UnixNano()%1e9)))
	t.Logf("random crash seed %d (CRASH_SEED)", seed)
	ta := &tally{points: map[string]int{}}
	start := time.Now()
	t.Run("chains", func(t *testing.T) {
		for i, c := range chains() {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				for _, k := range c.kinds {
					privtest.RequireLinkKind(t, k)
				}
				w := newWorld(t, c, bin)
				w.sweep(ta, rand.New(rand.NewPCG(seed, uint64(i))), random, full || c.deep, full || c.delGC)
			})
		}
	})
	var names []string
	for n := range ta.points {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		t.Logf("%-20s %3d crash points", n, ta.points[n])
	}
	for _, l := range ta.lines {
		t.Log(l)
	}
	summary := fmt.Sprintf("crash suite: %d chains, %d ADD + %d DEL + %d GC injected crashes (SIGKILL), %d leftovers (ADD %d, DEL %d, GC %d), %d repeated ADDs refused before DEL, %.1fs",
		len(names), ta.crashes[kindAdd], ta.crashes[kindDel], ta.crashes[kindGC], ta.leftovers.total(),
		ta.leftovers[kindAdd], ta.leftovers[kindDel], ta.leftovers[kindGC], ta.refused, time.Since(start).Seconds())
	t.Log(summary)
	fmt.Println(summary)
	if n := ta.leftovers.total(); n != 0 {
		t.Errorf("%d leftovers", n)
	}
	// The CI promise, checked when every chain ran with the default
	// count of random crashes and the default choice of sweeps.
	if !t.Failed() && len(names) == len(chains()) && random == 4 && !full && os.Getenv("CRASH_LIST") != "1" {
		for k := range kinds {
			if ta.crashes[k] < minCrashes[k] {
				t.Errorf("only %d crashes injected into %v, want at least %d", ta.crashes[k], k, minCrashes[k])
			}
		}
	}
}

// killExec runs every plugin as a process forked inside the host
// namespace, with extra environment (the crash variables) for the calls
// of one operation, and counts the processes SIGKILL ended.
type killExec struct {
	invoke.RawExec
	version.PluginDecoder
	host   *netns.NS
	env    []string
	killed int
}

func (e *killExec) ExecPlugin(ctx context.Context, path string, stdin []byte, environ []string) ([]byte, error) {
	c := exec.CommandContext(ctx, path)
	for _, kv := range environ {
		if !strings.HasPrefix(kv, "NFTCNI_CRASH_") {
			c.Env = append(c.Env, kv)
		}
	}
	c.Env = append(c.Env, e.env...)
	c.Stdin = bytes.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	if err := netns.StartIn(e.host, c); err != nil {
		return nil, err
	}
	err := c.Wait()
	if err == nil {
		return stdout.Bytes(), nil
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			if ws.Signal() == syscall.SIGKILL {
				e.killed++
			}
			return nil, fmt.Errorf("%s killed by %v (stderr %q)", filepath.Base(path), ws.Signal(), stderr.String())
		}
	}
	var te types.Error
	if stdout.Len() > 0 && json.Unmarshal(stdout.Bytes(), &te) == nil {
		return nil, &te
	}
	return nil, fmt.Errorf("%s: %v: stdout %q stderr %q", filepath.Base(path), err, stdout.String(), stderr.String())
}

// world is one chain's host namespace, container namespace, state
// directories and runtime.
type world struct {
	t                *testing.T
	c                chain
	host, ctr        *netns.NS
	hh, ch           *netlinkx.Handle
	ex               *killExec
	cni              *libcni.CNIConfig
	lostCNI          *libcni.CNIConfig // a runtime whose cache the GC runs never read
	list             *libcni.NetworkConfigList
	dir, store, tdir string
	bin              string
	phase            kind // what the crashes and leftovers counted now interrupt
	crashes          counts
	leftovers        counts
	refused          int
	gatewayAddr      netip.Addr
	seen             map[string]bool // leftovers already counted
}

func newWorld(t *testing.T, c chain, bin string) *world {
	host, hh := plugintest.NewCtr(t, plugintest.NoDAD)
	ctr, ch := plugintest.NewCtr(t, plugintest.NoDAD)
	dir := t.TempDir()
	w := &world{t: t, c: c, host: host, ctr: ctr, hh: hh, ch: ch, dir: dir,
		store: filepath.Join(dir, "ipam"), tdir: filepath.Join(dir, "tuning"), bin: bin, seen: map[string]bool{}}
	conf := fmt.Sprintf(`{"cniVersion":"1.1.0","name":%q,"plugins":[%s]}`, network,
		strings.NewReplacer("STORE", w.store, "TUNING", w.tdir).Replace(c.plugins))
	list, err := libcni.ConfListFromBytes([]byte(conf))
	plugintest.Must(t, err)
	w.list = list
	w.ex = &killExec{host: host}
	w.cni = libcni.NewCNIConfigWithCacheDir([]string{bin}, filepath.Join(dir, "cache"), w.ex)
	w.lostCNI = libcni.NewCNIConfigWithCacheDir([]string{bin}, filepath.Join(dir, "lost-cache"), w.ex)
	if c.gateway != "" {
		w.gatewayAddr = netip.MustParsePrefix(c.gateway).Addr()
	}
	return w
}

func (w *world) rt(id string) *libcni.RuntimeConf {
	return &libcni.RuntimeConf{ContainerID: id, NetNS: w.ctr.Path(), IfName: "eth0", CapabilityArgs: w.c.caps}
}

func opCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), time.Minute)
}

// sweep covers the chain's crash points in two host states. Warm: ADD on
// a host already set up; one world takes a crash at each point followed
// by DEL and GC, then crashes at random points. With deep, also: a crash
// at each warm point followed by a repeated ADD of the same attachment;
// and cold, the first ADD on a fresh host, which also creates the bridge,
// its address and the nftables tables: each cold point gets fresh
// namespaces, a crash there, DEL and GC, then a new ADD of the same
// attachment on the half-built host, which must work, and its removal.
// With delGC, then the DEL and GC sweeps (sweepDel, sweepGC).
func (w *world) sweep(ta *tally, rnd *rand.Rand, random int, deep, delGC bool) {
	t := w.t
	start := time.Now()
	cold := w.enumerate()
	warm := w.enumerate()
	if len(cold) == 0 || len(warm) == 0 {
		t.Fatal("the traced ADD hit no crash point: is the binary built with nftcni_crashpoints?")
	}
	var dels, gcs []string
	if delGC {
		dels = w.enumerateDel()
		gcs = w.enumerateGC()
	}
	if os.Getenv("CRASH_LIST") == "1" {
		t.Logf("cold points: %s", strings.Join(cold, " "))
		t.Logf("warm points: %s", strings.Join(warm, " "))
		t.Logf("DEL points: %s", strings.Join(dels, " "))
		t.Logf("GC points: %s", strings.Join(gcs, " "))
		ta.mu.Lock()
		ta.points[w.c.name] = len(cold) + len(warm) + len(dels) + len(gcs)
		ta.lines = append(ta.lines, fmt.Sprintf("%-20s %3d cold + %3d warm + %2d DEL + %2d GC points", w.c.name, len(cold), len(warm), len(dels), len(gcs)))
		ta.mu.Unlock()
		return
	}
	w.phase = kindAdd
	for i := range cold {
		if !deep {
			break
		}
		t.Run(fmt.Sprintf("cold-%03d", i+1), func(t *testing.T) {
			cw := newWorld(t, w.c, w.bin)
			id := fmt.Sprintf("cold-%03d", i+1)
			what := fmt.Sprintf("cold crash at %d (%s)", i+1, cold[i])
			cw.crash(i+1, cold[i], id)
			cw.recover(id, what)
			cw.add(id, what+", ADD after recovery")
			cw.recover(id, what+", ADD after recovery")
			w.merge(cw)
		})
	}
	for i := range warm {
		id := fmt.Sprintf("warm-%03d", i+1)
		w.crash(i+1, warm[i], id)
		w.recover(id, fmt.Sprintf("warm crash at %d (%s)", i+1, warm[i]))
	}
	for i := range warm {
		if !deep {
			break
		}
		id := fmt.Sprintf("again-%03d", i+1)
		w.crash(i+1, warm[i], id)
		w.addAgain(id, fmt.Sprintf("warm crash at %d (%s), ADD again", i+1, warm[i]))
	}
	for k := range random {
		n := 1 + rnd.IntN(len(warm))
		id := fmt.Sprintf("random-%03d", k)
		w.crash(n, warm[n-1], id)
		w.recover(id, fmt.Sprintf("random crash at %d (%s)", n, warm[n-1]))
	}
	delStart := time.Now()
	w.sweepDel(dels)
	gcStart := time.Now()
	w.sweepGC(gcs)
	end := time.Now()
	ta.add(w.crashes, w.leftovers, w.refused)
	ta.mu.Lock()
	ta.points[w.c.name] = len(cold) + len(warm) + len(dels) + len(gcs)
	ta.lines = append(ta.lines, fmt.Sprintf("%-20s %3d cold + %3d warm + %2d DEL + %2d GC points, %3d ADD + %2d DEL + %2d GC crashes, %d leftovers, %2d repeated ADDs refused, %.1fs (DEL sweep %.1fs, GC sweep %.1fs)",
		w.c.name, len(cold), len(warm), len(dels), len(gcs), w.crashes[kindAdd], w.crashes[kindDel], w.crashes[kindGC],
		w.leftovers.total(), w.refused, end.Sub(start).Seconds(), gcStart.Sub(delStart).Seconds(), end.Sub(gcStart).Seconds()))
	ta.mu.Unlock()
}

// sweepDel kills DEL at each of its crash points: a working ADD, its DEL
// killed there, then the runtime's retry, DEL again, which must succeed,
// and GC, each followed by the leftover check.
func (w *world) sweepDel(points []string) {
	w.phase = kindDel
	for i, p := range points {
		id := fmt.Sprintf("del-%03d", i+1)
		what := fmt.Sprintf("DEL crash at %d (%s)", i+1, p)
		w.add(id, what+", ADD")
		w.killAt(i+1, p, "DEL "+id, func(ctx context.Context) error {
			return w.cni.DelNetworkList(ctx, w.list, w.rt(id))
		})
		w.recover(id, what)
	}
}

// sweepGC kills GC at each of its crash points: the stale attachments
// (stale), GC with no valid attachment killed there, then GC again, which
// must succeed and leave nothing.
func (w *world) sweepGC(points []string) {
	w.phase = kindGC
	for i, p := range points {
		id := fmt.Sprintf("gc-%03d", i+1)
		what := fmt.Sprintf("GC crash at %d (%s)", i+1, p)
		w.stale(id, what)
		w.killAt(i+1, p, "GC", w.gc)
		w.gcAgain(what)
	}
}

// stale makes what a GC with no valid attachment must remove: two
// attachments whose containers are gone (their namespaces destroyed, as
// when a node lost its containers), one still in the runtime's cache, for
// which the runtime's GC first runs DEL without the namespace, and one the
// cache lost, which only the plugins' own GC can find.
func (w *world) stale(id, what string) {
	t := w.t
	t.Helper()
	ctx, cancel := opCtx()
	defer cancel()
	for i, c := range []struct {
		suffix string
		cni    *libcni.CNIConfig
	}{{"-cached", w.cni}, {"-lost", w.lostCNI}} {
		ns, destroy := plugintest.DoomedCtr(t, plugintest.NoDAD)
		caps := w.c.caps
		if caps != nil {
			caps = portCaps(18081 + i)
		}
		rt := &libcni.RuntimeConf{ContainerID: id + c.suffix, NetNS: ns.Path(), IfName: "eth0", CapabilityArgs: caps}
		if _, err := c.cni.AddNetworkList(ctx, w.list, rt); err != nil {
			t.Fatalf("%s: ADD of %s: %v", what, rt.ContainerID, err)
		}
		destroy()
	}
}

// gc is the runtime's GC with no valid attachment.
func (w *world) gc(ctx context.Context) error {
	return w.cni.GCNetworkList(ctx, w.list, &libcni.GCArgs{ValidAttachments: []types.GCAttachment{}})
}

// gcAgain runs GC, which must succeed and leave nothing behind.
func (w *world) gcAgain(what string) {
	t := w.t
	t.Helper()
	ctx, cancel := opCtx()
	defer cancel()
	if err := w.gc(ctx); err != nil {
		t.Fatalf("%s: GC again: %v", what, err)
	}
	w.check(what + ", after GC again")
}

// merge adds a cold world's counts to w's.
func (w *world) merge(o *world) {
	w.crashes.add(o.crashes)
	w.leftovers.add(o.leftovers)
	w.refused += o.refused
}

// add runs a plain ADD for id, which must succeed and work.
func (w *world) add(id, what string) {
	w.t.Helper()
	ctx, cancel := opCtx()
	defer cancel()
	res, err := w.cni.AddNetworkList(ctx, w.list, w.rt(id))
	if err != nil {
		w.t.Fatalf("%s: %v", what, err)
	}
	w.working(res, what)
}

// enumerate runs one ADD with tracing only, checks that it works, removes
// it, and returns the names of its crash points in order.
func (w *world) enumerate() []string {
	var res types.Result
	points := w.traced("ADD", func(ctx context.Context) (err error) {
		res, err = w.cni.AddNetworkList(ctx, w.list, w.rt("trace"))
		return err
	})
	w.working(res, "traced ADD")
	w.recover("trace", "traced ADD")
	return points
}

// enumerateDel lists DEL's crash points: those of a traced DEL of a
// working attachment, which must leave nothing behind.
func (w *world) enumerateDel() []string {
	w.phase = kindDel
	defer func() { w.phase = kindAdd }()
	w.add("deltrace", "ADD before the traced DEL")
	points := w.traced("DEL", func(ctx context.Context) error {
		return w.cni.DelNetworkList(ctx, w.list, w.rt("deltrace"))
	})
	w.check("traced DEL")
	return points
}

// enumerateGC lists GC's crash points: those of a traced GC of the stale
// attachments, which must leave nothing behind.
func (w *world) enumerateGC() []string {
	w.phase = kindGC
	defer func() { w.phase = kindAdd }()
	w.stale("gctrace", "before the traced GC")
	points := w.traced("GC", w.gc)
	w.check("traced GC")
	return points
}

// traced runs op with tracing only; it must succeed. It returns the names
// of the crash points op went through, in order.
func (w *world) traced(what string, op func(context.Context) error) []string {
	trace := filepath.Join(w.dir, "trace")
	w.ex.env = []string{crashpoint.EnvTrace + "=" + trace}
	ctx, cancel := opCtx()
	defer cancel()
	_ = os.Remove(trace)
	err := op(ctx)
	w.ex.env = nil
	if err != nil {
		w.t.Fatalf("traced %s: %v", what, err)
	}
	b, err := os.ReadFile(trace)
	if errors.Is(err, os.ErrNotExist) {
		return nil // no step at all
	}
	plugintest.Must(w.t, err)
	return strings.Fields(string(b))
}

// crash runs ADD for id with a kill at the n-th crash point.
func (w *world) crash(n int, want, id string) {
	w.t.Helper()
	w.killAt(n, want, "ADD "+id, func(ctx context.Context) error {
		_, err := w.cni.AddNetworkList(ctx, w.list, w.rt(id))
		return err
	})
}

// killAt runs op with a kill at its n-th crash point (want: the step the
// enumeration saw there) and checks that op failed because a plugin
// process died by SIGKILL exactly there.
func (w *world) killAt(n int, want, what string, op func(context.Context) error) {
	t := w.t
	t.Helper()
	trace := filepath.Join(w.dir, "trace")
	_ = os.Remove(trace)
	w.ex.env = []string{crashpoint.EnvTrace + "=" + trace, crashpoint.EnvAt + "=" + strconv.Itoa(n)}
	killed := w.ex.killed
	ctx, cancel := opCtx()
	defer cancel()
	err := op(ctx)
	w.ex.env = nil
	if err == nil {
		t.Fatalf("%s with a crash at step %d (%s) succeeded", what, n, want)
	}
	if w.ex.killed != killed+1 {
		t.Fatalf("%s with a crash at step %d (%s) failed without SIGKILL: %v", what, n, want, err)
	}
	b, err := os.ReadFile(trace)
	plugintest.Must(t, err)
	// Plugins run some steps concurrently (the masquerade batch goes on
	// while the veth is set up), so the n-th step is not always the one
	// the enumeration saw there; it must be the n-th all the same. The
	// runtime may go on after the kill (GC goes on to the next stale
	// attachment and to the plugins' GC), writing steps after the crash.
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	var at []int
	for i, l := range lines {
		if strings.HasPrefix(l, crashpoint.CrashPrefix) {
			at = append(at, i)
		}
	}
	switch {
	case len(at) != 1:
		t.Errorf("%s: %d crashes traced, want one at step %d (%s)", what, len(at), n, want)
	case at[0] != n:
		t.Errorf("%s: died at %q after %d steps, want step %d (%s)", what, lines[at[0]], at[0], n, want)
	}
	w.crashes[w.phase]++
}

// recover is the runtime's answer to a failed ADD: DEL, then GC with no
// valid attachment. Both must succeed and leave nothing behind.
func (w *world) recover(id, what string) {
	t := w.t
	t.Helper()
	ctx, cancel := opCtx()
	defer cancel()
	if err := w.cni.DelNetworkList(ctx, w.list, w.rt(id)); err != nil {
		t.Fatalf("%s: DEL: %v", what, err)
	}
	w.check(what + ", after DEL")
	if err := w.cni.GCNetworkList(ctx, w.list, &libcni.GCArgs{ValidAttachments: []types.GCAttachment{}}); err != nil {
		t.Fatalf("%s: GC: %v", what, err)
	}
	w.check(what + ", after DEL and GC")
}

// addAgain repeats the interrupted ADD for the same attachment. Where the crash
// left the container interface or the reservation in place, the plugin refuses
// a second ADD, as the reference does (the reference's "already exists" and
// "duplicate allocation"); the refusal must be a clean CNI error, and the
// runtime's DEL must then make the next ADD work. The working attachment is
// then removed by DEL and GC without leftovers.
func (w *world) addAgain(id, what string) {
	t := w.t
	t.Helper()
	ctx, cancel := opCtx()
	defer cancel()
	res, err := w.cni.AddNetworkList(ctx, w.list, w.rt(id))
	if err != nil {
		var te *types.Error
		if !errors.As(err, &te) {
			t.Fatalf("%s: repeated ADD failed without a CNI error: %v", what, err)
		}
		w.refused++
		if err := w.cni.DelNetworkList(ctx, w.list, w.rt(id)); err != nil {
			t.Fatalf("%s: DEL after the refused ADD: %v", what, err)
		}
		w.check(what + ", refused, after DEL")
		w.add(id, what+", after DEL")
	} else {
		w.working(res, what)
	}
	w.recover(id, what)
}

// working checks that an ADD's result is in place: the address in the
// store, and for interface chains on eth0 in the container, with UDP
// round trips between the container and the host.
func (w *world) working(r types.Result, what string) {
	t := w.t
	t.Helper()
	res, err := current.NewResultFromResult(r)
	plugintest.Must(t, err)
	if len(res.IPs) != 1 {
		t.Fatalf("%s: result IPs %v", what, res.IPs)
	}
	ip := res.IPs[0].Address
	addr, _ := netip.AddrFromSlice(ip.IP.To4())
	if got := plugintest.Reservations(t, w.store); !slices.Contains(got, addr.String()) {
		t.Errorf("%s: store holds %v, want %s", what, got, addr)
	}
	if w.c.noIface {
		return
	}
	if got := plugintest.AddrStrings(t, w.ch, "eth0", syscall.AF_INET); !slices.Equal(got, []string{ip.String()}) {
		t.Errorf("%s: eth0 addresses %v, want %s", what, got, ip.String())
	}
	if !privtest.UDPRoundTrip(t, w.ctr, w.host, w.gatewayAddr) {
		t.Errorf("%s: no UDP round trip from the container to the host's %s", what, w.gatewayAddr)
	}
}

// check lists what the attachments left in the namespaces, the nftables
// tables and the state directories; everything found is a leftover.
func (w *world) check(what string) {
	t := w.t
	t.Helper()
	var found []string
	links, err := w.hh.Links()
	plugintest.Must(t, err)
	for _, l := range links {
		if l.Name != "lo" && l.Name != w.c.bridge {
			found = append(found, fmt.Sprintf("host link %s (%s)", l.Name, l.Kind))
		}
		if l.Name == w.c.bridge {
			for _, a := range plugintest.AddrStrings(t, w.hh, l.Name, 0) {
				if a != w.c.gateway {
					found = append(found, "bridge address "+a)
				}
			}
		}
	}
	for _, n := range plugintest.LinkNames(t, w.ch) {
		if n != "lo" {
			found = append(found, "container link "+n)
		}
	}
	tagged, err := plugintest.NFTTagged(w.host, func(c string) bool { return ownerid.Stale(c, network, nil) })
	plugintest.Must(t, err)
	for _, c := range tagged {
		found = append(found, "nftables object tagged "+c)
	}
	for _, f := range plugintest.Reservations(t, w.store) {
		found = append(found, "host-local file "+f)
	}
	if entries, err := os.ReadDir(w.tdir); err == nil {
		for _, e := range entries {
			found = append(found, "tuning file "+e.Name())
		}
	}
	if len(found) > 0 {
		// A leftover stays until something removes it: count it once.
		for _, f := range found {
			if !w.seen[f] {
				w.seen[f] = true
				w.leftovers[w.phase]++
			}
		}
		t.Errorf("%s: leftovers: %s", what, strings.Join(found, "; "))
	}
}
