package main

import (
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/vmtest"
)

// TestGCAndStatusAreDecided: every plugin of this build has all five
// handlers (cni.Register refuses one that lacks any, so the binary would
// not start), and the top-level README's "GC and STATUS, per plugin" table
// tells the truth about them: it has a row for every plugin and no other,
// a plugin says "nothing to collect" there exactly when its GC is
// cni.NothingToCollect, and one whose STATUS is cni.AlwaysReady says
// "always ready".
func TestGCAndStatusAreDecided(t *testing.T) {
	if vmtest.InGuest() {
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
