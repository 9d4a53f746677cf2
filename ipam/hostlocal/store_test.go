package hostlocal

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/matryer/is"

	"github.com/nftcni/nftcni/ipam/hostlocal/ownerlink"
)

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode()
}

// TestStoreFormat pins the bytes and modes a reference host-local reads.
func TestStoreFormat(t *testing.T) {
	is := is.New(t)
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	dir := filepath.Join(t.TempDir(), "a", "b") // parents are created too
	stdin := netconf(t, dir, "", `"ranges":[[{"subnet":"10.1.2.0/24","gateway":"10.1.2.1"}],[{"subnet":"2001:db8::/64"}]]`)
	_, err := doAdd(stdin, "c1")
	is.NoErr(err)
	_, err = cmdAdd(context.Background(), cmd(stdin, "c2", "net1", ""))
	is.NoErr(err)

	d := netDir(dir)
	ents, err := os.ReadDir(d)
	is.NoErr(err)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	c1, c2 := ownerHash("c1", "eth0"), ownerHash("c2", "net1")
	is.Equal(names, []string{
		".nftcni-owner." + c1 + ".10.1.2.2", ".nftcni-owner." + c1 + ".2001:db8::2",
		".nftcni-owner." + c2 + ".10.1.2.3", ".nftcni-owner." + c2 + ".2001:db8::3",
		"10.1.2.2", "10.1.2.3", "2001:db8::2", "2001:db8::3", "last_reserved_ip.0", "last_reserved_ip.1", "lock"})
	// Each owner link is the address file itself (one inode), which is
	// how a link can be trusted: see ownerLink.
	for _, n := range names[:4] {
		_, addr, _ := ownerlink.Parse(n)
		var a, b syscall.Stat_t
		is.NoErr(syscall.Lstat(filepath.Join(d, n), &a))
		is.NoErr(syscall.Lstat(filepath.Join(d, addr), &b))
		is.Equal(a.Ino, b.Ino)
		is.Equal(uint64(a.Nlink), uint64(2)) // uint64 on amd64, uint32 on arm64
	}
	is.Equal(readFile(t, filepath.Join(d, "10.1.2.2")), "c1\r\neth0")
	is.Equal(readFile(t, filepath.Join(d, "2001:db8::2")), "c1\r\neth0")
	is.Equal(readFile(t, filepath.Join(d, "10.1.2.3")), "c2\r\nnet1")
	is.Equal(readFile(t, filepath.Join(d, "last_reserved_ip.0")), "10.1.2.3")
	is.Equal(readFile(t, filepath.Join(d, "last_reserved_ip.1")), "2001:db8::3")
	is.Equal(readFile(t, filepath.Join(d, "lock")), "")
	is.Equal(mode(t, d), os.ModeDir|0o755)
	is.Equal(mode(t, filepath.Dir(d)), os.ModeDir|0o755)
	is.Equal(mode(t, filepath.Join(d, "lock")), os.FileMode(0o750))
	is.Equal(mode(t, filepath.Join(d, "10.1.2.2")), os.FileMode(0o600))
	is.Equal(mode(t, filepath.Join(d, "last_reserved_ip.0")), os.FileMode(0o600))
}

