package vmtest

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"
)

// SubsetPkg is one package of a subset and the tests of it that run.
type SubsetPkg struct {
	Pkg string // relative to the module root, "./plugins/bridge"
	Run string // its -test.run; no white space
}

// Subsets are named selections of the privileged suite for runs that
// cannot afford all of it: under emulation of another architecture the
// whole suite takes several times as long as on the host's.
var Subsets = map[string][]SubsetPkg{}

func subsetNames() string {
	names := make([]string, 0, len(Subsets))
	for n := range Subsets {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

func subsetPatterns(name string) []string {
	var pats []string
	for _, p := range Subsets[name] {
		pats = append(pats, p.Pkg)
	}
	return pats
}

// applySubset keeps the packages of the subset, in its order, each with
// its -test.run.
func applySubset(name string, pkgs []testPkg) ([]testPkg, error) {
	byRel := map[string]testPkg{}
	for _, p := range pkgs {
		byRel[filepath.ToSlash(p.Rel)] = p
	}
	var out []testPkg
	for _, s := range Subsets[name] {
		p, ok := byRel[strings.TrimPrefix(s.Pkg, "./")]
		if !ok {
			return nil, fmt.Errorf("subset %s: package %s has no tests", name, s.Pkg)
		}
		if strings.ContainsAny(s.Run, " \t\n") {
			return nil, fmt.Errorf("subset %s: package %s: white space in the run pattern %q", name, s.Pkg, s.Run)
		}
		p.Run = s.Run
		out = append(out, p)
	}
	return out, nil
}
