//go:build nftcni_bench

package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netns"
)

// Knobs (environment):
//
//	BENCH_ITER      sequential ADD/DEL pairs per chain (default 100)
//	BENCH_WORKERS   parallel workers for the throughput run (default 8)
//	BENCH_PARALLEL  attachments in the throughput run (default 64)
//	BENCH_EXISTING  attachments present during the "with M existing" run (default 200)
//	BASELINE_CNI_PATH  another plugin directory (e.g. the reference plugins) run with the same chains
func knob(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// chain is one network configuration list to measure.
type chain struct {
	name  string
	needs []string // plugin binaries the chain needs
	conf  string   // DATADIR is replaced by the IPAM data dir
}

var chains = []chain{
	{"loopback", []string{"loopback"},
		`{"cniVersion":"1.1.0","name":"bench-lo","plugins":[{"type":"loopback"}]}`},
	// The exec floor of a three-plugin chain (bridge, portmap, firewall:
	// host-local runs inside bridge): what the full chain would cost if
	// its plugins did nothing but start, read the config and answer.
	{"loopback x3", []string{"loopback"},
		`{"cniVersion":"1.1.0","name":"bench-lo3","plugins":[{"type":"loopback"},{"type":"loopback"},{"type":"loopback"}]}`},
	{"bridge+host-local", []string{"bridge", "host-local"},
		`{"cniVersion":"1.1.0","name":"bench-br","plugins":[{"type":"bridge","bridge":"bench0","isGateway":true,
		  "ipam":{"type":"host-local","subnet":"10.77.0.0/16","dataDir":"DATADIR"}}]}`},
	{"bridge+host-local+ipMasq", []string{"bridge", "host-local"},
		`{"cniVersion":"1.1.0","name":"bench-masq","plugins":[{"type":"bridge","bridge":"bench1","isGateway":true,"ipMasq":true,
		  "ipam":{"type":"host-local","subnet":"10.78.0.0/16","dataDir":"DATADIR"}}]}`},
	// Every attachment maps a host port of its own (portMappings
	// capability), so "with M existing" means M mappings in place.
	{"bridge+host-local+portmap", []string{"bridge", "host-local", "portmap"},
		`{"cniVersion":"1.1.0","name":"bench-pm","plugins":[{"type":"bridge","bridge":"bench2","isGateway":true,"ipMasq":true,
		  "ipam":{"type":"host-local","subnet":"10.79.0.0/16","dataDir":"DATADIR"}},
		  {"type":"portmap","capabilities":{"portMappings":true}}]}`},
	{"full (+portmap+firewall)", []string{"bridge", "host-local", "portmap", "firewall"},
		`{"cniVersion":"1.1.0","name":"bench-full","plugins":[{"type":"bridge","bridge":"bench3","isGateway":true,"ipMasq":true,
		  "ipam":{"type":"host-local","subnet":"10.80.0.0/16","dataDir":"DATADIR"}},
		  {"type":"portmap","capabilities":{"portMappings":true}},{"type":"firewall"}]}`},
}

// nsExec runs every plugin as a process inside the host namespace: the
// fork happens on a thread switched into it (netns.Do), so the whole child
// lives there.
type nsExec struct {
	invoke.RawExec
	version.PluginDecoder
	host *netns.NS
}

func (e *nsExec) ExecPlugin(ctx context.Context, path string, stdin []byte, env []string) (out []byte, err error) {
	derr := e.host.Do(func() error {
		out, err = e.RawExec.ExecPlugin(ctx, path, stdin, env)
		return nil
	})
	if derr != nil {
		return nil, derr
	}
	return out, err
}

type impl struct {
	name string
	dir  string
}

type stats struct {
	addP50, addP90, delP50, delP90 time.Duration
	addPerSec, delPerSec           float64
	addP50M, delP50M               time.Duration
	err                            error
}

func TestBench(t *testing.T) {
	privtest.Require(t)
	// Neither plugin set may find the machine's firewalld (the firewall
	// plugin's default backend when it runs).
	privtest.HideSystemBus()
	iter, workers, par, existing := knob("BENCH_ITER", 100), knob("BENCH_WORKERS", 8), knob("BENCH_PARALLEL", 64), knob("BENCH_EXISTING", 200)

	bin := t.TempDir()
	root, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatal(err)
	}
	build := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", filepath.Join(bin, "nftcni"), "./cmd/nftcni")
	build.Dir = filepath.Dir(strings.TrimSpace(string(root)))
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	if out, err := exec.Command(filepath.Join(bin, "nftcni"), "install", bin).CombinedOutput(); err != nil {
		t.Fatalf("install: %v\n%s", err, out)
	}
	impls := []impl{{"nftcni", bin}}
	if b := os.Getenv("BASELINE_CNI_PATH"); b != "" {
		impls = append(impls, impl{"baseline", b})
	}
	if fi, err := os.Stat(filepath.Join(bin, "nftcni")); err == nil {
		fmt.Printf("nftcni binary: %.1f MiB (stripped, linux/%s)\n", float64(fi.Size())/(1<<20), goarch())
	}
	fmt.Printf("iterations %d, throughput %d attachments with %d workers, %d existing attachments\n\n", iter, par, workers, existing)

	results := map[string]map[string]stats{}
	for _, c := range chains {
		for _, im := range impls {
			if missing := missingPlugins(im.dir, c.needs); missing != "" {
				fmt.Printf("%-26s %-9s skipped: %s not in %s\n", c.name, im.name, missing, im.dir)
				continue
			}
			s := run(t, c, im, iter, workers, par, existing)
			if results[c.name] == nil {
				results[c.name] = map[string]stats{}
			}
			results[c.name][im.name] = s
		}
	}
	fmt.Printf("\n%-26s %-9s %9s %9s %9s %9s %10s %10s %12s %12s\n", "chain", "impl", "ADD p50", "ADD p90", "DEL p50", "DEL p90",
		fmt.Sprintf("ADD/s(%d)", workers), fmt.Sprintf("DEL/s(%d)", workers), fmt.Sprintf("ADD p50@%d", existing), fmt.Sprintf("DEL p50@%d", existing))
	for _, c := range chains {
		for _, im := range impls {
			s, ok := results[c.name][im.name]
			if !ok {
				continue
			}
			if s.err != nil {
				fmt.Printf("%-26s %-9s FAILED: %v\n", c.name, im.name, s.err)
				t.Errorf("%s/%s: %v", c.name, im.name, s.err)
				continue
			}
			fmt.Printf("%-26s %-9s %9s %9s %9s %9s %10.0f %10.0f %12s %12s\n", c.name, im.name, ms(s.addP50), ms(s.addP90), ms(s.delP50), ms(s.delP90),
				s.addPerSec, s.delPerSec, ms(s.addP50M), ms(s.delP50M))
		}
	}
	fmt.Println()
	lo, ok := results["loopback"]["nftcni"]
	for _, c := range chains[1:] {
		s, ok2 := results[c.name]["nftcni"]
		if ok && ok2 && s.err == nil && lo.err == nil {
			fmt.Printf("%s vs loopback (exec floor): ADD p50 %.2fx, DEL p50 %.2fx; ADD p50 with %d existing vs empty: %.2fx\n",
				c.name, ratio(s.addP50, lo.addP50), ratio(s.delP50, lo.delP50), existing, ratio(s.addP50M, s.addP50))
		}
	}
	lo3, ok3 := results["loopback x3"]["nftcni"]
	full, okf := results["full (+portmap+firewall)"]["nftcni"]
	if ok3 && okf && lo3.err == nil && full.err == nil {
		fmt.Printf("full (+portmap+firewall) vs loopback x3 (the exec floor of a 3-plugin chain): ADD p50 %.2fx, DEL p50 %.2fx\n",
			ratio(full.addP50, lo3.addP50), ratio(full.delP50, lo3.delP50))
	}
	for _, c := range chains {
		n, ok1 := results[c.name]["nftcni"]
		b, ok2 := results[c.name]["baseline"]
		if ok1 && ok2 && n.err == nil && b.err == nil {
			fmt.Printf("%s nftcni/baseline: ADD p50 %.2fx, DEL p50 %.2fx, ADD/s %.2fx\n", c.name, ratio(n.addP50, b.addP50), ratio(n.delP50, b.delP50), n.addPerSec/b.addPerSec)
		}
	}
}

