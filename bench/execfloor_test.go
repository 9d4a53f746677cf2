//go:build nftcni_bench

package bench

import (
	"cmp"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"time"
)

// execCPU runs path once as a CNI plugin answering VERSION (empty stdin,
// CNI_COMMAND the only variable) and returns the child's CPU, user plus
// system: the same quantity as perf's task-clock, read from the child's
// own rusage so that no other process's time is counted.
func execCPU(path string) (time.Duration, error) {
	cmd := exec.Command(path)
	cmd.Env = []string{"CNI_COMMAND=VERSION"}
	if out, err := cmd.Output(); err != nil {
		return 0, fmt.Errorf("%s VERSION: %v (%s)", path, err, out)
	}
	return cpuOf(cmd.ProcessState.SysUsage().(*syscall.Rusage)), nil
}

// floor is the exec floor of every plugin name of ours: the CPU of a
// VERSION exec under that name, and the baseline's loopback measured in
// the same rounds.
type floor struct {
	names []string                 // costliest first
	cpu   map[string]time.Duration // p50 per name
	base  time.Duration            // p50 of the baseline's loopback; 0 without one
}

// execFloor measures n VERSION execs of each plugin name in dir (every
// link to the nftcni binary there), each round alternating with an exec of
// baseline's loopback when baseline is set, so that the machine's load
// weighs on both alike.
func execFloor(dir, baseline string, n int) (floor, error) {
	f := floor{cpu: map[string]time.Duration{}}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return f, err
	}
	for _, e := range ents {
		if e.Type()&os.ModeSymlink != 0 {
			f.names = append(f.names, e.Name())
		}
	}
	samples := map[string][]time.Duration{}
	var base []time.Duration
	for range n {
		for _, name := range f.names {
			d, err := execCPU(filepath.Join(dir, name))
			if err != nil {
				return f, err
			}
			samples[name] = append(samples[name], d)
			if baseline == "" {
				continue
			}
			if d, err = execCPU(filepath.Join(baseline, "loopback")); err != nil {
				return f, err
			}
			base = append(base, d)
		}
	}
	for name, s := range samples {
		f.cpu[name] = pct(s, 50)
	}
	if len(base) > 0 {
		f.base = pct(base, 50)
	}
	slices.SortFunc(f.names, func(a, b string) int { return cmp.Compare(f.cpu[b], f.cpu[a]) })
	return f, nil
}

// print writes the table.
func (f floor) print() {
	fmt.Printf("\nExec floor: CPU of one CNI_COMMAND=VERSION exec (p50)")
	if f.base > 0 {
		fmt.Printf(", against the baseline's loopback %s in the same rounds", ms(f.base))
	}
	fmt.Println()
	for _, name := range f.names {
		fmt.Printf("  %-12s %9s", name, ms(f.cpu[name]))
		if f.base > 0 {
			fmt.Printf("  %.2fx", ratio(f.cpu[name], f.base))
		}
		fmt.Println()
	}
}
