package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/nftcni/nftcni/attachrec"
	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/cniruntime"
	"github.com/nftcni/nftcni/nft"
	"github.com/nftcni/nftcni/nft/reference"
	"github.com/nftcni/nftcni/reapply"
)

// Switching a host's running containers between the reference plugins
// and nftcni, both ways: `nftcni takeover` after nftcni replaced them (the
// package's postinst), `nftcni handback` before they replace nftcni (its
// prerm). Both go through the result cache (every attachment the runtime
// knows, with the config, arguments and result it was added with) and the
// plugins' shares of each attachment (reference.Share: what the
// reference's ADD made or would have made for the plugin, and what the
// plugin does with its own state).

// switchers are the plugins that keep host state the reference plugins
// keep too, with their share of an attachment: registered by the plugin
// files next to the plugins, under the same build tags. A fixed array, as
// every plugin exec runs the registrations, which must not allocate
// (startpath_test.go).
var switchers struct {
	n  int
	of [8]struct {
		name string
		f    switchFunc
	}
}

// switchFunc is a plugin's share of an attachment, from the CmdArgs a
// CHECK of the attachment gives it.
type switchFunc func(ctx context.Context, a *cni.CmdArgs) (reference.Share, error)

func registerSwitch(name string, f switchFunc) {
	switchers.of[switchers.n].name, switchers.of[switchers.n].f = name, f
	switchers.n++
}

func switchOf(typ string) switchFunc {
	for _, s := range switchers.of[:switchers.n] {
		if s.name == typ {
			return s.f
		}
	}
	return nil
}

// switchCmd is what takeover and handback share: the flags, the
// environment, running in -host-netns.
type switchCmd struct {
	name           string
	env            *rtEnv
	recDir         string
	stdout, stderr io.Writer
	verbose        bool
}

// parseSwitch parses the flags of takeover or handback; ok false means
// the command ran as a child in -host-netns (err is its outcome).
func parseSwitch(name, usage string, args []string, stdout, stderr io.Writer) (s *switchCmd, ok bool, err error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	common := addCommonFlags(fs)
	verbose := fs.Bool("v", false, "say what was done for each attachment")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: nftcni %s [-cache-dir DIR] [-host-netns PATH] [-v]\n%s\n", name, usage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, false, errUsage
	}
	if fs.NArg() != 0 {
		fs.Usage()
		return nil, false, errUsage
	}
	if ns := *common.hostNetns; ns != "" {
		argv := []string{name}
		if *common.cacheDir != "" {
			argv = append(argv, "-cache-dir", *common.cacheDir)
		}
		if *verbose {
			argv = append(argv, "-v")
		}
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
		defer stop()
		return nil, false, runIn(ctx, ns, argv, stdout, stderr)
	}
	env, err := loadEnv(common)
	if err != nil {
		return nil, false, err
	}
	return &switchCmd{name: name, env: env, recDir: attachrec.Dir(os.Getenv), stdout: stdout, stderr: stderr, verbose: *verbose}, true, nil
}

// shares are the shares of att's plugins that have a switchFunc and that
// want says yes to, in the chain's order.
func (s *switchCmd) shares(ctx context.Context, att *cniruntime.NetworkAttachment, want func(typ string) bool) ([]reference.Share, error) {
	list, plugins, err := att.Plugins()
	if err != nil {
		return nil, err
	}
	var out []reference.Share
	for i, p := range plugins {
		typ := p.Conf.Network.Type
		f := switchOf(typ)
		if f == nil || !want(typ) {
			continue
		}
		sh, err := f(ctx, att.CmdArgs(list.CNIVersion, p, s.env.runtime.Path, os.Environ(), s.stderr))
		if err != nil {
			return nil, fmt.Errorf("plugin %d (type=%q): %w", i+1, typ, err)
		}
		out = append(out, sh)
	}
	return out, nil
}

// refs are the reference's views of shares, those with any part.
func refs(shares []reference.Share) []reference.Attachment {
	var out []reference.Attachment
	for _, sh := range shares {
		if sh.Parts != 0 {
			out = append(out, sh.Attachment)
		}
	}
	return out
}

func what(a cniruntime.ProbedAttachment) string {
	return fmt.Sprintf("network %q, container %s, interface %s", a.Network, a.ContainerID, a.IfName)
}

