package tuning

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/netns"
)

// AllowlistFile is the reference's fixed allow-list path. AllowlistEnv, when
// set in the plugin's environment, names another file instead: tests point
// it at a temporary file rather than writing under /etc.
const (
	AllowlistFile = "/etc/cni/tuning/allowlist.conf"
	AllowlistEnv  = "NFTCNI_TUNING_ALLOWLIST"
)

const netRoot = "/proc/sys/net/"

// sysctlFile turns a config key into the file it names:
// every "." becomes "/", then the first "IFNAME" becomes the interface name
// (so an interface name with dots survives), and the cleaned path must lie
// under /proc/sys/net/ (`invalid net sysctl key: "<key after both steps>"`).
//
// Stricter than the reference: a key with a ".." path element as written
// ("net/../kernel/x") is refused, naming the key as written. The dot rule
// already turns it into "net////kernel/x", which cannot leave /proc/sys/net,
// but the reference then silently writes another file than the one meant
// ("net/../ipv4/ip_forward" is net/ipv4/ip_forward). A NUL byte is refused
// too, instead of failing at open time.
func sysctlFile(key, ifName string) (string, error) {
	if slices.Contains(strings.Split(key, "/"), "..") {
		return "", fmt.Errorf("invalid net sysctl key: %q", key)
	}
	k := strings.ReplaceAll(key, ".", "/")
	k = strings.Replace(k, "IFNAME", ifName, 1)
	p := filepath.Join("/proc/sys", k)
	if !strings.HasPrefix(p, netRoot) || strings.ContainsRune(p, 0) {
		return "", fmt.Errorf("invalid net sysctl key: %q", k)
	}
	return p, nil
}

// sysctlEntry is one planned write.
type sysctlEntry struct {
	key, file, value string
}

// planSysctls resolves every key (sorted) before anything is written, so a
// bad key changes nothing.
func planSysctls(c *TuningConf, ifName string) ([]sysctlEntry, error) {
	var out []sysctlEntry
	for _, k := range c.sortedKeys() {
		f, err := sysctlFile(k, ifName)
		if err != nil {
			return nil, err
		}
		out = append(out, sysctlEntry{key: k, file: f, value: c.SysCtl[k]})
	}
	return out, nil
}

// allowlist is the parsed allow-list: the patterns as written (for the
// message) and their anchored forms.
type allowlist struct {
	patterns []string
	res      []*regexp.Regexp
}

// readAllowlist reads the allow-list at path; ok is false when the file
// does not exist (everything allowed). Each non-blank trimmed line is a Go
// regular expression that must match the whole key: unlike the reference
// (which matches anywhere in the key), `net.core` does not admit
// `net.core.somaxconn`, and `ipv4` admits nothing.
func readAllowlist(path string) (al allowlist, ok bool, err error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return allowlist{}, false, nil
	}
	if err != nil {
		return allowlist{}, false, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if _, err := regexp.Compile(line); err != nil {
			return allowlist{}, false, err
		}
		re, err := regexp.Compile(`^(?:` + line + `)$`)
		if err != nil {
			return allowlist{}, false, err
		}
		al.patterns = append(al.patterns, line)
		al.res = append(al.res, re)
	}
	return al, true, nil
}

// check fails for the first key (in sorted order) no pattern matches, with
// the reference's message.
func (al allowlist) check(keys []string) error {
	for _, k := range keys {
		allowed := false
		for _, re := range al.res {
			if re.MatchString(k) {
				allowed = true
				break
			}
		}
		if !allowed {
			return fmt.Errorf("Sysctl %s is not allowed. Only the following sysctls are allowed: %+v", k, al.patterns)
		}
	}
	return nil
}

// openSysctl opens a sysctl file without following a symbolic link in its
// last component (procfs has none there; this keeps it that way).
func openSysctl(file string, flag int) (*os.File, error) {
	return os.OpenFile(file, flag|unix.O_NOFOLLOW, 0)
}

// readSysctl returns a sysctl's value without its one trailing newline.
func readSysctl(file string) (string, error) {
	f, err := openSysctl(file, os.O_RDONLY)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		return "", err
	}
	return strings.TrimSuffix(string(b), "\n"), nil
}

// writeSysctl writes value, without a newline, to an existing sysctl.
func writeSysctl(file, value string) error {
	f, err := openSysctl(file, os.O_WRONLY|os.O_TRUNC)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(value); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// applySysctls writes the entries in order inside ns (/proc/sys/net is
// per namespace, resolved by the writing thread's). On a failure the values
// already written are put back, last first, and the error is the failed
// write's, as os reports it. A sysctl whose old value cannot be read
// (write-only ones such as route/flush) is written but cannot be put back.
// The returned undo puts everything back, for a later failure of ADD.
// Errors of putting values back go to logf.
func applySysctls(ns *netns.NS, entries []sysctlEntry, logf func(string, ...any)) (undo func() error, err error) {
	type old struct{ file, value string }
	var done []old
	restore := func() error {
		var errs []error
		for i := len(done) - 1; i >= 0; i-- {
			if err := writeSysctl(done[i].file, done[i].value); err != nil {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	}
	err = ns.Do(func() error {
		for _, e := range entries {
			prev, rerr := readSysctl(e.file)
			if err := writeSysctl(e.file, e.value); err != nil {
				if uerr := restore(); uerr != nil {
					logf("tuning: rolling back sysctls: %v", uerr)
				}
				return err
			}
			if rerr == nil {
				done = append(done, old{e.file, prev})
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return func() error { return ns.Do(restore) }, nil
}

// checkSysctls compares each entry with the file's value.
func checkSysctls(ns *netns.NS, entries []sysctlEntry) error {
	return ns.Do(func() error {
		for _, e := range entries {
			cur, err := readSysctl(e.file)
			if err != nil {
				return err
			}
			if cur != e.value {
				return fmt.Errorf("Error: Tuning configured value of %s is %s, current value is %s", e.file, e.value, cur)
			}
		}
		return nil
	})
}
