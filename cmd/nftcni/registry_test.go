package main

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/internal/guest"
)

// TestGCAndStatusAreDecided: every plugin of this build has all five
// handlers (cni.Register refuses one that lacks any, so the binary would
// not start), and the top-level README's "GC and STATUS, per plugin" table
// tells the truth about them: it has a row for every plugin and no other,
// a plugin says "nothing to collect" there exactly when its GC is
// cni.NothingToCollect, and one whose STATUS is cni.AlwaysReady says
// "always ready".
func TestGCAndStatusAreDecided(t *testing.T) {
	if guest.InGuest() {
		t.Skip("reads the README, which the VM guest does not have; runs on the host")
	}
	rows := gcTable(t)
	for name := range rows {
		// A build may leave plugins out (tags), but a row must name one.
		if _, err := os.Stat("plugin_" + strings.ReplaceAll(name, "-", "") + ".go"); err != nil {
			t.Errorf("README GC/STATUS table has a row for %q, which is no plugin of nftcni", name)
		}
	}
	same := func(a, b any) bool { return reflect.ValueOf(a).Pointer() == reflect.ValueOf(b).Pointer() }
	for _, name := range cni.Registered() {
		p := cni.Lookup(name)
		if err := p.Complete(); err != nil {
			t.Error(err)
			continue
		}
		row, ok := rows[name]
		if !ok {
			t.Errorf("%s: no row in the README GC/STATUS table", name)
			continue
		}
		if nothing := same(p.GC, cni.NothingToCollect); nothing != (row[1] == "nothing to collect") {
			t.Errorf("%s: GC is cni.NothingToCollect: %v; README says it collects %q", name, nothing, row[1])
		}
		if same(p.Status, cni.AlwaysReady) && !strings.HasPrefix(row[2], "always ready") {
			t.Errorf("%s: STATUS is cni.AlwaysReady; README says it checks %q", name, row[2])
		}
	}
}

// gcTable reads the README table: plugin name → [leaves, GC, STATUS].
func gcTable(t *testing.T) map[string][3]string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "### GC and STATUS, per plugin\n")
	if !ok {
		t.Fatal("README has no \"GC and STATUS, per plugin\" section")
	}
	rows := map[string][3]string{}
	inTable := false
	for _, line := range strings.Split(rest, "\n") {
		if !strings.HasPrefix(line, "|") {
			if inTable {
				break
			}
			continue
		}
		inTable = true
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) != 4 {
			t.Fatalf("README GC/STATUS row with %d cells: %s", len(cells), line)
		}
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if cells[0] == "plugin" || strings.HasPrefix(cells[0], "---") {
			continue
		}
		for _, name := range strings.Split(cells[0], ", ") {
			rows[name] = [3]string{cells[1], cells[2], cells[3]}
		}
	}
	return rows
}

// nftComponents are the packages that keep host nftables state: a plugin
// that uses one must have a reapplier, or `nftcni reload` would leave its
// containers cut off after a ruleset reload.
var nftComponents = []string{"nft/masq", "nft/macspoof", "nft/portmap", "nft/firewall", "nft/foreign"}

// TestReloadCoversEveryNftablesPlugin: every plugin whose package (or a
// package of plugins/internal it uses) imports an nftables component has a
// reapplier registered with it, and every reapplier belongs to a
// registered plugin.
func TestReloadCoversEveryNftablesPlugin(t *testing.T) {
	if guest.InGuest() {
		t.Skip("reads the source tree, which the VM guest does not have; runs on the host")
	}
	const module = "github.com/nftcni/nftcni/"
	imports := func(dir string) []string {
		fset := token.NewFileSet()
		files, err := filepath.Glob(filepath.Join("../..", dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			af, err := parser.ParseFile(fset, f, nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, im := range af.Imports {
				if p, ok := strings.CutPrefix(strings.Trim(im.Path.Value, `"`), module); ok {
					out = append(out, p)
				}
			}
		}
		return out
	}
	var keeps func(pkg string, seen map[string]bool) bool
	keeps = func(pkg string, seen map[string]bool) bool {
		if seen[pkg] {
			return false
		}
		seen[pkg] = true
		for _, p := range imports(pkg) {
			if slices.Contains(nftComponents, p) || strings.HasPrefix(p, "plugins/internal/") && keeps(p, seen) {
				return true
			}
		}
		return false
	}
	for _, name := range cni.Registered() {
		dir := "plugins/" + strings.ReplaceAll(name, "-", "")
		if _, err := os.Stat(filepath.Join("../..", dir)); err != nil {
			continue // an IPAM plugin
		}
		if keeps(dir, map[string]bool{}) && reapplyRegistry()[name] == nil {
			t.Errorf("plugin %s keeps host nftables state but has no reapplier (registerReapply in plugin_%s.go)", name, strings.ReplaceAll(name, "-", ""))
		}
	}
	for name := range reapplyRegistry() {
		if cni.Lookup(name) == nil {
			t.Errorf("reapplier %s belongs to no registered plugin", name)
		}
	}
	if len(reapplyRegistry()) == 0 {
		t.Error("no reappliers registered")
	}
}
