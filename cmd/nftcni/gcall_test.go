package main

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/nftcni/nftcni/attachrec"
	"github.com/nftcni/nftcni/internal/guest"
	"github.com/nftcni/nftcni/internal/plugintest"
	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/ownerid"
)

// The gc --all tests build what a host has after a reboot or a crashed
// runtime — container namespaces gone while the result cache, the
// attachment records, host-local's store and the nftables elements stay —
// inside a throwaway host namespace, and sweep it with the real binary.

// gcChain is a Podman-style chain: bridge with masquerade and host-local,
// portmap, firewall.
func gcChain(version, name, bridge, subnet, dataDir string) string {
	return fmt.Sprintf(`{"cniVersion":%q,"name":%q,"plugins":[
		{"type":"bridge","bridge":%q,"isGateway":true,"ipMasq":true,
		 "ipam":{"type":"host-local","dataDir":%q,"ranges":[[{"subnet":%q}]]}},
		{"type":"portmap","capabilities":{"portMappings":true}},
		{"type":"firewall"}]}`, version, name, bridge, dataDir, subnet)
}

// gcCtr is a container namespace that the test makes vanish itself, as a
// reboot or a crashed runtime would.
type gcCtr struct {
	ns   *netns.NS
	path string
	mu   sync.Mutex
	gone bool
}

func newGCCtr(t *testing.T, dir, name string) *gcCtr {
	t.Helper()
	ns, err := netns.New(dir, name)
	if err != nil {
		t.Fatal(err)
	}
	k := &gcCtr{ns: ns, path: ns.Path()}
	t.Cleanup(func() {
		if err := k.vanish(); err != nil {
			t.Error(err)
		}
	})
	return k
}

func (k *gcCtr) id() string { return cnitoolContainerID(k.path) }

// vanish removes the namespace without any DEL.
func (k *gcCtr) vanish() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.gone {
		return nil
	}
	k.gone = true
	return errors.Join(k.ns.Close(), netns.Remove(k.path))
}

func (k *gcCtr) owner(network string) ownerid.Owner {
	return ownerid.Owner{Network: network, ContainerID: k.id(), IfName: "eth0"}
}

// exec runs the CLI with env added; safe in goroutines (no t.Fatal).
func (c *cliEnv) exec(env []string, args ...string) (cliOut, error) {
	cmd := c.command(args...)
	cmd.Env = append(cmd.Env, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	out := cliOut{stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		out.status, err = ee.ExitCode(), nil
	}
	return out, err
}

// mustRun runs the CLI and fails the test unless it exits 0.
func (c *cliEnv) mustRun(env []string, args ...string) string {
	c.t.Helper()
	out, err := c.exec(env, args...)
	if err != nil || out.status != 0 {
		c.t.Fatalf("nftcni %v: %v, status %d\n%s%s", args, err, out.status, out.stdout, out.stderr)
	}
	return out.stdout
}

func portMapping(hostPort int) []string {
	return []string{fmt.Sprintf(`CAP_ARGS={"portMappings":[{"hostPort":%d,"containerPort":80,"protocol":"tcp"}]}`, hostPort)}
}

// cachedIDs lists the container IDs of network in the result cache.
func (c *cliEnv) cachedIDs(t *testing.T, network string) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(c.cacheDir, "results"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if rest, ok := strings.CutPrefix(e.Name(), network+"-"); ok {
			out = append(out, strings.TrimSuffix(rest, "-eth0"))
		}
	}
	sort.Strings(out)
	return out
}

// recordedIDs lists the container IDs of network in the attachment records.
func (c *cliEnv) recordedIDs(t *testing.T, network string) []string {
	t.Helper()
	recs, err := attachrec.List(c.recDir, network)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range recs {
		out = append(out, r.ContainerID)
	}
	sort.Strings(out)
	return out
}

// nftOf counts the nftables elements and rules of each owner, and of the
// whole network.
func (c *cliEnv) nftOf(t *testing.T, network string, live []*gcCtr) (each []int, all int) {
	t.Helper()
	for _, k := range live {
		each = append(each, plugintest.NFTOwned(t, c.host, k.owner(network)))
	}
	return each, plugintest.NFTNetwork(t, c.host, network)
}

