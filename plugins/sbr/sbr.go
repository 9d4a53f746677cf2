// Package sbr is the "sbr" (source-based routing) chained plugin: inside
// the container, each address of the interface gets its own routing table,
// selected by a rule on the source address, holding a default route via
// the address's gateway and copies of the interface's routes. Replies then
// leave through the interface their address belongs to, whatever the
// container's main table says.
//
// It behaves like the reference sbr plugin (same keys, results and
// error texts) except for the deliberate differences listed, with their
// reasons, in README.md: ADD moves out of the main
// table only the routes it copied, DEL succeeds when the namespace is
// gone, removes only rules that look like ours and the routes it put in
// its tables, and CHECK checks.
package sbr

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"

	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/plugins/internal/rollback"
)

// Plugin is the sbr plugin. Its rules, tables and routes are inside the
// container's namespace and go with it, and it delegates to nothing: GC
// has nothing to collect, and ADD depends on nothing STATUS could check.
var Plugin = &cni.Plugin{
	Name:        "sbr",
	Add:         cmdAdd,
	Del:         cmdDel,
	Check:       cmdCheck,
	GC:          cni.NothingToCollect,
	NoHostState: true,
	Status:      cni.AlwaysReady,
	Validate: func(stdin []byte) error {
		_, err := loadConf(stdin)
		return err
	},
}

// firstTable is the lowest table id sbr picks by itself, as the reference.
const firstTable = 100

// gateway is the next hop of ip's default route in its table: the
// configured gateway of its family (static is then true), else its
// prevResult gateway (none: no default route).
func (c *NetConf) gateway(ip *cni.IPConfig) (gw netip.Addr, static bool) {
	gw = c.gw6
	if ip.Address.Addr().Unmap().Is4() {
		gw = c.gw4
	}
	if gw.IsValid() {
		return gw, true
	}
	return ip.Gateway.Unmap(), false
}

// addrs returns the prevResult's addresses that belong to ifName: all,
// except those whose interface index names another interface (an address
// without an index counts as ours, as in the reference). A prevResult
// without any address is an error.
func (c *NetConf) addrs(ifName string) ([]*cni.IPConfig, error) {
	if c.RawPrevResult == nil {
		return nil, errors.New("This plugin must be called as chained plugin")
	}
	prev, err := c.PrevResult()
	if err != nil {
		return nil, err
	}
	if prev == nil {
		return nil, errors.New("This plugin must be called as chained plugin")
	}
	if len(prev.IPs) == 0 {
		return nil, fmt.Errorf("No IP addresses supplied on interface: %s", ifName)
	}
	var out []*cni.IPConfig
	for _, ip := range prev.IPs {
		if i := ip.Interface; i != nil && *i >= 0 && *i < len(prev.Interfaces) && prev.Interfaces[*i].Name != ifName {
			continue
		}
		out = append(out, ip)
	}
	return out, nil
}

// hostPrefix is a as a /32 or /128: what a source rule matches.
func hostPrefix(a netip.Addr) netip.Prefix {
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen())
}

// ourRule reports whether r is a plain "from <addr> lookup <table>" rule:
// the only kind sbr makes, and the only kind its DEL and CHECK look at.
func ourRule(r netlinkx.Rule, addr netip.Addr) bool {
	return r.Lookup() && !r.OtherSelectors && r.Src == hostPrefix(addr)
}

