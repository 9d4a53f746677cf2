package main

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/nftcni/nftcni/internal/golden"
)

// TestStartPathInitWork pins the packages whose initialisers run on every
// exec of the binary, whichever plugin it is: the Go runtime reports them
// under GODEBUG=inittrace=1, and each one touches code, type data and heap
// pages that every plugin exec pays for (docs/performance.md, "Keeping the
// start path small"). Our own packages are pinned with their allocation
// counts as well. A package new to the list, or one of ours allocating
// more, fails here: make the work lazy (a sync.OnceValue, a function
// instead of a package-level variable, data instead of code) or, for a
// library that has to be linked, measure what it costs and update the file
// with -update.
func TestStartPathInitWork(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		// The standard library's set differs by architecture (CPU feature
		// detection); the list is amd64's.
		t.Skip("the list is amd64's")
	}
	cmd := exec.Command(filepath.Join(nftcniBin(t), "loopback"))
	cmd.Env = []string{"CNI_COMMAND=VERSION", "GODEBUG=inittrace=1"}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("loopback VERSION: %v\n%s", err, stderr.String())
	}
	got, err := initWork(stderr.String())
	if err != nil {
		t.Fatal(err)
	}
	if !golden.Updating() {
		want, err := initWork(golden.Read(t, "init-work.txt"))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range got.pkgs {
			if _, ok := want.allocs[p]; !ok {
				t.Errorf("%s now has init work on every exec (%d allocations)", p, got.allocs[p])
			} else if own(p) && got.allocs[p] > want.allocs[p] {
				t.Errorf("%s allocates %d times at start, was %d", p, got.allocs[p], want.allocs[p])
			}
		}
	}
	golden.Check(t, "init-work.txt", "packages with init work", got.String())
}

// own reports whether pkg is one of this module's packages.
func own(pkg string) bool {
	return pkg == "main" || strings.HasPrefix(pkg, "github.com/nftcni/nftcni/")
}

type initList struct {
	pkgs   []string // in the order they ran
	allocs map[string]int
}

// initWork reads inittrace lines ("init <pkg> @0.1 ms, 0.01 ms clock, 312
// bytes, 7 allocs") or the golden file, which lists the packages one a
// line, ours followed by their allocation count; lines starting with #
// are comments.
func initWork(text string) (initList, error) {
	l := initList{allocs: map[string]int{}}
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 0 || strings.HasPrefix(f[0], "#"):
			continue
		case f[0] == "init" && len(f) == 11:
			var n int
			if _, err := fmt.Sscanf(f[9], "%d", &n); err != nil {
				return l, fmt.Errorf("inittrace line %q: %v", line, err)
			}
			l.pkgs, l.allocs[f[1]] = append(l.pkgs, f[1]), n
		case len(f) <= 2 && f[0] != "init":
			n := 0
			if len(f) == 2 {
				if _, err := fmt.Sscanf(f[1], "%d", &n); err != nil {
					return l, fmt.Errorf("line %q: %v", line, err)
				}
			}
			l.pkgs, l.allocs[f[0]] = append(l.pkgs, f[0]), n
		default:
			return l, fmt.Errorf("unexpected line %q", line)
		}
	}
	return l, nil
}

// String is the golden file: the packages sorted, ours with their
// allocation counts.
func (l initList) String() string {
	var b strings.Builder
	b.WriteString("# Packages whose initialisers run on every exec (GODEBUG=inittrace=1, loopback VERSION),\n")
	b.WriteString("# ours with their allocation count. See TestStartPathInitWork and docs/performance.md.\n")
	pkgs := slices.Sorted(slices.Values(l.pkgs))
	for _, p := range pkgs {
		if own(p) {
			fmt.Fprintf(&b, "%s %d\n", p, l.allocs[p])
		} else {
			fmt.Fprintf(&b, "%s\n", p)
		}
	}
	return b.String()
}
