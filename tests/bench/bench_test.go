//go:build nftcni_bench

package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/nftcni/nftcni/attachrec"
	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netns"
)

// Knobs (environment):
//
//	BENCH_ITER      sequential ADD/DEL pairs per chain (default 100)
//	BENCH_WORKERS   parallel workers for the throughput run (default 8)
//	BENCH_PARALLEL  attachments in the throughput run (default 64)
//	BENCH_EXISTING  attachments present during the "with M existing" runs, comma-separated
//	                (default 110,250,1000: the Kubernetes default of pods per node, a dense
//	                node, and the growth target's); each count is reached by adding to
//	                the previous one
//	BENCH_CHAINS    only the chains whose names contain one of these comma-separated words
//	BENCH_LIST      attachments of the full chain in place while `nftcni list` and
//	                `gc --all` are timed (default 250)
//	BENCH_EXECS     VERSION execs per plugin name for the exec floor (default 50; the
//	                baseline's loopback runs as often per name), measured twice: as
//	                installed, and with the binaries' page cache read back in small
//	                folios as after a reboot (reread)
//	BENCH_STATUS    STATUS calls per network and implementation (default 100)
//	BENCH_STATUS_FILL  reservations in host-local's store for the STATUS runs that say so (default 1000)
//	BASELINE_CNI_PATH  another plugin directory (e.g. the reference plugins, `make reference`) run with the same chains
func knob(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// counts is a knob holding a comma-separated list of positive counts,
// sorted and without duplicates; def when unset or unreadable.
func counts(name string, def []int) []int {
	var out []int
	for _, f := range strings.Split(os.Getenv(name), ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v <= 0 {
			return def
		}
		out = append(out, v)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// chain is one network configuration list to measure.
type chain struct {
	name  string
	needs []string // plugin binaries the chain needs
	conf  string   // DATADIR is replaced by the IPAM data dir
	// reread: the chain runs with the plugin binaries' page cache read
	// back in small folios (see reread), as after a reboot, rather than as
	// install left it; only its sequential ADD/DEL pairs are measured.
	reread bool
}

var chains = []chain{
	{"loopback", []string{"loopback"},
		`{"cniVersion":"1.1.0","name":"bench-lo","plugins":[{"type":"loopback"}]}`, false},
	{"loopback (re-read)", []string{"loopback"},
		`{"cniVersion":"1.1.0","name":"bench-lor","plugins":[{"type":"loopback"}]}`, true},
	// The exec floor of a three-plugin chain (bridge, portmap, firewall:
	// host-local runs inside bridge): what the full chain would cost if
	// its plugins did nothing but start, read the config and answer.
	{"loopback x3", []string{"loopback"},
		`{"cniVersion":"1.1.0","name":"bench-lo3","plugins":[{"type":"loopback"},{"type":"loopback"},{"type":"loopback"}]}`, false},
	{"bridge+host-local", []string{"bridge", "host-local"},
		`{"cniVersion":"1.1.0","name":"bench-br","plugins":[{"type":"bridge","bridge":"bench0","isGateway":true,
		  "ipam":{"type":"host-local","subnet":"10.77.0.0/16","dataDir":"DATADIR"}}]}`, false},
	{"bridge+host-local+ipMasq", []string{"bridge", "host-local"},
		`{"cniVersion":"1.1.0","name":"bench-masq","plugins":[{"type":"bridge","bridge":"bench1","isGateway":true,"ipMasq":true,
		  "ipam":{"type":"host-local","subnet":"10.78.0.0/16","dataDir":"DATADIR"}}]}`, false},
	// Every attachment maps a host port of its own (portMappings
	// capability), so "with M existing" means M mappings in place.
	{"bridge+host-local+portmap", []string{"bridge", "host-local", "portmap"},
		`{"cniVersion":"1.1.0","name":"bench-pm","plugins":[{"type":"bridge","bridge":"bench2","isGateway":true,"ipMasq":true,
		  "ipam":{"type":"host-local","subnet":"10.79.0.0/16","dataDir":"DATADIR"}},
		  {"type":"portmap","capabilities":{"portMappings":true}}]}`, false},
	{"full (+portmap+firewall)", []string{"bridge", "host-local", "portmap", "firewall"},
		`{"cniVersion":"1.1.0","name":"bench-full","plugins":[{"type":"bridge","bridge":"bench3","isGateway":true,"ipMasq":true,
		  "ipam":{"type":"host-local","subnet":"10.80.0.0/16","dataDir":"DATADIR"}},
		  {"type":"portmap","capabilities":{"portMappings":true}},{"type":"firewall"}]}`, false},
	// The full chain as it runs on a host without iptables (an
	// nftables-only host): no accepts in iptables-nft's FORWARD chains,
	// forced here with iptablesForwardAccepts on a host that has the
	// program (the reference ignores the key).
	{"full, no iptables accepts", []string{"bridge", "host-local", "portmap", "firewall"},
		`{"cniVersion":"1.1.0","name":"bench-fullnoipt","plugins":[{"type":"bridge","bridge":"bench4","isGateway":true,"ipMasq":true,
		  "ipam":{"type":"host-local","subnet":"10.81.0.0/16","dataDir":"DATADIR"}},
		  {"type":"portmap","capabilities":{"portMappings":true},"iptablesForwardAccepts":"never"},
		  {"type":"firewall","iptablesForwardAccepts":"never"}]}`, false},
}

// oursOnly are the chains measured for nftcni alone: the reference ignores
// the key that makes "full, no iptables accepts" differ from the full
// chain, so for it that chain is the full chain again.
var oursOnly = map[string]bool{"full, no iptables accepts": true}

// nsExec runs every plugin as a process inside the host namespace: the
// fork happens on a thread switched into it (netns.Do), so the whole child
// lives there.
type nsExec struct {
	invoke.RawExec
	version.PluginDecoder
	host *netns.NS
	cpu  pluginCPU
}

func (e *nsExec) ExecPlugin(ctx context.Context, path string, stdin []byte, env []string) (out []byte, err error) {
	var c0 time.Duration
	if e.cpu.on {
		c0 = childCPU()
	}
	derr := e.host.Do(func() error {
		out, err = e.RawExec.ExecPlugin(ctx, path, stdin, env)
		return nil
	})
	if e.cpu.on {
		e.cpu.add(filepath.Base(path), env, childCPU()-c0)
	}
	if derr != nil {
		return nil, derr
	}
	return out, err
}

// pluginCPU is the CPU of each plugin exec, by plugin and command, while
// on: the sequential runs only, where nothing else of ours runs, so the
// children's CPU between the start and the end of an exec is that exec's
// (with the processes it ran and waited for: an IPAM plugin it exec'd
// counts as its own). It says which plugin of a chain grew.
type pluginCPU struct {
	on  bool
	cpu map[string][]time.Duration // "portmap ADD"
}

func (p *pluginCPU) add(plugin string, env []string, d time.Duration) {
	cmd := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "CNI_COMMAND="); ok {
			cmd = v
		}
	}
	if p.cpu == nil {
		p.cpu = map[string][]time.Duration{}
	}
	k := plugin + " " + cmd
	p.cpu[k] = append(p.cpu[k], d)
}

// take is the p50 of each plugin exec recorded since the last take.
func (p *pluginCPU) take() map[string]time.Duration {
	out := map[string]time.Duration{}
	for k, d := range p.cpu {
		out[k] = pct(d, 50)
	}
	p.cpu = nil
	return out
}

type impl struct {
	name string
	dir  string
}

// stats of one chain. The CPU figures are the plugin processes' own (user
// and system time of the exec'd children, sequential runs only): unlike
// the latencies they do not include waits (RCU grace periods, locks) and
// move little with the machine's load.
type stats struct {
	addP50, addP90, delP50, delP90 time.Duration
	addCPU, delCPU                 time.Duration            // p50
	plugins                        map[string]time.Duration // p50 per plugin exec ("portmap ADD"), pluginCPU
	addPerSec, delPerSec           float64
	at                             []withM   // one per BENCH_EXISTING count, ascending
	reload                         reloadRun // reloadChain, nftcni only, with the most existing
	err                            error
}

// reloadChain is the chain whose phase with existing attachments ends, at
// the largest count, with the reload phase (reloadRun).
const reloadChain = "full (+portmap+firewall)"

// reloadRun is the reload phase: with the existing attachments in place,
// `nft flush ruleset` in the host namespace, then `nftcni reload` (what
// nftcni-reload.service runs) until CHECK of one attachment passes again,
// then a second reload that has nothing to do.
type reloadRun struct {
	m            int
	fresh, again time.Duration
}

// withM is the sequential run with m existing attachments.
type withM struct {
	m              int
	addP50, delP50 time.Duration
	addCPU, delCPU time.Duration // p50
	plugins        map[string]time.Duration
}

// last is the run with the most existing attachments.
func (s stats) last() withM { return s.at[len(s.at)-1] }

// growth is how much the CPU per ADD and per DEL grew from the empty
// namespace to the one with e.m existing attachments.
func (s stats) growth(e withM) (add, del time.Duration) {
	return e.addCPU - s.addCPU, e.delCPU - s.delCPU
}

// wanted reports whether BENCH_CHAINS selects chain name.
func wanted(name string) bool {
	sel := os.Getenv("BENCH_CHAINS")
	if sel == "" {
		return true
	}
	for _, w := range strings.Split(sel, ",") {
		if w = strings.TrimSpace(w); w != "" && strings.Contains(name, w) {
			return true
		}
	}
	return false
}

func TestBench(t *testing.T) {
	privtest.Require(t)
	// Neither plugin set may find the machine's firewalld (the firewall
	// plugin's default backend when it runs).
	privtest.HideSystemBus()
	// The plugins' attachment records go to a tmpfs of the run's own, as
	// /run is on a real host (on this machine it is not), not to the
	// machine's /run/nftcni.
	os.Setenv(attachrec.EnvDir, privtest.SmallFS(t, 4096))
	iter, workers, par := knob("BENCH_ITER", 100), knob("BENCH_WORKERS", 8), knob("BENCH_PARALLEL", 64)
	existing := counts("BENCH_EXISTING", []int{110, 250, 1000})
	most := existing[len(existing)-1]

	bin, built := t.TempDir(), t.TempDir()
	root, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatal(err)
	}
	build := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", filepath.Join(built, "nftcni"), "./cmd/nftcni")
	build.Dir = filepath.Dir(strings.TrimSpace(string(root)))
	// Static, as `make build` makes it: with cgo (Go's default when a C
	// compiler is installed) the binary is dynamically linked and every
	// exec pays the dynamic loader and libc's start, ~0.9 ms here.
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	// Installed the way users install it: install leaves the binary in the
	// page cache in large folios where the kernel can (cmd/nftcni
	// readBackHuge); the runs marked "page cache re-read" measure it after
	// the kernel has read it back in small ones.
	install := func() {
		if out, err := exec.Command(filepath.Join(built, "nftcni"), "install", bin).CombinedOutput(); err != nil {
			t.Fatalf("install: %v\n%s", err, out)
		}
	}
	install()
	impls := []impl{{"nftcni", bin}}
	if b := os.Getenv("BASELINE_CNI_PATH"); b != "" {
		impls = append(impls, impl{"baseline", b})
	}
	if fi, err := os.Stat(filepath.Join(bin, "nftcni")); err == nil {
		fmt.Printf("nftcni binary: %.1f MiB (stripped, linux/%s)\n", float64(fi.Size())/(1<<20), goarch())
	}
	fmt.Printf("iterations %d, throughput %d attachments with %d workers, %s existing attachments\n\n", iter, par, workers, joinInts(existing))

	baseline := os.Getenv("BASELINE_CNI_PATH")
	if baseline != "" && missingPlugins(baseline, []string{"loopback"}) != "" {
		baseline = ""
	}
	rereadAll := func() {
		dirs := []string{bin}
		if baseline != "" {
			dirs = append(dirs, baseline)
		}
		if err := reread(dirs...); err != nil {
			t.Fatalf("re-reading the plugin binaries: %v", err)
		}
	}
	fl, err := execFloor("as installed", bin, baseline, knob("BENCH_EXECS", 50))
	if err != nil {
		t.Fatalf("exec floor: %v", err)
	}
	fl.print()
	rereadAll()
	flr, err := execFloor("page cache re-read", bin, baseline, knob("BENCH_EXECS", 50))
	if err != nil {
		t.Fatalf("exec floor: %v", err)
	}
	flr.print()
	install()
	if wanted("status") {
		if err := statusBench(impls, knob("BENCH_STATUS", 100), knob("BENCH_STATUS_FILL", 1000)); err != nil {
			t.Errorf("STATUS: %v", err)
		}
	}
	fmt.Println()

	results := map[string]map[string]stats{}
	for _, c := range chains {
		if !wanted(c.name) {
			continue
		}
		var ims []impl
		for _, im := range impls {
			if oursOnly[c.name] && im.name != "nftcni" {
				continue
			}
			if missing := missingPlugins(im.dir, c.needs); missing != "" {
				fmt.Printf("%-26s %-9s skipped: %s not in %s\n", c.name, im.name, missing, im.dir)
				continue
			}
			ims = append(ims, im)
		}
		if c.reread {
			rereadAll()
		}
		results[c.name] = run(t, c, ims, iter, workers, par, existing)
		if c.reread {
			install()
		}
	}
	fmt.Printf("\n%-26s %-9s %9s %9s %9s %9s %10s %10s %12s %12s\n", "chain", "impl", "ADD p50", "ADD p90", "DEL p50", "DEL p90",
		fmt.Sprintf("ADD/s(%d)", workers), fmt.Sprintf("DEL/s(%d)", workers), fmt.Sprintf("ADD p50@%d", most), fmt.Sprintf("DEL p50@%d", most))
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
			if c.reread {
				fmt.Printf("%-26s %-9s %9s %9s %9s %9s %10s %10s %12s %12s\n", c.name, im.name, ms(s.addP50), ms(s.addP90), ms(s.delP50), ms(s.delP90),
					"-", "-", "-", "-")
				continue
			}
			fmt.Printf("%-26s %-9s %9s %9s %9s %9s %10.0f %10.0f %12s %12s\n", c.name, im.name, ms(s.addP50), ms(s.addP90), ms(s.delP50), ms(s.delP90),
				s.addPerSec, s.delPerSec, ms(s.last().addP50), ms(s.last().delP50))
		}
	}
	fmt.Printf("\nCPU of the plugin processes (p50 of the sequential runs), ADD / DEL, empty and with M existing:\n%-26s %-9s %19s", "chain", "impl", "empty")
	for _, m := range existing {
		fmt.Printf(" %19s", fmt.Sprintf("@%d", m))
	}
	fmt.Println()
	for _, c := range chains {
		for _, im := range impls {
			if s, ok := results[c.name][im.name]; ok && s.err == nil {
				fmt.Printf("%-26s %-9s %19s", c.name, im.name, ms(s.addCPU)+" / "+ms(s.delCPU))
				for _, e := range s.at {
					fmt.Printf(" %19s", ms(e.addCPU)+" / "+ms(e.delCPU))
				}
				fmt.Println()
			}
		}
	}
	fmt.Printf("\nCPU growth from empty, ADD / DEL:\n%-26s %-9s", "chain", "impl")
	for _, m := range existing {
		fmt.Printf(" %19s", fmt.Sprintf("@%d", m))
	}
	fmt.Println()
	for _, c := range chains[1:] {
		if c.reread {
			continue
		}
		for _, im := range impls {
			if s, ok := results[c.name][im.name]; ok && s.err == nil {
				fmt.Printf("%-26s %-9s", c.name, im.name)
				for _, e := range s.at {
					ga, gd := s.growth(e)
					fmt.Printf(" %19s", signed(ga)+" / "+signed(gd))
				}
				fmt.Println()
			}
		}
	}
	pluginGrowth(results, existing)
	fmt.Println()
	lo, ok := results["loopback"]["nftcni"]
	for _, c := range chains[1:] {
		if c.reread {
			continue
		}
		s, ok2 := results[c.name]["nftcni"]
		if ok && ok2 && s.err == nil && lo.err == nil {
			fmt.Printf("%s vs loopback (exec floor): ADD p50 %.2fx, DEL p50 %.2fx; ADD p50 with %d existing vs empty: %.2fx\n",
				c.name, ratio(s.addP50, lo.addP50), ratio(s.delP50, lo.delP50), most, ratio(s.last().addP50, s.addP50))
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
			fmt.Printf("%s nftcni/baseline: ADD p50 %.2fx, DEL p50 %.2fx, ADD/s %.2fx, DEL/s %.2fx; CPU: ADD %.2fx, DEL %.2fx\n", c.name,
				ratio(n.addP50, b.addP50), ratio(n.delP50, b.delP50), n.addPerSec/b.addPerSec, n.delPerSec/b.delPerSec,
				ratio(n.addCPU, b.addCPU), ratio(n.delCPU, b.delCPU))
		}
	}
	for _, c := range chains {
		if s, ok := results[c.name]["nftcni"]; ok && s.err == nil && s.reload.fresh > 0 {
			fmt.Printf("%s: nft flush ruleset with %d attachments, then nftcni reload: state back (CHECK passes) after %s (%s per attachment); a second reload, nothing to do: %s\n",
				c.name, s.reload.m, ms(s.reload.fresh), ms(s.reload.fresh/time.Duration(s.reload.m)), ms(s.reload.again))
		}
	}
	hostTools(t, bin, knob("BENCH_LIST", 250), workers)
	targets([]floor{fl, flr}, results, workers)
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