// cmdTakeover takes every live attachment in the result cache over from
// the reference plugins, after nftcni replaced them (the package's
// postinst runs it): per attachment, one nftables transaction re-creates
// our state of it (package reapply, as `nftcni reload` does) and deletes
// the reference's objects of it (nft/reference), so that not a packet
// finds neither; then our records of it are written (the attachment
// record, the bridge's address claims). Attachments whose plugins
// CNI_PATH does not resolve to this nftcni are left alone (the reference
// plugins are still installed); those whose namespace is gone are left to
// gc. A second run changes nothing.
func cmdTakeover(args []string, stdout, stderr io.Writer) error {
	s, ok, err := parseSwitch("takeover", "take the running containers over from the reference plugins nftcni replaced", args, stdout, stderr)
	if !ok {
		return err
	}
	reg, notOurs := ourReappliers(s.env.runtime.Path)
	atts, err := s.env.runtime.ProbeCachedAttachments("")
	if err != nil {
		return fmt.Errorf("takeover: reading the result cache: %w", err)
	}
	c, err := nft.Open(nil)
	if err != nil {
		return fmt.Errorf("takeover: %w", err)
	}
	defer c.Close()
	start := time.Now()
	ctx := context.Background()
	var taken, ours, other, stale, failed, removed int
	unused := map[string]bool{}
	for _, a := range atts {
		if !a.Live() {
			stale++
			if s.verbose {
				fmt.Fprintf(s.stdout, "stale (left to gc): %s: %v\n", what(a), a.NetNSWhy)
			}
			continue
		}
		objs, without, err := s.takeover(ctx, c, reg, a)
		for _, typ := range without {
			if why, ok := notOurs[typ]; ok && !unused[typ] {
				unused[typ] = true
				fmt.Fprintf(s.stderr, "nftcni: takeover: plugin %s is left to what it is: %s\n", typ, why)
			}
		}
		if errors.Is(err, errNotOurs) {
			other++
			if s.verbose {
				fmt.Fprintf(s.stdout, "left alone: %s: %v\n", what(a), err)
			}
			continue
		}
		if err != nil {
			failed++
			fmt.Fprintf(s.stderr, "nftcni: takeover: %s: %v\n", what(a), err)
			continue
		}
		if len(objs) == 0 {
			ours++
		} else {
			taken++
			removed += len(objs)
		}
		if s.verbose {
			state := "already nftcni's"
			if len(objs) > 0 {
				state = "taken over"
			}
			fmt.Fprintf(s.stdout, "%s: %s\n", state, what(a))
			for _, o := range objs {
				fmt.Fprintf(s.stdout, "  removed the reference plugins' %s: %s\n", o.Part, o)
			}
		}
	}
	fmt.Fprintf(s.stdout, "nftcni takeover: %d attachments taken over (%d objects of the reference plugins removed), %d already nftcni's, %d left alone (no plugin of theirs is nftcni's), %d stale (left to gc), %d failed, in %s\n",
		taken, removed, ours, other, stale, failed, time.Since(start).Round(time.Millisecond))
	if failed > 0 {
		return errors.New("takeover: some attachments could not be taken over (named above); the reference plugins' state of them stays, which nftcni's DEL still removes")
	}
	return nil
}

// errNoState: none of the attachment's plugins keeps host state
// (containerd's loopback network): handback has nothing to write or
// remove but the attachment's record.
var errNoState = errors.New("no plugin of its chain keeps host state")

// errNotOurs: none of the attachment's plugins that keep host state is
// this nftcni's (or none keeps any): nothing was taken over or recorded.
var errNotOurs = errors.New("no plugin of its chain that keeps host state is this nftcni's")

// takeover takes one live attachment over; it returns the reference's
// objects it removed and the plugin types of the chain it left alone.
func (s *switchCmd) takeover(ctx context.Context, c *nft.Conn, reg reapply.Registry, a cniruntime.ProbedAttachment) ([]reference.Object, []string, error) {
	plan, err := reg.Plan(ctx, a.NetworkAttachment, reapply.Options{Path: s.env.runtime.Path, Stderr: s.stderr})
	if err != nil {
		return nil, nil, err
	}
	// Only the plugins that are ours now hand their objects over.
	shares, err := s.shares(ctx, a.NetworkAttachment, func(typ string) bool { return reg[typ] != nil })
	if err != nil {
		return nil, plan.Without, err
	}
	var removed []reference.Object
	planned := false // the last error is a plan's, not the kernel's
	err = c.UpdateLookupsFirst(func(tx *nft.Tx, slowOnly bool, lookups *bool) error {
		removed = removed[:0]
		if err := plan.Into(tx, slowOnly, lookups); err != nil {
			planned = true
			return err
		}
		for _, r := range refs(shares) {
			objs, err := reference.PlanDelete(tx, r)
			if err != nil {
				planned = true
				return err
			}
			removed = append(removed, objs...)
		}
		planned = false
		return nil
	}, plan.Retry)
	if err != nil && !planned {
		err = c.Explain(err, nft.NeedsAll(plan.Plans)...)
	}
	if err != nil {
		return nil, plan.Without, err
	}
	if len(shares) == 0 && plan.Empty() {
		return nil, plan.Without, errNotOurs
	}
	var errs []error
	for _, sh := range shares {
		if sh.Adopt != nil {
			errs = append(errs, sh.Adopt())
		}
	}
	end, err := attachrec.Begin(s.recDir, attachrec.Record{
		Network: a.Network, ContainerID: a.ContainerID, IfName: a.IfName, NetNS: a.NetNS, Args: a.ArgsString(),
	})
	if err == nil {
		end()
	}
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return removed, plan.Without, fmt.Errorf("taken over, but recording it: %w", err)
	}
	return removed, plan.Without, nil
}

