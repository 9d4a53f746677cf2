package vmtest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
)

// privtestPkg is the package every privileged test goes through
// (privtest.Require / NewNS, directly or via plugintest).
const privtestPkg = "github.com/nftcni/nftcni/internal/privtest"

// testPkg is one package whose tests run in the guest.
type testPkg struct {
	ImportPath string
	Dir        string // source directory on the host
	Rel        string // Dir relative to the module root, "." for the root
	Bin        string // the compiled test binary on the host
	Run        string // -test.run for this package alone (a subset's), or ""
}

// guestDir is where the package's source directory (with its testdata)
// is in the guest: the test binary's working directory, as under go test.
func (p testPkg) guestDir() string { return path.Join("/src", filepath.ToSlash(p.Rel)) }

// guestBin is the test binary's path in the guest.
func (p testPkg) guestBin() string {
	return path.Join("/vmtest/bin", strings.ReplaceAll(filepath.ToSlash(p.Rel), "/", "_")+".test")
}

// goCmd runs the go command in dir and returns its stdout; stderr goes
// into the error.
func goCmd(ctx context.Context, dir string, env []string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	return out, nil
}

// listPackages resolves patterns (relative to dir) to the packages that
// have tests, with the module root. With privOnly, only packages whose
// tests depend on privtest are kept: `./...` then means "the privileged
// suite", whatever packages exist today.
func listPackages(ctx context.Context, dir string, patterns []string, privOnly bool) ([]testPkg, string, error) {
	args := append([]string{"list", "-e", "-f",
		"{{.ImportPath}}\t{{.Dir}}\t{{with .Module}}{{.Dir}}{{end}}\t{{len .TestGoFiles}}\t{{len .XTestGoFiles}}\t{{with .Error}}{{.Err}}{{end}}"}, patterns...)
	out, err := goCmd(ctx, dir, nil, args...)
	if err != nil {
		return nil, "", err
	}
	var (
		pkgs []testPkg
		root string
	)
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Split(sc.Text(), "\t")
		if len(f) != 6 {
			continue
		}
		if f[5] != "" {
			return nil, "", fmt.Errorf("package %s: %s", f[0], f[5])
		}
		if root == "" {
			root = f[2]
		}
		if f[3] == "0" && f[4] == "0" {
			continue
		}
		rel, err := filepath.Rel(f[2], f[1])
		if err != nil || strings.HasPrefix(rel, "..") {
			return nil, "", fmt.Errorf("package %s is outside its module", f[0])
		}
		pkgs = append(pkgs, testPkg{ImportPath: f[0], Dir: f[1], Rel: rel})
	}
	if root == "" {
		return nil, "", fmt.Errorf("go list %s: no packages in a module", strings.Join(patterns, " "))
	}
	if !privOnly || len(pkgs) == 0 {
		return pkgs, root, nil
	}
	priv, err := privilegedPackages(ctx, dir, patterns)
	if err != nil {
		return nil, "", err
	}
	var keep []testPkg
	for _, p := range pkgs {
		if priv[p.ImportPath] {
			keep = append(keep, p)
		}
	}
	return keep, root, nil
}

// privilegedPackages reports which packages' test binaries link privtest.
func privilegedPackages(ctx context.Context, dir string, patterns []string) (map[string]bool, error) {
	args := append([]string{"list", "-e", "-test", "-f", "{{.ImportPath}}\t{{join .Deps \"\\t\"}}"}, patterns...)
	out, err := goCmd(ctx, dir, nil, args...)
	if err != nil {
		return nil, err
	}
	priv := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		f := strings.Split(sc.Text(), "\t")
		pkg, ok := strings.CutSuffix(f[0], ".test")
		if !ok || strings.Contains(pkg, " ") {
			continue
		}
		for _, d := range f[1:] {
			// A dependency of a test build is "path [pkg.test]" when it is
			// recompiled for the test.
			if d == privtestPkg || strings.HasPrefix(d, privtestPkg+" [") {
				priv[pkg] = true
				break
			}
		}
	}
	return priv, sc.Err()
}

// buildEnv makes static binaries for the guest's architecture, as the
// guest has no libc.
func buildEnv(a *guestArch) []string {
	return []string{"CGO_ENABLED=0", "GOOS=linux", "GOARCH=" + a.goarch}
}

// buildTests compiles every package's test binary into out. One go
// invocation builds many packages at once (shared work, parallel links);
// packages whose binaries would have the same name go into separate
// invocations.
func buildTests(ctx context.Context, a *guestArch, root, out string, pkgs []testPkg) error {
	var groups [][]int
	for i, p := range pkgs {
		name := path.Base(p.ImportPath)
		placed := false
		for g := range groups {
			clash := false
			for _, j := range groups[g] {
				if path.Base(pkgs[j].ImportPath) == name {
					clash = true
					break
				}
			}
			if !clash {
				groups[g] = append(groups[g], i)
				placed = true
				break
			}
		}
		if !placed {
			groups = append(groups, []int{i})
		}
	}
	for g, idx := range groups {
		dir := filepath.Join(out, fmt.Sprint(g))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		args := []string{"test", "-c", "-ldflags=-s -w", "-o", dir + string(filepath.Separator)}
		for _, i := range idx {
			args = append(args, pkgs[i].ImportPath)
			pkgs[i].Bin = filepath.Join(dir, path.Base(pkgs[i].ImportPath)+".test")
		}
		if _, err := goCmd(ctx, root, buildEnv(a), args...); err != nil {
			return err
		}
		for _, i := range idx {
			if _, err := os.Stat(pkgs[i].Bin); err != nil {
				return fmt.Errorf("building tests of %s: %w", pkgs[i].ImportPath, err)
			}
		}
	}
	return nil
}

// buildNftcni builds the nftcni binary for the guest and installs its
// plugin links in <out>/nftcni, returning that directory. `nftcni install`
// makes the links; for another architecture a host build runs it and the
// guest's binary then takes its place (the links name "nftcni").
func buildNftcni(ctx context.Context, a *guestArch, root, out string) (string, error) {
	dir := filepath.Join(out, "nftcni")
	bin := filepath.Join(dir, "nftcni")
	installer := bin
	if !a.native() {
		installer = filepath.Join(out, "nftcni-host")
		if _, err := goCmd(ctx, root, []string{"CGO_ENABLED=0"}, "build", "-trimpath", "-o", installer, "./cmd/nftcni"); err != nil {
			return "", err
		}
	}
	if _, err := goCmd(ctx, root, buildEnv(a), "build", "-trimpath", "-ldflags=-s -w", "-o", bin, "./cmd/nftcni"); err != nil {
		return "", err
	}
	var guestBin []byte
	if installer != bin {
		var err error
		if guestBin, err = os.ReadFile(bin); err != nil {
			return "", err
		}
	}
	// install copies itself to <dir>/nftcni and links every plugin name
	// to it.
	if out, err := exec.CommandContext(ctx, installer, "install", dir).CombinedOutput(); err != nil {
		return "", fmt.Errorf("nftcni install: %v\n%s", err, out)
	}
	if guestBin != nil {
		if err := os.WriteFile(bin, guestBin, 0o755); err != nil {
			return "", err
		}
	}
	return dir, nil
}
