package hostlocal

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/cni"
	"github.com/nftcni/nftcni/crashpoint"
	"github.com/nftcni/nftcni/ipam/hostlocal/ownerlink"
)

// On-disk format, shared with the reference so that both can run against
// one directory during a rolling replacement.
const (
	lastIPFilePrefix = "last_reserved_ip."
	lineBreak        = "\r\n"
	lockName         = "lock"
	// tempPrefix names our scratch files. Such a name never parses as an
	// IP, so neither we nor the reference ever take one for a reservation.
	tempPrefix = ".tmp-"
	// maxContent bounds how much of a store file is read; a reservation is
	// a container ID and an interface name. Linux caps one environment
	// string at 128 KiB (MAX_ARG_STRLEN), so every container ID a runtime
	// can hand over fits; ADD refuses a longer one (checkIDFits), which
	// could otherwise be written but never read back, and so never
	// released.
	maxContent = 256 << 10
)

// ownerLink is the name of the second hard link we give every reservation
// we write: ".nftcni-owner.<h>.<address>", h the first 8 bytes of
// SHA-256("<id>\r\n<ifname>") in hex.
//
// Why: the duplicate guard of every ADD, and every DEL, must find the
// addresses one (container ID, ifname) holds, and the reference format
// records the owner only inside each file: reading them all costs ~15 µs a
// file, 15 ms per ADD with 1000 containers on the network. With the owner
// hash in a link name, the directory listing alone (which the allocator
// reads anyway) tells whose each address is, and only the owner's own
// files are read, to confirm. A link is trusted only while it is the same
// inode as its address file, so it can never be stale: one whose address
// file is gone or was re-created (by the reference's release-by-address,
// say) is removed by the next scan. Reservations without a link — written
// by the reference, by an older nftcni, or by a process killed between the
// two links — are read as before. The reference reads the directory
// unchanged: it counts only names that parse as IPs, and its release by ID
// removes every file with the owner's content, the link included.
func ownerLink(hash string, addrName string) string { return ownerlink.Name(hash, addrName) }

// ownerHash is h of ownerLink for (id, ifname).
func ownerHash(id, ifname string) string {
	pair, _ := keys(id, ifname)
	sum := sha256.Sum256([]byte(pair))
	return hex.EncodeToString(sum[:8])
}

// store is one network's directory, opened once. Every file operation is
// relative to dirFD and never follows a symlink, so nothing planted in the
// directory can redirect a read, write or delete elsewhere.
type store struct {
	dir    string // for messages only
	dirFD  int
	lockFD int
}

// validStoreName re-checks the network name before it becomes a path
// element (defence in depth: the dispatcher's name rule already forbids
// these).
func validStoreName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
		return fmt.Errorf("invalid network name %q: not a single path element", name)
	}
	return nil
}

// openStore creates <dataDir>/<name> (mode 0755, parents too) and its lock
// file (empty, mode 0750 as in the reference), on every command.
func openStore(dataDir, name string) (*store, error) {
	if err := validStoreName(name); err != nil {
		return nil, err
	}
	if dataDir == "" {
		dataDir = defaultDataDir
	}
	dir := filepath.Join(dataDir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	fd, err := retryEINTR(func() (int, error) {
		return unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	})
	if err != nil {
		if fi, lerr := os.Lstat(dir); lerr == nil && fi.Mode()&os.ModeSymlink != 0 {
			return nil, fmt.Errorf("%s is a symbolic link: refusing to use it as the store directory", dir)
		}
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	lk, err := retryEINTR(func() (int, error) {
		return unix.Openat(fd, lockName, unix.O_RDONLY|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0o750)
	})
	if err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "open", Path: filepath.Join(dir, lockName), Err: err}
	}
	return &store{dir: dir, dirFD: fd, lockFD: lk}, nil
}

func (s *store) Close() error {
	err := unix.Close(s.lockFD)
	if e := unix.Close(s.dirFD); err == nil {
		err = e
	}
	return err
}

// withLock runs fn holding flock(LOCK_EX) on the lock file: the same
// advisory lock the reference takes, so both implementations serialise.
func (s *store) withLock(fn func() error) error {
	if _, err := retryEINTR(func() (int, error) { return 0, unix.Flock(s.lockFD, unix.LOCK_EX) }); err != nil {
		return &os.PathError{Op: "flock", Path: s.path(lockName), Err: err}
	}
	defer unix.Flock(s.lockFD, unix.LOCK_UN)
	return fn()
}

func (s *store) path(name string) string { return filepath.Join(s.dir, name) }

// entry is one top-level name that parses as an IP address.
type entry struct {
	name string
	addr netip.Addr
}

