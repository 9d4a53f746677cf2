package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/nftcni/nftcni/attachrec"
	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/cniruntime"
	"github.com/nftcni/nftcni/netns"
)

// cmdGCAll is `nftcni gc --all`: the sweep that nobody else runs
// (containerd and the kubelet never call GC). For every network of the
// configuration directory it deletes, with a full DEL, the attachments
// whose namespace is gone — cached ones and those only our records know
// (an ADD that crashed before the runtime cached it) — and then sends the
// plugins GC with every attachment that is still valid, so they release
// whatever else of the network they hold. Valid means cached or recorded
// with a namespace that exists (or cannot be examined); docs/cli.md has
// the rule and why an ADD in flight is never touched (package attachrec).
func cmdGCAll(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("gc --all", flag.ContinueOnError)
	common := addCommonFlags(fs)
	fs.Bool("all", true, "every network of the configuration directory (required)")
	dry := fs.Bool("n", false, "dry run: say what would be deleted and sent, change nothing")
	fs.BoolVar(dry, "dry-run", false, "same as -n")
	timeout := fs.Duration("lock-timeout", time.Minute,
		"how long to wait for a network's running ADDs before leaving it for the next sweep")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: nftcni gc --all [-n] [-lock-timeout D] [-cache-dir DIR] [-host-netns PATH]\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	if fs.NArg() != 0 {
		fs.Usage()
		return errUsage
	}
	env, err := loadEnv(common)
	if err != nil {
		return err
	}
	s := &sweep{
		env: env, recDir: attachrec.Dir(os.Getenv), dry: *dry, timeout: *timeout,
		out: stdout, versions: map[string]*cniruntime.PluginInfo{},
	}
	return s.run(context.Background(), stderr)
}

// sweep is one run of gc --all.
type sweep struct {
	env      *rtEnv
	recDir   string
	dry      bool
	timeout  time.Duration
	out      io.Writer
	versions map[string]*cniruntime.PluginInfo // VERSION answers by plugin type
}

func (s *sweep) run(ctx context.Context, stderr io.Writer) error {
	dir, err := cniruntime.LoadDirectory(s.env.confDir)
	if err != nil {
		return fmt.Errorf("reading %s: %w", s.env.confDir, err)
	}
	for _, e := range dir.Skipped {
		fmt.Fprintf(stderr, "nftcni: gc: skipping a file that cannot be parsed: %v\n", e)
	}
	var failed []string
	known := map[string]bool{}
	for _, list := range dir.Networks {
		known[list.Name] = true
		if err := s.network(ctx, list); err != nil {
			fmt.Fprintf(stderr, "nftcni: gc: network %q: %v\n", list.Name, err)
			failed = append(failed, list.Name)
		}
	}
	if err := s.unknownNetworks(known); err != nil {
		return err
	}
	if len(failed) > 0 {
		return fmt.Errorf("gc --all: %d of %d networks not fully collected: %s", len(failed), len(dir.Networks), strings.Join(failed, ", "))
	}
	return nil
}

// view is one attachment of a network as the sweep sees it: cached by
// the runtime, recorded by our ADD, or both, with the state of its
// namespace.
type view struct {
	cni.Attachment
	cached *cniruntime.NetworkAttachment
	record *attachrec.Record
	state  netns.State
	why    error // why Gone or Unknown
}

func (v *view) source() string {
	switch {
	case v.cached != nil && v.record != nil:
		return "cached and recorded"
	case v.cached != nil:
		return "cached"
	}
	return "recorded, not cached"
}

// snapshot reads network's cached and recorded attachments and probes
// their namespaces. An attachment counts as gone only when every
// namespace path known for it is gone.
func (s *sweep) snapshot(network string) ([]*view, error) {
	cached, err := s.env.runtime.GetCachedAttachments("")
	if err != nil {
		return nil, fmt.Errorf("reading the result cache: %w", err)
	}
	recs, err := attachrec.List(s.recDir, network)
	if err != nil {
		return nil, fmt.Errorf("reading the attachment records: %w", err)
	}
	return s.views(network, cached, recs), nil
}

// snapshotOne is snapshot for one attachment, reading only its own cache
// file and record; nil when neither names it any more.
func (s *sweep) snapshotOne(network string, at cni.Attachment) (*view, error) {
	cached, err := s.env.runtime.GetCachedAttachments(at.ContainerID)
	if err != nil {
		return nil, fmt.Errorf("reading the result cache: %w", err)
	}
	var mine []*cniruntime.NetworkAttachment
	for _, c := range cached {
		if c.IfName == at.IfName {
			mine = append(mine, c)
		}
	}
	var recs []attachrec.Record
	if r, ok := attachrec.Get(s.recDir, network, at.ContainerID, at.IfName); ok {
		recs = append(recs, r)
	}
	if v := s.views(network, mine, recs); len(v) == 1 {
		return v[0], nil
	}
	return nil, nil
}

