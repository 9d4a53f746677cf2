package daemon

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/ipam/dhcp"
)

// Main runs "dhcp daemon <args>" and returns the exit status: 0 after
// SIGINT or SIGTERM, 1 when it cannot start, 2 for a bad command line.
// The flags are the reference's plus -statedir.
func Main(args []string, stderr io.Writer) int {
	logger := log.New(stderr, "", log.LstdFlags)
	fs := flag.NewFlagSet("dhcp daemon", flag.ContinueOnError)
	fs.SetOutput(stderr)
	pidfile := fs.String("pidfile", "", "optional path to write daemon PID to (absolute)")
	hostPrefix := fs.String("hostprefix", "", "optional prefix to host root, prepended to the socket path and to namespace paths")
	socketPath := fs.String("socketpath", dhcp.DefaultSocketPath, "RPC socket path")
	broadcast := fs.Bool("broadcast", false, "set the broadcast flag on DHCP DISCOVER and REQUEST")
	timeout := fs.Duration("timeout", DefaultTimeout, "wait for an answer to one DHCP message (doubled on each of 3 sends)")
	resendMax := fs.Duration("resendmax", DefaultResendMax, "longest pause between DHCP attempts")
	resendTimeout := fs.Duration("resendtimeout", DefaultResendTimeout, "give up an acquisition or renewal after this long")
	stateDir := fs.String("statedir", DefaultStateDir, "directory of persisted leases; empty: keep leases in memory only")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "dhcp daemon: unexpected arguments %q\n", fs.Args())
		return 2
	}

	if *pidfile != "" {
		if err := writePidfile(*pidfile); err != nil {
			logger.Print(err)
			return 1
		}
		defer os.Remove(*pidfile)
	}
	sock := *hostPrefix + *socketPath
	l, ours, err := listen(sock)
	if err != nil {
		logger.Print(err)
		return 1
	}
	d, err := New(Config{
		HostPrefix:    *hostPrefix,
		StateDir:      *stateDir,
		Broadcast:     *broadcast,
		Timeout:       *timeout,
		ResendMax:     *resendMax,
		ResendTimeout: *resendTimeout,
		Logf:          logger.Printf,
	})
	if err != nil {
		l.Close()
		logger.Print(err)
		return 1
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	served := make(chan error, 1)
	go func() { served <- d.Serve(l) }()
	logger.Printf("dhcp daemon listening on %s", sock)
	code := 0
	select {
	case s := <-sigs:
		logger.Printf("%v: shutting down (leases are kept)", s)
	case err := <-served:
		logger.Print(err)
		code = 1
	}
	d.Close()
	if ours {
		// A socket systemd passed us is systemd's to remove.
		_ = os.Remove(sock)
	}
	return code
}

// writePidfile writes the PID in decimal without a newline, mode 0644,
// like the reference.
func writePidfile(path string) error {
	if !filepath.IsAbs(path) {
		return fmt.Errorf("Error writing pidfile %q: path not absolute", path)
	}
	if err := os.WriteFile(path, []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return fmt.Errorf("Error writing pidfile %q: %w", path, err)
	}
	return nil
}

// listen returns the socket systemd passed (socket activation), or binds
// path itself (ours = true), creating its directory with mode 0700. A
// socket file left by a daemon that died is replaced; one a live daemon
// answers on is not (the reference fails on any existing file).
func listen(path string) (l net.Listener, ours bool, err error) {
	ls, err := activationListeners()
	if err != nil {
		return nil, false, err
	}
	if l, err := activated(ls); l != nil || err != nil {
		return l, false, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, false, fmt.Errorf("creating socket directory: %w", err)
	}
	if fi, err := os.Lstat(path); err == nil && fi.Mode().Type() == os.ModeSocket {
		c, err := net.DialTimeout("unix", path, time.Second)
		if err == nil {
			c.Close()
			return nil, false, fmt.Errorf("another daemon is listening on %s", path)
		}
		if errors.Is(err, unix.ECONNREFUSED) {
			if err := os.Remove(path); err != nil {
				return nil, false, fmt.Errorf("removing stale socket: %w", err)
			}
		}
	}
	l, err = net.Listen("unix", path)
	if err != nil {
		return nil, false, fmt.Errorf("error listening on socket: %w", err)
	}
	return l, true, nil
}

// activated picks the one socket systemd passed; nil when there is none.
// The reference refuses more than one, and so do we.
func activated(ls []net.Listener) (net.Listener, error) {
	switch len(ls) {
	case 0:
		return nil, nil
	case 1:
		return ls[0], nil
	}
	for _, l := range ls {
		l.Close()
	}
	return nil, fmt.Errorf("Too many (%d) FDs passed through socket activation", len(ls))
}

// listenFDsStart is the first descriptor systemd passes (SD_LISTEN_FDS_START).
const listenFDsStart = 3

// activationListeners returns the sockets systemd passed for this process
// (LISTEN_PID, LISTEN_FDS), none when not activated. The variables are
// removed so that nothing started later mistakes them for its own.
func activationListeners() ([]net.Listener, error) {
	if os.Getenv("LISTEN_PID") != strconv.Itoa(os.Getpid()) {
		return nil, nil
	}
	n, err := strconv.Atoi(os.Getenv("LISTEN_FDS"))
	os.Unsetenv("LISTEN_PID")
	os.Unsetenv("LISTEN_FDS")
	os.Unsetenv("LISTEN_FDNAMES")
	if err != nil || n <= 0 {
		return nil, nil
	}
	return listenersAt(listenFDsStart, n)
}

// listenersAt turns descriptors first … first+n-1 into listeners, taking
// ownership of them.
func listenersAt(first, n int) ([]net.Listener, error) {
	var ls []net.Listener
	for fd := first; fd < first+n; fd++ {
		unix.CloseOnExec(fd)
		f := os.NewFile(uintptr(fd), "LISTEN_FD_"+strconv.Itoa(fd))
		l, err := net.FileListener(f)
		f.Close()
		if err != nil {
			for _, l := range ls {
				l.Close()
			}
			return nil, fmt.Errorf("using socket-activation descriptor %d: %w", fd, err)
		}
		ls = append(ls, l)
	}
	return ls, nil
}