// listing is a snapshot of the directory taken under the lock.
type listing struct {
	names map[string]bool // every name: a candidate whose name exists is taken
	ips   []entry         // names that parse as IPs, sorted like filepath.Walk
	// owner maps an address name to the owner hash of its intact owner
	// link (ownerLink); addresses without one are absent.
	owner map[string]string
}

// scan lists the directory. It must run under the lock: it also removes
// our temp files, which exist only while their creator holds the lock, so
// any one found now was left by a killed process, and owner links that no
// longer share the inode of their address file.
func (s *store) scan() (listing, error) {
	l := listing{names: map[string]bool{}, owner: map[string]string{}}
	ents, err := s.entries()
	if err != nil {
		return l, err
	}
	sort.Slice(ents, func(i, j int) bool { return ents[i].name < ents[j].name })
	inode := map[string]uint64{}
	type link struct{ name, hash, addr string }
	var links []link
	for _, d := range ents {
		n := d.name
		switch {
		case strings.HasPrefix(n, tempPrefix):
			_ = unix.Unlinkat(s.dirFD, n, 0)
			continue
		case strings.HasPrefix(n, ownerlink.Prefix):
			if hash, addr, ok := ownerlink.Parse(n); ok {
				links = append(links, link{n, hash, addr})
				inode[n] = d.ino
			}
		}
		l.names[n] = true
		if a, ok := parseFileName(n); ok {
			l.ips = append(l.ips, entry{n, a})
			inode[n] = d.ino
		}
	}
	for _, k := range links {
		if ino, ok := inode[k.addr]; ok && ino == inode[k.name] {
			l.owner[k.addr] = k.hash
			continue
		}
		_ = unix.Unlinkat(s.dirFD, k.name, 0)
		delete(l.names, k.name)
	}
	return l, nil
}

// entries reads the network directory's entries afresh (through a new
// descriptor: the store's own stays at its offset).
func (s *store) entries() ([]dirent, error) {
	fd, err := retryEINTR(func() (int, error) {
		return unix.Openat(s.dirFD, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	})
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: s.dir, Err: err}
	}
	ents, err := readDir(fd)
	unix.Close(fd)
	if err != nil {
		return nil, &os.PathError{Op: "readdirent", Path: s.dir, Err: err}
	}
	return ents, nil
}

// dirent is one directory entry with its inode number.
type dirent struct {
	name string
	ino  uint64
}

