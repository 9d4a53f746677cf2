package vmtest

import (
	"bufio"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// Modules are the kernel modules the guest loads before the tests, by
// name ('-' and '_' are the same, as for modprobe). Their dependencies
// come from modules.dep; a name the kernel has built in (modules.builtin)
// is fine and skipped. The list covers every kind of link, qdisc,
// classifier, action and nftables expression the plugins of the
// reference set use, so a new plugin normally finds what it needs here; if
// not, add the module below (or pass -modules / VMTEST_EXTRA_MODULES for a
// one-off run). A missing module shows in the VM as a clear failure: the
// privtest feature probes fail instead of skipping there, and every module
// the kernel asked for in vain is listed in the summary.
var Modules = []string{
	// Links.
	"veth", "bridge", "8021q", "macvlan", "macvtap", "ipvlan", "ipvtap",
	"vrf", "dummy", "tun", "ifb",
	// Traffic control (bandwidth): shaping, ingress redirect to ifb.
	"sch_tbf", "sch_htb", "sch_ingress",
	"cls_u32", "cls_matchall", "cls_basic", "act_mirred", "act_gact", "act_police",
	// nftables: core, NAT (masquerade, portmap DNAT/SNAT, redirect),
	// conntrack matches and flushing, fib, reject, the bridge family and
	// the expressions a firewall may use.
	"nf_tables", "nf_conntrack", "nf_conntrack_netlink", "nf_nat",
	"nft_chain_nat", "nft_nat", "nft_masq", "nft_redir", "nft_ct",
	"nft_fib", "nft_fib_inet", "nft_fib_ipv4", "nft_fib_ipv6",
	"nft_reject", "nft_reject_inet", "nft_reject_ipv4", "nft_reject_ipv6",
	"nft_meta_bridge", "nft_reject_bridge",
	"nft_limit", "nft_hash", "nft_numgen", "nft_quota", "nft_objref", "nft_log",
	"nft_dup_netdev", "nft_fwd_netdev",
	// xtables matches inside nftables rules (nft_compat), as iptables-nft
	// writes them: the firewall plugin's rules in foreign FORWARD chains.
	"nft_compat", "xt_conntrack", "xt_comment",
	// …and what Docker's iptables-nft rules use, which the coexistence
	// tests build (internal/hostfw).
	"xt_addrtype", "xt_tcpudp", "xt_nat", "xt_MASQUERADE",
	// kube-proxy's iptables mode marks packets for masquerading (-m mark,
	// -j MARK): both are xt_mark.
	"xt_mark",
	// The reference portmap's entry rules (-m multiport), which the
	// switching tests (tests/reliability/upgrade) have the reference make.
	"xt_multiport",
}

// mergedInto names modules of the list that newer kernels build into
// another module: nft_objref is a module of its own in 6.1 and part of
// nf_tables.ko in 6.12. Where it is absent and the module it went into is
// there, nothing is missing.
var mergedInto = map[string]string{
	"nft_objref": "nf_tables",
}

// moduleIndex is what modules.dep, modules.softdep, modules.alias and
// modules.builtin say about a kernel.
type moduleIndex struct {
	dir     string
	path    map[string]string   // name → path relative to dir
	deps    map[string][]string // path → paths of direct dependencies
	pre     map[string][]string // name → soft dependencies to load first (names or aliases)
	post    map[string][]string // name → soft dependencies to load after
	aliases [][2]string         // pattern, module name
	builtin map[string]bool
}

// modEntry is one module to load. A soft dependency is optional: libcrc32c
// wants "crc32c", which two modules provide, one of which needs a CPU
// feature; loading it may fail as long as one works.
type modEntry struct {
	Path     string
	Optional bool
}

// moduleName is the canonical name of a module file or name.
func moduleName(s string) string {
	s = path.Base(s)
	for _, ext := range []string{".ko", ".ko.xz", ".ko.zst", ".ko.gz"} {
		if strings.HasSuffix(s, ext) {
			s = strings.TrimSuffix(s, ext)
			break
		}
	}
	return strings.ReplaceAll(s, "-", "_")
}

func readLines(file string, fn func(fields []string)) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if l := sc.Text(); !strings.HasPrefix(l, "#") {
			fn(strings.Fields(l))
		}
	}
	return sc.Err()
}