// targets prints, last, how the run compares with the performance targets
// docs/performance.md states: every exec no costlier than the baseline's
// loopback and the loopback chain at most its CPU; the full chain's CPU
// growing with existing attachments by no more than the bridge+host-local
// chain's own growth plus 10 %; parallel DEL at least twice the
// sequential DEL rate. The growth is checked at every BENCH_EXISTING count.
func targets(floors []floor, results map[string]map[string]stats, workers int) {
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "missed"
	}
	fmt.Println("\nTargets (docs/performance.md):")
	for _, fl := range floors {
		if fl.base > 0 && len(fl.names) > 0 {
			worst := fl.names[0]
			r := ratio(fl.cpu[worst], fl.base)
			fmt.Printf("  exec floor, %s: costliest plugin exec (%s) %.2fx the baseline's loopback (target <= 1.00x): %s\n", fl.state, worst, r, verdict(r <= 1))
		}
	}
	for _, c := range []string{"loopback", "loopback (re-read)"} {
		if n, b := results[c]["nftcni"], results[c]["baseline"]; n.err == nil && b.err == nil && n.addCPU > 0 && b.addCPU > 0 {
			ra, rd := ratio(n.addCPU, b.addCPU), ratio(n.delCPU, b.delCPU)
			fmt.Printf("  %s chain CPU vs baseline: ADD %.2fx, DEL %.2fx (target <= 1.00x): %s\n", c, ra, rd, verdict(ra <= 1 && rd <= 1))
		}
	}
	br, okb := results["bridge+host-local"]["nftcni"]
	full, okf := results["full (+portmap+firewall)"]["nftcni"]
	noIpt, okn := results["full, no iptables accepts"]["nftcni"]
	if okb && okf && br.err == nil && full.err == nil {
		for i, e := range full.at {
			ga, gd := full.growth(e)
			la, ld := br.growth(br.at[i])
			la, ld = allowance(la), allowance(ld)
			fmt.Printf("  CPU growth 0 -> %d attachments, full chain: ADD %s, DEL %s (target: bridge+host-local's growth +10%%, ADD %s, DEL %s): %s\n",
				e.m, signed(ga), signed(gd), signed(la), signed(ld), verdict(ga <= la && gd <= ld))
			if okn && noIpt.err == nil {
				na, nd := noIpt.growth(noIpt.at[i])
				fmt.Printf("    without accepts in iptables-nft's FORWARD (an nftables-only host): ADD %s, DEL %s: %s\n",
					signed(na), signed(nd), verdict(na <= la && nd <= ld))
			}
		}
	}
	if okf && full.err == nil && full.delP50 > 0 {
		seq := float64(time.Second) / float64(full.delP50)
		r := full.delPerSec / seq
		fmt.Printf("  parallel DEL, full chain: %.1f/s with %d workers, sequential %.1f/s (1/DEL p50): %.2fx (target >= 2x): %s\n",
			full.delPerSec, workers, seq, r, verdict(r >= 2))
	}
}

