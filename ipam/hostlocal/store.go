package hostlocal

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/nftcni/nftcni/cni"
)

// On-disk format, shared with the reference so that both can run against
// one directory during a rolling replacement (contract/ipam.md §1.7).
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
}

// scan lists the directory. It must run under the lock: it also removes
// our temp files, which exist only while their creator holds the lock, so
// any one found now was left by a killed process.
func (s *store) scan() (listing, error) {
	l := listing{names: map[string]bool{}}
	fd, err := retryEINTR(func() (int, error) {
		return unix.Openat(s.dirFD, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	})
	if err != nil {
		return l, &os.PathError{Op: "open", Path: s.dir, Err: err}
	}
	f := os.NewFile(uintptr(fd), s.dir)
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return l, err
	}
	sort.Strings(names)
	for _, n := range names {
		if strings.HasPrefix(n, tempPrefix) {
			_ = unix.Unlinkat(s.dirFD, n, 0)
			continue
		}
		l.names[n] = true
		if a, ok := parseFileName(n); ok {
			l.ips = append(l.ips, entry{n, a})
		}
	}
	return l, nil
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

// owners reads every top-level regular file named as an IP. Unlike the
// reference, which reads every file in the tree, nothing else can count as
// a reservation (never "lock" or "last_reserved_ip.*", never a symlink).
func (s *store) owners(l listing) []owner {
	var out []owner
	for _, e := range l.ips {
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

// ownedBy lists the addresses held by (id, ifname), including legacy files
// of the bare ID, in name order (the duplicate guard reports the first).
func (s *store) ownedBy(l listing, id, ifname string) []netip.Addr {
	pair, legacy := keys(id, ifname)
	var out []netip.Addr
	for _, o := range s.owners(l) {
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
	pair, legacy := keys(id, ifname)
	var found, foundLegacy bool
	for _, o := range s.owners(l) {
		found = found || (o.err == nil && o.content == pair)
		foundLegacy = foundLegacy || (o.err == nil && o.content == legacy)
	}
	return found || foundLegacy, nil
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
	owners := s.owners(l)
	found := false
	for _, o := range owners {
		if o.err == nil && o.content == pair && unix.Unlinkat(s.dirFD, o.name, 0) == nil {
			found = true
		}
	}
	if !found {
		for _, o := range owners {
			if o.err == nil && o.content == legacy {
				_ = unix.Unlinkat(s.dirFD, o.name, 0)
			}
		}
	}
	return nil
}
