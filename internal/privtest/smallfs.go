package privtest

import (
	"fmt"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// SmallFS mounts a tmpfs of the test's own, pages pages large, on a fresh
// temporary directory and returns that directory; it is unmounted when the
// test ends. Tests of what a full disk does use it (with
// storetest.LeaveFree) so that they never fill the machine's own file
// systems. tmpfs counts exactly one page per page of file data and nothing
// for directories and links, so the free space a test leaves is exact.
func SmallFS(t testing.TB, pages int) string {
	t.Helper()
	Require(t)
	dir := t.TempDir()
	opts := fmt.Sprintf("size=%d,mode=0755", pages*os.Getpagesize())
	if err := unix.Mount("nftcni-test-smallfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		t.Fatalf("mounting a %d-page tmpfs on %s: %v", pages, dir, err)
	}
	// Registered after t.TempDir's cleanup, so it runs first: the
	// directory is empty again when it is removed.
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmounting %s: %v", dir, err)
		}
	})
	return dir
}