// wantOnly checks that network holds exactly what live attachments hold:
// one reservation each, their nftables objects and nothing else of the
// network, their cache entries and records.
func (c *cliEnv) wantOnly(t *testing.T, network, dataDir string, live ...*gcCtr) {
	t.Helper()
	var ids []string
	for _, k := range live {
		ids = append(ids, k.id())
	}
	sort.Strings(ids)
	if got := plugintest.ReservationsOf(t, dataDir, network); len(got) != len(live) {
		t.Errorf("%s: host-local holds %v, want %d reservations", network, got, len(live))
	}
	each, all := c.nftOf(t, network, live)
	sum := 0
	for i, n := range each {
		if n == 0 {
			t.Errorf("%s: live attachment %s has no nftables objects left", network, live[i].id())
		}
		sum += n
	}
	if all != sum {
		t.Errorf("%s: %d nftables objects of the network, %d of them the live attachments'", network, all, sum)
	}
	if got := c.cachedIDs(t, network); !slices.Equal(got, ids) {
		t.Errorf("%s: cached %v, want %v", network, got, ids)
	}
	if got := c.recordedIDs(t, network); !slices.Equal(got, ids) {
		t.Errorf("%s: recorded %v, want %v", network, got, ids)
	}
}

// liveWorks checks what a user of a live attachment sees: CHECK passes,
// the gateway answers, and the host port reaches the container.
func (c *cliEnv) liveWorks(t *testing.T, network string, k *gcCtr, gw netip.Addr, hostPort int) {
	t.Helper()
	if out, err := c.exec(portMapping(hostPort), "check", network, k.path); err != nil || out.status != 0 {
		t.Errorf("CHECK of live %s: %v %d %s", k.id(), err, out.status, out.stderr)
	}
	if !privtest.Ping(t, k.ns, gw) {
		t.Errorf("live %s: no answer from the gateway %s", k.id(), gw)
	}
	dial := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(hostPort))
	if !privtest.TCPRoundTrip(t, c.host, dial, k.ns, netip.MustParseAddrPort("0.0.0.0:80")).IsValid() {
		t.Errorf("live %s: host port %d does not reach it", k.id(), hostPort)
	}
}

// newGCCLI is newCLI with the host namespace's lo up (the host port is
// tried at 127.0.0.1) and every plugin of gcChain required.
func newGCCLI(t *testing.T) *cliEnv {
	t.Helper()
	privtest.Require(t)
	privtest.HideSystemBus()
	c := newCLI(t)
	for _, p := range []string{"bridge", "host-local", "portmap", "firewall"} {
		if !hasPlugin(t, p) {
			t.Skipf("%s not in this build", p)
		}
	}
	plugintest.Must(t, privtest.Handle(t, c.host).SetUp("lo"))
	return c
}

