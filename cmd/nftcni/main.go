// Command nftcni is every nftcni plugin in one binary. It dispatches on the
// name it was started as (busybox style): run as /opt/cni/bin/bridge it is
// the bridge plugin; run as nftcni it is the command-line tool.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/reapply"
)

// The plugin_*.go files register the plugins, each behind a build tag
// (nftcni_no_<name>) so an edge build can leave plugins out. cni's registry
// is the only list: dispatch, the CLI and in-process delegation all read it.
func register(p *cni.Plugin) { cni.Register(p) }

func pluginNames() []string { return cni.Registered() }

// reappliers are the plugins that keep host nftables state, with what
// re-creates it for `nftcni reload` (package reapply): registered by the
// plugin files next to the plugins, under the same build tags. A fixed
// array, not a map: every plugin exec runs the registrations, and they
// must not allocate (startpath_test.go); reapplyRegistry makes the map
// when a reload needs it.
var reappliers struct {
	n  int
	of [16]struct {
		name string
		f    reapply.Func
	}
}

func registerReapply(name string, f reapply.Func) {
	reappliers.of[reappliers.n].name, reappliers.of[reappliers.n].f = name, f
	reappliers.n++
}

// reapplyRegistry is every registered reapplier.
func reapplyRegistry() reapply.Registry {
	reg := reapply.Registry{}
	for _, r := range reappliers.of[:reappliers.n] {
		reg[r.name] = r.f
	}
	return reg
}

// subcommands are words a plugin binary takes as its first argument instead
// of being a plugin, keyed "<plugin> <word>" ("dhcp daemon"); the plugin
// files fill it in.
var subcommands = map[string]func(args []string) int{}

func main() {
	name := filepath.Base(os.Args[0])
	if p := cni.Lookup(name); p != nil {
		if len(os.Args) > 1 {
			if sub := subcommands[name+" "+os.Args[1]]; sub != nil {
				os.Exit(sub(os.Args[2:]))
			}
		}
		os.Exit(cni.Main(p))
	}
	if name == "nftcni" || strings.HasPrefix(name, "nftcni.") || strings.HasPrefix(name, "nftcni-") {
		os.Exit(cli(os.Args[1:]))
	}
	msg := fmt.Sprintf("nftcni: unknown plugin %q (started as %s); this binary provides: %s",
		name, os.Args[0], strings.Join(pluginNames(), ", "))
	fmt.Fprintln(os.Stderr, msg)
	if os.Getenv("CNI_COMMAND") != "" {
		// A runtime reads the error object from stdout.
		os.Stdout.WriteString(`{"code": 999, "msg": ` + quoteJSON(msg) + `}`)
	}
	os.Exit(1)
}
