//go:build nftcni_bench

package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nftcni/nftcni/netns"
)

// hostTools measures the host-wide commands with n attachments of the full
// chain in place (BENCH_LIST, default 250): `nftcni list` with its drift
// column found three ways (CHECK with this binary's plugins in-process,
// the default; every plugin exec'd, as a runtime's CHECK; none), and a
// `gc --all` sweep that finds nothing stale. The commands run as processes
// inside the world's host namespace, as on a real host.
func hostTools(t *testing.T, bin string, n, workers int) {
	i := slices.IndexFunc(chains, func(c chain) bool { return c.name == "full (+portmap+firewall)" })
	c := chains[i]
	if !wanted(c.name) || missingPlugins(bin, c.needs) != "" {
		return
	}
	w, err := newWorld(t, c, impl{"nftcni", bin})
	if err != nil {
		t.Errorf("host tools: %v", err)
		return
	}
	confDir := filepath.Join(w.dir, "net.d")
	if err := os.MkdirAll(confDir, 0o755); err != nil {
		t.Fatal(err)
	}
	conf := strings.ReplaceAll(c.conf, "DATADIR", filepath.Join(w.dir, "ipam"))
	if err := os.WriteFile(filepath.Join(confDir, "10-bench.conflist"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	atts, err := w.addMany(n, workers)
	defer func() {
		if err := w.delMany(atts, workers); err != nil {
			t.Errorf("host tools: DEL: %v", err)
		}
	}()
	if err != nil {
		t.Errorf("host tools: creating %d attachments: %v", n, err)
		return
	}
	run := func(args ...string) (time.Duration, []byte, error) {
		cmd := exec.Command(filepath.Join(bin, "nftcni"), args...)
		cmd.Env = append(os.Environ(), "NETCONFPATH="+confDir, "NFTCNI_CACHE_DIR="+filepath.Join(w.dir, "cache"), "CNI_PATH="+bin)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		start := time.Now()
		if err := netns.StartIn(w.host, cmd); err != nil {
			return 0, nil, err
		}
		if err := cmd.Wait(); err != nil {
			return 0, nil, fmt.Errorf("nftcni %v: %v: %s", args, err, stderr.String())
		}
		return time.Since(start), stdout.Bytes(), nil
	}
	fmt.Printf("\nHost-wide commands with %d attachments of %s (median of 3 runs; the exec'd CHECK once):\n", n, c.name)
	for _, m := range []struct {
		what, drift string
		runs        int
	}{
		{"list -o json, drift by in-process CHECK (default)", "check", 3},
		{"list -o json, drift by exec'd CHECK", "exec", 1}, // ~8 s: for comparison
		{"list -o json, no drift", "off", 3},
	} {
		var times []time.Duration
		for range m.runs {
			d, out, err := run("list", "-o", "json", "-drift", m.drift)
			if err != nil {
				t.Errorf("host tools: %v", err)
				return
			}
			var rows []struct {
				ContainerID string                          `json:"containerId"`
				Drift       struct{ State, Message string } `json:"drift"`
			}
			if err := json.Unmarshal(out, &rows); err != nil || len(rows) != n {
				t.Errorf("host tools: list printed %d rows (%v), want %d", len(rows), err, n)
				return
			}
			for _, r := range rows {
				if want := map[string]string{"off": "unchecked"}[m.drift]; want != "" && r.Drift.State != want ||
					want == "" && r.Drift.State != "ok" {
					t.Errorf("host tools: list -drift %s: the drift of %s is %q: %s", m.drift, r.ContainerID, r.Drift.State, r.Drift.Message)
					return
				}
			}
			times = append(times, d)
		}
		fmt.Printf("  %-52s %9s  (%s per attachment)\n", m.what, ms(pct(times, 50)), us(pct(times, 50)/time.Duration(n)))
	}
	var times []time.Duration
	for range 3 {
		d, out, err := run("gc", "--all")
		if err != nil {
			t.Errorf("host tools: %v", err)
			return
		}
		if !bytes.Contains(out, []byte(fmt.Sprintf("%d live attachments kept, 0 stale deleted", n))) {
			t.Errorf("host tools: gc --all: %s", out)
			return
		}
		times = append(times, d)
	}
	fmt.Printf("  %-52s %9s\n", "gc --all, nothing stale (GC to 3 plugins)", ms(pct(times, 50)))
}

func us(d time.Duration) string { return fmt.Sprintf("%.0fµs", float64(d.Nanoseconds())/1000) }