// readDir reads every entry of the open directory fd (but . and ..) with
// its inode number, which os.File.Readdirnames drops.
func readDir(fd int) ([]dirent, error) {
	var out []dirent
	buf := make([]byte, 32<<10)
	for {
		n, err := unix.Getdents(fd, buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n <= 0 {
			return out, nil
		}
		// struct linux_dirent64: u64 d_ino, s64 d_off, u16 d_reclen,
		// u8 d_type, then the NUL-terminated name.
		for b := buf[:n]; len(b) >= 19; {
			reclen := int(binary.NativeEndian.Uint16(b[16:18]))
			if reclen < 19 || reclen > len(b) {
				return nil, fmt.Errorf("malformed directory entry")
			}
			name := b[19:reclen]
			if i := bytes.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			if nm := string(name); nm != "." && nm != ".." {
				out = append(out, dirent{name: nm, ino: binary.NativeEndian.Uint64(b[0:8])})
			}
			b = b[reclen:]
		}
	}
}

// parseFileName accepts what the reference's net.ParseIP accepts as a file
// name; IPv4-mapped names are read as IPv4.
func parseFileName(n string) (netip.Addr, bool) {
	a, err := netip.ParseAddr(n)
	if err != nil || a.Zone() != "" {
		return netip.Addr{}, false
	}
	return a.Unmap(), true
}

// checkIDFits refuses an attachment whose reservation would be longer than
// the store reads (only reachable in-process: exec cannot pass such an
// ID).
func checkIDFits(id, ifname string) error {
	if pair, _ := keys(id, ifname); len(pair) > maxContent {
		return cni.NewError(cni.CodeInvalidEnvironment, "containerID is too long",
			fmt.Sprintf("%d bytes; the store holds at most %d per reservation", len(id), maxContent))
	}
	return nil
}

// errTooLarge reports a store file longer than any valid content.
var errTooLarge = errors.New("file too large")

// readFile reads a regular file of the directory without following a
// symlink and without blocking on a FIFO. ok is false for anything that is
// not a regular file; an over-long file is reported as an error.
func (s *store) readFile(name string, limit int) (data []byte, ok bool, err error) {
	var st unix.Stat_t
	if err := unix.Fstatat(s.dirFD, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil, false, &os.PathError{Op: "lstat", Path: s.path(name), Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, false, nil
	}
	fd, err := retryEINTR(func() (int, error) {
		return unix.Openat(s.dirFD, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	})
	if err != nil {
		return nil, false, &os.PathError{Op: "open", Path: s.path(name), Err: err}
	}
	f := os.NewFile(uintptr(fd), s.path(name))
	defer f.Close()
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, false, nil // swapped under us: not a regular file any more
	}
	data, err = io.ReadAll(io.LimitReader(f, int64(limit)+1))
	if err != nil {
		return nil, false, err
	}
	if len(data) > limit {
		return nil, false, fmt.Errorf("%s: %w", s.path(name), errTooLarge)
	}
	return data, true, nil
}

// owner is the whitespace-trimmed content of a reservation file.
type owner struct {
	entry
	content string
	err     error // unreadable regular file
}

// owners reads the top-level regular files named as an IP that keep
// selects (nil: all). Unlike the reference, which reads every file in the
// tree, nothing else can count as a reservation (never "lock",
// "last_reserved_ip.*" or an owner link, never a symlink).
func (s *store) owners(l listing, keep func(entry) bool) []owner {
	var out []owner
	for _, e := range l.ips {
		if keep != nil && !keep(e) {
			continue
		}
		data, ok, err := s.readFile(e.name, maxContent)
		if err == nil && !ok {
			continue
		}
		out = append(out, owner{entry: e, content: strings.TrimSpace(string(data)), err: err})
	}
	return out
}

// keys returns what a file owned by (id, ifname) holds after trimming, in
// the current format and in the legacy one (bare container ID).
func keys(id, ifname string) (pair, legacy string) {
	legacy = strings.TrimSpace(id)
	return legacy + lineBreak + ifname, legacy
}

// mayOwn lists the addresses (id, ifname) may hold: those whose owner
// link names it, and those without a link, whose owner only their content
// tells (ownerLink). A hash match is confirmed by the content too.
func (s *store) mayOwn(l listing, id, ifname string) []owner {
	h := ownerHash(id, ifname)
	return s.owners(l, func(e entry) bool {
		hash, linked := l.owner[e.name]
		return !linked || hash == h
	})
}

// ownedBy lists the addresses held by (id, ifname), including legacy files
// of the bare ID, in name order (the duplicate guard reports the first).
func (s *store) ownedBy(l listing, id, ifname string) []netip.Addr {
	pair, legacy := keys(id, ifname)
	var out []netip.Addr
	for _, o := range s.mayOwn(l, id, ifname) {
		if o.err == nil && (o.content == pair || o.content == legacy) {
			out = append(out, o.addr)
		}
	}
	return out
}

// findByID reports whether (id, ifname) owns any address, falling back to
// legacy files of the bare ID. Call under the lock.
func (s *store) findByID(id, ifname string) (bool, error) {
	l, err := s.scan()
	if err != nil {
		return false, err
	}
	return len(s.ownedBy(l, id, ifname)) > 0, nil
}

// releaseByID removes every file owned by (id, ifname); only when none was
// removed does it remove legacy files of the bare ID (the reference's
// rule). Per-file errors are swallowed so that as much as possible is
// released. Call under the lock.
func (s *store) releaseByID(id, ifname string) error {
	l, err := s.scan()
	if err != nil {
		return err
	}
	pair, legacy := keys(id, ifname)
	owners := s.mayOwn(l, id, ifname)
	found := false
	for _, o := range owners {
		if o.err == nil && o.content == pair && s.remove(l, o.name) == nil {
			found = true
		}
	}
	if !found {
		for _, o := range owners {
			if o.err == nil && o.content == legacy {
				_ = s.remove(l, o.name)
			}
		}
	}
	return nil
}

// releaseAddrs removes the reservations of addrs held by (id, ifname), and
// nothing else: the rollback of an ADD that reserved them. Per-file errors
// are swallowed, as in releaseByID. Call under the lock.
func (s *store) releaseAddrs(id, ifname string, addrs []netip.Addr) error {
	l, err := s.scan()
	if err != nil {
		return err
	}
	pair, _ := keys(id, ifname)
	for _, o := range s.mayOwn(l, id, ifname) {
		if o.err == nil && o.content == pair && slices.Contains(addrs, o.addr) {
			_ = s.remove(l, o.name)
		}
	}
	return nil
}

// remove deletes the reservation file name and its owner link, if any.
// A file already gone is success. The owner link goes first: a process
// killed in between leaves a reservation without a link, which is read as
// any other (ownerLink); the other way round would leave a link that the
// next scan removes anyway.
func (s *store) remove(l listing, name string) error {
	if h, ok := l.owner[name]; ok {
		_ = unix.Unlinkat(s.dirFD, ownerLink(h, name), 0)
	}
	crashpoint.Hit("hostlocal:release:before") // owner link gone
	err := unix.Unlinkat(s.dirFD, name, 0)
	crashpoint.Hit("hostlocal:release:after")
	if err != nil && !errors.Is(err, unix.ENOENT) {
		return &os.PathError{Op: "remove", Path: s.path(name), Err: err}
	}
	return nil
}
