package foreign

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
)

// When iptables-nft's FORWARD chains get our accepts.
//
// They are there for one danger: a Docker or kube-proxy (iptables mode)
// that starts after our containers and runs `iptables -P FORWARD DROP`.
// That needs an iptables program. On a host with none — an nftables-only
// host, the kind this project is for — nothing can set that policy, and
// creating iptables-nft's table there would put a table nft lists as
// iptables-nft's (with x_tables compat expressions) into a ruleset the
// administrator wrote by hand. So by default (UseAuto) ADD puts accepts
// there only where iptables can be used:
//
//   - an iptables program is reachable: a file named iptables, ip6tables,
//     iptables-nft, ip6tables-nft or xtables-nft-multi in a directory of
//     $PATH or of the usual ones (/usr/local/sbin, /usr/local/bin,
//     /usr/sbin, /usr/bin, /sbin, /bin — a runtime may exec plugins
//     with a PATH that lacks the sbin directories, Docker's own PATH
//     does not). The file is looked at, never run; or
//   - iptables-nft has a table already (nft.Tx.IptablesInUse): kube-proxy
//     and others run their own iptables from a container image, and a
//     table we created earlier is one too, so protection stays as long as
//     our rules are there.
//
// UseAlways and UseNever (the iptablesForwardAccepts key) force either way.
// DEL and GC remove our rules wherever they are, whatever the rule says.
//
// The case the rule leaves open: iptables installed after containers were
// attached (Docker installed later). Their ADD put nothing in FORWARD, so
// when Docker then sets DROP their forwarded traffic is dropped until the
// accepts are put back: `nftcni reload` or a repeated ADD does it (the
// rule then sees the program), CHECK reports the missing accepts; where
// that can happen, UseAlways protects from the first ADD.

// Use is when ADD puts accepts into iptables-nft's FORWARD chains.
type Use int

const (
	// UseAuto: where iptables can be used (see above). The zero value.
	UseAuto Use = iota
	// UseAlways: always, the chain created when missing (as before this
	// rule existed).
	UseAlways
	// UseNever: never; an existing DROP policy drops the containers'
	// forwarded traffic.
	UseNever
)

// UseValues are the iptablesForwardAccepts values, UseAuto's first ("" is
// UseAuto too).
var UseValues = []string{"auto", "always", "never"}

// ParseUse reads an iptablesForwardAccepts value.
func ParseUse(s string) (Use, error) {
	switch s {
	case "", "auto":
		return UseAuto, nil
	case "always":
		return UseAlways, nil
	case "never":
		return UseNever, nil
	}
	return UseAuto, fmt.Errorf("%q: want %q, %q or %q", s, UseValues[0], UseValues[1], UseValues[2])
}

func (u Use) String() string {
	if u >= 0 && int(u) < len(UseValues) {
		return UseValues[u]
	}
	return fmt.Sprintf("Use(%d)", int(u))
}

// Protects reports whether ADD, under u, puts accepts into iptables-nft's
// FORWARD chains on the host r reads. reachable tells whether an iptables
// program is reachable there; nil is IptablesReachable, what every product
// caller passes (a test pins the machine's answer per call).
func (u Use) Protects(r Reader, reachable func() bool) (bool, error) {
	switch u {
	case UseAlways:
		return true, nil
	case UseNever:
		return false, nil
	}
	if reachable == nil {
		reachable = IptablesReachable
	}
	if reachable() {
		return true, nil
	}
	return r.IptablesInUse()
}

// iptablesNames are the programs that write iptables-nft's tables.
var iptablesNames = []string{"iptables", "ip6tables", "iptables-nft", "ip6tables-nft", "xtables-nft-multi"}

// usualDirs are searched besides $PATH.
var usualDirs = []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}

// IptablesReachable reports whether an iptables program is reachable,
// looked for once per process. A variable so that a component's test
// binary can pin what the machine it runs on has, once, before its tests
// run (TestMain): their subject is what Setup does either way (this
// package's tests cover the search). A test that wants the other answer
// passes it per call (Protects' reachable), never by changing this, so
// that the tests run in parallel.
var IptablesReachable = iptablesReachable

// reachable is iptablesReachable's answer, looked for on first use (not
// at start: every exec pays what a package does then).
var reachable struct {
	once  sync.Once
	found bool
}

func iptablesReachable() bool {
	reachable.once.Do(func() {
		iptablesPrograms(os.Getenv("PATH"), func(string) bool { reachable.found = true; return false })
	})
	return reachable.found
}

// IptablesPrograms are the iptables programs reachable with path as
// $PATH, as the rule looks for them: what a test must hide to build a
// host without iptables.
func IptablesPrograms(path string) []string {
	var out []string
	iptablesPrograms(path, func(p string) bool { out = append(out, p); return true })
	return out
}

// Program finds the executable file name as iptables-nft's users find
// theirs (the directories of $PATH, then the usual ones a runtime's PATH
// may lack), without running it: the reference plugins' lookup of
// "iptables", for handing attachments back to them.
func Program(name string) (string, bool) {
	var found string
	programs(os.Getenv("PATH"), []string{name}, func(p string) bool { found = p; return false })
	return found, found != ""
}

// iptablesPrograms calls yield with each executable file of iptablesNames
// in the directories of path and usualDirs, until yield returns false.
func iptablesPrograms(path string, yield func(string) bool) {
	programs(path, iptablesNames, yield)
}

// programs calls yield with each executable file of names in the
// directories of path and usualDirs, until yield returns false.
func programs(path string, names []string, yield func(string) bool) {
	var dirs []string
	for _, d := range slices.Concat(filepath.SplitList(path), usualDirs) {
		if d != "" && filepath.IsAbs(d) && !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	for _, d := range dirs {
		for _, n := range names {
			p := filepath.Join(d, n)
			if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
				if !yield(p) {
					return
				}
			}
		}
	}
}