// TestReferenceStore runs our plugin on a directory laid out by the
// reference, legacy files included.
func TestReferenceStore(t *testing.T) {
	is := is.New(t)
	dir := t.TempDir()
	d := netDir(dir)
	writeFile(t, filepath.Join(d, "lock"), "", 0o750)
	writeFile(t, filepath.Join(d, "10.1.2.2"), "c1\r\neth0", 0o600)
	writeFile(t, filepath.Join(d, "2001:db8::2"), "c1\r\neth0", 0o600)
	writeFile(t, filepath.Join(d, "10.1.2.3"), "legacy", 0o644) // written by an old version
	writeFile(t, filepath.Join(d, "10.1.2.7"), "spaced \n", 0o644)
	writeFile(t, filepath.Join(d, "last_reserved_ip.0"), "10.1.2.3", 0o600)
	writeFile(t, filepath.Join(d, "last_reserved_ip.1"), "2001:db8::2", 0o600)
	stdin := netconf(t, dir, "", `"ranges":[[{"subnet":"10.1.2.0/24"}],[{"subnet":"2001:db8::/64"}]]`)

	res, err := doAdd(stdin, "c3")
	is.NoErr(err)
	is.Equal(addrs(res), []string{"10.1.2.4/24", "2001:db8::3/64"})

	_, err = doAdd(stdin, "c1")
	is.Equal(errText(err), "failed to allocate for range 0: 10.1.2.2 has been allocated to c1, duplicate allocation is not allowed")
	_, err = doAdd(stdin, "legacy")
	is.Equal(errText(err), "failed to allocate for range 0: 10.1.2.3 has been allocated to legacy, duplicate allocation is not allowed")
	_, err = doAdd(stdin, "spaced") // content is compared trimmed
	is.Equal(errText(err), "failed to allocate for range 0: 10.1.2.7 has been allocated to spaced, duplicate allocation is not allowed")

	is.NoErr(cmdCheck(context.Background(), cmd(stdin, "legacy", "eth0", "")))
	is.NoErr(cmdCheck(context.Background(), cmd(stdin, "legacy", "eth9", ""))) // legacy files match any ifname
	is.NoErr(doDel(stdin, "legacy"))
	is.NoErr(doDel(stdin, "c1"))
	is.Equal(sortedKeys(reservations(t, dir)), []string{"10.1.2.4", "10.1.2.7", "2001:db8::3"})
	is.Equal(readFile(t, filepath.Join(d, "last_reserved_ip.0")), "10.1.2.4")
}

// TestDelLegacyFallback pins DEL's fallback to the old file format: legacy
// files of the bare ID go only when no current-format file matched, except that
// every further range set repeats the fallback.
func TestDelLegacyFallback(t *testing.T) {
	for _, tc := range []struct {
		name, ipam string
		left       []string
	}{
		{"one set keeps legacy when a pair file matched", `"subnet":"10.1.2.0/24"`, []string{"10.1.2.3"}},
		{"two sets drop both", `"ranges":[[{"subnet":"10.1.2.0/24"}],[{"subnet":"10.1.3.0/24"}]]`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			is := is.New(t)
			dir := t.TempDir()
			writeFile(t, filepath.Join(netDir(dir), "10.1.2.2"), "c1\r\neth0", 0o600)
			writeFile(t, filepath.Join(netDir(dir), "10.1.2.3"), "c1", 0o600)
			is.NoErr(doDel(netconf(t, dir, "", tc.ipam), "c1"))
			is.Equal(sortedKeys(reservations(t, dir)), tc.left)
		})
	}
}

func TestDel(t *testing.T) {
	is := is.New(t)
	dir := t.TempDir()
	stdin := netconf(t, dir, "", `"subnet":"10.1.2.0/24"`)
	_, err := doAdd(stdin, "c1")
	is.NoErr(err)
	_, err = cmdAdd(context.Background(), cmd(stdin, "c1", "eth1", ""))
	is.NoErr(err)
	is.NoErr(doDel(stdin, "c1"))
	is.Equal(reservations(t, dir), map[string]string{"10.1.2.3": "c1\r\neth1"}) // other ifname kept
	is.NoErr(doDel(stdin, "c1"))                                                // idempotent
	is.NoErr(doDel(stdin, "never-added"))

	// DEL parses the whole config and CNI_ARGS, and fails like ADD.
	is.Equal(errText(doDel(netconf(t, dir, "", ""), "c1")), "no IP ranges specified")
	err = cmdDel(context.Background(), cmd(stdin, "c1", "eth1", "K8S_POD_NAME=x"))
	is.Equal(errText(err), `ARGS: unknown args ["K8S_POD_NAME=x"]`)
	is.Equal(len(reservations(t, dir)), 1)

	// The store directory is created by DEL too.
	dir2 := t.TempDir()
	is.NoErr(doDel(netconf(t, dir2, "", `"subnet":"10.1.2.0/24"`), "c1"))
	_, err = os.Stat(filepath.Join(netDir(dir2), "lock"))
	is.NoErr(err)
}

