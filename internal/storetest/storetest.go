// Package storetest reads a host-local store the way tests compare it with
// the reference's. It depends on nothing privileged, so black-box packages
// (conformance) can use it without being taken for privileged tests.
package storetest

import (
	"os"
	"path/filepath"
	"testing"

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