// pluginGrowth prints, for nftcni's chains of more than one plugin, how
// much each plugin exec's CPU grew from the empty namespace to each count:
// which plugin of a chain its growth comes from. (A plugin that runs
// another in-process, as bridge runs host-local, counts it as its own.)
func pluginGrowth(results map[string]map[string]stats, existing []int) {
	fmt.Printf("\nCPU growth from empty per plugin exec (p50), ADD / DEL, nftcni:\n%-26s %-10s", "chain", "plugin")
	for _, m := range existing {
		fmt.Printf(" %19s", fmt.Sprintf("@%d", m))
	}
	fmt.Println()
	for _, c := range chains {
		s, ok := results[c.name]["nftcni"]
		if !ok || s.err != nil || c.reread || len(c.needs) < 2 || len(s.at) == 0 {
			continue
		}
		var names []string
		for k := range s.plugins {
			if p, ok := strings.CutSuffix(k, " ADD"); ok {
				names = append(names, p)
			}
		}
		slices.Sort(names)
		for _, p := range names {
			fmt.Printf("%-26s %-10s", c.name, p)
			for _, e := range s.at {
				ga := e.plugins[p+" ADD"] - s.plugins[p+" ADD"]
				gd := e.plugins[p+" DEL"] - s.plugins[p+" DEL"]
				fmt.Printf(" %19s", signed(ga)+" / "+signed(gd))
			}
			fmt.Println()
		}
	}
}

