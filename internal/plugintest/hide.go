package plugintest

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Plugins that cannot see some of the machine's files: to build a host
// without a program (an nftables-only host has no iptables), while the
// test itself still runs that program to look at the ruleset.
//
// HidingDir returns a plugin directory whose entries are links to the
// test binary under each plugin's name. Started under such a name with
// the environment HidingDir returns, the test binary (in Main, before any
// test runs) is a trampoline: it moves its thread into a mount namespace
// of its own, makes every mount there private (nothing propagates back to
// the machine's), covers each hidden directory with an empty tmpfs and
// execs the real plugin under the same name. Plugins that exec others
// (bridge runs host-local through CNI_PATH) find the trampolines again.

const (
	hideDirsEnv = "NFTCNI_TEST_HIDE_DIRS" // the directories to cover, ":"-separated
	hideExecEnv = "NFTCNI_TEST_HIDE_EXEC" // the real plugin directory
)

// HidingDir makes the trampoline directory for the plugins of BinDir and
// returns it with the environment the plugins must be started with
// (os.Environ() plus the trampoline's variables): a cniruntime.Runtime's
// Path and Env. dirs must be absolute directories without symbolic links
// in their path (filepath.EvalSymlinks), since a mount covers the
// directory it resolves to.
func HidingDir(t testing.TB, dirs []string) (dir string, env []string) {
	t.Helper()
	self, err := os.Executable()
	Must(t, err)
	plugins := BinDir(t)
	dir = t.TempDir()
	entries, err := os.ReadDir(plugins)
	Must(t, err)
	for _, e := range entries {
		Must(t, os.Symlink(self, filepath.Join(dir, e.Name())))
	}
	for _, d := range dirs {
		if r, err := filepath.EvalSymlinks(d); err != nil || r != d {
			t.Fatalf("HidingDir: %q is not a directory without symbolic links in its path (%q, %v)", d, r, err)
		}
	}
	env = append(os.Environ(), hideDirsEnv+"="+strings.Join(dirs, ":"), hideExecEnv+"="+plugins)
	return dir, env
}

// hidden runs the trampoline when this process was started as one; it
// returns only on failure, with the exit status.
func hidden() (int, bool) {
	plugins := os.Getenv(hideExecEnv)
	if plugins == "" {
		return 0, false
	}
	fail := func(err error) (int, bool) {
		fmt.Fprintf(os.Stderr, "plugintest trampoline: %v\n", err)
		return 125, true
	}
	// The namespace is the thread's; execve keeps the thread's.
	runtime.LockOSThread()
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fail(fmt.Errorf("unshare: %w", err))
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fail(fmt.Errorf("making mounts private: %w", err))
	}
	for _, d := range slices.DeleteFunc(strings.Split(os.Getenv(hideDirsEnv), ":"), func(d string) bool { return d == "" }) {
		if err := unix.Mount("nftcni-test-hide", d, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=64k,mode=0755"); err != nil {
			return fail(fmt.Errorf("covering %s: %w", d, err))
		}
	}
	target := filepath.Join(plugins, filepath.Base(os.Args[0]))
	return fail(fmt.Errorf("exec %s: %w", target, unix.Exec(target, os.Args, os.Environ())))
}
