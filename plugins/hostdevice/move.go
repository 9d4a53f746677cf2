package hostdevice

import (
	"errors"
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/netlinkx"
	"github.com/nftcni/nftcni/netns"
)

// Devices travel between the host and the container through a temporary
// namespace, where they are renamed: the host never sees the container's
// name for its device and the container never sees the host's, so neither
// side's udev or NetworkManager can race the rename, and a name taken on
// the far side is found before anything there changes. Each step has an
// undo, run in reverse if a later step fails, so a failed move leaves the
// device where it was.

// newTempNS creates an anonymous network namespace, held only by the
// returned NS: once that is closed the kernel frees it (and, should we
// crash half-way, sends physical devices in it back to the initial
// namespace and destroys virtual ones). The thread that creates it is
// never unlocked, so it ends with its goroutine instead of going back to
// the pool in the wrong namespace.
func newTempNS() (*netns.NS, error) {
	type res struct {
		ns  *netns.NS
		err error
	}
	ch := make(chan res, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			ch <- res{err: fmt.Errorf("creating a temporary netns: %w", err)}
			return
		}
		ns, err := netns.Current()
		ch <- res{ns, err}
	}()
	r := <-ch
	return r.ns, r.err
}

// steps runs a sequence of actions with their undos: if one fails, the
// undos of those that succeeded run, last first, and their errors are
// added to the failure's.
type steps struct {
	undo []func() error
}

func (s *steps) do(action func() error, undo func() error) error {
	if err := action(); err != nil {
		return err
	}
	s.undo = append(s.undo, undo)
	return nil
}

func (s *steps) rollback(err error) error {
	errs := []error{err}
	for i := len(s.undo) - 1; i >= 0; i-- {
		if uerr := s.undo[i](); uerr != nil {
			errs = append(errs, fmt.Errorf("undoing: %w", uerr))
		}
	}
	return errors.Join(errs...)
}

// move is one trip of a device between namespaces.
type move struct {
	from, to   *netns.NS
	hFrom, hTo *netlinkx.Handle
	// name is the device's name in from, newName the one it gets in to;
	// alias is what its alias becomes (oldAlias is restored on failure).
	name, newName   string
	alias, oldAlias string
}

// run moves the device: into a temporary namespace, rename, alias, on
// into the destination. Nothing is brought up.
func (m move) run() error {
	tmp, err := newTempNS()
	if err != nil {
		return err
	}
	defer tmp.Close()
	ht, err := netlinkx.Open(tmp)
	if err != nil {
		return err
	}
	defer ht.Close()

	var s steps
	err = s.do(func() error { return m.hFrom.MoveToNS(m.name, tmp) },
		func() error { return ht.MoveToNS(m.name, m.from) })
	if err == nil && m.newName != m.name {
		err = s.do(func() error { return ht.Rename(m.name, m.newName) },
			func() error { return ht.Rename(m.newName, m.name) })
	}
	if err == nil {
		err = s.do(func() error { return ht.SetAlias(m.newName, m.alias) },
			func() error { return ht.SetAlias(m.newName, m.oldAlias) })
	}
	if err == nil {
		err = ht.MoveToNS(m.newName, m.to)
	}
	if err != nil {
		return s.rollback(err)
	}
	return nil
}
