package netns_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/internal/privtest"
	"github.com/nftcni/nftcni/netns"
)

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	regular := filepath.Join(dir, "regular")
	if err := os.WriteFile(regular, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing")

	tests := []struct {
		name     string
		path     string
		want     string
		notExist bool
	}{
		{"missing", missing, fmt.Sprintf("failed to Statfs %q: no such file or directory", missing), true},
		{"regular file", regular, fmt.Sprintf("unknown FS magic on %q: %x", regular, uint64(st.Type)), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ns, err := netns.Open(tt.path)
			if err == nil {
				ns.Close()
				t.Fatal("Open succeeded")
			}
			if err.Error() != tt.want {
				t.Errorf("error = %q, want %q", err, tt.want)
			}
			if got := errors.Is(err, netns.ErrNotExist); got != tt.notExist {
				t.Errorf("errors.Is(err, ErrNotExist) = %v, want %v", got, tt.notExist)
			}
		})
	}
}

func TestRemoveMissing(t *testing.T) {
	if err := netns.Remove(filepath.Join(t.TempDir(), "missing")); err != nil {
		t.Errorf("Remove of a missing file: %v", err)
	}
}

func TestCurrentIsOwn(t *testing.T) {
	cur, err := netns.Current()
	if err != nil {
		t.Fatal(err)
	}
	defer cur.Close()
	own, err := cur.IsOwn()
	if err != nil {
		t.Fatal(err)
	}
	if !own {
		t.Error("Current().IsOwn() = false")
	}
	// A procfs path works too (statfs follows the magic link).
	self, err := netns.Open(fmt.Sprintf("/proc/%d/ns/net", os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	defer self.Close()
	if same, err := self.SameAs(cur); err != nil || !same {
		t.Errorf("/proc/<pid>/ns/net SameAs Current = %v, %v", same, err)
	}
}

func TestNewSameAsIsOwn(t *testing.T) {
	ns := privtest.NewNS(t)
	cur, err := netns.Current()
	if err != nil {
		t.Fatal(err)
	}
	defer cur.Close()
	again, err := netns.Open(ns.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()

	tests := []struct {
		name string
		a, b *netns.NS
		want bool
	}{
		{"same path", ns, again, true},
		{"new vs current", ns, cur, false},
		{"current vs itself", cur, cur, true},
	}
	for _, tt := range tests {
		got, err := tt.a.SameAs(tt.b)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if got != tt.want {
			t.Errorf("%s: SameAs = %v, want %v", tt.name, got, tt.want)
		}
	}
	if own, err := ns.IsOwn(); err != nil || own {
		t.Errorf("new netns IsOwn = %v, %v; want false", own, err)
	}
}

func TestNewExisting(t *testing.T) {
	ns := privtest.NewNS(t)
	dir, name := filepath.Split(ns.Path())
	if n, err := netns.New(dir, name); err == nil {
		n.Close()
		t.Fatal("New over an existing netns file succeeded")
	} else if !errors.Is(err, unix.EEXIST) {
		t.Errorf("error = %v, want EEXIST", err)
	}
}

func TestDo(t *testing.T) {
	ns := privtest.NewNS(t)

	// Inside: the thread is in ns.
	err := ns.Do(func() error {
		cur, err := netns.Current()
		if err != nil {
			return err
		}
		defer cur.Close()
		same, err := cur.SameAs(ns)
		if err != nil {
			return err
		}
		if !same {
			return errors.New("not inside the netns")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// fn's error comes back unchanged.
	sentinel := errors.New("sentinel")
	if err := ns.Do(func() error { return sentinel }); err != sentinel {
		t.Errorf("Do returned %v, want the fn's error", err)
	}

	// Many concurrent Do calls never leave a thread in the wrong netns:
	// afterwards every thread that runs a locked goroutine is in ours.
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() { _ = ns.Do(func() error { return nil }) })
	}
	wg.Wait()
	errs := make(chan error, 50)
	for range 50 {
		wg.Go(func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			cur, err := netns.Current()
			if err != nil {
				errs <- err
				return
			}
			defer cur.Close()
			if same, err := cur.SameAs(ns); err != nil || same {
				errs <- fmt.Errorf("thread left in test netns (err %v)", err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestRemoveKeepsOpenNS(t *testing.T) {
	privtest.Require(t)
	dir := t.TempDir()
	ns, err := netns.New(dir, "keep")
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	if err := netns.Remove(ns.Path()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(ns.Path()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("file still there after Remove: %v", err)
	}
	if err := netns.Remove(ns.Path()); err != nil {
		t.Errorf("second Remove: %v", err)
	}
	// The open fd still holds the namespace.
	if err := ns.Do(func() error { return nil }); err != nil {
		t.Errorf("Do after Remove: %v", err)
	}
}

func TestStartIn(t *testing.T) {
	ns := privtest.NewNS(t)
	cmd := exec.Command("/bin/sh", "-c", "readlink /proc/self/ns/net")
	var out strings.Builder
	cmd.Stdout = &out
	if err := netns.StartIn(ns, cmd); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(ns.Fd(), &st); err != nil {
		t.Fatal(err)
	}
	if got, want := strings.TrimSpace(out.String()), "net:["+strconv.FormatUint(st.Ino, 10)+"]"; got != want {
		t.Errorf("child runs in %q, want the test namespace %q", got, want)
	}
}