// lockNetns takes the reference's exclusive lock on the namespace path, so
// that sbr invocations for one container (ours or the reference's) do not
// interleave. Unlike the reference it never creates the path: a missing
// namespace gives an error matching fs.ErrNotExist.
func lockNetns(path string) (*os.File, error) {
	f, err := os.Open(path)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, fmt.Errorf("failed to open netns %q: %w", path, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	return f, nil
}

// inNetns opens the container's namespace under the lock and a netlink
// handle inside it.
func inNetns(path string, fn func(h *netlinkx.Handle) error) error {
	lock, err := lockNetns(path)
	if err != nil {
		return err
	}
	defer lock.Close()
	h, err := netlinkx.OpenPath(path)
	if err != nil {
		return err
	}
	defer h.Close()
	return fn(h)
}

func cmdAdd(_ context.Context, a *cni.CmdArgs) (*cni.Result, error) {
	conf, err := loadConf(a.StdinData)
	if err != nil {
		return nil, err
	}
	ips, err := conf.addrs(a.IfName)
	if err != nil {
		return nil, err
	}
	err = inNetns(a.Netns, func(h *netlinkx.Handle) (err error) {
		u := rollback.New("sbr", a)
		defer u.End(&err)
		if conf.Table != nil {
			return addRulesOnly(h, u, ips, *conf.Table)
		}
		return setupTables(h, u, conf, a.IfName, ips, a.Logf)
	})
	if err != nil {
		return nil, err
	}
	prev, _ := conf.PrevResult()
	return prev, nil
}

// addRulesOnly adds "from <ip> lookup <table>" for each address, unless it
// is there already (the reference added duplicates on a repeated ADD).
func addRulesOnly(h *netlinkx.Handle, u *rollback.Rollback, ips []*cni.IPConfig, table int) error {
	rules, err := h.Rules(0)
	if err != nil {
		return fmt.Errorf("Failed to list all rules: %w", err)
	}
	for _, ip := range ips {
		addr := ip.Address.Addr()
		if _, ok := findRule(rules, addr, table); ok {
			continue
		}
		r := netlinkx.Rule{Src: hostPrefix(addr), Table: table}
		if err := h.AddRule(r); err != nil {
			return fmt.Errorf("failed to add rule: %w", err)
		}
		u.Push("", func() error { return h.DelRule(r) })
	}
	return nil
}

// findRule finds our rule for addr; table 0 matches any table.
func findRule(rules []netlinkx.Rule, addr netip.Addr, table int) (netlinkx.Rule, bool) {
	for _, r := range rules {
		if ourRule(r, addr) && (table == 0 || r.Table == table) {
			return r, true
		}
	}
	return netlinkx.Rule{}, false
}

// setupTables gives each address a table: a source
// rule, a default route via the address's gateway (the configured one of
// its family, else its own), and copies of the interface's main-table
// routes that belong to the address (its source or gateway is inside the
// address's prefix) or to no address in particular (neither source nor
// gateway). A main-table default route is not copied where a configured
// gateway takes its place. The routes copied are then removed from the
// main table, except, with addSourceHints, the on-link ones; the others
// stay (the reference removed every route of the interface). An address
// that already has its rule keeps its table, so a repeated ADD changes
// nothing.
func setupTables(h *netlinkx.Handle, u *rollback.Rollback, conf *NetConf, ifName string, ips []*cni.IPConfig, logf func(string, ...any)) error {
	rules, err := h.Rules(0)
	if err != nil {
		return fmt.Errorf("Failed to list all rules: %w", err)
	}
	link, err := h.LinkByName(ifName)
	if err != nil {
		return fmt.Errorf("Cannot find network interface %s: %w", ifName, netlinkx.Cause(err))
	}
	main, err := h.Routes(0, 0)
	if err != nil {
		return fmt.Errorf("Failed to list all routes: %w", err)
	}
	var ifRoutes []netlinkx.Route
	for _, r := range main {
		if r.LinkIndex == link.Index {
			ifRoutes = append(ifRoutes, r)
		}
	}
	// Tables referenced by a rule are taken; tables with routes but no
	// rule count as free, as in the reference (same choice, so either
	// plugin's DEL finds the other's tables).
	used := map[int]bool{}
	for _, r := range rules {
		used[r.Table] = true
	}
	next := func(from int) int {
		for used[from] {
			from++
		}
		return from
	}
	table := next(firstTable)
	copied := map[int]bool{} // indexes into ifRoutes
	for _, ip := range ips {
		addr := ip.Address.Addr()
		t := table
		if r, ok := findRule(rules, addr, 0); ok {
			t = r.Table
		} else {
			r := netlinkx.Rule{Src: hostPrefix(addr), Table: t}
			if err := h.AddRule(r); err != nil {
				return fmt.Errorf("Failed to add rule: %w", err)
			}
			u.Push("", func() error { return h.DelRule(r) })
			used[t] = true
			table = next(t + 1)
		}
		gw, static := conf.gateway(ip)
		if gw.IsValid() {
			def := netlinkx.Route{Dst: defaultDst(gw), Gw: gw, LinkIndex: link.Index, Table: t}
			if err := replaceRoute(h, u, def); err != nil {
				return fmt.Errorf("Failed to add default route to %s: %w", gw, err)
			}
		}
		for i, r := range ifRoutes {
			if !belongs(r, ip.Address) {
				continue
			}
			copied[i] = true
			if static && r.Dst.Bits() == 0 && r.Dst.Addr().Is4() == gw.Is4() {
				continue // the configured gateway's default route stands
			}
			c := r
			c.Table = t
			if err := replaceRoute(h, u, c); err != nil {
				return fmt.Errorf("Failed to readd route: %w", err)
			}
		}
	}
	if conf.AddSourceHints {
		for _, ip := range ips {
			if err := addSourceHint(h, u, link.Index, ip.Address, main); err != nil {
				// As in the reference, a hint the kernel refuses (e.g. an
				// address that is not on the interface) costs only the hint.
				logf("sbr: adding the source hint for %s: %v", ip.Address, err)
			}
		}
	}
	for i, r := range ifRoutes {
		if !copied[i] || (conf.AddSourceHints && !r.Gw.IsValid()) {
			continue
		}
		if err := h.DelRoute(r); err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("Failed to delete route: %w", err)
		}
		u.Push("", func() error { return h.ReplaceRoute(r) })
	}
	return nil
}

