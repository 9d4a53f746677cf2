// Package layers holds the test that keeps the product's packages to the
// import rules of docs/architecture.md ("What each package may import"):
// a new import across a layer fails here, not in review.
package layers

import (
	"go/parser"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/nftcni/nftcni/internal/srctree"
)

// rules gives, for each product package, the packages of the module it may
// import. A pattern ending in "/..." covers the package and those below
// it; a package's own entry applies, else the longest such pattern. A
// package's own sub-packages are always allowed. It is the table of
// docs/architecture.md.
var rules = map[string][]string{
	"crashpoint": {},
	"atomicfile": {"crashpoint"},
	"attachrec":  {"atomicfile"},
	"netns":      {},
	"nlerr":      {},
	"ownerid":    {},
	"sysctl":     {"netns", "crashpoint"},
	"cni":        {"crashpoint"},

	"netlinkx/...": {"netlinkx", "netns", "nlerr", "crashpoint", "sysctl"},
	"nft":          {"netns", "nlerr", "crashpoint", "ownerid", "nft/xtables", "nft/internal/fakedial"},
	"nft/...":      {"nft", "nft/foreign", "nft/xtables", "netns", "nlerr", "crashpoint", "ownerid"},
	// x_tables encoding, below the core that probes and reads it.
	"nft/xtables": {},
	// route_localnet is a sysctl: the one nft component that sets one.
	"nft/portmap": {"nft", "nft/foreign", "nft/xtables", "netns", "nlerr", "crashpoint", "ownerid", "sysctl"},
	// firewalld's record names owners; it needs nothing of nftables.
	"firewalld": {"ownerid", "netns", "atomicfile"},

	"ipam/hostlocal":   {"cni", "crashpoint"},
	"ipam/static":      {"cni", "crashpoint"},
	"ipam/dhcp":        {"cni", "crashpoint"},
	"ipam/dhcp/daemon": {"cni", "crashpoint", "ipam/dhcp/...", "netlinkx", "netns", "sysctl", "atomicfile"},
	"cniruntime":       {"cni", "netns", "atomicfile"},
	// Re-creating attachments' nftables state from the result cache: the
	// plugins' parts are handed in (reapply.Registry), never imported.
	"reapply": {"cni", "cniruntime", "nft"},
	// Leaves: a wire format, a file format, a lock.
	"ipam/dhcp/gorpc":           {},
	"ipam/hostlocal/ownerlink":  {},
	"cniruntime/internal/types": {},
	"plugins/internal/...":      {"cni", "netlinkx/...", "nft/...", "netns", "sysctl", "crashpoint", "atomicfile", "ownerid", "plugins/internal/..."},
	"plugins/...":               {"cni", "netlinkx/...", "nft/...", "netns", "sysctl", "crashpoint", "atomicfile", "ownerid", "firewalld", "plugins/internal/..."},

	"cmd/nftcni": {"..."},
}

func match(pattern, pkg string) bool {
	if pattern == "..." {
		return true
	}
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return pkg == base || strings.HasPrefix(pkg, base+"/")
	}
	return pkg == pattern
}

// pluginOf is the plugin a package below plugins/ or ipam/ belongs to:
// its first two path elements (the dhcp daemon is the dhcp plugin's).
func pluginOf(pkg string) string {
	parts := strings.SplitN(pkg, "/", 3)
	return strings.Join(parts[:min(2, len(parts))], "/")
}

// ruleFor is the rule of pkg: its own, or else the longest pattern ending
// in "/..." that covers it.
func ruleFor(pkg string) (string, bool) {
	if _, ok := rules[pkg]; ok {
		return pkg, true
	}
	best := ""
	for p := range rules {
		if strings.HasSuffix(p, "/...") && match(p, pkg) && len(p) > len(best) {
			best = p
		}
	}
	return best, best != ""
}