// TestGCAllAfterReboot: two networks (one at cniVersion 1.0.0, which has
// no GC of its own) with a live container each and stale ones of every
// kind — cached, recorded but not cached (the ADD crashed before the
// runtime wrote its cache), and known to neither (only the plugins' GC
// finds those). A dry run changes nothing; the sweep leaves exactly the
// live attachments, which keep working; a second sweep finds nothing.
func TestGCAllAfterReboot(t *testing.T) {
	c := newGCCLI(t)
	dataDir := t.TempDir()
	nsDir := t.TempDir()
	c.conf("10-web.conflist", gcChain("1.0.0", "gcweb", "gcbr0", "10.71.0.0/24", dataDir))
	c.conf("20-db.conflist", gcChain("1.1.0", "gcdb", "gcbr1", "10.72.0.0/24", dataDir))

	type att struct {
		network string
		k       *gcCtr
		port    int
		fate    string // live, cached, recorded, unknown
	}
	var atts []*att
	for i, a := range []struct{ network, fate string }{
		{"gcweb", "live"}, {"gcweb", "cached"}, {"gcweb", "cached"}, {"gcweb", "recorded"}, {"gcweb", "unknown"},
		{"gcdb", "live"}, {"gcdb", "cached"}, {"gcdb", "recorded"}, {"gcdb", "unknown"},
	} {
		k := newGCCtr(t, nsDir, fmt.Sprintf("ctr%d", i))
		x := &att{network: a.network, k: k, port: 18100 + i, fate: a.fate}
		c.mustRun(portMapping(x.port), "add", x.network, k.path)
		atts = append(atts, x)
	}
	// What a crash leaves: the cache entry never written, or neither it
	// nor the record (an ADD of the reference plugins, or one made
	// before records existed).
	for _, a := range atts {
		if a.fate == "recorded" || a.fate == "unknown" {
			if err := os.Remove(filepath.Join(c.cacheDir, "results", a.network+"-"+a.k.id()+"-eth0")); err != nil {
				t.Fatal(err)
			}
		}
		if a.fate == "unknown" {
			if err := attachrec.Remove(c.recDir, a.network, a.k.id(), "eth0"); err != nil {
				t.Fatal(err)
			}
		}
	}
	var webLive, dbLive *att
	for _, a := range atts {
		switch {
		case a.fate == "live" && a.network == "gcweb":
			webLive = a
		case a.fate == "live":
			dbLive = a
		}
	}
	gwWeb, gwDB := netip.MustParseAddr("10.71.0.1"), netip.MustParseAddr("10.72.0.1")
	c.liveWorks(t, "gcweb", webLive.k, gwWeb, webLive.port)
	c.liveWorks(t, "gcdb", dbLive.k, gwDB, dbLive.port)

	// The reboot: every other namespace is gone, the state stays.
	for _, a := range atts {
		if a.fate != "live" {
			if err := a.k.vanish(); err != nil {
				t.Fatal(err)
			}
		}
	}
	resBefore := plugintest.ReservationsOf(t, dataDir, "gcweb")
	_, nftBefore := c.nftOf(t, "gcweb", nil)

	out := c.mustRun(nil, "gc", "--all", "-n")
	t.Logf("dry run:\n%s", out)
	for _, want := range []string{
		`network "gcweb": 1 live attachment kept, 3 stale to delete; GC would be sent as 1.1.0 (the list is "1.0.0") to bridge, portmap, firewall with 1 valid attachment`,
		`network "gcdb": 1 live attachment kept, 2 stale to delete; GC would be sent to bridge, portmap, firewall with 1 valid attachment`,
		"(recorded, not cached; ",
		": would be deleted",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("dry run output lacks %q", want)
		}
	}
	if got := plugintest.ReservationsOf(t, dataDir, "gcweb"); !slices.Equal(got, resBefore) {
		t.Errorf("the dry run changed the store: %v, was %v", got, resBefore)
	}
	if _, n := c.nftOf(t, "gcweb", nil); n != nftBefore {
		t.Errorf("the dry run changed nftables: %d objects, were %d", n, nftBefore)
	}

	out = c.mustRun(nil, "gc", "--all")
	t.Logf("sweep:\n%s", out)
	for _, want := range []string{
		`network "gcweb": 1 live attachment kept, 3 stale deleted; GC sent as 1.1.0 (the list is "1.0.0") to bridge, portmap, firewall with 1 valid attachment`,
		`network "gcdb": 1 live attachment kept, 2 stale deleted; GC sent to bridge, portmap, firewall with 1 valid attachment`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("sweep output lacks %q", want)
		}
	}
	c.wantOnly(t, "gcweb", dataDir, webLive.k)
	c.wantOnly(t, "gcdb", dataDir, dbLive.k)
	c.liveWorks(t, "gcweb", webLive.k, gwWeb, webLive.port)
	c.liveWorks(t, "gcdb", dbLive.k, gwDB, dbLive.port)

	out = c.mustRun(nil, "gc", "--all")
	if !strings.Contains(out, `network "gcweb": 1 live attachment kept, 0 stale deleted`) ||
		!strings.Contains(out, `network "gcdb": 1 live attachment kept, 0 stale deleted`) {
		t.Errorf("second sweep:\n%s", out)
	}
	c.wantOnly(t, "gcweb", dataDir, webLive.k)
}

