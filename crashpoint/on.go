//go:build nftcni_crashpoints

package crashpoint

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Enabled is true in crashpoint builds.
const Enabled = true

var (
	once  sync.Once
	cfg   config
	mu    sync.Mutex // hits are counted and traced one at a time
	hits  int        // in-process counters, used without a trace file
	named int
)

type config struct {
	trace string
	at    int    // 0: no ordinal crash
	name  string // "": no name crash
	count int    // k-th match of name
}

func load() {
	cfg.trace = os.Getenv(EnvTrace)
	cfg.at, _ = strconv.Atoi(os.Getenv(EnvAt))
	cfg.name = os.Getenv(EnvName)
	cfg.count, _ = strconv.Atoi(os.Getenv(EnvCount))
	if cfg.count < 1 {
		cfg.count = 1
	}
}

// Hit records the step and kills the process if it is the chosen one.
func Hit(name string) {
	once.Do(load)
	if cfg.trace == "" && cfg.at == 0 && cfg.name == "" {
		return
	}
	mu.Lock()
	defer mu.Unlock()
	var n, m int
	if cfg.trace != "" {
		n, m = traced(name)
	} else {
		hits++
		if cfg.name != "" && strings.Contains(name, cfg.name) {
			named++
		}
		n, m = hits, named
	}
	if (cfg.at > 0 && n == cfg.at) || (cfg.name != "" && strings.Contains(name, cfg.name) && m == cfg.count) {
		die(name)
	}
}

// traced appends name to the trace file under an exclusive flock and
// returns its ordinal among all lines and among those matching cfg.name,
// counting what earlier processes of the chain wrote.
func traced(name string) (n, m int) {
	f, err := os.OpenFile(cfg.trace, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		panic("crashpoint: opening trace: " + err.Error())
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		panic("crashpoint: locking trace: " + err.Error())
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, CrashPrefix) {
			continue
		}
		n++
		if cfg.name != "" && strings.Contains(line, cfg.name) {
			m++
		}
	}
	if _, err := f.WriteString(name + "\n"); err != nil {
		panic("crashpoint: writing trace: " + err.Error())
	}
	n++
	if cfg.name != "" && strings.Contains(name, cfg.name) {
		m++
	}
	return n, m
}

// die notes the crash in the trace and SIGKILLs the process. The flock
// held by traced dies with the process.
func die(name string) {
	if cfg.trace != "" {
		if f, err := os.OpenFile(cfg.trace, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644); err == nil {
			_, _ = f.WriteString(CrashPrefix + name + "\n")
		}
	}
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // SIGKILL is not deliverable late, but never run on
}