// defaultDst is the default destination of gw's family.
func defaultDst(gw netip.Addr) netip.Prefix {
	if gw.Is4() {
		return netip.PrefixFrom(netip.IPv4Unspecified(), 0)
	}
	return netip.PrefixFrom(netip.IPv6Unspecified(), 0)
}

// addSourceHint makes the main table's route to p's subnet on the link
// carry p's address as preferred source: the route already there (the
// kernel's connected route) is replaced in place, keeping its metric: sbr
// keeps that route in main, so a hint added beside it at another metric
// (IPv6 puts a metric-0 route at 1024, behind the kernel's 256) would
// never be used. Without such a route one is added, scope link, metric 0.
// A failing ADD puts the old route back.
func addSourceHint(h *netlinkx.Handle, u *rollback.Rollback, index int, p netip.Prefix, main []netlinkx.Route) error {
	addr := p.Addr().Unmap()
	hint := netlinkx.Route{Dst: p.Masked(), Src: addr, LinkIndex: index, Scope: unix.RT_SCOPE_LINK}
	var old *netlinkx.Route
	for _, r := range main {
		if r.LinkIndex == index && r.Dst == hint.Dst && !r.Gw.IsValid() && r.Type == unix.RTN_UNICAST {
			old = &r
			break
		}
	}
	if old != nil {
		if old.Src == addr {
			return nil
		}
		hint.Priority, hint.Protocol, hint.MTU, hint.AdvMSS = old.Priority, old.Protocol, old.MTU, old.AdvMSS
	}
	if err := h.ReplaceRoute(hint); err != nil {
		return err
	}
	if old != nil {
		prev := *old
		u.Push("", func() error { return h.ReplaceRoute(prev) })
	} else {
		u.Push("", func() error { return h.DelRoute(hint) })
	}
	return nil
}

