// Package srctree reads the module's own source for the tests that keep it
// to docs/architecture.md (internal/layers: the import rules;
// internal/conventions: the other conventions): which trees are the
// product and which are tests and tools, the product's parsed Go files,
// and the repository's top-level directories.
package srctree

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nftcni/nftcni/internal/guest"
)

// Module is the module's import path.
const Module = "github.com/nftcni/nftcni"

// NotProduct are the trees that are tests, tools or examples: they may
// import what they need, and product code may not import them.
var NotProduct = []string{"internal", "nft/internal/nfttest", "vmtest", "tests", "examples", "contrib", "scripts", "docs"}

// Root is the source tree of a test in a package two levels below it
// (internal/<name>). The VM guest has no source tree: the test is skipped
// there, and runs on the host.
func Root(t testing.TB) string {
	t.Helper()
	if guest.InGuest() {
		t.Skip("reads the source tree, which the guest does not have; runs on the host")
	}
	root := filepath.Join("..", "..")
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("no source tree at %s: %v", root, err)
	}
	return root
}

// File is one parsed non-test Go file.
type File struct {
	Pkg  string // its directory relative to the root, slash form
	Name string // its base name
	AST  *ast.File
}

// Files parses, with mode, the non-test Go files below root: the
// product's only, or every tree's. A directory with a go.mod of its own
// (packaging/) is another module, which the product cannot import, nor it
// the product's internals: it is left out.
func Files(t testing.TB, root string, productOnly bool, mode parser.Mode) []File {
	t.Helper()
	var out []File
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel == "." {
				return nil
			}
			if strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || productOnly && slices.Contains(NotProduct, rel) {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, mode)
		if err != nil {
			return err
		}
		out = append(out, File{Pkg: filepath.ToSlash(filepath.Dir(rel)), Name: d.Name(), AST: f})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TopDirs are the directories at root that belong to the repository: all
// but hidden ones (.git, .ci, caches) and those the root .gitignore anchors
// there ("/bin/", "/dist/": build output), so a built checkout lists the
// same as a fresh clone. Sorted.
func TopDirs(t testing.TB, root string) []string {
	t.Helper()
	ignored := map[string]bool{}
	if gi, err := os.ReadFile(filepath.Join(root, ".gitignore")); err == nil {
		for _, l := range strings.Split(string(gi), "\n") {
			l = strings.TrimSpace(l)
			if name, ok := strings.CutPrefix(l, "/"); ok && !strings.ContainsAny(strings.TrimSuffix(name, "/"), "/*?[") {
				ignored[strings.TrimSuffix(name, "/")] = true
			}
		}
	}
	ents, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") && !ignored[e.Name()] {
			out = append(out, e.Name())
		}
	}
	return out
}