// imports reads the module-internal imports of each product package's
// non-test files below root.
func imports(t *testing.T, root string) map[string][]string {
	out := map[string][]string{}
	for _, f := range srctree.Files(t, root, true, parser.ImportsOnly) {
		for _, im := range f.AST.Imports {
			p, _ := strconv.Unquote(im.Path.Value)
			if dep, ok := strings.CutPrefix(p, srctree.Module+"/"); ok && !slices.Contains(out[f.Pkg], dep) {
				out[f.Pkg] = append(out[f.Pkg], dep)
			}
		}
		if _, ok := out[f.Pkg]; !ok {
			out[f.Pkg] = nil
		}
	}
	return out
}

func TestImportsFollowTheLayers(t *testing.T) {
	root := srctree.Root(t)
	pkgs := imports(t, root)
	for _, want := range []string{"cni", "nft", "netlinkx", "plugins/bridge", "nft/portmap", "cmd/nftcni"} {
		if _, ok := pkgs[want]; !ok {
			t.Fatalf("package %s not found below %s", want, root)
		}
	}
	for pkg, deps := range pkgs {
		rule, ok := ruleFor(pkg)
		if !ok {
			t.Errorf("%s: no rule says what it may import (add one here and to docs/architecture.md)", pkg)
			continue
		}
		for _, dep := range deps {
			if strings.HasPrefix(dep, pkg+"/") {
				continue
			}
			if slices.ContainsFunc(srctree.NotProduct, func(np string) bool { return match(np+"/...", dep) }) {
				t.Errorf("%s imports %s, a test or tool package", pkg, dep)
				continue
			}
			if !slices.ContainsFunc(rules[rule], func(a string) bool { return match(a, dep) }) {
				t.Errorf("%s imports %s, which rule %q does not allow", pkg, dep, rule)
			}
		}
	}
	// A plugin imports no other plugin, IPAM plugins included: IPAM is
	// delegated through cni/, so an exec'd reference IPAM plugin and ours
	// are interchangeable.
	for pkg, deps := range pkgs {
		if !match("plugins/...", pkg) && !match("ipam/...", pkg) || match("plugins/internal/...", pkg) {
			continue
		}
		for _, dep := range deps {
			if (match("plugins/...", dep) || match("ipam/...", dep)) && !match("plugins/internal/...", dep) &&
				pluginOf(dep) != pluginOf(pkg) {
				t.Errorf("%s imports %s: a plugin imports no other plugin", pkg, dep)
			}
		}
	}
}

// The rule check itself: a plugin importing another plugin, or nft
// importing cni, is caught.
func TestRulesCatchCrossings(t *testing.T) {
	for _, tc := range []struct {
		pkg, dep string
		ok       bool
	}{
		{"nft", "cni", false},
		{"nft", "nft/internal/fakedial", true},
		{"nft/masq", "nft/internal/fakedial", false},
		{"nft/masq", "netlinkx", false},
		{"nft/masq", "ownerid", true},
		{"firewalld", "nft", false},
		{"ownerid", "nft", false},
		{"nft/portmap", "netlinkx", false},
		{"nft/portmap", "sysctl", true},
		{"nft", "netlinkx", false},
		{"nft", "nft/xtables", true},
		{"nft/xtables", "nft", false},
		{"nft/foreign", "nft/xtables", true},
		{"sysctl", "netlinkx", false},
		{"netlinkx/qdisc", "netlinkx", true},
		{"cni", "netlinkx", false},
		{"plugins/bridge", "nft/masq", true},
		{"plugins/internal/ifplugin", "plugins/internal/rollback", true},
		{"plugins/internal/ifplugin", "firewalld", false},
		{"cmd/nftcni", "plugins/bridge", true},
		{"ipam/dhcp/daemon", "ipam/dhcp/gorpc", true},
		{"plugins/bridge", "plugins/ptp", false},
		{"ipam/hostlocal", "ipam/static", false},
	} {
		rule, _ := ruleFor(tc.pkg)
		got := slices.ContainsFunc(rules[rule], func(a string) bool { return match(a, tc.dep) })
		if got != tc.ok {
			t.Errorf("%s importing %s allowed = %v (rule %q), want %v", tc.pkg, tc.dep, got, rule, tc.ok)
		}
	}
}