func goarch() string {
	out, _ := exec.Command("go", "env", "GOARCH").Output()
	return strings.TrimSpace(string(out))
}

func ratio(a, b time.Duration) float64 { return float64(a) / float64(b) }

func ms(d time.Duration) string { return fmt.Sprintf("%.2fms", float64(d.Microseconds())/1000) }

func missingPlugins(dir string, names []string) string {
	for _, n := range names {
		if _, err := os.Stat(filepath.Join(dir, n)); err != nil {
			return n
		}
	}
	return ""
}

// world is one chain under test: a host namespace, the CNI config and a
// pool of container namespaces.
type world struct {
	t      *testing.T
	cni    *libcni.CNIConfig
	list   *libcni.NetworkConfigList
	nsDir  string
	seq    atomic.Int64
	prefix string
}

type attachment struct {
	rt *libcni.RuntimeConf
	ns *netns.NS
}

func (w *world) newAttachment() (*attachment, error) {
	n := w.seq.Add(1)
	id := fmt.Sprintf("%s%06d", w.prefix, n)
	ns, err := netns.New(w.nsDir, id)
	if err != nil {
		return nil, err
	}
	// A host port per attachment, for chains with portmap (libcni passes
	// it only to plugins that declare the capability).
	port := 1024 + int(n)%60000
	rt := &libcni.RuntimeConf{ContainerID: id, NetNS: ns.Path(), IfName: "eth0", CapabilityArgs: map[string]any{
		"portMappings": []map[string]any{{"hostPort": port, "containerPort": 80, "protocol": "tcp"}},
	}}
	return &attachment{ns: ns, rt: rt}, nil
}