// TestGCAllNeverTouchesLive: sweeps run back to back while workers ADD,
// CHECK and DEL containers of the same network, and now and then let one
// vanish without DEL (a crashed runtime). Every ADD is checked right after
// it returned (CHECK fails on a released reservation or a removed
// nftables element), long-lived containers are checked after every sweep,
// and they still pass traffic at the end; the final sweep leaves exactly
// the long-lived ones.
func TestGCAllNeverTouchesLive(t *testing.T) {
	c := newGCCLI(t)
	const (
		network   = "gcrace"
		workers   = 3
		longLived = 3
	)
	iterations := 12
	if guest.InGuest() {
		iterations = 4 // an emulated guest is many times slower
	}
	dataDir, nsDir := t.TempDir(), t.TempDir()
	c.conf("10-race.conflist", gcChain("1.1.0", network, "gcbr2", "10.73.0.0/24", dataDir))
	gw := netip.MustParseAddr("10.73.0.1")

	var long []*gcCtr
	for i := range longLived {
		k := newGCCtr(t, nsDir, fmt.Sprintf("long%d", i))
		c.mustRun(portMapping(18200+i), "add", network, k.path)
		long = append(long, k)
	}
	for i, k := range long {
		c.liveWorks(t, network, k, gw, 18200+i)
	}

	var (
		stop           atomic.Bool
		sweeps, checks atomic.Int64
		adds, crashed  atomic.Int64
		mu             sync.Mutex
		problems       []string
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		problems = append(problems, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	var wg, sweeper sync.WaitGroup
	sweeper.Add(1)
	go func() {
		defer sweeper.Done()
		for !stop.Load() {
			out, err := c.exec(nil, "gc", "--all")
			if err != nil || out.status != 0 {
				fail("sweep: %v %d %s%s", err, out.status, out.stdout, out.stderr)
				continue
			}
			sweeps.Add(1)
			for i, k := range long {
				out, err := c.exec(portMapping(18200+i), "check", network, k.path)
				if err != nil || out.status != 0 {
					fail("long-lived %d after sweep %d: CHECK: %v %s", i, sweeps.Load(), err, out.stderr)
				}
				checks.Add(1)
			}
		}
	}()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range iterations {
				// A port of its own: one left to the sweep keeps its
				// host port until the sweep collects it.
				port := portMapping(18300 + 100*w + i)
				k := newGCCtr(t, nsDir, fmt.Sprintf("w%d-%d", w, i))
				out, err := c.exec(port, "add", network, k.path)
				if err != nil || out.status != 0 {
					fail("worker %d ADD %d: %v %d %s", w, i, err, out.status, out.stderr)
					continue
				}
				adds.Add(1)
				if out, err := c.exec(port, "check", network, k.path); err != nil || out.status != 0 {
					fail("worker %d CHECK %d right after ADD: %v %s", w, i, err, out.stderr)
				}
				if i%4 == 3 {
					// A crash: the namespace goes, no DEL; a sweep
					// must collect it.
					if err := k.vanish(); err != nil {
						fail("vanish: %v", err)
					}
					crashed.Add(1)
					continue
				}
				if out, err := c.exec(port, "del", network, k.path); err != nil || out.status != 0 {
					fail("worker %d DEL %d: %v %s", w, i, err, out.stderr)
				}
				if err := k.vanish(); err != nil {
					fail("vanish: %v", err)
				}
			}
		}()
	}
	wg.Wait()
	stop.Store(true)
	sweeper.Wait()
	for _, p := range problems {
		t.Error(p)
	}
	t.Logf("%d sweeps while %d ADDs (each CHECKed right after) and their DELs ran, %d left to the sweep; long-lived checked %d times",
		sweeps.Load(), adds.Load(), crashed.Load(), checks.Load())
	if sweeps.Load() < 2 {
		t.Errorf("only %d sweeps ran alongside the workers", sweeps.Load())
	}

	c.mustRun(nil, "gc", "--all")
	c.wantOnly(t, network, dataDir, long...)
	for i, k := range long {
		c.liveWorks(t, network, k, gw, 18200+i)
	}
}

// TestSharedBridgeAdd: the copy-paste network through the command line —
// validate names it, and an ADD that would duplicate a live address on the
// bridge fails naming both networks, after which `add` runs the chain's
// DEL and the first network's container keeps working.
func TestSharedBridgeAdd(t *testing.T) {
	c := newGCCLI(t)
	dataDir, nsDir := t.TempDir(), t.TempDir()
	c.conf("10-podman.conflist", gcChain("1.1.0", "podman", "cni-podman9", "10.76.0.0/24", dataDir))
	c.conf("11-podman-copy.conflist", gcChain("1.1.0", "podman-copy", "cni-podman9", "10.76.0.0/24", dataDir))
	if out := c.run("validate"); out.status != 1 || !strings.Contains(out.stderr, `networks "podman" (`) || !strings.Contains(out.stderr, `share bridge "cni-podman9"`) {
		t.Errorf("validate: %d %s", out.status, out.stderr)
	}
	a := newGCCtr(t, nsDir, "a")
	c.mustRun(portMapping(18500), "add", "podman", a.path)
	b := newGCCtr(t, nsDir, "b")
	out, err := c.exec(portMapping(18501), "add", "podman-copy", b.path)
	t.Logf("nftcni add podman-copy: status %d\n%s", out.status, out.stderr)
	want := `nftcni: plugin type="bridge" failed (add): address 10.76.0.2 is in use on bridge "cni-podman9" by network "podman" (container ` + a.id() +
		`, interface eth0); network "podman-copy" hands out addresses that overlap on the same bridge: give each network on a bridge a range of its own (` + "`nftcni validate`" + ` names such networks) (CNI error code 7)`
	if err != nil || out.status != 1 || !strings.Contains(out.stderr, want) || !strings.Contains(out.stderr, "ran DEL to clean up") {
		t.Errorf("second network's ADD: %v %d\n%s\nwant it to contain\n%s", err, out.status, out.stderr, want)
	}
	c.liveWorks(t, "podman", a, netip.MustParseAddr("10.76.0.1"), 18500)
	if got := plugintest.ReservationsOf(t, dataDir, "podman-copy"); len(got) != 0 {
		t.Errorf("podman-copy holds %v", got)
	}
}
