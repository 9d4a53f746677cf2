package vmtest

import (
	"encoding/json"
	"github.com/nftcni/nftcni/internal/guest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// pluginTypes maps the plugin packages to the type names configs use.
var pluginTypes = map[string]string{
	"plugins/hostdevice": "host-device",
	"ipam/hostlocal":     "host-local",
}

// TestSubsetCoversEveryPlugin: every test a subset names exists, and the
// smoke subset reaches every plugin: its package is in it, or an example
// chain using it is. A new plugin, or a renamed test, fails here rather
// than silently leaving the arm64 CI run.
func TestSubsetCoversEveryPlugin(t *testing.T) {
	if guest.InGuest() {
		t.Skip("reads the source tree, which the guest does not have; runs on the host")
	}
	root := ".."
	testFunc := regexp.MustCompile(`(?m)^func (Test\w+)\(t \*testing\.T\)`)
	testsOf := func(pkg string) []string {
		files, _ := filepath.Glob(filepath.Join(root, pkg, "*_test.go"))
		var names []string
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range testFunc.FindAllSubmatch(b, -1) {
				names = append(names, string(m[1]))
			}
		}
		return names
	}
	for name, pkgs := range Subsets {
		for _, p := range pkgs {
			have := testsOf(strings.TrimPrefix(p.Pkg, "./"))
			if len(have) == 0 {
				t.Errorf("subset %s: %s has no tests", name, p.Pkg)
			}
			for _, want := range p.Tests {
				if !slices.Contains(have, want) {
					t.Errorf("subset %s: %s has no %s", name, p.Pkg, want)
				}
			}
		}
	}

	inSubset := map[string]bool{}
	for _, p := range Subsets["smoke"] {
		inSubset[strings.TrimPrefix(p.Pkg, "./")] = true
	}
	inExamples := map[string]bool{}
	if inSubset["examples"] {
		files, _ := filepath.Glob(filepath.Join(root, "examples", "*.conflist"))
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var list struct {
				Plugins []struct {
					Type string
					IPAM struct{ Type string }
				}
			}
			if err := json.Unmarshal(b, &list); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			for _, p := range list.Plugins {
				inExamples[p.Type], inExamples[p.IPAM.Type] = true, true
			}
		}
	}
	plugins, _ := filepath.Glob(filepath.Join(root, "plugins", "*"))
	plugins = append(plugins, filepath.Join(root, "ipam/dhcp"), filepath.Join(root, "ipam/hostlocal"), filepath.Join(root, "ipam/static"))
	n := 0
	for _, dir := range plugins {
		pkg, _ := filepath.Rel(root, dir)
		pkg = filepath.ToSlash(pkg)
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() || pkg == "plugins/internal" {
			continue
		}
		n++
		typ := pluginTypes[pkg]
		if typ == "" {
			typ = filepath.Base(pkg)
		}
		if !inSubset[pkg] && !inExamples[typ] {
			t.Errorf("plugin %s (%s) is neither in the smoke subset nor in an example it runs", typ, pkg)
		}
	}
	if n < 15 {
		t.Errorf("found %d plugins: is the source tree at %s?", n, root)
	}
}