func TestCheck(t *testing.T) {
	is := is.New(t)
	dir := t.TempDir()
	stdin := netconf(t, dir, "0.4.0", `"subnet":"10.1.2.0/24"`)
	_, err := doAdd(stdin, "c1")
	is.NoErr(err)
	is.NoErr(cmdCheck(context.Background(), cmd(stdin, "c1", "eth0", "")))
	err = cmdCheck(context.Background(), cmd(stdin, "c1", "eth1", ""))
	is.Equal(errText(err), "host-local: Failed to find address added by container c1")
	err = cmdCheck(context.Background(), cmd(stdin, "c9", "eth0", ""))
	is.Equal(errText(err), "host-local: Failed to find address added by container c9")
	err = cmdCheck(context.Background(), cmd(netconf(t, dir, "0.4.0", `"subnet":"10.1.2.0/31"`), "c1", "eth0", ""))
	is.Equal(errText(err), "invalid range set 0: Network 10.1.2.0/31 too small to allocate from")
}

// TestSymlinksAreNotFollowed plants symlinks where the reference would
// follow them: as an address file, as last_reserved_ip and as the network
// directory itself.
func TestSymlinksAreNotFollowed(t *testing.T) {
	is := is.New(t)
	dir := t.TempDir()
	outside := t.TempDir()
	victim := filepath.Join(outside, "victim")
	writeFile(t, victim, "c1\r\neth0", 0o600)
	hint := filepath.Join(outside, "hint")
	writeFile(t, hint, "keep me", 0o600)
	d := netDir(dir)
	is.NoErr(os.MkdirAll(d, 0o755))
	is.NoErr(os.Symlink(victim, filepath.Join(d, "10.1.2.2")))
	is.NoErr(os.Symlink(hint, filepath.Join(d, "last_reserved_ip.0")))
	stdin := netconf(t, dir, "", `"subnet":"10.1.2.0/24"`)

	// The symlink is not c1's reservation (no duplicate error) and its
	// name is taken, so the walk moves on.
	res, err := doAdd(stdin, "c1")
	is.NoErr(err)
	is.Equal(addrs(res), []string{"10.1.2.3/24"})
	is.Equal(readFile(t, hint), "keep me") // replaced, not written through
	fi, err := os.Lstat(filepath.Join(d, "last_reserved_ip.0"))
	is.NoErr(err)
	is.True(fi.Mode().IsRegular())

	// DEL removes c1's real file but neither the symlink nor its target.
	is.NoErr(doDel(stdin, "c1"))
	_, err = os.Lstat(filepath.Join(d, "10.1.2.2"))
	is.NoErr(err)
	is.Equal(readFile(t, victim), "c1\r\neth0")
	is.Equal(len(reservations(t, dir)), 1)

	// A symlinked network directory is refused rather than used.
	dir3 := t.TempDir()
	is.NoErr(os.Symlink(outside, netDir(dir3)))
	_, err = doAdd(netconf(t, dir3, "", `"subnet":"10.1.2.0/24"`), "c1")
	is.True(err != nil && strings.Contains(err.Error(), "is a symbolic link"))
}

func TestStaleTempFilesAreRemoved(t *testing.T) {
	is := is.New(t)
	dir := t.TempDir()
	writeFile(t, filepath.Join(netDir(dir), ".tmp-0123456789abcdef"), "c9\r\neth0", 0o600)
	writeFile(t, filepath.Join(netDir(dir), ".tmp-"), "", 0o600)
	_, err := doAdd(netconf(t, dir, "", `"subnet":"10.1.2.0/24"`), "c1")
	is.NoErr(err)
	ents, err := os.ReadDir(netDir(dir))
	is.NoErr(err)
	for _, e := range ents {
		is.True(!strings.HasPrefix(e.Name(), tempPrefix))
	}
}