// belongs reports whether route r of the interface goes into the table of
// address p: its preferred source or its gateway is inside p, or it has
// neither (a route of the link as a whole, e.g. IPv6 link-local).
func belongs(r netlinkx.Route, p netip.Prefix) bool {
	m := p.Masked()
	if !r.Src.IsValid() && !r.Gw.IsValid() {
		return true
	}
	return (r.Src.IsValid() && m.Contains(r.Src.Unmap())) || (r.Gw.IsValid() && m.Contains(r.Gw.Unmap()))
}

// replaceRoute installs r (replacing a route with the same key) and
// registers its removal, unless it was already there exactly like that.
func replaceRoute(h *netlinkx.Handle, u *rollback.Rollback, r netlinkx.Route) error {
	have, err := h.Routes(family(r.Dst.Addr()), r.Table)
	if err != nil {
		return err
	}
	for _, x := range have {
		if x.Dst == r.Dst && x.Gw == r.Gw && x.LinkIndex == r.LinkIndex && x.Priority == r.Priority {
			return nil
		}
	}
	if err := h.ReplaceRoute(r); err != nil {
		return err
	}
	u.Push("", func() error { return h.DelRoute(r) })
	return nil
}

func family(a netip.Addr) int {
	if a.Is4() {
		return unix.AF_INET
	}
	return unix.AF_INET6
}

// cmdDel removes the source rules of the interface's addresses (those it
// has now and those the prevResult lists, so that rules are found even
// when the interface is already gone) and the interface's routes in the
// tables they pointed to. With `table` configured, only
// rules for that table go and no routes are touched. A missing namespace
// or an empty CNI_NETNS is success. Every deletion is tried; the errors
// are returned together.
//
// The config's values are not judged: `gateways` plays no part in DEL, and
// with a `table` the kernel cannot have no ADD succeeded, so there is
// nothing of it to remove. Failing there would stop the runtime's DEL of
// the chain before the interface plugin's, and leak the attachment (the
// reference did not look at either in DEL).
func cmdDel(_ context.Context, a *cni.CmdArgs) error {
	conf, err := decodeConf(a.StdinData)
	if err != nil {
		return err
	}
	if a.Netns == "" || !conf.validTable() {
		return nil
	}
	if _, err := os.Stat(a.Netns); errors.Is(err, fs.ErrNotExist) {
		return nil // the container is gone, and its rules and routes with it
	}
	var prevIPs []*cni.IPConfig
	if conf.RawPrevResult != nil {
		prevIPs, _ = conf.addrs(a.IfName) // best effort: DEL must not fail on it
	}
	return inNetns(a.Netns, func(h *netlinkx.Handle) error {
		addrs := map[netip.Addr]bool{}
		for _, ip := range prevIPs {
			addrs[ip.Address.Addr().Unmap()] = true
		}
		link, lerr := h.LinkByName(a.IfName)
		if lerr == nil {
			have, err := h.Addrs(a.IfName, 0)
			if err != nil {
				return err
			}
			for _, ad := range have {
				addrs[ad.Prefix.Addr().Unmap()] = true
			}
		} else if !errors.Is(lerr, netlinkx.ErrNotFound) {
			return lerr
		}
		rules, err := h.Rules(0)
		if err != nil {
			return fmt.Errorf("Failed to list all rules: %w", err)
		}
		var errs []error
		tables := map[int]bool{}
		for _, r := range rules {
			if !r.Lookup() || r.OtherSelectors || r.Src.Bits() != r.Src.Addr().BitLen() || !addrs[r.Src.Addr()] {
				continue
			}
			if conf.Table != nil && r.Table != *conf.Table {
				continue
			}
			if err := h.DelRule(r); err != nil && !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("Failed to delete rule %v: %w", r, err))
				continue
			}
			tables[r.Table] = true
		}
		if conf.Table == nil && lerr == nil {
			for t := range tables {
				if netlinkx.ReservedTable(t) { // sbr never empties the kernel's own tables
					continue
				}
				errs = append(errs, flushLinkRoutes(h, t, link.Index))
			}
		}
		return errors.Join(errs...)
	})
}

