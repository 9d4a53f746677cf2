package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/firewalld"
	"github.com/nftcni/nftcni/netns"
	"github.com/nftcni/nftcni/reapply"
)

// cmdReload re-creates the host nftables state of every live attachment
// in the result cache (package reapply): after `systemctl restart
// nftables`, an `nft -f` of a file that starts with `flush ruleset`, or a
// firewalld reload, the port mappings, masquerading and firewall accepts
// of running containers are back. Stale attachments (namespace gone) are
// left to gc. With -watch-firewalld it runs once, then again each time
// firewalld reloads or starts, until it is stopped.
func cmdReload(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("reload", flag.ContinueOnError)
	common := addCommonFlags(fs)
	watch := fs.Bool("watch-firewalld", false, "stay running: reload again whenever firewalld reloads or (re)starts")
	verbose := fs.Bool("v", false, "say what was done for each attachment")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: nftcni reload [-cache-dir DIR] [-host-netns PATH] [-v] [-watch-firewalld]\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	if fs.NArg() != 0 {
		fs.Usage()
		return errUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if ns := *common.hostNetns; ns != "" {
		argv := []string{"reload"}
		if *common.cacheDir != "" {
			argv = append(argv, "-cache-dir", *common.cacheDir)
		}
		if *verbose {
			argv = append(argv, "-v")
		}
		if *watch {
			argv = append(argv, "-watch-firewalld")
		}
		return runIn(ctx, ns, argv, stdout, stderr)
	}
	env, err := loadEnv(common)
	if err != nil {
		return err
	}
	r := &reloader{env: env, stdout: stdout, stderr: stderr, verbose: *verbose}
	r.reg, r.notOurs = ourReappliers(env.runtime.Path)
	if !*watch {
		return r.run(ctx, "")
	}
	return r.watchFirewalld(ctx)
}

// runIn runs `nftcni <argv>` as a child living in the network namespace
// at path (-host-netns), passing SIGTERM and SIGINT on; its exit status is
// the command's. Why a child rather than a thread switched into the
// namespace (netns.Do), as the other commands start their plugins there
// too: the plugins' parts plan in-process, reading routes and sysctls of
// the calling thread's namespace, and on a thread locked into a namespace
// every blocking call of the Go runtime is handed over to that thread —
// measured on 2 loaded CPUs, a reload of 250 attachments took 3.1–3.7 s
// that way and 1.4–2.3 s in a process of the namespace. reload, takeover
// and handback run so.
func runIn(ctx context.Context, path string, argv []string, stdout, stderr io.Writer) error {
	ns, err := netns.Open(path)
	if err != nil {
		return fmt.Errorf("host netns: %w", err)
	}
	defer ns.Close()
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("%s: finding this program: %w", argv[0], err)
	}
	cmd := exec.Command(self, argv...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := netns.StartIn(ns, cmd); err != nil {
		return fmt.Errorf("%s: starting it in netns %s: %w", argv[0], path, err)
	}
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			_ = cmd.Process.Signal(syscall.SIGTERM)
		case <-done:
		}
	}()
	err = cmd.Wait()
	close(done)
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ee.ExitCode() < 0 {
			return &exitError{status: 1}
		}
		return &exitError{status: ee.ExitCode()}
	}
	return err
}

// reloader is one reload command's setup.
type reloader struct {
	env            *rtEnv
	reg            reapply.Registry
	notOurs        map[string]string // plugin type → why its state is not re-created
	stdout, stderr io.Writer
	verbose        bool
}

// errReloadFailed: some attachment could not be re-created (each was
// named on stderr).
var errReloadFailed = errors.New("reload: some attachments could not be re-created")

