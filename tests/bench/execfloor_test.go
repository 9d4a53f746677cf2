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

	"golang.org/x/sys/unix"
)

// execCPU runs path once as a CNI plugin answering VERSION (empty stdin,
// CNI_COMMAND the only variable) and returns the child's CPU, user plus
// system: the same quantity as perf's task-clock, read from the child's
// own rusage so that no other process's time is counted; and its page
// faults.
func execCPU(path string) (time.Duration, int64, error) {
	cmd := exec.Command(path)
	cmd.Env = []string{"CNI_COMMAND=VERSION"}
	if out, err := cmd.Output(); err != nil {
		return 0, 0, fmt.Errorf("%s VERSION: %v (%s)", path, err, out)
	}
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	return cpuOf(ru), ru.Minflt + ru.Majflt, nil
}

// floor is the exec floor of every plugin name of ours: the CPU of a
// VERSION exec under that name, and the baseline's loopback measured in
// the same rounds.
type floor struct {
	state      string                   // the binaries' page cache: "as installed" or "page cache re-read"
	names      []string                 // costliest first
	cpu        map[string]time.Duration // p50 per name
	faults     map[string]int64         // p50 per name
	base       time.Duration            // p50 of the baseline's loopback; 0 without one
	baseFaults int64
}

// execFloor measures n VERSION execs of each plugin name in dir (every
// link to the nftcni binary there), each round alternating with an exec of
// baseline's loopback when baseline is set, so that the machine's load
// weighs on both alike.
func execFloor(state, dir, baseline string, n int) (floor, error) {
	f := floor{state: state, cpu: map[string]time.Duration{}, faults: map[string]int64{}}
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
	faults := map[string][]int64{}
	var base []time.Duration
	var baseFaults []int64
	for range n {
		for _, name := range f.names {
			d, flt, err := execCPU(filepath.Join(dir, name))
			if err != nil {
				return f, err
			}
			samples[name], faults[name] = append(samples[name], d), append(faults[name], flt)
			if baseline == "" {
				continue
			}
			if d, flt, err = execCPU(filepath.Join(baseline, "loopback")); err != nil {
				return f, err
			}
			base, baseFaults = append(base, d), append(baseFaults, flt)
		}
	}
	for name, s := range samples {
		f.cpu[name], f.faults[name] = pct(s, 50), median(faults[name])
	}
	if len(base) > 0 {
		f.base, f.baseFaults = pct(base, 50), median(baseFaults)
	}
	slices.SortFunc(f.names, func(a, b string) int { return cmp.Compare(f.cpu[b], f.cpu[a]) })
	return f, nil
}

func median(v []int64) int64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[(len(s)-1)/2]
}

// print writes the table.
func (f floor) print() {
	fmt.Printf("\nExec floor, %s: CPU of one CNI_COMMAND=VERSION exec and its page faults (p50)", f.state)
	if f.base > 0 {
		fmt.Printf(", against the baseline's loopback %s, %d faults, in the same rounds", ms(f.base), f.baseFaults)
	}
	fmt.Println()
	for _, name := range f.names {
		fmt.Printf("  %-12s %9s %5d faults", name, ms(f.cpu[name]), f.faults[name])
		if f.base > 0 {
			fmt.Printf("  %.2fx", ratio(f.cpu[name], f.base))
		}
		fmt.Println()
	}
}

// dropPageCache drops path's pages from the page cache (the file a
// symlink points to); pages a running process maps stay. The next exec
// reads the file back as it would after a reboot or after reclaim took it:
// in small folios, whatever install left (cmd/nftcni readBackHuge).
func dropPageCache(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
}

// reread drops the page cache of every plugin binary in dirs and execs each
// once, so the next measurement sees them read back in small folios.
func reread(dirs ...string) error {
	for _, dir := range dirs {
		ents, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		for _, e := range ents {
			p := filepath.Join(dir, e.Name())
			if fi, err := os.Stat(p); err != nil || !fi.Mode().IsRegular() || fi.Mode()&0o111 == 0 {
				continue
			}
			if err := dropPageCache(p); err != nil {
				return err
			}
		}
		if _, _, err := execCPU(filepath.Join(dir, "loopback")); err != nil {
			return err
		}
	}
	return nil
}
