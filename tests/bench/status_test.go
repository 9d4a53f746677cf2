//go:build nftcni_bench

package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/containernetworking/cni/libcni"
)

// statusCase is one network whose STATUS is measured: a chain's config,
// with fill reservations already in host-local's store.
type statusCase struct {
	name  string
	needs []string
	conf  string // DATADIR as in chain.conf
	net16 string // the first two octets of the chain's /16
	fill  int
}

// statusCases: what a Kubernetes node's runtime asks every 5 s. The store
// is filled with BENCH_STATUS_FILL reservations where it says so, to show
// whether the cost grows with them (by default STATUS does not read the
// store's entries; with notReadyWhenFull it counts them).
func statusCases(fill int) []statusCase {
	br, full := chainNamed("bridge+host-local"), chainNamed("full (+portmap+firewall)")
	strict := strings.Replace(br.conf, `"ipam":{"type":"host-local",`, `"ipam":{"type":"host-local","notReadyWhenFull":true,`, 1)
	return []statusCase{
		{br.name, br.needs, br.conf, "10.77", 0},
		{fmt.Sprintf("%s, %d reserved", br.name, fill), br.needs, br.conf, "10.77", fill},
		{fmt.Sprintf("%s, notReadyWhenFull, %d reserved", br.name, fill), br.needs, strict, "10.77", fill},
		{full.name, full.needs, full.conf, "10.80", 0},
	}
}

func chainNamed(name string) chain {
	for _, c := range chains {
		if c.name == name {
			return c
		}
	}
	panic("bench: no chain " + name)
}

// statusBench measures one STATUS of each case's network through libcni's
// GetStatusNetworkList (the call go-cni and ocicni make): the wall time
// and the CPU of the plugin processes (their own and their children's, so
// a delegate exec'd by the baseline's bridge counts), n times per case,
// alternating between the implementations call by call.
func statusBench(impls []impl, n, fill int) error {
	fmt.Printf("\nSTATUS of a network (libcni GetStatusNetworkList; containerd and CRI-O run it every 5 s), p50 of %d:\n", n)
	fmt.Printf("  %-52s %-9s %9s %9s %14s\n", "network", "impl", "latency", "CPU", "CPU per hour")
	for _, c := range statusCases(fill) {
		type side struct {
			im        impl
			cni       *libcni.CNIConfig
			list      *libcni.NetworkConfigList
			lat, cpus []time.Duration
		}
		var sides []*side
		for _, im := range impls {
			if missingPlugins(im.dir, c.needs) != "" {
				continue
			}
			dir, err := os.MkdirTemp("", "nftcni-bench-status-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(dir)
			list, err := libcni.ConfListFromBytes([]byte(strings.ReplaceAll(c.conf, "DATADIR", filepath.Join(dir, "ipam"))))
			if err != nil {
				return err
			}
			if err := fillStore(filepath.Join(dir, "ipam", list.Name), c.net16, c.fill); err != nil {
				return err
			}
			sides = append(sides, &side{im: im, list: list, cni: libcni.NewCNIConfigWithCacheDir([]string{im.dir}, filepath.Join(dir, "cache"), nil)})
		}
		for range n {
			for _, s := range sides {
				c0, t0 := childCPU(), time.Now()
				if err := s.cni.GetStatusNetworkList(context.Background(), s.list); err != nil {
					return fmt.Errorf("%s %s: STATUS: %w", c.name, s.im.name, err)
				}
				s.lat = append(s.lat, time.Since(t0))
				s.cpus = append(s.cpus, childCPU()-c0)
			}
		}
		for _, s := range sides {
			cpu := pct(s.cpus, 50)
			fmt.Printf("  %-52s %-9s %9s %9s %14s\n", c.name, s.im.name, ms(pct(s.lat, 50)), ms(cpu),
				fmt.Sprintf("%.2fs", (cpu*time.Duration(time.Hour/(5*time.Second))).Seconds()))
		}
	}
	return nil
}

// fillStore writes n reservations into a host-local network directory,
// addresses of the /16 net16, in the on-disk format both implementations
// read: the address as the name, holding "<id>\r\neth0".
func fillStore(dir, net16 string, n int) error {
	if n == 0 {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for i := range n {
		addr := fmt.Sprintf("%s.%d.%d", net16, (i+2)/256, (i+2)%256)
		if err := os.WriteFile(filepath.Join(dir, addr), fmt.Appendf(nil, "fill%06d\r\neth0", i), 0o600); err != nil {
			return err
		}
	}
	return nil
}