// cmdHandback hands every attachment in the result cache back to the
// reference plugins, before nftcni is removed (the package's prerm runs
// it; a removal without the package needs it run by hand): each live
// attachment's state is written in the reference's own layout — as its
// ADD would have made it for the attachment's configuration — in one
// transaction, and then ours is removed, so that traffic keeps flowing and
// the reference's CHECK and DEL, once its binaries are back, find
// everything and leave nothing. An attachment whose namespace is gone
// loses our state only: the reference's DEL of it removes what the
// reference keeps (its IPAM reservation). Our records of the attachments
// go, and, when nothing of anyone is left in them, our tables.
func cmdHandback(args []string, stdout, stderr io.Writer) error {
	s, ok, err := parseSwitch("handback", "hand the running containers back to the reference plugins, before they replace nftcni", args, stdout, stderr)
	if !ok {
		return err
	}
	atts, err := s.env.runtime.ProbeCachedAttachments("")
	if err != nil {
		return fmt.Errorf("handback: reading the result cache: %w", err)
	}
	c, err := nft.Open(nil)
	if err != nil {
		return fmt.Errorf("handback: %w", err)
	}
	defer c.Close()
	start := time.Now()
	ctx := context.Background()
	var live, stale, none, failed int
	for _, a := range atts {
		done, err := s.handback(ctx, c, a)
		if errors.Is(err, errNoState) {
			none++
			if s.verbose {
				fmt.Fprintf(s.stdout, "nothing to hand back: %s: %v\n", what(a), err)
			}
			continue
		}
		if err != nil {
			failed++
			fmt.Fprintf(s.stderr, "nftcni: handback: %s: %v\n", what(a), err)
			continue
		}
		if a.Live() {
			live++
		} else {
			stale++
		}
		if s.verbose {
			state := "handed back"
			if !a.Live() {
				state = "namespace gone, nftcni's state removed"
			}
			fmt.Fprintf(s.stdout, "%s: %s\n", state, what(a))
			for _, d := range done {
				fmt.Fprintf(s.stdout, "  wrote %s\n", d)
			}
		}
	}
	var tables []string
	if failed == 0 {
		if tables, err = c.RemoveEmptyTables(); err != nil {
			fmt.Fprintf(s.stderr, "nftcni: handback: removing nftcni's tables: %v\n", err)
		}
	}
	fmt.Fprintf(s.stdout, "nftcni handback: %d attachments handed back, %d with their namespace gone (nftcni's state removed), %d with nothing to hand back (no plugin that keeps host state), %d failed, in %s; tables removed: %s\n",
		live, stale, none, failed, time.Since(start).Round(time.Millisecond), orNone(tables))
	if failed > 0 {
		return errors.New("handback: some attachments could not be handed back (named above); their state stays nftcni's")
	}
	return nil
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// handback hands attachment a back: the reference's layout of a live one
// in one transaction, then ours removed, and our record of it. It returns
// what it wrote.
func (s *switchCmd) handback(ctx context.Context, c *nft.Conn, a cniruntime.ProbedAttachment) ([]string, error) {
	shares, err := s.shares(ctx, a.NetworkAttachment, func(string) bool { return true })
	if err != nil {
		return nil, err
	}
	if len(shares) == 0 {
		if err := attachrec.Remove(s.recDir, a.Network, a.ContainerID, a.IfName); err != nil {
			return nil, fmt.Errorf("removing the attachment record: %w", err)
		}
		return nil, errNoState
	}
	var done []string
	if a.Live() {
		for _, sh := range shares {
			if sh.Parts != 0 && sh.Unwritable != nil {
				return nil, fmt.Errorf("cannot be handed back (%s): %w", sh.Parts, sh.Unwritable)
			}
		}
		if refs := refs(shares); len(refs) > 0 {
			err := c.Update(func(tx *nft.Tx) error {
				var err error
				done, err = reference.PlanCreate(tx, refs...)
				return err
			})
			if err != nil {
				return nil, fmt.Errorf("writing the reference plugins' state: %w", err)
			}
		}
	}
	var errs []error
	for _, sh := range slices.Backward(shares) {
		if sh.Release != nil {
			errs = append(errs, sh.Release())
		}
	}
	if err := errors.Join(errs...); err != nil {
		return done, fmt.Errorf("removing nftcni's state (the reference plugins' is in place): %w", err)
	}
	if err := attachrec.Remove(s.recDir, a.Network, a.ContainerID, a.IfName); err != nil {
		return done, fmt.Errorf("removing the attachment record: %w", err)
	}
	return done, nil
}
