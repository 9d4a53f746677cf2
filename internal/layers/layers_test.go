// Package layers holds the test that keeps the product's packages to the
// import rules of docs/architecture.md ("What each package may import"):
// a new import across a layer fails here, not in review.
package layers

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/nftcni/nftcni/vmtest"
)

const module = "github.com/nftcni/nftcni"

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
	"cni":        {"crashpoint"},

	"netlinkx/...": {"netlinkx", "netns", "nlerr", "crashpoint"},
	"nft":          {"netns", "nlerr", "crashpoint", "nft/internal/fakedial"},
	"nft/...":      {"nft", "nft/foreign", "netns", "nlerr", "crashpoint"},
	// route_localnet is a sysctl: the one nft component that sets one.
	"nft/portmap": {"nft", "nft/foreign", "netns", "nlerr", "crashpoint", "netlinkx"},
	"firewalld":   {"nft", "netns", "atomicfile"},

	"ipam":             {"cni", "netlinkx", "netns"},
	"ipam/hostlocal":   {"cni", "crashpoint"},
	"ipam/static":      {"cni", "crashpoint"},
	"ipam/dhcp":        {"cni", "crashpoint"},
	"ipam/dhcp/daemon": {"cni", "crashpoint", "ipam/dhcp/...", "netlinkx", "netns", "atomicfile"},
	"cniruntime":       {"cni", "netns", "atomicfile"},
	// Re-creating attachments' nftables state from the result cache: the
	// plugins' parts are handed in (reapply.Registry), never imported.
	"reapply": {"cni", "cniruntime", "nft"},
	// Leaves: a wire format, a file format, a lock.
	"ipam/dhcp/gorpc":           {},
	"ipam/hostlocal/ownerlink":  {},
	"cniruntime/internal/types": {},
	"plugins/internal/...":      {"cni", "ipam", "netlinkx/...", "nft/...", "netns", "crashpoint", "atomicfile", "plugins/internal/..."},
	"plugins/...":               {"cni", "ipam", "netlinkx/...", "nft/...", "netns", "crashpoint", "atomicfile", "firewalld", "plugins/internal/..."},

	"cmd/nftcni": {"..."},
}

// notProduct are the trees that are tests, tools or examples: they may
// import what they need, and product code may not import them.
var notProduct = []string{"internal", "nft/internal/nfttest", "vmtest", "bench", "conformance", "demo", "differential", "examples", "reliability", "contrib", "scripts", "docs"}

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
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			name := d.Name()
			if rel != "." && (strings.HasPrefix(name, ".") || name == "testdata" || slices.Contains(notProduct, rel)) {
				return filepath.SkipDir
			}
			// A directory with a go.mod of its own (packaging/) is another
			// module: the product cannot import it, nor it the product's
			// internals, so it has no place in these layers.
			if _, err := os.Stat(filepath.Join(path, "go.mod")); rel != "." && err == nil {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		pkg := filepath.ToSlash(filepath.Dir(rel))
		for _, im := range f.Imports {
			p, _ := strconv.Unquote(im.Path.Value)
			if dep, ok := strings.CutPrefix(p, module+"/"); ok && !slices.Contains(out[pkg], dep) {
				out[pkg] = append(out[pkg], dep)
			}
		}
		if _, ok := out[pkg]; !ok {
			out[pkg] = nil
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestImportsFollowTheLayers(t *testing.T) {
	if vmtest.InGuest() {
		t.Skip("reads the source tree, which the guest does not have; runs on the host")
	}
	root := filepath.Join("..", "..")
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("no source tree at %s: %v", root, err)
	}
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
			if slices.ContainsFunc(notProduct, func(np string) bool { return match(np+"/...", dep) }) {
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
				dep != "ipam" && pluginOf(dep) != pluginOf(pkg) {
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
		{"nft/portmap", "netlinkx", true},
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
