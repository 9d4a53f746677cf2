// Package storetest reads a host-local store the way tests compare it with
// the reference's. It depends on nothing privileged, so black-box packages
// (tests/conformance) can use it without being taken for privileged tests.
package storetest

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/ipam/hostlocal/ownerlink"
)

// Files returns every file of a host-local network directory with
// its content, as the reference would have left it: our owner links
// (ipam/hostlocal/README.md) are checked instead — each must be a hard
// link of the address file it names — and left out.
func Files(t testing.TB, dir string) map[string]string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range ents {
		if _, addr, ok := ownerlink.Parse(e.Name()); ok {
			a, errA := os.Stat(filepath.Join(dir, addr))
			l, errL := os.Lstat(filepath.Join(dir, e.Name()))
			if errA != nil || errL != nil || !os.SameFile(a, l) {
				t.Errorf("store: owner link %s is not a hard link of %s", e.Name(), addr)
			}
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = string(b)
	}
	return out
}

// FreePages is how many blocks of the file system holding dir are free,
// in its own block size (a page on tmpfs).
func FreePages(t testing.TB, dir string) int {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int(st.Bfree)
}

// LeaveFree fills the file system holding dir until exactly free blocks
// are left, with one filler file in dir (named ".filler", which the store
// never takes for a reservation), and returns a function that removes it
// again. Meant for a small file system a test made (privtest.SmallFS),
// never for the machine's own.
func LeaveFree(t testing.TB, dir string, free int) (restore func()) {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	fill := int(st.Bfree) - free
	if fill < 0 {
		t.Fatalf("%s has %d free blocks, fewer than the %d wanted", dir, st.Bfree, free)
	}
	name := filepath.Join(dir, ".filler")
	if err := os.WriteFile(name, make([]byte, fill*int(st.Bsize)), 0o600); err != nil {
		t.Fatalf("filling %s: %v", dir, err)
	}
	if got := FreePages(t, dir); got != free {
		t.Fatalf("%s: %d blocks free after filling, want %d", dir, got, free)
	}
	return func() {
		if err := os.Remove(name); err != nil {
			t.Fatal(err)
		}
	}
}
