package daemon

import (
	"net"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestSocketActivation: descriptors passed by systemd become listeners;
// one is used, more than one is refused with the reference's text.
func TestSocketActivation(t *testing.T) {
	// Listening sockets duplicated onto adjacent high descriptors, as
	// systemd passes them from 3 on.
	const first = 900
	var paths []string
	for i := range 3 {
		path := filepath.Join(t.TempDir(), "s.sock")
		l, err := net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		l.(*net.UnixListener).SetUnlinkOnClose(false)
		f, err := l.(*net.UnixListener).File()
		if err != nil {
			t.Fatal(err)
		}
		if err := unix.Dup3(int(f.Fd()), first+i, 0); err != nil {
			t.Fatal(err)
		}
		f.Close()
		l.Close()
		paths = append(paths, path)
	}

	one, err := listenersAt(first, 1)
	if err != nil {
		t.Fatal(err)
	}
	l, err := activated(one)
	if err != nil || l == nil {
		t.Fatalf("one socket: %v %v", l, err)
	}
	c, err := net.Dial("unix", paths[0])
	if err != nil {
		t.Fatal(err)
	}
	if a, err := l.Accept(); err != nil {
		t.Errorf("the passed socket does not accept: %v", err)
	} else {
		a.Close()
	}
	c.Close()
	l.Close()

	two, err := listenersAt(first+1, 2)
	if err != nil || len(two) != 2 {
		t.Fatalf("listenersAt: %v %v", two, err)
	}
	if l, err := activated(two); l != nil || err == nil || err.Error() != "Too many (2) FDs passed through socket activation" {
		t.Errorf("two sockets: %v %v", l, err)
	}
	if l, err := activated(nil); l != nil || err != nil {
		t.Errorf("no socket: %v %v", l, err)
	}
}