// TestEmptyReservation: a reference process killed mid-write leaves an
// empty file; it blocks its address and is nobody's.
func TestEmptyReservation(t *testing.T) {
	is := is.New(t)
	dir := t.TempDir()
	writeFile(t, filepath.Join(netDir(dir), "10.1.2.2"), "", 0o600)
	stdin := netconf(t, dir, "", `"subnet":"10.1.2.0/24"`)
	res, err := doAdd(stdin, "c1")
	is.NoErr(err)
	is.Equal(addrs(res), []string{"10.1.2.3/24"})
	is.NoErr(doDel(stdin, "c1"))
	is.Equal(reservations(t, dir), map[string]string{"10.1.2.2": ""})
}

func TestStoreName(t *testing.T) {
	for _, name := range []string{"", ".", "..", "a/b", "/abs", "a\x00b"} {
		if _, err := openStore(t.TempDir(), name); err == nil {
			t.Errorf("name %q accepted", name)
		}
	}
	s, err := openStore(t.TempDir(), "ok.name-1")
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
}

func TestStoreUnusable(t *testing.T) {
	is := is.New(t)
	file := filepath.Join(t.TempDir(), "file")
	writeFile(t, file, "", 0o600)
	_, err := doAdd(netconf(t, file, "", `"subnet":"10.1.2.0/24"`), "c1")
	is.Equal(errText(err), "mkdir "+file+": not a directory")
}

// links lists the owner links of the store directory.
func links(t *testing.T, dataDir string) []string {
	t.Helper()
	ents, err := os.ReadDir(netDir(dataDir))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ownerlink.Prefix) {
			out = append(out, e.Name())
		}
	}
	return out
}

// TestOwnerLinks: the owner links index the store without ever deciding
// on their own. A link whose address file the reference released and gave
// to someone else is dropped, the new owner's unlinked file is found by
// its content, and a reservation left without a link (a process killed
// between the two links) is still released by DEL.
func TestOwnerLinks(t *testing.T) {
	is := is.New(t)
	dir := t.TempDir()
	d := netDir(dir)
	stdin := netconf(t, dir, "", `"ranges":[[{"subnet":"10.1.2.0/24"}]]`)

	res, err := doAdd(stdin, "c1")
	is.NoErr(err)
	is.Equal(addrs(res), []string{"10.1.2.2/24"})
	is.Equal(links(t, dir), []string{ownerLink(ownerHash("c1", "eth0"), "10.1.2.2")})

	// The reference releases 10.1.2.2 by address and hands it to c9.
	is.NoErr(os.Remove(filepath.Join(d, "10.1.2.2")))
	writeFile(t, filepath.Join(d, "10.1.2.2"), "c9\r\neth0", 0o600)
	_, err = doAdd(stdin, "c9")
	is.Equal(errText(err), "failed to allocate for range 0: 10.1.2.2 has been allocated to c9, duplicate allocation is not allowed")
	is.Equal(links(t, dir), nil) // c1's link no longer named c1's file: removed

	// c1 holds nothing any more: it gets a new address.
	res, err = doAdd(stdin, "c1")
	is.NoErr(err)
	is.Equal(addrs(res), []string{"10.1.2.3/24"})

	// A reservation without its link.
	writeFile(t, filepath.Join(d, "10.1.2.9"), "c5\r\neth0", 0o600)
	_, err = doAdd(stdin, "c5")
	is.Equal(errText(err), "failed to allocate for range 0: 10.1.2.9 has been allocated to c5, duplicate allocation is not allowed")
	is.NoErr(doDel(stdin, "c5"))
	is.NoErr(doDel(stdin, "c1"))
	is.Equal(reservations(t, dir), map[string]string{"10.1.2.2": "c9\r\neth0"})
	is.Equal(links(t, dir), nil)
}
