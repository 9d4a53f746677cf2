package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/nftcni/nftcni/attachrec"
	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/cniruntime"
	"github.com/nftcni/nftcni/nft"
	"github.com/nftcni/nftcni/nft/reference"
)

// handbacks are the plugins that keep host state the reference plugins
// keep too, with their share of `nftcni handback`: registered by the
// plugin files next to the plugins, under the same build tags. A fixed
// array, as every plugin exec runs the registrations, which must not
// allocate (startpath_test.go).
var handbacks struct {
	n  int
	of [8]struct {
		name string
		f    handbackFunc
	}
}

// handbackFunc is a plugin's share of handing an attachment back, from
// the CmdArgs a CHECK of the attachment gives it.
type handbackFunc func(ctx context.Context, a *cni.CmdArgs) (reference.Handback, error)

func registerHandback(name string, f handbackFunc) {
	handbacks.of[handbacks.n].name, handbacks.of[handbacks.n].f = name, f
	handbacks.n++
}

func handbackOf(typ string) handbackFunc {
	for _, h := range handbacks.of[:handbacks.n] {
		if h.name == typ {
			return h.f
		}
	}
	return nil
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
	fs := flag.NewFlagSet("handback", flag.ContinueOnError)
	common := addCommonFlags(fs)
	verbose := fs.Bool("v", false, "say what was written and removed for each attachment")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: nftcni handback [-cache-dir DIR] [-host-netns PATH] [-v]\n")
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
	h := &handback{env: env, recDir: attachrec.Dir(os.Getenv), stdout: stdout, stderr: stderr, verbose: *verbose}
	if ns := env.runtime.HostNS; ns != nil {
		return ns.Do(func() error { return h.run(context.Background()) })
	}
	return h.run(context.Background())
}

type handback struct {
	env            *rtEnv
	recDir         string
	stdout, stderr io.Writer
	verbose        bool
}

var errHandbackFailed = errors.New("handback: some attachments could not be handed back (named above); their state stays nftcni's")

func (h *handback) run(ctx context.Context) error {
	atts, err := h.env.runtime.ProbeCachedAttachments("")
	if err != nil {
		return fmt.Errorf("handback: reading the result cache: %w", err)
	}
	c, err := nft.Open(nil)
	if err != nil {
		return fmt.Errorf("handback: %w", err)
	}
	defer c.Close()
	var live, stale, failed int
	for _, a := range atts {
		what := fmt.Sprintf("network %q, container %s, interface %s", a.Network, a.ContainerID, a.IfName)
		done, err := h.one(ctx, c, a)
		if err != nil {
			failed++
			fmt.Fprintf(h.stderr, "nftcni: handback: %s: %v\n", what, err)
			continue
		}
		if a.Live() {
			live++
		} else {
			stale++
		}
		if h.verbose {
			state := "handed back"
			if !a.Live() {
				state = "namespace gone, ours removed"
			}
			fmt.Fprintf(h.stdout, "%s: %s\n", state, what)
			for _, d := range done {
				fmt.Fprintf(h.stdout, "  wrote %s\n", d)
			}
		}
	}
	var tables []string
	if failed == 0 {
		if tables, err = c.RemoveEmptyTables(); err != nil {
			fmt.Fprintf(h.stderr, "nftcni: handback: removing nftcni's tables: %v\n", err)
		}
	}
	fmt.Fprintf(h.stdout, "nftcni handback: %d attachments handed back, %d with their namespace gone (ours removed), %d failed; tables removed: %s\n",
		live, stale, failed, orNone(tables))
	if failed > 0 {
		return errHandbackFailed
	}
	return nil
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// one hands attachment a back: the plugins' shares, the reference's
// layout of the live ones in one transaction, then ours removed and our
// record of it. It returns what it wrote.
func (h *handback) one(ctx context.Context, c *nft.Conn, a cniruntime.ProbedAttachment) ([]string, error) {
	list, plugins, err := a.Plugins()
	if err != nil {
		return nil, err
	}
	var shares []reference.Handback
	for i, p := range plugins {
		f := handbackOf(p.Conf.Network.Type)
		if f == nil {
			continue
		}
		s, err := f(ctx, &cni.CmdArgs{
			ContainerID: a.ContainerID,
			Netns:       a.NetNS,
			IfName:      a.IfName,
			Args:        a.ArgsString(),
			Path:        strings.Join(h.env.runtime.Path, string(os.PathListSeparator)),
			StdinData:   p.Stdin,
			Version:     list.CNIVersion,
			Env:         os.Environ(),
			Stderr:      h.stderr,
		})
		if err != nil {
			return nil, fmt.Errorf("plugin %d (type=%q): %w", i+1, p.Conf.Network.Type, err)
		}
		shares = append(shares, s)
	}
	var refs []reference.Attachment
	for _, s := range shares {
		if s.Parts != 0 {
			refs = append(refs, s.Attachment)
		}
	}
	var done []string
	if a.Live() && len(refs) > 0 {
		err := c.Update(func(tx *nft.Tx) error {
			var err error
			done, err = reference.PlanCreate(tx, refs...)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("writing the reference plugins' state: %w", err)
		}
	}
	var errs []error
	for _, s := range slices.Backward(shares) {
		if s.Release != nil {
			errs = append(errs, s.Release())
		}
	}
	if err := errors.Join(errs...); err != nil {
		return done, fmt.Errorf("removing nftcni's state (the reference's is in place): %w", err)
	}
	if err := attachrec.Remove(h.recDir, a.Network, a.ContainerID, a.IfName); err != nil {
		return done, fmt.Errorf("removing the attachment record: %w", err)
	}
	return done, nil
}