func loadModuleIndex(dir string) (*moduleIndex, error) {
	idx := &moduleIndex{dir: dir, path: map[string]string{}, deps: map[string][]string{},
		pre: map[string][]string{}, post: map[string][]string{}, builtin: map[string]bool{}}
	err := readLines(filepath.Join(dir, "modules.dep"), func(f []string) {
		if len(f) == 0 || !strings.HasSuffix(f[0], ":") {
			return
		}
		mod := strings.TrimSuffix(f[0], ":")
		idx.path[moduleName(mod)] = mod
		idx.deps[mod] = f[1:]
	})
	if err != nil {
		return nil, fmt.Errorf("kernel modules: %w (set VMTEST_MODULES to the kernel's /lib/modules/<version>)", err)
	}
	// The other files are optional: a kernel without them has no soft
	// dependencies, aliases or built-in modules to know about.
	_ = readLines(filepath.Join(dir, "modules.softdep"), func(f []string) {
		if len(f) < 3 || f[0] != "softdep" {
			return
		}
		mod, list := moduleName(f[1]), idx.pre
		for _, w := range f[2:] {
			switch w {
			case "pre:":
				list = idx.pre
			case "post:":
				list = idx.post
			default:
				list[mod] = append(list[mod], w)
			}
		}
	})
	_ = readLines(filepath.Join(dir, "modules.alias"), func(f []string) {
		if len(f) == 3 && f[0] == "alias" {
			idx.aliases = append(idx.aliases, [2]string{f[1], moduleName(f[2])})
		}
	})
	_ = readLines(filepath.Join(dir, "modules.builtin"), func(f []string) {
		for _, m := range f {
			idx.builtin[moduleName(m)] = true
		}
	})
	return idx, nil
}

// lookup resolves a module name or alias to module names.
func (idx *moduleIndex) lookup(name string) []string {
	if _, ok := idx.path[moduleName(name)]; ok {
		return []string{moduleName(name)}
	}
	var mods []string
	for _, a := range idx.aliases {
		if ok, _ := path.Match(a[0], name); ok && !slices.Contains(mods, a[1]) {
			mods = append(mods, a[1])
		}
	}
	return mods
}

// resolve returns the module files to load, in an order where every
// module comes after its dependencies (hard ones from modules.dep, soft
// "pre:" ones from modules.softdep), each once.
func (idx *moduleIndex) resolve(names []string) ([]modEntry, error) {
	var (
		order []modEntry
		at    = map[string]int{} // path → index in order
		visit func(p string, optional bool)
	)
	visit = func(p string, optional bool) {
		if i, ok := at[p]; ok {
			if !optional && i >= 0 {
				order[i].Optional = false
			}
			return
		}
		at[p] = -1 // in progress: breaks cycles
		name := moduleName(p)
		soft := func(list []string) {
			for _, s := range list {
				for _, m := range idx.lookup(s) {
					visit(idx.path[m], true)
				}
			}
		}
		soft(idx.pre[name])
		for _, d := range idx.deps[p] {
			visit(d, optional)
		}
		at[p] = len(order)
		order = append(order, modEntry{Path: p, Optional: optional})
		soft(idx.post[name])
	}
	for _, n := range names {
		n = moduleName(n)
		p, ok := idx.path[n]
		switch {
		case ok:
			visit(p, false)
		case idx.builtin[n]:
		case mergedInto[n] != "" && (idx.path[mergedInto[n]] != "" || idx.builtin[mergedInto[n]]):
		default:
			return nil, fmt.Errorf("kernel module %q is neither in %s/modules.dep nor built in", n, idx.dir)
		}
	}
	for _, e := range order {
		if strings.HasSuffix(e.Path, ".ko.zst") {
			return nil, fmt.Errorf("kernel module %s: zstd-compressed modules are not supported (.ko, .ko.xz and .ko.gz are)", e.Path)
		}
	}
	return order, nil
}