// flushLinkRoutes deletes the link's routes from table t.
func flushLinkRoutes(h *netlinkx.Handle, t, index int) error {
	routes, err := h.Routes(0, t)
	if err != nil {
		return err
	}
	var errs []error
	for _, r := range routes {
		if r.LinkIndex != index {
			continue
		}
		if err := h.DelRoute(r); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// cmdCheck verifies what ADD set up, for each address of the interface in
// prevResult: its source rule (to the configured table, if any) and,
// when sbr chose the table, the default route via the address's gateway
// and a route to the address's subnet on the interface in that table. The
// reference's CHECK checked nothing.
func cmdCheck(_ context.Context, a *cni.CmdArgs) error {
	conf, err := loadConf(a.StdinData)
	if err != nil {
		return err
	}
	ips, err := conf.addrs(a.IfName)
	if err != nil {
		return err
	}
	return inNetns(a.Netns, func(h *netlinkx.Handle) error {
		link, err := h.LinkByName(a.IfName)
		if err != nil {
			return fmt.Errorf("Cannot find network interface %s: %w", a.IfName, netlinkx.Cause(err))
		}
		rules, err := h.Rules(0)
		if err != nil {
			return fmt.Errorf("Failed to list all rules: %w", err)
		}
		want := 0
		if conf.Table != nil {
			want = *conf.Table
		}
		for _, ip := range ips {
			addr := ip.Address.Addr()
			r, ok := findRule(rules, addr, want)
			if !ok {
				if want != 0 {
					return fmt.Errorf("sbr: no rule \"from %s lookup %d\"", hostPrefix(addr), want)
				}
				return fmt.Errorf("sbr: no rule \"from %s lookup <table>\"", hostPrefix(addr))
			}
			if conf.Table != nil {
				continue
			}
			routes, err := h.Routes(0, r.Table)
			if err != nil {
				return err
			}
			has := func(dst netip.Prefix, gw netip.Addr) bool {
				for _, x := range routes {
					if x.Dst == dst && x.LinkIndex == link.Index && (!gw.IsValid() || x.Gw == gw) {
						return true
					}
				}
				return false
			}
			if gw, _ := conf.gateway(ip); gw.IsValid() {
				if !has(defaultDst(gw), gw) {
					return fmt.Errorf("sbr: table %d of %s has no default route via %s dev %s", r.Table, addr, gw, a.IfName)
				}
			}
			if sub := ip.Address.Masked(); sub.Bits() < addr.BitLen() && !has(sub, netip.Addr{}) {
				return fmt.Errorf("sbr: table %d of %s has no route to %s dev %s", r.Table, addr, sub, a.IfName)
			}
		}
		if conf.Table == nil && conf.AddSourceHints {
			return checkSourceHints(h, link.Index, a.IfName, ips)
		}
		return nil
	})
}

// checkSourceHints verifies that the main table routes each address's
// subnet over the link with the address as preferred source; where
// addresses share a subnet, the last one's hint is the one ADD left.
func checkSourceHints(h *netlinkx.Handle, index int, ifName string, ips []*cni.IPConfig) error {
	main, err := h.Routes(0, 0)
	if err != nil {
		return err
	}
	want := map[netip.Prefix]netip.Addr{}
	var order []netip.Prefix
	for _, ip := range ips {
		sub := ip.Address.Masked()
		if _, ok := want[sub]; !ok {
			order = append(order, sub)
		}
		want[sub] = ip.Address.Addr().Unmap()
	}
	for _, sub := range order {
		found := false
		for _, r := range main {
			if r.LinkIndex == index && r.Dst == sub && !r.Gw.IsValid() && r.Src == want[sub] {
				found = true
				break
			}
		}
		if !found {
			return fmt.Errorf("sbr: the main table has no route to %s dev %s src %s", sub, ifName, want[sub])
		}
	}
	return nil
}
