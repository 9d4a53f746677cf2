package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/nftcni/nftcni/cniruntime"
	"github.com/nftcni/nftcni/netns"
)

// defaultNetnsDir holds the throwaway namespaces of `run`, apart from
// /run/netns so `ip netns` users do not trip over them.
const defaultNetnsDir = "/run/nftcni/netns"

// multiFlag collects a repeatable string flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// exitError carries the exit status run wants without printing anything
// more: the command's own status, or a status already explained on stderr.
type exitError struct{ status int }

func (e *exitError) Error() string { return fmt.Sprintf("exit status %d", e.status) }

// cmdRun creates a throwaway network namespace, attaches every --net
// network to it (eth0, eth1, ...), runs the command inside it, then detaches
// the networks in reverse order and removes the namespace — also when the
// command or an attachment fails, or a signal arrives. The exit status is
// the command's.
func cmdRun(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	var nets multiFlag
	fs.Var(&nets, "net", "network to attach (repeatable, in order)")
	prefix := fs.String("ifname-prefix", "eth", "interface names are this prefix plus 0, 1, ...")
	nsDir := fs.String("netns-dir", envOr(envNetnsDir, defaultNetnsDir), "where the throwaway namespace is created (default $"+envNetnsDir+" or "+defaultNetnsDir+")")
	common := addCommonFlags(fs)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: nftcni run [--net NAME]... [--ifname-prefix P] [--netns-dir DIR] [--cache-dir DIR] [--host-netns PATH] -- CMD [ARG...]\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return errUsage
	}
	command := fs.Args()
	env, err := loadEnv(common)
	if err != nil {
		return err
	}
	// Load every network first: a typo must not cost a namespace.
	lists := make([]*cniruntime.NetworkConfigList, len(nets))
	for i, n := range nets {
		if lists[i], err = env.loadNetwork(n); err != nil {
			return err
		}
		if name := fmt.Sprintf("%s%d", *prefix, i); len(name) > 15 {
			return fmt.Errorf("interface name %q is longer than 15 bytes", name)
		}
	}

	// Signals: until the command runs, a signal stops the setup after the
	// current step; while it runs, TERM and HUP are passed on to it (INT
	// and QUIT come from the terminal, which already sends them to the
	// command); teardown always completes.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	defer signal.Stop(sigs)
	var stopped atomic.Int32
	var child atomic.Pointer[os.Process]
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case <-done:
				return
			case s := <-sigs:
				sig := s.(syscall.Signal)
				stopped.CompareAndSwap(0, int32(sig))
				if p := child.Load(); p != nil && (sig == syscall.SIGTERM || sig == syscall.SIGHUP) {
					_ = p.Signal(sig)
				}
			}
		}
	}()

	id, err := randomID()
	if err != nil {
		return err
	}
	ns, err := netns.New(*nsDir, id)
	if err != nil {
		return err
	}
	ctx := context.Background()
	var attached []*cniruntime.RuntimeConf
	teardown := func() error {
		var errs []error
		for i := len(attached) - 1; i >= 0; i-- {
			if err := env.runtime.DelNetworkList(ctx, lists[i], attached[i]); err != nil {
				errs = append(errs, fmt.Errorf("detaching network %q: %w", lists[i].Name, err))
			}
		}
		if err := ns.Close(); err != nil {
			errs = append(errs, err)
		}
		if err := netns.Remove(ns.Path()); err != nil {
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	}

	for i, list := range lists {
		if sig := stopped.Load(); sig != 0 {
			return finish(stderr, teardown(), 128+int(sig), fmt.Errorf("interrupted by %v", syscall.Signal(sig)))
		}
		rt := &cniruntime.RuntimeConf{
			ContainerID:    id,
			NetNS:          ns.Path(),
			IfName:         fmt.Sprintf("%s%d", *prefix, i),
			Args:           env.args,
			CapabilityArgs: env.capArgs,
		}
		// Recorded before ADD: a failed ADD may have left state behind,
		// and DEL is how a runtime cleans that up.
		attached = append(attached, rt)
		if _, err := env.runtime.AddNetworkList(ctx, list, rt); err != nil {
			return finish(stderr, teardown(), 1, fmt.Errorf("attaching network %q: %w", list.Name, err))
		}
	}
	if sig := stopped.Load(); sig != 0 {
		return finish(stderr, teardown(), 128+int(sig), fmt.Errorf("interrupted by %v", syscall.Signal(sig)))
	}

	c := exec.Command(command[0], command[1:]...)
	c.Stdin, c.Stdout, c.Stderr = os.Stdin, os.Stdout, os.Stderr
	status := 0
	var runErr error
	if err := netns.StartIn(ns, c); err != nil {
		status, runErr = 127, fmt.Errorf("starting %s: %w", command[0], err)
	} else {
		child.Store(c.Process)
		err := c.Wait()
		child.Store(nil)
		status = exitStatus(c.ProcessState, err)
	}
	return finish(stderr, teardown(), status, runErr)
}

// finish reports the outcome: the command's status, unless it succeeded
// and teardown failed — leaked state must not look like success.
func finish(stderr io.Writer, teardownErr error, status int, err error) error {
	if err != nil {
		fmt.Fprintf(stderr, "nftcni: run: %v\n", err)
	}
	if teardownErr != nil {
		fmt.Fprintf(stderr, "nftcni: run: cleanup: %v\n", teardownErr)
		if status == 0 {
			status = 1
		}
	}
	if status == 0 {
		return nil
	}
	return &exitError{status: status}
}

// exitStatus maps a finished command to a shell-style status: its exit
// code, or 128+signal when it was killed.
func exitStatus(ps *os.ProcessState, err error) int {
	if ps == nil {
		if err != nil {
			return 1
		}
		return 0
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// randomID names the namespace and serves as the container ID; it is
// random so concurrent runs never share an attachment.
func randomID() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return "nftcni-run-" + hex.EncodeToString(b[:]), nil
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
