// Package conventions holds the tests that keep the product to the rules
// of docs/architecture.md that are not import rules (internal/layers
// checks those): the files every plugin has ("Where a new plugin goes"),
// how a plugin says that it has nothing to collect or is always ready,
// what plugins never do themselves, and the entries of "One way to do
// each thing" that a reading of the source can check; and README.md's
// layout table against the root's directories. A new plugin, a second
// way of doing one of those things, or a new folder at the root without
// its line in the README fails here, not in review.
package conventions

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/nftcni/nftcni/internal/srctree"
)

// decoder names the function in a plugin's config.go that decodes its
// stdin where it is not loadConf: the dhcp plugin hands its config to the
// daemon, which decodes it; the plugin reads only the socket path.
var decoder = map[string]string{"ipam/dhcp": "socketPath"}

// fuzzedElsewhere names where a plugin's config decoding is fuzzed when
// not in its own fuzz_test.go: dhcp's is the daemon's.
var fuzzedElsewhere = map[string]string{"ipam/dhcp": "ipam/dhcp/daemon/fuzz_test.go"}

// goFiles parses the module's non-test Go files below root, the
// product's only or every tree's.
func goFiles(t *testing.T, root string, productOnly bool) []srctree.File {
	t.Helper()
	return srctree.Files(t, root, productOnly, parser.SkipObjectResolution)
}

// plugin is a plugin package: one declaring `var Plugin = &cni.Plugin{…}`.
type plugin struct {
	pkg    string // "plugins/bridge", "ipam/hostlocal"
	name   string // its Go package name
	files  []srctree.File
	fields map[string]ast.Expr // of the Plugin literal
}

// plugins finds every plugin package below plugins/ and ipam/.
func plugins(t *testing.T, root string) []plugin {
	t.Helper()
	byPkg := map[string]*plugin{}
	for _, f := range goFiles(t, root, true) {
		if !strings.HasPrefix(f.Pkg, "plugins/") && !strings.HasPrefix(f.Pkg, "ipam/") {
			continue
		}
		p := byPkg[f.Pkg]
		if p == nil {
			p = &plugin{pkg: f.Pkg, name: f.AST.Name.Name}
			byPkg[f.Pkg] = p
		}
		p.files = append(p.files, f)
		if lit := pluginLiteral(f.AST); lit != nil {
			p.fields = map[string]ast.Expr{}
			for _, el := range lit.Elts {
				if kv, ok := el.(*ast.KeyValueExpr); ok {
					if k, ok := kv.Key.(*ast.Ident); ok {
						p.fields[k.Name] = kv.Value
					}
				}
			}
		}
	}
	var out []plugin
	for _, p := range byPkg {
		if p.fields != nil {
			out = append(out, *p)
		}
	}
	slices.SortFunc(out, func(a, b plugin) int { return strings.Compare(a.pkg, b.pkg) })
	if len(out) < 18 {
		t.Fatalf("found %d plugin packages below plugins/ and ipam/, want the 18 of the reference at least", len(out))
	}
	return out
}

// pluginLiteral is the composite literal of `var Plugin = &cni.Plugin{…}`
// in f, or nil.
func pluginLiteral(f *ast.File) *ast.CompositeLit {
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.VAR {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			if len(vs.Names) != 1 || vs.Names[0].Name != "Plugin" || len(vs.Values) != 1 {
				continue
			}
			u, ok := vs.Values[0].(*ast.UnaryExpr)
			if !ok || u.Op != token.AND {
				continue
			}
			if lit, ok := u.X.(*ast.CompositeLit); ok && isSel(lit.Type, "cni", "Plugin") {
				return lit
			}
		}
	}
	return nil
}

func isSel(e ast.Expr, pkg, name string) bool {
	s, ok := e.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	id, ok := s.X.(*ast.Ident)
	return ok && id.Name == pkg && s.Sel.Name == name
}

// funcDecl is p's top-level function called name and the file that
// declares it, or nil.
func (p plugin) funcDecl(name string) (*ast.FuncDecl, string) {
	for _, f := range p.files {
		for _, d := range f.AST.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv == nil && fd.Name.Name == name {
				return fd, f.Name
			}
		}
	}
	return nil, ""
}

