package conventions

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/nftcni/nftcni/internal/srctree"
)

// layoutRow is a row of README.md's layout table: its first cell is one
// top-level directory in backquotes, with a trailing slash.
var layoutRow = regexp.MustCompile("^\\| `([^`/]+)/` \\|")

// readmeLayout returns the directories the rows of the table under
// README.md's "## Layout" name, in order, and the rows whose first cell
// is not one such directory.
func readmeLayout(t *testing.T, root string) (dirs, bad []string) {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	in := false
	for _, l := range strings.Split(string(src), "\n") {
		if strings.HasPrefix(l, "## ") {
			in = l == "## Layout"
			continue
		}
		if !in || !strings.HasPrefix(l, "|") || l == "| path | what |" || strings.HasPrefix(l, "|---") {
			continue
		}
		if m := layoutRow.FindStringSubmatch(l); m != nil {
			dirs = append(dirs, m[1])
		} else {
			bad = append(bad, l)
		}
	}
	return dirs, bad
}

// TestReadmeLayout: README.md's layout table has one row for each
// top-level directory of the repository and none for a directory that
// is not there, so a new folder at the root (or a removed one) changes
// the table in the same commit.
func TestReadmeLayout(t *testing.T) {
	root := srctree.Root(t)
	have := srctree.TopDirs(t, root)
	if len(have) < 10 {
		t.Fatalf("found %d top-level directories in %s (%v): not the repository's root", len(have), root, have)
	}
	listed, bad := readmeLayout(t, root)
	for _, l := range bad {
		t.Errorf("README.md layout: row %q does not start with one top-level directory as `name/`", l)
	}
	if len(listed) == 0 {
		t.Fatal("README.md has no layout table under \"## Layout\"")
	}
	seen := map[string]bool{}
	for _, d := range listed {
		if seen[d] {
			t.Errorf("README.md layout: %s/ has more than one row", d)
		}
		seen[d] = true
		if !slices.Contains(have, d) {
			t.Errorf("README.md layout: %s/ is no top-level directory of the repository", d)
		}
	}
	for _, d := range have {
		if !seen[d] {
			t.Errorf("README.md layout: the top-level directory %s/ has no row; add one saying what it is", d)
		}
	}
}