// allowance is the growth target for a chain whose reference chain grew
// by g: g plus 10 % of its size (a negative growth, which the machine's
// load can give a short run, allows its own value plus 10 % of it).
func allowance(g time.Duration) time.Duration {
	if g < 0 {
		return g - g/10
	}
	return g + g/10
}

func goarch() string {
	out, _ := exec.Command("go", "env", "GOARCH").Output()
	return strings.TrimSpace(string(out))
}

func ratio(a, b time.Duration) float64 { return float64(a) / float64(b) }

func ms(d time.Duration) string { return fmt.Sprintf("%.2fms", float64(d.Microseconds())/1000) }

// signed is ms with the sign always written: a growth can be negative
// when the machine's load moved.
func signed(d time.Duration) string { return fmt.Sprintf("%+.2fms", float64(d.Microseconds())/1000) }

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
	t       *testing.T
	host    *netns.NS
	dir     string
	plugins string // the plugin directory
	cni     *libcni.CNIConfig
	exec    *nsExec
	list    *libcni.NetworkConfigList
	nsDir   string
	seq     atomic.Int64
	prefix  string
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

// run measures chain c with every implementation. The sequential phase
// in an empty namespace alternates between them ADD/DEL pair by pair, so
// that a change of the machine's load in the middle of a run weighs on all
// of them alike; the throughput runs and the phase with M existing
// attachments take turns.
func run(t *testing.T, c chain, ims []impl, iter, workers, par int, existing []int) map[string]stats {
	out := map[string]stats{}
	var worlds []*world
	var live []impl
	for _, im := range ims {
		w, err := newWorld(t, c, im)
		if err == nil {
			_, err = w.sequential(5) // warm up: page cache, bridge creation, nft tables
		}
		if err != nil {
			out[im.name] = stats{err: fmt.Errorf("warm-up: %w", err)}
			continue
		}
		worlds, live = append(worlds, w), append(live, im)
	}
	fail := func(i int, err error) {
		out[live[i].name] = stats{err: err}
	}
	ok := func(i int) bool { return out[live[i].name].err == nil }

	for _, w := range worlds {
		w.exec.cpu.on = true
	}
	seq, err := sequentialAll(worlds, iter)
	if err != nil {
		for i := range worlds {
			fail(i, err)
		}
		return out
	}
	st := make([]stats, len(worlds))
	for i := range worlds {
		st[i].addP50, st[i].addP90 = pct(seq[i].adds, 50), pct(seq[i].adds, 90)
		st[i].delP50, st[i].delP90 = pct(seq[i].dels, 50), pct(seq[i].dels, 90)
		st[i].addCPU, st[i].delCPU = pct(seq[i].addCPU, 50), pct(seq[i].delCPU, 50)
		st[i].plugins = worlds[i].exec.cpu.take()
		worlds[i].exec.cpu.on = false
		if c.reread {
			continue
		}
		if st[i].addPerSec, st[i].delPerSec, err = worlds[i].parallel(par, workers); err != nil {
			fail(i, err)
		}
	}

	// With M existing attachments, for each M in ascending order (the
	// attachments of a smaller M stay and more are added): one
	// implementation at a time, its attachments gone before the next
	// one's are made. Alternating here
	// could bill one implementation for the other's kernel work: without
	// IRQ time accounting (CONFIG_IRQ_TIME_ACCOUNTING, off in this
	// machine's kernel) softirq work such as RCU callbacks freeing replaced
	// rule blobs and deleted devices is charged to whichever process is on
	// the CPU, and with thousands of iptables rules in the other
	// namespace that is a lot of it.
	for i, w := range worlds {
		if !ok(i) || c.reread {
			continue
		}
		var pre []*attachment
		for _, m := range existing {
			more, err := w.addMany(m-len(pre), workers)
			pre = append(pre, more...)
			if err != nil {
				fail(i, fmt.Errorf("creating %d existing attachments: %w", m, err))
				break
			}
			w.exec.cpu.on = true
			r, err := w.sequential(iter)
			w.exec.cpu.on = false
			if err != nil {
				fail(i, fmt.Errorf("with %d existing: %w", m, err))
				break
			}
			st[i].at = append(st[i].at, withM{m: m, addP50: pct(r.adds, 50), delP50: pct(r.dels, 50),
				addCPU: pct(r.addCPU, 50), delCPU: pct(r.delCPU, 50), plugins: w.exec.cpu.take()})
		}
		if c.name == reloadChain && live[i].name == "nftcni" && ok(i) && len(pre) > 0 {
			var err error
			if st[i].reload, err = w.reloadAfterFlush(pre); err != nil {
				fail(i, err)
			}
		}
		if err := w.delMany(pre, workers); err != nil && ok(i) {
			fail(i, err)
		}
	}
	for i := range worlds {
		if ok(i) {
			out[live[i].name] = st[i]
		}
		fmt.Printf("%-26s %-9s done\n", c.name, live[i].name)
	}
	return out
}