// TestPluginFiles: every plugin has what "Where a new plugin goes" lists —
// config.go with its decoder (loadConf), a fuzz test of it, README.md, and
// its file in cmd/nftcni, behind the build tag that leaves it out, whose
// init registers it.
func TestPluginFiles(t *testing.T) {
	root := srctree.Root(t)
	seen := map[string]bool{}
	for _, p := range plugins(t, root) {
		dec := decoder[p.pkg]
		if dec == "" {
			dec = "loadConf"
		}
		if fd, in := p.funcDecl(dec); fd == nil || in != "config.go" {
			t.Errorf("%s: no config.go declaring %s, the function that decodes the config (found in %q)", p.pkg, dec, in)
		}
		fuzz := p.pkg + "/fuzz_test.go"
		if alt, ok := fuzzedElsewhere[p.pkg]; ok {
			fuzz = alt
		}
		if _, err := os.Stat(filepath.Join(root, fuzz)); err != nil {
			t.Errorf("%s: no %s fuzzing its config decoder", p.pkg, fuzz)
		}
		if _, err := os.Stat(filepath.Join(root, p.pkg, "README.md")); err != nil {
			t.Errorf("%s: no README.md", p.pkg)
		}
		base := filepath.Base(p.pkg)
		seen[base] = true
		checkRegistration(t, p, filepath.Join(root, "cmd/nftcni", "plugin_"+base+".go"), base)
	}
	// No registration file without its plugin.
	regs, err := filepath.Glob(filepath.Join(root, "cmd/nftcni", "plugin_*.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range regs {
		if base := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(r), "plugin_"), ".go"); !strings.HasSuffix(r, "_test.go") && !seen[base] {
			t.Errorf("%s registers no plugin package of plugins/ or ipam/", r)
		}
	}
}

// checkRegistration: cmd/nftcni/plugin_<base>.go is built unless
// nftcni_no_<base>, and its init calls register(<pkg>.Plugin).
func checkRegistration(t *testing.T, p plugin, path, base string) {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Errorf("%s: no registration file: %v", p.pkg, err)
		return
	}
	if want := "//go:build !nftcni_no_" + base + "\n"; !strings.HasPrefix(string(src), want) {
		t.Errorf("%s: does not start with %q", path, strings.TrimSpace(want))
	}
	f, err := parser.ParseFile(token.NewFileSet(), path, src, 0)
	if err != nil {
		t.Fatal(err)
	}
	registers := false
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Name.Name != "init" {
			continue
		}
		ast.Inspect(fd.Body, func(n ast.Node) bool {
			c, ok := n.(*ast.CallExpr)
			if ok && len(c.Args) == 1 && isIdent(c.Fun, "register") && isSel(c.Args[0], p.name, "Plugin") {
				registers = true
			}
			return true
		})
	}
	if !registers {
		t.Errorf("%s: no init calling register(%s.Plugin)", path, p.name)
	}
}

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}

// TestHandlers: every plugin sets its five handlers; a GC with nothing to
// do is cni.NothingToCollect and goes with NoHostState, a STATUS with
// nothing to check is cni.AlwaysReady — never a function of the plugin's
// own (inline or named) that only returns nil, which the README's GC and
// STATUS table (cmd/nftcni's TestGCAndStatusAreDecided) could not tell
// from a decision.
func TestHandlers(t *testing.T) {
	root := srctree.Root(t)
	for _, p := range plugins(t, root) {
		for _, h := range []string{"Name", "Add", "Del", "Check", "GC", "Status"} {
			if p.fields[h] == nil {
				t.Errorf("%s: Plugin has no %s", p.pkg, h)
			}
		}
		for h, want := range map[string]string{"GC": "NothingToCollect", "Status": "AlwaysReady"} {
			if e := p.fields[h]; e != nil && p.noop(e) {
				t.Errorf("%s: %s is a function that does nothing: say so with cni.%s", p.pkg, h, want)
			}
		}
		nothing := isSel(p.fields["GC"], "cni", "NothingToCollect")
		noState := isIdent(p.fields["NoHostState"], "true")
		if nothing != noState {
			t.Errorf("%s: GC is cni.NothingToCollect: %v, but NoHostState: %v (a plugin that leaves nothing on the host says both)", p.pkg, nothing, noState)
		}
	}
}

// noop reports whether e is a handler of p's own whose body does nothing
// but return nil.
func (p plugin) noop(e ast.Expr) bool {
	var body *ast.BlockStmt
	switch e := e.(type) {
	case *ast.FuncLit:
		body = e.Body
	case *ast.Ident:
		if fd, _ := p.funcDecl(e.Name); fd != nil {
			body = fd.Body
		}
	}
	if body == nil {
		return false
	}
	switch len(body.List) {
	case 0:
		return true
	case 1:
		r, ok := body.List[0].(*ast.ReturnStmt)
		return ok && len(r.Results) == 1 && isIdent(r.Results[0], "nil")
	}
	return false
}