// run reloads once and prints a summary line (why, when given, says what
// set it off); each failure is named on stderr.
func (r *reloader) run(ctx context.Context, why string) error {
	start := time.Now()
	var outcomes []reapply.Outcome
	do := func() error {
		var err error
		outcomes, err = r.reg.Live(ctx, r.env.runtime, reapply.Options{Path: r.env.runtime.Path, Stderr: r.stderr})
		return err
	}
	err := do()
	took := time.Since(start)
	if err != nil {
		return fmt.Errorf("reload: %w", err)
	}
	var done, nothing, stale, failed int
	unused := map[string]bool{}
	for _, o := range outcomes {
		what := fmt.Sprintf("network %q, container %s, interface %s", o.Network, o.ContainerID, o.IfName)
		switch {
		case o.Stale():
			stale++
			if r.verbose {
				fmt.Fprintf(r.stdout, "stale (left to gc): %s: %v\n", what, o.NetNSWhy)
			}
		case o.Err != nil:
			failed++
			fmt.Fprintf(r.stderr, "nftcni: reload: %s: %v\n", what, o.Err)
		case o.Plan.Empty():
			nothing++
			if r.verbose {
				fmt.Fprintf(r.stdout, "nothing to re-create: %s\n", what)
			}
		default:
			done++
			if r.verbose {
				fmt.Fprintf(r.stdout, "re-applied: %s\n", what)
			}
		}
		if o.Plan != nil {
			for _, typ := range o.Plan.Without {
				if why, ok := r.notOurs[typ]; ok && !unused[typ] {
					unused[typ] = true
					fmt.Fprintf(r.stderr, "nftcni: reload: the state of plugin %s is not re-created: %s\n", typ, why)
				}
			}
		}
	}
	prefix := "reload"
	if why != "" {
		prefix += " (" + why + ")"
	}
	fmt.Fprintf(r.stdout, "nftcni %s: %d attachments re-applied, %d with nothing to re-create, %d stale (left to gc), %d failed, in %s\n",
		prefix, done, nothing, stale, failed, took.Round(time.Millisecond))
	if failed > 0 {
		return errReloadFailed
	}
	return nil
}

// watchFirewalld reloads once, then whenever firewalld reloads or starts
// (firewalld.Conn.Reloads), until ctx ends (SIGTERM: exit status 0) or the
// bus goes away (an error: systemd restarts the watcher). A failed reload
// is reported and the watch goes on.
func (r *reloader) watchFirewalld(ctx context.Context) error {
	conn, err := firewalld.Connect(ctx)
	if err != nil {
		return fmt.Errorf("reload: watching firewalld: %w", err)
	}
	defer conn.Close()
	events, err := conn.Reloads(ctx)
	if err != nil {
		return fmt.Errorf("reload: watching firewalld: %w", err)
	}
	fmt.Fprintln(r.stdout, "nftcni reload: watching firewalld")
	ev := "start of the watch"
	for {
		if ev != firewalld.EventReloaded && conn.Running(ctx) {
			// firewalld takes its bus name before it loads its
			// zones: sources added before then would fail.
			if err := conn.WaitReady(ctx); err != nil {
				return fmt.Errorf("reload: %w", err)
			}
		}
		if err := r.run(ctx, ev); err != nil && !errors.Is(err, errReloadFailed) {
			fmt.Fprintf(r.stderr, "nftcni: %v\n", err)
		}
		var ok bool
		select {
		case <-ctx.Done():
			return nil
		case ev, ok = <-events:
			if !ok {
				return errors.New("reload: watching firewalld: the system bus connection ended")
			}
		}
	}
}

// ourReappliers are the reappliers of plugins that CNI_PATH resolves to
// this very program (cni.IsSelf: the file, or a link to it): an attachment
// whose bridge is another program's (the reference plugins still
// installed there) must not get nftcni's state on top of theirs. notOurs
// says, per plugin left out, why.
func ourReappliers(path []string) (reapply.Registry, map[string]string) {
	reg, notOurs := reapply.Registry{}, map[string]string{}
	for name, f := range reapplyRegistry() {
		p, err := cni.FindInPath(name, path)
		switch {
		case err != nil:
			notOurs[name] = fmt.Sprintf("not found in CNI_PATH (%s)", strings.Join(path, string(os.PathListSeparator)))
		case !cni.IsSelf(p):
			notOurs[name] = fmt.Sprintf("%s is not this nftcni", p)
		default:
			reg[name] = f
		}
	}
	return reg, notOurs
}
