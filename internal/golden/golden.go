// Package golden is the project's one convention for golden files, used
// by the nftables components' batch goldens (nft/internal/nfttest) and by
// the plugins' printed results (internal/plugintest): the expected text is
// a file in the package's testdata/, a test compares what it got with it
// byte for byte, and
//
//	go test ./nft/masq/ -update
//
// rewrites the files of the tests that ran from what they got, to be
// reviewed in the diff before committing. Without -update a missing or
// different file fails the test, naming the first line that differs.
package golden

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/ with what the tests got")

// Path is the golden file called name: testdata/<name>.
func Path(name string) string { return filepath.Join("testdata", name) }

// Updating reports whether this run rewrites golden files (-update).
func Updating() bool { return *update }

// Read returns the golden file called name, failing t when it is missing.
func Read(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile(Path(name))
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	return string(b)
}

// Write makes got the golden file called name.
func Write(t testing.TB, name, got string) {
	t.Helper()
	if err := os.MkdirAll("testdata", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(Path(name), []byte(got), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Check compares got with the golden file called name, what says what was
// got ("batch", "result"); under -update it writes got there instead.
func Check(t testing.TB, name, what, got string) {
	t.Helper()
	if *update {
		Write(t, name, got)
		return
	}
	if want := Read(t, name); got != want {
		t.Errorf("%s differs from %s (run with -update after checking):\n%s", what, Path(name), Diff(want, got))
	}
}

// Diff names the first line at which got differs from want.
func Diff(want, got string) string {
	if n, a, b, ok := FirstDiff(want, got); ok {
		return fmt.Sprintf("line %d:\n  want %q\n  got  %q", n, a, b)
	}
	return "(identical lines, different bytes)"
}

// FirstDiff finds the first line (counted from 1) at which got differs
// from want, and that line of each ("" past the end); ok is false when
// their lines are all the same.
func FirstDiff(want, got string) (n int, wantLine, gotLine string, ok bool) {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := range max(len(w), len(g)) {
		var a, b string
		if i < len(w) {
			a = w[i]
		}
		if i < len(g) {
			b = g[i]
		}
		if a != b {
			return i + 1, a, b, true
		}
	}
	return 0, "", "", false
}