func newWorld(t *testing.T, c chain, im impl) (*world, error) {
	host := privtest.NewNS(t)
	dir := t.TempDir()
	list, err := libcni.ConfListFromBytes([]byte(strings.ReplaceAll(c.conf, "DATADIR", filepath.Join(dir, "ipam"))))
	if err != nil {
		return nil, err
	}
	ex := &nsExec{host: host}
	return &world{t: t, host: host, dir: dir, plugins: im.dir, list: list, nsDir: filepath.Join(dir, "ns"), prefix: "b" + strings.NewReplacer("+", "", "-", "").Replace(c.name)[:4],
		cni: libcni.NewCNIConfigWithCacheDir([]string{im.dir}, filepath.Join(dir, "cache"), ex), exec: ex}, nil
}

// sequentialAll runs n ADD/DEL pairs in each world, alternating between
// the worlds pair by pair.
func sequentialAll(worlds []*world, n int) ([]seqRuns, error) {
	out := make([]seqRuns, len(worlds))
	for range n {
		for i, w := range worlds {
			r, err := w.sequential(1)
			if err != nil {
				return nil, err
			}
			out[i].adds = append(out[i].adds, r.adds...)
			out[i].dels = append(out[i].dels, r.dels...)
			out[i].addCPU = append(out[i].addCPU, r.addCPU...)
			out[i].delCPU = append(out[i].delCPU, r.delCPU...)
		}
	}
	return out, nil
}

