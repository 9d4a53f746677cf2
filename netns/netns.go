// Package netns opens Linux network namespaces by path and runs code inside
// them.
//
// Most netlink work does not need this package beyond Open: sockets can be
// created directly inside a namespace (see netlinkx.Open). What remains
// thread-bound — files under /proc/sys, AF_PACKET sockets — goes through
// (*NS).Do, which switches a dedicated, locked OS thread and never the
// caller's.
package netns

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// threadSelfPath names the network namespace of the calling OS thread. The
// thread, not the process: Do moves single threads between namespaces.
const threadSelfPath = "/proc/thread-self/ns/net"

// ErrNotExist matches (via errors.Is) the error Open returns when the path
// does not exist. DEL treats that as "the namespace is already gone". It is
// fs.ErrNotExist, so os.IsNotExist-style checks agree.
var ErrNotExist = fs.ErrNotExist

// NS is an open network namespace. The open file keeps the namespace alive
// even if its bind mount is removed, so an NS stays valid until Close.
type NS struct {
	f    *os.File
	path string
}

// Open opens the network namespace at path, which must be an nsfs file (a
// bind mount such as /var/run/netns/x) or a procfs link (/proc/<pid>/ns/net).
// Anything else is refused rather than guessed at: setns on a wrong file would
// fail later with a far less helpful error. The messages match the reference
// plugins', since runtimes and users see them verbatim.
func Open(path string) (*NS, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return nil, fmt.Errorf("failed to Statfs %q: %w", path, err)
	}
	switch uint64(st.Type) {
	case unix.NSFS_MAGIC, unix.PROC_SUPER_MAGIC:
	default:
		return nil, fmt.Errorf("unknown FS magic on %q: %x", path, uint64(st.Type))
	}
	f, err := os.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("failed to open %q: %w", path, plain(err))
	}
	return &NS{f: f, path: path}, nil
}

// Current opens the network namespace of the calling OS thread. Unless the
// caller has locked its thread and moved it, that is the process's own. Its
// Path, /proc/thread-self/ns/net, means another namespace to another thread:
// keep using the NS, do not reopen the path.
func Current() (*NS, error) {
	return Open(threadSelfPath)
}

// Path returns the path the namespace was opened from.
func (ns *NS) Path() string { return ns.path }

// Fd returns the namespace's file descriptor, valid until Close.
func (ns *NS) Fd() int { return int(ns.f.Fd()) }

// Close releases the namespace file. The namespace itself lives on while
// anything else (a bind mount, a process) still references it.
func (ns *NS) Close() error {
	if err := ns.f.Close(); err != nil {
		return fmt.Errorf("closing netns %q: %w", ns.path, plain(err))
	}
	return nil
}

// SameAs reports whether ns and other are the same namespace: same device
// and inode of the nsfs file, whatever paths they were opened from.
func (ns *NS) SameAs(other *NS) (bool, error) {
	a, err := fstat(ns)
	if err != nil {
		return false, err
	}
	b, err := fstat(other)
	if err != nil {
		return false, err
	}
	return a.Dev == b.Dev && a.Ino == b.Ino, nil
}

// IsOwn reports whether ns is the namespace the plugin itself runs in. CNI
// forbids CNI_NETNS to be the plugin's own namespace; this check lets us
// refuse before changing anything.
func (ns *NS) IsOwn() (bool, error) {
	a, err := fstat(ns)
	if err != nil {
		return false, err
	}
	var b unix.Stat_t
	if err := unix.Stat(threadSelfPath, &b); err != nil {
		return false, fmt.Errorf("stat %s: %w", threadSelfPath, err)
	}
	return a.Dev == b.Dev && a.Ino == b.Ino, nil
}

func fstat(ns *NS) (unix.Stat_t, error) {
	var st unix.Stat_t
	if err := unix.Fstat(ns.Fd(), &st); err != nil {
		return st, fmt.Errorf("stat netns %q: %w", ns.path, err)
	}
	return st, nil
}

// Do runs fn on a fresh goroutine whose OS thread is locked and switched into
// ns, then switches the thread back. The caller's own thread never changes
// namespace. Goroutines started by fn run elsewhere, in the process's
// namespace.
//
// If switching back fails, the thread is left locked: the Go runtime then
// destroys it when the goroutine exits instead of reusing a thread that sits
// in the wrong namespace.
func (ns *NS) Do(fn func() error) error {
	return onSwitchedThread(func() error {
		if err := unix.Setns(ns.Fd(), unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("switching to netns %q: %w", ns.path, err)
		}
		return nil
	}, fn, fmt.Sprintf("switching back from netns %q", ns.path))
}

// onSwitchedThread runs enter then fn on a fresh goroutine with a locked
// OS thread, then puts the thread back into the namespace it started in.
// If enter fails, fn does not run. If switching back fails, the thread is
// left locked: the Go runtime then destroys it when the goroutine exits
// instead of reusing a thread that sits in the wrong namespace.
func onSwitchedThread(enter, fn func() error, back string) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := unix.Open(threadSelfPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("opening current netns %s: %w", threadSelfPath, err)
			return
		}
		defer unix.Close(orig)
		if err := enter(); err != nil {
			runtime.UnlockOSThread() // enter failed: still in the original namespace
			errc <- err
			return
		}
		ferr := fn()
		if err := unix.Setns(orig, unix.CLONE_NEWNET); err != nil {
			errc <- errors.Join(ferr, fmt.Errorf("%s: %w", back, err))
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// New creates a persistent network namespace bound to the file dir/name (as
// `ip netns add` does under /var/run/netns) and opens it. Only a dedicated
// locked thread enters the new namespace; the process's other threads are
// never moved.
func New(dir, name string) (*NS, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating netns dir %q: %w", dir, plain(err))
	}
	path := dir + "/" + name
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return nil, fmt.Errorf("creating netns file %q: %w", path, plain(err))
	}
	_ = f.Close()

	err = onSwitchedThread(func() error {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("creating netns %q: unshare: %w", path, err)
		}
		return nil
	}, func() error {
		if err := unix.Mount(threadSelfPath, path, "none", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("creating netns %q: bind mount: %w", path, err)
		}
		return nil
	}, fmt.Sprintf("creating netns %q: switching back", path))
	if err != nil {
		_ = Remove(path)
		return nil, err
	}
	ns, err := Open(path)
	if err != nil {
		_ = Remove(path)
		return nil, err
	}
	return ns, nil
}

// Remove unmounts and deletes a namespace file made by New. A missing file
// is not an error, so cleanup can run twice. The namespace itself is freed by
// the kernel once nothing else holds it.
func Remove(path string) error {
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil &&
		!errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmounting netns %q: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing netns %q: %w", path, plain(err))
	}
	return nil
}

// plain strips the *fs.PathError wrapper so messages name the path once, in
// our own words, followed by the plain errno text.
func plain(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