// views joins cached attachments (of any network: those of network are
// taken) and network's records by attachment.
func (s *sweep) views(network string, cached []*cniruntime.NetworkAttachment, recs []attachrec.Record) []*view {
	byKey := map[cni.Attachment]*view{}
	var order []*view
	get := func(id, ifname string) *view {
		k := cni.Attachment{ContainerID: id, IfName: ifname}
		v := byKey[k]
		if v == nil {
			v = &view{Attachment: k, state: netns.Gone}
			byKey[k] = v
			order = append(order, v)
		}
		return v
	}
	probes := map[string]struct {
		st  netns.State
		err error
	}{}
	see := func(v *view, path string) {
		p, ok := probes[path]
		if !ok {
			p.st, p.err = netns.Probe(path)
			probes[path] = p
		}
		// Alive beats Unknown beats Gone.
		if p.st == netns.Alive || (p.st == netns.Unknown && v.state == netns.Gone) {
			v.state, v.why = p.st, p.err
		} else if v.state == netns.Gone && v.why == nil {
			v.why = p.err
		}
	}
	for _, a := range cached {
		if a.Network != network {
			continue
		}
		v := get(a.ContainerID, a.IfName)
		v.cached = a
		see(v, a.NetNS)
	}
	for i := range recs {
		v := get(recs[i].ContainerID, recs[i].IfName)
		v.record = &recs[i]
		see(v, recs[i].NetNS)
	}
	return order
}

// network sweeps one network. The lock is taken three ways: to read which
// attachments are stale, around each one's DEL, and around the plugins'
// GC, so ADDs of the network wait at most for one of those steps.
func (s *sweep) network(ctx context.Context, list *cniruntime.NetworkConfigList) error {
	if list.DisableGC {
		fmt.Fprintf(s.out, "network %q: disableGC is set: skipped\n", list.Name)
		return nil
	}
	views, err := s.locked(ctx, list.Name, func() ([]*view, error) { return s.snapshot(list.Name) })
	if err != nil {
		return err
	}
	var errs []error
	deleted, live := 0, 0
	var lines []string
	for _, v := range views {
		if v.state != netns.Gone {
			live++
			continue
		}
		what := fmt.Sprintf("  stale: container %s %s (%s; %v)", v.ContainerID, v.IfName, v.source(), v.why)
		if s.dry {
			lines = append(lines, what+": would be deleted")
			continue
		}
		if err := s.deleteStale(ctx, list, v); err != nil {
			lines = append(lines, what+": DEL failed: "+err.Error())
			errs = append(errs, fmt.Errorf("deleting %s %s: %w", v.ContainerID, v.IfName, err))
			continue
		}
		deleted++
		lines = append(lines, what+": deleted")
	}
	gcText, err := s.pluginGC(ctx, list)
	if err != nil {
		errs = append(errs, err)
	}
	verb := "deleted"
	if s.dry {
		verb, deleted = "to delete", len(lines)
	}
	fmt.Fprintf(s.out, "network %q: %d live %s kept, %d stale %s; %s\n",
		list.Name, live, plural(live, "attachment", "attachments"), deleted, verb, gcText)
	for _, l := range lines {
		fmt.Fprintln(s.out, l)
	}
	return errors.Join(errs...)
}

// locked runs fn holding network's lock (none in a dry run: it changes
// nothing, and must not make ADDs wait).
func (s *sweep) locked(ctx context.Context, network string, fn func() ([]*view, error)) ([]*view, error) {
	if s.dry {
		return fn()
	}
	lctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	unlock, err := attachrec.Lock(lctx, s.recDir, network)
	if err != nil {
		return nil, err
	}
	defer unlock()
	return fn()
}

// deleteStale runs the chain's DEL for v under the network's lock, after
// looking again: meanwhile a DEL of the runtime may have removed it, or an
// ADD (of a container ID made from the namespace path, as cnitool's are)
// may have used it again.
func (s *sweep) deleteStale(ctx context.Context, list *cniruntime.NetworkConfigList, v *view) error {
	_, err := s.locked(ctx, list.Name, func() ([]*view, error) {
		cur, err := s.snapshotOne(list.Name, v.Attachment)
		if err != nil {
			return nil, err
		}
		if cur == nil || cur.state != netns.Gone {
			return nil, nil // gone already, or in use again
		}
		rt := &cniruntime.RuntimeConf{ContainerID: cur.ContainerID, IfName: cur.IfName}
		if c := cur.cached; c != nil {
			rt.NetNS, rt.Args, rt.CapabilityArgs = c.NetNS, c.CniArgs, c.CapabilityArgs
		} else {
			rt.NetNS, rt.Args = cur.record.NetNS, lenientArgs(cur.record.Args)
		}
		if err := s.env.runtime.DelNetworkList(ctx, list, rt); err != nil {
			return nil, err
		}
		// Our plugins' DEL removed it; a chain without one of ours
		// never made it.
		return nil, attachrec.Remove(s.recDir, list.Name, cur.ContainerID, cur.IfName)
	})
	return err
}