func (w *world) drop(a *attachment) {
	a.ns.Close()
	netns.Remove(a.ns.Path())
}

func (w *world) add(a *attachment) (time.Duration, error) {
	start := time.Now()
	_, err := w.cni.AddNetworkList(context.Background(), w.list, a.rt)
	return time.Since(start), err
}

func (w *world) del(a *attachment) (time.Duration, error) {
	start := time.Now()
	err := w.cni.DelNetworkList(context.Background(), w.list, a.rt)
	return time.Since(start), err
}

func run(t *testing.T, c chain, im impl, iter, workers, par, existing int) (s stats) {
	host := privtest.NewNS(t)
	dir := t.TempDir()
	list, err := libcni.ConfListFromBytes([]byte(strings.ReplaceAll(c.conf, "DATADIR", filepath.Join(dir, "ipam"))))
	if err != nil {
		t.Fatal(err)
	}
	w := &world{t: t, list: list, nsDir: filepath.Join(dir, "ns"), prefix: "b" + strings.NewReplacer("+", "", "-", "").Replace(c.name)[:4],
		cni: libcni.NewCNIConfigWithCacheDir([]string{im.dir}, filepath.Join(dir, "cache"), &nsExec{host: host})}

	// Warm up: page cache, bridge creation, nft tables.
	if _, _, err := w.sequential(5); err != nil {
		s.err = fmt.Errorf("warm-up: %w", err)
		return s
	}
	adds, dels, err := w.sequential(iter)
	if err != nil {
		s.err = err
		return s
	}
	s.addP50, s.addP90 = pct(adds, 50), pct(adds, 90)
	s.delP50, s.delP90 = pct(dels, 50), pct(dels, 90)

	if s.addPerSec, s.delPerSec, err = w.parallel(par, workers); err != nil {
		s.err = err
		return s
	}

	// With M existing attachments.
	pre, err := w.addMany(existing, workers)
	if err != nil {
		s.err = fmt.Errorf("creating %d existing attachments: %w", existing, err)
		return s
	}
	adds, dels, err = w.sequential(iter)
	if err != nil {
		s.err = err
		return s
	}
	s.addP50M, s.delP50M = pct(adds, 50), pct(dels, 50)
	if err := w.delMany(pre, workers); err != nil {
		s.err = err
	}
	fmt.Printf("%-26s %-9s done\n", c.name, im.name)
	return s
}

func (w *world) sequential(n int) (adds, dels []time.Duration, err error) {
	for i := 0; i < n; i++ {
		a, err := w.newAttachment()
		if err != nil {
			return nil, nil, err
		}
		da, err := w.add(a)
		if err != nil {
			w.drop(a)
			return nil, nil, fmt.Errorf("ADD: %w", err)
		}
		dd, err := w.del(a)
		w.drop(a)
		if err != nil {
			return nil, nil, fmt.Errorf("DEL: %w", err)
		}
		adds, dels = append(adds, da), append(dels, dd)
	}
	return adds, dels, nil
}

func (w *world) addMany(n, workers int) ([]*attachment, error) {
	var atts []*attachment
	for i := 0; i < n; i++ {
		a, err := w.newAttachment()
		if err != nil {
			return nil, err
		}
		atts = append(atts, a)
	}
	err := each(atts, workers, func(a *attachment) error { _, err := w.add(a); return err })
	return atts, err
}

func (w *world) delMany(atts []*attachment, workers int) error {
	err := each(atts, workers, func(a *attachment) error { _, err := w.del(a); return err })
	for _, a := range atts {
		w.drop(a)
	}
	return err
}

func (w *world) parallel(n, workers int) (addRate, delRate float64, err error) {
	var atts []*attachment
	for i := 0; i < n; i++ {
		a, err := w.newAttachment()
		if err != nil {
			return 0, 0, err
		}
		atts = append(atts, a)
	}
	defer func() {
		for _, a := range atts {
			w.drop(a)
		}
	}()
	start := time.Now()
	if err := each(atts, workers, func(a *attachment) error { _, err := w.add(a); return err }); err != nil {
		return 0, 0, fmt.Errorf("parallel ADD: %w", err)
	}
	addRate = float64(n) / time.Since(start).Seconds()
	start = time.Now()
	if err := each(atts, workers, func(a *attachment) error { _, err := w.del(a); return err }); err != nil {
		return 0, 0, fmt.Errorf("parallel DEL: %w", err)
	}
	delRate = float64(n) / time.Since(start).Seconds()
	return addRate, delRate, nil
}

// each runs fn over items with the given number of workers and returns the
// first error.
func each(items []*attachment, workers int, fn func(*attachment) error) error {
	var wg sync.WaitGroup
	var first error
	var mu sync.Mutex
	ch := make(chan *attachment)
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for a := range ch {
				if err := fn(a); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for _, a := range items {
		ch <- a
	}
	close(ch)
	wg.Wait()
	return first
}

func pct(d []time.Duration, p int) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[(len(s)-1)*p/100]
}