// seqRuns are the latencies and CPU times of sequential ADD/DEL pairs.
type seqRuns struct{ adds, dels, addCPU, delCPU []time.Duration }

// childCPU is the user plus system time of every waited-for child so far.
func childCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru); err != nil {
		return 0
	}
	return cpuOf(&ru)
}

// cpuOf is the user plus system time of a rusage.
func cpuOf(ru *syscall.Rusage) time.Duration { return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()) }

func (w *world) sequential(n int) (r seqRuns, err error) {
	for i := 0; i < n; i++ {
		a, err := w.newAttachment()
		if err != nil {
			return r, err
		}
		c0 := childCPU()
		da, err := w.add(a)
		if err != nil {
			w.drop(a)
			return r, fmt.Errorf("ADD: %w", err)
		}
		c1 := childCPU()
		dd, err := w.del(a)
		c2 := childCPU()
		w.drop(a)
		if err != nil {
			return r, fmt.Errorf("DEL: %w", err)
		}
		r.adds, r.dels = append(r.adds, da), append(r.dels, dd)
		r.addCPU, r.delCPU = append(r.addCPU, c1-c0), append(r.delCPU, c2-c1)
	}
	return r, nil
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

// reloadAfterFlush is the reload phase (reloadRun) with the attachments
// atts in place; the first of them is checked before and after.
func (w *world) reloadAfterFlush(atts []*attachment) (reloadRun, error) {
	r := reloadRun{m: len(atts)}
	check := func() error { return w.cni.CheckNetworkList(context.Background(), w.list, atts[0].rt) }
	if err := check(); err != nil {
		return r, fmt.Errorf("reload phase: CHECK before the flush: %w", err)
	}
	flush := exec.Command("nft", "flush", "ruleset")
	if err := netns.StartIn(w.host, flush); err != nil {
		return r, fmt.Errorf("reload phase: nft flush ruleset: %w", err)
	}
	if err := flush.Wait(); err != nil {
		return r, fmt.Errorf("reload phase: nft flush ruleset: %w", err)
	}
	if check() == nil {
		return r, errors.New("reload phase: CHECK passes after the flush")
	}
	reload := func() (time.Duration, error) {
		start := time.Now()
		out, err := exec.Command(filepath.Join(w.plugins, "nftcni"), "reload", "-host-netns", w.host.Path(),
			"-cache-dir", filepath.Join(w.dir, "cache")).CombinedOutput()
		if err != nil {
			return 0, fmt.Errorf("reload phase: nftcni reload: %v: %s", err, out)
		}
		return time.Since(start), nil
	}
	var err error
	if r.fresh, err = reload(); err != nil {
		return r, err
	}
	if err := check(); err != nil {
		return r, fmt.Errorf("reload phase: CHECK after nftcni reload: %w", err)
	}
	r.again, err = reload()
	return r, err
}