// pluginGC sends every plugin GC with the attachments valid now, under
// the lock, and says what it did. A list older than 1.1.0 has no GC; its
// plugins are sent GC as 1.1.0 when every one of them supports that
// version (they are asked with VERSION), else nothing is sent.
func (s *sweep) pluginGC(ctx context.Context, list *cniruntime.NetworkConfigList) (string, error) {
	var types []string
	for _, p := range list.Plugins {
		types = append(types, p.Network.Type)
	}
	to := strings.Join(types, ", ")
	args := &cniruntime.GCArgs{}
	how := "sent"
	if s.dry {
		how = "would be sent"
	}
	if ok, _ := cni.GreaterThanOrEqual(list.CNIVersion, "1.1.0"); !ok {
		for _, t := range types {
			vi, err := s.versionInfo(ctx, t)
			if err != nil {
				return fmt.Sprintf("no GC sent (cniVersion %q has none, and plugin %s did not answer VERSION: %v)", list.CNIVersion, t, err), nil
			}
			if !vi.Supports("1.1.0") {
				return fmt.Sprintf("no GC sent (cniVersion %q has none, and plugin %s does not support 1.1.0)", list.CNIVersion, t), nil
			}
		}
		args.PluginVersion = "1.1.0"
		how += fmt.Sprintf(" as 1.1.0 (the list is %q)", list.CNIVersion)
	}
	if s.dry {
		views, err := s.snapshot(list.Name)
		if err != nil {
			return "", err
		}
		n := 0
		for _, v := range views {
			if v.state != netns.Gone {
				n++
			}
		}
		return fmt.Sprintf("GC %s to %s with %d valid %s", how, to, n, plural(n, "attachment", "attachments")), nil
	}
	var valid int
	_, err := s.locked(ctx, list.Name, func() ([]*view, error) {
		views, err := s.snapshot(list.Name)
		if err != nil {
			return nil, err
		}
		args.ValidAttachments = []cni.Attachment{}
		for _, v := range views {
			if v.state != netns.Gone {
				args.ValidAttachments = append(args.ValidAttachments, v.Attachment)
			}
		}
		valid = len(args.ValidAttachments)
		return nil, s.env.runtime.GCNetworkList(ctx, list, args)
	})
	text := fmt.Sprintf("GC %s to %s with %d valid %s", how, to, valid, plural(valid, "attachment", "attachments"))
	if err != nil {
		return text + " (failed)", fmt.Errorf("GC: %w", err)
	}
	return text, nil
}

func (s *sweep) versionInfo(ctx context.Context, typ string) (*cniruntime.PluginInfo, error) {
	if vi, ok := s.versions[typ]; ok {
		return vi, nil
	}
	vi, err := s.env.runtime.GetVersionInfo(ctx, typ)
	if err != nil {
		return nil, err
	}
	s.versions[typ] = vi
	return vi, nil
}

// unknownNetworks reports cached or recorded attachments of networks the
// configuration directory no longer defines: without a configuration
// there is no chain to run, so they are left, and said so.
func (s *sweep) unknownNetworks(known map[string]bool) error {
	probed, err := s.env.runtime.ProbeCachedAttachments("")
	if err != nil {
		return fmt.Errorf("reading the result cache: %w", err)
	}
	recs, err := attachrec.List(s.recDir, "")
	if err != nil {
		return fmt.Errorf("reading the attachment records: %w", err)
	}
	count := map[string][2]int{} // network: stale, live
	seen := map[[3]string]bool{}
	tally := func(network, id, ifname string, st netns.State) {
		k := [3]string{network, id, ifname}
		if known[network] || seen[k] {
			return
		}
		seen[k] = true
		c := count[network]
		if st == netns.Gone {
			c[0]++
		} else {
			c[1]++
		}
		count[network] = c
	}
	for _, p := range probed {
		tally(p.Network, p.ContainerID, p.IfName, p.NetNSState)
	}
	for _, r := range recs {
		st, _ := netns.Probe(r.NetNS)
		tally(r.Network, r.ContainerID, r.IfName, st)
	}
	names := make([]string, 0, len(count))
	for n := range count {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		c := count[n]
		fmt.Fprintf(s.out, "network %q: not in %s: %d stale and %d live %s left as they are (restore its configuration for gc, or run `nftcni del` with it)\n",
			n, s.env.confDir, c[0], c[1], plural(c[1], "attachment", "attachments"))
	}
	return nil
}

// lenientArgs splits a recorded CNI_ARGS into pairs, keeping what parses:
// DEL must run even if the ADD's arguments were odd.
func lenientArgs(s string) [][2]string {
	if s == "" {
		return nil
	}
	var out [][2]string
	for _, kv := range strings.Split(s, ";") {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
			out = append(out, [2]string{k, v})
		}
	}
	return out
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