// TestPluginsLeaveTheProtocolToCNI: plugins get a parsed cni.CmdArgs and
// return a result or an error; they never read the environment (CNI_*
// variables included) nor touch stdin or stdout, which are the protocol's
// (cni/). The dhcp daemon is a daemon: it reads systemd's socket
// activation variables.
func TestPluginsLeaveTheProtocolToCNI(t *testing.T) {
	root := srctree.Root(t)
	envOK := map[string]bool{"ipam/dhcp/daemon": true}
	for _, f := range goFiles(t, root, true) {
		if !strings.HasPrefix(f.Pkg, "plugins/") && !strings.HasPrefix(f.Pkg, "ipam/") {
			continue
		}
		ast.Inspect(f.AST, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.SelectorExpr:
				switch {
				case isSel(n, "os", "Stdout"), isSel(n, "os", "Stdin"),
					isSel(n, "fmt", "Print"), isSel(n, "fmt", "Printf"), isSel(n, "fmt", "Println"):
					t.Errorf("%s/%s: %s.%s: plugins print nothing themselves (cni/ does)", f.Pkg, f.Name, n.X, n.Sel.Name)
				case !envOK[f.Pkg] && (isSel(n, "os", "Getenv") || isSel(n, "os", "LookupEnv") || isSel(n, "os", "Environ")):
					t.Errorf("%s/%s: os.%s: plugins read no environment (cni/ parses CNI_* into cni.CmdArgs)", f.Pkg, f.Name, n.Sel.Name)
				}
			case *ast.CallExpr:
				if isIdent(n.Fun, "print") || isIdent(n.Fun, "println") {
					t.Errorf("%s/%s: builtin print", f.Pkg, f.Name)
				}
			}
			return true
		})
	}
}

// TestUpstreamLibrariesInTestsOnly: the upstream CNI Go library is the
// real client in tests only; nothing the module builds outside _test.go
// files imports it, nor the reference plugins' packages.
func TestUpstreamLibrariesInTestsOnly(t *testing.T) {
	root := srctree.Root(t)
	for _, f := range goFiles(t, root, false) {
		for _, im := range f.AST.Imports {
			if p, _ := strconv.Unquote(im.Path.Value); strings.HasPrefix(p, "github.com/containernetworking/") {
				t.Errorf("%s/%s imports %s outside a _test.go file", f.Pkg, f.Name, p)
			}
		}
	}
}

// TestOneWay checks the entries of docs/architecture.md's "One way to do
// each thing" that a reading of the source can: a second way of doing one
// of them fails here.
func TestOneWay(t *testing.T) {
	root := srctree.Root(t)
	// allowed returns whether pkg is one of the packages listed.
	allowed := func(pkg string, pkgs ...string) bool { return slices.Contains(pkgs, pkg) }
	for _, f := range goFiles(t, root, true) {
		where := f.Pkg + "/" + f.Name
		ast.Inspect(f.AST, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.BasicLit:
				// A namespace's sysctls: sysctl.Get and Set. The tuning
				// plugin checks the keys a config may set against
				// /proc/sys/net, as the reference does.
				if s, err := strconv.Unquote(n.Value); err == nil && n.Kind == token.STRING && strings.Contains(s, "/proc/sys") &&
					!allowed(f.Pkg, "sysctl", "plugins/tuning") {
					t.Errorf("%s: %q: sysctls are read and written through sysctl.Get and sysctl.Set", where, s)
				}
			case *ast.SelectorExpr:
				// A state file replaced whole: atomicfile.Write. The CLI's
				// install replaces the binary itself.
				if isSel(n, "os", "Rename") && !allowed(f.Pkg, "atomicfile", "cmd/nftcni") {
					t.Errorf("%s: os.Rename: a file replaced whole is written with atomicfile.Write", where)
				}
				// Running programs: the plugins a runtime or a delegation
				// executes, a child of the CLI. Nothing else runs one, so
				// no ip, iptables, nft or tc (looking one up is fine).
				if (isSel(n, "exec", "Command") || isSel(n, "exec", "CommandContext") || isSel(n, "os", "StartProcess") ||
					isSel(n, "syscall", "Exec") || isSel(n, "syscall", "ForkExec") || isSel(n, "unix", "Exec")) &&
					!allowed(f.Pkg, "cni", "cniruntime", "cmd/nftcni") {
					t.Errorf("%s: %s.%s: only cni/ (IPAM delegation), cniruntime/ (a chain's plugins) and the CLI run programs", where, n.X, n.Sel.Name)
				}
			case *ast.TypeSpec:
				// The kernel lacking something: nlerr.UnsupportedError.
				if strings.Contains(n.Name.Name, "Unsupported") && strings.HasSuffix(n.Name.Name, "Error") && f.Pkg != "nlerr" {
					t.Errorf("%s: type %s: the kernel lacking something is an *nlerr.UnsupportedError", where, n.Name.Name)
				}
			}
			return true
		})
	}
}
