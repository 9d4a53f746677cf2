package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/nftcni/nftcni/cni"
)

const usage = `usage: nftcni <command> [arguments]

commands:
  version              print the build version, protocol versions and plugins
  install [-force] DIR copy this binary to DIR/nftcni and link every plugin name to it
  plugins              list the plugins this binary provides
  warm [FILE]          read this binary (or FILE) back into the page cache in 2 MiB
                       folios, as install does, after a package manager wrote it or
                       a reboot: every plugin exec then takes fewer page faults

runtime commands (what containerd or CRI-O do through libcni; cnitool-compatible):
  add    <network> <netns>   attach the network to the namespace, print the result
                             (on failure the chain's DEL cleans up; -keep skips it)
  check  <network> <netns>   CHECK the attachment against its cached result
  del    <network> <netns>   detach (works when the namespace is already gone)
  gc     <network> [<netns>] delete cached attachments whose namespace is gone, then GC
  gc --all [-n]              the same for every network, also for attachments a crash left
                             uncached; never touches a live one or an ADD in flight
  status <network> [<netns>] ask every plugin of the network whether it can ADD
  list [-o json]             every attachment on the host: network, container, interface,
                             namespace, addresses, host ports, and what CHECK says (drift)
  validate [<network>]       check a network (or every one, and the directory as a whole:
                             networks sharing a bridge with overlapping ranges) offline
  run [--net NAME]... [--ifname-prefix P] -- CMD [ARG...]
                             run CMD in a throwaway namespace attached to the networks
  reload [-v] [-watch-firewalld]
                             re-create the nftables state (port mappings, masquerade,
                             firewall accepts) of every running container after the
                             ruleset was flushed or firewalld reloaded
  takeover [-v]              after nftcni replaced the reference plugins: take every running
                             container over (ours made, theirs removed, one transaction each)
  handback [-v]              before the reference plugins replace nftcni: hand every running
                             container back (their layout written, then ours removed)

  Environment: NETCONFPATH (default /etc/cni/net.d),
  CNI_PATH (default: this program's directory, then /opt/cni/bin), CNI_IFNAME (default eth0), CNI_ARGS (K=V;K2=V2), CAP_ARGS (JSON object),
  NFTCNI_CACHE_DIR (default /var/lib/cni). "nftcni <command> -h" lists a command's flags.

Started under a plugin's name (a link made by "install"), nftcni is that
CNI plugin.
`

func cli(args []string) int {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "version", "--version", "-v":
		fmt.Printf("nftcni %s\nCNI protocol versions supported: %s\nplugins: %s\n",
			cni.BuildVersion, strings.Join(cni.AllVersions, ", "), strings.Join(pluginNames(), " "))
	case "plugins":
		for _, n := range pluginNames() {
			fmt.Println(n)
		}
	case "install":
		err = install(args[1:])
	case "warm":
		err = warm(args[1:])
	case "add":
		err = cmdAdd(args[1:], os.Stdout, os.Stderr)
	case "check":
		err = cmdCheck(args[1:])
	case "del":
		err = cmdDel(args[1:])
	case "gc":
		err = cmdGC(args[1:], os.Stderr)
	case "status":
		err = cmdStatus(args[1:])
	case "list":
		err = cmdList(args[1:], os.Stdout)
	case "validate":
		err = cmdValidate(args[1:], os.Stdout)
	case "run":
		err = cmdRun(args[1:], os.Stderr)
	case "reload":
		err = cmdReload(args[1:], os.Stdout, os.Stderr)
	case "takeover":
		err = cmdTakeover(args[1:], os.Stdout, os.Stderr)
	case "handback":
		err = cmdHandback(args[1:], os.Stdout, os.Stderr)
	case "help", "-h", "--help":
		fmt.Print(usage)
	default:
		fmt.Fprintf(os.Stderr, "nftcni: unknown command %q\n%s", args[0], usage)
		return 2
	}
	var exit *exitError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errUsage):
		return 2
	case errors.As(err, &exit):
		return exit.status
	}
	msg := err.Error()
	// A plugin's error code says more than its text (STATUS: 50 or 51).
	var ce *cni.Error
	if errors.As(err, &ce) && ce.Code != cni.CodeUnknown {
		msg += fmt.Sprintf(" (CNI error code %d)", ce.Code)
	}
	fmt.Fprintf(os.Stderr, "nftcni: %s\n", msg)
	return 1
}

// install copies the running binary into dir and points one symlink per
// plugin at it. An existing file of a plugin's name that is not already our
// link is left alone unless -force is given, so installing over the
// reference plugins is a deliberate act.
func install(args []string) error {
	fs := flag.NewFlagSet("install", flag.ContinueOnError)
	force := fs.Bool("force", false, "replace existing plugin files of the same names")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("install: want exactly one directory")
	}
	dir := fs.Arg(0)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("install: %w", err)
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("install: finding this binary: %w", err)
	}
	dst := filepath.Join(dir, "nftcni")
	if err := copyExecutable(self, dst); err != nil {
		return fmt.Errorf("install: copying %s to %s: %w", self, dst, err)
	}
	var refused []string
	for _, name := range pluginNames() {
		link := filepath.Join(dir, name)
		if target, err := os.Readlink(link); err == nil && target == "nftcni" {
			continue
		}
		if _, err := os.Lstat(link); err == nil {
			if !*force {
				refused = append(refused, name)
				continue
			}
			if err := os.Remove(link); err != nil {
				return fmt.Errorf("install: replacing %s: %w", link, err)
			}
		}
		if err := os.Symlink("nftcni", link); err != nil {
			return fmt.Errorf("install: linking %s: %w", link, err)
		}
	}
	if len(refused) > 0 {
		return fmt.Errorf("install: %s already exist in %s and are not nftcni links (use -force to replace them)",
			strings.Join(refused, ", "), dir)
	}
	return nil
}

// copyExecutable writes src to dst through a temporary file and a rename,
// so a plugin being exec'd concurrently never sees a half-written binary.
// The copy is read back into the page cache in large folios before the
// rename (readBackHuge), which needs a file that nothing maps yet: even
// when src is dst (`nftcni install` into its own directory), a new copy
// replaces it; the running binary keeps the old one.
func copyExecutable(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".nftcni-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, in); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return err
	}
	readBackHuge(tmp)
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dst)
}

func quoteJSON(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
