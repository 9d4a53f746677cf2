// Command nftcni is every nftcni plugin in one binary. It dispatches on the
// name it was started as (busybox style): run as /opt/cni/bin/bridge it is
// the bridge plugin; run as nftcni it is the command-line tool.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/nftcni/nftcni/cni"
)

// plugins is filled by the plugin_*.go files, each behind a build tag
// (nftcni_no_<name>) so an edge build can leave plugins out.
var plugins = map[string]*cni.Plugin{}

func register(p *cni.Plugin) {
	plugins[p.Name] = p
	cni.Register(p)
}

func pluginNames() []string {
	names := make([]string, 0, len(plugins))
	for n := range plugins {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func main() {
	name := filepath.Base(os.Args[0])
	if p, ok := plugins[name]; ok {
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
